"""The course file (autograder/course.py): one loader for every command, a bad file refused by its key before
anything is graded, the parts handed out graded at their worths, and no file the kit as it is."""
import csv
import hashlib
import shutil
import zipfile
from decimal import Decimal

import pytest
from click.testing import CliRunner

from autograder import MODULES, cli
from autograder.course import CourseError, load, parse
from autograder.classrun import classpage, fingerprints, gradebook, run
from autograder.grade.engine import grade
from autograder.integrations import gradescope
from autograder.report.model import GradeReport
from autograder.report import model
from autograder.scoring import figures
from tests.conftest import SOLUTIONS
from tests.corpus import load_corpus, materialize

# The issue's course file: positional not handed out, masks worth 16 (twice its 8 in the kit)
ISSUE_COURSE = b"""[parts]          # a part not listed is not handed out
attention = 23
heads = 15
masks = 16       # each check's points scaled by 16/8
mha = 40
"""


@pytest.fixture
def course_file(tmp_path):
    path = tmp_path / "course.toml"
    path.write_bytes(ISSUE_COURSE)
    return path


# -- the loader ----------------------------------------------------------------------------------------------
def test_the_issue_course_file_reads_as_its_parts_and_total():
    course = parse(ISSUE_COURSE, "course.toml")
    assert course.parts == {"attention": 23, "heads": 15, "masks": 16, "mha": 40}
    assert course.total == 94
    assert course.sha256 == hashlib.sha256(ISSUE_COURSE).hexdigest()
    assert course.cuda_counts and not course.speed and not course.time_limits


KIT_WORTH = {"attention": 23, "heads": 15, "masks": 8, "mha": 40, "positional": 14}


def test_the_kit_worths_are_the_graders_markers():
    """The worth a course file's points are scaled against: each part's graders' points, 100 in all."""
    from autograder.release import grader_points

    assert {m: p.points for m, p in grader_points().items()} == KIT_WORTH


BAD = [  # (what the file says, what the error must name)
    (b"[parts]\nattention = 23\nmaks = 16\n", ["[parts]", "'maks'", "did you mean 'masks'"]),
    (b"[parts]\nrotary = 5\n", ["[parts]", "'rotary'", "attention, heads, masks, mha, positional"]),
    (b"[parts]\nmasks = -8\n", ["[parts] masks", "positive", "-8"]),
    (b"[parts]\nmasks = 0\n", ["[parts] masks", "positive"]),
    (b"[parts]\nmasks = \"16\"\n", ["[parts] masks", "must be a number", "str"]),
    (b"[parts]\nmasks = true\n", ["[parts] masks", "must be a number", "bool"]),
    (b"[parts]\nmasks = 1.005\n", ["[parts] masks", "two decimals"]),
    (b"[part]\nmasks = 16\n", ["table 'part'", "did you mean 'parts'"]),
    (b"[speed]\nmin_speedup = 2\n", ["no [parts] table"]),
    (b"[parts]\n", ["[parts] lists no part"]),
    (b"[parts]\nmasks = 8\n[speed]\nmin_speed_up = 2\n", ["[speed]", "'min_speed_up'", "did you mean 'min_speedup'"]),
    (b"[parts]\nmasks = 8\n[speed]\nmax_slowdown = 0\n", ["[speed] max_slowdown", "positive"]),
    (b"[parts]\nkvcache = 11\n[speed]\nkv_min_speed = 5\n", ["[speed]", "'kv_min_speed'",
                                                             "did you mean 'kv_min_speedup'"]),
    (b"[parts]\nkvcache = 11\n[speed]\nkv_min_speedup = -3\n", ["[speed] kv_min_speedup", "positive"]),
    (b"[parts]\nmasks = 8\n[time_limits]\ncall_second = 3\n", ["[time_limits]", "'call_second'"]),
    (b"[parts]\nmasks = 8\n[time_limits]\nsubmission_seconds = \"10m\"\n", ["[time_limits] submission_seconds",
                                                                       "must be a number"]),
    (b"[parts]\nmasks = 8\n[cuda]\ncounts = 1\n", ["[cuda] counts", "true or false"]),
    (b"[parts]\nmasks = 8\n[cuda]\ncount = false\n", ["[cuda]", "'count'", "did you mean 'counts'"]),
    (b"parts = 3\n", ["parts must be a table"]),
    (b"[parts\nmasks = 8\n", ["not valid TOML"]),
]


