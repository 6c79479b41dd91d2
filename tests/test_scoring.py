"""The reference scores 100, the untouched template 0, and the points add up."""
import json

import pytest

from autograder.engine import GRADERS
from tests.conftest import MODULES

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


def test_points_total_100_including_cuda_checks(reference_report):
    assert sum(t.points for t in reference_report.tests) == 100


def test_only_cuda_checks_are_skipped(reference_report):
    for t in reference_report.skipped():
        assert "CUDA" in t.message and t.max_score == 0 and t.score == 0, t.id


def test_every_result_has_name_tags_and_points(reference_report):
    assert len(reference_report.tests) >= 50
    for t in reference_report.tests:
        assert t.name and t.points > 0
        assert t.module in MODULES and t.aspect in ASPECTS, (t.id, t.tags)


def test_each_grader_file_is_one_module():
    names = sorted(p.stem.removeprefix("test_") for p in GRADERS.glob("test_*.py"))
    assert names == sorted(MODULES)


def test_template_scores_zero(template_report):
    assert template_report.status == "graded", template_report.error
    passed = [t.id for t in template_report.tests if t.status == "passed"]
    assert not passed, f"checks that pass on the untouched stubs: {passed}"
    assert template_report.score == 0


def test_template_failures_name_not_implemented(template_report):
    for t in template_report.failed():
        assert "NotImplementedError" in t.message, (t.id, t.message)
        assert not t.grader_error


def test_template_and_reference_run_the_same_checks(reference_report, template_report):
    assert [t.id for t in reference_report.tests] == [t.id for t in template_report.tests]


def test_gradescope_format(reference_report):
    data = json.loads(reference_report.render("gradescope"))
    assert data["score"] == 100 and data["execution_time"] > 0
    assert "max_score" not in data
    for test in data["tests"]:
        assert set(test) >= {"name", "score", "max_score", "status", "output", "tags", "visibility"}
        assert test["status"] in ("passed", "failed")
        assert test["tags"][0] in MODULES


def test_text_report_lists_modules_and_total(template_report):
    text = template_report.render("text")
    for module in MODULES:
        assert module in text
    assert "Total: 0/100" in text
    assert "raised NotImplementedError" in text


@pytest.mark.parametrize("fmt", ["json"])
def test_json_format_round_trips(reference_report, fmt):
    data = json.loads(reference_report.render(fmt))
    assert data["score"] == 100
    assert sum(m["score"] for m in data["modules"].values()) == data["earned"]
