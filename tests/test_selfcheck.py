"""The students' self-check and `grader_cli.py check`: same checks, same exit codes."""
import subprocess
import sys

import pytest

from autograder.release import SELF_CHECK
from tests.conftest import ROOT, SOLUTIONS, TEMPLATE
from tests.corpus import load_corpus, materialize

pytestmark = pytest.mark.grading  # every test here grades or starts student processes


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


def _student_folder(tmp_path, edits):
    """The reference modules with `edits` ({module: (old, new)}) and the self-check, as a student has them."""
    import shutil

    folder = tmp_path / "student"
    folder.mkdir()
    for module in ("attention", "heads", "masks", "mha", "positional"):
        text = (SOLUTIONS / f"{module}.py").read_text()
        if module in edits:
            old, new = edits[module]
            assert text.count(old) == 1, old
            text = text.replace(old, new)
        (folder / f"{module}.py").write_text(text)
    shutil.copyfile(TEMPLATE / "selfcheck.py", folder / "selfcheck.py")
    return folder


def test_a_failure_cites_the_students_line_never_the_selfchecks(tmp_path):
    folder = _student_folder(tmp_path, {
        "attention": ("math.sqrt(d_k)", "d_k"),  # runs, wrong result: the function checked is named
        "heads": ("d_k = d_model // num_heads", "d_k = d_model // num_heads // undefined_name"),  # raises
    })
    proc = subprocess.run([sys.executable, "selfcheck.py"], cwd=folder, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1
    assert "selfcheck.py" not in proc.stdout, proc.stdout
    heads = (folder / "heads.py").read_text().splitlines()
    line = next(i for i, text in enumerate(heads, 1) if "undefined_name" in text)
    assert f"(at heads.py, line {line}: d_k = d_model // num_heads // undefined_name" in proc.stdout, proc.stdout
    attention = (folder / "attention.py").read_text().splitlines()
    line = next(i for i, text in enumerate(attention, 1) if text.startswith("def scaled_dot_product_attention"))
    assert f"(see scaled_dot_product_attention at attention.py, line {line})" in proc.stdout, proc.stdout


def test_selfcheck_states_the_graders_points():
    from autograder.release import grader_points

    proc = check(SOLUTIONS)
    points = grader_points()
    assert ("Hidden graders: " + ", ".join(f"{m} {p.points:g}" for m, p in points.items())
            + f" points, {sum(p.points for p in points.values()):g} in all.") in proc.stdout, proc.stdout
