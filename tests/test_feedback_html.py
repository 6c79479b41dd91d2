"""The HTML feedback, as a student sees it (issues 13 and 15).

A real feedback page, with pictures, a check name holding `code`, long
unbroken words and printed output, is opened in a headless browser at a
phone's width (390 px) and a desktop's (1280 px); a script in a copy of the
page measures it after it has loaded, with every <details> opened, and writes
what it found into the DOM that the browser dumps. Without a browser
(chromium-headless-shell, chromium or google-chrome) those tests are skipped,
saying so. The tests of the pictures themselves (what is drawn, what is not)
need no browser.
"""
import json
import os
import shutil
import subprocess
from html.parser import HTMLParser

import pytest
import torch

from autograder.graders.common import heatmap
from autograder.report import html as report_html
from autograder.report.html import HEATMAP_MAX_CELLS, to_html
from autograder.report.model import GradeReport
from autograder.report.model import TestResult as Result

BROWSERS = ("chromium-headless-shell", "chromium", "google-chrome", "google-chrome-stable", "chromium-browser")
PHONE, DESKTOP = 390, 1280

# The tutorial-001 worked example as a student who divides by d_k records it, and a masked 4 x 6 one.
TUTORIAL = {"title": "《Self-Attention详解》: weights of q1, q2 over k1, k2", "yours": [[0.3775, 0.6225], [0.5, 0.5]],
            "expected": [[0.3302, 0.6698], [0.5, 0.5]]}
MASKED = {"title": "weights with a mask (first batch item; blocked positions must be 0)",
          "yours": [[0.5, 0.5, 0, 0, 0, 0], [0.2, 0.3, 0.5, 0, 0, 0], [0.1] * 6, [0.25, 0, 0.25, 0, 0.25, 0.25]],
          "expected": [[1, 0, 0, 0, 0, 0], [0.4, 0.6, 0, 0, 0, 0], [0.3, 0.3, 0.4, 0, 0, 0], [0.25] * 4 + [0, 0]]}
LONG_WORD = "weights=" + "0.3775," * 60  # a tensor printed on one line: no space to break at


def check(id, name, status="passed", message="", heatmap=None, module="attention", points=3):
    return Result(id=id, name=name, module=module, aspect="values", points=points, status=status, message=message,
                  data={"heatmap": heatmap} if heatmap else {})


def buggy_report():
    """A submission that scales by d_k: two pictures of failed checks, one of a passed one, the rest plain."""
    return GradeReport(submission="examples/buggy-student-" + "x" * 70, student_output=f"debug: {LONG_WORD}\n" * 3,
                       tests=[
        check("test_worked_example_seed_001", "reproduces 《Self-Attention详解》: b1 = (0.33, 0.67), b2 = (0.50, 0.50)",
              "failed", "《Self-Attention详解》: expected b1, b2 = [(0.3302, 0.6698), (0.5000, 0.5000)], got "
              "[(0.3775, 0.6225), (0.5000, 0.5000)]\nLikely bug: scores divided by d_k instead of sqrt(d_k).",
              TUTORIAL),
        check("test_masked_positions_get_zero_weight", "positions where the mask is False get exactly zero weight",
              "failed", f"mask[0, 0, 1] is False (blocked), so weights[0, 0, 1] should be 0; got {LONG_WORD}",
              MASKED),
        check("test_masked_values_match_reference", "with a mask, output and weights match the reference",
              heatmap=MASKED),
        check("test_stacked_heads", "StackedMultiHeadAttention keeps num_heads independent CausalAttention heads "
              "in `heads`", module="mha", points=2),
        check("test_cuda", "runs on `cuda` and matches the CPU reference", "skipped", "needs CUDA", module="mha"),
    ])


# -- the pictures ------------------------------------------------------------------------------------
def test_an_oversized_answer_is_neither_drawn_nor_scanned(monkeypatch):
    """Issue 15: a (5000, 5000) answer (a stride-0 tensor costs the student nothing) where the check expects
    (2, 2). Its rows are a list that fails the test if anything iterates it: only its length is read."""
    class Untouchable(list):
        def __iter__(self):
            raise AssertionError("the oversized answer was iterated")

        def __getitem__(self, index):
            if isinstance(index, slice) or index:
                raise AssertionError(f"the oversized answer was indexed at {index!r}")
            return super().__getitem__(index)

    row = [0.5] * 5000
    huge = Untouchable([row] * 5000)

    def never(data):
        raise AssertionError("an oversized answer was drawn")

    monkeypatch.setattr(report_html, "_heatmap_png", never)
    report = GradeReport(submission="s", tests=[check("t", "《Self-Attention详解》", "failed", "wrong",
                                                      {**TUTORIAL, "yours": huge})])
    page = to_html(report)
    assert "data:image/png" not in page
    assert "No picture of the attention weights: your weights have shape (5000, 5000), the check expects shape " \
           "(2, 2)." in page


