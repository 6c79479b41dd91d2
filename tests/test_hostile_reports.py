"""Reports that the student's text cannot forge (issue 12, items 5 and 6).

Every string a submission can influence (its exception messages and their
class names, its printed output, its file and folder names, hence its
submission id and the errors about it) is shown with its control and format
characters escaped, in every format; newlines in a message are kept but
indented, so that no student line starts at column 0 and passes for a line
of the grader's own ("Total: 100/100"); Markdown cannot be broken out of;
and no CSV cell the kit writes is one a spreadsheet would evaluate.

Most tests build GradeReports directly (no grading, fast). Three grade for
real: the corpus cases report-forged-by-escapes (engine.grade) and
report-forged-by-formulas (`grade-all`, in a folder named =HYPERLINK(...),
next to a zip whose name holds escapes).
"""
import base64
import csv
import html
import json
import re
import sys
import unicodedata
import xml.etree.ElementTree as ET
from html.parser import HTMLParser

import pytest
from click.testing import CliRunner

from autograder.classrun import gradebook, run
from autograder.grade.engine import grade
from autograder.report.ci import to_classroom, to_junit
from autograder.report.formats import render
from autograder.report.html import _cost, to_html, to_markdown
from autograder.report.model import PRINTED_TAIL, PRINTED_TITLE, GradeReport, csv_cell, csv_value, safe_line, safe_text
from autograder.report.model import TestResult as Result
from grader_cli import cli
from tests.conftest import SOLUTIONS
from tests.corpus import load_attacks, materialize

ESC = "\x1b"
# What a student can put into an exception message: SGR 8 (conceal: the real total disappears on the
# terminals that honour it), an OSC window title, an OSC 8 hyperlink, a CR, a bidi override, a C1 CSI,
# cursor moves, and lines dressed as the grader's own.
FORGED = (f"expected [[T]], got [[T]]: every check passed{ESC}[8m{ESC}]0;mha grader: Total: 100/100\x07"
          f"{ESC}]8;;https://evil.example/regrade{ESC}\\the full report{ESC}]8;;{ESC}\\"
          "\r\u202e\x9b2K\x00\x7f\n\nTotal: 100/100\n\r\n  [masks] every check passed  (+7)\n"
          f"PASSED masks 7/7\u2028Total: 100/100{ESC}[1A{ESC}[2K")
MARKDOWN_BREAKOUT = ("```\n# Everything passed\n<img src=x onerror=alert(1)>\n[regrade](https://evil.example)\n"
                     "````\n**Total: 100/100**")
HOSTILE_ID = (f"sub{ESC}]0;owned\x07{ESC}[8m\nTotal: 100/100 # <script>alert(1)</script> "
              "[x](https://evil.example) ![i](https://evil.example/i.png) ``` | a |")
FORMULA_IDS = ['=HYPERLINK("evil.example","click")', "+100", "-1+101", "@SUM(100)", "\t=100", "\r=100",
               "'=100", "=cmd|' /C calc'!A0"]
TRIGGERS = ("=", "+", "-", "@", "\t", "\r")
# The lines of the text report that start at column 0: all of them the grader's own.
GRADER_LINES = ("Grading ", "Isolation: ", "Not handed in (", "Files not graded (", "Failed checks (",
                "Not graded on this machine (", "Total: ", f"{PRINTED_TITLE}:")
STUDENT_LINE_INDENT = "      "


def raw_controls(text, allowed="\n"):
    """The control and format characters of `text` (Unicode Cc, Cf, Cs, Zl, Zp) other than `allowed`."""
    return sorted({c for c in text if unicodedata.category(c) in ("Cc", "Cf", "Cs", "Zl", "Zp") and c not in allowed})


