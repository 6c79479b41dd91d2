"""The reference scores 100, the untouched template 0 ("empty": nothing to grade), and the points add up."""
import json
from decimal import Decimal
from types import SimpleNamespace

import pytest
import torch

from autograder.grade.engine import GRADERS, grade
from autograder.report.formats import render
from autograder.scoring import NOT_HANDED_IN, nothing_to_grade
from tests.conftest import MODULES, ROOT
from tests.test_ci_formats import figures_in_every_format

ASPECTS = {"shape", "values", "worked-example", "mask", "device", "dtype", "errors", "structure", "speedup",
           "dropout", "inputs"}


def test_reference_scores_100(reference_report):
    failed = [f"{t.module}/{t.id}: {t.message}" for t in reference_report.failed()]
    assert reference_report.status == "graded", reference_report.error
    assert not failed, "\n".join(failed)
    assert reference_report.score == 100


def test_every_module_has_points(reference_report):
    for module, (earned, available) in reference_report.modules().items():
        assert available > 0, module
        assert earned == available, module


def test_module_maxima_are_the_sums_of_their_checks_cuda_included(reference_report):
    """Issue 14: a module's maximum is the same on every machine (the checks that ran count for the skipped
    CUDA ones), and it is what the nbgrader task cells promise."""
    points = {m: sum(t.points for t in reference_report.tests if t.module == m) for m in MODULES}
    assert points == {"attention": 23, "heads": 15, "masks": 8, "mha": 40, "positional": 14}
    assert {m: top for m, (_, top) in reference_report.modules().items()} == points


def test_points_total_100_including_cuda_checks(reference_report):
    assert sum(t.points for t in reference_report.tests) == 100


def test_only_cuda_checks_are_skipped(reference_report):
    for t in reference_report.skipped():
        assert "CUDA" in t.message and reference_report.check_figures(t) == (0, 0), t.id


def test_every_result_has_name_tags_and_points(reference_report):
    assert len(reference_report.tests) >= 50
    for t in reference_report.tests:
        assert t.name and t.points > 0
        assert t.module in MODULES and t.aspect in ASPECTS, (t.id, t.tags)


def test_each_grader_file_is_one_module():
    """Each part's graders are in its folder (parts/<name>/test_<name>.py), none in the graders' library."""
    from autograder import registry

    assert not list(GRADERS.glob("test_*.py"))
    names = [p.graders.stem.removeprefix("test_") for p in registry.parts() if p.graders.is_file()]
    assert names == list(registry.PARTS)


def test_template_scores_zero(template_report):
    passed = [t.id for t in template_report.tests if t.status == "passed"]
    assert not passed, f"checks that pass on the untouched stubs: {passed}"
    assert template_report.score == 0


def test_the_untouched_template_is_empty_not_a_real_0(template_report):
    """Issue 14: nothing to grade is told apart from work that earns 0: status "empty", and what was found."""
    assert template_report.status == "empty", (template_report.status, template_report.error)
    assert template_report.error == ("no student work found: every function still raises NotImplementedError: "
                                     "the untouched template")
    assert template_report.has_score and template_report.score == 0
    assert "NOTHING TO GRADE" in render(template_report, "text")


def _check(module, status, message):
    return SimpleNamespace(module=module, status=status, message=message, points=1)


def test_nothing_to_grade_needs_every_module_missing_or_a_stub():
    missing = [_check(m, "failed", f"{m}.py is missing from the submission") for m in MODULES]
    stub = [_check(m, "failed", "causal_mask(3) raised NotImplementedError") for m in MODULES]
    cuda = [_check(m, "skipped", "needs CUDA (none on this machine)") for m in MODULES]
    assert nothing_to_grade(missing + cuda).startswith("no module found (looked for the five modules attention.py")
    absent = [_check(m, "failed", NOT_HANDED_IN) for m in MODULES]  # as a grading's checks say it now
    assert nothing_to_grade(absent + cuda).startswith("no module found"), nothing_to_grade(absent + cuda)
    mixed = nothing_to_grade(missing[:2] + stub[2:])
    assert mixed.startswith("attention.py, heads.py not found") and "masks, mha, positional: every" in mixed
    wrong = [_check("masks", "failed", "causal_mask(1): expected [[T]], got [[.]]")]
    assert nothing_to_grade(missing[:4] + wrong) == "", "a wrong answer is work: graded"
    assert nothing_to_grade(missing[:4] + [_check("masks", "passed", "")]) == ""
    assert nothing_to_grade(cuda) == "" and nothing_to_grade([]) == ""


def test_template_failures_name_not_implemented(template_report):
    for t in template_report.failed():
        assert "NotImplementedError" in t.message, (t.id, t.message)
        assert not t.grader_error


