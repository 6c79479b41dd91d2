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
from decimal import Decimal

import pytest

from autograder.release import ASSIGNMENT_DIR, NOTEBOOKS, module_cell, nbgrader_env
from tests.conftest import ROOT, SOLUTIONS

pytestmark = pytest.mark.grading  # every test here grades or starts student processes


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
    # the parts handed out with no course file: an optional part's source notebook (kvcache) is left out
    optional = (lambda folder, names: [n for n in names if n.endswith(".ipynb") and n not in NOTEBOOKS.values()])
    shutil.copytree(ASSIGNMENT_DIR, course / "source" / "mha", ignore=optional)
    nbgrader(course, "generate_assignment", "mha")
    solution = {m: (SOLUTIONS / f"{m}.py").read_text() for m in NOTEBOOKS}
    buggy = dict(solution, attention=solution["attention"].replace("/ math.sqrt(d_k)", "/ d_k"))
    assert buggy["attention"] != solution["attention"]
    submit(course, "alice", solution.get)  # correct
    submit(course, "bob", buggy.get)  # scales by d_k instead of sqrt(d_k)
    submit(course, "carol", lambda module: None)  # the untouched release
    (course / "students.csv").write_text("id\nalice\nbob\ncarol\n")  # one nbgrader process, not three
    nbgrader(course, "db", "student", "import", "students.csv")
    nbgrader(course, "autograde", "mha")
    sync = subprocess.run([sys.executable, str(ROOT / "grader_cli.py"), "nbgrader-sync", str(course)],
                          capture_output=True, text=True, timeout=600)
    assert sync.returncode == 0, sync.stderr
    nbgrader(course, "export")
    with open(course / "grades.csv") as fh:
        rows = {row["student_id"]: row for row in csv.DictReader(fh)}
    return {"sync": sync.stdout, "grades": rows, "root": course}


def sync(course, *args):
    return subprocess.run([sys.executable, str(ROOT / "grader_cli.py"), "nbgrader-sync", str(course), *args],
                          capture_output=True, text=True, timeout=600)


def kit_line(output, student):
    """(total, {module: figure}) of `student` as nbgrader-sync printed them."""
    line = next(ln for ln in output.splitlines() if ln.startswith(f"{student}: "))
    total = line.split(": ", 1)[1].split("/")[0]
    modules = line.rsplit("(", 1)[1].rstrip(")")
    return Decimal(total), {m: Decimal(v) for m, v in (part.split() for part in modules.split(", "))}


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
    assert "carol: 0/100 (empty: nothing to grade)" in course["sync"]


def test_the_gradebook_shows_the_kits_figures_exactly(course):
    """Issue 14: `nbgrader export` gave 59.96000000000001 where the kit said 60. Now every module figure is the
    kit's, and the exported total is the kit's total, to the cent, with no float noise."""
    for student in ("alice", "bob", "carol"):
        exported = course["grades"][student]["score"]
        total, modules = kit_line(course["sync"], student)
        assert Decimal(exported) == total, (student, exported, total)
        assert len(exported.split(".")[-1]) <= 2 or "." not in exported, (student, exported)
        assert sum(modules.values()) == total
    bob_total, bob_modules = kit_line(course["sync"], "bob")
    assert bob_total != int(bob_total), "expected a fractional total, else this proves little"
    assert bob_modules["heads"] == 15 and bob_modules["attention"] < 23


def test_a_misspelled_assignment_exits_2_naming_the_known_ones(course):
    proc = sync(course["root"], "--assignment", "mah")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "no assignment 'mah'" in proc.stderr and "it knows: mha" in proc.stderr


def test_one_sync_grades_the_class_through_one_pair_of_warm_servers(course, server_starts, monkeypatch):
    """nbgrader-sync grades as grade-all does: torch imported once for the class, not twice per student; the
    gradebook's totals stay those the fixture's `grader_cli.py nbgrader-sync` wrote."""
    from autograder.integrations.nbgrader_sync import sync_course

    started = server_starts
    monkeypatch.setenv("PATH", nbgrader_env()["PATH"])  # as sync_course sets it: restored after the test
    results = {r.student: r for r in sync_course(course["root"])}
    assert len(started) == 1, f"expected one pair of servers for the three students, got {len(started)}"
    for student in ("alice", "bob", "carol"):
        assert Decimal(str(results[student].gradebook_total)) == Decimal(course["grades"][student]["score"]), (
            student, results[student], course["grades"][student]["score"])
    assert results["carol"].status == "empty", results["carol"]


def test_a_score_set_by_hand_is_kept_unless_overwrite_manual(course, monkeypatch):
    """Issue 14: nbgrader-sync overwrote a score a TA had set by hand."""
    from nbgrader.api import Gradebook

    monkeypatch.setenv("PATH", nbgrader_env()["PATH"])
    db = f"sqlite:///{course['root'] / 'gradebook.db'}"

    def attention_cell(gb):
        nb = gb.find_submission_notebook("01_attention", "mha", "alice")
        return next(g for g in nb.grades if g.name == "attention-hidden-graders")

    with Gradebook(db) as gb:
        attention_cell(gb).manual_score = 20.0  # a TA's mark in formgrader
        gb.db.commit()
    kept = sync(course["root"], "--student", "alice")
    assert kept.returncode == 0, kept.stderr
    assert "kept the score(s) set by hand: attention 20 (the gradebook's total: 97)" in kept.stderr, kept.stderr
    with Gradebook(db) as gb:
        assert attention_cell(gb).manual_score == 20.0
    again = sync(course["root"], "--student", "alice", "--overwrite-manual")
    assert again.returncode == 0 and "kept" not in again.stderr, again.stderr
    with Gradebook(db) as gb:
        assert attention_cell(gb).manual_score == 23.0


def test_sync_without_autograde_is_a_clear_error(tmp_path):
    proc = subprocess.run([sys.executable, str(ROOT / "grader_cli.py"), "nbgrader-sync", str(tmp_path)],
                          capture_output=True, text=True)
    assert proc.returncode == 2
    assert "gradebook.db does not exist" in proc.stderr
