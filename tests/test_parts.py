"""Every part of the kit has its files: the checklist of docs/contributing/parts.md ("Adding a part"), recited.

A part is one folder, parts/<name>/, found from the one list autograder.PARTS. A part that lacks a piece would
otherwise show as a traceback somewhere in the kit (the release, a grading, the corpus); here it is named: the
part, and what of the checklist is missing. `missing_pieces` is the checklist; each requirement is one line of
it, in the order of the docs page.
"""
import json
import re
from pathlib import Path

import pytest

import autograder
from autograder import registry, release
from autograder.submission.notebooks import notebook_name
from tests.conftest import ROOT
from tests.corpus import tomllib  # (Python 3.10: tomli)


def _planted_bugs(text: str) -> set[str]:
    """The modules of the [[bug]] cases of a corpus file's text (none where it is not valid TOML)."""
    try:
        bugs = tomllib.loads(text).get("bug", [])
    except tomllib.TOMLDecodeError:
        return set()
    return {bug.get("module") for bug in bugs if isinstance(bug, dict)}


def missing_pieces(name: str, parts_root: Path = registry.PARTS_DIR, kit: Path = ROOT,
                   optional: bool | None = None) -> list[str]:
    """What part `name` lacks of the checklist, each as a line naming the piece and the file it goes in ([]: it
    has every piece). `parts_root`: the folder of the part folders (the kit's parts/, or a scratch copy);
    `optional`: whether the part is optional (default: as its part.toml says)."""
    folder = parts_root / name
    missing = []
    if not folder.is_dir():
        return [f"its folder parts/{name}/"]
    try:
        part = registry.read(name, parts_root)
    except registry.PartError as exc:
        missing.append(f"a readable part.toml ({exc})")
        part = None
    if part is not None:
        if name in autograder.PARTS and part.notebook != notebook_name(name):
            missing.append(f"part.toml's notebook = {notebook_name(name)!r} (its place in autograder.PARTS), "
                           f"not {part.notebook!r}")
        if name in autograder.PARTS and part.optional != (name in autograder.OPTIONAL):
            missing.append(f"the same optional in part.toml ({part.optional}) and autograder.OPTIONAL "
                           f"({name in autograder.OPTIONAL})")
        optional = part.optional if optional is None else optional
    if not (folder / "__init__.py").is_file():
        missing.append(f"parts/{name}/__init__.py (pytest imports its graders as parts.{name}.test_{name})")

    solution = folder / "solution.py"
    if not solution.is_file():
        missing.append(f"its reference solution, parts/{name}/solution.py")
    else:
        source = solution.read_text(encoding="utf-8")
        if "### BEGIN SOLUTION" not in source:
            missing.append(f"stub markers in parts/{name}/solution.py (### BEGIN SOLUTION ... ### END SOLUTION "
                           f"around the code students write)")
        else:
            try:
                release.render_stub(source, f"parts/{name}/solution.py")
            except ValueError as exc:
                missing.append(f"a stub the release can render ({exc})")

    notebook = folder / "notebook.ipynb"
    if not notebook.is_file():
        missing.append(f"its source notebook, parts/{name}/notebook.ipynb")
    else:
        try:
            cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
        except (ValueError, KeyError) as exc:
            cells = []
            missing.append(f"a readable notebook in parts/{name}/notebook.ipynb ({exc})")
        ids = {c.get("metadata", {}).get("nbgrader", {}).get("grade_id") for c in cells}
        for cell, what in ((f"{name}-code", "the module cell students fill in"),
                           (f"{name}-hidden-graders", "the task cell that states the points")):
            if cell not in ids:
                missing.append(f"the nbgrader cell {cell} ({what}) in parts/{name}/notebook.ipynb")
        if cells and not any(release.is_check_cell(c) for c in cells):
            missing.append(f"public check cells (code cells with a grade_id check-...) in parts/{name}/notebook.ipynb")

    graders = folder / f"test_{name}.py"
    if not graders.is_file():
        missing.append(f"its hidden graders, parts/{name}/test_{name}.py")
    else:
        try:
            points = release.file_points(graders)
        except (ValueError, SyntaxError) as exc:
            missing.append(f"graders whose points the release can read ({exc})")
        else:
            if not points.checks:
                missing.append(f"graders with points: no test in parts/{name}/test_{name}.py carries @points(...)")
        text = graders.read_text(encoding="utf-8")
        if f"from parts.{name} import diagnose" not in text or "diagnose." not in text:
            missing.append(f"graders that name causes: parts/{name}/test_{name}.py imports its diagnoses "
                           f"(from parts.{name} import diagnose) and uses them (checks.with_hint(..., diagnose....))")
    if not (folder / "diagnose.py").is_file():
        missing.append(f"its diagnoses, parts/{name}/diagnose.py (the known mistakes, computed from the reference)")

    checks = folder / "checks.py"
    text = checks.read_text(encoding="utf-8") if checks.is_file() else ""
    if f'@check("{name}",' not in text:
        missing.append(f'public checks in parts/{name}/checks.py (@check("{name}", ...): the release writes them '
                       f'into selfcheck.py)')
    elif notebook.is_file():
        try:
            release.write_check_cells(release._load(notebook.read_text(encoding="utf-8")), name, text)
        except (ValueError, SyntaxError) as exc:  # a check that names no cell, a cell that runs no check, ...
            missing.append(f"check cells written from its checks, each check naming its cell of "
                           f"parts/{name}/notebook.ipynb and each check cell running a check ({exc})")
    corpus = folder / "corpus.toml"
    if name not in _planted_bugs(corpus.read_text(encoding="utf-8") if corpus.is_file() else ""):
        missing.append(f'a corpus case: a planted bug in {name}.py in parts/{name}/corpus.toml ([[bug]] with '
                       f'module = "{name}"; the format: tests/corpus/submissions.toml)')
    if not optional:
        for example in sorted(p for p in (kit / "examples").iterdir() if p.is_dir()):
            if not (example / f"{name}.py").is_file():
                missing.append(f"examples/{example.name}/{name}.py (a part handed out by default is in every "
                               f"example)")
    return missing


