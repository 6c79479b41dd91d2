"""Grade a whole class: the library behind `grader_cli.py grade-all`.

Every entry of the input folder is one submission (a folder of .py modules
or notebooks, a zip, or a single notebook); its name is the submission id.
Submissions are graded in parallel; for each, OUT/<id>/results.json
(Gradescope format), feedback.md and feedback.html are written, and
OUT/gradebook.csv is rewritten atomically after every submission, so an
interrupted run loses nothing and a second run resumes where it stopped.

Each row records a fingerprint of what graded it: what intake takes of the
submission (the files graded, wherever they sit, and what was left out and
why: content_digest), the kit's code (graders, reference, engine) and the
limits. A second run grades again every row whose fingerprint changed (a
corrected file, a new grader, other limits), and says how many.

Ctrl-C: the first one starts no new grading, lets those that run finish and
records them, then stops (`Interrupted`, which says what is left); a second
one stops at once: the gradings still running are killed and nothing of
them is recorded. An interrupted grading is never a score.

A submission's name is the student's to choose: its string cells in the
gradebook go through autograder.report.model.csv_cell (control characters escaped,
a cell that a spreadsheet would take for a formula made text), and a row is
found again by `row_key`, the id as it reads back from the gradebook.
"""
from __future__ import annotations

import csv
import errno
import fcntl
import hashlib
import io
import json
import os
import shutil
import socket
import stat
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from autograder import MODULES, __version__
from autograder.files import SHARED, remove_interrupted_writes, write_atomic
from autograder.grade.engine import grade
from autograder.grade.servers import LazyServers
from autograder.submission.take import SubmissionError, taken
from autograder.paths import KIT
from autograder.report.formats import render
from autograder.report.model import GradeReport, csv_cell, csv_value, safe_line
from autograder.sandbox import batchlock
from autograder.sandbox.errors import GraderUnavailable
from autograder.scoring import fmt
from autograder.submission import intake

GRADEBOOK = "gradebook.csv"
LOCK = ".grade-all.lock"  # in OUT: held (an fcntl lock) by the grade-all that writes OUT, for as long as it runs
MANIFEST = "shard.json"  # a shard's record of what it was assigned and what graded it (autograder.classrun.shards)
CLASS_PAGE, CLASS_CSV = "class.html", "class.csv"  # the class at a glance, from the reports (classrun/classpage.py)
GRADER_FAILURE = "the grader could not run student code: "  # how the error of such a row begins
DONE = ("graded", "empty")  # rows a second run keeps while their fingerprint holds; the others are graded again
COLUMNS = ["id", "total", *MODULES, "status", "isolation", "grading_time_s", "error", "fingerprint"]


def columns(parts=MODULES) -> list[str]:
    """The gradebook's columns: COLUMNS, with a column for each of `parts` (a course file's parts; the kit's by
    default) in place of the five modules'."""
    return ["id", "total", *parts, "status", "isolation", "grading_time_s", "error", "fingerprint"]


def parts_of(rows) -> tuple:
    """The parts that the rows were graded on, in the kit's order: those of their figures; the kit's five where no
    row has figures (COLUMNS as before)."""
    found = {m for r in rows for m in r.modules}
    return tuple(m for m in MODULES if m in found) or MODULES


class Busy(RuntimeError):
    """Another process is grading into this OUT (it holds OUT/.grade-all.lock): the message names it."""


_HELD = {}  # the real path of an OUT -> [the lock file's descriptor, how many holders in this process]
_HELD_GUARD = threading.Lock()


