"""Every page the kit writes, and its documentation site, audited for accessibility (issue 49).

axe-core (https://github.com/dequelabs/axe-core, MPL-2.0), the engine behind most accessibility checkers, runs
inside the headless Chromium that tests/test_feedback_html.py already opens the pages with, over each kind of
page the kit writes (a student's feedback page, the class page, the similarity report) and over every page of
the documentation built by mkdocs, at a phone's width (390 px) and a desktop's (1280 px). axe's rules of WCAG 2.0,
2.1 and 2.2, levels A and AA, are run; a violation that axe rates serious or critical fails the test, named by its
rule, the page and the elements (a CSS selector and the start of their markup). Moderate and minor ones are left
to a person's judgement.

axe-core comes from npm, at the exact version and integrity hash of tests/accessibility/package-lock.json:
`npm ci` installs it into tests/accessibility/node_modules (ignored by git) the first time the tests need it.
Without npm, without the network the first time, or without a browser, the tests are skipped, saying why.

Two measurements besides: the similarity report of a class of 11 alike submissions (50 pairs listed) stays
under 20 phone screens (844 px each) at 390 px, each pair's code folded one click away; and text in Chinese
(the tutorials' titles in check names, messages and captions) is marked lang="zh", so that a screen reader reads
it in Chinese.
"""
from __future__ import annotations

import fcntl
import http.server
import json
import shutil
import subprocess
import threading
from html.parser import HTMLParser
from pathlib import Path

import pytest

from autograder.classrun import classpage, gradebook, similarity
from autograder.report.html import to_html
from autograder.report.model import GradeReport
from tests.conftest import ROOT, SOLUTIONS
from tests.corpus.generated import renamed_copy
from tests.test_docs import mkdocs_build
from tests.test_feedback_html import (DESKTOP, PHONE, SCREEN, TUTORIAL, browser, buggy_report,  # noqa: F401
                                      check, graders_checks)

PACKAGE = ROOT / "tests" / "accessibility"  # package.json and package-lock.json: axe-core, pinned
AXE = PACKAGE / "node_modules" / "axe-core" / "axe.min.js"
#: axe's tags of the WCAG 2.0, 2.1 and 2.2 success criteria of levels A and AA
WCAG_AA = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa", "wcag22a", "wcag22aa"]
FAILING = ("serious", "critical")
IMPACTS = ("critical", "serious", "moderate", "minor")


@pytest.fixture(scope="session")
def axe():
    """axe.min.js, installed by `npm ci` from the lock (once: the first worker to get here installs it, under a
    lock, while the others wait); the tests are skipped where npm is missing or cannot install it."""
    lock = json.loads((PACKAGE / "package-lock.json").read_text(encoding="utf-8"))
    pinned = lock["packages"]["node_modules/axe-core"]["version"]

    def installed():
        try:
            return json.loads((AXE.parent / "package.json").read_text(encoding="utf-8"))["version"] == pinned
        except (OSError, ValueError, KeyError):
            return False

    with open(PACKAGE / ".install.lock", "w") as held:  # (ignored by git, as node_modules)
        fcntl.flock(held, fcntl.LOCK_EX)
        if not installed():
            npm = shutil.which("npm")
            if npm is None:
                pytest.skip(f"axe-core {pinned} is not installed in {PACKAGE / 'node_modules'} and there is no npm "
                            "to install it (`npm ci` in tests/accessibility)")
            try:
                proc = subprocess.run([npm, "ci", "--ignore-scripts", "--no-audit", "--no-fund"], cwd=PACKAGE,
                                      capture_output=True, text=True, timeout=300)
            except subprocess.TimeoutExpired:
                pytest.skip(f"`npm ci` in {PACKAGE} did not finish in 300 s (no network?)")
            if proc.returncode != 0 or not installed():
                pytest.skip(f"`npm ci` in {PACKAGE} could not install axe-core {pinned} (no network?): "
                            f"{(proc.stdout + proc.stderr)[-1500:]}")
    return AXE


# Run once the page has loaded, every <details> opened (axe leaves out what is not shown): axe over the whole
# document, WCAG 2.x A and AA rules only; what it found (the
# violations, each with its rule, impact and elements) as JSON in an attribute of <html>.
RUN_AXE = """<script src="{axe}"></script><script>
document.querySelectorAll("details").forEach(d => d.open = true);
axe.run(document, {{runOnly: {{type: "tag", values: {tags}}}, resultTypes: ["violations"]}}).then(found => {{
  document.documentElement.dataset.axe = JSON.stringify(found.violations.map(v => ({{
    rule: v.id, impact: v.impact, help: v.help,
    nodes: v.nodes.map(n => ({{target: n.target.join(" "), html: n.html.slice(0, 160)}}))}})));
}}, failed => {{ document.documentElement.dataset.axe = JSON.stringify({{error: String(failed)}}); }});
</script>"""


