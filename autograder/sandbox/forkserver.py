"""Warm processes that fork a fresh worker per request (stdlib only).

Importing torch costs about 2 s of CPU, and grading a class used to pay it
twice per submission: once in the trusted grader, once in the student
process. `grade-all` instead starts two warm servers once per run:

* the student zygote (`python -I forkserver.py student FD LABEL`) has imported
  torch and nothing else (no kit code, no reference, no grader); each student
  process is a fork of it that confines itself (autograder/sandbox/student_process.py) before
  it imports student code;
* the grader server (`python forkserver.py grader FD LABEL MODULE...`) has
  imported pytest and the modules its owner named (autograder.grade.servers names
  torch, the plugin, the checks and the reference), and run the `warm()` of each
  that has one; each grading is a fork of it that runs the graders on one submission,
  in the server loop of the one that has `serve_graders` (one pytest session for all).

This module knows no other module of the kit: what a server holds warm is
its owner's choice, so the import graph runs one way (servers, engine -> forkclient ->
forkserver). The owner's side, `Server` and `Worker`, is forkclient.py; this
file is the server itself.

No server listens anywhere a process can connect to: there is no named
socket (Landlock does not govern connect() on those, and a student process of
the grader's uid found them in /proc/self/net/unix) and no abstract one. A
server's only way in is its *channel*, one end of a socketpair that it
inherited from its owner (`Server.address`, "fd:N": the other end, a file
descriptor of the owner's, inherited by whoever the owner hands it to: the
grader server holds the zygote's, so that its gradings can fork student
processes). A client makes a socketpair of its own for each request and sends
one end through the channel, with the request: one SOCK_SEQPACKET message,
JSON plus file descriptors passed with SCM_RIGHTS. Before it forks, the server
checks who made that connection (SO_PEERCRED, which the kernel fills in and
no process can forge): the server's own uid, and a process descended from
the server's owner but not from the server itself, so that no student
process, forked by the zygote, could ask even if it held the channel. A
request from anyone else is dropped unanswered.

The server forks; the fork calls `setsid()` and the handler, and exits with
its return value. The server answers {"pid": ...} at once and {"exit": code}
(negative: killed by that signal) when the fork ends. A client that closes
its connection early has its worker killed, with every process under it
(`end_tree`). A server whose stdin closes kills its workers the same way and
exits, so an owner that dies takes its servers with it. Servers are not
dumpable (PR_SET_DUMPABLE 0): a process of the same uid may not ptrace them
nor read their /proc files (memory, environment, descriptors).
"""
from __future__ import annotations

import gc
import json
import os
import select
import signal
import socket
import sys
import struct
import time
from pathlib import Path

MAX_MESSAGE = 1 << 16
MAX_FDS = 16  # file descriptors of one request, its connection aside
RESUME = "resume"  # a handler's return for a fork that goes on in serve()'s caller (grade/prepared.py)
_PR_SET_DUMPABLE = 4


def undumpable():
    """Make this process non-dumpable (PR_SET_DUMPABLE 0): no process of the same uid may ptrace it or open its
    /proc files (mem, environ, fd, maps, cwd); root's processes only. Inherited by forks, reset by exec. False
    where it cannot be set (not Linux)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(ctypes.c_int(_PR_SET_DUMPABLE), ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0),
                          ctypes.c_ulong(0)) == 0
    except (OSError, AttributeError):
        return False


def channel_fd(address) -> int:
    """The file descriptor of a channel address ("fd:N", or N)."""
    if isinstance(address, int):
        return address
    kind, _, number = str(address).partition(":")
    if kind != "fd" or not number.isdigit():
        raise OSError(f"not a fork server's channel: {address!r}")
    return int(number)


def _stat(pid):
    """(state, parent pid) of `pid` (its /proc/<pid>/stat), or None when it cannot be read."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            state, parent = fh.read().rsplit(b")", 1)[1].split()[:2]
        return state, int(parent)
    except (OSError, ValueError, IndexError):
        return None


def peer_allowed(conn, owner, server=None):
    """Whether the process that made the connection `conn` may ask this server: the same uid as this process,
    and a descendant of `owner` (or `owner` itself) whose line of parents does not pass through `server` (this
    server: its forks, student processes at the zygote, never ask). SO_PEERCRED is what the kernel recorded when
    the client made its socketpair: no process can forge it."""
    server = os.getpid() if server is None else server
    try:
        pid, uid, _gid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                             struct.calcsize("3i")))
    except OSError:
        return False
    if uid != os.getuid() or pid <= 0:
        return False
    for _ in range(256):  # a line of parents is short; a longer one is refused
        if pid == server:
            return False
        if pid == owner:
            return True
        stat = _stat(pid)  # its parent next
        if stat is None or stat[1] <= 1:
            return False
        pid = stat[1]
    return False


