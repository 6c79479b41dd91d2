"""grade-all: a whole class, in parallel, with feedback, a gradebook, and resume."""
import csv
import shutil
import zipfile

import pytest
from click.testing import CliRunner

from autograder import batch
from grader_cli import cli
from tests.conftest import MODULES, SOLUTIONS
from tests.corpus import load_corpus, materialize


@pytest.fixture(scope="module")
def classroom(tmp_path_factory):
    """A mixed class: correct folder, buggy zip, one that loops forever, one that exits at import, a broken zip."""
    root = tmp_path_factory.mktemp("class")
    subs = root / "submissions"
    subs.mkdir()
    shutil.copytree(SOLUTIONS, subs / "alice", ignore=shutil.ignore_patterns("__init__.py", "__pycache__"))
    cases = {c.id: c for kind in ("bug", "hostile") for c in load_corpus()[kind]}
    buggy = materialize(cases["attention-scale-by-dk"], root / "bob", SOLUTIONS)
    with zipfile.ZipFile(subs / "bob.zip", "w") as zf:
        for path in buggy.glob("*.py"):
            zf.write(path, path.name)
    materialize(cases["positional-hangs"], subs / "carol", SOLUTIONS)
    materialize(cases["positional-os-exit-at-import"], subs / "dave", SOLUTIONS)
    (subs / "erin.zip").write_bytes(b"not a zip at all")
    out = root / "out"
    result = CliRunner().invoke(cli, ["grade-all", str(subs), "--output", str(out), "--jobs", "2"],
                                catch_exceptions=False)
    return {"subs": subs, "out": out, "result": result}


def rows(out):
    with open(out / "gradebook.csv", newline="") as fh:
        return {r["id"]: r for r in csv.DictReader(fh)}


def test_one_row_per_submission_with_its_status(classroom):
    assert classroom["result"].exit_code == 0, classroom["result"].output
    book = rows(classroom["out"])
    assert sorted(book) == ["alice", "bob.zip", "carol", "dave", "erin.zip"]
    assert book["alice"]["total"] == "100" and book["alice"]["status"] == "graded"
    assert 0 < float(book["bob.zip"]["total"]) < 100 and float(book["bob.zip"]["attention"]) < 22
    for sub in ("carol", "dave"):  # hangs / exits at import: the other modules keep their points
        assert book[sub]["status"] == "graded" and float(book[sub]["positional"]) == 0
        assert float(book[sub]["mha"]) > 0
    assert book["erin.zip"]["status"] == "error" and "zip" in book["erin.zip"]["error"]
    assert list(book["alice"]) == ["id", "total", *MODULES, "status", "isolation", "grading_time_s", "error"]
    assert book["erin.zip"]["total"] == "" and book["alice"]["isolation"] in ("namespaces", "landlock", "none")


def test_every_submission_gets_results_and_feedback(classroom):
    for sub in ("alice", "bob.zip", "carol", "dave", "erin.zip"):
        folder = classroom["out"] / sub
        for name in ("results.json", "feedback.md", "feedback.html"):
            assert (folder / name).is_file(), (sub, name)


def test_feedback_names_the_likely_bug_and_shows_heatmaps(classroom):
    md = (classroom["out"] / "bob.zip" / "feedback.md").read_text()
    assert "Likely bug: scores divided by d_k instead of sqrt(d_k)." in md
    assert "| attention |" in md
    html = (classroom["out"] / "bob.zip" / "feedback.html").read_text()
    assert html.count("data:image/png;base64,") >= 1 and "Likely bug" in html


def test_feedback_never_shows_grader_or_solution_source(classroom):
    solution_lines = {line.strip() for p in SOLUTIONS.glob("*.py") for line in p.read_text().splitlines()
                      if len(line.strip()) > 25 and not line.strip().startswith(("#", '"""'))}
    for sub in ("alice", "bob.zip", "carol", "dave"):
        for name in ("feedback.md", "feedback.html", "results.json"):
            text = (classroom["out"] / sub / name).read_text()
            assert "def test_" not in text and "BEGIN SOLUTION" not in text and "autograder/graders" not in text
            leaked = [line for line in solution_lines if line in text]
            assert not leaked, (sub, name, leaked[:3])


def test_second_run_skips_what_is_graded_and_force_regrades(classroom, monkeypatch):
    before = rows(classroom["out"])
    attempted = []

    def record(path, **kwargs):
        attempted.append(path.name)
        raise RuntimeError("graded again")

    monkeypatch.setattr(batch, "grade", record)
    again = batch.grade_all(classroom["subs"], classroom["out"])
    assert attempted == ["erin.zip"]  # only the submission that could not be graded is tried again
    assert sorted(again) == ["alice", "bob.zip", "carol", "dave", "erin.zip"]
    after = rows(classroom["out"])
    assert {k: v for k, v in after.items() if k != "erin.zip"} == {k: v for k, v in before.items() if k != "erin.zip"}
    attempted.clear()
    regraded = batch.grade_all(classroom["subs"], classroom["out"], force=True)
    assert sorted(attempted) == ["alice", "bob.zip", "carol", "dave", "erin.zip"]
    assert all(r.status == "error" for r in regraded.values())  # the patched grade raised for each one


def test_gradebook_is_replaced_atomically(tmp_path):
    batch.write_gradebook(tmp_path, {"a": batch.Row("a", 50, {m: 1 for m in MODULES}, "graded", 1.0)})
    assert [p.name for p in tmp_path.iterdir()] == ["gradebook.csv"]  # no temporary file left behind
    assert batch.read_gradebook(tmp_path)["a"].total == 50
