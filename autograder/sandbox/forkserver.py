"""Warm processes that fork a fresh worker per request (stdlib only).

Importing torch costs about 2 s of CPU, and grading a class used to pay it
twice per submission: once in the trusted grader, once in the student
process. `grade-all` instead starts two warm servers once per run:

* the student zygote (`python -I forkserver.py student ADDR`) has imported
  torch and nothing else (no kit code, no reference, no grader); each student
  process is a fork of it that confines itself (autograder/sandbox/student_process.py) before
  it imports student code;
* the grader server (`python forkserver.py grader ADDR MODULE...`) has
  imported pytest and the modules its owner named (autograder.grade.engine names
  torch, the plugin, the checks and the reference); each grading is a fork of
  it that runs the hidden graders on one submission.

This module knows no other module of the kit: what a server holds warm is
its owner's choice, so the import graph runs one way (engine -> forkserver).

A request is one message on a Unix SOCK_SEQPACKET connection: JSON, plus
file descriptors passed with SCM_RIGHTS. The server forks; the fork calls
`setsid()` and the handler, and exits with its return value. The server
answers {"pid": ...} at once and {"exit": code} (negative: killed by that
signal) when the fork ends. A client that closes its connection early has
its worker's process group killed. A server whose stdin closes kills its
workers and exits, so an owner that dies takes its servers with it.
"""
from __future__ import annotations

import gc
import json
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MAX_MESSAGE = 1 << 16


