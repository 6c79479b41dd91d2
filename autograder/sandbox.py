"""The trusted side of the sandbox: a client for the student process.

The grading process never imports student code. A `Sandbox` starts
`student_process.py` in a child process whose working directory is a private copy of
the submission, sends it requests (call this function, build this module,
run its forward pass) and reads back plain tensors and containers in
autograder/wire.py's format, checked against the frame's size and against
the most bytes an answer to the request may take (no pickle: what an answer
costs here is bounded by what was sent). Every request has a timeout. A child that
hangs is killed, one that dies is restarted, and a module that crashes the
child twice is not run again: its remaining checks fail at once.

How the child is confined (`namespaces`, `landlock` or `none`, strongest
first) is decided once per grader run by `choose_isolation`, which probes
each level in a throwaway process. A child that cannot start (before its
handshake, no student code has run) raises `GraderUnavailable`: the
grader's failure, never the student's 0.
"""
from __future__ import annotations

import io
import functools
import itertools
import json
import os
import select
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from autograder import LEVELS, MODULES, batchlock, wire
from autograder.submission import intake as _intake
from autograder.diskguard import DiskGuard
from autograder.forkserver import Worker
from autograder.paths import KIT as ROOT

REMEDY = {
    "namespaces": ("allow user namespaces (on Ubuntu 23.10 and later: sudo sysctl -w "
                   "kernel.apparmor_restrict_unprivileged_userns=0), or run the grader as root; in Docker, root "
                   "needs --cap-add SYS_ADMIN --security-opt seccomp=unconfined (or --privileged)"),
    "landlock": "use Linux 5.13 or later with Landlock enabled (lsm=...,landlock on the kernel command line)",
    "readable": ("student code never runs as root, and the uid it runs as must read Python and torch: run the "
                 "grader with a Python that other users can read (e.g. a venv made from /usr/bin/python3), or "
                 "as a normal user"),
}


def remedy(level, why):
    """What to do about `level` failing for the reason `why`."""
    return REMEDY["readable" if "reading Python" in why or level == "none" else level]

CHILD = Path(__file__).with_name("student_process.py")
MAX_STRIKES = 2  # crashes or timeouts of one module before its checks stop running
LOG_TAIL = 1500
MAX_ANSWER = 64 << 20  # bytes of one answer; requests whose answers are bounded tighter pass their own limit
#: What student code may write. At the namespaces level its /tmp (and home) is a tmpfs of `tmp_bytes` and its
#: copy of the submission a tmpfs of `copy_bytes` (at least twice the copy's size), each with at most `files`
#: files and folders (autograder/student_process.py). At the other levels its copy and its home are folders on the disk,
#: held to the same totals by a guard (autograder/diskguard.py).
WRITABLE = {"tmp_bytes": 256 << 20, "copy_bytes": 64 << 20, "files": 4096}
#: What the student process never sees, even where it cannot be hidden by namespaces it is never copied.
INSTRUCTOR_ONLY = ("autograder", "solutions", "assignments", "tests", "examples", "benchmarks", ".git")


@dataclass(frozen=True)
class Limits:
    """Resource limits of each student process (None: no limit). Hitting one ends only student code."""

    cpu_seconds: float | None = 60  # CPU time of the whole process (all checks of one grading)
    memory_bytes: int | None = 4 << 30  # address space: a memory bomb fails, not the machine
    processes: int | None = 64  # processes and threads: a fork bomb stops here
    output_bytes: int | None = 1 << 20  # what student code may print or write to files

    def describe(self, which):
        value = getattr(self, which)
        if which in ("memory_bytes", "output_bytes"):
            for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
                if value >= size:
                    return f"{value / size:g} {unit}"
            return f"{value} bytes"
        return f"{value:g} s" if which == "cpu_seconds" else str(value)




class GraderUnavailable(Exception):
    """The grader cannot run student code here (isolation refused, a student process that cannot start).

    Never the student's fault: `grade` exits 2 with this message, `grade-all` records an `error` row
    (no score), and no report turns it into a 0.
    """