class _Attribute(HTMLParser):
    def __init__(self, name):
        super().__init__()
        self.name, self.found = name, None

    def handle_starttag(self, tag, attrs):
        if tag == "html":
            self.found = dict(attrs).get(self.name, self.found)


def run_in_browser(browser, page: str, width: int, attribute: str, height: int = SCREEN):
    """Open the URL `page` in a window `width` x `height` px, let its scripts run (virtual time: up to 30 s of timers,
    as fast as the machine goes), and read back the JSON its script left in <html>'s `attribute`."""
    command = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
               "--virtual-time-budget=30000", f"--window-size={width},{height}", "--dump-dom", page]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=180)
    parser = _Attribute(attribute)
    parser.feed(proc.stdout)
    assert parser.found, f"the browser left no {attribute} in {page} (exit {proc.returncode}): {proc.stderr[-2000:]}"
    return json.loads(parser.found)


def audit(browser, axe, page: Path, width: int, served: tuple | None = None) -> list[dict]:
    """axe's violations of WCAG 2.x A/AA on `page` (a file, left as it is: a copy beside it is audited, with axe
    beside it, so that the page's relative links and styles still load) at `width` px. `served`: (the folder a web
    server serves, its URL), for a page to be opened from that server rather than from the disk."""
    audited = page.with_name(f".axe-{width}-{page.name}")
    script = page.with_name(".axe.min.js")
    if not script.exists():
        shutil.copyfile(axe, script)
    html = page.read_text(encoding="utf-8")
    run = RUN_AXE.format(axe=script.name, tags=json.dumps(WCAG_AA))
    at = html.rfind("</body>")
    audited.write_text(html[:at] + run + html[at:] if at >= 0 else html + run, encoding="utf-8")
    try:
        if served:
            folder, url = served
            found = run_in_browser(browser, url + "/" + audited.relative_to(folder).as_posix(), width, "data-axe")
        else:
            found = run_in_browser(browser, audited.as_uri(), width, "data-axe")
    finally:
        audited.unlink()
    assert not isinstance(found, dict), f"axe failed on {page}: {found}"
    return found


def serious(found: list[dict], where: str) -> list[str]:
    """One line per serious or critical violation of `found`: the rule, the page, its elements."""
    return [f"{v['impact']} {v['rule']} ({v['help']}) on {where}: {len(v['nodes'])} elements, e.g. "
            + "; ".join(f"{n['target']}: {n['html']}" for n in v["nodes"][:3])
            for v in found if v["impact"] in FAILING]


def by_impact(found: list[dict]) -> dict:
    """{impact: elements in violation}: the figures of an audit."""
    return {impact: sum(len(v["nodes"]) for v in found if v["impact"] == impact) for impact in IMPACTS}


# -- the pages -------------------------------------------------------------------------------------------
def a_class_output(out: Path, size: int = 12) -> Path:
    """A class's output as grade-all writes it (gradebook.csv, each submission's results.json), without grading:
    `size` reports of every check of the graders (their names and points), a few failed with their likely bug, one
    submission empty and one that timed out; then class.html from them, as `grader_cli.py summary` writes it."""
    checks = [(module, name, title, points) for module in ("attention", "heads", "masks", "mha", "positional")
              for name, title, points, _ in graders_checks(module)]
    rows = {}
    for k in range(size):
        sub_id = f"student-{k:02d}"
        tests = []
        for number, (module, name, title, points) in enumerate(checks):
            failed = (number + k) % 7 == 0
            message = ("《Self-Attention详解》: expected b1 = (0.33, 0.67), got (0.38, 0.62)\nLikely bug: scores "
                       "divided by d_k instead of sqrt(d_k)." if failed else "")
            tests.append(check(name, title, "failed" if failed else "passed", message, module=module, points=points))
        report = GradeReport(submission=sub_id, tests=tests)
        folder = gradebook.output_folder(out, sub_id)
        folder.mkdir(parents=True)
        (folder / "results.json").write_text(json.dumps(report.to_gradescope()), encoding="utf-8")
        figures = {m: f for m, (f, _) in report.modules().items()}
        rows[gradebook.row_key(sub_id)] = gradebook.Row(sub_id, report.score, figures, "graded", 1.0, "", "namespaces")
    rows[gradebook.row_key("eve")] = gradebook.Row("eve", 0.0, {m: 0.0 for m in gradebook.MODULES}, "empty", 0.1,
                                                   "no file of the assignment was handed in", "namespaces")
    rows[gradebook.row_key("tim")] = gradebook.Row("tim", None, {}, "timeout", 300.0, "the grading ran out of time",
                                                   "namespaces")
    gradebook.write_gradebook(out, rows)
    page, _ = classpage.write(out)
    return page