def kill_group(pid):
    """SIGKILL the process group led by `pid`, and `pid` itself (gone or not ours: nothing to do)."""
    for target in (-pid, pid):
        try:
            os.kill(target, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def serve(address, handler, freeze_imports=False):
    """Run the server loop until stdin closes. `handler(request, fds)` runs in each fork. `freeze_imports`: keep
    what the server imported out of the forks' garbage collections (gc.freeze)."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(address)
    listener.listen(64)
    # a worker's end wakes the loop at once (SIGCHLD through a pipe), so that its owner hears of it without waiting
    # for the poll below
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.set_wakeup_fd(wake_w)
    if freeze_imports:
        gc.freeze()
    os.write(1, b"ready\n")
    by_conn, by_pid = {}, {}
    while True:
        ready, _, _ = select.select([0, listener, wake_r, *by_conn], [], [], 0.5)
        if wake_r in ready:
            while True:
                try:
                    if not os.read(wake_r, 4096):
                        break
                except BlockingIOError:
                    break
        if 0 in ready and not os.read(0, 4096):
            for pid in by_pid:
                kill_group(pid)
            os._exit(0)
        if listener in ready:
            conn, _ = listener.accept()
            try:
                message, fds, _, _ = socket.recv_fds(conn, MAX_MESSAGE, 16)
                request = json.loads(message)
            except (OSError, ValueError):
                conn.close()
                continue
            pid = os.fork()
            if pid == 0:
                code = 70
                try:
                    os.setsid()
                    signal.set_wakeup_fd(-1)
                    os.close(wake_r)
                    os.close(wake_w)
                    listener.close()
                    for other in (conn, *by_conn):
                        other.close()
                    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                    code = handler(request, fds) or 0
                except SystemExit as exc:
                    code = exc.code if isinstance(exc.code, int) else 1
                except BaseException:
                    import traceback

                    traceback.print_exc()
                finally:
                    os._exit(code)
            for fd in fds:
                os.close(fd)
            by_conn[conn], by_pid[pid] = pid, conn
            conn.send(json.dumps({"pid": pid}).encode())
        for conn in [c for c in ready if c in by_conn]:
            try:
                gone = not conn.recv(16)
            except OSError:
                gone = True
            if gone:  # the client gave up on this worker
                kill_group(by_conn[conn])
        while by_pid:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            conn = by_pid.pop(pid, None)
            if conn is not None:
                del by_conn[conn]
                try:
                    conn.send(json.dumps({"exit": os.waitstatus_to_exitcode(status)}).encode())
                except OSError:
                    pass
                conn.close()


class Worker:
    """A forked worker, seen from the client: enough of subprocess.Popen for the sandbox."""

    def __init__(self, address, request, fds=(), timeout=30.0):
        self.args = request
        self.returncode = None
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._sock.settimeout(timeout)
        self._sock.connect(address)
        socket.send_fds(self._sock, [json.dumps(request).encode()], list(fds))
        self.pid = json.loads(self._sock.recv(MAX_MESSAGE))["pid"]

    def poll(self):
        return self.wait(0) if self.returncode is None else self.returncode

    def wait(self, timeout=None):
        if self.returncode is not None:
            return self.returncode
        ready, _, _ = select.select([self._sock], [], [], timeout)
        if not ready:
            if timeout == 0:
                return None
            raise subprocess.TimeoutExpired("worker", timeout)
        try:
            message = self._sock.recv(MAX_MESSAGE)
            self.returncode = json.loads(message)["exit"] if message else -signal.SIGKILL
        except (OSError, ValueError, KeyError):
            self.returncode = -signal.SIGKILL
        self._sock.close()
        return self.returncode

    def kill(self):
        kill_group(self.pid)

    def close(self):
        """Forget the worker; the server kills it if it is still running."""
        self._sock.close()


class Server:
    """A running fork server, owned by this process (a context manager)."""

    def __init__(self, kind, *, python=sys.executable, env=None, isolated=False, start_timeout=120.0, preload=(),
                 wait=True):
        """`preload`: for a grader server, the modules it imports once (by name, from the kit's root).
        `wait=False`: return once the process is started; `wait_ready()` then waits for it (servers that import
        torch each can then start side by side)."""
        self._kind, self._ready = kind, False
        self._dir = tempfile.mkdtemp(prefix=f"mha-{kind}-server-")
        os.chmod(self._dir, 0o700)
        self.address = os.path.join(self._dir, "socket")
        flags = ["-I"] if isolated else []
        self._proc = subprocess.Popen([python, *flags, str(Path(__file__).resolve()), kind, self.address,
                                       *preload],
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env,
                                      start_new_session=True)
        self._deadline = time.monotonic() + start_timeout
        if wait:
            self.wait_ready()

    def wait_ready(self):
        """Wait until the server says it is ready; RuntimeError (and the server closed) if it does not within
        its start_timeout, counted from its start."""
        if self._ready:
            return
        left = self._deadline - time.monotonic()
        ready, _, _ = select.select([self._proc.stdout], [], [], max(left, 0.0))
        # select bounds the wait; a "ready" already sent when the owner asks late (wait=False) counts
        if not ready or self._proc.stdout.readline() != b"ready\n":
            self.close()
            raise RuntimeError(f"the {self._kind} fork server did not start")
        self._ready = True

    def close(self):
        if self._proc is not None:
            try:
                self._proc.stdin.close()
                self._proc.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                self._proc.kill()
                self._proc.wait()
            self._proc.stdout.close()
            self._proc = None
        for remove, path in ((os.unlink, self.address), (os.rmdir, self._dir)):  # no socket if it never started
            try:
                remove(path)
            except OSError:
                pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _student_handler():
    import importlib.util

    spec = importlib.util.spec_from_file_location("student_process", Path(__file__).with_name("student_process.py"))
    child = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(child)
    child._warm_up()  # in this process, once: every fork starts warm
    return child.forked


def _grader_handler(preload):
    import importlib

    import pytest

    for name in preload:  # imported once here, not once per grading
        importlib.import_module(name)

    def run(request, fds):
        os.chdir(request["cwd"])
        log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(log, 1)
        os.dup2(log, 2)
        return pytest.main([*request["args"], *(["--key-fd", str(fds[0])] if fds else [])])

    return run


if __name__ == "__main__":
    kind, address, preload = sys.argv[1], sys.argv[2], sys.argv[3:]
    if kind == "grader":  # the kit's root (autograder/sandbox/ up two), not this file's folder, is where imports start
        sys.path[0] = str(Path(__file__).resolve().parent.parent.parent)
    handler = _grader_handler(preload) if kind == "grader" else _student_handler()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the owner decides when to stop
    # The grader server freezes what it imported: pytest's end-of-session collection walked all of torch's objects
    # in every grading (~80 ms). The student zygote does not: a student process collects garbage as a cold one
    # does, the behaviour under which the speed checks' thresholds were measured (a loop over heads allocates).
    serve(address, handler, freeze_imports=kind == "grader")