def kill_group(pid):
    """SIGKILL the process group led by `pid`, and `pid` itself (gone or not ours: nothing to do)."""
    for target in (-pid, pid):
        try:
            os.kill(target, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def _living_under(root):
    """Every live descendant of `root` (zombies aside), by the parent links in /proc."""
    children = {}
    for pid in map(int, filter(str.isdigit, os.listdir("/proc"))):
        if (stat := _stat(pid)) is not None:
            children.setdefault(stat[1], []).append((pid, stat[0] not in (b"Z", b"X")))
    found, todo = [], [root]
    while todo:
        for pid, alive in children.get(todo.pop(), ()):
            todo.append(pid)
            if alive:
                found.append(pid)
    return found


def end_tree(pid, rounds=200):
    """SIGKILL everything under `pid`, round after round until none is left, then `pid` and its group.

    For a student process's keeper (keeper.py) stopped or too slow to end its tree itself (a neighbour's speed
    check may hold it stopped): a child subreaper, while it lives it inherits every orphan under it, a daemon
    that forked twice and called setsid() included. Killed first, it would hand them to init, out of every
    group the trusted side knows. Bounded: a killed process forks no more; a round ends one generation."""
    for _ in range(rounds):
        under = _living_under(pid)
        if not under:
            break
        for kid in under:
            try:
                os.kill(kid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.001)
    kill_group(pid)


def serve(address, handler, freeze_imports=False, owner=None):
    """Run the server loop until stdin closes. `address`: the inherited channel ("fd:N"); `handler(request, fds)`
    runs in each fork, which exits with its return value (RESUME: returns the request from here, in the fork).
    `freeze_imports`: keep what the server imported out of the forks' garbage collections (gc.freeze). `owner`:
    the pid whose descendants may ask (default: this process's parent)."""
    owner = os.getppid() if owner is None else owner
    listener = socket.socket(fileno=channel_fd(address))
    listener.set_inheritable(False)
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
    listening = True  # until every client end of the channel is closed
    while True:
        ready, _, _ = select.select([0, wake_r, *([listener] if listening else []), *by_conn], [], [], 0.5)
        if wake_r in ready:
            while True:
                try:
                    if not os.read(wake_r, 4096):
                        break
                except BlockingIOError:
                    break
        if 0 in ready and not os.read(0, 4096):
            for pid in by_pid:
                end_tree(pid)
            os._exit(0)
        if listener in ready:
            try:
                message, fds, _, _ = socket.recv_fds(listener, MAX_MESSAGE, MAX_FDS + 1)
            except OSError:
                continue
            if not message and not fds:  # every client end is closed: nobody can ask any more
                listening = False
                continue
            conn, fds = _connection(fds), fds[1:]
            try:
                if conn is None or not peer_allowed(conn, owner):
                    raise ValueError("not a client of this server")
                request = json.loads(message)
            except ValueError:  # dropped unanswered: the client reads the end of its connection
                if conn is not None:
                    conn.close()
                for fd in fds:
                    _close(fd)
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
                    if code != RESUME:
                        os._exit(code)
                return request  # the fork goes on in serve()'s caller
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
                end_tree(by_conn[conn])
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


def _close(fd):
    try:
        os.close(fd)
    except OSError:
        pass


def _connection(fds):
    """The connection a request came with (its first descriptor, a SOCK_SEQPACKET unix socket), or None (that
    descriptor closed) when it brought none or something else."""
    if not fds:
        return None
    try:
        conn = socket.socket(fileno=fds[0])
    except OSError:  # not a socket: closed here
        _close(fds[0])
        return None
    if conn.family != socket.AF_UNIX or conn.type != socket.SOCK_SEQPACKET:
        conn.close()
        return None
    return conn


def _student_handler():
    import importlib.util

    spec = importlib.util.spec_from_file_location("student_process", Path(__file__).with_name("student_process.py"))
    child = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(child)
    child._warm_up()  # in this process, once: every fork starts warm
    return child.forked


def preload(names):
    """Import the modules `names` and run the `warm()` of each that has one: what a warm grader server holds
    before it forks (imported once here, not once per grading; and what a module builds once for every
    grading, built here)."""
    import importlib

    for name in names:
        module = importlib.import_module(name)
        if callable(getattr(module, "warm", None)):
            module.warm()


if __name__ == "__main__":
    undumpable()  # first, before its imports (seconds, with torch); the forks inherit it (a grading holds its key)
    kind, address, names = sys.argv[1], sys.argv[2], sys.argv[4:]  # argv[3]: the server's label
    if kind == "grader":  # the kit's root (autograder/sandbox/ up two), not this file's folder, is where imports start
        sys.path[0] = str(Path(__file__).resolve().parent.parent.parent)
    if kind == "grader":  # the loop is the preloaded module's that has one (grade/prepared.py): around serve(),
        preload(names)  # inside one pytest session; a fork leaves it with its grading's exit code
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # the owner decides when to stop
        os._exit(next(m for m in map(sys.modules.get, names) if hasattr(m, "serve_graders")).serve_graders(
            address, serve))
    handler = _student_handler()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # The grader server freezes what it imported: pytest's end-of-session collection walked all of torch's objects
    # in every grading (~80 ms). The student zygote does not: a student process collects garbage as a cold one
    # does, the behaviour under which the speed checks' thresholds were measured (a loop over heads allocates).
    serve(address, handler, freeze_imports=kind == "grader")