@contextmanager
def output_lock(out: Path):
    """Hold OUT/.grade-all.lock (an fcntl lock: POSIX record locks, which NFS carries between nodes) while the
    block runs, so that two runs never grade into one OUT at once; a second run is refused at once with `Busy`,
    which names the holder (its pid, host and start, written into the file). The kernel releases the lock when
    the process ends, however it ends (a kill, a node lost): no stale lock to remove. Held again by the same
    process (the command line, then grade_all), it is counted, never released early. Yields False where the
    file system has no locks (ENOLCK, EOPNOTSUPP): the run goes on unlocked.

    A POSIX lock is the process's: it is not inherited by the processes it starts, and the descriptor is
    close-on-exec."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    key = os.path.realpath(out)
    with _HELD_GUARD:
        held = _HELD.get(key)
        if held is not None:
            held[1] += 1
        else:
            fd = os.open(out / LOCK, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0), 0o666)
            try:
                fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                if exc.errno in (errno.EACCES, errno.EAGAIN):
                    holder = os.pread(fd, 500, 0).decode("utf-8", "replace").strip() or "a process"
                    os.close(fd)
                    raise Busy(f"{out} is being graded into by another grade-all ({safe_line(holder)}); two runs "
                               "on one folder would grade the same submissions at once. Wait for it to end and "
                               "run this command again (it resumes), or give another --output") from None
                if exc.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.EINVAL):
                    os.close(fd)
                    raise
                os.close(fd)
                fd = None  # no locks on this file system
            if fd is not None:
                try:  # who holds it, for the message of a second run; a full file system leaves it unsaid
                    os.ftruncate(fd, 0)
                    os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()}, since "
                                  f"{time.strftime('%Y-%m-%d %H:%M:%S %Z')}\n".encode(), 0)
                except OSError as exc:
                    if out_of_room(exc) is None:
                        os.close(fd)
                        raise
            held = _HELD[key] = [fd, 1]
    try:
        yield held[0] is not None
    finally:
        with _HELD_GUARD:
            held[1] -= 1
            if held[1] == 0:
                del _HELD[key]
                if held[0] is not None:
                    os.close(held[0])  # the lock goes with the last descriptor of the file in this process


#: The errors of a write that its file system refused for want of room: the machine's, never the submission's
ROOM = {errno.ENOSPC: "space", errno.EDQUOT: "disk quota"}


def out_of_room(exc, where=None) -> str | None:
    """What ran out, in words, when `exc` is a write refused for want of room ("space", "free inodes (files)",
    "disk quota"), and where: the file system of the folder of the file it names, else of `where`; None for
    any other error."""
    if not isinstance(exc, OSError) or exc.errno not in ROOM:
        return None
    what = ROOM[exc.errno]
    where = os.path.dirname(os.fspath(exc.filename)) if exc.filename else where
    if exc.errno == errno.ENOSPC and where:
        try:
            fs = os.statvfs(where)
            if fs.f_files and not fs.f_favail and fs.f_bavail:  # blocks left, no inode: a file count ran out
                what = "free inodes (files)"
        except OSError:
            pass
    return f"{what} on the file system of {safe_line(os.fspath(where))}" if where else what


class NotWritten(Exception):
    """A grading whose files could not be written for want of room (`out_of_room`): no row, graded again by the
    next run."""

    def __init__(self, sub_id, exc):
        super().__init__(f"{safe_line(sub_id)}: {exc}")
        self.sub_id, self.exc = sub_id, exc


class OutputFull(Exception):
    """grade_all could not write every row for want of room: `rows` holds what was graded, `unwritten` the ids
    of the submissions whose files or gradebook row could not be saved, `why` what ran out (`out_of_room`).
    The files and rows written are whole (write_atomic): the same command run again, once there is room,
    grades the unwritten ones and keeps the rest."""

    def __init__(self, rows, unwritten, why):
        super().__init__(f"{len(unwritten)} row(s) could not be written: {why}")
        self.rows, self.unwritten, self.why = rows, sorted(unwritten), why


class Interrupted(KeyboardInterrupt):
    """grade_all stopped by Ctrl-C: `rows` holds every finished grading (all written), `left` how many were not
    graded, `killed` how many running gradings were stopped at once (a second Ctrl-C)."""

    def __init__(self, rows, left, killed):
        super().__init__(f"interrupted: {left} submission(s) not graded")
        self.rows, self.left, self.killed = rows, left, killed


@dataclass
class Row:
    id: str
    total: float | None  # None: no score (status "timeout" or "error": the grading did not complete)
    modules: dict  # module -> figure, on the same scale as the total (autograder.scoring)
    status: str  # graded | empty | timeout | error (autograder.report.model.STATUSES)
    seconds: float
    error: str = ""
    isolation: str = ""  # how student code was confined (autograder.LEVELS)
    fingerprint: str = ""  # what graded it: submission content, kit code, limits (fingerprint())

    def as_csv(self, parts=None):
        """The gradebook row: strings through csv_cell, numbers as numbers (never prefixed); a column for each of
        `parts` (default: the kit's five modules)."""
        parts = parts or MODULES
        scores = {"total": "", **{m: "" for m in parts}} if self.total is None else {
            "total": fmt(self.total), **{m: fmt(self.modules.get(m) or 0) for m in parts}}
        return {"id": csv_cell(self.id), **scores, "status": csv_cell(self.status),
                "isolation": csv_cell(self.isolation), "grading_time_s": f"{self.seconds:.1f}",
                "error": csv_cell(self.error), "fingerprint": self.fingerprint}

    @classmethod
    def from_csv(cls, rec):
        number = (lambda text: float(text) if text not in ("", None) else None)
        text = (lambda key: csv_value(rec.get(key) or ""))
        return cls(text("id"), number(rec["total"]), {m: number(rec[m]) for m in MODULES if m in rec}, text("status"),
                   float(rec["grading_time_s"]), text("error"), text("isolation"), rec.get("fingerprint") or "")


def row_key(sub_id: str) -> str:
    """How the id `sub_id` reads back from the gradebook (its control characters stay escaped there): the
    key of its row in `read_gradebook` and `grade_all`, so that a second run finds every row again."""
    return safe_line(sub_id)


def content_digest(path: Path, max_unzipped: int | None = None) -> str:
    """A hash of what a grading takes of the submission at `path`: the outcome of its intake, made by the
    code a grading runs (autograder.submission.take.taken), never a walk of the raw folder.

    For a folder, a zip or a notebook, that outcome is: the names and bytes of the files the graders get (the
    .py files of the folder that intake picked, wherever it sits, a notebook converted to its module), the
    notes on what was left out and why (autograder.submission.intake: links, files over a limit or past a
    cap, the form of a module not graded), and why each missing module is missing. For a submission that
    intake refuses, its message (SubmissionError, which names the submission by its id, never by a path of
    this machine). For a class-folder entry that is neither a folder nor a regular file, its kind (a link by
    its target, never followed; a FIFO never opened), as grade_one refuses it unread.

    So every change that can change a grade or its feedback changes the digest, however many other files the
    submission holds and in whatever order they come: the digest has no cap of its own that could hide a
    module. A change that intake does not take (a data file, a file past intake's caps, a link's target, a
    notebook's markdown) cannot change the grade, and does not change the digest.

    Bounded as one intake is, whatever the submission holds (autograder.submission.folder, zips): at most MAX_SCAN
    (50,000) entries listed to find the modules' folder, MAX_FOLDER + 1 per folder; at most MAX_ENTRIES (1,000)
    files read, `max_unzipped` bytes in all; a zip's directory checked before it is parsed (MAX_ENTRIES
    entries, 4 MiB) and at most `max_unzipped` bytes unpacked, counted as they come out; a notebook at most
    MAX_FILE[".ipynb"] (32 MiB). Memory: the files taken (at most `max_unzipped`, 50 MiB by default) and a
    1 MiB buffer; disk: a temporary copy of them, removed before it returns.

    `max_unzipped`: the cap of the grading (grade-all's --max-unzipped), which decides what intake takes;
    None: intake's default. Raises OSError when the entry cannot be looked at (fingerprint: never matches).
    """
    h = hashlib.sha256()
    path = Path(path)
    mode = os.lstat(path).st_mode
    if not (stat.S_ISDIR(mode) or stat.S_ISREG(mode)):  # grade_one's refusal: never followed, never opened
        h.update(f"kind {stat.S_IFMT(mode)}".encode())
        if stat.S_ISLNK(mode):
            h.update(b"\0link " + os.fsencode(os.readlink(path)))
        return h.hexdigest()
    try:
        with taken(path, max_unzipped) as got:
            h.update(b"taken\0" + json.dumps([list(got.notes.items()), list(got.missing.items())]).encode())
            for top, dirs, files in os.walk(got.folder):  # the private copy the graders get: regular files only
                dirs.sort()
                for name in sorted(files):
                    full = os.path.join(top, name)
                    h.update(b"\0" + os.path.relpath(full, got.folder).encode("utf-8", "surrogateescape")
                             + f"\0{os.path.getsize(full)}\0".encode())
                    with open(full, "rb") as fh:
                        for chunk in iter(lambda: fh.read(1 << 20), b""):
                            h.update(chunk)
    except SubmissionError as exc:  # refused at intake: graded "empty", with this message
        h.update(b"refused\0" + str(exc).encode("utf-8", "surrogateescape"))
    return h.hexdigest()


def kit_digest() -> str:
    """A hash of the kit's code that decides a grade: the engine, the graders, the reference solution."""
    h = hashlib.sha256()
    for folder in ("autograder", "solutions"):
        for file in sorted((KIT / folder).rglob("*.py")):
            h.update(str(file.relative_to(KIT)).encode() + b"\0" + file.read_bytes() + b"\0")
    return h.hexdigest()


def versions(course=None) -> dict:
    """What grades: the kit's version, torch's, Python's, and the checksum of the code that decides a grade
    (`kit_digest`: engine, graders, reference), so that a gradebook can say what graded it; with a course file
    (autograder.course.Course), its name, checksum and total too."""
    import platform
    from importlib.metadata import PackageNotFoundError, version

    try:
        torch_version = version("torch")
    except PackageNotFoundError:
        torch_version = "not installed"
    return {"kit": __version__, "torch": torch_version, "python": platform.python_version(),
            "graders_sha256": kit_digest(), **(course.graded_by() if course is not None else {})}


def fingerprint(path: Path, kit: str, settings: dict) -> str:
    """What a row was graded from: what intake takes of the submission (`content_digest`, under the settings'
    max_unzipped), the kit (`kit_digest`) and the settings that can change a grade (limits, timeouts).

    "" when the submission cannot be digested in full (content_digest raised: an unreadable entry, an intake
    that fails other than by refusing it): a fingerprint that never matches, so that row is graded again on
    every run (plan), and its grading says what went wrong."""
    cap = settings.get("max_unzipped")
    try:
        content = content_digest(path, None if cap is None else int(cap))
    except Exception:
        return ""
    h = hashlib.sha256()
    h.update(kit.encode())
    h.update(json.dumps(settings, sort_keys=True, default=str).encode())
    h.update(content.encode())
    return h.hexdigest()[:16]


def _settings(timeout, call_timeout, options):
    from autograder.sandbox.limits import Limits

    limits = options.get("limits") or Limits()  # None means the defaults: the same fingerprint as given
    number = (lambda v: float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else v)  # 60 == 60.0
    return {"timeout": number(timeout), "call_timeout": number(call_timeout),
            "limits": {k: number(v) for k, v in limits.to_dict().items()},
            "max_unzipped": number(options.get("max_unzipped") or intake.MAX_UNZIPPED),
            **(options["course"].settings() if options.get("course") is not None else {})}


class Plan(NamedTuple):
    """What a class run will do, worked out once (every submission hashed once) and read by name."""
    entries: list  # every (id, path) of the run
    rows: dict  # the rows already in the gradebook, by row key
    todo: list  # the (id, path) to grade
    changed: int  # how many of `todo` changed since they were graded
    prints: dict  # each id's fingerprint ("" when it could not be read)


def plan(folder: Path, out: Path, *, force: bool = False, timeout: float = 300.0, call_timeout: float = 10.0,
         entries=None, **options) -> Plan:
    """The run's Plan. `entries`: the (id, path) of this run, where it grades part of the class (a shard:
    autograder.classrun.shards); by default every entry of `folder`."""
    entries = discover(folder) if entries is None else list(entries)
    rows = {} if force else read_gradebook(out)
    kit = kit_digest()
    settings = _settings(timeout, call_timeout, options)
    prints = {}
    for i, p in entries:
        try:
            prints[i] = fingerprint(p, kit, settings)
        except OSError:
            prints[i] = ""  # unreadable: graded again, and the grading says why
    todo, changed = [], 0
    for i, p in entries:
        row = rows.get(row_key(i))
        if force or row is None or row.status not in DONE or not (output_folder(out, i) / "results.json").is_file():
            todo.append((i, p))
        elif row.fingerprint != prints[i] or not prints[i]:
            todo.append((i, p))
            changed += 1
    return Plan(entries, rows, todo, changed, prints)


RESERVED = frozenset({GRADEBOOK, MANIFEST, CLASS_PAGE, CLASS_CSV})  # the kit's own files in OUT (its temporary
# files begin with ".", as hidden ids)


def output_folder(out: Path, sub_id: str) -> Path:
    """OUT/<id>/, where a submission's files go. An id that names one of the kit's own files (gradebook.csv,
    shard.json, class.html, class.csv) or ends with "~" gets a "~" appended, so that no submission's folder is
    one of those files and no two ids share a folder (the mapping is one to one; `folder_id` inverts it)."""
    return Path(out) / (sub_id + "~" if sub_id in RESERVED or sub_id.endswith("~") else sub_id)


def folder_id(name: str) -> str:
    """The id whose `output_folder` is named `name`: one "~" less where it ends with "~", else the name."""
    return name[:-1] if name.endswith("~") else name


def discover(folder: Path) -> list[tuple[str, Path]]:
    """(id, path) for every submission in `folder`, sorted by id; hidden entries are skipped."""
    return sorted((p.name, p) for p in Path(folder).iterdir() if not p.name.startswith((".", "__MACOSX")))


def read_gradebook(out: Path) -> dict[str, Row]:
    path = Path(out) / GRADEBOOK
    if not path.is_file():
        return {}
    with open(path, newline="", encoding="utf-8") as fh:
        rows = [Row.from_csv(rec) for rec in csv.DictReader(fh)]
    return {row_key(row.id): row for row in rows}


def write_gradebook(out: Path, rows: dict[str, Row]):
    buf = io.StringIO()
    parts = parts_of(rows.values())
    writer = csv.DictWriter(buf, fieldnames=columns(parts))
    writer.writeheader()
    for key in sorted(rows):
        writer.writerow(rows[key].as_csv(parts))
    write_atomic(Path(out) / GRADEBOOK, buf.getvalue(), mode=SHARED)  # the user's umask decides who reads it


def grade_one(sub_id: str, path: Path, out: Path, timeout: float, call_timeout: float = 10.0, *,
              stopped=None, graded_by=None, **options) -> Row | None:
    """Grade one submission and write its files; never raises for a bad submission.

    `options` go to autograder.grade.engine.grade (limits, isolation, servers, python). `stopped` (a
    threading.Event): once set, nothing is written and None is returned (a grading stopped halfway).
    `graded_by`: what grades (`versions()`), recorded in results.json's extra_data (`_results_json`).
    """
    start = time.monotonic()
    try:
        try:
            mode = os.lstat(path).st_mode
        except FileNotFoundError:  # gone since the class folder was listed
            mode = 0
        if not (stat.S_ISDIR(mode) or stat.S_ISREG(mode)):  # a link is never followed, a FIFO never opened
            report = GradeReport(submission=sub_id, status="empty", error=(
                f"no student work found: {safe_line(sub_id)} is {intake.kind_of(mode)}: not graded (a submission "
                "is a folder, a zip or a notebook in the class folder itself; links are never followed)"))
            return _write_report(report, sub_id, out, start, stopped, graded_by)
        return _grade_one(sub_id, path, out, timeout, call_timeout, start, stopped=stopped, graded_by=graded_by,
                          **options)
    except NotWritten:  # a full disk is no grading's fault, and no row: the run says so and the next one grades it
        raise
    except Exception as exc:  # writing its files failed (a name the file system refuses...): an error row
        if out_of_room(exc) is not None:
            raise NotWritten(sub_id, exc) from None
        report = GradeReport(submission=sub_id, status="error", grader_failure=True,
                             error=f"the grader failed: {type(exc).__name__}: {exc}")
        return None if stopped is not None and stopped.is_set() else row_from_report(report, time.monotonic() - start)


def _grade_one(sub_id, path, out, timeout, call_timeout, start, *, stopped=None, graded_by=None, **options):
    try:
        report = grade(path, timeout=timeout, call_timeout=call_timeout, **options)
    except SubmissionError as exc:  # nothing of it can be read: no student work to grade (0, and why)
        report = GradeReport(submission=sub_id, status="empty", error=f"no student work found: {exc}")
    except GraderUnavailable as exc:  # the grader's failure: an error row, never a 0
        report = GradeReport(submission=sub_id, status="error", error=f"{GRADER_FAILURE}{exc}", grader_failure=True,
                             isolation=options.get("isolation", ""))
    except Exception as exc:  # the batch goes on whatever happens to one submission; the grader's failure
        if out_of_room(exc) is not None:  # its own folders on a full disk: no row, as for its files (grade_one)
            raise NotWritten(sub_id, exc) from None
        report = GradeReport(submission=sub_id, status="error", error=f"the grader failed: {type(exc).__name__}: "
                             f"{exc}", grader_failure=True)
    return _write_report(report, sub_id, out, start, stopped, graded_by)


def _results_json(report, graded_by=None) -> str:
    """results.json: the report in Gradescope's format, and, in its extra_data (which Gradescope leaves to the
    autograder), what graded it (`graded_by`: the kit's version, the checksum of its graders and reference,
    torch's and Python's versions), so that the class page, computed from the reports alone, can say it."""
    if not graded_by:
        return render(report, "gradescope") + "\n"
    results = report.to_gradescope()
    results["extra_data"]["graded_by"] = dict(graded_by)
    return json.dumps(results, indent=2) + "\n"


def _write_report(report, sub_id, out, start, stopped=None, graded_by=None):
    """Write a grading's files into its folder of OUT; its gradebook row (None once the run is stopped)."""
    if stopped is not None and stopped.is_set():
        return None
    report.submission = sub_id
    folder = output_folder(out, sub_id)
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in (("results.json", _results_json(report, graded_by)),
                       ("feedback.md", render(report, "markdown")),
                       ("feedback.html", render(report, "html"))):
        remove_interrupted_writes(folder / name)  # a run killed while writing them left its beginnings here
        write_atomic(folder / name, text, mode=SHARED)
    return row_from_report(report, time.monotonic() - start)


def row_from_report(report: GradeReport, seconds: float = 0.0) -> Row:
    """The gradebook row of a grading: the figures every other format of it shows (autograder.scoring), no
    score at all when the grading did not complete, the first line of the reason otherwise."""
    fig = report.figures()
    known = report.course.get("parts") or MODULES
    modules = {m: float(f.score) if f.graded else 0.0 for m, f in fig.modules.items() if m in known} \
        if report.has_score else {}
    error = report.error.splitlines()[0] if report.error else ""
    total = float(fig.total) if report.has_score else None
    return Row(report.submission, total, modules, report.status, seconds, error, report.isolation)


SUMMARY = (("empty", "nothing to grade, 0"), ("timeout", "no score"), ("error", "no score"))


def status_lines(rows: dict[str, Row]) -> list[str]:
    """The summary's lines that name the ids of each status but graded (empty, timeout, error), in the gradebook's
    order: what grade-all and merge print after a run."""
    ordered = [rows[key] for key in sorted(rows)]
    lines = []
    for status, meaning in SUMMARY:
        ids = [r.id for r in ordered if r.status == status]
        if ids:
            lines.append(f"{status} ({meaning}): {', '.join(safe_line(i) for i in ids)}")
    return lines


def grader_failures(rows: dict[str, Row]) -> list[Row]:
    """The rows of submissions that the grader could not grade (status error: no score, graded again next run)."""
    return [r for r in rows.values() if r.status == "error" and r.error.startswith(GRADER_FAILURE)]


@contextmanager
def _batch_folder():
    """MHA_BATCH_DIR for the gradings of this run (autograder/sandbox/batchlock.py): the one given, else the
    user's machine-wide folder (so that this run and any other grading of the machine's user stop each other
    while they measure speed), else a folder of the run's own, removed after it."""
    previous = os.environ.get(batchlock.ENV)
    if previous:
        yield previous
        return
    shared = batchlock.machine_folder()
    path = str(shared) if shared is not None else tempfile.mkdtemp(prefix="mha-batch-")
    os.environ[batchlock.ENV] = path
    try:
        yield path
    finally:
        os.environ.pop(batchlock.ENV, None)
        if shared is None:
            shutil.rmtree(path, ignore_errors=True)


def grade_all(folder: Path, out: Path, *, jobs: int | None = None, force: bool = False, timeout: float = 300.0,
              call_timeout: float = 10.0, progress=None, warm: bool = True, on_interrupt=None, planned=None,
              **options) -> dict[str, Row]:
    """Grade every submission of `folder` into `out`; return id -> Row for all of them.

    Submissions already in OUT/gradebook.csv with status "graded" and the
    same fingerprint (content, kit, limits) are skipped unless `force`;
    those that timed out, could not be graded or changed are graded again.
    `progress(row, saved)` is called after each graded submission, once its row is in the gradebook: `saved`,
    the rows this run has saved so far (what a progress bar shows, so that it never counts a row not saved). With `warm` (the
    default), two fork servers import torch once for the whole run, started by
    its first grading that runs graders (autograder.grade.servers.LazyServers: a
    run whose submissions are all refused at intake starts none); where they
    cannot start, each grading starts cold. `options` go to autograder.grade.engine.grade. `planned`: what
    `plan` returned for the same arguments (the CLI asks first, to say it).

    OUT is locked while it runs (`output_lock`): a second run into the same OUT raises `Busy` before it reads
    or writes anything there.

    A first KeyboardInterrupt (Ctrl-C) starts nothing new and waits for the
    running gradings (`on_interrupt(n_running)` is called), a second kills
    them; either way every finished grading is written and `Interrupted` is
    raised.
    """
    out = Path(out)
    with output_lock(out):  # never two runs into one OUT (the command line holds it already: counted)
        return _grade_all(folder, out, jobs=jobs, force=force, timeout=timeout, call_timeout=call_timeout,
                          progress=progress, warm=warm, on_interrupt=on_interrupt, planned=planned, **options)


def _grade_all(folder, out, *, jobs, force, timeout, call_timeout, progress, warm, on_interrupt, planned,
               **options):
    remove_interrupted_writes(out / GRADEBOOK)  # a run killed while writing the gradebook left its beginning here
    planned = planned or plan(folder, out, force=force, timeout=timeout, call_timeout=call_timeout, **options)
    rows, todo, prints = planned.rows, planned.todo, planned.prints
    jobs = jobs or os.cpu_count() or 1
    stopped = threading.Event()
    finished = set()
    unwritten, unsaved, full = set(), set(), []  # ids without files, rows not yet in the gradebook; what ran out

    def save(new=None):
        """Write the gradebook (the rows, and `new`); on a full disk, remember which rows it lacks (a later write
        may still save them)."""
        try:
            write_gradebook(out, {**rows, **(new or {})})
        except OSError as exc:
            if out_of_room(exc) is None:
                raise
            full.append(out_of_room(exc, out))
            return
        unsaved.clear()

    def record(future):
        try:
            row = future.result()
        except NotWritten as exc:  # its files could not be written: no row, and the run ends with status 2
            unwritten.add(exc.sub_id)
            full.append(out_of_room(exc.exc, out))
            return
        if row is None or row.id in finished:  # None: stopped halfway, nothing written
            return
        row.fingerprint = prints.get(row.id, "")
        # saved first, counted after: a Ctrl-C in between leaves a row saved and uncounted (the final write of an
        # interrupted run takes it out again), never one counted and unsaved
        unsaved.add(row.id)
        save({row_key(row.id): row})
        rows[row_key(row.id)] = row
        finished.add(row.id)
        if progress:
            progress(row, len(finished))

    with ExitStack() as stack:
        stack.enter_context(_batch_folder())  # speed checks one at a time, neighbours stopped (batchlock)
        # entered first, left last: when the run is stopped, the servers end their workers before the
        # pool waits for its threads
        pool = stack.enter_context(ThreadPoolExecutor(max_workers=jobs))
        if warm and todo:  # started by the first grading that runs graders; cold where they cannot start
            options["servers"] = stack.enter_context(LazyServers(python=options.get("python")))
        graded_by = versions(options.get("course")) if todo else None  # once for the run, into each results.json
        futures = [pool.submit(grade_one, i, p, out, timeout, call_timeout, stopped=stopped, graded_by=graded_by,
                               **options) for i, p in todo]
        try:
            for future in as_completed(futures):
                record(future)
        except KeyboardInterrupt:
            for future in futures:
                future.cancel()  # those not started
            running = [f for f in futures if not f.done()]
            if on_interrupt:
                on_interrupt(len(running))
            killed = 0
            try:
                for future in as_completed(running):
                    record(future)
            except KeyboardInterrupt:  # the second Ctrl-C: stop now, record nothing of what still runs
                killed = sum(1 for f in running if not f.done())
                stopped.set()
                from autograder.grade.engine import kill_running

                kill_running()
                stack.close()  # the warm servers end their workers; the pool's threads return
                for future in running:  # those that ended complete before the stop, files written: kept
                    if future.done() and not future.cancelled() and future.exception() is None:
                        record(future)
                killed = len(todo) - len(finished) - sum(1 for f in futures if f.cancelled())
            save()  # the gradebook holds the rows counted, no more (a Ctrl-C mid-record)
            raise Interrupted(rows, len(todo) - len(finished), max(killed, 0)) from None
    if not todo:
        save()
    if unwritten or unsaved:  # (with nothing to grade, the gradebook there already holds every row)
        raise OutputFull({k: r for k, r in rows.items() if r.id not in unsaved}, unwritten | unsaved, full[-1])
    return rows
