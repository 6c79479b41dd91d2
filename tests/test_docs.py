"""The kit's documentation: README.md, the front door, and docs/, by reader, built by mkdocs (mkdocs.yml).

The site builds with `mkdocs build --strict`: mkdocs.yml's `validation` settings make a link to a missing page
or heading (anchor), an absolute link and a page left out of the nav a warning, and --strict makes a warning a
failure. README.md is outside docs/, so its links are checked here, against the files and the built site. The
commands the documentation shows are checked against what runs them: every `grader_cli.py` line of a code block
names a command and options of the command line (click's own objects), and every `make` target named is the
Makefile's. (The Slurm lines are run as written by tests/test_slurm.py; CI runs the README's `make test`.)
"""
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
README = ROOT / "README.md"
# Material for MkDocs prints a notice about MkDocs 2.0 at every build unless told not to
ENV = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}


def mkdocs_build(config: Path, site: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(config),
                           "--site-dir", str(site)], cwd=config.parent, capture_output=True, text=True, env=ENV,
                          timeout=300)


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """The documentation built once, strict, into a temporary folder."""
    out = tmp_path_factory.mktemp("site")
    proc = mkdocs_build(ROOT / "mkdocs.yml", out)
    assert proc.returncode == 0, f"mkdocs build --strict failed:\n{proc.stdout}{proc.stderr}"
    return out, proc.stdout + proc.stderr


def test_the_site_builds_strict_with_no_warning(site):
    _, output = site
    warned = [line for line in output.splitlines() if line.startswith(("WARNING", "ERROR"))]
    assert not warned, "\n".join(warned)


def test_a_broken_link_or_anchor_fails_the_build(tmp_path):
    """The validation settings do fail --strict: a copy of the docs with one bad anchor and one bad page."""
    shutil.copytree(DOCS, tmp_path / "docs")
    shutil.copy(ROOT / "mkdocs.yml", tmp_path / "mkdocs.yml")
    page = tmp_path / "docs" / "index.md"
    page.write_text(page.read_text(encoding="utf-8") + "\n[a](student.md#no-such-heading) [b](no-such-page.md)\n",
                    encoding="utf-8")
    proc = mkdocs_build(tmp_path / "mkdocs.yml", tmp_path / "site")
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0, output
    assert "does not contain an anchor '#no-such-heading'" in output, output
    assert "no-such-page.md" in output, output


def _html_page(doc: Path, site_dir: Path) -> Path:
    """Where mkdocs (use_directory_urls: false) writes the page of docs/<doc>: docs/a/b.md as a/b.html."""
    return site_dir / doc.relative_to(DOCS).with_suffix(".html")


def test_the_site_opened_from_disk_links_to_files_that_are_there(site):
    """Opened from disk (file://), a link to a folder shows a listing, not its page: every link of every page
    names a file of the site."""
    import html.parser

    site_dir, _ = site

    class Links(html.parser.HTMLParser):
        def __init__(self):
            super().__init__()
            self.found = []

        def handle_starttag(self, tag, attrs):
            for name, value in attrs:
                if name in ("href", "src") and value and not re.match(r"^([a-z]+:|#|//)", value):
                    self.found.append(value.split("#")[0].split("?")[0])

    broken = []
    pages = sorted(p for p in site_dir.rglob("*.html") if p.name != "404.html")  # the server's, absolute links
    for page in pages:
        parser = Links()
        parser.feed(page.read_text(encoding="utf-8"))
        for link in filter(None, parser.found):
            if not (page.parent / link).is_file():
                broken.append(f"{page.relative_to(site_dir)}: {link}")
    assert len(pages) >= 15 and not broken, broken[:20]


def test_the_home_page_links_to_every_page_of_the_nav():
    import yaml

    config = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    nav = yaml.safe_load(re.search(r"^nav:\n(?:[ #].*\n|\n)*", config, re.M).group(0))["nav"]

    def pages(entries):
        for entry in entries:
            for value in (entry.values() if isinstance(entry, dict) else [entry]):
                yield from (pages(value) if isinstance(value, list) else [value])

    linked = set(_links((DOCS / "index.md").read_text(encoding="utf-8")))
    missing = [p for p in pages(nav) if p != "index.md" and p not in linked]
    assert not missing, f"expected docs/index.md to link to every page of the nav, missing {missing}"


