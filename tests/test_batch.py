"""grade-all: a whole class, in parallel, with feedback, a gradebook, and resume."""
import contextlib
import csv
import errno
import glob
import json
import os
import shutil
import tempfile
import zipfile
from decimal import Decimal

import pytest
from click.testing import CliRunner

from autograder.classrun import fingerprints, gradebook, outlock, run
from autograder.report.html import md_inline, to_markdown
from autograder.report.model import GradeReport
from grader_cli import cli
from tests.conftest import MODULES, ROOT, SOLUTIONS, TEMPLATE
from tests.corpus import load_corpus, materialize

pytestmark = pytest.mark.grading  # every test here grades or starts student processes


#: carol's hang is bounded by the call timeout (once, then her module's checks stop): 2 s, not grade-all's 10
CALL_TIMEOUT = 2.0


@pytest.fixture(scope="module")
def classroom(tmp_path_factory):
    """A mixed class: correct folder, buggy zip, one that loops forever, one that exits at import, a broken zip,
    the untouched template and an empty folder."""
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
    shutil.copytree(TEMPLATE, subs / "frank", ignore=shutil.ignore_patterns("__pycache__", ".*"))  # untouched
    (subs / "gina").mkdir()  # an empty folder
    out = root / "out"
    result = CliRunner().invoke(cli, ["grade-all", str(subs), "--output", str(out), "--jobs", "2",
                                      "--call-timeout", str(CALL_TIMEOUT)], catch_exceptions=False)
    return {"subs": subs, "out": out, "result": result}


def rows(out):
    with open(out / "gradebook.csv", newline="") as fh:
        return {r["id"]: r for r in csv.DictReader(fh)}


def test_one_row_per_submission_with_its_status(classroom):
    assert classroom["result"].exit_code == 0, classroom["result"].output
    book = rows(classroom["out"])
    assert sorted(book) == ["alice", "bob.zip", "carol", "dave", "erin.zip", "frank", "gina"]
    assert book["alice"]["total"] == "100" and book["alice"]["status"] == "graded"
    assert 0 < float(book["bob.zip"]["total"]) < 100 and float(book["bob.zip"]["attention"]) < 23
    for sub in ("carol", "dave"):  # hangs / exits at import: the other modules keep their points
        assert book[sub]["status"] == "graded" and float(book[sub]["positional"]) == 0
        assert float(book[sub]["mha"]) > 0
    assert list(book["alice"]) == ["id", "total", *MODULES, "status", "isolation", "grading_time_s", "error",
                                   "fingerprint"]
    assert book["alice"]["isolation"] in ("namespaces", "landlock", "none")


def test_nothing_to_grade_is_empty_not_a_real_0_and_says_what_was_looked_for(classroom):
    """Issue 14: an unreadable zip, the untouched template and an empty folder are "empty" (0, and why), apart
    from graded work; none of them is an error, and the summary names them."""
    book = rows(classroom["out"])
    for sub in ("erin.zip", "frank", "gina"):
        assert book[sub]["status"] == "empty" and book[sub]["total"] == "0", book[sub]
        assert book[sub]["error"].startswith("no student work found: "), book[sub]
    assert "zip" in book["erin.zip"]["error"]
    assert "NotImplementedError" in book["frank"]["error"] and "untouched template" in book["frank"]["error"]
    assert "looked for" in book["gina"]["error"] and "attention.py" in book["gina"]["error"]
    assert all(book[s]["error"] == "" for s in ("alice", "bob.zip")), "graded work has no reason to give"
    assert "empty (nothing to grade, 0): erin.zip, frank, gina" in classroom["result"].output


