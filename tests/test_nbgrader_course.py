"""The nbgrader round trip, with the real nbgrader commands on a temporary course.

generate_assignment -> three submissions (correct, buggy, untouched) ->
autograde -> the kit's nbgrader-sync -> nbgrader export lists the hidden
graders' scores.
"""
import csv
import json
import shutil
import subprocess
import sys

import pytest

from autograder.release import ASSIGNMENT_DIR, NOTEBOOKS, module_cell, nbgrader_env
from tests.conftest import ROOT, SOLUTIONS


def nbgrader(course, *args):
    proc = subprocess.run([sys.executable, "-m", "nbgrader", *args, f"--CourseDirectory.root={course}"],
                          cwd=course, capture_output=True, text=True, timeout=600, env=nbgrader_env())
    assert proc.returncode == 0, f"nbgrader {' '.join(args)} failed:\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}"
    return proc


def submit(course, student, code_for):
    """Copy the released notebooks into submitted/<student>/mha, with the module cells from `code_for`."""
    dest = course / "submitted" / student / "mha"
    dest.mkdir(parents=True)
    for module, name in NOTEBOOKS.items():
        nb = json.loads((course / "release" / "mha" / name).read_text())
        code = code_for(module)
        if code is not None:
            module_cell(nb, module)["source"] = code
        (dest / name).write_text(json.dumps(nb))


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    course = tmp_path_factory.mktemp("course")
    shutil.copytree(ASSIGNMENT_DIR, course / "source" / "mha")
    nbgrader(course, "generate_assignment", "mha")
    solution = {m: (SOLUTIONS / f"{m}.py").read_text() for m in NOTEBOOKS}
    buggy = dict(solution, attention=solution["attention"].replace("/ math.sqrt(d_k)", "/ d_k"))
    assert buggy["attention"] != solution["attention"]
    submit(course, "alice", solution.get)  # correct
    submit(course, "bob", buggy.get)  # scales by d_k instead of sqrt(d_k)
    submit(course, "carol", lambda module: None)  # the untouched release
    for student in ("alice", "bob", "carol"):
        nbgrader(course, "db", "student", "add", student)
    nbgrader(course, "autograde", "mha")
    sync = subprocess.run([sys.executable, str(ROOT / "grader_cli.py"), "nbgrader-sync", str(course)],
                          capture_output=True, text=True, timeout=600)
    assert sync.returncode == 0, sync.stderr
    nbgrader(course, "export")
    with open(course / "grades.csv") as fh:
        rows = {row["student_id"]: row for row in csv.DictReader(fh)}
    return {"sync": sync.stdout, "grades": rows}


def test_correct_submission_gets_full_marks_in_the_gradebook(course):
    row = course["grades"]["alice"]
    assert float(row["max_score"]) == 100
    assert float(row["score"]) == 100


def test_buggy_submission_loses_points_in_the_gradebook(course):
    score = float(course["grades"]["bob"]["score"])
    assert 0 < score < 100
    assert "bob: " in course["sync"] and "attention" in course["sync"]


def test_untouched_release_scores_zero_in_the_gradebook(course):
    assert float(course["grades"]["carol"]["score"]) == 0


def test_sync_without_autograde_is_a_clear_error(tmp_path):
    proc = subprocess.run([sys.executable, str(ROOT / "grader_cli.py"), "nbgrader-sync", str(tmp_path)],
                          capture_output=True, text=True)
    assert proc.returncode == 2
    assert "gradebook.db does not exist" in proc.stderr
