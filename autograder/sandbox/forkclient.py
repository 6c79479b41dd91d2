"""The owner's side of the warm fork servers (forkserver.py): `Server` starts one and owns it, `Worker` asks one for
a fork and follows it, as much of subprocess.Popen as the sandbox needs.

A request travels as forkserver.py's docstring says: a socketpair of the client's own, one end sent through the
server's channel with the request (JSON, and descriptors with SCM_RIGHTS); the server answers {"pid": ...} at once
and {"exit": code} when the fork ends. It imports nothing of the kit but forkserver.py.
"""
from __future__ import annotations

import json
import os
import secrets
import select
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from autograder.sandbox.forkserver import MAX_FDS, MAX_MESSAGE, channel_fd, kill_group

#: the fork server's script, started by `Server`
SERVER = Path(__file__).resolve().with_name("forkserver.py")


class Worker:
    """A forked worker, seen from the client: enough of subprocess.Popen for the sandbox."""

    def __init__(self, address, request, fds=(), timeout=30.0):
        """`address`: the server's channel ("fd:N", a descriptor this process holds); OSError when the server
        is gone or does not answer within `timeout` seconds."""
        self.args = request
        self.returncode = None
        fds = list(fds)
        if len(fds) > MAX_FDS:
            raise ValueError(f"a request carries at most {MAX_FDS} descriptors")
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            ours.settimeout(timeout)
            channel = socket.socket(fileno=os.dup(channel_fd(address)))
            try:
                channel.settimeout(timeout)
                socket.send_fds(channel, [json.dumps(request).encode()], [theirs.fileno(), *fds])
            finally:
                channel.close()
            theirs.close()
            message = ours.recv(MAX_MESSAGE)
            if not message:  # dropped unanswered (a client the server refuses) or the server is gone
                raise ConnectionRefusedError("the fork server did not take the request")
            self.pid = json.loads(message)["pid"]
        except BaseException:
            theirs.close()
            ours.close()
            raise
        self._sock = ours

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
                 wait=True, share=()):
        """`preload`: for a grader server, the modules it imports once (by name, from the kit's root).
        `wait=False`: return once the process is started; `wait_ready()` then waits for it (servers that import
        torch each can then start side by side). `share`: servers whose channels this one's process and its
        forks inherit (the grader server holds the zygote's: its gradings fork student processes).

        `address` is the channel ("fd:N": this process's end); `label`, unique to this server, is on its
        command line and so on every fork's (how the kit's tests recognise them)."""
        self._kind, self._ready = kind, False
        self.label = f"mha-{kind}-server-{secrets.token_hex(6)}"
        self._channel, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.address = f"fd:{self._channel.fileno()}"
        flags = ["-I"] if isolated else []
        shared = [channel_fd(other.address) for other in share]
        try:
            self._proc = subprocess.Popen([python, *flags, str(SERVER), kind,
                                           f"fd:{theirs.fileno()}", self.label, *preload],
                                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env,
                                          pass_fds=[theirs.fileno(), *shared], start_new_session=True)
        except BaseException:
            self._channel.close()
            raise
        finally:
            theirs.close()
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
        self._channel.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