def test_an_answer_of_another_shape_is_not_drawn():
    report = GradeReport(submission="s", tests=[check("t", "《Self-Attention详解》", "failed", "wrong",
                                                      {**TUTORIAL, "yours": [[0.5, 0.5, 0.0]] * 2})])
    page = to_html(report)
    assert "data:image/png" not in page and "your weights have shape (2, 3), the check expects shape (2, 2)" in page


def test_weights_of_another_shape_are_told_by_their_shape_alone():
    """The graders record only the shape of weights unlike the reference's (graders/common.heatmap)."""
    data = heatmap("《Self-Attention详解》", torch.zeros(1, 1).expand(2048, 2048), torch.full((2, 2), 0.5))
    assert "yours" not in data and data["yours_shape"] == [2048, 2048]
    page = to_html(GradeReport(submission="s", tests=[check("t", "《Self-Attention详解》", "passed", "", data)]))
    assert "data:image/png" not in page
    assert "your weights have shape (2048, 2048), the check expects shape (2, 2)" in page


def test_a_recording_larger_than_the_cap_is_not_drawn_even_of_the_expected_shape():
    n = HEATMAP_MAX_CELLS + 1
    square = [[1 / n] * n for _ in range(n)]
    report = GradeReport(submission="s", tests=[check("t", "big", "failed", "wrong",
                                                      {"yours": square, "expected": square})])
    page = to_html(report)
    assert "data:image/png" not in page and f"the weights have {n} x {n} cells, more than the 16 x 16 drawn" in page


def test_a_malformed_recording_is_a_note_not_a_crash():
    report = GradeReport(submission="s", tests=[check("t", "《Self-Attention详解》", "failed", "wrong",
                                                      {**TUTORIAL, "yours": [[0.5, "x"], [0.5, 0.5]]})])
    assert "your weights have something that is not a matrix of numbers" in to_html(report)


@pytest.fixture(scope="module")
def tutorial_figures():
    """The matplotlib figures of the tutorial-001 picture (yours, the reference's), laid out as they are saved."""
    from matplotlib.figure import Figure

    drawn = []
    save = Figure.savefig

    def keep(fig, *args, **kwargs):
        drawn.append(fig)
        return save(fig, *args, **kwargs)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Figure, "savefig", keep)
        report_html._drawn.cache_clear()  # drawn again, whichever test of this process drew it first
        report_html._heatmap_png(TUTORIAL)
    return drawn


def test_the_tutorial_picture_labels_each_cell_with_its_token(tutorial_figures):
    """Integer ticks, one per query row and key column, labelled q1, q2 and k1, k2 (not -0.5 ... 1.5)."""
    assert len(tutorial_figures) == 2
    panels = [fig.axes[0] for fig in tutorial_figures]
    for ax in panels:
        assert list(ax.get_xticks()) == [0, 1] and [t.get_text() for t in ax.get_xticklabels()] == ["k1", "k2"]
        assert list(ax.get_yticks()) == [0, 1] and [t.get_text() for t in ax.get_yticklabels()] == ["q1", "q2"]
    assert [ax.get_title() for ax in panels] == ["yours", "reference"]
    assert [[t.get_text() for t in ax.texts] for ax in panels] == [["0.38", "0.62", "0.50", "0.50"],
                                                                  ["0.33", "0.67", "0.50", "0.50"]]


def test_no_label_runs_into_the_colour_bar_or_off_the_picture(tutorial_figures):
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    for fig in tutorial_figures:
        canvas = FigureCanvasAgg(fig)
        canvas.draw()  # laid out as when it was saved
        renderer = canvas.get_renderer()
        panel, colorbar = (ax.get_tightbbox(renderer) for ax in fig.axes[:2])
        assert panel.x1 <= colorbar.x0, f"the panel ends at {panel.x1}, the colour bar starts at {colorbar.x0}"
        width, height = fig.bbox.width, fig.bbox.height
        for box in (panel, colorbar):  # nothing cut off at the picture's edges
            assert box.x0 >= 0 and box.y0 >= 0 and box.x1 <= width and box.y1 <= height, box


