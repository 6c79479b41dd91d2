"""Grade a whole class: the library behind `grader_cli.py grade-all`.

Every entry of the input folder is one submission (a folder of .py modules
or notebooks, a zip, or a single notebook); its name is the submission id.
Submissions are graded in parallel; for each, OUT/<id>/results.json
(Gradescope format), feedback.md and feedback.html are written, and
OUT/gradebook.csv is rewritten atomically after every submission, so an
interrupted run loses nothing and a second run resumes where it stopped.

Each row records a fingerprint of what graded it (autograder.classrun.fingerprints): a second run grades
again every row whose fingerprint changed, and says how many.

Ctrl-C: the first one starts no new grading, lets those that run finish and
records them, then stops (`Interrupted`, which says what is left); a second
one stops at once: the gradings still running are killed and nothing of
them is recorded. An interrupted grading is never a score.

The gradebook and OUT's names are autograder.classrun.gradebook; OUT's lock, autograder.classrun.outlock.
"""
from __future__ import annotations

import json
import os
import shutil
import stat
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import NamedTuple

from autograder.classrun.fingerprints import fingerprint, grading_settings, kit_digest, versions
from autograder.classrun.gradebook import (DONE, GRADEBOOK, GRADER_FAILURE, Row, discover, output_folder,
                                           read_gradebook, row_from_report, row_key, write_gradebook)
from autograder.classrun.outlock import out_of_room, output_lock
from autograder.files import SHARED, remove_interrupted_writes, write_atomic
from autograder.grade.engine import grade
from autograder.grade.servers import LazyServers
from autograder.report.formats import render
from autograder.report.model import GradeReport, safe_line
from autograder.sandbox import batchlock
from autograder.sandbox.errors import GraderUnavailable
from autograder.submission import intake
from autograder.submission.take import SubmissionError


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
    settings = grading_settings(timeout, call_timeout, options)
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