def test_module_columns_add_up_to_the_total(classroom):
    """Issue 14: one set of numbers: the module columns are on the promised maxima (23/15/8/40/14), the total is
    their sum, and the row is what the submission's results.json says."""
    import json

    for sub, row in rows(classroom["out"]).items():
        modules = sum(Decimal(row[m]) for m in MODULES)
        assert Decimal(row["total"]) == modules, (sub, row)
        results = json.loads((classroom["out"] / sub / "results.json").read_text())
        assert Decimal(str(results["score"])) == Decimal(row["total"]), (sub, results["score"], row["total"])
    assert rows(classroom["out"])["alice"]["attention"] == "23"


def test_no_path_of_the_instructors_machine_in_what_students_see(classroom):
    """Issue 14 item 7: feedback and results name a submission by its id, never by where it lies here."""
    for sub in ("erin.zip", "gina", "bob.zip"):
        for name in ("feedback.md", "feedback.html", "results.json"):
            text = (classroom["out"] / sub / name).read_text()
            assert str(classroom["subs"]) not in text and tempfile.gettempdir() + "/" not in text, (sub, name)
    assert "erin.zip" in (classroom["out"] / "erin.zip" / "results.json").read_text()


def test_every_submission_gets_results_and_feedback(classroom):
    for sub in ("alice", "bob.zip", "carol", "dave", "erin.zip"):
        folder = classroom["out"] / sub
        for name in ("results.json", "feedback.md", "feedback.html"):
            assert (folder / name).is_file(), (sub, name)


def test_feedback_names_the_likely_bug_and_shows_heatmaps(classroom):
    md = (classroom["out"] / "bob.zip" / "feedback.md").read_text()
    assert md_inline("Likely bug: scores divided by d_k instead of sqrt(d_k).") in md  # a heading, as literal text
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

    monkeypatch.setattr(run, "grade", record)
    everyone = ["alice", "bob.zip", "carol", "dave", "erin.zip", "frank", "gina"]
    # the settings of the first run (a row graded under others would be graded again)
    again = run.grade_all(classroom["subs"], classroom["out"], call_timeout=CALL_TIMEOUT)
    assert attempted == []  # graded and empty rows are kept while their content and settings are the same
    assert sorted(again) == everyone
    assert rows(classroom["out"]) == before
    attempted.clear()
    regraded = run.grade_all(classroom["subs"], classroom["out"], force=True, call_timeout=CALL_TIMEOUT)
    assert sorted(attempted) == everyone
    assert all(r.status == "error" and r.total is None for r in regraded.values())  # the patched grade raised
    assert all(r["total"] == "" and r["attention"] == "" for r in rows(classroom["out"]).values())


def test_a_grading_that_did_not_complete_is_never_a_score():
    from autograder.report.model import GradeReport

    for status in ("timeout", "error"):
        row = gradebook.row_from_report(GradeReport(submission="x", status=status, error="grading did not finish"))
        cells = row.as_csv()
        assert row.total is None and cells["total"] == "" and all(cells[m] == "" for m in MODULES), cells
    empty = gradebook.row_from_report(GradeReport(submission="x", status="empty", error="no student work found: x"))
    assert empty.as_csv()["total"] == "0" and empty.as_csv()["status"] == "empty"


def test_warm_servers_leave_no_temporary_folder(tmp_path, monkeypatch):
    """Issue 14: each grade-all run left an empty /tmp/mha-zygote-home-* behind."""
    from autograder.grade.servers import WarmServers

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # this process's temp folders, and only them
    with WarmServers() as servers:
        assert glob.glob(str(tmp_path / "mha-zygote-home-*")) == [servers._home]
    assert os.listdir(tmp_path) == [], f"left behind: {os.listdir(tmp_path)}"


def test_the_two_servers_start_side_by_side(monkeypatch):
    """Each server imports torch: the zygote is started before the grader server is waited for, so a class run
    (and nbgrader-sync) waits for one import of torch, not two in a row."""
    from autograder.grade.servers import WarmServers
    from autograder.sandbox import forkclient

    events = []

    class Recorded(forkclient.Server):
        def __init__(self, kind, **kwargs):
            super().__init__(kind, **kwargs)
            events.append(f"{kind} started")

        def wait_ready(self):
            super().wait_ready()
            events.append(f"{self._kind} ready")

    monkeypatch.setattr(forkclient, "Server", Recorded)
    with WarmServers():
        pass
    assert events == ["student started", "grader started", "student ready", "grader ready"], events