@pytest.mark.parametrize("text, named", BAD, ids=[f"bad{i}" for i in range(len(BAD))])
def test_a_bad_course_file_is_refused_naming_its_key(text, named):
    with pytest.raises(CourseError) as err:
        parse(text, "course.toml")
    message = str(err.value)
    assert message.startswith("course.toml:"), message
    for word in named:
        assert word in message, f"expected {word!r} in the error, got: {message}"


@pytest.mark.parametrize("command", [["grade", "{sub}"], ["grade-all", "{sub}", "-o", "{out}"],
                                     ["merge", "{out}", "-o", "{out2}"], ["gradescope-zip", "-o", "{out}/z.zip"],
                                     ["release", "-o", "{out}"], ["nbgrader-sync", "{sub}"]])
def test_every_command_refuses_a_misspelt_key_before_anything_runs(tmp_path, monkeypatch, command):
    """Exit 2, the key named, and nothing graded, zipped, released or synced (the library is never called)."""
    from autograder.classrun import merge
    from autograder.grade import engine
    from autograder.integrations import nbgrader_sync

    def never(*args, **kwargs):
        raise AssertionError("a command ran with a course file it should have refused")

    for module, name in ((engine, "grade"), (run, "grade_all"), (run, "plan"), (merge, "merge"),
                         (gradescope, "build_zip"), (nbgrader_sync, "sync_course")):
        monkeypatch.setattr(module, name, never)
    bad = tmp_path / "course.toml"
    bad.write_bytes(b"[parts]\nattention = 23\nmaks = 16\n")
    (tmp_path / "sub").mkdir()
    args = [a.format(sub=tmp_path / "sub", out=tmp_path / "out", out2=tmp_path / "out2") for a in command]
    result = CliRunner().invoke(cli.cli, [*args, "--course", str(bad)])
    assert result.exit_code == 2, result.output
    assert "'maks'" in result.output and "did you mean 'masks'" in result.output, result.output
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


# -- the figures ---------------------------------------------------------------------------------------------
def _tests(failed=()):
    """Checks as the kit's graders mark them (points per check), passed unless their id is in `failed`."""
    out = []
    for module, worth in KIT_WORTH.items():
        for k in range(int(worth)):
            out.append(model.TestResult(f"{module}{k}", f"{module} check {k}", module, "values", 1.0,
                                  "failed" if f"{module}{k}" in failed else "passed"))
    return out


def test_with_no_course_the_figures_are_out_of_100_as_before():
    fig = figures(_tests(failed={"masks0", "masks1"}))
    assert fig.total == Decimal(98) and list(fig.modules) == list(MODULES)
    assert fig.modules["masks"].score == 6 and fig.modules["masks"].max_score == 8


def test_a_course_scales_a_part_to_its_worth_and_leaves_out_the_others():
    parts = {"attention": 23, "heads": 15, "masks": 16, "mha": 40}
    tests = [t for t in _tests(failed={"masks0", "masks1"}) if t.module in parts]
    fig = figures(tests, parts)
    assert list(fig.modules) == list(parts) and fig.max_total == 94
    assert fig.modules["masks"].score == 12 and fig.modules["masks"].max_score == 16  # twice the 2 lost
    assert fig.total == 90


# -- grading under the issue's course file -------------------------------------------------------------------
def _masks_inverted(tmp_path):
    case = next(c for c in load_corpus()["bug"] if c.id == "masks-blocked-polarity")
    return materialize(case, tmp_path / "masks-blocked-polarity", SOLUTIONS)


