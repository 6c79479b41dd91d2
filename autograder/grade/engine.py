"""Grade one submission: the library behind `grader_cli.py grade`.

`grade(path)` accepts a folder of the five modules (as .py files or as
notebooks such as `01_attention.ipynb`), a zip of one, or a single notebook. It runs
the hidden graders (pytest, `parts/<name>/test_<name>.py`) in a separate trusted
process, which in turn runs the student's code in a sandboxed child, and
returns a GradeReport. It never raises for a bad submission: a crash, a hang
or a broken zip still yields a report with a status and a message.

The submission is taken in by autograder.submission.intake, into a private copy, before
anything else reads it: regular files only, never through a symbolic link,
each within its size limit, a zip checked before it is unpacked. What is left
out is named in the report (`GradeReport.notes`), and a module left out costs
its own checks, with the reason as their message.
"""
from __future__ import annotations

import os
import re
import secrets
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from autograder import MODULES, PARTS, registry
from autograder.files import read_signed
from autograder.grade.spec import GradingSpec
from autograder.paths import GRADERS
from autograder.report.model import GradeReport, TestResult
from autograder.sandbox import batchlock
from autograder.sandbox.errors import GraderUnavailable
from autograder.sandbox.isolation import choose_isolation
from autograder.sandbox.limits import Limits, grader_env
from autograder.scoring import nothing_to_grade
from autograder.submission.notebooks import in_notebook_terms
from autograder.submission.take import submission_id, taken


def _key_pipe(key):
    """A pipe holding `key`: its read end, for the graders to read the key that signs their results."""
    read_end, write_end = os.pipe()
    os.write(write_end, key)
    os.close(write_end)
    return read_end


_RUNNING: set = set()  # the cold grader processes now running (kill_running ends them)


def kill_running():
    """End every cold grading now running in this process (a batch stopped by a second Ctrl-C); their
    `grade` calls return without a score, which the batch does not record."""
    from autograder.sandbox.forkserver import kill_group

    for proc in list(_RUNNING):
        kill_group(proc.pid)


def _in_time(wait, timeout):
    """`wait(timeout=...)` until it returns within `timeout` seconds; in a class run, the time the batch's
    measurements kept this grading stopped is not counted (autograder.sandbox.batchlock.Deadline)."""
    deadline = batchlock.Deadline(timeout)
    while True:
        left = deadline.left()
        if left <= 0:
            raise subprocess.TimeoutExpired("the graders", timeout)
        try:
            return wait(timeout=left)
        except subprocess.TimeoutExpired:
            continue  # the deadline again: a measurement may have moved it


def _run_graders(args, cwd, timeout, servers, key):
    """Run pytest with `args` in `cwd`: a fork of the warm grader server, or a fresh process.

    `key` reaches the graders through an inherited pipe (never argv, the
    environment or a file), so no other process can sign results.
    """
    from autograder.sandbox.forkclient import Worker
    from autograder.sandbox.forkserver import channel_fd, kill_group

    log = Path(cwd) / "graders.log"
    worker, key_fd = None, _key_pipe(key)
    try:
        if servers:
            try:
                worker = Worker(servers.grader.address, {"args": args, "cwd": str(cwd), "log": str(log)},
                                fds=[key_fd])
            except OSError:
                worker = None  # the server is gone: grade cold
        if not worker:
            # a session of its own: a Ctrl-C at the terminal reaches the batch, which decides (let it finish,
            # or stop it with kill_running), never this grading halfway through
            # the zygote's channel too, where its address is in `args` (the grader server gone, the zygote not)
            channels = [channel_fd(servers.zygote.address)] if servers else []
            proc = subprocess.Popen([sys.executable, "-m", "pytest", *args, "--key-fd", str(key_fd)], cwd=cwd,
                                    env=grader_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                    pass_fds=[key_fd, *channels], start_new_session=True)
            _RUNNING.add(proc)
            try:
                stdout, stderr = _in_time(proc.communicate, timeout)
            except BaseException:
                kill_group(proc.pid)
                proc.wait()
                raise
            finally:
                _RUNNING.discard(proc)
            return stdout[-4000:] + stderr[-4000:]
    finally:
        os.close(key_fd)
    try:
        _in_time(worker.wait, timeout)
    except subprocess.TimeoutExpired:
        worker.kill()
        raise
    finally:
        worker.close()
    return log.read_text(errors="replace")[-8000:] if log.exists() else ""


