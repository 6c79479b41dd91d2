"""One fault, one message: a message shared by several checks is shown once, in every format.

Reports are built in memory from TestResult objects: no grading, fast. The
graded cases (a crash in merge_heads met through the MHA, a part's NaN-making
fault inherited by every MHA check) are in tests/test_corpus.py.
"""
from autograder.report.formats import render
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


def test_a_shared_message_is_shown_once_after_the_checks_that_share_it():
    text = report(check("merge", "heads", message=CRASH), check("other", "heads", message="expected 1, got 2"),
                  check("shape", "mha", message=CRASH_THROUGH_MHA),
                  check("values", "mha", message=CRASH_THROUGH_MHA)).to_text()
    assert text.count("view size is not compatible") == 1, text
    lines = text.splitlines()
    first = lines.index("  [heads] check merge  (-25)")
    assert lines[first + 1:first + 3] == ["  [mha] check shape  (-25)", "  [mha] check values  (-25)"], text
    assert lines[first + 3].startswith("      merge_heads(float32 tensor (2, 3, 5, 4)) raised RuntimeError"), text
    assert "(the 3 checks above: one cause)" in text, text


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
    assert "(the 5 checks above: one cause)" in text, text


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
        assert "one cause" in shown, (fmt, shown)