@pytest.mark.grading
def test_a_class_under_the_issue_course_file(tmp_path, course_file, reference_report):
    """The reference grades 94/94 (masks 16/16, no positional); an inverted mask loses twice what it loses out
    of 100; the gradebook has no positional column, and every report and the class page name the course file."""
    course = load(course_file)
    classroom = tmp_path / "class"
    classroom.mkdir()
    shutil.copytree(SOLUTIONS, classroom / "reference")
    inverted = _masks_inverted(tmp_path)
    shutil.copytree(inverted, classroom / "inverted")
    out = tmp_path / "out"
    rows = run.grade_all(classroom, out, jobs=1, course=course)
    reference, bug = rows["reference"], rows["inverted"]
    assert reference.status == "graded" and reference.total == 94, reference
    assert reference.modules == {"attention": 23, "heads": 15, "masks": 16, "mha": 40}, reference.modules

    today = grade(inverted)
    lost_today = 100 - today.score
    assert lost_today > 0 and today.modules()["masks"][0] < 8, today.modules()
    assert 94 - bug.total == pytest.approx(2 * lost_today), (bug.total, today.score)
    assert bug.modules["masks"] == pytest.approx(16 - 2 * (8 - today.modules()["masks"][0]))
    assert all(bug.modules[m] == reference.modules[m] for m in ("attention", "heads", "mha")), bug.modules

    with open(out / gradebook.GRADEBOOK, newline="", encoding="utf-8") as fh:
        header = next(csv.reader(fh))
    assert header == ["id", "total", "attention", "heads", "masks", "mha", "status", "isolation", "grading_time_s",
                      "error", "fingerprint"]
    for sub in ("reference", "inverted"):
        for name in ("feedback.md", "feedback.html", "results.json"):
            text = (out / sub / name).read_text(encoding="utf-8")
            assert course.sha256 in text and "positional" not in text.split("Isolation")[0], (sub, name)
    assert "Total: 94/94" in (out / "reference" / "feedback.md").read_text(encoding="utf-8")
    page, table = classpage.write(out)
    assert course.sha256 in page.read_text(encoding="utf-8") and course.sha256 in table.read_text(encoding="utf-8")
    summary = classpage.read_class(out)
    assert summary.parts == ("attention", "heads", "masks", "mha") and summary.scale() == 94

    # a second run under another course file grades every row again (its fingerprint holds the course)
    assert len(run.plan(classroom, out, course=course).todo) == 0
    other = parse(ISSUE_COURSE.replace(b"masks = 16", b"masks = 8"), "other.toml")
    assert len(run.plan(classroom, out, course=other).todo) == 2
    assert len(run.plan(classroom, out).todo) == 2


# -- no course file: the kit as it is --------------------------------------------------------------------------
def test_with_no_course_file_nothing_of_a_course_is_written(tmp_path):
    """The settings a fingerprint holds, what graded a run, the gradebook's columns, a report's JSON and the
    Gradescope zip hold nothing of a course (and so are what they were)."""
    settings = fingerprints.grading_settings(300.0, 10.0, {})
    assert set(settings) == {"timeout", "call_timeout", "limits", "max_unzipped"}
    assert not any(k.startswith("course") for k in fingerprints.versions())
    assert gradebook.columns() == gradebook.COLUMNS and gradebook.parts_of([]) == MODULES
    report = GradeReport(submission="s", tests=_tests())
    assert "course" not in report.to_dict() and report.to_dict()["max_score"] == 100
    assert "Course file" not in report.to_text() and report.summary_line() == "Total: 100/100"
    assert gradescope.run_autograder(None) == gradescope.RUN_AUTOGRADER
    names = gradescope.build_zip(tmp_path / "a.zip")
    assert gradescope.COURSE_FILE not in names


