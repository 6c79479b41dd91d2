"""Freeze the student side while the trusted process times the reference modules.

The speedup checks compare the student's fused module with reference modules
timed in the trusted process. Student code that keeps running while a
reference is timed (busy loops forked into sessions of their own and resumed
by a watchdog thread just after the student's own block) makes the
references look slow and buys the speedup points. So, around every reference
block, the whole student process tree is stopped with SIGSTOP: the student
process, its keeper and every descendant, daemons included (the keeper is a
child subreaper, so every orphan of student code stays in the tree, in every
isolation level). A stopped process cannot fork, so stopping the tree until
no new process appears leaves nothing running. The CPU time of every process
of the tree is read before and after the block: a block during which any of
it grew (a process that escaped the freeze) is reported, and the timing
discards it.

Stdlib only; Linux /proc. Where /proc is missing (not Linux) nothing is
frozen and `Freeze.clean` is None: the measurement cannot be vouched for.
"""
from __future__ import annotations

import os
import signal
import threading
import time
from contextlib import contextmanager

_TICK_NS = 1e9 / os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 1e7
_STOPPED = frozenset("tTZX")  # stopped, traced, zombie, dead: none of them runs
_HAS_CHILDREN = os.path.exists(f"/proc/{os.getpid()}/task/{os.getpid()}/children")  # CONFIG_PROC_CHILDREN
SETTLE_SECONDS = 1.0  # how long to wait for a SIGSTOP to take effect before calling the freeze incomplete


def _stat_fields(path):
    """The fields of a /proc .../stat file after the command name (field 3 of proc(5) first), or None."""
    try:
        with open(path, "rb") as fh:
            return fh.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _stat(pid):
    """(state, ppid) of `pid`, or None when it is gone."""
    fields = _stat_fields(f"/proc/{pid}/stat")
    try:
        return fields[0].decode(), int(fields[1])
    except (TypeError, ValueError, IndexError):
        return None


def _describe(pid) -> str:
    """`pid`'s command name, state and parent, as a short text. The name is the student's own (at most 16
    bytes in the kernel): like every message, it is escaped where a report shows it (report/model.py)."""
    try:
        with open(f"/proc/{pid}/comm", "rb") as fh:
            name = fh.read(32).decode("utf-8", "replace").strip()
    except OSError:
        name = "?"
    stat = _stat(pid)
    return f"{name} (pid {pid}, state {stat[0]}, parent {stat[1]})" if stat else f"{name} (pid {pid}, gone)"


def start_time(pid: int) -> str | None:
    """When `pid` started (in clock ticks since boot), which tells it from a later process given its number."""
    fields = _stat_fields(f"/proc/{pid}/stat")
    return fields[19].decode() if fields and len(fields) > 19 else None


def tree(root: int) -> list[int]:
    """`root` and every descendant of it (root first): by the kernel's lists of each thread's children, a few
    small files per process of the tree (reading every process's stat took ~5 ms a call); by the parent links
    in /proc where the kernel keeps no such lists (CONFIG_PROC_CHILDREN)."""
    children = {}
    for name in os.listdir("/proc") if not _HAS_CHILDREN else ():
        if name.isdigit() and (stat := _stat(int(name))) is not None:
            children.setdefault(stat[1], []).append(int(name))
    out, todo = [], [root]
    while todo:
        out.append(pid := todo.pop())
        for tid in _threads(pid) if _HAS_CHILDREN else ():
            try:  # a thread that ends hands its children to another of its process, listed there then
                with open(f"/proc/{pid}/task/{tid}/children", "rb") as fh:
                    todo += [int(child) for child in fh.read().split()]
            except (OSError, ValueError):
                pass
        todo.extend(children.get(pid, ()))
    return out