@pytest.mark.parametrize("name", autograder.PARTS)
def test_every_part_has_its_files(name):
    missing = missing_pieces(name)
    assert not missing, (f"part {name!r} lacks (docs/contributing/parts.md, \"Adding a part\"):\n  - "
                         + "\n  - ".join(missing))


def test_the_list_of_parts_is_every_folder_and_the_default_parts_are_the_non_optional_ones():
    folders = sorted(p.name for p in registry.PARTS_DIR.iterdir() if (p / "part.toml").is_file())
    assert folders == sorted(autograder.PARTS), (
        f"expected a folder parts/<name>/ for each part of autograder.PARTS and no other, found {folders}")
    assert autograder.MODULES == tuple(p.name for p in registry.parts() if not p.optional)
    assert set(autograder.OPTIONAL) <= set(autograder.PARTS)


def test_the_checklist_names_what_a_scratch_part_lacks(tmp_path):
    """A sixth part begun by copying a folder: each piece left out is named, with the part, and nothing else."""
    import shutil

    shutil.copytree(registry.PARTS_DIR / "masks", tmp_path / "rotary", ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "rotary" / "test_masks.py").rename(tmp_path / "rotary" / "test_rotary.py")
    (tmp_path / "rotary" / "__init__.py").unlink()
    (tmp_path / "rotary" / "diagnose.py").unlink()
    text = (tmp_path / "rotary" / "notebook.ipynb").read_text(encoding="utf-8")
    (tmp_path / "rotary" / "notebook.ipynb").write_text(text.replace('"masks-code"', '"rotary-code"'))
    graders = tmp_path / "rotary" / "test_rotary.py"
    graders.write_text(re.sub(r"@points\([^)]*\)\n", "", graders.read_text(encoding="utf-8")))
    missing = missing_pieces("rotary", tmp_path)
    assert missing == [
        "parts/rotary/__init__.py (pytest imports its graders as parts.rotary.test_rotary)",
        "the nbgrader cell rotary-hidden-graders (the task cell that states the points) in "
        "parts/rotary/notebook.ipynb",
        "graders with points: no test in parts/rotary/test_rotary.py carries @points(...)",
        "graders that name causes: parts/rotary/test_rotary.py imports its diagnoses (from parts.rotary import "
        "diagnose) and uses them (checks.with_hint(..., diagnose....))",
        "its diagnoses, parts/rotary/diagnose.py (the known mistakes, computed from the reference)",
        'public checks in parts/rotary/checks.py (@check("rotary", ...): the release writes them into '
        'selfcheck.py)',
        'a corpus case: a planted bug in rotary.py in parts/rotary/corpus.toml ([[bug]] with module = "rotary"; the '
        'format: tests/corpus/submissions.toml)',
        "examples/buggy-student/rotary.py (a part handed out by default is in every example)",
        "examples/einsum-student/rotary.py (a part handed out by default is in every example)",
    ], missing
    (tmp_path / "rotary" / "solution.py").write_text("def f():\n    return 1\n")
    (tmp_path / "rotary" / "part.toml").write_text('title = "Rotary"\n')
    assert missing_pieces("rotary", tmp_path, optional=True)[:2] == [
        "a readable part.toml (part 'rotary': part.toml has no notebook)",
        "parts/rotary/__init__.py (pytest imports its graders as parts.rotary.test_rotary)"]
    assert "stub markers in parts/rotary/solution.py (### BEGIN SOLUTION ... ### END SOLUTION around the code " \
           "students write)" in missing_pieces("rotary", tmp_path)
    assert missing_pieces("nowhere", tmp_path) == ["its folder parts/nowhere/"]