def test_servers_that_cannot_start_leave_no_process_and_no_folder(tmp_path, monkeypatch):
    """The zygote's interpreter exits at once: WarmServers raises, and the grader server started beside it is
    stopped, its folder and the zygote's home removed (a class run then grades cold: LazyServers)."""
    from autograder.grade.servers import WarmServers
    from autograder.sandbox import forkclient

    servers = []

    class Kept(forkclient.Server):
        def __init__(self, kind, **kwargs):
            super().__init__(kind, **kwargs)
            servers.append(self)

    monkeypatch.setattr(forkclient, "Server", Kept)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with pytest.raises(RuntimeError, match="the student fork server did not start"):
        WarmServers(python="/bin/false")
    assert [s._kind for s in servers] == ["student", "grader"], "expected both servers to have been started"
    assert all(s._proc is None for s in servers), "expected every server process stopped and reaped"
    assert os.listdir(tmp_path) == [], f"left behind: {os.listdir(tmp_path)}"


def test_a_run_again_after_a_kill_leaves_nothing_of_the_killed_writes(tmp_path):
    """A grade-all killed between writing a file and renaming it over the old one leaves `.<name>.<random>` beside
    it (autograder.files.write_atomic); running it again rewrites the files and removes those beginnings, so that
    OUT holds what one run would have written (a merge copies the folders as they are)."""
    subs, out = tmp_path / "class", tmp_path / "out"
    subs.mkdir()
    (subs / "notes").mkdir()  # a folder with no module: graded "empty" at once, no process started
    (subs / "notes" / "README.md").write_text("my work is elsewhere\n")
    killed = [out / "notes" / ".results.json.k1ll3d", out / "notes" / ".feedback.html.k1ll3d",
              out / ".gradebook.csv.k1ll3d"]
    for path in killed:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("half of a file")
    rows = run.grade_all(subs, out, jobs=1)
    assert rows["notes"].status == "empty", rows
    assert sorted(p.name for p in (out / "notes").iterdir()) == ["feedback.html", "feedback.md", "results.json"]
    assert sorted(p.name for p in out.iterdir()) == [outlock.LOCK, "gradebook.csv", "notes"], "and the run's lock"


def test_gradebook_is_replaced_atomically(tmp_path):
    gradebook.write_gradebook(tmp_path, {"a": gradebook.Row("a", 50, {m: 1 for m in MODULES}, "graded", 1.0)})
    assert [p.name for p in tmp_path.iterdir()] == ["gradebook.csv"]  # no temporary file left behind
    assert gradebook.read_gradebook(tmp_path)["a"].total == 50


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
    planned = run.plan(subs, out)
    todo, changed = planned.todo, planned.changed
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
    prints = run.plan(subs, out).prints
    gradebook.write_gradebook(out, {"alice": gradebook.Row("alice", 0, {}, "graded", 1.0, fingerprint=prints["alice"])})
    (out / "alice").mkdir()
    (out / "alice" / "results.json").write_text("{}")
    assert run.plan(subs, out).todo == [], "expected nothing to grade when nothing changed"
    from autograder.sandbox.limits import Limits

    assert run.plan(subs, out, limits=Limits(cpu_seconds=5)).changed == 1, "expected new limits to count as a change"
    monkeypatch.setattr(run, "kit_digest", lambda: "another kit")
    assert run.plan(subs, out).changed == 1, "expected a changed kit (graders, reference) to count as a change"


