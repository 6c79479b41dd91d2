"""In a class run, a speed measurement sees a machine where no other student's code runs.

`grade-all` grades several submissions at once. A submission that leaves
busy loops running (forked into sessions of their own, alive between the
grader's calls) slows every other grading's timed blocks, and one that is
near a speed threshold then loses points it earns alone. So, within one
batch (`MHA_BATCH_DIR`, a folder `grade-all` makes and passes to its grading
processes):

- every sandbox registers the root of its student process tree (`trees/`);
- every call into student code holds a shared lock for its duration;
- a speed measurement takes the lock exclusively, so no student call of the
  batch is in flight, then stops every other registered tree with SIGSTOP
  (autograder/freeze.py) for the whole measurement and resumes them after.

A neighbour's call timeouts never run while it is stopped: its next call
waits for the lock before its deadline starts. The lock prefers the
measurement (a turnstile): once one waits, no new call starts, so a stream
of calls cannot starve it. Outside a batch (no `MHA_BATCH_DIR`) every
function here does nothing. Stdlib only (fcntl: Linux and macOS).
"""
from __future__ import annotations

import fcntl
import os
import threading
from contextlib import ExitStack, contextmanager
from pathlib import Path

from autograder import freeze
from autograder.freeze import frozen

ENV = "MHA_BATCH_DIR"
_held = threading.local()  # .exclusive: this thread measures; its own calls take no shared lock


def folder() -> Path | None:
    value = os.environ.get(ENV)
    return Path(value) if value else None


def register(pid: int | None) -> None:
    """Record `pid` as the root of a student process tree of this batch."""
    base = folder()
    if base is None or pid is None:
        return
    try:
        (base / "trees").mkdir(exist_ok=True)
        (base / "trees" / str(int(pid))).write_text(freeze.start_time(pid) or "")
    except OSError:
        pass  # a batch folder that is gone: nothing to coordinate with


def unregister(pid: int | None) -> None:
    base = folder()
    if base is None or pid is None:
        return
    try:
        (base / "trees" / str(int(pid))).unlink()
    except OSError:
        pass


def others(own: int | None) -> list[int]:
    """The registered tree roots of the batch other than `own` that still exist."""
    base = folder()
    if base is None:
        return []
    try:
        names = os.listdir(base / "trees")
    except OSError:
        return []
    found = []
    for name in names:
        if not name.isdigit() or int(name) in (own, os.getpid()):
            continue
        try:
            started = (base / "trees" / name).read_text()
        except OSError:
            continue
        if started and started == freeze.start_time(int(name)):  # the same process, not a later one with its number
            found.append(int(name))
    return found


@contextmanager
def _flock(path: Path, mode: int):
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, mode)
        yield
    finally:
        os.close(fd)  # releases the lock


@contextmanager
def student_call():
    """Held around one call into student code: a shared lock, after the turnstile (none outside a batch)."""
    base = folder()
    if base is None or getattr(_held, "exclusive", False):
        yield
        return
    with _flock(base / "turnstile", fcntl.LOCK_EX):
        pass  # waits while a measurement waits for the lock or holds it
    with _flock(base / "calls", fcntl.LOCK_SH):
        yield


@contextmanager
def quiet(own: int | None):
    """Held around a speed measurement: no student call of the batch in flight, every other student tree
    stopped. Yields the list of Freezes of the other trees (empty outside a batch); after the block, one
    whose `clean` is False ran anyway."""
    base = folder()
    if base is None:
        yield []
        return
    with ExitStack() as stack:
        stack.enter_context(_flock(base / "turnstile", fcntl.LOCK_EX))
        stack.enter_context(_flock(base / "calls", fcntl.LOCK_EX))
        freezes = [stack.enter_context(frozen(root)) for root in others(own)]
        _held.exclusive = True
        try:
            yield freezes
        finally:
            _held.exclusive = False