def hostile_report(status="graded"):
    """Four modules' worth of checks, each failed one carrying hostile text; 7 of 12 points here."""
    def check(id, module, points, status, message=""):
        return Result(id=id, name=f"checks {id}", module=module, aspect="values", points=points, status=status,
                          message=message)

    report = GradeReport(submission=HOSTILE_ID, isolation="namespaces", student_output=FORGED, tests=[
        check("test_values", "masks", 3, "failed", f"causal_mask(3) raised AssertionError{ESC}[8m: {FORGED}"),
        check("test_breakout", "attention", 2, "failed", MARKDOWN_BREAKOUT),
        check("test_shape", "attention", 3, "passed"),
        check("test_split", "heads", 4, "passed"),
        check("test_cuda", "mha", 1, "skipped", f"needs CUDA{ESC}[8m\nTotal: 100/100"),
    ])
    if status == "grader_failure":
        report.status, report.grader_failure, report.error = "error", True, f"cannot start: {FORGED}"
    elif status != "graded":
        report.status, report.error = status, f"{FORGED}\n{HOSTILE_ID}"
    return report


# -- the one helper --------------------------------------------------------------------------------
def test_every_control_and_format_character_is_escaped():
    """The escaped set is Unicode's Cc, Cf, Cs, Zl and Zp as this Python knows them (tab and newline kept
    by safe_text, escaped by safe_line): each comes out as a printable ASCII escape."""
    unsafe = [chr(cp) for cp in range(sys.maxunicode + 1)
              if unicodedata.category(chr(cp)) in ("Cc", "Cf", "Cs", "Zl", "Zp") and chr(cp) not in "\t\n"]
    assert len(unsafe) > 300
    text = safe_text("".join(unsafe))
    missed = [f"U+{ord(c):04X}" for c in text if not (c.isascii() and c.isprintable())]
    assert not missed, f"expected every control and format character escaped, these came through: {missed[:20]}"
    assert all(safe_text(c) != c for c in unsafe)
    assert safe_text("a\tb\nc") == "a\tb\nc" and safe_line("a\tb\nc") == "a\\tb\\nc"
    assert safe_text(f"{ESC}[8m\r\u202e\x00\x9b") == "\\x1b[8m\\r\\u202e\\x00\\x9b"
    assert safe_text("one\r\ntwo") == "one\ntwo"  # a Windows line end is one newline


def test_ordinary_text_is_kept_as_it_is():
    """Escape, don't delete, and only what is unsafe: messages stay readable in every language."""
    text = ("expected 0.6741 at index [0, 0], got 0.6258 — é ü ß Ω ✓ 🙂 注意力权重：期望 0.5，得到 0.6。"
            "「多头注意力」 (a < b && c > d) \\x1b 'quoted' \"double\"\n\tsecond line")
    assert safe_text(text) == text
    assert safe_line(text) == text.replace("\n", "\\n").replace("\t", "\\t")
    assert safe_text("a\nb", "  | ") == "a\n  | b"


@pytest.mark.parametrize("value", FORMULA_IDS + ["plain", "", "é=1", " =1", f"{ESC}=1"])
def test_csv_cell_never_starts_a_formula_and_reads_back(value):
    cell = csv_cell(value)
    assert not cell.startswith(TRIGGERS), f"expected {value!r} neutralised, got the cell {cell!r}"
    assert not raw_controls(cell, allowed=""), cell
    assert csv_value(cell) == safe_line(value)  # the ' prefix comes off again; escapes stay escapes
    assert csv_cell(csv_value(cell)) == cell  # rewriting a gradebook read back changes nothing
    if value.startswith(("=", "+", "-", "@", "'")):
        assert cell == "'" + value