def test_the_docs_speak_of_the_kit_not_of_how_it_was_made():
    words = re.compile(r"\b(the issue|this issue|the issue's|this session|this round)\b", re.I)
    found = [f"{name}: {m.group(0)!r}" for name, text in _documentation() for m in words.finditer(text)]
    assert not found, found


def _links(text: str) -> list[str]:
    """The targets of the Markdown links and images of `text`, outside code."""
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    text = re.sub(r"`[^`\n]*`", "", text)
    return re.findall(r"\]\(([^)\s]+)\)", text)


def test_the_readme_links_to_pages_and_headings_that_are_there(site):
    site_dir, _ = site
    links = [link for link in _links(README.read_text(encoding="utf-8")) if "://" not in link]
    assert len(links) > 10, links
    broken = []
    for link in links:
        path, _, anchor = link.partition("#")
        target = (ROOT / path).resolve()
        if not target.exists():
            broken.append(f"{link}: no such file")
        elif anchor:
            assert target.suffix == ".md" and DOCS in target.parents, link
            html = _html_page(target, site_dir).read_text(encoding="utf-8")
            if f'id="{anchor}"' not in html:
                broken.append(f"{link}: no heading with that anchor")
    assert not broken, "\n".join(broken)


def test_every_page_of_docs_is_in_the_site(site):
    site_dir, _ = site
    pages = sorted(DOCS.rglob("*.md"))
    assert len(pages) >= 15, pages
    missing = [p.relative_to(ROOT).as_posix() for p in pages if not _html_page(p, site_dir).is_file()]
    assert not missing, missing


def _documentation():
    """(name, text) of README.md and of every page of docs/."""
    yield "README.md", README.read_text(encoding="utf-8")
    for page in sorted(DOCS.rglob("*.md")):
        yield page.relative_to(ROOT).as_posix(), page.read_text(encoding="utf-8")


def _code_lines(text: str):
    """The lines of the code blocks of a Markdown text: fenced, or indented by four spaces after a blank line."""
    fenced = re.findall(r"^ *```[^\n]*\n(.*?)^ *```", text, flags=re.S | re.M)
    for block in fenced:
        yield from block.splitlines()
    for block in re.findall(r"(?:^|\n)\n((?:    [^\n]*\n)+)", re.sub(r"^ *```.*?^ *```", "", text, flags=re.S | re.M)):
        yield from (line.strip() for line in block.splitlines())


def _cli_calls():
    """(where, the line, its words after grader_cli.py) of every `grader_cli.py` line of the documentation's code
    blocks, and of its inline code that starts with `grader_cli.py` (the command tables)."""
    for name, text in _documentation():
        inline = re.findall(r"`(grader_cli\.py [^`\n]+)`", text)
        for line in [*_code_lines(text), *inline]:
            if "grader_cli.py" not in line:
                continue
            words = shlex.split(line.replace("[", " ").replace("]", " "), comments=True)
            at = next(i for i, word in enumerate(words) if word.endswith("grader_cli.py"))
            yield name, line.strip(), words[at + 1:]


def test_every_grader_cli_command_shown_has_that_command_and_those_options():
    from autograder.cli import cli

    calls = list(_cli_calls())
    shown = {words[0] for _, _, words in calls if words and not words[0].startswith("-")}
    assert {"grade", "grade-all", "merge", "release", "nbgrader-sync", "gradescope-zip", "render", "bench"} <= shown, (
        shown)
    wrong = []
    for name, line, words in calls:
        if not words or words[0].startswith("-"):
            command, options = cli, words
        elif words[0] in cli.commands:
            command, options = cli.commands[words[0]], words[1:]
        else:
            wrong.append(f"{name}: `{line}`: no command {words[0]!r}")
            continue
        known = {opt for param in command.params for opt in (*param.opts, *param.secondary_opts)} | {"--help"}
        for word in options:
            option = word.split("=", 1)[0]
            if option.startswith("-") and option != "-" and option not in known:
                wrong.append(f"{name}: `{line}`: {command.name or 'grader_cli.py'} has no option {option}")
    assert not wrong, "\n".join(wrong)