def _threads(pid):
    try:
        return [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        return []


def _schedstat(pid, tid):
    """(ns on a CPU, ns waiting for one while runnable) of thread `tid` of `pid`, or None (gone, or a kernel
    without /proc/<pid>/task/<tid>/schedstat)."""
    try:
        with open(f"/proc/{pid}/task/{tid}/schedstat", "rb") as fh:
            fields = fh.read().split()
        return int(fields[0]), int(fields[1])
    except (OSError, ValueError, IndexError):
        return None


def cpu_ns(pid: int) -> int:
    """CPU time used so far by every thread of `pid`, in ns (0 when it is gone)."""
    total = 0
    for tid in _threads(pid):
        times = _schedstat(pid, tid)
        if times is not None:
            total += times[0]
            continue
        fields = _stat_fields(f"/proc/{pid}/task/{tid}/stat")  # no schedstat: utime + stime, in clock ticks
        try:
            total += int((int(fields[11]) + int(fields[12])) * _TICK_NS)
        except (TypeError, ValueError, IndexError):
            pass
    return total


def process_cpu_ns(pid: int) -> int | None:
    """CPU time used so far by the process `pid`, in ns (None when it is gone): every thread that ever ran in it,
    ended ones included, and the processes it started, ended and reaped (their time, in clock ticks, joins their
    parent's as it reaps them). From its CPU clock, which any process may read (clock_gettime of the kernel's
    make_process_cpuclock(pid, CPUCLOCK_SCHED); the kernel adds each thread's time to its process's as it ends),
    or where that clock is refused from /proc/<pid>/stat's utime and stime (ticks, ended threads counted too)."""
    fields = _stat_fields(f"/proc/{pid}/stat")
    try:
        reaped = int((int(fields[13]) + int(fields[14])) * _TICK_NS)  # cutime + cstime: reaped children
        return time.clock_gettime_ns(((~pid) << 3) | 2) + reaped
    except (TypeError, ValueError, IndexError):
        return None
    except (OSError, AttributeError, OverflowError):
        return int((int(fields[11]) + int(fields[12])) * _TICK_NS) + reaped


def tree_cpu_ns(pids) -> dict[int, int]:
    """{pid: `process_cpu_ns`} of every process of `pids` still there."""
    return {pid: ns for pid, ns in ((pid, process_cpu_ns(pid)) for pid in pids) if ns is not None}


def block_cpu_ns(before: dict[int, int], pids) -> int:
    """The CPU time, in ns, the processes `pids` used since `before` (a `tree_cpu_ns` reading): every thread that
    ran, ended ones included; a process that was not there before counts from its start."""
    return sum(max(ns - before.get(pid, 0), 0) for pid, ns in tree_cpu_ns(pids).items())


SCHED_OTHER = 0  # the normal scheduling policy of sched(7), as /proc/<pid>/task/<tid>/stat gives it (field 41)


def priority(pid: int, tid: int) -> tuple[int, int] | None:
    """(scheduling policy, nice value) of thread `tid` of `pid`, or None when it is gone."""
    fields = _stat_fields(f"/proc/{pid}/task/{tid}/stat")
    try:
        return int(fields[38]), int(fields[16])
    except (TypeError, ValueError, IndexError):
        return None


def thread_times(pids) -> dict[tuple[int, int], tuple[int, int]]:
    """{(pid, tid): (ns on a CPU, ns waiting for one while runnable)} of every thread of `pids`, from
    /proc/<pid>/task/<tid>/schedstat (threads without one are left out)."""
    out = {}
    for pid in pids:
        for tid in _threads(pid):
            times = _schedstat(pid, tid)
            if times is not None:
                out[(pid, tid)] = times
    return out


def tasks_created() -> int | None:
    """How many processes and threads this machine has created since it booted (/proc/stat `processes`), or
    None: a figure that moved tells that some task started (and maybe already ended) meanwhile."""
    try:
        with open("/proc/stat", "rb") as fh:
            for line in fh:
                if line.startswith(b"processes "):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def _all_stopped(pid):
    """Whether every thread of `pid` is stopped (or gone)."""
    for tid in _threads(pid):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat", "rb") as fh:
                if fh.read().rsplit(b")", 1)[1].split()[0].decode() not in _STOPPED:
                    return False
        except (OSError, IndexError):
            continue
    return True


class Freeze:
    """What a freeze found: the processes it stopped and whether any of them ran during it."""

    def __init__(self, root, descendants=True):
        self.root = root
        self._tree = tree if descendants else (lambda pid: [pid] if _stat(pid) is not None else [])
        self.stopped: list[int] = []
        self.before: dict[int, int] = {}
        self.ran_ns = 0  # CPU time the tree used during the block (0 when frozen)
        self.new: list[int] = []  # processes of the tree that appeared during the block
        self.new_names: list[str] = []  # of the first three, "<comm> (pid N, state S, parent P)", read at resume
        self.clean: bool | None = None  # set on exit: nothing of the tree ran during the block

    def why(self) -> str:
        """Why the block was not clean, in words ("" when it was)."""
        if self.clean is not False:
            return ""
        parts = []
        if self.ran_ns:
            parts.append(f"the student's processes used {self.ran_ns / 1e6:.1f} ms of CPU")
        if self.new:
            parts.append(f"{len(self.new)} new student process(es) appeared ({', '.join(self.new_names)})")
        return " and ".join(parts) or "the student's processes could not be stopped"

    def stop(self):
        """Stop the tree: SIGSTOP every process in it, found again and again, until none is new and all are
        stopped at once (a stopped process cannot fork; one that runs may still resume another, e.g. a
        watchdog thread sending SIGCONT to its burners, so whatever runs is stopped again).

        The order matters: first whether all are stopped, then the tree. A SIGSTOP that lands while a process
        forks takes effect when the fork returns, child made; a tree listed before that and a stopped state
        read after it would miss the child, which then runs through the block (a neighbour's student process
        being started, found "new" at resume, voided a whole measurement of make test). Listed after every
        process was seen stopped, the tree holds every child any of them made."""
        deadline = time.monotonic() + SETTLE_SECONDS
        seen = set()
        while time.monotonic() < deadline:
            running = [pid for pid in self.stopped if not _all_stopped(pid)]
            new = [pid for pid in self._tree(self.root) if pid not in seen]
            seen.update(new)
            if not new and not running:
                break
            for pid in new + running:
                try:
                    os.kill(pid, signal.SIGSTOP)
                except OSError:  # gone (or not ours to signal, which a sandbox's own tree never is)
                    continue
                if pid in new:
                    self.stopped.append(pid)
            time.sleep(0.0002)
        # a task shows "T" just before its last switch off the CPU, which still adds to its CPU time: read
        # the figures until they settle, so that only CPU used during the block counts
        self.before = {pid: cpu_ns(pid) for pid in self.stopped}
        deadline = time.monotonic() + SETTLE_SECONDS
        while time.monotonic() < deadline:
            time.sleep(0.0005)
            now = {pid: cpu_ns(pid) for pid in self.stopped}
            if now == self.before:
                break
            self.before = now

    def resume(self):
        after = {pid: cpu_ns(pid) for pid in self.stopped}
        grown = [after[p] - self.before.get(p, 0) for p in self.stopped if after[p] > self.before.get(p, 0)]
        self.new = [pid for pid in self._tree(self.root) if pid not in self.before]
        self.new_names = [_describe(pid) for pid in self.new[:3]]
        self.ran_ns = sum(grown)
        self.clean = not grown and not self.new  # what counts is whether any of it ran, not how fast it stopped
        for pid in reversed(self.stopped):
            try:
                os.kill(pid, signal.SIGCONT)
            except OSError:
                pass


@contextmanager
def frozen(root: int | None, descendants: bool = True):
    """Stop the process tree under `root` (only `root`, without `descendants`) for the duration of the
    block; yield its Freeze.

    `root` None (no student process) or no /proc: nothing is frozen, `clean` stays None.
    """
    freeze = Freeze(root, descendants)
    if root is None or not os.path.isdir("/proc/self/task"):
        yield freeze
        return
    try:
        freeze.stop()
        yield freeze
    finally:
        freeze.resume()


def own_run_delay() -> int:
    """Nanoseconds the calling thread has waited for a CPU while runnable (its run delay), or 0 where the kernel
    gives no schedstat."""
    return own_schedstat()[1]


def own_schedstat() -> tuple[int, int]:
    """(ns the calling thread has run on a CPU, ns it has waited for one while runnable: its run delay), read
    together; where the kernel gives no schedstat, its CPU clock and no run delay."""
    times = _schedstat(os.getpid(), threading.get_native_id())
    return times if times is not None else (time.thread_time_ns(), 0)


@contextmanager
def one_cpu(pids):
    """Every thread of `pids` and the calling thread on one CPU (the one this thread runs on), as long as the
    block lasts; each thread's own set of CPUs back after it.

    A timed block is a relay between the grader and the student process, one pass at a time: on one CPU a
    hand-over is a switch of tasks, on two it wakes the other CPU (tens of microseconds, on every pass).
    Where a thread may not be moved (another user's, or gone) it stays where it was: this is a matter of
    speed only, for both sides, and decides nothing."""
    try:
        cpu = int(_stat_fields("/proc/thread-self/stat")[36])
    except (TypeError, ValueError, IndexError):
        yield
        return
    saved = []
    for tid in [0, *(tid for pid in pids for tid in _threads(pid))]:  # 0: the calling thread
        try:
            saved.append((tid, os.sched_getaffinity(tid)))
            os.sched_setaffinity(tid, {cpu})
        except OSError:
            pass
    try:
        yield
    finally:
        for tid, cpus in saved:
            try:
                os.sched_setaffinity(tid, cpus)
            except OSError:
                pass