class _Tables(HTMLParser):
    """The tables of a page: each its caption and its rows of cells (header cells and data cells alike)."""

    def __init__(self):
        super().__init__()
        self.tables, self.cell = [], None

    def handle_starttag(self, tag, attrs):
        if tag == "table":
            self.tables.append({"caption": "", "rows": [], "scopes": []})
        elif tag == "caption":
            self.cell = "caption"
        elif tag == "tr" and self.tables:
            self.tables[-1]["rows"].append([])
        elif tag in ("td", "th") and self.tables:
            self.tables[-1]["rows"][-1].append("")
            self.tables[-1]["scopes"].append(dict(attrs).get("scope"))
            self.cell = "cell"

    def handle_endtag(self, tag):
        if tag in ("td", "th", "caption"):
            self.cell = None

    def handle_data(self, data):
        if self.cell == "caption":
            self.tables[-1]["caption"] += data
        elif self.cell == "cell":
            self.tables[-1]["rows"][-1][-1] += data


def test_the_weights_of_a_picture_are_tables_too():
    """A screen reader gets nothing from a picture: its numbers come as tables, with a caption and header cells
    for the keys (columns) and the queries (rows), under the picture."""
    parser = _Tables()
    parser.feed(to_html(GradeReport(submission="s", tests=[check("t", "《Self-Attention详解》", "failed", "wrong",
                                                                 TUTORIAL)])))
    numbers = [t for t in parser.tables if t["caption"]]
    assert [t["caption"] for t in numbers] == ["Your weights (rows: queries, columns: keys)",
                                               "The reference's weights (rows: queries, columns: keys)"]
    assert [t["rows"] for t in numbers] == [[["", "k1", "k2"], ["q1", "0.38", "0.62"], ["q2", "0.50", "0.50"]],
                                            [["", "k1", "k2"], ["q1", "0.33", "0.67"], ["q2", "0.50", "0.50"]]]
    assert numbers[0]["scopes"] == [None, "col", "col", "row", None, None, "row", None, None]


# -- the page, in a browser --------------------------------------------------------------------------
def find_browser():
    """A headless Chromium or Chrome: on PATH, or where Debian's chromium-headless-shell package put it."""
    for name in BROWSERS:
        path = shutil.which(name)
        if path:
            return path
    try:
        listed = subprocess.run(["dpkg", "-L", "chromium-headless-shell"], capture_output=True, text=True,
                                timeout=30).stdout.split()
    except (OSError, subprocess.SubprocessError):
        listed = []
    found = [p for p in listed if "/bin/" in p and os.path.isfile(p) and os.access(p, os.X_OK)]
    return found[0] if found else None


# Run once the page and its pictures have loaded, every <details> opened: what a test asserts, as JSON in an
# attribute of <html> (which changes no layout).
MEASURE = """<script>
addEventListener("load", () => {
  document.querySelectorAll("details").forEach(d => d.open = true);
  const root = document.documentElement, width = innerWidth, wider = [];
  for (const el of document.body.querySelectorAll("*")) {
    const box = el.getBoundingClientRect();
    if (box.width && (box.left < -0.5 || box.right > width + 0.5 || el.scrollWidth > el.clientWidth + 1))
      wider.push(el.tagName + " " + Math.round(box.left) + ".." + Math.round(box.right));
  }
  const heading = el => { for (let e = el; e; e = e.previousElementSibling) if (/^(H3|SPAN)$/.test(e.tagName))
    return e.textContent; return ""; };
  root.dataset.measured = JSON.stringify({
    width, scrollWidth: root.scrollWidth, wider, lang: root.lang,
    viewport: (document.querySelector("meta[name=viewport]") || {}).content || "",
    h1: document.querySelector("h1").textContent,
    headings: [...document.querySelectorAll("h1, h2, h3, summary, li > span")].map(h => h.textContent),
    code: [...document.querySelectorAll("h3 code, li > span code")].map(c => c.textContent),
    passed: [...document.querySelectorAll("details li > span")].map(s => s.textContent),
    images: [...document.images].map(i => ({alt: i.alt, loaded: i.complete && i.naturalWidth > 0,
                                            shown: i.getBoundingClientRect().width,
                                            check: heading(i.closest("figure"))})),
  });
});
</script>"""


