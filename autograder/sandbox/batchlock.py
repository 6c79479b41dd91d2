"""A speed measurement sees a machine where no other grading runs.

`grade-all` grades several submissions at once, and so may anything else on
the machine: two `grader_cli.py grade` runs, the kit's test suite on several
workers. A submission that leaves busy loops running (forked into sessions
of their own, alive between the grader's calls) slows every other grading's
timed blocks, and one that is near a speed threshold then loses points it
earns alone; so do the other gradings' trusted processes, busy computing
reference outputs. So every grading of this user on the machine belongs to
one batch: a folder, `MHA_BATCH_DIR` where it is set (a `grade-all` run may
give its own), else the user's machine-wide one (`machine_folder`:
$XDG_RUNTIME_DIR/mha-kit-measure, or mha-kit-measure-<uid> in the temporary
folder, mode 0700 and this uid's, or no batch at all). Before, only one
`grade-all` run's gradings shared a folder, and the suite's two xdist
workers did not: one worker's gradings ran beside the other's measurement
(the honest reference once measured 2.77x there, against 3x asked). Other
users' processes cannot be stopped by this one, and are not. Within a batch:

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
measurement. Outside a batch (no folder could be had) every function here
does nothing. Stdlib only (fcntl: Linux and macOS; time.monotonic is one clock for
every process of the machine).
"""
from __future__ import annotations

import fcntl
import os
import stat
import tempfile
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
    """The batch's folder: MHA_BATCH_DIR where it is set (made, mode 0700, where it is not there yet: a folder
    named that did not exist made every grading fail on its first lock), else the user's machine-wide one (or
    None)."""
    value = os.environ.get(ENV)
    if not value:
        return machine_folder()
    if value not in _given:
        try:
            os.makedirs(value, 0o700, exist_ok=True)
        except OSError:
            pass  # not ours to make: the locks say why, as before
        _given.add(value)
    return Path(value)


_given: set = set()  # the MHA_BATCH_DIR values made (or found) in this process


_machine = []


def machine_folder() -> Path | None:
    """This user's machine-wide batch folder, made mode 0700 if need be; None where it cannot be had safely (a
    folder of that name that is not a real folder of this uid's, mode 0700: made by someone else)."""
    if _machine:
        return _machine[0]
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isdir(runtime):
        path = Path(runtime) / "mha-kit-measure"
    else:
        path = Path(tempfile.gettempdir()) / f"mha-kit-measure-{os.getuid()}"
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError:
        return None
    try:
        st = os.lstat(path)
    except OSError:
        return None
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or stat.S_IMODE(st.st_mode) != 0o700:
        return None
    _machine.append(path)
    return path


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
        elif started:  # gone without unregistering (killed): the machine-wide folder must not fill up
            try:
                (base / kind / name).unlink()
            except OSError:
                pass
    return found


def paused_since(start: float) -> float:
    """Seconds after `start` (time.monotonic()) during which a measurement of the batch kept it stopped."""
    base = folder()
    if base is None:
        return 0.0
    now, spans = time.monotonic(), []
    try:  # the pause under way first, then the finished ones: one that ends meanwhile is counted twice, never 0
        begin, pid, started = (base / "pausing").read_text().split(" ", 2)
        if started == freeze.start_time(int(pid)):  # its measuring process lives: one killed stops nothing
            spans.append((float(begin), now))
    except (OSError, ValueError):
        pass
    spans.extend(_pauses(base / "pauses"))
    return sum(max(0.0, min(end, now) - max(begin, start)) for begin, end in spans)


def _pauses(path: Path) -> list[tuple[float, float]]:
    """The (begin, end) of each finished pause recorded in `path` (lines out of format left out)."""
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return []
    spans = []
    for line in lines:
        try:
            begin, end = map(float, line.split())
        except ValueError:
            continue
        spans.append((begin, end))
    return spans


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
        (base / "pausing").write_text(f"{begin!r} {os.getpid()} {freeze.start_time(os.getpid())}")
    except OSError:
        pass
    try:
        yield
    finally:
        try:
            _prune(base / "pauses")
            with open(base / "pauses", "a") as fh:
                fh.write(f"{begin!r} {time.monotonic()!r}\n")
            (base / "pausing").unlink()
        except OSError:
            pass


def _prune(path: Path, keep: float = 3600.0) -> None:
    """A machine-wide folder lives on: past 64 KiB, keep only the pauses of the last `keep` seconds (no call's
    deadline runs longer). Called with the turnstile held, so no measurement writes meanwhile."""
    try:
        if path.stat().st_size < 1 << 16:
            return
        now = time.monotonic()
        fresh = path.with_name(path.name + ".new")
        fresh.write_text("".join(f"{begin!r} {end!r}\n" for begin, end in _pauses(path) if end > now - keep))
        os.replace(fresh, path)
    except OSError:
        pass