def test_the_gradescope_zip_embeds_the_course_file_and_grades_under_it(tmp_path, course_file):
    course = load(course_file)
    names = gradescope.build_zip(tmp_path / "a.zip", course=course)
    assert gradescope.COURSE_FILE in names
    with zipfile.ZipFile(tmp_path / "a.zip") as zf:
        assert zf.read(gradescope.COURSE_FILE) == ISSUE_COURSE
        run = zf.read("run_autograder").decode()
    assert f'grader_cli.py grade "$ROOT/submission" --course {gradescope.COURSE_FILE} --format gradescope' in run


def test_a_course_report_reads_back_and_renders_its_course(course_file):
    """`render` of a saved report: the course travels in the JSON, and the figures are its own again."""
    course = load(course_file)
    tests = [t for t in _tests(failed={"masks0"}) if t.module in course.parts]
    for t in tests:
        t.points = t.points * 2 if t.module == "masks" else t.points
    report = GradeReport(submission="s", tests=tests, course=course.report())
    again = GradeReport.from_dict(report.to_dict())
    assert again.to_text() == report.to_text() and again.score == report.score == 92
    assert "Total: 92/94" in again.to_text() and course.sha256 in again.to_text()


@pytest.mark.grading
def test_a_course_sets_the_speed_thresholds_and_leaves_out_the_cuda_checks(tmp_path, warm_servers):
    """[speed] reaches the speed checks (a 1000x speedup fails them, saying 1000x); [cuda] counts = false drops
    the CUDA checks (none in the report, not even as not graded), the reference keeps full marks elsewhere."""
    course = parse(ISSUE_COURSE + b"positional = 14\n[speed]\nmin_speedup = 1000\n[cuda]\ncounts = false\n", "c.toml")
    report = grade(SOLUTIONS, course=course, servers=warm_servers)
    failed = [t for t in report.tests if t.status == "failed"]
    assert [t.id for t in failed] == ["test_fused_faster_than_reference_stacked"], [t.id for t in failed]
    assert "at least 1000x faster" in failed[0].message, failed[0].message
    assert not report.skipped() and not any("cuda" in t.id for t in report.tests), [t.id for t in report.tests]
    assert report.modules()["masks"] == (16.0, 16.0) and report.modules()["positional"] == (14.0, 14.0)
    assert report.figures().max_total == 108 and report.summary_line().endswith("/108")


@pytest.mark.grading
def test_a_course_sets_the_kvcache_speed_threshold(warm_servers):
    """[speed] kv_min_speedup reaches kvcache's speed check (parts/kvcache/test_kvcache.py's MIN_SPEEDUP, read as the
    check runs): at 1000 the reference loses kvcache's 2 speed points and nothing else, the message saying 1000x;
    the next grading, under a course file without the key, is judged at the kit's 3x again."""
    from parts.kvcache import test_kvcache
    from tests.test_optional_part import KVCACHE_COURSE

    assert "kv_min_speedup" not in KVCACHE_COURSE.speed and test_kvcache.MIN_SPEEDUP == 3
    course = parse(KVCACHE_COURSE.text + b"[speed]\nkv_min_speedup = 1000\n", "kv.toml")
    assert course.speed == {"kv_min_speedup": 1000}
    report = grade(SOLUTIONS, course=course, servers=warm_servers)
    failed = [t for t in report.tests if t.status == "failed"]
    assert [t.id for t in failed] == ["test_decoding_faster_than_full_passes"], [t.id for t in failed]
    assert "at least 1000x faster" in failed[0].message and failed[0].data["timing"]["min_speedup"] == 1000, (
        failed[0].message)
    assert report.modules()["kvcache"] == (9, 11) and report.score == 109, report.to_text()
    again = grade(SOLUTIONS, course=KVCACHE_COURSE, servers=warm_servers, select="decoding_faster")
    (speed,) = again.tests
    assert speed.status == "passed" and speed.data["timing"]["min_speedup"] == 3, (speed.status, speed.message)


