"""The nbgrader round trip, with the real nbgrader commands on a temporary course.

generate_assignment -> three submissions (correct, buggy, untouched) ->
autograde -> the kit's nbgrader-sync -> nbgrader export lists the hidden
graders' scores.
"""
import csv
import json
import subprocess
import sys
from decimal import Decimal

import pytest

from autograder.grade.engine import grade
from autograder.release import ASSIGNMENT_DIR, NOTEBOOKS, module_cell, nbgrader_env
from autograder.submission.notebooks import notebook_name
from tests.conftest import ROOT, SOLUTIONS

pytestmark = pytest.mark.grading  # every test here grades or starts student processes
CENT = Decimal("0.01")


def nbgrader(course, *args):
    proc = subprocess.run([sys.executable, "-m", "nbgrader", *args, f"--CourseDirectory.root={course}"],
                          cwd=course, capture_output=True, text=True, timeout=600, env=nbgrader_env())
    assert proc.returncode == 0, f"nbgrader {' '.join(args)} failed:\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}"
    return proc


def submit(course, student, code_for, notebooks=NOTEBOOKS):
    """Copy the released notebooks (`notebooks`: module -> its notebook, default the five handed out with no course
    file) into submitted/<student>/mha, with the module cells from `code_for`."""
    dest = course / "submitted" / student / "mha"
    dest.mkdir(parents=True)
    for module, name in notebooks.items():
        nb = json.loads((course / "release" / "mha" / name).read_text())
        code = code_for(module)
        if code is not None:
            module_cell(nb, module)["source"] = code
        (dest / name).write_text(json.dumps(nb))


def source_folder(course, course_file=None):
    """The documented route (docs/instructor/notebooks.md): `grader_cli.py release --nbgrader-source source/mha`,
    run in the course folder, with `--course FILE` where a course file is given; the notebooks it wrote, sorted."""
    given = ["--course", str(course_file)] if course_file is not None else []
    proc = subprocess.run([sys.executable, str(ROOT / "grader_cli.py"), "release", "--nbgrader-source", "source/mha",
                           *given], cwd=course, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return sorted(p.name for p in (course / "source" / "mha").iterdir())


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    course = tmp_path_factory.mktemp("course")
    # no course file: the five parts handed out by default, as assignments/mha/ holds them
    assert source_folder(course) == sorted(NOTEBOOKS.values()) == sorted(p.name for p in ASSIGNMENT_DIR.iterdir())
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


def test_the_kits_release_makes_the_student_notebooks_the_nbgrader_command_makes(course):
    """The release runs nbgrader in one process, without two imports (autograder.release.nbgrader_main): its student
    notebooks, student_template/'s, are what `python -m nbgrader generate_assignment` makes of the same sources."""
    from autograder.release import TEMPLATE_DIR, _dump, _load

    for name in NOTEBOOKS.values():
        made = _dump(_load((course["root"] / "release" / "mha" / name).read_text(encoding="utf-8")))
        assert (TEMPLATE_DIR / name).read_text(encoding="utf-8") == made, (
            f"expected student_template/{name} to be what nbgrader generate_assignment makes, got another notebook")


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


# -- a course file that hands out the optional part kvcache (docs/instructor/kvcache.md) ----------------------------
@pytest.fixture(scope="module")
def kvcache_course(tmp_path_factory):
    """The same route under the course file of tests/test_optional_part.py (the five at their worths in the kit,
    and kvcache = 11): its source folder, the released notebooks, the reference (alice) and a planted kvcache bug
    (dave) handed in, autograde, nbgrader-sync --course, export."""
    from tests.corpus import load_corpus, materialize
    from tests.test_optional_part import BUG, KVCACHE_COURSE, PARTS

    course = tmp_path_factory.mktemp("kvcache-course")
    course_file = course / "kvcache.toml"
    course_file.write_bytes(KVCACHE_COURSE.text)
    sources = source_folder(course, course_file)
    nbgrader(course, "generate_assignment", "mha")
    notebooks = {m: notebook_name(m) for m in PARTS}
    bug = materialize(next(c for c in load_corpus()["bug"] if c.id == BUG), tmp_path_factory.mktemp("bug"), SOLUTIONS)
    handed_in = {"alice": SOLUTIONS, "dave": bug}
    for student, folder in handed_in.items():
        submit(course, student, lambda module: (folder / f"{module}.py").read_text(), notebooks)
    (course / "students.csv").write_text("id\n" + "".join(f"{s}\n" for s in handed_in))
    nbgrader(course, "db", "student", "import", "students.csv")
    nbgrader(course, "autograde", "mha")
    sync = subprocess.run([sys.executable, str(ROOT / "grader_cli.py"), "nbgrader-sync", str(course), "--course",
                           str(course_file)], capture_output=True, text=True, timeout=600)
    assert sync.returncode == 0, sync.stdout + sync.stderr
    nbgrader(course, "export")
    with open(course / "grades.csv") as fh:
        rows = {row["student_id"]: row for row in csv.DictReader(fh)}
    return {"sources": sources, "sync": sync.stdout, "grades": rows, "root": course, "handed_in": handed_in,
            "course": KVCACHE_COURSE, "parts": PARTS}


def test_a_course_file_hands_out_its_parts_notebooks_with_its_points(kvcache_course):
    """release --course FILE --nbgrader-source: the six notebooks, kvcache's too, whose task cells add up to 111."""
    assert kvcache_course["sources"] == sorted(notebook_name(m) for m in kvcache_course["parts"])
    points = {}
    for name in kvcache_course["sources"]:
        nb = json.loads((kvcache_course["root"] / "source" / "mha" / name).read_text())
        points.update({c["metadata"]["nbgrader"]["grade_id"]: c["metadata"]["nbgrader"]["points"] for c in nb["cells"]
                       if c.get("metadata", {}).get("nbgrader", {}).get("points") is not None})
    assert points == {f"{m}-hidden-graders": w for m, w in kvcache_course["course"].parts.items()}, points
    assert float(kvcache_course["grades"]["alice"]["max_score"]) == 111 == kvcache_course["course"].total


def test_under_a_course_file_the_gradebook_holds_the_kits_parts_and_points(kvcache_course, warm_servers):
    """Each student's cells in the gradebook, kvcache's among them, are the figures of the kit's own grading of the
    same code (the .py files) under the course file, and the exported total is the kit's: 111 for the reference,
    less for a planted kvcache bug, which costs kvcache points alone."""
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{kvcache_course['root'] / 'gradebook.db'}") as gb:
        cells = {student: {g.name.removesuffix("-hidden-graders"): Decimal(repr(float(g.score))).quantize(CENT)
                           for nb in gb.find_submission("mha", student).notebooks for g in nb.grades
                           if g.name.endswith("-hidden-graders")} for student in kvcache_course["handed_in"]}
    for student, folder in kvcache_course["handed_in"].items():
        report = grade(folder, course=kvcache_course["course"], servers=warm_servers)
        kit = {m: f.score for m, f in report.figures().modules.items()}
        assert cells[student] == kit and list(kit) == list(kvcache_course["parts"]), (student, cells[student], kit)
        total, written = kit_line(kvcache_course["sync"], student)
        assert written == kit and total == Decimal(str(report.score)), (student, written, total, report.score)
        assert Decimal(kvcache_course["grades"][student]["score"]) == total, kvcache_course["grades"][student]
    assert kvcache_course["grades"]["alice"]["score"] in ("111", "111.0"), kvcache_course["grades"]["alice"]
    dave = cells["dave"]
    assert 0 < dave["kvcache"] < 11 and all(dave[m] == cells["alice"][m] for m in dave if m != "kvcache"), dave