def alike_class(folder: Path, size: int) -> Path:
    """A class of `size` submissions that are all the reference with every local renamed (each its own way):
    every pair alike."""
    for k in range(size):
        renamed_copy(SOLUTIONS, folder / f"student-{k:02d}", seed=k)
    return folder


@pytest.fixture(scope="module")
def pages(tmp_path_factory):
    """{kind: the page's file}: one of each kind of page the kit writes."""
    root = tmp_path_factory.mktemp("pages")
    found = {}
    found["feedback"] = root / "feedback" / "feedback.html"
    found["feedback"].parent.mkdir()
    found["feedback"].write_text(to_html(buggy_report()), encoding="utf-8")
    found["class"] = a_class_output(root / "class-out")
    result = similarity.compare(alike_class(root / "alike", 4))  # 6 pairs (the page of 50 pairs: below)
    found["similarity"], _ = similarity.write(result, root / "similarity")
    return found


@pytest.fixture(scope="module")
def alike(tmp_path_factory):
    """The similarity report of a class of 11 alike submissions, every pair listed up to TOP (50)."""
    root = tmp_path_factory.mktemp("alike")
    result = similarity.compare(alike_class(root / "class", 11), max_share=11)
    page, _ = similarity.write(result, root / "out")
    return page


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """The documentation site, built as `make docs` builds it (strict), into a temporary folder, and served from it
    on this machine as a web server would serve it (its 404 page, at the site's root, uses absolute links):
    (the folder, its URL)."""
    out = tmp_path_factory.mktemp("site")
    proc = mkdocs_build(ROOT / "mkdocs.yml", out)
    assert proc.returncode == 0, f"mkdocs build --strict failed:\n{proc.stdout}{proc.stderr}"

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, directory=str(out), **kwargs)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield out, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("width", [PHONE, DESKTOP])
@pytest.mark.parametrize("kind", ["feedback", "class", "similarity"])
def test_every_kind_of_page_has_no_serious_violation(browser, axe, pages, kind, width):  # noqa: F811
    found = audit(browser, axe, pages[kind], width)
    print(f"{kind} at {width} px: {by_impact(found)}: " + ", ".join(f"{v['rule']} {len(v['nodes'])}" for v in found))
    assert not serious(found, f"the {kind} page at {width} px"), "\n".join(serious(found, f"the {kind} page"))


@pytest.mark.long  # 23 pages, each opened in its own browser: one to two minutes
@pytest.mark.parametrize("width", [PHONE, DESKTOP])
def test_every_page_of_the_documentation_has_no_serious_violation(browser, axe, site, width):  # noqa: F811
    failures, totals = [], {impact: 0 for impact in IMPACTS}
    folder, _ = site
    pages = sorted(p for p in folder.rglob("*.html") if not p.name.startswith(".axe-"))
    assert len(pages) > 10, pages
    for page in pages:
        found = audit(browser, axe, page, width, served=site)
        totals = {impact: totals[impact] + n for impact, n in by_impact(found).items()}
        failures += serious(found, f"{page.relative_to(folder)} at {width} px")
    print(f"documentation, {len(pages)} pages at {width} px: {totals}")
    assert not failures, "\n".join(failures)


# -- a phone's screens -----------------------------------------------------------------------------------
# Run once the page has loaded, nothing opened: the page's height; per table row of the class page's checks what a
# reader sees of it (its cells' text as shown: on a phone the labels beside the numbers); the similarity report's
# pairs folded, and the ids of theirs that run over two lines; as JSON in <html>.
LAYOUT = """<script>
addEventListener("load", () => {
  const root = document.documentElement;
  root.dataset.layout = JSON.stringify({
    height: root.scrollHeight, width: innerWidth, scrollWidth: root.scrollWidth,
    rows: [...document.querySelectorAll("table.checks tbody tr")].slice(0, 3).map(
      tr => [...tr.cells].slice(1).map(td => td.innerText.trim())),
    header: [...document.querySelectorAll("table.checks thead th")].map(th => getComputedStyle(th).position),
    folded: [...document.querySelectorAll("ol.pairs > li > details")].filter(d => !d.open).length,
    broken: [...document.querySelectorAll("ol.pairs summary b")].filter(b => b.getClientRects().length > 1)
      .map(b => b.textContent),
  });
});
</script>"""


