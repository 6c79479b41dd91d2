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
    assert list(book["alice"]) == ["id", "total", *MODULES, "status", "isolation", "grading_time_s", "error",
                                   "fingerprint"]
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


# -- resume by content ---------------------------------------------------------------------------------
def test_a_changed_submission_is_graded_again_and_the_summary_says_so(tmp_path):
    """Resume keys each row on the submission's content: a corrected file is graded again, the rest is not."""
    subs = tmp_path / "class"
    subs.mkdir()
    shutil.copytree(SOLUTIONS, subs / "alice", ignore=shutil.ignore_patterns("__init__.py", "__pycache__"))
    case = {c.id: c for c in load_corpus()["bug"]}["attention-scale-by-dk"]
    materialize(case, subs / "bob", SOLUTIONS)
    out = tmp_path / "out"
    first = CliRunner().invoke(cli, ["grade-all", str(subs), "--output", str(out), "--jobs", "2"])
    assert first.exit_code == 0, first.output
    book = rows(out)
    assert book["alice"]["total"] == "100" and float(book["bob"]["total"]) < 100
    assert all(len(r["fingerprint"]) == 16 for r in book.values()), book

    shutil.copy(SOLUTIONS / "attention.py", subs / "bob" / "attention.py")  # bob corrects his attention
    entries, _, todo, changed, _ = batch.plan(subs, out)
    assert [i for i, _ in todo] == ["bob"] and changed == 1, (todo, changed)
    second = CliRunner().invoke(cli, ["grade-all", str(subs), "--output", str(out), "--jobs", "2"])
    assert second.exit_code == 0, second.output
    assert "1 already graded, 1 to grade (1 changed since the last run)" in second.output, second.output
    after = rows(out)
    assert after["bob"]["total"] == "100", after["bob"]
    assert after["alice"] == book["alice"], "expected the unchanged submission's row to stay as it was"


def test_a_new_kit_or_new_limits_grade_everything_again(tmp_path, monkeypatch):
    subs = tmp_path / "class"
    (subs / "alice").mkdir(parents=True)
    (subs / "alice" / "attention.py").write_text("x = 1\n")
    out = tmp_path / "out"
    out.mkdir()
    _, _, _, _, prints = batch.plan(subs, out)
    batch.write_gradebook(out, {"alice": batch.Row("alice", 0, {}, "graded", 1.0, fingerprint=prints["alice"])})
    (out / "alice").mkdir()
    (out / "alice" / "results.json").write_text("{}")
    assert batch.plan(subs, out)[2] == [], "expected nothing to grade when nothing changed"
    from autograder.sandbox import Limits

    assert batch.plan(subs, out, limits=Limits(cpu_seconds=5))[3] == 1, "expected new limits to count as a change"
    monkeypatch.setattr(batch, "kit_digest", lambda: "another kit")
    assert batch.plan(subs, out)[3] == 1, "expected a changed kit (graders, reference) to count as a change"


def test_content_digest_sees_file_contents_and_never_follows_links(tmp_path):
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / "attention.py").write_text("a = 1\n")
    first = batch.content_digest(sub)
    (sub / "attention.py").write_text("a = 2\n")
    assert batch.content_digest(sub) != first, "expected an edited file to change the digest"
    secret = tmp_path / "secret.py"
    secret.write_text("s = 1\n")
    (sub / "heads.py").symlink_to(secret)
    linked = batch.content_digest(sub)
    secret.write_text("s = 2\n")
    assert batch.content_digest(sub) == linked, "expected a link to count by its target's name, not its content"