def test_the_checklist_of_a_kit_part_names_a_file_taken_away(tmp_path):
    """The kit's own part, with its graders gone: named, not a traceback."""
    import shutil

    shutil.copytree(registry.PARTS_DIR / "heads", tmp_path / "heads", ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "heads" / "test_heads.py").unlink()
    assert missing_pieces("heads", tmp_path) == ["its hidden graders, parts/heads/test_heads.py"]


def test_a_part_toml_the_kit_cannot_read_is_refused_naming_the_part_and_key(tmp_path):
    (tmp_path / "rotary").mkdir()
    (tmp_path / "rotary" / "part.toml").write_text('title = "R"\nnotebook = "06_rotary.ipynb"\noptinal = true\n')
    with pytest.raises(registry.PartError, match=r"part 'rotary': part.toml has keys the kit does not read: optinal"):
        registry.read("rotary", tmp_path)
    (tmp_path / "rotary" / "part.toml").write_text('title = "R"\nnotebook = "06_rotary.ipynb"\nneeds = ["mhaa"]\n')
    with pytest.raises(registry.PartError, match=r"needs names \['mhaa'\]"):
        registry.read("rotary", tmp_path)
    with pytest.raises(registry.PartError, match="'rotary' is not a part of the kit"):
        registry.part("rotary")


def test_a_parts_own_public_checks_are_shipped_in_the_selfcheck_only_when_it_is_handed_out():
    """parts/<name>/checks.py is written once: the release puts it into the students' selfcheck.py when the part
    is handed out (kvcache under a course file that lists it), and leaves the self-check as it was otherwise."""
    default = release.selfcheck_text()
    with_kvcache = release.selfcheck_text({**release.grader_points(), **release.grader_points(names=["kvcache"])})
    assert '@check("kvcache"' not in default, "expected no kvcache check in the default self-check"
    own = (registry.PARTS_DIR / "kvcache" / "checks.py").read_text(encoding="utf-8").count('@check("kvcache"')
    assert with_kvcache.count('@check("kvcache"') == own > 0, (
        f"expected the {own} checks of parts/kvcache/checks.py in the self-check when kvcache is handed out")
    compile(with_kvcache, "selfcheck.py", "exec")


def test_the_checklist_names_a_check_with_no_cell_and_a_check_cell_with_no_check(tmp_path):
    """The public checks are written once, in checks.py: each names the notebook cell that runs it (cell=), and
    each check cell of the notebook runs one at least; either missing is named, with the part and the cell."""
    import shutil

    shutil.copytree(registry.PARTS_DIR / "heads", tmp_path / "heads", ignore=shutil.ignore_patterns("__pycache__"))
    checks = tmp_path / "heads" / "checks.py"
    text = checks.read_text(encoding="utf-8")
    checks.write_text(text.replace(', cell="check-value-error"', ""), encoding="utf-8")
    missing = missing_pieces("heads", tmp_path)
    assert len(missing) == 1 and missing[0].startswith(
        "check cells written from its checks, each check naming its cell of parts/heads/notebook.ipynb and each "
        "check cell running a check (part 'heads': the check 'split_heads raises ValueError when num_heads does not "
        "divide d_model; float64 and meta kept' of parts/heads/checks.py names no check cell of 02_heads.ipynb"), missing
    checks.write_text(text.replace('cell="check-value-error"', 'cell="check-shapes-and-inverse"'), encoding="utf-8")
    assert missing_pieces("heads", tmp_path) == [
        "check cells written from its checks, each check naming its cell of parts/heads/notebook.ipynb and each "
        "check cell running a check (part 'heads': the check cell 'check-value-error' of parts/heads/notebook.ipynb "
        "runs no check of parts/heads/checks.py: name it in a check's cell=, or remove the cell)"]
