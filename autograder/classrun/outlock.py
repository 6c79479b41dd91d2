"""OUT, the folder a class run grades into: one run at a time, and a write it refused for want of room.

`output_lock` holds OUT/.grade-all.lock (an fcntl lock, which NFS carries between the nodes of a cluster) for as
long as a run grades into OUT: a second run into the same OUT is refused at once with `Busy`, which names the
holder. `out_of_room` tells a write that its file system refused for want of room (space, inodes, quota: the
machine's, never the submission's) from any other error, and says what ran out and where.
"""
from __future__ import annotations

import errno
import fcntl
import os
import socket
import threading
import time
from contextlib import contextmanager
from pathlib import Path

from autograder.report.model import safe_line

LOCK = ".grade-all.lock"  # in OUT: held (an fcntl lock) by the grade-all that writes OUT, for as long as it runs




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
