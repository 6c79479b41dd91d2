"""In a class run, a speed measurement sees no other student's code running (issue 15, neighbours).

Submission A of a batch forked busy loops into sessions of their own and
stayed alive; B, a correct fused module near a threshold, scored 100 alone
and 98.95 next to A. Now a measurement holds the batch's lock: no student
call of the batch is in flight, and every other student tree is stopped.
"""
import subprocess
import sys
import threading
import time

import pytest
import torch

from autograder import batchlock, freeze, timing
from autograder.sandbox import Sandbox
from tests.conftest import SOLUTIONS

NEIGHBOUR = ("import subprocess, sys, time\n"
             "subprocess.Popen([sys.executable, '-c', 'while True: pass'], start_new_session=True)\n"
             "time.sleep(600)\n")


@pytest.fixture
def batch(tmp_path, monkeypatch):
    monkeypatch.setenv(batchlock.ENV, str(tmp_path))
    return tmp_path


@pytest.fixture
def neighbour(batch):
    """A registered student tree whose busy loop runs in a session of its own, as submission A's did."""
    proc = subprocess.Popen([sys.executable, "-c", NEIGHBOUR], start_new_session=True)
    batchlock.register(proc.pid)
    while len(freeze.tree(proc.pid)) < 2:  # the busy loop has started
        time.sleep(0.01)
    yield proc
    for pid in freeze.tree(proc.pid)[::-1]:
        subprocess.run(["kill", "-KILL", str(pid)], check=False)
    proc.wait()


def busy_loop_cpu_ns(neighbour):
    return sum(freeze.cpu_ns(pid) for pid in freeze.tree(neighbour.pid)[1:])


def test_a_measurement_stops_every_other_student_tree_of_the_batch(neighbour):
    with batchlock.quiet(None) as freezes:
        assert [f.root for f in freezes] == [neighbour.pid]
        before = busy_loop_cpu_ns(neighbour)
        time.sleep(0.3)
        during = busy_loop_cpu_ns(neighbour) - before
    assert during == 0, f"expected the neighbour's busy loop stopped, it used {during / 1e6:.1f} ms of CPU"
    assert freezes[0].clean is True
    before = busy_loop_cpu_ns(neighbour)
    while busy_loop_cpu_ns(neighbour) == before:  # resumed after the measurement
        time.sleep(0.01)


def test_outside_a_batch_nothing_is_stopped(monkeypatch):
    monkeypatch.delenv(batchlock.ENV, raising=False)
    with batchlock.quiet(None) as freezes:
        assert freezes == []


def test_a_stale_registration_never_stops_a_later_process_with_its_number(batch):
    (batch / "trees").mkdir()
    (batch / "trees" / str(1)).write_text("not when pid 1 started")
    import os

    (batch / "trees" / str(os.getpid())).write_text("")
    assert batchlock.others(None) == []


def test_a_student_call_of_the_batch_waits_until_the_measurement_ends(batch):
    with Sandbox(SOLUTIONS, call_timeout=30) as sandbox:
        sandbox.call("masks", "causal_mask", 2)  # started and ready
        entered, released, done = threading.Event(), {}, {}

        def measurement():
            with batchlock.quiet(None):
                entered.set()
                time.sleep(1.0)
                released["at"] = time.monotonic()

        holder = threading.Thread(target=measurement)
        holder.start()
        entered.wait()
        sandbox.call("masks", "causal_mask", 3)
        done["at"] = time.monotonic()
        holder.join()
    assert done["at"] > released["at"], "expected the call to start only once the measurement released the lock"


def test_a_measurement_in_a_batch_times_its_own_student_and_vouches_for_it(neighbour):
    with Sandbox(SOLUTIONS) as sandbox:
        m = timing.measure(timing.build_fused(sandbox))
    assert m.verified and m.vouched and m.discarded == 0, m.details
    assert m.neighbours == 1 and m.to_dict()["neighbours_stopped"] == 1
    assert torch.isfinite(torch.tensor(m.speedup))