def test_template_and_reference_run_the_same_checks(reference_report, template_report):
    assert [t.id for t in reference_report.tests] == [t.id for t in template_report.tests]


def test_gradescope_format(reference_report):
    data = json.loads(render(reference_report, "gradescope"))
    assert data["score"] == 100 and data["execution_time"] > 0
    assert "max_score" not in data
    for test in data["tests"]:
        assert set(test) >= {"name", "score", "max_score", "status", "output", "tags", "visibility"}
        assert test["status"] in ("passed", "failed")
        assert test["tags"][0] in MODULES
    assert sum(Decimal(str(t["score"])) for t in data["tests"]) == 100  # the tests add up to the score
    assert sum(Decimal(str(t["max_score"])) for t in data["tests"]) == 100


def test_text_report_lists_modules_and_total(template_report):
    text = render(template_report, "text")
    for module in MODULES:
        assert module in text
    assert "Total: 0/100 (nothing to grade" in text
    assert "raises NotImplementedError" in text


@pytest.mark.parametrize("fmt", ["json"])
def test_json_format_round_trips(reference_report, fmt):
    data = json.loads(render(reference_report, fmt))
    assert data["score"] == 100 and data["max_score"] == 100
    assert sum(Decimal(str(m["score"])) for m in data["modules"].values()) == Decimal(str(data["score"]))


@pytest.fixture(scope="module")
def buggy_report():
    """The bundled buggy student, graded for real."""
    return grade(ROOT / "examples" / "buggy-student")


@pytest.mark.grading
def test_a_real_grading_shows_the_same_figures_in_every_format(buggy_report):
    """Issue 14: the buggy student's figures agree in the text report, JSON, Gradescope, JUnit, the feedback
    and the gradebook row (the nbgrader gradebook: tests/test_nbgrader_course.py)."""
    assert buggy_report.status == "graded", buggy_report.error
    seen = figures_in_every_format(buggy_report)
    expected = seen["json"]
    assert 0 < expected[0] < 100 and expected[0] == sum(figure for figure, _ in expected[1].values())
    for fmt_name, figures in seen.items():
        assert figures == expected, f"{fmt_name} says {figures}, json says {expected}"


@pytest.mark.grading
@pytest.mark.skipif(torch.cuda.is_available(), reason="the documented example was graded on a machine without CUDA, "
                                                      "whose report says so (its CUDA checks fail on a GPU machine)")
def test_the_documented_example_report_is_what_grading_the_buggy_student_prints(buggy_report):
    """Every line of the documentation's example report (docs/instructor/grading.md; its "..." aside) is a line of
    the real text report."""
    page = (ROOT / "docs" / "instructor" / "grading.md").read_text(encoding="utf-8")
    example = page.split("Example report (the bundled `examples/buggy-student`):", 1)[1].split("```")[1]
    printed = {line.rstrip() for line in render(buggy_report, "text").splitlines()}
    stale = [line for line in example.splitlines()[1:] if line.strip() not in ("", "...")
             and not line.startswith("Isolation: ")  # the level this machine offers
             and line.rstrip() not in printed]
    assert not stale, ("the documented example report is stale: grade examples/buggy-student again and paste what it "
                       "prints; lines it no longer prints:\n" + "\n".join(stale))



def test_a_single_part_handed_in_says_its_own_figure_before_the_total():
    """Issue 48: 03_masks.ipynb graded alone said "Total: 8/100" only; the total line says first what the part
    handed in earned of its own maximum ("8/8 for the part handed in (masks), 8/100"), in every format (they all
    print summary_line). With every module handed in, the line is as before."""
    from autograder.report.model import GradeReport
    from tests.test_ci_formats import result

    points = {"attention": 23, "heads": 15, "masks": 8, "mha": 40, "positional": 14}
    tests = [result(f"test_{m}", module=m, points=p, status="passed" if m in ("masks", "heads") else "failed",
                    message="" if m in ("masks", "heads") else NOT_HANDED_IN) for m, p in points.items()]
    tests[1].status, tests[1].message = "failed", "wrong"  # heads handed in, its check failed
    missing = {m: f"{m}.py" for m in ("attention", "mha", "positional")}
    report = GradeReport(submission="s", tests=tests, missing=missing)
    assert report.summary_line() == "Total: 8/23 for the parts handed in (heads, masks), 8/100"
    for fmt_name in ("text", "markdown", "html"):
        assert "8/23 for the parts handed in (heads, masks), 8/100" in render(report, fmt_name), fmt_name
    report.missing = {m: f"{m}.py" for m in ("attention", "heads", "mha", "positional")}
    tests[1].message = NOT_HANDED_IN
    assert report.summary_line() == "Total: 8/8 for the part handed in (masks), 8/100"
    report.missing = {}
    assert report.summary_line() == "Total: 8/100"