def grade(path, *, timeout=600.0, call_timeout=10.0, select=None, limits=None, isolation="auto",
          require_isolation=None, servers=None, python=None, max_unzipped=None, course=None) -> GradeReport:
    """Grade the submission at `path` (a folder, a zip or a notebook).

    Raises SubmissionError when the submission cannot be read at all, and
    GraderUnavailable (autograder.sandbox.errors) when the grader cannot run student
    code here: isolation refused below `require_isolation`, a student process
    that cannot start. Neither is ever turned into a score. A submission in
    which the graders find no student work (every module missing or the
    untouched template) gets the status "empty", with what was looked for
    (autograder.scoring.nothing_to_grade). The report names the submission
    by its id (`submission_id`), never by its path.

    `timeout`: seconds for the whole grading; `call_timeout`: seconds for
    one call into student code. `max_unzipped`: the most bytes a submission
    may unpack to (default autograder.submission.intake.MAX_UNZIPPED).

    `select` is an optional pytest -k expression to run a subset of the
    graders. `limits` (autograder.sandbox.limits.Limits) bounds each student process;
    `isolation` is "auto" (the strongest level that works here, probed once
    per process) or one of "namespaces", "landlock", "none". `servers`
    (WarmServers) makes a batch fast. `python` is the interpreter of the
    student process (default: this one; it needs torch). `course` (autograder.course.Course, or None for the
    kit as it is): the parts graded and their worths, the speed thresholds, whether CUDA checks count; the
    report names it.
    """
    start, wall_start = time.monotonic(), time.time()
    report = GradeReport(submission=submission_id(path))
    limits = limits or Limits()
    python = python or sys.executable
    level = choose_isolation(isolation, require_isolation, python=python)
    parts = tuple(course.parts) if course is not None else MODULES  # the parts handed out, and graded
    with taken(path, max_unzipped, parts) as got, tempfile.TemporaryDirectory(prefix="mha-grade-") as tmp:
        folder = got.folder
        report.notes = list(got.notes.values())
        report.missing = dict(got.absent)
        if course is not None:  # the parts handed out alone: another part's absence is no one's fault
            report.missing = {m: why for m, why in report.missing.items() if m in course.parts}
            report.course = course.report()
        results_file = Path(tmp) / "results.json"
        batch = batchlock.folder()
        spec = GradingSpec(
            submission=str(folder.resolve()), results_file=str(results_file), call_timeout=call_timeout,
            limits=limits, isolation=level, student_python=python,
            # why a module is missing, and the original submission (hidden from student code like its copy)
            missing=got.missing, source=str(Path(path).resolve()),
            # (LazyServers start here: after intake, which may refuse the submission before any process)
            zygote=servers.zygote.address if servers else None,
            # a class run: explicit, as servers may predate it
            batch_dir=str(batch) if batch is not None else None,
            course=course.grading() if course is not None else {})
        args = grader_args(registry.grader_files(parts), spec.to_json(), select)
        key = secrets.token_bytes(32)
        try:
            log = _run_graders(args, tmp, timeout, servers, key)
        except subprocess.TimeoutExpired:
            report.status, report.error = "timeout", f"grading did not finish within {timeout:g} s"
            log = ""
        data = read_signed(results_file, key)
        if data is False:
            report.status, report.error = "error", ("the results file was not written by the graders (its "
                                                    "signature does not match): nothing of it is used")
        elif data is not None and data.get("grader_failure"):
            raise GraderUnavailable(data["grader_failure"])
        elif data is not None:
            report.tests = [TestResult.from_dict(t) for t in data["tests"]]
            for test in report.tests:  # lines of a notebook's module, named by the notebook's cells
                test.message = in_notebook_terms(test.message, got.notebooks)
            report.student_output = data.get("student_output", "")
            report.isolation = data.get("isolation") or ""
            report.timings = _timings(wall_start, data.get("times", {}), report.tests, parts)
            report.grader_peak_mib = float(data.get("peak_mib") or 0.0)
            why = nothing_to_grade(report.tests, parts) if report.status == "graded" else ""
            if why:
                report.status, report.error = "empty", f"no student work found: {why}"
        elif report.status == "graded":
            raise GraderUnavailable("the graders did not run" + _error_lines(log))
    report.execution_time = time.monotonic() - start
    if report.timings:
        report.timings["total"] = round(report.execution_time, 3)
    return report


def grader_args(graders, spec=None, select=None) -> list[str]:
    """The pytest arguments of a grading: the grader files of its parts (first), its spec (JSON), and an optional
    -k expression `select`. Without a spec: the session the warm grader server prepares (autograder/grade/
    prepared.py), whose forks take a grading's spec and key. Output is not captured (-s): nothing the graders
    print matters, and a fork of the prepared session writes to its own log, not to the server's."""
    args = [*map(str, graders), "-c", str(GRADERS / "pytest.ini"), "--rootdir", str(GRADERS),
            "-p", "autograder.grade.plugin", "-q", "--no-header", "--tb=no", "--capture=no"]
    if spec is not None:
        args += ["--spec", spec]
    if select:
        args += ["-k", select]
    return args


def _error_lines(log):
    """The error lines of a pytest log, without the source lines its tracebacks show (graders are hidden)."""
    lines = [ln for ln in log.splitlines() if re.match(r"(E |ERROR|INTERNALERROR> \w*(Error|Exception)|\w+Error\b)", ln)]
    return (":\n" + "\n".join(lines[-8:])) if lines else " (no error message; run pytest on parts/*/test_*.py to see why)"


def _timings(t0, times, tests, parts=MODULES):
    """Where the wall time of one grading went, in seconds (for the benchmark)."""
    out = {}
    if {"configured", "collected", "finished"} <= set(times):
        if times.get("prepared"):  # a fork of the warm server's prepared session (autograder/grade/prepared.py)
            out["grader fork start (session prepared by the server)"] = times["configured"] - t0
            out["grader setup (spec, key, checks chosen)"] = times["collected"] - times["configured"]
        else:
            out["grader process start (python, pytest)"] = times["configured"] - t0
            out["grader imports (torch, reference, graders)"] = times["collected"] - times["configured"]
    if times.get("child_started") and times.get("child_ready"):
        out["student process start (python, torch), in parallel"] = times["child_ready"] - times["child_started"]
    for module in (m for m in PARTS if m in parts):  # the parts graded, in teaching order
        spent = sum(t.duration for t in tests if t.module == module and t.aspect != "speedup")
        out[f"checks: {module}"] = spent
    out["checks: speedup timing"] = sum(t.duration for t in tests if t.aspect == "speedup")
    if "finished" in times:
        out["report and exit"] = time.time() - times["finished"]
    return {k: round(v, 3) for k, v in out.items()}