def test_an_id_named_like_the_kits_own_files_gets_a_folder_of_its_own(tmp_path):
    """Issue 15: a submission named gradebook.csv aborted every run; now its files go to gradebook.csv~/,
    and the id that ends with ~ itself moves on too, so no two ids share a folder."""
    subs = tmp_path / "class"
    for name in ("gradebook.csv", "gradebook.csv~", "alice"):
        (subs / name).mkdir(parents=True)  # empty: quick to grade, and still a row with its files
    out = tmp_path / "out"
    rows_ = run.grade_all(subs, out, jobs=1, warm=False)
    assert sorted(rows_) == ["alice", "gradebook.csv", "gradebook.csv~"]
    assert {r["id"]: r["status"] for r in rows(out).values()} == dict.fromkeys(rows_, "empty")
    for sub_id, folder in [("gradebook.csv", "gradebook.csv~"), ("gradebook.csv~", "gradebook.csv~~"),
                           ("alice", "alice")]:
        heading = to_markdown(GradeReport(submission=sub_id)).splitlines()[0]  # the id, escaped for Markdown
        assert (out / folder / "feedback.md").read_text().splitlines()[0] == heading, f"expected {sub_id} in {folder}/"
    assert run.plan(subs, out).todo == [], "expected a second run to find every row again"


def test_a_submission_whose_files_cannot_be_written_is_an_error_row_and_the_batch_goes_on(tmp_path):
    subs = tmp_path / "class"
    for name in ("alice", "bob"):
        (subs / name).mkdir(parents=True)
    out = tmp_path / "out"
    out.mkdir()
    (out / "alice").write_text("a file where alice's folder should be")
    rows_ = run.grade_all(subs, out, jobs=1, warm=False)
    assert rows_["alice"].status == "error" and rows_["alice"].total is None, rows_["alice"]
    assert "the grader failed" in rows_["alice"].error and rows_["bob"].status == "empty"


