"""In a class run, a speed measurement sees no other student's code running (issue 15, neighbours).

Submission A of a batch forked busy loops into sessions of their own and
stayed alive; B, a correct fused module near a threshold, scored 100 alone
and 98.95 next to A. Now a measurement holds the batch's turnstile and stops
every other student tree and grading process, calls in flight included; the
time they spend stopped does not count against their deadlines, and a
neighbour's hanging call never delays a measurement.
"""
import os
import shutil
import subprocess
import sys
import threading
import time

import pytest
import torch

from autograder.graders import timing
from autograder.sandbox import batchlock, freeze
from autograder.sandbox.client import Sandbox
from tests.conftest import SOLUTIONS

pytestmark = pytest.mark.grading  # every test here grades or starts student processes

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


def test_without_a_class_run_every_grading_of_the_user_shares_the_machines_folder(monkeypatch):
    """Two gradings of one user on one machine (two `grade` runs, the suite's workers) are one batch: the honest
    reference measured 2.77x when one worker's gradings ran beside the other's measurement."""
    import stat

    monkeypatch.delenv(batchlock.ENV, raising=False)
    path = batchlock.folder()
    assert path is not None and path == batchlock.machine_folder()
    st = os.lstat(path)
    assert stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and stat.S_IMODE(st.st_mode) == 0o700


def test_a_machine_folder_made_by_someone_else_is_not_used(monkeypatch, tmp_path):
    """A folder of that name that another user made (or a link) would let them see and stop this user's
    gradings: no batch then, rather than theirs."""
    monkeypatch.setattr(batchlock, "_machine", [])
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    (tmp_path / "elsewhere").mkdir(mode=0o700)
    (tmp_path / "mha-kit-measure").symlink_to(tmp_path / "elsewhere")
    assert batchlock.machine_folder() is None
    (tmp_path / "mha-kit-measure").unlink()
    (tmp_path / "mha-kit-measure").mkdir(mode=0o755)
    os.chmod(tmp_path / "mha-kit-measure", 0o755)
    assert batchlock.machine_folder() is None
    os.chmod(tmp_path / "mha-kit-measure", 0o700)
    assert batchlock.machine_folder() == tmp_path / "mha-kit-measure"


def test_a_batch_folder_named_but_not_there_yet_is_made_private_and_used(monkeypatch, tmp_path):
    """MHA_BATCH_DIR naming a folder that does not exist (a run's own, given by hand): made, mode 0700, and its
    locks work (every grading failed on its first lock before: "No such file or directory: .../spawn")."""
    given = tmp_path / "not" / "there"
    monkeypatch.setenv(batchlock.ENV, str(given))
    assert batchlock.folder() == given
    assert given.is_dir() and (given.stat().st_mode & 0o777) == 0o700, oct(given.stat().st_mode)
    with batchlock.spawning():
        batchlock.student_call()
    with batchlock.quiet(None) as neighbours:
        assert neighbours == []


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


def test_without_a_class_run_a_measurement_stops_another_gradings_tree_of_the_user(monkeypatch):
    """No MHA_BATCH_DIR (two `grade` runs, the suite's workers): the user's machine-wide folder is the batch, and
    a measurement stops a tree registered there by another grading, busy loop in its own session included."""
    monkeypatch.delenv(batchlock.ENV, raising=False)
    proc = subprocess.Popen([sys.executable, "-c", NEIGHBOUR], start_new_session=True)
    try:
        batchlock.register(proc.pid)
        while len(freeze.tree(proc.pid)) < 2:
            time.sleep(0.01)
        with batchlock.quiet(None) as freezes:
            assert proc.pid in [f.root for f in freezes], "expected the other grading's tree stopped"
            before = busy_loop_cpu_ns(proc)
            time.sleep(0.3)
            during = busy_loop_cpu_ns(proc) - before
        assert during == 0, f"expected its busy loop stopped, it used {during / 1e6:.1f} ms of CPU"
    finally:
        batchlock.unregister(proc.pid)
        for pid in freeze.tree(proc.pid)[::-1]:
            subprocess.run(["kill", "-KILL", str(pid)], check=False)
        proc.wait()


def test_a_measurement_in_a_batch_times_its_own_student_and_vouches_for_it(neighbour):
    with Sandbox(SOLUTIONS) as sandbox:
        m = timing.measure(timing.build_timed(sandbox))
    assert m.verified and m.vouched and m.discarded == 0, m.details
    assert m.neighbours == 1 and m.to_dict()["neighbours_stopped"] == 1
    assert torch.isfinite(torch.tensor(m.speedup))


def _busy_masks(folder, loop):
    """A correct submission whose causal_mask first runs `loop` (Python source, one line)."""
    shutil.copytree(SOLUTIONS, folder, ignore=shutil.ignore_patterns("__pycache__"))
    path = folder / "masks.py"
    text = path.read_text()
    body = "    return torch.tril(torch.ones(seq_len, seq_len, dtype=torch.bool, device=device))"
    assert text.count(body) == 1
    path.write_text(text.replace(body, f"    import time\n    {loop}\n{body}"))
    return folder


