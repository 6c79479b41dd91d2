"""The students' self-check and `grader_cli.py check`: same checks, same exit codes."""
import subprocess
import sys

import pytest

from autograder.release import SELF_CHECK
from tests.conftest import ROOT, SOLUTIONS, TEMPLATE
from tests.corpus import load_corpus, materialize


def check(path):
    return subprocess.run([sys.executable, "grader_cli.py", "check", str(path)], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)


def test_reference_passes_every_public_check():
    proc = check(SOLUTIONS)
    assert proc.returncode == 0, proc.stdout
    assert "8 of 8 public checks passed" in proc.stdout


def test_missing_scaling_fails_with_exit_1(tmp_path):
    case = next(c for c in load_corpus()["bug"] if c.id == "attention-no-scaling")
    proc = check(materialize(case, tmp_path / case.id, SOLUTIONS))
    assert proc.returncode == 1
    assert "FAIL  attention  tutorial 001" in proc.stdout
    assert "7 of 8 public checks passed" in proc.stdout


def test_template_selfcheck_runs_in_the_students_folder():
    proc = subprocess.run([sys.executable, "selfcheck.py"], cwd=TEMPLATE, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1
    assert "not implemented yet" in proc.stdout and "0 of 8 public checks passed" in proc.stdout


def test_selfcheck_holds_no_hidden_grader_and_no_solution():
    text = (TEMPLATE / "selfcheck.py").read_text()
    assert text == SELF_CHECK.read_text()
    for forbidden in ("autograder", "solutions", "BEGIN SOLUTION", "masked_fill", "softmax(", "register_buffer"):
        assert forbidden not in text, forbidden


@pytest.mark.parametrize("path", ["/no/such/submission"])
def test_unreadable_path_exits_2(path):
    assert check(path).returncode == 2