# -- every format -----------------------------------------------------------------------------------
@pytest.mark.parametrize("status", ["graded", "timeout", "error", "grader_failure"])
def test_text_report_lines_at_column_0_are_the_graders_own(status):
    report = hostile_report(status)
    text = render(report, "text")
    assert not raw_controls(text), f"expected no raw control characters, got {raw_controls(text)}: {text!r}"
    foreign = [ln for ln in text.splitlines() if ln and not ln[0].isspace() and not ln.startswith(GRADER_LINES)]
    assert not foreign, f"expected only the grader's own lines at column 0, got {foreign}"
    totals = [ln for ln in text.splitlines() if ln.startswith("Total")]
    if status == "grader_failure":
        assert totals == []
    else:
        assert totals == [report.summary_line()], f"expected one Total line, the grader's, got {totals}"
    forged = [ln for ln in text.splitlines() if "Total: 100/100" in ln]
    assert forged and all(ln.index("Total: 100/100") > 0 for ln in forged)  # there, but never at column 0
    assert text.splitlines()[0] == f"Grading {safe_line(HOSTILE_ID)}"
    assert "\\x1b[8m" in text and "\\x1b]0;" in text and "\\u202e" in text  # shown, not deleted


def test_text_report_indents_every_line_of_a_message():
    report = hostile_report()
    text = render(report, "text")
    message = safe_text(report.tests[0].message.rstrip("\n"))
    block = "\n".join(STUDENT_LINE_INDENT + ln for ln in message.split("\n"))
    assert block in text, f"expected the message with each line indented:\n{block}\nin:\n{text}"


def markdown_tokens(text):
    mistune = pytest.importorskip("mistune")
    return mistune.create_markdown(renderer=None, plugins=["table"])(text)


def walk(tokens):
    for token in tokens:
        yield token
        yield from walk(token.get("children", []))


def plain(token):
    return "".join(t.get("raw", "") for t in walk([token]) if t["type"] == "text")


@pytest.mark.parametrize("status", ["graded", "error"])
def test_markdown_cannot_be_broken_out_of(status):
    report = hostile_report(status)
    text = to_markdown(report)
    assert not raw_controls(text), raw_controls(text)
    tokens = list(walk(markdown_tokens(text)))
    kinds = {t["type"] for t in tokens}
    assert not kinds & {"inline_html", "block_html", "link", "image"}, \
        f"expected no HTML, link or image from the student's text, got {sorted(kinds)}"
    headings = [plain(t) for t in tokens if t["type"] == "heading"]
    assert headings == [f"Feedback: {safe_line(HOSTILE_ID)}", "What to fix",
                        *[f"{t.module}: {t.name} (-{_cost(report, t)})" for t in report.failed()], PRINTED_TITLE], headings
    code = [t["raw"].rstrip("\n") for t in tokens if t["type"] == "block_code"]
    assert code == [*(safe_text(t.message) for t in report.failed()), safe_text(report.printed())], code  # each whole


def test_html_escapes_markup_and_controls():
    text = to_html(hostile_report("timeout"))
    assert not raw_controls(text), raw_controls(text)
    assert "<script>" not in text and "<img src=x" not in text
    assert "\\x1b[8m" in html.unescape(text)


def test_junit_carries_no_control_characters():
    root = ET.fromstring(to_junit(hostile_report("timeout")).encode())
    for element in root.iter():
        for value in [element.text or "", *element.attrib.values()]:
            assert not raw_controls(value, allowed="\n"), (element.tag, value)
    failure = root.find(".//testcase[@name='test_values']/failure")
    assert "\\x1b[8m" in failure.text


def test_gradescope_output_is_plain_text_with_controls_escaped():
    for status in ("graded", "timeout", "grader_failure"):
        data = json.loads(render(hostile_report(status), "gradescope"))
        assert (data["output_format"], data["test_output_format"], data["test_name_format"]) == ("text",) * 3
        for value in [data["output"], *(t["output"] for t in data["tests"]), *(t["name"] for t in data["tests"])]:
            assert not raw_controls(value), (status, value)
        assert "\\x1b[8m" in data["output"] or status == "graded"


def test_classroom_messages_carry_no_control_characters_and_the_logged_one_is_one_line():
    data = json.loads(base64.b64decode(to_classroom(hostile_report("timeout"))))
    for t in data["tests"]:
        assert not raw_controls(t["message"] + t["name"]), t
    logged = data["tests"][-1]
    assert logged["status"] == "error" and "\n" not in logged["message"] and "\\x1b" in logged["message"]