class StudentError(Exception):
    """Student code failed: it raised, crashed, hung, or is missing.

    `kind` is one of "missing", "import" (importing the module raised),
    "raised", "crashed", "timeout", "bad-return", "gave-up". For "import" and
    "raised", `exc_type`, `mro`, `traceback` and `detail` (the exception's own
    message, as the student process sent it) describe the student's exception.
    """

    def __init__(self, message, kind, exc_type=None, mro=(), traceback="", detail=""):
        super().__init__(message)
        self.kind = kind
        self.exc_type = exc_type
        self.mro = tuple(mro)
        self.traceback = traceback
        self.detail = detail

    def raised(self, name):
        """True when the student's code raised `name` (or a subclass of it)."""
        return self.kind == "raised" and name in self.mro


# The environments of the kit's processes, as allow-lists: no token or CI secret of the grading machine
# reaches a process that does not need it, and none reaches student code.
#: what a student process keeps of the grader's environment (its HOME and TMPDIR are its own)
STUDENT_ENV = ("PATH", "LANG", "LC_ALL", "SYSTEMROOT", "CUDA_VISIBLE_DEVICES", "LD_LIBRARY_PATH")
#: what the trusted grader processes keep (the hidden graders, run by pytest): also the venv, the kit's test
#: switches (MHA_REFUSE) and the batch's folder of measurements (MHA_BATCH_DIR)
GRADER_ENV = (*STUDENT_ENV, "HOME", "TMPDIR", "VIRTUAL_ENV", "MHA_REFUSE", "MHA_BATCH_DIR")


def student_env(home) -> dict[str, str]:
    """The environment of a student process: STUDENT_ENV, its own HOME, one thread per library."""
    env = {k: os.environ[k] for k in STUDENT_ENV if k in os.environ}
    env.update(HOME=str(home), TMPDIR=str(home), OMP_NUM_THREADS="1", MKL_NUM_THREADS="1",
               PYTHONDONTWRITEBYTECODE="1", PYTHONHASHSEED="0")
    return env


def grader_env() -> dict[str, str]:
    """The environment of the grading processes: GRADER_ENV, and imports that start at the kit's root."""
    env = {k: os.environ[k] for k in GRADER_ENV if k in os.environ}
    return {**env, "PYTHONPATH": str(ROOT), "PYTHONDONTWRITEBYTECODE": "1"}


def refusals(probe):
    """Confinement steps to refuse on purpose, from MHA_REFUSE (the kit's tests): "mount,landlock" refuses
    them everywhere, "mount@student" only in real student processes (not in the probes), so that the engine's
    handling of a student process that cannot start can be seen."""
    out = []
    for item in filter(None, (x.strip() for x in os.environ.get("MHA_REFUSE", "").split(","))):
        step, _, where = item.partition("@")
        if not where or (where == "student" and not probe):
            out.append(step)
    return out


def _read_exactly(fd, n, deadline):
    """`n` bytes from `fd`; TimeoutError past `deadline` (a time.monotonic() figure, or a batchlock.Deadline),
    EOFError when the writer is gone first."""
    parts, left = [], n
    while left:
        wait = deadline.left() if isinstance(deadline, batchlock.Deadline) else deadline - time.monotonic()
        if wait <= 0:
            raise TimeoutError
        if not select.select([fd], [], [], wait)[0]:
            continue  # the deadline again: a batch's measurement may have moved it
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            raise EOFError
        parts.append(chunk)
        left -= len(chunk)
    return b"".join(parts)


def _read_handshake(fd, deadline):
    """The student process's first frame (JSON); EOFError or TimeoutError when it ends or hangs first."""
    (size,) = struct.unpack(">Q", _read_exactly(fd, 8, deadline))
    if size > 1 << 16:
        raise ValueError(f"a handshake of {size} bytes")
    answer = json.loads(_read_exactly(fd, size, deadline))
    if not isinstance(answer, dict):
        raise ValueError("a handshake that is not an object")
    return answer