def test_the_commands_table_names_every_command_of_the_cli():
    """The instructor's set-up page lists every command `grader_cli.py --help` lists: none is added unseen."""
    from autograder.cli import cli

    table = (DOCS / "instructor" / "setup.md").read_text(encoding="utf-8").split("## Commands", 1)[1]
    listed = set(re.findall(r"^\| `grader_cli\.py ([\w-]+)", table, flags=re.M))
    assert listed == set(cli.commands), (f"expected the commands table of instructor/setup.md to list every command, "
                                         f"missing {sorted(set(cli.commands) - listed)}, "
                                         f"not commands {sorted(listed - set(cli.commands))}")


def test_every_make_target_named_is_the_makefiles():
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    targets = set(re.findall(r"^([a-z][\w-]*):", makefile, re.M))
    named = set()
    for name, text in _documentation():
        shown = [*_code_lines(text), *re.findall(r"`([^`\n]+)`", text)]  # code blocks' lines, inline code
        named |= {(name, words[1]) for words in (line.split() for line in shown)
                  if len(words) > 1 and words[0] == "make" and re.fullmatch(r"[a-z][\w-]*", words[1])}
    assert {"demo", "test", "test-fast", "release", "lock", "docs"} <= {target for _, target in named}, named
    unknown = sorted(f"{name}: make {target}" for name, target in named if target not in targets)
    assert not unknown, unknown


def test_the_readme_fits_two_screens_and_shows_the_two_commands_ci_runs():
    text = README.read_text(encoding="utf-8")
    assert text.count("\n") <= 150
    block = text[text.index("## Quick start"):].split("```bash\n", 1)[1].split("```", 1)[0]
    assert [line.split("#")[0].strip() for line in block.splitlines()] == ["make demo", "make test"]
    assert (ROOT / ".ci" / "run").read_text(encoding="utf-8").rstrip().endswith("\nmake test")


# -- the documented commands, run as typed in a fresh shell (issue 49) ----------------------------------------------
# A new instructor's shell has only the system's PATH: nbgrader, which starts `alembic` by name, failed as the
# docs typed it although the kit's own test passed (it put the venv on PATH). Each block below is taken from its
# page, run by bash under `env -i` with PATH=/usr/bin:/bin, and changed only where the page names a place of the
# reader's: the kit's checkout, its venv (this Python's), the course and the files it writes (a temporary folder).
VENV = Path(sys.prefix)


def _fenced_block(page: str, holding: str) -> str:
    """The fenced code block of docs/`page` that holds `holding`."""
    text = (DOCS / page).read_text(encoding="utf-8")
    blocks = [b for b in re.findall(r"^```[^\n]*\n(.*?)^```", text, flags=re.S | re.M) if holding in b]
    assert len(blocks) == 1, f"expected one code block of docs/{page} with {holding!r}, found {len(blocks)}"
    return blocks[0]