class _Measured(HTMLParser):
    def handle_starttag(self, tag, attrs):
        if tag == "html":
            self.found = dict(attrs).get("data-measured")


@pytest.fixture(scope="module")
def browser():
    path = find_browser()
    if path is None:
        pytest.skip(f"no headless browser to render the page with (looked for {', '.join(BROWSERS)} on PATH "
                    "and for Debian's chromium-headless-shell)")
    return path


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    """The buggy report's feedback page, with the measuring script, as a file."""
    path = tmp_path_factory.mktemp("feedback") / "feedback.html"
    path.write_text(to_html(buggy_report()).replace("</body>", MEASURE + "</body>"), encoding="utf-8")
    return path


def measure(browser, page, width, height=900):
    """What the measuring script of `page` (MEASURE) found, in a window `width` x `height` px."""
    command = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
               f"--window-size={width},{height}", "--dump-dom", page.as_uri()]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=120)
    parser = _Measured()
    parser.found = None
    parser.feed(proc.stdout)
    assert parser.found, f"the browser measured nothing (exit {proc.returncode}): {proc.stderr[-2000:]}"
    return json.loads(parser.found)


@pytest.fixture(scope="module")
def phone(browser, page):
    return measure(browser, page, PHONE)


@pytest.fixture(scope="module")
def desktop(browser, page):
    return measure(browser, page, DESKTOP)


def test_the_page_declares_its_language_and_a_viewport_for_phones(phone):
    assert phone["lang"] == "en"
    assert phone["viewport"] == "width=device-width, initial-scale=1"


def test_the_heading_says_what_the_page_is(phone):
    assert phone["h1"] == f"Feedback for {buggy_report().submission}: multi-head attention assignment"


@pytest.mark.parametrize("view", ["phone", "desktop"])
def test_nothing_is_wider_than_the_window(view, request):
    measured = request.getfixturevalue(view)
    assert measured["width"] == {"phone": PHONE, "desktop": DESKTOP}[view]
    assert measured["scrollWidth"] <= measured["width"], f"the page scrolls sideways: {measured}"
    assert measured["wider"] == [], f"expected no element wider than {measured['width']} px: {measured['wider']}"


@pytest.mark.parametrize("view", ["phone", "desktop"])
def test_every_picture_is_shown_within_the_width(view, request):
    measured = request.getfixturevalue(view)
    assert len(measured["images"]) == 6, measured["images"]  # three pictures, each of two panels
    for image in measured["images"]:
        assert image["loaded"] and 0 < image["shown"] <= measured["width"], image
        assert image["shown"] >= 300, image  # each panel near its drawn size (340 px), on a phone too: readable


def test_every_picture_has_an_alt_naming_its_check_and_where_its_numbers_are(phone):
    for image in phone["images"]:
        name = image["check"].split(": ", 1)[1].split(" (-")[0]
        assert image["alt"] in (f"Attention weights for attention: {name}: yours (numbers: the table below)",
                                f"Attention weights for attention: {name}: the reference's (numbers: the table "
                                "below)")


def test_each_picture_sits_with_the_check_it_explains(phone):
    assert [image["check"].split(" (-")[0] for image in phone["images"]] == [  # the heading less its cost
        name for name in ["attention: reproduces 《Self-Attention详解》: b1 = (0.33, 0.67), b2 = (0.50, 0.50)",
                          "attention: positions where the mask is False get exactly zero weight",
                          "attention: with a mask, output and weights match the reference"] for _ in range(2)]


def test_headings_show_code_not_backticks(phone):
    assert not [h for h in phone["headings"] if "`" in h], phone["headings"]
    assert phone["code"] == ["heads"]


def test_passed_checks_are_listed_folded(phone):
    assert phone["passed"] == ["attention: with a mask, output and weights match the reference",
                               "mha: StackedMultiHeadAttention keeps num_heads independent CausalAttention heads in "
                               "heads"]
    assert "Passed checks (2)" in phone["headings"]


def test_printed_output_is_shown(phone):
    assert "Printed output (the last 1500 characters at most)" in phone["headings"]


# -- the fix on the first screen ---------------------------------------------------------------------
# Issue 48: when one fault failed several checks, every check's heading came first and the shared "Likely bug"
# line after the last one: on a phone the fix was below the first screen. The cause now heads its checks. A
# common phone's screen: 390 x 844 CSS px (an iPhone 12 to 14). benchmarks/fix_first.py measures the same on
# every single-fault report of the corpus.
SCREEN = 844