def test_json_keeps_the_data_and_renders_safely_again():
    """--format json is data (ASCII-escaped JSON): the message as it came back; `render` escapes it again."""
    report = hostile_report()
    text = render(report, "json")
    assert not raw_controls(text, allowed="\n")
    again = GradeReport.from_dict(json.loads(text))
    assert again.tests[0].message == report.tests[0].message and again.submission == HOSTILE_ID
    for fmt in ("text", "markdown", "html", "junit", "gradescope"):
        rendered = render(again, fmt)
        assert rendered == render(report, fmt) and not raw_controls(rendered, allowed="\n\t"), fmt


# -- printed output (issue 13) --------------------------------------------------------------------------
# What the student's code printed is shown in every format, and it is the student's text like any other: it
# can try to end its block, open a heading or print the grader's own lines.
PRINTED_FORGERY = f"Total: 100/100\nFailed checks (0):\n{PRINTED_TITLE}:\n{FORGED}\n\nTotal: 100/100"


def printed_report(output, failed=True):
    tests = [Result("test_values", "checks test_values", "masks", "values", 3, "failed" if failed else "passed",
                    "expected [[T]], got [[.]]" if failed else "")]
    return GradeReport(submission="sub", isolation="namespaces", student_output=output, tests=tests)


class Headings(HTMLParser):
    """The text of every h1, h2 and h3 of an HTML page, in `found`."""

    def __init__(self, text):
        super().__init__()
        self.depth, self.found = 0, []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        if tag in ("h1", "h2", "h3"):
            self.depth += 1
            self.found.append("")

    def handle_endtag(self, tag):
        if tag in ("h1", "h2", "h3"):
            self.depth -= 1

    def handle_data(self, data):
        if self.depth:
            self.found[-1] += data


def test_printed_output_cannot_forge_a_line_of_the_text_report():
    report = printed_report(PRINTED_FORGERY)
    text = render(report, "text")
    assert not raw_controls(text), raw_controls(text)
    foreign = [ln for ln in text.splitlines() if ln and not ln[0].isspace() and not ln.startswith(GRADER_LINES)]
    assert not foreign, f"expected only the grader's own lines at column 0, got {foreign}"
    assert [ln for ln in text.splitlines() if ln.startswith("Total")] == [report.summary_line()]
    assert [ln for ln in text.splitlines() if ln.startswith("Failed checks")] == ["Failed checks (1):"]
    assert [ln for ln in text.splitlines() if ln.startswith(PRINTED_TITLE)] == [f"{PRINTED_TITLE}:"]


def test_printed_output_is_shown_whole_with_each_line_indented_in_the_text_report():
    report = printed_report(PRINTED_FORGERY)
    block = "\n".join(STUDENT_LINE_INDENT + ln for ln in safe_text(report.printed()).split("\n"))
    assert f"{PRINTED_TITLE}:\n{block}\n" in render(report, "text")


@pytest.mark.parametrize("fmt", ["text", "json", "markdown", "html", "gradescope"])
def test_printed_output_is_cut_to_its_last_characters_in_every_format(fmt):
    """Whatever length came in (here 3 times the bound): its end is shown, and no more than the bound."""
    report = printed_report("the start\n" + "A" * (3 * PRINTED_TAIL) + "\nthe end")
    text = render(report, fmt)
    if fmt in ("json", "gradescope"):
        data = json.loads(text)
        text = data["output"] if fmt == "gradescope" else data["student_output"]
    assert "the end" in text and "the start" not in text
    assert max(len(run) for run in re.findall("A+", text)) == PRINTED_TAIL - len("\nthe end")