_PROBED = {}
_PROBE_LOCK = threading.Lock()


def probe(level, python=sys.executable):
    """Why a student process cannot be confined at `level` here, or None when it can.

    Starts one throwaway process that confines itself at that level, applies the limits, checks it can
    still read Python and torch, and exits before importing torch (about 0.1 s); cached per process.
    """
    key = (python, level, tuple(refusals(True)))
    with _PROBE_LOCK:
        if key not in _PROBED:
            _PROBED[key] = _probe(level, python)
        return _PROBED[key]


def _probe(level, python):
    with tempfile.TemporaryDirectory(prefix="mha-probe-") as tmp:
        tmp = Path(tmp)
        os.chmod(tmp, 0o711)
        for name in ("work", "home", "root"):
            (tmp / name).mkdir(mode=0o700)
        config = {"probe": True, "isolation": level, "log": str(tmp / "log"), "cwd": str(tmp / "work"),
                  "home": str(tmp / "home"), "root": str(tmp / "root"), "limits": asdict(Limits()),
                  "writable": WRITABLE, "forbidden": forbidden_paths(), "refuse": refusals(True)}
        try:
            proc = subprocess.Popen([python, "-I", str(CHILD), json.dumps(config)], stdin=subprocess.DEVNULL,
                                    stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=tmp / "work",
                                    env=student_env(tmp / "home"), start_new_session=True)
        except OSError as exc:
            return f"cannot start {python}: {exc}"
        try:
            answer = _read_handshake(proc.stdout.fileno(), time.monotonic() + 60)
        except (EOFError, TimeoutError, ValueError, struct.error) as exc:
            log = (tmp / "log").read_text(errors="replace").strip().splitlines()[-1:] if (tmp / "log").exists() else []
            answer = {"ready": False, "error": f"the probe process ended without a word ({type(exc).__name__}"
                                               f"{': ' + log[0][:300] if log else ''})"}
        finally:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except OSError:
                pass
            proc.wait()
            proc.stdout.close()
    if answer.get("ready") and answer.get("isolation") == level:
        return None
    return str(answer.get("error") or "the probe did not confirm the level")


def choose_isolation(requested="auto", require=None, python=sys.executable):
    """The level student code will run at: `requested`, or with "auto" the strongest that works here.

    Raises GraderUnavailable, naming the cause and the remedy, when the requested level does not work or
    the level is below `require`.
    """
    if requested not in ("auto", *LEVELS):
        raise ValueError(f"unknown isolation level {requested!r}")
    tried = {}
    for level in LEVELS if requested == "auto" else (requested,):
        tried[level] = probe(level, python)
        if tried[level] is None:
            break
    else:
        raise GraderUnavailable(f"cannot confine student code at {' or '.join(tried)} isolation here "
                                f"{_why_and_remedy(tried)}")
    if require is not None and LEVELS.index(level) > LEVELS.index(require):
        raise GraderUnavailable(f"--require-isolation {require}, but the strongest level that works here is "
                                f"{level} {_why_and_remedy(tried)}")
    return level


def _why_and_remedy(tried):
    """"(level: why; ...). Remedy: ..." for the levels of `tried` (level -> why not, or None) that failed."""
    refused = {lvl: why for lvl, why in tried.items() if why}
    causes = "; ".join(f"{lvl}: {why}" for lvl, why in refused.items())
    remedies = " ".join(sorted({f"{remedy(lvl, why).capitalize()}." for lvl, why in refused.items()}))
    return f"({causes}). Remedy: {remedies}"


def forbidden_paths(*extra):
    """What a student process never sees: the kit's instructor files, and `extra` (its own original)."""
    return [str(ROOT / name) for name in INSTRUCTOR_ONLY] + [str(Path(p).resolve()) for p in extra]