def test_the_release_of_a_course_holds_only_its_parts(tmp_path, course_file):
    """release --course: the stubs, notebooks, README and self-check of the parts handed out, with its points."""
    result = CliRunner().invoke(cli.cli, ["release", "--course", str(course_file), "-o", str(tmp_path / "t")])
    assert result.exit_code == 0, result.output
    names = sorted(p.name for p in (tmp_path / "t").iterdir())
    assert names == ["01_attention.ipynb", "02_heads.ipynb", "03_masks.ipynb", "04_mha.ipynb", "README.md",
                     "attention.py", "heads.py", "masks.py", "mha.py", "selfcheck.py"], names
    selfcheck = (tmp_path / "t" / "selfcheck.py").read_text(encoding="utf-8")
    assert 'POINTS = {"attention": 23, "heads": 15, "masks": 16, "mha": 40}' in selfcheck
    readme = (tmp_path / "t" / "README.md").read_text(encoding="utf-8")
    assert "in four parts" in readme and "| `masks.py` |" in readme and "positional" not in readme.split("## ")[0]
    assert "94 in all" in readme
    assert '"points": 16' in (tmp_path / "t" / "03_masks.ipynb").read_text(encoding="utf-8")
    again = CliRunner().invoke(cli.cli, ["release", "--check", "--course", str(course_file), "-o", str(tmp_path / "t")])
    assert again.exit_code == 0, again.output


def _task_points(folder) -> dict:
    """grade_id -> nbgrader points of the task cells of the notebooks in `folder`."""
    import json

    return {c["metadata"]["nbgrader"]["grade_id"]: c["metadata"]["nbgrader"]["points"]
            for path in sorted(folder.glob("*.ipynb")) for c in json.loads(path.read_text(encoding="utf-8"))["cells"]
            if c.get("metadata", {}).get("nbgrader", {}).get("points") is not None}


def test_the_nbgrader_source_folder_holds_the_parts_handed_out_with_their_points(tmp_path):
    """release --nbgrader-source DIR: with no course file, the five notebooks of assignments/mha/, byte for byte,
    out of 100 (and assignments/mha/ holds no other part's); with a course file that hands out kvcache, the six,
    kvcache's task cell among them, out of 111; --check holds each."""
    from autograder.release import ASSIGNMENT_DIR, NOTEBOOKS
    from tests.test_optional_part import KVCACHE_COURSE

    assert sorted(p.name for p in ASSIGNMENT_DIR.iterdir()) == sorted(NOTEBOOKS.values())
    default = CliRunner().invoke(cli.cli, ["release", "--nbgrader-source", str(tmp_path / "default")])
    assert default.exit_code == 0, default.output
    assert {p.name: p.read_bytes() for p in (tmp_path / "default").iterdir()} == {
        p.name: p.read_bytes() for p in ASSIGNMENT_DIR.iterdir()}
    assert sum(_task_points(tmp_path / "default").values()) == 100
    (tmp_path / "kv.toml").write_bytes(KVCACHE_COURSE.text)
    args = ["release", "--course", str(tmp_path / "kv.toml"), "--nbgrader-source", str(tmp_path / "kv")]
    written = CliRunner().invoke(cli.cli, args)
    assert written.exit_code == 0, written.output
    assert sorted(p.name for p in (tmp_path / "kv").iterdir()) == [*sorted(NOTEBOOKS.values()), "06_kvcache.ipynb"]
    assert _task_points(tmp_path / "kv") == {f"{m}-hidden-graders": w for m, w in KVCACHE_COURSE.parts.items()}
    assert sum(_task_points(tmp_path / "kv").values()) == KVCACHE_COURSE.total == 111
    checked = CliRunner().invoke(cli.cli, ["release", "--check", *args[1:]])
    assert checked.exit_code == 0, checked.output
    (tmp_path / "kv" / "06_kvcache.ipynb").unlink()
    stale = CliRunner().invoke(cli.cli, ["release", "--check", *args[1:]])
    assert stale.exit_code == 1 and "06_kvcache.ipynb" in stale.output, stale.output