def test_printed_output_cannot_break_out_of_its_markdown_fence():
    report = printed_report(f"{MARKDOWN_BREAKOUT}\n{HOSTILE_ID}\n``````\n## Every check passed", failed=False)
    tokens = list(walk(markdown_tokens(to_markdown(report))))
    kinds = {t["type"] for t in tokens}
    assert not kinds & {"inline_html", "block_html", "link", "image"}, sorted(kinds)
    assert [plain(t) for t in tokens if t["type"] == "heading"] == ["Feedback: sub", PRINTED_TITLE]
    assert [t["raw"].rstrip("\n") for t in tokens if t["type"] == "block_code"] == [safe_text(report.printed())]


def test_printed_output_is_escaped_in_html():
    output = f"<script>alert(1)</script></pre><h2>Total: 100/100</h2><img src=x onerror=alert(1)>{FORGED}"
    text = to_html(printed_report(output))
    assert not raw_controls(text), raw_controls(text)
    assert "<script>" not in text and "</pre><h2>" not in text and "<img src=x" not in text
    assert html.escape(safe_text(output)) in text  # shown whole, as text
    headings = Headings(text).found
    assert headings[-1] == PRINTED_TITLE and not [h for h in headings if "100/100" in h], headings


def test_printed_output_in_gradescope_is_indented_plain_text():
    report = printed_report(PRINTED_FORGERY)
    output = json.loads(render(report, "gradescope"))["output"]
    assert not raw_controls(output), raw_controls(output)
    lines = output.split("\n")
    start = lines.index(f"{PRINTED_TITLE}:")
    assert lines[start + 1:] and all(ln.startswith("    ") for ln in lines[start + 1:]), lines
    assert [ln for ln in lines if ln.startswith("Total")] == [report.summary_line()], lines


def test_printed_output_is_not_added_to_an_autograder_failure():
    """The student's code never ran (the grader could not start it): Gradescope's output is the failure alone."""
    report = printed_report(PRINTED_FORGERY)
    report.status, report.grader_failure, report.error = "error", True, "cannot start the student process"
    output = report.to_gradescope()["output"]
    assert output.startswith("Autograder failure, not a grade: cannot start the student process"), output
    assert PRINTED_TITLE not in output and "100/100" not in output, output