def layout(browser, page: Path, width: int) -> dict:  # noqa: F811
    """What LAYOUT finds on a copy of `page` at `width` px (a phone's screen high)."""
    copy = page.with_name(f".layout-{width}-{page.name}")
    copy.write_text(page.read_text(encoding="utf-8").replace("</body>", LAYOUT + "</body>"), encoding="utf-8")
    try:
        return run_in_browser(browser, copy.as_uri(), width, "data-layout")
    finally:
        copy.unlink()


def test_the_similarity_report_of_eleven_alike_submissions_is_under_twenty_phone_screens(browser, alike):  # noqa: F811
    """11 submissions, every pair alike: 50 pairs listed (the top), each with its five modules' code side by side.
    All of it on the page made it 250,000 px tall at 390 px (300 screens); the pairs' code is folded, one click
    away."""
    measured = layout(browser, alike, PHONE)
    print(f"the similarity report of 11 alike submissions at {PHONE} px: {measured['height']} px")
    assert measured["folded"] == similarity.TOP, f"expected the {similarity.TOP} pairs listed, folded: {measured}"
    assert measured["scrollWidth"] <= PHONE, measured
    assert measured["height"] < 20 * SCREEN, f"expected under 20 screens of {SCREEN} px: {measured['height']} px"
    assert measured["broken"] == [], f"expected each id on one line (a table's column broke them): {measured['broken']}"


def test_on_a_phone_each_number_of_the_checks_table_carries_its_label(browser, pages):  # noqa: F811
    phone, desktop = (layout(browser, pages["class"], width) for width in (PHONE, DESKTOP))
    assert phone["scrollWidth"] <= PHONE, phone
    for row in phone["rows"]:
        assert [cell.rsplit(" ", 1)[0] for cell in row] == ["passed", "with a note", "failed", "not graded"], row
    for row in desktop["rows"]:  # the header labels them, and stays in sight while the rows scroll
        assert all(cell.isdigit() for cell in row), row
    assert desktop["header"] == ["sticky"] * 5, desktop["header"]


class _Structure(HTMLParser):
    """The landmarks and language marks of a page: <main>s, whether the <h1> is inside one, and the text of
    every element marked lang="zh"."""

    def __init__(self):
        super().__init__()
        self.mains, self.depth, self.h1_in_main, self.open, self.zh = 0, 0, None, [], []

    def handle_starttag(self, tag, attrs):
        if tag == "main":
            self.mains += 1
            self.depth += 1
        if tag == "h1":
            self.h1_in_main = self.depth > 0
        self.open.append((tag, dict(attrs).get("lang")))
        if dict(attrs).get("lang") == "zh":
            self.zh.append("")

    def handle_endtag(self, tag):
        while self.open:
            opened, lang = self.open.pop()
            if opened == "main":
                self.depth -= 1
            if opened == tag:
                break

    def handle_data(self, data):
        if any(lang == "zh" for _, lang in self.open) and self.zh:
            self.zh[-1] += data


@pytest.mark.parametrize("kind", ["feedback", "class", "similarity"])
def test_every_page_has_one_main_landmark_holding_its_content(pages, kind):
    parser = _Structure()
    parser.feed(pages[kind].read_text(encoding="utf-8"))
    assert parser.mains == 1 and parser.h1_in_main, f"expected one <main>, the <h1> in it: {parser.mains}"
    html = pages[kind].read_text(encoding="utf-8")
    assert html.index("<main>") < html.index("<h1>") and html.index("</main>") > html.rindex("</p>")


def test_chinese_titles_are_marked_as_chinese_text_and_nothing_else_is():
    html = to_html(GradeReport(submission="s", tests=[
        check("t", "reproduces 《Self-Attention详解》: b1 = (0.33, 0.67)", "failed",
              "《Self-Attention详解》: expected b1 = (0.33, 0.67)", TUTORIAL)]))
    parser = _Structure()
    parser.feed(html)
    assert parser.zh and set(parser.zh) == {"《Self-Attention详解》"}, parser.zh
    assert 'alt="Attention weights for attention: reproduces 《Self-Attention详解》' in html  # attributes untouched
