"""The corpus: every planted bug loses points in its own module, every correct style scores 100.

The cases are data (`tests/corpus/submissions.toml`): each is the reference
solution with a few textual patches. Adding a case is adding one entry.
"""
import pytest

from autograder.engine import grade
from tests.conftest import SOLUTIONS
from tests.corpus import load_corpus, materialize

CORPUS = load_corpus()


def graded(case, tmp_path):
    report = grade(materialize(case, tmp_path / case.id, SOLUTIONS), call_timeout=5.0)
    assert report.status == "graded", report.error
    assert not [t for t in report.tests if t.grader_error], [t.message for t in report.tests if t.grader_error]
    return report


@pytest.mark.parametrize("case", CORPUS["bug"] + CORPUS["hostile"], ids=lambda c: c.id)
def test_planted_bug_loses_points_in_its_own_module_only(case, tmp_path):
    report = graded(case, tmp_path)
    assert report.execution_time < 90, f"{case.id} took {report.execution_time:.0f} s to grade"
    modules = report.modules()
    earned, available = modules[case.module]
    assert earned < available, f"{case.id} ({case.description}) lost no points in {case.module}"
    others = {m: s for m, s in modules.items() if m != case.module and s[0] != s[1]}
    assert not others, f"{case.id} also lost points in {others}"
    for t in report.failed():
        assert t.message, t.id


@pytest.mark.parametrize("case", CORPUS["alternative"], ids=lambda c: c.id)
def test_correct_alternative_style_scores_100(case, tmp_path):
    report = graded(case, tmp_path)
    failed = [f"{t.module}/{t.id}: {t.message}" for t in report.failed()]
    assert not failed, f"{case.id} ({case.description}):\n" + "\n".join(failed)
    assert report.score == 100


def test_corpus_covers_the_required_bugs():
    assert len(CORPUS["bug"]) >= 20
    assert {c.module for c in CORPUS["bug"]} == {"attention", "heads", "masks", "mha", "positional"}