# -- the gradebook ------------------------------------------------------------------------------------
def read_cells(out):
    with open(out / gradebook.GRADEBOOK, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def test_gradebook_cells_are_neutralised_numbers_kept_and_rows_found_again(tmp_path, monkeypatch):
    """Submission folders named as formulas or holding escapes: every string cell is text to a spreadsheet,
    every number stays a number, and a second run finds every row again (nothing graded twice)."""
    names = ['=HYPERLINK("evil.example","click")', "+100", "-1+101", "@SUM(100)", "\t=100", "\r=100", "'=100",
             f"esc{ESC}]0;owned\x07{ESC}[8m", "line\nbreak", "\u202eevil", "plain"]
    subs = tmp_path / "subs"
    for name in names:
        (subs / name).mkdir(parents=True)
    graded = []

    def fake_grade(path, **kwargs):
        graded.append(path.name)
        return GradeReport(submission=str(path), error="=1+1", tests=[
            Result("t", "t", "masks", "values", 3, "passed"), Result("u", "u", "mha", "values", 1, "failed")])

    monkeypatch.setattr(run, "grade", fake_grade)
    out = tmp_path / "out"
    rows = run.grade_all(subs, out, jobs=2, warm=False)
    assert sorted(graded) == sorted(names) and len(rows) == len(names)
    cells = read_cells(out)
    assert len(cells) == len(names)
    for rec in cells:
        for column in ("id", "status", "isolation", "error"):
            assert not rec[column].startswith(TRIGGERS), f"expected no formula in {column}, got {rec[column]!r}"
            assert not raw_controls(rec[column], allowed=""), rec[column]
        assert rec["total"] == "75" and rec["masks"] == "75" and rec["mha"] == "0"  # numbers, never prefixed
        assert float(rec["grading_time_s"]) >= 0 and rec["error"] == "'=1+1"
    assert sorted(rec["id"] for rec in cells) == sorted(csv_cell(n) for n in names)
    assert "'=HYPERLINK(\"evil.example\",\"click\")" in {rec["id"] for rec in cells}

    graded.clear()
    again = run.grade_all(subs, out, jobs=2, warm=False)
    assert graded == [], f"expected a second run to find every row again, it graded {graded}"
    assert sorted(again) == sorted(gradebook.row_key(n) for n in names)
    assert read_cells(out) == cells  # read back and rewritten: the same cells, no ' added twice


# -- graded for real ------------------------------------------------------------------------------------
ATTACKS = {c.id: c for c in load_attacks()}


@pytest.fixture(scope="module")
def forged(tmp_path_factory):
    """report-forged-by-escapes, graded once by the engine."""
    case = ATTACKS["report-forged-by-escapes"]
    folder = materialize(case, tmp_path_factory.mktemp("forged") / case.id, SOLUTIONS)
    return grade(folder, call_timeout=10.0)


@pytest.mark.grading
def test_forged_report_earns_nothing_and_renders_as_the_students_text(forged):
    assert forged.status == "graded", forged.error
    earned, available = forged.modules()["masks"]
    assert earned == 0 < available
    assert "ATTACK report-forged-by-escapes" in forged.student_output
    messages = [t.message for t in forged.failed() if t.module == "masks"]
    assert messages and any(ESC in m and "\nTotal: 100/100" in m for m in messages), \
        "expected the attack's escapes in the raw messages (else this test proves nothing)"
    text = render(forged, "text")
    assert not raw_controls(text), raw_controls(text)
    totals = [ln for ln in text.splitlines() if ln.startswith("Total")]
    assert totals == [forged.summary_line()] and forged.score < 100, totals
    foreign = [ln for ln in text.splitlines() if ln and not ln[0].isspace() and not ln.startswith(GRADER_LINES)]
    assert not foreign, foreign
    assert "\\x1b[8m" in text and "\\x1b]8;;https://evil.example" in text
    for fmt in ("markdown", "html", "gradescope", "junit"):
        rendered = render(forged, fmt)
        assert not raw_controls(rendered), (fmt, raw_controls(rendered))
    tokens = list(walk(markdown_tokens(render(forged, "markdown"))))
    assert not {t["type"] for t in tokens} & {"inline_html", "block_html", "link", "image"}
    row = gradebook.Row(forged.submission, forged.score, {m: e for m, (e, _) in forged.modules().items()}, "graded",
                        1.0, forged.failed()[0].message.splitlines()[0], forged.isolation)
    cells = row.as_csv()
    assert not any(raw_controls(v, allowed="") for v in cells.values()), cells


@pytest.mark.grading
def test_grade_all_neutralises_hostile_submission_names(tmp_path):
    """A class with the report-forged-by-formulas case in a folder named =HYPERLINK(...) and an unreadable
    zip whose name holds escapes: the gradebook's cells are text, the terminal gets no raw escape."""
    subs = tmp_path / "class"
    formula = '=HYPERLINK("evil.example","click")'
    materialize(ATTACKS["report-forged-by-formulas"], subs / formula, SOLUTIONS)
    escaped = f"esc{ESC}]0;owned\x07{ESC}[8m.zip"
    (subs / escaped).write_bytes(b"not a zip")
    out = tmp_path / "graded"
    result = CliRunner().invoke(cli, ["grade-all", str(subs), "--output", str(out), "--jobs", "2"],
                                catch_exceptions=False)
    output = result.output
    try:  # click 8.2+ has stderr apart too (and in output)
        output += result.stderr
    except ValueError:
        pass
    assert result.exit_code == 0, output
    assert not raw_controls(output), f"expected no raw escapes on the terminal, got {raw_controls(output)}: {output!r}"
    assert safe_line(escaped) in output  # the error summary names it, escaped
    cells = {csv_value(rec["id"]): rec for rec in read_cells(out)}
    assert sorted(cells) == sorted([formula, safe_line(escaped)])
    book = cells[formula]
    assert book["id"] == "'" + formula, book["id"]
    assert book["status"] == "graded" and 0 < float(book["total"]) < 100 and float(book["masks"]) == 0
    assert not book["total"].startswith("'")
    bad = cells[safe_line(escaped)]
    assert bad["status"] == "empty" and bad["total"] == "0"
    for rec in cells.values():
        for column, value in rec.items():
            assert not value.startswith(TRIGGERS), (column, value)
            assert not raw_controls(value, allowed=""), (column, value)
    assert "\\x1b" in bad["id"] and "\\x1b" in bad["error"]
    for name in ("feedback.md", "feedback.html", "results.json"):
        for sub in (formula, escaped):
            text = (out / sub / name).read_text(encoding="utf-8")
            assert not raw_controls(text, allowed="\n\t"), (sub, name, raw_controls(text, allowed="\n\t"))
    assert (out / formula / "feedback.md").read_text().startswith("# Feedback: \\=HYPERLINK\\(")
    # the class page (issue 38): no raw escape in it, and no cell of class.csv that a spreadsheet evaluates
    page = (out / gradebook.CLASS_PAGE).read_text(encoding="utf-8")
    assert not raw_controls(page, allowed="\n") and "=HYPERLINK(&quot;evil.example&quot;" in page
    with open(out / gradebook.CLASS_CSV, newline="", encoding="utf-8") as fh:
        summary = list(csv.reader(fh))
    for cell in (cell for record in summary for cell in record):
        assert not cell.startswith(TRIGGERS) and not raw_controls(cell, allowed="\n"), cell


# -- a cause shown first, as a heading ---------------------------------------------------------------------
# A student's exception message can hold lines of its own, one of them dressed as a "Likely bug" line: a cause
# shared by several checks is shown first, as a heading (report.model.Entry), and must stay text there too.
HOSTILE_CAUSE = (f"forward() raised RuntimeError: ``` <img src=x onerror=alert(1)> [x](https://evil.example){ESC}[8m\n"
                 "Likely bug: **Total: 100/100** <script>alert(1)</script> [regrade](https://evil.example) | a |"
                 f"{ESC}]0;owned\x07\n{FORGED}")


def hostile_cause_report():
    return GradeReport(submission="s", tests=[
        Result(id=f"test_{i}", name=f"checks {i}", module="mha", aspect="values", points=2, status="failed",
               message=HOSTILE_CAUSE) for i in range(3)])


def test_a_hostile_cause_at_the_head_of_its_checks_stays_text_in_every_format():
    report = hostile_cause_report()
    text = render(report, "text")
    assert not raw_controls(text), raw_controls(text)
    assert not [ln for ln in text.splitlines() if ln and not ln[0].isspace() and not ln.startswith(GRADER_LINES)]
    assert [ln for ln in text.splitlines() if ln.startswith("Total")] == [report.summary_line()]
    tokens = list(walk(markdown_tokens(to_markdown(report))))
    assert not {t["type"] for t in tokens} & {"inline_html", "block_html", "link", "image"}
    headings = [plain(t) for t in tokens if t["type"] == "heading"]
    assert headings == ["Feedback: s", "What to fix", safe_line(HOSTILE_CAUSE.splitlines()[1])], headings  # literal
    page = to_html(report)
    assert not raw_controls(page) and "<script>" not in page and "<img src=x" not in page
    data = json.loads(render(report, "gradescope"))
    for value in [data["output"], *(t["output"] for t in data["tests"])]:
        assert not raw_controls(value), value
    assert [ln for ln in data["output"].splitlines() if not ln.startswith(" ")] == [  # the student's: indented
        report.summary_line(), "", "What to fix (1 cause; under it, the checks it fails):"], data["output"]
    root = ET.fromstring(to_junit(report).encode())
    assert all(not raw_controls(e.get("message", "")) for e in root.iter("failure"))