@contextlib.contextmanager
def small_file_system(folder, size="200k"):
    """A tmpfs of `size` mounted at `folder` for the block (root only); pytest.skip, with the reason, where
    mounting is refused."""
    import subprocess

    folder.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        pytest.skip("mounting a small file system needs root")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)], capture_output=True,
                          text=True)
    if done.returncode != 0:
        pytest.skip(f"mounting a tmpfs was refused here: {done.stderr.strip() or done.returncode}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], capture_output=True)


def fill(folder):
    """Write `folder`'s file system full (a file named filler); return its path."""
    filler = folder / "filler"
    with open(filler, "wb", buffering=0) as fh:
        try:
            while fh.write(b"\0" * 4096):
                pass
        except OSError as exc:
            assert exc.errno == errno.ENOSPC, exc
    return filler


def test_grade_all_onto_a_full_file_system_exits_2_with_one_line_and_a_rerun_completes_the_gradebook(tmp_path):
    """With its output on a full file system, grade-all wrote "error" rows and exited 0; with the gradebook itself
    unwritable it ended in a traceback. Every row it cannot write makes the exit status 2, with one line that
    says what ran out and that a rerun picks up where it stopped; once there is room, the rerun completes it."""
    subs = tmp_path / "class"
    ids = ["alice", "bob", "carol", "dave"]
    for name in ids:
        (subs / name).mkdir(parents=True)  # empty: quick to grade, and still a row with its files
    with small_file_system(tmp_path / "out") as out:
        filler = fill(out)
        first = CliRunner().invoke(cli, ["grade-all", str(subs), "--output", str(out), "--jobs", "2"])
        assert first.exit_code == 2, first.output
        assert first.exception is None or isinstance(first.exception, SystemExit), first.exception
        said = [line for line in first.output.splitlines() if "graded but not written" in line]
        assert said == [f"error: 4 submission(s) graded but not written: out of space on the file system of {out}. "
                        "Free some and run the same command again: it picks up where it stopped."], first.output
        assert "Traceback" not in first.output
        filler.unlink()
        second = CliRunner().invoke(cli, ["grade-all", str(subs), "--output", str(out), "--jobs", "2"])
        assert second.exit_code == 0, second.output
        assert "0 already graded, 4 to grade" in second.output, second.output
        assert {r["id"]: r["status"] for r in rows(out).values()} == dict.fromkeys(ids, "empty")
        assert all((out / i / "results.json").is_file() for i in ids)


def test_a_gradebook_that_cannot_be_written_leaves_its_rows_to_the_rerun(tmp_path, monkeypatch):
    """Each submission's files written, the gradebook not (its write refused for want of room): exit 2 through
    OutputFull, naming every row the gradebook lacks; the rerun grades them again."""
    subs = tmp_path / "class"
    for name in ("alice", "bob"):
        (subs / name).mkdir(parents=True)
    out = tmp_path / "out"

    def refuse(out, rows):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(run, "write_gradebook", refuse)
    with pytest.raises(run.OutputFull) as full:
        run.grade_all(subs, out, jobs=1, warm=False)
    assert full.value.unwritten == ["alice", "bob"] and full.value.why == f"space on the file system of {out}"
    monkeypatch.undo()
    assert [i for i, _ in run.plan(subs, out).todo] == ["alice", "bob"]


def test_links_and_fifos_in_the_class_folder_are_never_followed_or_opened(tmp_path):
    """A class-folder entry that links to a classmate's submission (or to the kit's solutions) got that
    grade; a FIFO hung the run while its content was hashed. Both are rows saying why, graded as empty."""
    subs = tmp_path / "class"
    (subs / "alice").mkdir(parents=True)
    (subs / "bob").symlink_to("alice")
    (subs / "sol").symlink_to(SOLUTIONS)
    os.mkfifo(subs / "carol")
    rows_ = run.grade_all(subs, tmp_path / "out", jobs=1, warm=False)
    for sub_id in ("bob", "sol"):
        assert rows_[sub_id].status == "empty" and "is a symbolic link: not graded" in rows_[sub_id].error
    assert rows_["carol"].status == "empty" and "is a named pipe (FIFO), not a regular file: not graded (a " \
        "submission is a folder, a zip or a notebook" in rows_["carol"].error, rows_["carol"].error
    assert fingerprints.content_digest(subs / "bob") != fingerprints.content_digest(subs / "sol")


def test_content_digest_sees_file_contents_and_never_follows_links(tmp_path):
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / "attention.py").write_text("a = 1\n")
    first = fingerprints.content_digest(sub)
    (sub / "attention.py").write_text("a = 2\n")
    assert fingerprints.content_digest(sub) != first, "expected an edited file to change the digest"
    secret = tmp_path / "secret.py"
    secret.write_text("s = 1\n")
    (sub / "heads.py").symlink_to(secret)
    linked = fingerprints.content_digest(sub)
    secret.write_text("s = 2\n")
    assert fingerprints.content_digest(sub) == linked, "expected a link to count by its target's name, not its content"



def _data_before_modules(folder, masks=None, data_files=10_000):
    """Issue 32 item 4: a submission whose modules (src/) come after a folder of 10,000 data files in name order
    (aaa-data/): the old digest stopped after 10,000 entries and never saw src/. `masks`: src/masks.py's source."""
    (folder / "aaa-data").mkdir(parents=True)
    for i in range(data_files):
        (folder / "aaa-data" / f"{i:05d}.csv").write_bytes(b"x,y\n1,2\n")
    shutil.copytree(SOLUTIONS, folder / "src", ignore=shutil.ignore_patterns("__init__.py", "__pycache__"))
    if masks is not None:
        shutil.copy(masks, folder / "src" / "masks.py")
    return folder


