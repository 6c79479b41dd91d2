"""Freezing the student side while the references are timed (autograder/sandbox/freeze.py), with real processes.

A tree like a student's: a parent that forks busy loops, each in a session of
its own (as a daemon or a CPU burner would be). While frozen, none of them
may use the CPU; after, all run again; a process outside the tree is never
touched; and a block in which a process of the tree ran anyway is reported
as not clean.
"""
import os
import signal
import subprocess
import sys
import time

import pytest

from autograder.graders import timing
from autograder.sandbox import freeze

TREE = r"""
import os, sys, time
for _ in range(3):
    if os.fork() == 0:
        os.setsid()
        while True:
            pass
sys.stdout.write("ready\n"); sys.stdout.flush()
while True:
    pass
"""


@pytest.fixture
def busy_tree():
    """A parent busy loop with 3 busy children in sessions of their own; ended with its whole tree."""
    proc = subprocess.Popen([sys.executable, "-c", TREE], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline() == "ready\n"
    pids = freeze.tree(proc.pid)
    yield proc, pids
    for pid in reversed(pids):
        for sig in (signal.SIGKILL, signal.SIGCONT):
            try:
                os.kill(pid, sig)
            except OSError:
                pass
    proc.wait()


def _state(pid):
    with open(f"/proc/{pid}/stat") as fh:
        return fh.read().rsplit(")", 1)[1].split()[0]


def test_tree_finds_children_in_other_sessions(busy_tree):
    proc, pids = busy_tree
    assert pids[0] == proc.pid and len(pids) == 4, f"expected the parent and its 3 children, got {pids}"


def test_a_frozen_tree_uses_no_cpu_and_runs_again_after(busy_tree):
    proc, pids = busy_tree
    with freeze.frozen(proc.pid) as fz:
        states = {pid: _state(pid) for pid in pids}
        used = {pid: freeze.cpu_ns(pid) for pid in pids}
        time.sleep(0.3)
        grown = {pid: freeze.cpu_ns(pid) - used[pid] for pid in pids}
    assert set(states.values()) == {"T"}, f"expected every process stopped (T) while frozen, got {states}"
    assert not any(grown.values()), f"expected no CPU used while frozen, got ns per pid {grown}"
    assert fz.clean is True and fz.why() == "", (fz.clean, fz.why())
    before = {pid: freeze.cpu_ns(pid) for pid in pids}
    time.sleep(0.3)
    ran = [pid for pid in pids if freeze.cpu_ns(pid) > before[pid]]
    assert len(ran) >= 2, f"expected the busy loops to run again after the freeze, only {ran} of {pids} did"


def test_a_process_outside_the_tree_is_never_stopped(busy_tree):
    proc, _ = busy_tree
    outsider = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        with freeze.frozen(proc.pid):
            time.sleep(0.05)
            state = _state(outsider.pid)
        assert state in "RS", f"expected the process outside the tree to keep running, its state was {state}"
    finally:
        outsider.kill()
        outsider.wait()


def test_a_tree_process_that_ran_during_the_block_makes_it_unclean(busy_tree):
    proc, pids = busy_tree
    with freeze.frozen(proc.pid) as fz:
        os.kill(pids[-1], signal.SIGCONT)  # as if a process had escaped the freeze
        time.sleep(0.2)
    assert fz.clean is False and "ms of CPU" in fz.why(), (fz.clean, fz.why())


class _FakeSandbox:
    def process_tree_root(self):
        return None


class _FakeRemote:
    """The reference fused module standing in for a student's, timed in this process (`heads`: None for 32)."""

    sandbox = _FakeSandbox()

    def __init__(self, heads=None):
        self.module = timing.reference_modules(heads=heads)[1]

    def time(self, xs, discard=False):
        import time

        import torch

        begin = time.perf_counter()
        with torch.no_grad():
            outputs = [self.module(x) for x in xs]
        return outputs, time.perf_counter() - begin, 0.0


def _fake_pair(kind=None):
    kind = kind or _FakeRemote
    return kind(), kind(timing.FEW_HEADS)


def test_rounds_with_student_cpu_during_the_references_are_discarded(monkeypatch):
    """measure() keeps no figure of a round whose freeze was not clean; with none left, nothing is vouched for."""
    class Unclean:
        clean = False

        def why(self):
            return "the student's processes used 3.0 ms of CPU"

    class Ctx:
        def __enter__(self):
            return Unclean()

        def __exit__(self, *exc):
            return False

    monkeypatch.setattr(timing, "frozen", lambda root: Ctx())
    m = timing.measure(_fake_pair(), rounds=2, reps=2)
    assert (m.rounds, m.discarded, m.vouched) == (2, 2, False), (m.rounds, m.discarded, m.vouched)
    assert not timing.passes(m) and m.details == ["the student's processes used 3.0 ms of CPU"] * 2


def test_a_clear_pass_stops_after_one_round(monkeypatch):
    """A try whose first vouched round is a clear pass (`clear_pass`, true here) is left to `enough` after that
    round and, accepted, stops there. (`clear_pass` is stood in for: the fake module's wall-clock figures on a busy
    machine need not clear DECIDED in one round; its figures are tested below.)"""
    monkeypatch.setattr(timing, "clear_pass", lambda m: True)
    seen = []

    def enough(m):
        seen.append(m.rounds)
        return True

    m = timing.measure(_fake_pair(), rounds=4, reps=2, enough=enough)
    assert (m.rounds, seen) == (1, [1]), f"expected a clear pass to end the try after round 1, got {(m.rounds, seen)}"


def _fused(student_fused=1.0, reference_stacked=20.0, student_few=1.0, rounds=1, discarded=0):
    """A Measurement of a module as fast as the reference fused one (slowdown and relative growth 1 against 4),
    `reference_stacked` / `student_fused` times faster than the stacked one (speedup 20 against 4)."""
    return timing.Measurement(student_fused, reference_stacked, 1.0, student_few, 1.5, 1.0, rounds=rounds,
                              discarded=discarded)


def test_a_clear_pass_clears_every_threshold_by_decided_times():
    """`clear_pass`: speedup, slowdown and relative growth each at least DECIDED times past its threshold in the
    vouched figures; a figure short of that, missing, or a round not vouched is no clear pass."""
    assert timing.clear_pass(_fused()), "expected margins 5x, 4x, 4x a clear pass"
    assert not timing.clear_pass(_fused(reference_stacked=7.0)), "expected a speedup of 7 (1.75x past 4) not clear"
    assert not timing.clear_pass(_fused(student_fused=2.1, reference_stacked=40.0)), \
        "expected a slowdown of 2.1 (1.9x short of 4) not clear"
    assert not timing.clear_pass(_fused(student_few=float("nan"))), "expected a missing figure to decide nothing"
    assert not timing.clear_pass(_fused(rounds=1, discarded=1)), "expected a round not vouched to decide nothing"


def test_a_passing_try_stops_after_min_rounds_and_a_failing_one_takes_them_all(monkeypatch):
    """`enough` ends a try once MIN_ROUNDS or more rounds pass it, where no round passed by DECIDED times
    (`clear_pass` false here); a try it never accepts times every round."""
    monkeypatch.setattr(timing, "clear_pass", lambda m: False)
    seen = []

    def enough(m):
        seen.append(m.rounds)
        return True

    m = timing.measure(_fake_pair(), rounds=4, reps=2, enough=enough)
    assert (m.rounds, seen) == (timing.MIN_ROUNDS, [timing.MIN_ROUNDS]), (m.rounds, seen)
    assert len(m.seeds) == 1 and m.vouched
    seen.clear()
    m = timing.measure(_fake_pair(), rounds=4, reps=2, enough=lambda m: seen.append(m.rounds) or False)
    assert (m.rounds, seen) == (4, [2, 3]), "expected every round timed, asked after rounds 2 and 3 (not the last)"


class _WrongRemote(_FakeRemote):
    """A fused module whose outputs are off by one: fast, and wrong."""

    def time(self, xs, discard=False):
        outputs, seconds, waited = super().time(xs, discard)
        return [out + 1 for out in outputs], seconds, waited


def test_a_try_ends_at_its_first_wrong_round_and_is_not_tried_again():
    """Wrong outputs are not noise: no later round or retry can make the measurement pass."""
    m = timing.measure(_fake_pair(_WrongRemote), rounds=4, reps=2, enough=timing.passes)
    assert (m.rounds, m.verified) == (1, False), (m.rounds, m.verified)
    assert len(m.mismatched) == 4, "expected the round's mismatched passes (2 of each module) kept for the blame check"
    result = timing.measure_until(_fake_pair(_WrongRemote))
    assert (len(result.seeds), result.verified) == (1, False), "expected one try, not RETRIES"


def test_every_try_draws_inputs_nobody_could_predict():
    """Fresh secret seeds per try; each round's inputs come from a hash of it, and round_inputs rebuilds them."""
    seeds = {timing.new_secret() for _ in range(50)}
    assert len(seeds) == 50, "expected a new seed for every try"
    secret = timing.new_secret()
    rounds = [timing.round_inputs(secret, r) for r in range(timing.ROUNDS + 1)]
    assert rounds[0].shape[0] == 2 and all(x.shape[0] == timing.REPS for x in rounds[1:])
    flat = [x.flatten()[:8].tolist() for x in rounds]
    assert len({tuple(f) for f in flat}) == len(flat), "expected different inputs in every round"
    assert timing.round_inputs(secret, 3).equal(rounds[3]), "expected round_inputs to rebuild a round exactly"
    assert timing.round_seed(secret, 1) != secret + 1, "expected round seeds derived by a hash, not by counting"


def test_retries_record_the_seed_and_rounds_of_every_try(monkeypatch):
    """The report must let an instructor rebuild every input of every try (one secret seed per try)."""
    tries = iter([timing.Measurement(1.0, 1.0, 1.0, seeds=(11,), rounds=5, discarded=1, details=["x"]),
                  timing.Measurement(1.0, 1.0, 1.0, seeds=(22,), rounds=5),
                  timing.Measurement(1.0, 1.0, 1.0, seeds=(33,), rounds=5)])
    monkeypatch.setattr(timing, "measure", lambda remote, device="cpu", **_: next(tries))
    result = timing.measure_until(None)
    assert (result.seeds, result.rounds, result.discarded, result.details) == ((11, 22, 33), 15, 1, ["x"])
    assert result.to_dict()["seeds"] == [11, 22, 33]


def _slow(student_fused=20.0, worst=21.0, rounds=2, discarded=0):
    """A Measurement of a module `student_fused` / 1 times slower than the reference fused one at 64 heads (as
    fast with one head), its slowest round `worst`: a loop over heads, at 20, fails all three checks 5x over."""
    return timing.Measurement(student_fused, 15.0, 1.0, 1.0, 1.5, 1.0, rounds=rounds, discarded=discarded,
                              worst={"student_fused": worst, "student_few": 1.02})


def test_a_try_is_decided_when_noise_cannot_change_any_verdict():
    """`decided`: every check's figure at least DECIDED times from its threshold and beyond the rounds' noise
    to the power NOISE_POWER, after two vouched rounds; never a measurement that passes (`enough` decides it)."""
    assert timing.decided(_slow()), "expected a loop over heads, 5x past every threshold, decided"
    assert not timing.decided(_slow(worst=32.0)), "expected rounds 1.6x apart (1.6 ** 4 = 6.6 > 5) undecided"
    assert not timing.decided(_slow(student_fused=7.0, worst=7.1)), "expected a slowdown of 7 (1.75x) undecided"
    assert not timing.decided(_slow(student_fused=1.5, worst=1.6)), "expected a passing module left to `enough`"
    assert not timing.decided(_slow(rounds=1)), "expected one round to decide nothing"
    assert not timing.decided(_slow(rounds=3, discarded=2)), "expected one vouched round to decide nothing"


def test_a_decided_try_stops_after_min_rounds_and_is_not_tried_again(monkeypatch):
    """A try whose figures are decided stops after MIN_ROUNDS rounds, and measure_until tries no more; an
    undecided failing one takes every round of every try."""
    monkeypatch.setattr(timing, "decided", lambda m: True)
    m = timing.measure(_fake_pair(), rounds=4, reps=2)
    assert m.rounds == timing.MIN_ROUNDS, m.rounds
    monkeypatch.undo()  # the real `decided` again
    tries = []
    monkeypatch.setattr(timing, "measure", lambda remote, device="cpu", **_: tries.append(1) or _slow())
    assert not timing.passes(timing.measure_until(None)) and len(tries) == 1, f"expected one try, got {len(tries)}"
    tries.clear()
    monkeypatch.setattr(timing, "measure", lambda remote, device="cpu", **_: tries.append(1) or _slow(worst=32.0))
    timing.measure_until(None)
    assert len(tries) == timing.RETRIES, f"expected every try of an undecided failure, got {len(tries)}"


FORKS_ON_FLAG = r"""
import os, sys, time
sys.stdout.write("ready\n"); sys.stdout.flush()
while not os.path.exists(sys.argv[1]):
    time.sleep(0.01)
if os.fork() == 0:
    time.sleep(30)
    os._exit(0)
time.sleep(30)
"""


def test_a_process_that_appeared_during_the_block_is_named(tmp_path):
    """A round discarded for a new process says which it is (its command, pid, state and parent): the one
    clue to a process that appears where none should."""
    flag = tmp_path / "fork-now"
    proc = subprocess.Popen([sys.executable, "-c", FORKS_ON_FLAG, str(flag)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline() == "ready\n"
        with freeze.frozen(proc.pid) as fz:
            flag.touch()
            os.kill(proc.pid, signal.SIGCONT)  # as if it had escaped the freeze: it forks
            deadline = time.monotonic() + 10
            while len(freeze.tree(proc.pid)) < 2 and time.monotonic() < deadline:
                time.sleep(0.01)
        child = freeze.tree(proc.pid)[-1]
        assert fz.clean is False and fz.new == [child], (fz.new, fz.why())
        assert "1 new student process(es) appeared (python" in fz.why() and f"pid {child}, " in fz.why() \
            and f"parent {proc.pid})" in fz.why(), fz.why()
    finally:
        for pid in reversed(freeze.tree(proc.pid)):
            os.kill(pid, signal.SIGKILL)
        proc.wait()


FORKS_ALL_THE_TIME = r"""
import os, sys
ballast = bytearray(256 << 20)  # each fork copies the page tables of 256 MiB: milliseconds inside fork()
for i in range(0, len(ballast), 4096):
    ballast[i] = 1
sys.stdout.write("ready\n"); sys.stdout.flush()
while True:
    if os.fork() == 0:
        os._exit(0)
    os.wait()
"""


def test_a_process_stopped_in_the_middle_of_a_fork_has_its_child_stopped_too():
    """A SIGSTOP that lands while a process forks takes effect once the fork returns, child made. The freeze
    must find that child, however the fork and its own listing of the tree interleave: read the states, then
    list the tree (the other order missed a neighbour's student process being started, which then ran through
    a whole measurement). 40 freezes of a process that forks all the time, each one clean."""
    proc = subprocess.Popen([sys.executable, "-c", FORKS_ALL_THE_TIME], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline() == "ready\n"
        missed = []
        for _ in range(40):
            with freeze.frozen(proc.pid) as fz:
                pass
            if fz.clean is not True:
                missed.append(fz.why())
        assert not missed, f"expected every freeze to stop the fork's child too; {len(missed)} of 40 did not: " \
                           f"{missed[:3]}"
    finally:
        for pid in reversed(freeze.tree(proc.pid)):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        proc.wait()
