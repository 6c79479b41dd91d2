"""In a class run, a speed measurement sees a machine where no other grading runs.

`grade-all` grades several submissions at once. A submission that leaves
busy loops running (forked into sessions of their own, alive between the
grader's calls) slows every other grading's timed blocks, and one that is
near a speed threshold then loses points it earns alone; so do the other
gradings' trusted processes, busy computing reference outputs. So, within
one batch (`MHA_BATCH_DIR`, a folder `grade-all` makes and passes to its
grading processes):

- every sandbox registers the root of its student process tree (`trees/`),
  and every grading process registers itself (`processes/`);
- a speed measurement takes the batch's turnstile, so no other measurement
  and no new student call starts, and the spawn lock, so no student process
  is being started; it then stops every other registered tree and grading
  process with SIGSTOP (autograder/sandbox/freeze.py) for the whole measurement,
  calls in flight included, and resumes them after;
- the time a measurement kept the batch stopped is recorded (`pauses`), and
  a call's deadline (`Deadline`) does not count it: a neighbour stopped in
  the middle of a call never times out for it.

A hanging call of one submission therefore never delays another's
measurement. Outside a batch (no `MHA_BATCH_DIR`) every function here does
nothing. Stdlib only (fcntl: Linux and macOS; time.monotonic is one clock for
every process of the machine).
"""
from __future__ import annotations

import fcntl
import os
import threading
import time
from contextlib import ExitStack, contextmanager
from pathlib import Path

from autograder.sandbox import freeze
from autograder.sandbox.freeze import frozen

ENV = "MHA_BATCH_DIR"
_held = threading.local()  # .exclusive: this thread measures; its own calls and starts take no lock
KINDS = ("trees", "processes")  # a student process tree (stopped whole), a grading process (stopped alone)


def folder() -> Path | None:
    value = os.environ.get(ENV)
    return Path(value) if value else None


def register(pid: int | None, kind: str = "trees") -> None:
    """Record `pid` as the root of a student process tree ("trees") or as a grading process ("processes")."""
    base = folder()
    if base is None or pid is None:
        return
    try:
        (base / kind).mkdir(exist_ok=True)
        (base / kind / str(int(pid))).write_text(freeze.start_time(pid) or "")
    except OSError:
        pass  # a batch folder that is gone: nothing to coordinate with


def unregister(pid: int | None, kind: str = "trees") -> None:
    base = folder()
    if base is None or pid is None:
        return
    try:
        (base / kind / str(int(pid))).unlink()
    except OSError:
        pass


def others(own: int | None, kind: str = "trees") -> list[int]:
    """The registered pids of `kind` of the batch other than `own` and this process that still exist."""
    base = folder()
    if base is None:
        return []
    try:
        names = os.listdir(base / kind)
    except OSError:
        return []
    found = []
    for name in names:
        if not name.isdigit() or int(name) in (own, os.getpid()):
            continue
        try:
            started = (base / kind / name).read_text()
        except OSError:
            continue
        if started and started == freeze.start_time(int(name)):  # the same process, not a later one with its number
            found.append(int(name))
    return found


def paused_since(start: float) -> float:
    """Seconds after `start` (time.monotonic()) during which a measurement of the batch kept it stopped."""
    base = folder()
    if base is None:
        return 0.0
    now, spans = time.monotonic(), []
    try:  # the pause under way first, then the finished ones: one that ends meanwhile is counted twice, never 0
        spans.append((float((base / "pausing").read_text()), now))
    except (OSError, ValueError):
        pass
    try:
        lines = (base / "pauses").read_text().splitlines()
    except OSError:
        lines = []
    for line in lines:
        try:
            begin, end = map(float, line.split())
        except ValueError:
            continue
        spans.append((begin, end))
    return sum(max(0.0, min(end, now) - max(begin, start)) for begin, end in spans)


class Deadline:
    """`seconds` from now, not counting the time the batch's measurements kept this grading stopped."""

    def __init__(self, seconds: float):
        self.start = time.monotonic()
        self.end = self.start + seconds

    def left(self) -> float:
        left = self.end - time.monotonic()
        if left <= 0:  # the pauses are read only when they could matter
            left += paused_since(self.start)
        return left


@contextmanager
def _flock(path: Path, mode: int):
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, mode)
        yield
    finally:
        os.close(fd)  # releases the lock


def student_call() -> None:
    """Called before each call into student code: waits while a measurement of the batch is under way."""
    base = folder()
    if base is None or getattr(_held, "exclusive", False):
        return
    with _flock(base / "turnstile", fcntl.LOCK_EX):
        pass


@contextmanager
def spawning():
    """Held while a student process is started and registered: a measurement never misses one (a shared
    lock; none outside a batch)."""
    base = folder()
    if base is None or getattr(_held, "exclusive", False):
        yield
        return
    with _flock(base / "spawn", fcntl.LOCK_SH):
        yield


@contextmanager
def quiet(own: int | None):
    """Held around a speed measurement: every other student tree and grading process of the batch stopped,
    calls in flight included. Yields the list of Freezes of the other trees (empty outside a batch); after
    the block, one whose `clean` is False ran anyway."""
    base = folder()
    if base is None:
        yield []
        return
    with ExitStack() as stack:
        stack.enter_context(_flock(base / "turnstile", fcntl.LOCK_EX))
        stack.enter_context(_flock(base / "spawn", fcntl.LOCK_EX))
        stack.enter_context(_pause(base))
        for pid in others(None, "processes"):  # the other gradings' trusted work: stopped, not vouched for
            stack.enter_context(frozen(pid, descendants=False))
        freezes = [stack.enter_context(frozen(root)) for root in others(own)]
        _held.exclusive = True
        try:
            yield freezes
        finally:
            _held.exclusive = False


@contextmanager
def _pause(base: Path):
    """Record the span of a measurement (`pausing` while it lasts, then a line of `pauses`)."""
    begin = time.monotonic()
    try:
        (base / "pausing").write_text(repr(begin))
    except OSError:
        pass
    try:
        yield
    finally:
        try:
            with open(base / "pauses", "a") as fh:
                fh.write(f"{begin!r} {time.monotonic()!r}\n")
            (base / "pausing").unlink()
        except OSError:
            pass