def test_a_module_behind_ten_thousand_data_files_still_changes_the_fingerprint(tmp_path):
    """Issue 32 item 4: the digest stopped after 10,000 entries in name order, so a fix to src/masks.py behind
    aaa-data/ kept its stale grade on resume. It now hashes what intake grades: no cap of its own hides a module."""
    sub = _data_before_modules(tmp_path / "hana")
    kit, settings = fingerprints.kit_digest(), fingerprints.grading_settings(300.0, 10.0, {})
    first = fingerprints.fingerprint(sub, kit, settings)
    assert first and fingerprints.fingerprint(sub, kit, settings) == first, "expected the same fingerprint twice"
    masks = sub / "src" / "masks.py"
    data = bytearray(masks.read_bytes())
    data[data.rindex(b"1")] = ord("2")  # one byte of the module, far from its start
    masks.write_bytes(bytes(data))
    fixed = fingerprints.fingerprint(sub, kit, settings)
    assert fixed and fixed != first, "expected a changed src/masks.py to change the fingerprint"
    (sub / "aaa-data" / "00000.csv").write_bytes(b"x,y\n3,4\n")  # never graded: nothing to grade again
    assert fingerprints.fingerprint(sub, kit, settings) == fixed, "expected a data file intake never takes not to count"


def test_the_digest_of_a_zip_a_notebook_or_a_refused_entry_is_stable_and_sees_the_graded_code(tmp_path):
    """The digest is intake's outcome: a zip is unpacked and a notebook converted into temporary folders whose
    paths must not reach the digest (every run would grade again), while the code graded does."""
    zipped = tmp_path / "bob.zip"

    def make_zip(attention):
        with zipfile.ZipFile(zipped, "w") as zf:
            for path in sorted(SOLUTIONS.glob("*.py")):
                if path.name != "__init__.py":
                    zf.writestr(f"bob/{path.name}", attention if path.name == "attention.py" else path.read_text())

    make_zip((SOLUTIONS / "attention.py").read_text())
    first = fingerprints.content_digest(zipped)
    assert fingerprints.content_digest(zipped) == first, "expected the same digest for the same zip"
    make_zip((SOLUTIONS / "attention.py").read_text() + "\nX = 1\n")
    assert fingerprints.content_digest(zipped) != first, "expected a changed module in the zip to change the digest"

    book = tmp_path / "03_masks.ipynb"
    shutil.copy(TEMPLATE / "03_masks.ipynb", book)
    before = fingerprints.content_digest(book)
    assert fingerprints.content_digest(book) == before, "expected the same digest for the same notebook"
    book.write_text(book.read_text().replace("NotImplementedError", "ValueError"))
    assert fingerprints.content_digest(book) != before, "expected an edited code cell to change the digest"

    broken = tmp_path / "erin.zip"
    broken.write_bytes(b"not a zip at all")  # refused at intake: its message, named by id, is the digest
    assert fingerprints.content_digest(broken) == fingerprints.content_digest(broken)
    crowded = tmp_path / "crowded"  # refused too: its top folder holds more than intake lists (MAX_FOLDER)
    _data_before_modules(crowded, data_files=0)
    for i in range(10_001):
        (crowded / f"{i:05d}.txt").touch()
    refused = fingerprints.content_digest(crowded)
    assert fingerprints.content_digest(crowded) == refused != fingerprints.content_digest(crowded / "src")


def test_a_fix_behind_ten_thousand_data_files_is_graded_again_on_resume(tmp_path):
    """Issue 32 item 4, end to end: a class run grades hana's buggy masks (src/, behind 10,000 data files); she
    fixes it; the second run grades her again and her row gets masks' full marks."""
    subs, out = tmp_path / "class", tmp_path / "out"
    _data_before_modules(subs / "hana", masks=ROOT / "examples" / "buggy-student" / "masks.py")
    first = run.grade_all(subs, out, jobs=1)
    assert first["hana"].status == "graded" and first["hana"].modules["masks"] < 8, first["hana"]
    shutil.copy(SOLUTIONS / "masks.py", subs / "hana" / "src" / "masks.py")
    planned = run.plan(subs, out)
    todo, changed = planned.todo, planned.changed
    assert [i for i, _ in todo] == ["hana"] and changed == 1, (todo, changed)
    second = run.grade_all(subs, out, jobs=1)
    assert second["hana"].modules["masks"] == 8 and second["hana"].total == 100, second["hana"]
    assert rows(out)["hana"]["masks"] == "8" and rows(out)["hana"]["fingerprint"] != first["hana"].fingerprint

