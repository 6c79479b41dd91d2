"""Grade one submission: the library behind `grader_cli.py grade`.

`grade(path)` accepts a folder of the five modules (as .py files or as
notebooks such as `01_attention.ipynb`), a zip of one, or a single notebook. It runs
the hidden graders (pytest, `autograder/graders/`) in a separate trusted
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

import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from autograder import MODULES
from autograder.files import read_signed
from autograder.paths import GRADERS
from autograder.report.model import GradeReport, TestResult
from autograder.sandbox import batchlock
from autograder.sandbox.errors import GraderUnavailable
from autograder.sandbox.isolation import choose_isolation
from autograder.sandbox.limits import Limits, grader_env, student_env
from autograder.scoring import NOT_HANDED_IN, nothing_to_grade
from autograder.submission import intake
from autograder.submission.intake import MAX_UNZIPPED, SubmissionError  # noqa: F401  (the engine's names, as before)
from autograder.submission.notebooks import CellLines, in_notebook_terms, module_of, not_handed_in, notebook_source


@dataclass
class Intake:
    """A submission as the grader takes it in (autograder.submission.intake): a private folder of its .py modules.

    `notes`: {file of the submission: why it was not graded}, e.g. {"zz.py":
    "zz.py is a symbolic link: not graded ..."}; `missing`: {module: why},
    for the modules whose file was left out, so that their checks say why;
    `notebooks`: {module: (its notebook's name, CellLines of the module written from it)}, for the modules
    that a notebook became, so that messages name the notebook's cells (`in_notebook_terms`); `absent`:
    {module: where its code goes} for the modules not handed in at all (no file, no note: their checks say only
    autograder.scoring.NOT_HANDED_IN, and the report says this once, GradeReport.missing).
    """

    folder: Path
    notes: dict = field(default_factory=dict)
    missing: dict = field(default_factory=dict)
    notebooks: dict = field(default_factory=dict)
    absent: dict = field(default_factory=dict)


def submission_id(path) -> str:
    """The name a submission goes by in every report: its file or folder name (`/home/me/class/bob.zip` ->
    `bob.zip`), never a path of the grading machine."""
    return os.path.basename(os.path.abspath(path)) or str(path)


def _by_id(text: str, path) -> str:
    """`text` with the paths of the submission `path` written as its id (`submission_id`)."""
    name = submission_id(path)
    forms = {str(path), os.path.abspath(path), str(Path(path).resolve())}
    forms |= {intake.shown(f) for f in forms}
    for form in sorted(forms, key=len, reverse=True):
        if form and form != name:
            text = text.replace(form, name)
    return text


_CAP = threading.Lock()
_DEFAULT_UNZIPPED = intake.MAX_UNZIPPED


@contextmanager
def _unzipped_cap(max_unzipped):
    """While intake reads a submission, its cap on the bytes unpacked (autograder.submission.intake.MAX_UNZIPPED) is
    `max_unzipped`. intake reads the cap from its module constant, so every intake with another cap than the
    constant's is serialised (None or the constant's value: no lock)."""
    if max_unzipped is None or max_unzipped == _DEFAULT_UNZIPPED:
        yield
        return
    with _CAP:
        saved, intake.MAX_UNZIPPED = intake.MAX_UNZIPPED, max_unzipped
        try:
            yield
        finally:
            intake.MAX_UNZIPPED = saved


@contextmanager
def taken(path, max_unzipped=None):
    """Yield an Intake of the submission at `path`: a folder, a zip of one, or a single notebook.

    The folder is always a fresh private copy, made by autograder.submission.intake:
    regular files only, never through a link, each within its size limit;
    a zip is checked before it is unpacked. A module that the submission has
    only as a notebook (`01_attention.ipynb`) is converted
    (autograder.submission.notebooks); of a module's two forms, the one with work is
    taken (autograder.submission.intake.one_form). Raises SubmissionError when `path` cannot be
    read at all (no such path, not a zip, a zip bomb, too many entries); its message names the submission by
    its id (`submission_id`), never by a path of this machine.
    `max_unzipped`: the most bytes a submission may unpack to (default
    autograder.submission.intake.MAX_UNZIPPED).
    """
    path = Path(path)
    if not path.exists():
        raise SubmissionError(f"no such file or folder: {submission_id(path)}")
    with tempfile.TemporaryDirectory(prefix="mha-intake-") as tmp:
        folder = Path(tmp) / "submission"
        folder.mkdir()
        try:
            with _unzipped_cap(max_unzipped):
                files, notes = _take(path, Path(tmp))
        except SubmissionError as exc:
            raise SubmissionError(_by_id(str(exc), path)) from None
        notebooks, absent = {}, {}
        yield Intake(folder, notes, _write_modules(files, folder, notes, notebooks, absent), notebooks, absent)


def _take(path, tmp):
    """({name: bytes}, {name: why not graded}) of the submission at `path` (autograder.submission.intake), the
    notes capped (intake.capped_notes: each module's first, at most MAX_NOTES in all, the rest counted)."""
    if path.is_dir():
        files, notes = intake.take_folder(path)
        return files, intake.capped_notes(notes)
    if path.suffix.lower() == ".ipynb":
        if module_of(path) is None:  # the name rule (autograder.submission.notebooks.modules_named)
            raise SubmissionError(_unnamed(path.name))
        try:
            return {path.name: intake.read_regular(path, intake.MAX_FILE[".ipynb"], path.name, follow=True)}, {}
        except intake.Refused as exc:
            return {}, {path.name: str(exc)}
    unpacked = tmp / "unpacked"
    unpacked.mkdir()
    notes = intake.unzip(path, unpacked)
    files, more = intake.take_folder(unpacked)
    return files, intake.capped_notes({**notes, **more})


def _unnamed(name) -> str:
    """Why a single notebook handed in stands for no module (its name), and how to name it."""
    shown, several = intake.shown(name), intake.modules_named(name)
    if len(several) > 1:
        several = sorted(several, key=MODULES.index)
        return (f"{shown}: its name holds the names of {len(several)} modules ({', '.join(several)}): a notebook "
                f"holds one module and is named after it ({', '.join(map(intake.notebook_name, several))})")
    return (f"{shown}: a notebook is named after its module, e.g. 01_attention.ipynb, or ends with that name "
            f"(bea_01_attention.ipynb, 01_attention (1).ipynb)")


def _write_modules(files, folder, notes, notebooks, absent):
    """Write the .py files of `files` ({name: bytes}) into `folder`, and the modules that only a notebook
    holds; return {module: why it is missing} for the modules whose file was left out (`notes`) or that are not
    handed in at all (NOT_HANDED_IN). Each module written from a notebook goes into `notebooks` as
    {module: (the notebook's name, CellLines of what was written)}, each module not handed in into `absent` as
    {module: where its code goes} (autograder.submission.notebooks.not_handed_in).

    A module's .py file is written as `<module>.py` whatever the student named it (`masks (1).py` ->
    `masks.py`: intake.one_form left at most one file of each module); any other .py file under its own name."""
    for name, data in files.items():
        module = intake.module_of(name) if name.lower().endswith(".py") else None
        if module or name.endswith(".py"):  # (MASKS.PY is a module's; HELPER.PY, no module's, is not taken)
            target = folder / (f"{module}.py" if module else name)
            if not target.exists():  # (never: one file a module, and no other file is named <module>.py)
                intake.write_new(target, data)
    for name, data in sorted(files.items()):
        module = module_of(name) if name.lower().endswith(".ipynb") else None
        if module is None or (folder / f"{module}.py").exists():
            continue
        try:
            source = notebook_source(data, name)
        except ValueError as exc:  # costs exactly the checks of that module
            source = f"raise ImportError({str(exc)!r})\n"
        intake.write_new(folder / f"{module}.py", source.encode())
        notebooks[module] = (name.rsplit("/", 1)[-1], CellLines(source))
    missing = {}
    notebooks = any(name.lower().endswith(".ipynb") for name in [*files, *notes])
    for module in MODULES:
        if not (folder / f"{module}.py").exists():
            why = [note for name, note in notes.items() if module in intake.modules_named(name.rsplit("/", 1)[-1])]
            if why:
                missing[module] = "; ".join(why)
            else:  # said once by the report: the notebook (of a notebook submission) and the cell its code goes in
                missing[module] = NOT_HANDED_IN
                absent[module] = not_handed_in(module, notebooks)
    return missing


@contextmanager
def prepared(path, max_unzipped=None):
    """Yield a private folder of the submission's .py modules, for a folder, a zip or a notebook (`taken`)."""
    with taken(path, max_unzipped) as got:
        yield got.folder


class WarmServers:
    """The two fork servers of a batch run (autograder.sandbox.forkserver): torch is imported once, not per grading.

    `grader` forks a warm trusted process per submission to run the hidden
    graders; `zygote` forks each student process from a warm process that
    holds torch and nothing of the kit. Use as a context manager and pass it
    to `grade(..., servers=...)`.
    """

    def __init__(self, python=None):
        from autograder.sandbox.forkserver import Server
        self._home = tempfile.mkdtemp(prefix="mha-zygote-home-")  # the student processes' HOME: removed at close
        started = []
        try:
            # side by side: each imports torch, so on two cores the pair is ready in the time of one import. The
            # zygote first: the grader server inherits its channel, for its gradings to fork student processes
            started.append(Server("student", env=student_env(self._home), isolated=True,
                                  python=python or sys.executable, wait=False))
            started.append(Server("grader", env=grader_env(), preload=GRADER_PRELOAD, wait=False,
                                  share=[started[0]]))
            for server in started:
                server.wait_ready()
        except BaseException:
            for server in started:
                server.close()
            shutil.rmtree(self._home, ignore_errors=True)
            raise
        self.zygote, self.grader = started

    def close(self):
        self.grader.close()
        self.zygote.close()
        shutil.rmtree(self._home, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class LazyServers:
    """WarmServers started by the first grading that runs graders, from whichever thread it runs in: a class
    run (or a shard of one) whose submissions are all refused at intake starts no server at all.

    Passed as `grade(..., servers=...)`: its truth value starts the servers when they are not running yet and
    says whether they run; False (the gradings go cold, slower, same results) where they cannot start, or
    once closed. `grader` and `zygote` are those of the running servers.
    """

    def __init__(self, python=None):
        self._python = python
        self._servers = None
        self._state = "waiting"  # "running", "unavailable" (they could not start) or "closed"
        self._lock = threading.Lock()

    def __bool__(self):
        with self._lock:
            if self._state == "waiting":
                try:
                    self._servers = WarmServers(python=self._python)
                    self._state = "running"
                except (OSError, RuntimeError):
                    self._state = "unavailable"
            return self._state == "running"

    @property
    def grader(self):
        return self._servers.grader

    @property
    def zygote(self):
        return self._servers.zygote

    def close(self):
        with self._lock:
            self._state = "closed"
            servers, self._servers = self._servers, None
        if servers is not None:
            servers.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


#: What the warm grader server imports once, so that no grading pays for it: torch, the pytest plugin, the
#: checks and diagnoses, the graders' helpers, the timing, the reference solution, and the graders themselves
#: (pytest's importlib mode takes a test module already in sys.modules as it is: each fork collects the server's
#: copy instead of compiling and running the five files again, ~20 ms of CPU a grading).
GRADER_PRELOAD = ("torch", "autograder.grade.plugin", "autograder.grade.checks", "autograder.grade.diagnose",
                  "autograder.graders.common", "autograder.grade.timing", "solutions",
                  *(f"autograder.graders.test_{module}" for module in MODULES))


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
    from autograder.sandbox.forkserver import Worker, channel_fd, kill_group

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
          require_isolation=None, servers=None, python=None, max_unzipped=None) -> GradeReport:
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
    student process (default: this one; it needs torch).
    """
    start, wall_start = time.monotonic(), time.time()
    report = GradeReport(submission=submission_id(path))
    limits = limits or Limits()
    python = python or sys.executable
    level = choose_isolation(isolation, require_isolation, python=python)
    with taken(path, max_unzipped) as got, tempfile.TemporaryDirectory(prefix="mha-grade-") as tmp:
        folder = got.folder
        report.notes = list(got.notes.values())
        report.missing = dict(got.absent)
        results_file = Path(tmp) / "results.json"
        args = [str(GRADERS), "-c", str(GRADERS / "pytest.ini"), "--rootdir", str(GRADERS),
                "-p", "autograder.grade.plugin", "-q", "--no-header", "--tb=no", "--submission", str(folder.resolve()),
                "--results-file", str(results_file), "--call-timeout", str(call_timeout),
                "--limits", json.dumps(limits.to_dict()), "--isolation", level, "--student-python", python]
        # why a module is missing, and the original submission (hidden from student code like its copy)
        args += ["--intake", json.dumps({"missing": got.missing, "source": str(Path(path).resolve())})]
        if servers:  # (LazyServers start here: after intake, which may refuse the submission before any process)
            args += ["--zygote", servers.zygote.address]
        if batchlock.folder() is not None:  # a class run: explicit, as servers may predate it
            args += ["--batch-dir", str(batchlock.folder())]
        if select:
            args += ["-k", select]
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
            report.tests = [TestResult(**t) for t in data["tests"]]
            for test in report.tests:  # lines of a notebook's module, named by the notebook's cells
                test.message = in_notebook_terms(test.message, got.notebooks)
            report.student_output = data.get("student_output", "")
            report.isolation = data.get("isolation") or ""
            report.timings = _timings(wall_start, data.get("times", {}), report.tests)
            report.grader_peak_mib = float(data.get("peak_mib") or 0.0)
            why = nothing_to_grade(report.tests) if report.status == "graded" else ""
            if why:
                report.status, report.error = "empty", f"no student work found: {why}"
        elif report.status == "graded":
            raise GraderUnavailable("the graders did not run" + _error_lines(log))
    report.execution_time = time.monotonic() - start
    if report.timings:
        report.timings["total"] = round(report.execution_time, 3)
    return report


def _error_lines(log):
    """The error lines of a pytest log, without the source lines its tracebacks show (graders are hidden)."""
    lines = [ln for ln in log.splitlines() if re.match(r"(E |ERROR|INTERNALERROR> \w*(Error|Exception)|\w+Error\b)", ln)]
    return (":\n" + "\n".join(lines[-8:])) if lines else " (no error message; run pytest on autograder/graders to see why)"


def _timings(t0, times, tests):
    """Where the wall time of one grading went, in seconds (for the benchmark)."""
    out = {}
    if {"configured", "collected", "finished"} <= set(times):
        out["grader process start (python, pytest)"] = times["configured"] - t0
        out["grader imports (torch, reference, graders)"] = times["collected"] - times["configured"]
    if times.get("child_started") and times.get("child_ready"):
        out["student process start (python, torch), in parallel"] = times["child_ready"] - times["child_started"]
    for module in MODULES:
        spent = sum(t.duration for t in tests if t.module == module and t.aspect != "speedup")
        out[f"checks: {module}"] = spent
    out["checks: speedup timing"] = sum(t.duration for t in tests if t.aspect == "speedup")
    if "finished" in times:
        out["report and exit"] = time.time() - times["finished"]
    return {k: round(v, 3) for k, v in out.items()}