# Run once the page has loaded: where the first "Likely bug:" line is (its top and bottom on the page, in CSS px,
# whatever element holds it), as JSON in an attribute of <html>.
FIRST_CAUSE = """<script>
addEventListener("load", () => {
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  let found = null;
  for (let n = walker.nextNode(); n && !found; n = walker.nextNode()) {
    const at = n.data.indexOf("Likely bug:");
    if (at < 0) continue;
    const end = n.data.indexOf("\\n", at), range = document.createRange();
    range.setStart(n, at);
    range.setEnd(n, end < 0 ? n.data.length : end);
    const rects = [...range.getClientRects()];
    found = {top: Math.min(...rects.map(r => r.top)) + scrollY,
             bottom: Math.max(...rects.map(r => r.bottom)) + scrollY};
  }
  const root = document.documentElement;
  root.dataset.measured = JSON.stringify({cause: found, width: innerWidth, scrollWidth: root.scrollWidth});
});
</script>"""


def first_cause(browser, html, directory, width=PHONE, height=SCREEN):
    """What FIRST_CAUSE finds on the page `html` in a window `width` x `height` px."""
    page = directory / "page.html"
    page.write_text(html.replace("</body>", FIRST_CAUSE + "</body>"), encoding="utf-8")
    return measure(browser, page, width, height)


def graders_checks(module):
    """(id, name, points, aspect) of every check of the graders of `module`, named as a report names them (the
    first paragraph of the docstring, autograder/grade/plugin.py), in the order of the source."""
    import importlib
    import inspect

    graders = importlib.import_module(f"parts.{module}.test_{module}")
    found = []
    for name, fn in inspect.getmembers(graders, inspect.isfunction):
        marks = [m for m in getattr(fn, "pytestmark", []) if m.name == "points"]
        if name.startswith("test_") and marks:
            title = " ".join((fn.__doc__ or name).strip().split("\n\n")[0].split())
            found.append((fn.__code__.co_firstlineno, name, title, marks[0].kwargs))
    return [(name, title, kw["points"], kw["aspect"]) for _, name, title, kw in sorted(found)]


# The longest evidence and fix of one fault the corpus gives (a mask drawn, a fix of three lines on a phone).
EVIDENCE = ("causal_mask(1) is not the lower triangle, diagonal included; causal_mask(4) (✓ may attend, · blocked):"
            "\n    expected   got\n    ✓ · · ·    · ✓ ✓ ✓\n    ✓ ✓ · ·    · · ✓ ✓\n    ✓ ✓ ✓ ·    · · · ✓\n"
            "    ✓ ✓ ✓ ✓    · · · ·")
FIX = ("Likely bug: your MultiHeadAttention has no output projection Wo: create self.Wo = nn.Linear(d_out, d_out) "
       "and return Wo applied to the merged heads (B, T, d_out).")


def one_fault_everywhere(module):
    """A report of one fault that fails every check of `module` (the graders' own checks, with their names), with
    the longest evidence and fix above, a long submission id, and the CUDA checks not graded (the longest total
    line): as far down as a single fault can push its fix."""
    tests = []
    for m in ("attention", "heads", "masks", "mha", "positional"):
        for id, name, points, aspect in graders_checks(m):
            cuda = "cuda" in id
            status = "skipped" if cuda else "failed" if m == module else "passed"
            tests.append(Result(id=id, name=name, module=m, aspect=aspect, points=points, status=status,
                                message="needs CUDA (none on this machine)" if cuda else
                                f"{EVIDENCE}\n{FIX}" if status == "failed" else ""))
    return GradeReport(submission="student-" + "x" * 40, tests=tests, isolation="namespaces")


@pytest.mark.parametrize("module", ["attention", "heads", "masks", "mha", "positional"])
def test_a_fault_that_fails_every_check_of_a_module_shows_its_fix_on_a_phones_first_screen(module, browser, tmp_path):
    report = one_fault_everywhere(module)
    assert len(report.failed()) >= 4, [t.id for t in report.failed()]
    found = first_cause(browser, to_html(report), tmp_path)
    assert found["width"] == PHONE and found["scrollWidth"] <= PHONE, found
    assert found["cause"] and found["cause"]["bottom"] <= SCREEN, (
        f"the fix ends {found['cause']} px down the page, below the first screen ({PHONE} x {SCREEN} px): {found}")