def remove_tree(path):
    """Remove `path` and everything under it, also folders that student code made unreadable (chmod 000)."""
    def unlock(func, name, _exc):
        try:
            os.chmod(os.path.dirname(name), 0o700)
            if os.path.isdir(name) and not os.path.islink(name):
                os.chmod(name, 0o700)
            func(name)
        except OSError:
            pass

    if os.path.lexists(path):
        shutil.rmtree(path, onerror=unlock)


class _Forked(Worker):
    """A student process forked by the warm zygote, with the protocol pipes of a Popen."""

    def __init__(self, address, config):
        to_child, self_in = os.pipe()
        self_out, from_child = os.pipe()
        try:
            super().__init__(address, config, fds=(to_child, from_child))
        except BaseException:
            os.close(self_in)
            os.close(self_out)
            raise
        finally:
            os.close(to_child)
            os.close(from_child)
        self.stdin = os.fdopen(self_in, "wb")
        self.stdout = os.fdopen(self_out, "rb")


class Sandbox:
    """One student process serving the requests of a whole grading run."""

    def __init__(self, submission, *, call_timeout=10.0, start_timeout=60.0, python=sys.executable,
                 limits=Limits(), isolation="auto", zygote=None, intake=None):
        self.submission = Path(submission)
        self.call_timeout = call_timeout
        self.start_timeout = start_timeout
        self.python = python
        self.limits = limits
        self.level = isolation  # "auto" until the first start decides (choose_isolation)
        self.zygote = zygote  # address of a warm student zygote (autograder.forkserver), or None
        self.isolation = None  # how the last student process was confined, as it reported
        # what the engine's intake left out ({"missing": {module: why}, "source": the original submission})
        self.intake = intake or {}
        self.refused = {}  # file -> why the copy below left it out (a link, a FIFO, too large)
        self.available = {m for m in MODULES if _intake.is_regular(self.submission / f"{m}.py")}
        self._tmp = Path(tempfile.mkdtemp(prefix="mha-sandbox-"))
        os.chmod(self._tmp, 0o711)  # a student uid of its own may pass through to its copy, never list
        self._work = self._tmp / "work"
        self._home = self._tmp / "home"
        self._log = self._tmp / "student-output.log"
        self._proc = None
        self._kill_lock = threading.Lock()  # _kill: one thread ends a process
        self._guard = None  # the disk guard of the student process (autograder/diskguard.py), at some levels
        self._ready = False
        self._handles = itertools.count(1)
        self._objects = {}  # handle -> (generation, module)
        self._generation = 0
        self.strikes = {}  # module -> [messages]
        self.restarts = 0
        self.started_at = self.ready_at = None  # wall-clock times of the last start, for the benchmark

    # -- process management -------------------------------------------------
    def start(self):
        """Start the child now (it imports torch while the caller does other work)."""
        if self._proc is not None:
            return
        if self.level == "auto":
            self.level = choose_isolation("auto", python=self.python)
        for folder in (self._work, self._home):  # each student process starts with an empty home and a fresh copy
            remove_tree(folder)
            folder.mkdir(mode=0o700)
        for name in os.listdir(self.submission):  # regular files only, never through a link (autograder.submission.intake)
            if name.endswith(".py"):
                try:
                    data = _intake.read_regular(self.submission / name, _intake.MAX_FILE[".py"], name)
                except _intake.Refused as exc:
                    self.refused[name] = str(exc)
                    self.available.discard(name[:-3])
                    continue
                _intake.write_new(self._work / name, data)
        self._generation += 1
        self._ready = False
        self.started_at = time.time()
        root = self._tmp / f"root-{self._generation}"
        root.mkdir()
        self._log_mark = self._log.stat().st_size if self._log.exists() else 0
        config = {"log": str(self._log), "cwd": str(self._work), "home": str(self._home), "root": str(root),
                  "isolation": self.level, "limits": asdict(self.limits), "writable": WRITABLE,
                  "env": student_env(self._home),
                  "forbidden": forbidden_paths(self.submission, *filter(None, [self.intake.get("source")])),
                  "refuse": refusals(False)}
        self._proc = None
        with batchlock.spawning():  # in a class run, a measurement stops this process from its first instant
            self._spawn(config)
        self._guard_disk()

    def _spawn(self, config):
        if self.zygote:
            try:
                self._proc = _Forked(self.zygote, config)
            except OSError:
                self.zygote = None  # the zygote is gone: start cold processes from now on
        if self._proc is None:
            self._proc = subprocess.Popen(
                [self.python, "-I", str(CHILD), json.dumps(config)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                cwd=self._work, env=config["env"], start_new_session=True,
            )
        batchlock.register(self._proc.pid)  # in a class run, other gradings' speed checks stop this tree

    def _guard_disk(self):
        if self.level != "namespaces":  # folders on the disk, not size-capped mounts: a guard holds them to it
            copy = sum(f.stat().st_size for f in self._work.iterdir())
            self._guard = DiskGuard([self._work, self._home],
                                    WRITABLE["tmp_bytes"] + max(WRITABLE["copy_bytes"], 2 * copy),
                                    2 * WRITABLE["files"], functools.partial(self._disk_full, self._proc)).start()

    def _disk_full(self, proc, why):
        """The disk guard's call (from its thread): end the student's tree; its keeper ends all of it."""
        try:
            os.kill(proc.pid, signal.SIGTERM)
            os.kill(proc.pid, signal.SIGCONT)  # a keeper stopped by a freeze acts on it
        except OSError:
            pass

    def _kill(self):
        """End the student process and everything it started: its keeper (see student_process.py) ends them all on
        SIGTERM; the process group is killed outright if the keeper does not finish in time.

        Safe from two threads at once (a caller closing the sandbox while a call in another thread fails
        because of it): the process is taken under a lock, and only the thread that took it ends it."""
        with self._kill_lock:
            proc, self._proc = self._proc, None
        if proc is None:
            return
        if self._guard is not None:
            self._guard.stop()
        batchlock.unregister(proc.pid)
        try:
            os.kill(proc.pid, signal.SIGTERM)
            os.kill(proc.pid, signal.SIGCONT)  # a keeper stopped by a freeze (autograder/freeze.py) acts on it
            proc.wait(timeout=3)
        except (OSError, subprocess.TimeoutExpired):  # no keeper yet, or one that does not finish
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        for stream in (proc.stdin, proc.stdout):
            try:
                stream.close()
            except OSError:
                pass
        if isinstance(proc, _Forked):
            proc.close()

    def close(self):
        self._kill()
        remove_tree(self._tmp)

    def process_tree_root(self):
        """The pid whose descendants are every process of the student side (its keeper), or None.

        The keeper is a child subreaper: every process student code starts, daemons included, stays under
        it, so stopping this tree stops all student code (autograder/freeze.py)."""
        return None if self._proc is None else self._proc.pid

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.close()

    def output_tail(self, limit=LOG_TAIL):
        """The last `limit` characters the student's code printed."""
        try:
            text = self._log.read_bytes()[-limit:].decode("utf-8", "replace")
        except OSError:
            return ""
        return text

    # -- framing ------------------------------------------------------------
    def _write(self, obj):
        import torch  # imported here, not at the top: the child starts before the grader imports torch

        buf = io.BytesIO()
        torch.save(obj, buf, _use_new_zipfile_serialization=False)  # faster for small messages
        data = buf.getvalue()
        self._proc.stdin.write(struct.pack(">Q", len(data)) + data)
        self._proc.stdin.flush()

    def _read(self, deadline, limit=MAX_ANSWER):
        """One answer (autograder/wire.py); wire.Malformed for a frame over `limit` bytes or out of format."""
        fd = self._proc.stdout.fileno()
        (size,) = struct.unpack(">Q", _read_exactly(fd, 8, deadline))
        if size > limit:
            raise wire.Malformed(f"an answer of {size / (1 << 20):.1f} MiB (no answer to this request needs more "
                                 f"than {limit / (1 << 20):g} MiB)")
        return wire.decode(_read_exactly(fd, size, deadline))

    def _ensure_ready(self):
        """Start the student process if needed and wait for its handshake; GraderUnavailable if it fails.

        No student code runs before the handshake, so a process that fails before it is the grader's failure.
        """
        if self._proc is None:
            self.start()
            self.restarts += self._generation > 1
        if self._ready:
            return
        try:
            answer = _read_handshake(self._proc.stdout.fileno(), batchlock.Deadline(self.start_timeout))
            why = None if answer.get("ready") else str(answer.get("error", "no reason given"))
        except TimeoutError:
            why = f"no handshake within {self.start_timeout:g} s"
        except (EOFError, OSError, ValueError, struct.error) as exc:
            code = self._exit_code()
            why = f"it ended before its handshake (exit code {code}; {type(exc).__name__})"
            tail = self._log_since_start(400)
            if tail:
                why += f"; its last output: {tail!r}"
        if why is not None:
            self._kill()
            raise GraderUnavailable(f"the process for student code could not start at {self.level} isolation: "
                                    f"{why}")
        self.isolation = answer.get("isolation")
        self._ready = True
        self.ready_at = time.time()

    def _exit_code(self):
        """How the student process ended (negative: the signal), waiting briefly; None if it still runs."""
        if self._proc is None:
            return None
        try:
            return self._proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            return None

    def _log_since_start(self, limit):
        """What the current student process printed before its handshake (no student code: only ours)."""
        try:
            with open(self._log, "rb") as fh:
                fh.seek(self._log_mark)
                return fh.read()[-limit:].decode("utf-8", "replace").strip()
        except OSError:
            return ""

    # -- requests -----------------------------------------------------------
    def request(self, owner, op, timeout=None, context="your code", answer_limit=MAX_ANSWER, **fields):
        """Send one request that runs code of the module `owner`; return the answer dict.

        `context` names the call in messages, e.g. "split_heads(float32 tensor (2, 3, 8), 2)";
        `answer_limit`: the most bytes an answer to it may take.
        """
        module = owner
        if module not in self.available:
            why = self.intake.get("missing", {}).get(module) or self.refused.get(f"{module}.py")
            raise StudentError(why or f"{module}.py is missing from the submission", "missing")
        if len(self.strikes.get(module, ())) >= MAX_STRIKES:
            raise StudentError(
                f"not run: {module}.py already crashed or timed out {MAX_STRIKES} times "
                f"({self.strikes[module][-1]})", "gave-up")
        timeout = self.call_timeout if timeout is None else timeout
        batchlock.student_call()  # in a class run, none starts while another grading measures speed
        self._ensure_ready()
        try:
            self._write({"op": op, **fields})
            # a measurement of a neighbour may stop this call's process: that time is not counted
            answer = self._read(batchlock.Deadline(timeout), answer_limit)
        except TimeoutError:
            self._strike(module, f"no answer within {timeout:g} s")
            raise StudentError(f"{context} did not finish within {timeout:g} s "
                               "(an infinite loop, or far too slow?)", "timeout") from None
        except (EOFError, OSError, struct.error):
            code = self._exit_code()
            disk = self._guard.why if self._guard is not None else None
            self._strike(module, f"exit code {code}" if disk is None else "wrote too much to disk")
            tail = self.output_tail(300).strip()
            hint = f" Its last output: {tail!r}" if tail else ""
            if disk is not None:
                cap = f"{self._guard.max_bytes >> 20} MiB in {self._guard.max_files} files and folders"
                raise StudentError(f"the process running your code was stopped during {context}: its folders held "
                                   f"{disk}, more than student code may write ({cap}).{hint}", "crashed") from None
            if code is not None and code < 0:
                raise StudentError(f"the process running your code {self._killed(-code)} during {context}.{hint}",
                                   "crashed") from None
            raise StudentError(f"the process running your code exited (exit code {code}) during {context}: "
                               f"sys.exit, os._exit or a crash in {module}.py?{hint}", "crashed") from None
        except wire.Refused as exc:  # a sparse or quantized tensor: the student's answer, which cannot be checked
            raise StudentError(f"{context} returned {exc}: only dense tensors (on the CPU, a GPU or the meta "
                               "device) can be checked", "bad-return") from None
        except Exception as exc:  # an answer out of format (wire.Malformed), or too large
            self._strike(module, "unreadable answer")
            detail = str(exc) if isinstance(exc, wire.Malformed) else type(exc).__name__
            raise StudentError(f"{context} returned something that is not a plain tensor ({detail})",
                               "bad-return") from None
        if not isinstance(answer, dict):
            self._strike(module, "unreadable answer")
            raise StudentError(f"{context} answered out of protocol (a request handler replaced by student "
                               "code?)", "bad-return")
        if not answer.get("ok"):
            err = _error_fields(answer.get("error"))
            detail = (f": {err['message']}" if err["message"] else "") + self._limit_hint(err)
            if err.get("during_import"):
                raise StudentError(f"importing {err['during_import']}.py raised {err['type']}{detail}",
                                   "import", err["type"], err["mro"], err.get("traceback", ""))
            raise StudentError(f"{context} raised {err['type']}{detail}", "raised", err["type"],
                               err["mro"], err.get("traceback", ""), err["message"])
        return answer

    def _killed(self, sig):
        """How a student process that died of signal `sig` reads in a message."""
        if sig == signal.SIGXCPU or (sig == signal.SIGKILL and self.limits.cpu_seconds):
            cpu = f"used up its CPU time ({self.limits.describe('cpu_seconds')}, the limit for one grading)"
            return cpu if sig == signal.SIGXCPU else f"was killed (SIGKILL: {cpu}, or it ran out of memory)"
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = f"signal {sig}"
        return f"was killed by {name}" + (" (a crash in native code)" if sig == signal.SIGSEGV else "")

    def _limit_hint(self, err):
        """Point at the limit behind an exception that comes from one."""
        text = f"{err['type']} {err['message']}"
        if self.limits.memory_bytes and ("MemoryError" in err["mro"] or "allocate memory" in text):
            return f" (exceeded the memory limit: a student process may use {self.limits.describe('memory_bytes')})"
        if self.limits.output_bytes and "File too large" in text:
            return f" (exceeded the output limit: student code may print or write {self.limits.describe('output_bytes')})"
        if self.limits.processes and "Resource temporarily unavailable" in text and "fork" in text.lower():
            return f" (exceeded the process limit: {self.limits.processes} processes and threads)"
        return ""

    def _strike(self, module, message):
        self.strikes.setdefault(module, []).append(message)
        self._kill()

    # -- convenience --------------------------------------------------------
    def call(self, module, name, *args, seed=None, capture_args=False, timeout=None, **kwargs):
        """Call `module.name(*args, **kwargs)` in the child; return (value, args_after)."""
        answer = self.request(module, "call", timeout, signature(name, args, kwargs), module=module,
                              name=name, args=list(args), kwargs=kwargs, seed=seed, capture_args=capture_args)
        return answer.get("value"), answer.get("args_after")

    def new(self, module, name, *args, seed=None, timeout=None, **kwargs):
        """Build `module.name(*args, **kwargs)` in the child; return a RemoteModule."""
        handle = next(self._handles)
        self.request(module, "new", timeout, signature(name, args, kwargs), module=module, name=name,
                     args=list(args), kwargs=kwargs, seed=seed, new_handle=handle)
        remote = RemoteModule(self, module, name, handle, self._generation)
        remote.args, remote.kwargs = tuple(args), dict(kwargs)  # how it was built (autograder/graders/blame.py)
        return remote


def _error_fields(err):
    """The error of a failed answer, as the fields that messages use, whatever the student process sent."""
    err = err if isinstance(err, dict) else {}
    text = lambda v: v if isinstance(v, str) else ""  # noqa: E731
    mro = err.get("mro")
    return {"type": text(err.get("type")) or "an unnamed error", "message": text(err.get("message")),
            "mro": [m for m in mro if isinstance(m, str)] if isinstance(mro, list) else [],
            "traceback": text(err.get("traceback")), "during_import": text(err.get("during_import")) or None}


def torch_tensor():
    import torch  # imported late: the child starts before the grader imports torch

    return torch.Tensor


def describe_tensor(t):
    """How a tensor reads in a message: "float32 tensor (2, 3)", "... on meta"."""
    dev = "" if t.device.type == "cpu" else f" on {t.device}"
    return f"{str(t.dtype).replace('torch.', '')} tensor {tuple(t.shape)}{dev}"


def _short(value):
    import torch

    if isinstance(value, torch.Tensor):
        return describe_tensor(value)
    if isinstance(value, dict) and "__pattern_dropout__" in value:
        return "a dropout module"
    return repr(value)


def signature(name, args, kwargs):
    """How a call reads in a message: "split_heads(float32 tensor (2, 3, 8), 2)"."""
    parts = [_short(a) for a in args] + [f"{k}={_short(v)}" for k, v in kwargs.items()]
    return f"{name}({', '.join(parts)})"


class RemoteModule:
    """A handle on an nn.Module that lives in the student process."""

    def __init__(self, sandbox, module, name, handle, generation):
        self.sandbox = sandbox
        self.module = module
        self.name = name
        self.handle = handle
        self.generation = generation

    def _request(self, op, context, timeout=None, **fields):
        if self.generation != self.sandbox._generation:
            raise StudentError(f"{self.name} was lost when an earlier check crashed the process", "gave-up")
        return self.sandbox.request(self.module, op, timeout, context, handle=self.handle, **fields)

    def __call__(self, *args, train=False, seed=None, capture_args=False, timeout=None):
        """Run forward (in eval mode unless train=True); return (value, args_after)."""
        mode = "train" if train else "eval"
        answer = self._request("call", signature(f"{self.name}.forward", args, {}) + f" in {mode} mode",
                               timeout, args=list(args), kwargs={}, train=train, seed=seed,
                               capture_args=capture_args)
        return answer.get("value"), answer.get("args_after")

    def load(self, params):
        """Copy trusted parameter values into the student's module by name."""
        self._request("load", f"loading weights into {self.name}", params=dict(params))

    def state(self):
        """Named parameters (deduplicated), all parameter names, buffers and submodule names."""
        return self._request("state", f"reading the parameters of {self.name}")

    def to(self, device=None, dtype=None):
        target = ", ".join(str(x) for x in (device, dtype) if x is not None)
        self._request("to", f"{self.name}.to({target})", device=device, dtype=dtype)
        return self

    def count_ops(self, *args):
        """aten operator name -> number of calls during one forward pass."""
        return self._request("count_ops", signature(f"{self.name}.forward", args, {}), args=list(args))["counts"]

    def time(self, inputs, discard=False, timeout=None):
        """Run one forward pass per input (`inputs` stacked on dim 0) in one request; return the outputs.

        For the caller to time (autograder.timing). `discard`: send no outputs back.
        """
        context = signature(f"{self.name}.forward", [inputs[0]], {}) + f" x {len(inputs)}"
        # The outputs of one block are len(inputs) tensors of the size of an input, give or take a dtype and
        # a last dimension: an answer far larger than that is refused before it is read.
        limit = (1 << 20) + 16 * inputs.numel() * inputs.element_size()
        outputs = self._request("time", context, timeout, answer_limit=limit, inputs=inputs,
                                discard=discard).get("outputs")
        if type(outputs) is torch_tensor():
            outputs = list(outputs.unbind(0))
        if not isinstance(outputs, list) or len(outputs) != (0 if discard else len(inputs)):
            raise StudentError(f"{context} answered without its outputs (a request handler replaced by "
                               "student code?)", "bad-return")
        return outputs