def _as_typed(script: str, cwd: Path, home: Path) -> subprocess.CompletedProcess:
    """Run `script` with bash in a fresh, bare environment: nothing on PATH but the system's programs."""
    home.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(["/usr/bin/env", "-i", "PATH=/usr/bin:/bin", f"HOME={home}", "/bin/bash", "-e", "-o",
                           "pipefail", "-c", script], cwd=cwd, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, (f"exit status {proc.returncode} of:\n{script}\n--- its output:\n"
                                  f"{proc.stdout[-3000:]}{proc.stderr[-3000:]}")
    return proc


def _replaced(text: str, *pairs: tuple[str, str]) -> str:
    for old, new in pairs:
        assert old in text, f"expected {old!r} in the documented commands:\n{text}"
        text = text.replace(old, new)
    return text


@pytest.mark.grading
@pytest.mark.long  # nbgrader's own processes and kernels: minutes on two busy cores
def test_the_nbgrader_block_as_typed_in_a_bare_shell_leaves_a_complete_gradebook(tmp_path):
    import csv
    import sqlite3

    from autograder.release import NOTEBOOKS
    from tests.test_nbgrader_course import submit

    block = _replaced(_fenced_block("instructor/notebooks.md", "nbgrader generate_assignment"),
                      ("KIT=/path/to/kit", f"KIT={shlex.quote(str(ROOT))}"), ("$KIT/.venv/", f"{VENV}/"))
    lines = block.splitlines()
    prelude = lines[:next(i for i, line in enumerate(lines) if line.startswith("cd course")) + 1]
    handed_in = next(i for i, line in enumerate(lines) if line.startswith("# ... students submit"))
    (tmp_path / "course").mkdir()
    _as_typed("\n".join(lines[:handed_in]), tmp_path, tmp_path / "home")
    course = tmp_path / "course"
    solution = {m: (ROOT / "solutions" / f"{m}.py").read_text() for m in NOTEBOOKS}
    submit(course, "alice", solution.get)  # as a student would: the released notebooks, their code cells done
    _as_typed("\n".join([*prelude, *lines[handed_in + 1:]]), tmp_path, tmp_path / "home")
    with sqlite3.connect(course / "gradebook.db") as db:
        tables = {name for (name,) in db.execute("select name from sqlite_master where type='table'")}
        assert "alembic_version" in tables, f"expected the gradebook's alembic_version table, got {sorted(tables)}"
        versions = db.execute("select version_num from alembic_version").fetchall()
    assert len(versions) == 1 and versions[0][0], f"expected one alembic version in the gradebook, got {versions}"
    with open(course / "grades.csv") as fh:
        rows = {row["student_id"]: row for row in csv.DictReader(fh)}
    assert float(rows["alice"]["score"]) == 100, rows


@pytest.mark.grading
def test_the_gradescope_try_out_block_as_typed_in_a_bare_shell_scores_the_reference_100(tmp_path):
    import json

    build = _fenced_block("instructor/gradescope.md", "gradescope-zip")
    trial = _fenced_block("instructor/gradescope.md", "run_autograder")
    script = _replaced(build + trial, (".venv/bin/python", f"{VENV}/bin/python"),
                       ("gradescope-autograder.zip", str(tmp_path / "gradescope-autograder.zip")),
                       ("/tmp/ag", str(tmp_path / "ag")))
    proc = _as_typed(script, ROOT, tmp_path / "home")
    results = json.loads((tmp_path / "ag" / "results" / "results.json").read_text())
    assert results["score"] == 100, proc.stdout[-3000:]


@pytest.mark.grading
def test_the_classroom_commands_as_typed_in_a_bare_shell_write_the_three_reports(tmp_path):
    import base64
    import json
    import xml.etree.ElementTree as ET

    text = (DOCS / "instructor" / "classroom.md").read_text(encoding="utf-8")
    lines = [line.strip() for line in _code_lines(text) if line.strip().startswith(".venv/bin/python grader_cli.py")]
    assert len(lines) == 3, lines
    shutil.copytree(ROOT / "solutions", tmp_path / "sub", ignore=shutil.ignore_patterns("__pycache__"))
    script = _replaced("\n".join(lines), (".venv/bin/python", f"{VENV}/bin/python"), ("sub/", f"{tmp_path}/sub/"),
                       ("report.json", str(tmp_path / "report.json")), ("junit.xml", str(tmp_path / "junit.xml")),
                       ("result.b64", str(tmp_path / "result.b64")))
    _as_typed(script, ROOT, tmp_path / "home")
    assert json.loads((tmp_path / "report.json").read_text())["score"] == 100
    assert ET.parse(tmp_path / "junit.xml").getroot() is not None
    assert json.loads(base64.b64decode((tmp_path / "result.b64").read_text())), "expected the Classroom result"
