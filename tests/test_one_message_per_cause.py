"""One fault, one message, the cause first: a message shared by several checks is shown once, before the checks it
failed, in every format (text, Markdown, HTML, Gradescope, JUnit, Classroom).

Reports are built in memory from TestResult objects: no grading, fast. The
graded cases (a crash in merge_heads met through the MHA, a part's NaN-making
fault inherited by every MHA check) are in tests/test_corpus.py.
"""
import json
import xml.etree.ElementTree as ET

import pytest

from autograder.report.ci import classroom_payload
from autograder.report.formats import render
from autograder.report.html import md_inline
from autograder.report.model import NOT_STARTED, GradeReport, cause, entries
from autograder.report.model import TestResult as Result

CRASH = ('merge_heads(float32 tensor (2, 3, 5, 4)) raised RuntimeError: view size is not compatible\n'
         '  File "heads.py", line 53, in merge_heads\n'
         '    return x.transpose(1, 2).view(B, T, H * d_k)')
CRASH_THROUGH_MHA = ('MultiHeadAttention.forward(float32 tensor (2, 5, 3)) in eval mode raised RuntimeError: view size '
                     'is not compatible\n'
                     '  File "mha.py", line 155, in forward\n'
                     '    return self.Wo(merge_heads(context))\n'
                     '  File "heads.py", line 53, in merge_heads\n'
                     '    return x.transpose(1, 2).view(B, T, H * d_k)')
UNSTARTED = ('sinusoidal_encoding(6, 8) raised NotImplementedError\n'
             '  File "positional.py", line 37, in sinusoidal_encoding\n'
             '    raise NotImplementedError()')
FIX = "Likely bug: scores divided by d_k instead of sqrt(d_k)."
BUG_A = f"expected 0.3302 at index [0], got 0.3775\n{FIX}"
BUG_B = f"expected 0.6741 at index [0, 0], got 0.6258 (4 of 4 entries differ)\n{FIX}"
NOTE = "Your MultiHeadAttention is right given its parts; it inherits the fault of your causal_mask (masks.py)."


def check(id, module, status="failed", message="", points=2):
    return Result(id=id, name=f"check {id}", module=module, aspect="values", points=points, status=status,
                  message=message)


def report(*tests):
    return GradeReport(submission="sub", execution_time=1.0, tests=list(tests))


def test_a_crash_met_again_through_another_module_is_one_cause():
    # the call and the frames that led to the line differ; the error and the line that raised it do not
    assert cause(CRASH) == cause(CRASH_THROUGH_MHA)


def test_another_error_on_the_same_line_is_another_cause():
    other = CRASH.replace("view size is not compatible", "shape '[2, 5, 12]' is invalid for input of size 9")
    assert cause(other) != cause(CRASH)


def test_failures_with_the_same_likely_bug_are_one_cause_whatever_numbers_they_show():
    hint = "\nLikely bug: your causal mask blocks the diagonal."
    assert cause("expected 0.1 at index [0], got nan" + hint) == cause("expected 0.7 at index [3], got nan" + hint)


def test_a_shared_message_is_shown_once_before_the_checks_that_share_it():
    text = report(check("merge", "heads", message=CRASH), check("other", "heads", message="expected 1, got 2"),
                  check("shape", "mha", message=CRASH_THROUGH_MHA),
                  check("values", "mha", message=CRASH_THROUGH_MHA)).to_text()
    assert text.count("view size is not compatible") == 1, text
    lines = text.splitlines()
    first = lines.index("  merge_heads(float32 tensor (2, 3, 5, 4)) raised RuntimeError: view size is not compatible")
    assert lines[first + 1:first + 8] == [
        '        File "heads.py", line 53, in merge_heads',
        "          return x.transpose(1, 2).view(B, T, H * d_k)",
        "    It fails these 3 checks (-75 in all):",
        "      [heads] check merge  (-25)", "      [mha] check shape  (-25)", "      [mha] check values  (-25)",
        "  [heads] check other  (-25)"], text


def test_the_likely_bug_comes_first_then_what_came_back_then_the_checks():
    text = report(check("a", "attention", message=BUG_A), check("b", "attention", message=BUG_B),
                  check("c", "attention", status="passed", points=4)).to_text()
    lines = text.splitlines()
    first = lines.index(f"  {FIX}")
    assert lines[first - 1] == "Failed checks (2):", text
    assert lines[first + 1:first + 5] == ["      expected 0.3302 at index [0], got 0.3775",
                                          "    It fails these 2 checks (-50 in all):",
                                          "      [attention] check a  (-25)", "      [attention] check b  (-25)"], text
    one = report(check("a", "attention", message=BUG_A), check("c", "attention", status="passed", points=6)).to_text()
    assert "    It fails this check:\n      [attention] check a  (-25)" in one, one


def test_every_check_keeps_its_own_line_and_cost():
    text = report(check("merge", "heads", message=CRASH), check("shape", "mha", message=CRASH_THROUGH_MHA)).to_text()
    assert "[heads] check merge  (-" in text and "[mha] check shape  (-" in text, text


def test_checks_of_different_causes_each_show_their_message():
    one, two = "expected 1, got 2", "expected 3, got 4"
    shown = [e.message for e in entries([check("a", "mha", message=one), check("b", "mha", message=two)])]
    assert shown == [one, two]


