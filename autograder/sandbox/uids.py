"""The uids root runs student processes as: allocated, one per live grading on the machine, never derived from a pid
(standard library only; the trusted side's).

Root never runs student code as root: each student process drops to a uid of its own (privileges.py), which owns
its copy and temp folder and whose process limit counts only that student's processes. Two gradings that shared a
uid could signal, trace or read each other's processes and files, and share one process limit; a uid derived from
a pid (1,500,000 + pid % 100,000, until 2026-12) was shared by any two gradings whose pids differ by a multiple of
100,000, which a machine whose `pid_max` is 4,194,304 (systemd's default) gives.

So a uid is leased: uid BASE + n is held by whoever holds an exclusive `flock` on the file `n` of a folder only
root may write (`RUN_FOLDER`), for as long as its `Lease` is open (the whole grading: the trusted process holds
it, never the student process, whose code could close it). The kernel drops a lock when its holder ends, however
it ends (SIGKILL included), so a lease of a grading that died is free again at once: its file stays and is
reclaimed by the next allocation. A free uid that some process still runs as (a straggler of a grading that
died) is passed over. The scan starts at a place drawn from the caller's pid (`hint`), so that concurrent
gradings rarely try the same files first; a clash only costs one more try.
"""
from __future__ import annotations

import errno
import fcntl
import os
import signal
import stat
import tempfile

BASE = 1_500_000  # above the usual ranges of users (and of the subordinate ranges of user namespaces, 100,000+)
COUNT = 100_000  # uids BASE .. BASE + COUNT - 1
#: Where the locks live: a folder of the machine's run-time state, only root's. Where /run is missing, a folder of
#: the temp folder, checked as strictly (`_folder`).
RUN_FOLDER = "/run/mha-autograder/uids" if os.path.isdir("/run") else os.path.join(
    tempfile.gettempdir(), "mha-autograder-uids")


class NoUid(OSError):
    """No uid could be leased: the folder of the locks is not root's alone, or every uid is held."""


class Lease:
    """A uid held for one grading: `uid`, until `release` (or the holder's end)."""

    def __init__(self, uid, fd, path):
        self.uid, self._fd, self.path = uid, fd, path

    @property
    def held(self):
        return self._fd is not None

    def release(self):
        """End every process still running as the uid (stragglers of this grading: no other may hold it), then
        free it."""
        if self._fd is None:
            return
        for pid in processes_of(self.uid):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        os.close(self._fd)
        self._fd = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()

    def __repr__(self):
        return f"Lease(uid={self.uid}, held={self.held})"


def _folder(folder):
    """Make `folder` (and its parent) if needed, mode 0700; NoUid unless each is a real folder (no link) of root's
    alone that no one else may write: a folder another user made first could hand out its locks."""
    parent = os.path.dirname(folder)
    for path in (parent, folder):
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            pass
        info = os.lstat(path)
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid() or info.st_mode & 0o022:
            raise NoUid(errno.EPERM, f"{path} is not a folder of uid {os.geteuid()}'s alone (mode "
                                     f"{stat.filemode(info.st_mode)}, owner {info.st_uid}): the sandbox uids' locks "
                                     "cannot be kept there")


def processes_of(uid) -> list[int]:
    """The pids of every process whose real, effective or saved uid is `uid` (from /proc/<pid>/status)."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/status", "rb") as fh:
                for line in fh:
                    if line.startswith(b"Uid:"):
                        if uid in [int(v) for v in line.split()[1:4]]:
                            found.append(int(name))
                        break
        except (OSError, ValueError):
            continue
    return found


def _uids_in_use() -> set[int]:
    """Every uid some process of the machine runs as (real, effective or saved)."""
    used = set()
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/status", "rb") as fh:
                    for line in fh:
                        if line.startswith(b"Uid:"):
                            used.update(int(v) for v in line.split()[1:4])
                            break
            except (OSError, ValueError):
                continue
    return used


def allocate(hint: int | None = None, folder: str = RUN_FOLDER) -> Lease:
    """Lease a uid no live grading of this machine holds and no process runs as; NoUid when none is left.

    `hint` (a pid, by default this process's) picks where the scan begins. Two calls with the same hint get
    two uids, in one process or in two: a lock is held by an open file, not by a process."""
    _folder(folder)
    start = (os.getpid() if hint is None else hint) % COUNT
    used = _uids_in_use()
    for step in range(COUNT):
        n = (start + step) % COUNT
        if BASE + n in used:
            continue
        path = os.path.join(folder, str(n))
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # held by a live grading
            os.close(fd)
            continue
        if processes_of(BASE + n):  # a process took the uid since the scan (a straggler): not this one
            os.close(fd)
            continue
        try:
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())  # who holds it, for a person reading the folder
        except OSError:
            pass
        return Lease(BASE + n, fd, path)
    raise NoUid(errno.EAGAIN, f"every sandbox uid ({BASE}-{BASE + COUNT - 1}) is held by a live grading")