def test_warm_servers_start_at_the_first_grading_that_needs_them_and_never_for_stray_files(tmp_path, server_starts):
    """A class (or a shard of one) of entries refused at intake starts no server; one submission starts them once."""
    started = server_starts
    subs, out = tmp_path / "class", tmp_path / "out"
    subs.mkdir()
    (subs / "notes.md").write_text("not a submission\n")
    (subs / "broken.zip").write_bytes(b"not a zip at all")
    first = run.grade_all(subs, out, jobs=2)
    assert {r.status for r in first.values()} == {"empty"} and started == [], (first, started)
    shutil.copytree(SOLUTIONS, subs / "alice", ignore=shutil.ignore_patterns("__init__.py", "__pycache__"))
    shutil.copytree(SOLUTIONS, subs / "bob", ignore=shutil.ignore_patterns("__init__.py", "__pycache__"))
    second = run.grade_all(subs, out, jobs=2)
    assert len(started) == 1, f"expected one pair of servers for the two gradings, got {len(started)}"
    assert second["alice"].total == second["bob"].total == 100, (second["alice"], second["bob"])


def test_a_class_of_uploads_named_as_students_name_them(tmp_path):
    """Issue 33: a class folder whose entries are a single renamed notebook (bea_03_masks.ipynb, a browser's
    re-download 03_masks (1).ipynb) and a folder of renamed notebooks and .py files. Each renamed file is
    graded as its module: the single notebooks earn masks' 8 of 8 (they were marked empty before), the folder
    100; the gradebook and the feedback name each submission as uploaded."""
    from autograder.release import ASSIGNMENT_DIR, NOTEBOOKS
    from autograder.report.html import md_inline

    subs = tmp_path / "submissions"
    subs.mkdir()
    for name in ("bea_03_masks.ipynb", "03_masks (1).ipynb"):
        shutil.copyfile(ASSIGNMENT_DIR / NOTEBOOKS["masks"], subs / name)
    cleo = subs / "cleo"
    cleo.mkdir()
    for module, name in {"attention": "Copy of 01_attention.ipynb", "heads": "02-heads(2).ipynb",
                         "masks": "cleo_03_masks.ipynb"}.items():
        shutil.copyfile(ASSIGNMENT_DIR / NOTEBOOKS[module], cleo / name)
    shutil.copyfile(SOLUTIONS / "mha.py", cleo / "mha (1).py")
    shutil.copyfile(SOLUTIONS / "positional.py", cleo / "positional.py")
    out = tmp_path / "out"
    result = CliRunner().invoke(cli, ["grade-all", str(subs), "--output", str(out), "--jobs", "2"],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    book = rows(out)
    assert sorted(book) == ["03_masks (1).ipynb", "bea_03_masks.ipynb", "cleo"], sorted(book)
    assert book["cleo"]["total"] == "100" and book["cleo"]["status"] == "graded", book["cleo"]
    for sub in ("bea_03_masks.ipynb", "03_masks (1).ipynb"):
        assert book[sub]["status"] == "graded" and book[sub]["masks"] == "8" and book[sub]["total"] == "8", book[sub]
        assert all(book[sub][m] == "0" for m in MODULES if m != "masks"), book[sub]
        feedback = (out / sub / "feedback.md").read_text()
        assert feedback.startswith(f"# Feedback: {md_inline(sub)}\n"), feedback[:200]
        results = json.loads((out / sub / "results.json").read_text())
        masks = [t for t in results["tests"] if t["name"].startswith("masks:")]
        assert masks and all(t["status"] == "passed" for t in masks) and results["score"] == 8, results