def test_the_same_note_under_several_passed_checks_is_shown_once():
    text = report(*(check(f"c{i}", "mha", status="passed", message=NOTE) for i in range(5))).to_text()
    assert text.count("inherits the fault") == 1, text
    assert f"Passed, with a note (5):\n  {NOTE}\n    It concerns these 5 checks:\n      [mha] check c0\n" in text, text


def test_a_module_whose_every_check_raised_not_implemented_is_one_line_with_its_whole_cost():
    text = report(check("a", "positional", message=UNSTARTED, points=6),
                  check("b", "positional", message="expected ValueError (d_model must be even), got "
                                                    "NotImplementedError", points=8),
                  check("c", "attention", status="passed", points=86)).to_text()
    assert f"[positional] {NOT_STARTED} (2 checks)  (-14)" in text, text
    assert "line 37" not in text and "check a" not in text, text


def test_a_module_with_one_passing_check_is_not_called_not_started():
    tests = [check("a", "positional", message=UNSTARTED), check("b", "positional", status="passed")]
    assert not any(e.module for e in entries(tests[:1], tests))
    assert NOT_STARTED not in report(*tests).to_text()


def test_markdown_and_html_show_a_shared_message_once():
    r = report(check("merge", "heads", message=CRASH), check("shape", "mha", message=CRASH_THROUGH_MHA))
    for fmt in ("markdown", "html"):
        shown = render(r, fmt)
        assert shown.count("view size is not compatible") == 1, (fmt, shown)
        assert "It fails these 2 checks" in shown, (fmt, shown)


def fix_first_report():
    """A fault that fails three checks with one "Likely bug" line, and a check of its own that ran first and names
    no cause (its name, then its message, after the fix)."""
    return report(check("own", "attention", message="expected ValueError, got nothing"),
                  check("a", "attention", message=BUG_A), check("b", "attention", message=BUG_B),
                  check("c", "attention", message=BUG_A.replace("[0]", "[1]")))


@pytest.mark.parametrize("fmt", ["text", "markdown", "html"])
def test_each_listing_shows_the_fix_before_the_checks_it_failed(fmt):
    shown = render(fix_first_report(), fmt)
    fix = shown.index(md_inline(FIX) if fmt == "markdown" else FIX)  # Markdown: as literal text
    # once, with the first check's numbers, then the checks; then the check that names no cause
    assert shown.count(FIX) + shown.count(md_inline(FIX)) == 1 and shown.count("got 0.3775") == 1, shown
    assert fix < shown.index("got 0.3775") < shown.index("check a") < shown.index("check b") < shown.index("check c")
    assert shown.index("check c") < shown.index("check own") < shown.index("expected ValueError"), shown


def test_html_heads_the_cause_with_its_fix():
    shown = render(fix_first_report(), "html")
    assert f"<section class='cause'><h3 class='fix'>{FIX}</h3><pre>expected 0.3302 at index [0], got 0.3775</pre>" \
           "<p>It fails these 3 checks <span class='bad'>(-75 in all)</span>:</p><ul><li><span>attention: check a" \
           in shown, shown


def test_markdown_heads_the_cause_with_its_fix_as_literal_text():
    shown = render(fix_first_report(), "markdown")
    assert f"### {md_inline(FIX)}\n\n```\nexpected 0.3302" in shown, shown
    assert md_inline(FIX) == "Likely bug\\: scores divided by d\\_k instead of sqrt\\(d\\_k\\)\\."
    assert "It fails these 3 checks (-75 in all):\n\n- attention: check a (-25)\n- attention: check b (-25)" in shown


def test_gradescope_says_what_to_fix_first_and_each_check_starts_with_its_cause():
    data = json.loads(render(fix_first_report(), "gradescope"))
    assert data["output"].endswith(f"What to fix (1 cause; under it, the checks it fails):\n  {FIX}\n"
                                   "      attention: check a  (-25)\n      attention: check b  (-25)\n"
                                   "      attention: check c  (-25)"), data["output"]
    outputs = {t["name"]: t["output"] for t in data["tests"]}
    assert outputs["attention: check b"] == f"{FIX}\n{BUG_B.splitlines()[0]}"
    assert outputs["attention: check own"] == "expected ValueError, got nothing"


def test_junit_and_classroom_give_the_cause_first():
    root = ET.fromstring(render(fix_first_report(), "junit").encode())
    failure = root.find(".//testcase[@name='b']/failure")
    assert failure.get("message") == FIX and failure.text.startswith(FIX + "\nexpected 0.6741"), failure.text
    assert root.find(".//testcase[@name='own']/failure").get("message") == "expected ValueError, got nothing"
    messages = {t["name"]: t["message"] for t in classroom_payload(fix_first_report())["tests"]}
    assert messages["attention: check b"].startswith(FIX + "\nexpected 0.6741"), messages


def test_a_cause_that_names_its_fix_comes_before_checks_that_name_none():
    """One fault can fail a check that cannot tell why (a float64 value a float32 constant rounded) next to one
    that names the fix (a tensor made on a fixed device): the fix comes first."""
    r = report(check("own", "attention", message="expected 0.2561, got 0.2561 (1 of 4 entries differ)"),
               check("a", "attention", message=BUG_A), check("b", "attention", status="passed"))
    assert [e.tests[0].id for e in entries(r.failed())] == ["a", "own"]
    text = r.to_text()
    assert text.index(FIX) < text.index("check a") < text.index("check own"), text