def _call_in_thread(sandbox, outcome):
    def run():
        try:
            outcome["value"] = sandbox.call("masks", "causal_mask", 3)[0]
        except Exception as exc:  # noqa: BLE001  (the test reports what it was)
            outcome["error"] = exc
    thread = threading.Thread(target=run)
    thread.start()
    return thread


def _wait_until_busy(sandbox):
    """Until the student process has used CPU in the call just sent (the call is in flight)."""
    root = sandbox.process_tree_root()
    start = sum(freeze.cpu_ns(pid) for pid in freeze.tree(root))
    while sum(freeze.cpu_ns(pid) for pid in freeze.tree(root)) < start + 100_000_000:
        time.sleep(0.01)
    return root


def test_a_call_stopped_by_a_measurement_is_not_charged_the_time_it_was_stopped(batch, tmp_path):
    # The call needs 0.5 s of CPU and may take 8 s: 16 times its work, a margin the suite's own load (its other
    # workers, on as few as two cores) cannot use up. The measurement stops it for 9 s in the middle, longer than
    # the whole timeout: a deadline that counted the stopped time would end it during the stop (by 1 s at least,
    # which no load can shorten), so the test fails whenever the stopped time is charged.
    folder = _busy_masks(tmp_path / "sub", "end = time.process_time() + 0.5\n    while time.process_time() < end: pass")
    outcome = {}
    with Sandbox(folder, call_timeout=8.0) as sandbox:
        sandbox.call("masks", "causal_mask", 2)  # started and ready (this call runs the loop too)
        thread = _call_in_thread(sandbox, outcome)
        root = _wait_until_busy(sandbox)
        with batchlock.quiet(None) as freezes:
            assert [f.root for f in freezes] == [root], "expected the call's process tree stopped mid-call"
            in_flight = thread.is_alive() and not outcome
            time.sleep(9.0)
        thread.join()
    assert in_flight, f"expected the call still in flight when the measurement stopped it, got {outcome}"
    assert "error" not in outcome, f"expected the call to finish: its stopped time is not its own, got {outcome}"
    assert outcome["value"].shape == (3, 3)


def test_a_measurement_does_not_wait_for_a_neighbours_hanging_call(batch, tmp_path):
    folder = _busy_masks(tmp_path / "sub", "while True: pass")
    outcome = {}
    with Sandbox(folder, call_timeout=120) as sandbox:
        thread = _call_in_thread(sandbox, outcome)
        root = _wait_until_busy(sandbox)
        with batchlock.quiet(None) as freezes:
            in_flight = thread.is_alive() and not outcome
            stopped = [f.root for f in freezes]
        sandbox.close()  # ends the hanging call
        thread.join()
    assert in_flight, f"expected the measurement to start while the hanging call was still in flight, got {outcome}"
    assert stopped == [root], f"expected the hanging call's tree {root} stopped, stopped {stopped}"


def test_a_measurement_stops_the_other_gradings_trusted_work(batch):
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        batchlock.register(busy.pid, "processes")
        while freeze.cpu_ns(busy.pid) == 0:
            time.sleep(0.01)
        with batchlock.quiet(None) as freezes:
            assert freezes == [], "a grading process is stopped, not vouched for as a student tree"
            before = freeze.cpu_ns(busy.pid)
            time.sleep(0.3)
            during = freeze.cpu_ns(busy.pid) - before
        assert during == 0, f"expected the other grading stopped, it used {during / 1e6:.1f} ms of CPU"
        before = freeze.cpu_ns(busy.pid)
        while freeze.cpu_ns(busy.pid) == before:  # resumed after the measurement
            time.sleep(0.01)
    finally:
        busy.kill()
        busy.wait()


def test_deadlines_of_a_batch_never_stopped_are_plain_wall_clock(batch):
    deadline = batchlock.Deadline(0.0)
    assert deadline.left() <= 0 and batchlock.paused_since(0.0) == 0.0


def test_a_grading_is_not_charged_the_time_a_measurement_kept_the_batch_stopped(batch):
    # a grading allowed 1 s that takes 2 s, while a measurement keeps the batch stopped for 3 s of it
    from autograder.grade.engine import _in_time

    entered = threading.Event()

    def measurement():
        with batchlock.quiet(None):
            entered.set()
            time.sleep(3.0)

    holder = threading.Thread(target=measurement)
    holder.start()
    entered.wait()
    grading = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(2)"])
    try:
        assert _in_time(grading.wait, 1.0) == 0
    finally:
        grading.kill()
        holder.join()
    with pytest.raises(subprocess.TimeoutExpired):  # and once nothing is stopped, the same limit holds
        hang = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
        try:
            _in_time(hang.wait, 1.0)
        finally:
            hang.kill()
            hang.wait()


def test_a_pause_left_by_a_killed_measurement_extends_no_deadline(batch):
    """The machine-wide folder lives on: a measurement killed mid-way (SIGKILL) leaves its `pausing` behind, and
    a deadline that counted it would never end. A pause counts only while its measuring process lives."""
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (batch / "pausing").write_text(f"{time.monotonic() - 5!r} {dead.pid} 12345")
    assert batchlock.paused_since(time.monotonic() - 10) == 0.0
    (batch / "pausing").write_text(f"{time.monotonic() - 5!r} {os.getpid()} {freeze.start_time(os.getpid())}")
    assert batchlock.paused_since(time.monotonic() - 10) >= 5.0
