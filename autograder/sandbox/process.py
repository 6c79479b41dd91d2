"""The student process, as the trusted side runs it: a fresh copy of the submission and an empty home for each
start, started cold (`python -I student_process.py CONFIG`, at the level isolation.py chose) or forked by the warm
student zygote (forkserver.py), a disk guard where no mount caps what it writes (diskguard.py), its handshake, its
log, and its end with everything it started (its keeper, keeper.py, ends them all on SIGTERM).

A child that cannot start (before its handshake, no student code has run) raises `GraderUnavailable` (errors.py):
the grader's failure, never the student's 0. Sandbox (client.py) is this process with the requests it serves.
"""
from __future__ import annotations

import functools
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from autograder import MODULES
from autograder.sandbox import batchlock, uids
from autograder.sandbox.diskguard import DiskGuard
from autograder.sandbox.errors import GraderUnavailable
from autograder.sandbox.forkclient import Worker
from autograder.sandbox.forkserver import end_tree
from autograder.sandbox.isolation import CHILD, choose_isolation, read_handshake, refusals
from autograder.sandbox.limits import WRITABLE, Limits, forbidden_paths, student_env
from autograder.submission import intake as _intake

LOG_TAIL = 1500
KEEPER_SECONDS = 3.0  # how long the keeper may take to end the student's tree on SIGTERM (keeper.py)


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


class StudentProcess:
    """The student process of a submission, one at a time: started on demand, restarted after a crash, ended with
    everything it started. Sandbox (client.py) sends it requests."""

    def __init__(self, submission, *, start_timeout=60.0, python=sys.executable, limits=Limits(), isolation="auto",
                 zygote=None, intake=None, parts=MODULES):
        self.submission = Path(submission)
        self.start_timeout = start_timeout
        self.python = python
        self.limits = limits
        self.level = isolation  # "auto" until the first start decides (choose_isolation)
        self.zygote = zygote  # address of a warm student zygote (autograder.sandbox.forkserver), or None
        self.isolation = None  # how the last student process was confined, as it reported
        self._cuda_problem = None  # why CUDA cannot run in the student process, as it reported (cuda_problem)
        # what the engine's intake left out ({"missing": {module: why}, "source": the original submission})
        self.intake = intake or {}
        self.refused = {}  # file -> why the copy below left it out (a link, a FIFO, too large)
        # the parts handed out (autograder.MODULES, or a course file's, an optional part included): the student
        # modules the graders may call, and the files a fault is charged to
        self.parts = tuple(parts)
        self.available = {m for m in self.parts if _intake.is_regular(self.submission / f"{m}.py")}
        self._tmp = Path(tempfile.mkdtemp(prefix="mha-sandbox-"))
        os.chmod(self._tmp, 0o711)  # a student uid of its own may pass through to its copy, never list
        self._work = self._tmp / "work"
        self._home = self._tmp / "home"
        self._log = self._tmp / "student-output.log"
        self._proc = None
        self._kill_lock = threading.Lock()  # _kill: one thread ends a process
        self._guard = None  # the disk guard of the student process (autograder/sandbox/diskguard.py), at some levels
        self._ready = False
        self._generation = 0
        self.restarts = 0
        self.started_at = self.ready_at = None  # wall-clock times of the last start, for the benchmark
        self._lease = None  # as root: the uid the student processes run as, leased until close (uids.py)

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
        for name in os.listdir(self.submission):  # regular files only, never through a link (submission.intake)
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
                  "isolation": self.level, "limits": self.limits.to_dict(), "writable": WRITABLE,
                  "env": student_env(self._home),
                  "forbidden": forbidden_paths(self.submission, *filter(None, [self.intake.get("source")])),
                  "refuse": refusals(False), "restart": self._generation > 1}
        if os.geteuid() == 0:  # student code never runs as root: a uid no other live grading holds
            config["uid"] = self._sandbox_uid()
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

    def _sandbox_uid(self):
        """The uid leased for this grading's student processes (every restart runs as the same one, released by
        `close`); GraderUnavailable when none can be leased."""
        if self._lease is None:
            try:
                self._lease = uids.allocate()
            except OSError as exc:
                raise GraderUnavailable(f"no uid for the student process: {exc}") from None
        return self._lease.uid

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
        """End the student process and everything it started: its keeper (see keeper.py) ends them all on
        SIGTERM; if the keeper does not finish within KEEPER_SECONDS, everything under it is killed from here,
        then the keeper (forkserver.end_tree: killed first, it would hand a daemon on to init).

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
            os.kill(proc.pid, signal.SIGCONT)  # a keeper stopped by a freeze (autograder/sandbox/freeze.py) acts on it
            proc.wait(timeout=KEEPER_SECONDS)
        except (OSError, subprocess.TimeoutExpired):  # no keeper yet, or one that does not finish in time (a
            # neighbour's freeze that began before unregister() may stop it again): all of it, under it first
            end_tree(proc.pid)
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
        if self._lease is not None:  # any process still running as the uid goes with it
            self._lease.release()
            self._lease = None
        remove_tree(self._tmp)

    def process_tree_root(self):
        """The pid whose descendants are every process of the student side (its keeper), or None.

        The keeper is a child subreaper: every process student code starts, daemons included, stays under
        it, so stopping this tree stops all student code (autograder/sandbox/freeze.py)."""
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
            answer = read_handshake(self._proc.stdout.fileno(), batchlock.Deadline(self.start_timeout))
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
        self._cuda_problem = answer.get("cuda_problem")
        self._ready = True
        self.ready_at = time.time()

    def cuda_problem(self):
        """Why CUDA cannot run in the student process on this machine, as the process found before any student
        code ran (its handshake); None where it can, or where the machine has no GPU nodes."""
        self._ensure_ready()
        return self._cuda_problem

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
