"""The speedup checks, exercised only with margins that no noise can cross.

A fused module that sleeps 10 ms per forward pass (the reference stacked
module takes about 3-7 ms here, the reference fused one about 0.2-0.3 ms) and a
fused module that loops over 64 heads must fail; patching the student
process's timers must not help. The reference passing is part of
test_scoring (the reference scores 100, graded cold as `grader_cli.py grade`
does); these gradings go through the session's warm servers, as a class
run's do.
"""
import pytest
import torch

from autograder.graders import timing
from autograder.grade.engine import grade
from tests.conftest import SOLUTIONS
from tests.corpus import load_corpus, materialize

SPEEDUP_TESTS = "faster_than_reference_stacked or close_to_reference_fused or does_not_grow_with_heads"

SLEEP = ("        import time\n        time.sleep(0.01)\n"
         "        B, T, _ = x.shape\n        H, hd = self.num_heads, self.head_dim")
PATCH_TIMERS = '''import time as _time
_time.perf_counter = lambda: 0.0
_time.perf_counter_ns = lambda: 0
_time.monotonic = lambda: 0.0
_time.monotonic_ns = lambda: 0
_time.process_time = lambda: 0.0
_time.time = lambda: 0.0
'''


def fused_variant(tmp_path, *, patch_timers):
    folder = tmp_path / "submission"
    folder.mkdir()
    for path in SOLUTIONS.glob("*.py"):
        (folder / path.name).write_text(path.read_text())
    mha = (folder / "mha.py").read_text()
    anchor = "        B, T, _ = x.shape\n        H, hd = self.num_heads, self.head_dim"
    assert mha.count(anchor) == 1
    mha = mha.replace(anchor, SLEEP)
    if patch_timers:
        mha = PATCH_TIMERS + mha
    (folder / "mha.py").write_text(mha)
    return folder


def speedup_results(folder, servers):
    report = grade(folder, select=SPEEDUP_TESTS, servers=servers)
    results = {t.id: t for t in report.tests}
    assert set(results) == {"test_fused_time_does_not_grow_with_heads", "test_fused_faster_than_reference_stacked",
                            "test_fused_close_to_reference_fused"}
    return results


@pytest.mark.grading
@pytest.mark.parametrize("patch_timers", [False, True], ids=["sleeps", "sleeps-and-patches-timers"])
def test_a_sleeping_fused_module_fails_the_timed_checks(tmp_path, patch_timers, warm_servers):
    results = speedup_results(fused_variant(tmp_path, patch_timers=patch_timers), warm_servers)
    for test in results.values():
        assert test.status == "failed", test.id
        assert " us" in test.message and "per forward pass" in test.message and "your fused" in test.message, (
            test.id, test.message)


@pytest.mark.grading
def test_a_loop_over_heads_fails_the_timed_checks(tmp_path, warm_servers):
    case = next(c for c in load_corpus()["bug"] if c.id == "mha-fused-loop-over-heads")
    results = speedup_results(materialize(case, tmp_path / case.id, SOLUTIONS), warm_servers)
    for test in results.values():
        assert test.status == "failed", (test.id, test.message)


def test_measurement_thresholds():
    fast = timing.Measurement(student_fused=1.0, reference_stacked=5.0, reference_fused=0.8)
    assert fast.fast_enough and fast.close_to_reference
    slow = timing.Measurement(student_fused=4.0, reference_stacked=5.0, reference_fused=0.8)
    assert not slow.fast_enough and not slow.close_to_reference
    assert "your fused 4000000 us" in slow.describe()


def test_each_timed_check_names_the_threshold_in_force():
    """The check's description (the student's feedback, the points table) says the limit the grading applies: a
    threshold changed in timing.py alone once left "at least 3x" on a check that asked for 4x."""
    from parts.mha import test_mha

    for check, limit in ((test_mha.test_fused_time_does_not_grow_with_heads, timing.GROWTH_LIMIT),
                         (test_mha.test_fused_faster_than_reference_stacked, timing.MIN_SPEEDUP),
                         (test_mha.test_fused_close_to_reference_fused, timing.MAX_SLOWDOWN)):
        assert f" {limit:g}x " in check.__doc__, f"{check.__name__}: expected {limit:g}x in {check.__doc__!r}"


def test_growth_in_heads_counts_the_time_with_few_heads_at_most_as_the_reference_fused_modules():
    """A module's growth from FEW_HEADS to 64 heads is judged against the reference fused module's; being slow with
    few heads flattens nothing: that time counts at most as the reference's."""
    fused = timing.Measurement(1.2, 8.0, 1.0, student_few=1.1, reference_stacked_few=0.5, reference_fused_few=0.9)
    assert fused.flat_in_heads, fused.relative_growth
    loop = timing.Measurement(9.0, 8.0, 1.0, student_few=1.0, reference_stacked_few=0.5, reference_fused_few=0.9)
    assert not loop.flat_in_heads, loop.relative_growth
    padded = timing.Measurement(9.0, 8.0, 1.0, student_few=9.0, reference_stacked_few=0.5, reference_fused_few=0.9)
    assert padded.growth == 9.0 / 0.9 and not padded.flat_in_heads, "a loop slow on purpose with one head passed"
    assert "x10.00" in padded.describe_growth() and "per forward pass" in padded.describe_growth()


def test_a_reference_block_is_timed_by_cpu_time_so_time_spent_off_the_cpu_does_not_count():
    """A preempted reference block must not look slow (that bought a loop module the speedup points under
    load); sleeping stands in for preemption here: the thread's CPU clock does not run during either."""
    import time

    import torch

    class Waits(torch.nn.Module):
        def forward(self, x):
            time.sleep(0.02)
            return x

    xs = torch.zeros(3, 1)
    assert timing.time_block(Waits(), xs) < 0.01
    assert timing.time_block(Waits(), xs, clock=time.perf_counter) >= 0.02


def test_measure_until_stops_at_the_first_pass(monkeypatch):
    calls = []

    def fake_measure(remote, device="cpu", **_):
        calls.append(device)
        return timing.Measurement(5.0 if len(calls) == 1 else 1.0, 5.0, 1.0)  # the first try was disturbed

    monkeypatch.setattr(timing, "measure", fake_measure)
    assert timing.measure_until(None, lambda m: m.fast_enough).fast_enough
    assert len(calls) == 2
    calls.clear()
    assert timing.measure_until(None, lambda m: m.speedup > 100).speedup == 5.0  # the best of all tries
    assert len(calls) == timing.RETRIES


def test_retries_keep_every_module_at_its_best_time(monkeypatch):
    """A later try in which the reference happens to run slow cannot make the student's module look fast."""
    tries = iter([timing.Measurement(1.0, 1.0, 1.0), timing.Measurement(1.0, 5.0, 1.0, verified=True),
                  timing.Measurement(1.0, 9.0, 1.0)])
    monkeypatch.setattr(timing, "measure", lambda remote, device="cpu", **_: next(tries))
    result = timing.measure_until(None)
    assert (result.reference_stacked, result.speedup) == (1.0, 1.0)
    assert not result.fast_enough


HIJACK_TIME_OP = '''import gc as _gc
import torch as _torch
for _table in [o for o in _gc.get_objects() if isinstance(o, dict) and "time" in o and "count_ops" in o]:
    _real = _table["time"]
    def _no_work(req, _real=_real):  # the kit's own request handler, replaced: timed passes return at once
        if req.get("discard"):
            return _real(req)
        return {"output": _torch.zeros(req["x"].shape[:-1] + (128,))}
    _table["time"] = _no_work
'''


@pytest.mark.grading
def test_a_timed_block_that_skips_its_work_fails_the_timed_checks(tmp_path, warm_servers):
    """Student code can replace the request handler of its own process; the outputs it then returns give it away."""
    folder = fused_variant(tmp_path, patch_timers=False)
    (folder / "mha.py").write_text(HIJACK_TIME_OP + (folder / "mha.py").read_text())
    for test in speedup_results(folder, warm_servers).values():
        assert test.status == "failed", (test.id, test.message)
        assert "did not do the work of attention" in test.message and "all zeros" in test.message, test.message


#: corpus case -> the note its three timed checks carry ("": none)
KEEPS_SPEED = {
    "mha-fused-qkv-bias-always": "",  # a value bug of the MHA's own: Wq, Wk, Wv with a bias
    "mha-fused-missing-wo": "",  # no Wo: the reference's weights are loaded where the module has them
    "mha-fused-view-without-transpose": "",  # split by view alone: at 64 heads over 4 tokens no head mixes two tokens
    "heads-merge-without-contiguous-own-parts": "timed with a public stand-in for merge_heads (a transpose and a "
                                                "reshape) in its place",  # the MHA crashes inside the student's part
}


@pytest.mark.grading
@pytest.mark.parametrize("case_id", list(KEEPS_SPEED))
def test_a_fused_module_with_one_value_bug_keeps_its_speed_points(case_id, tmp_path, warm_servers):
    """Speed checks judge speed: a fused module that does the work of attention earns them whatever its values (the
    value checks charge those, once); one whose own part crashes is timed with a public stand-in for that part."""
    case = next(c for kind in ("bug", "alternative") for c in load_corpus()[kind] if c.id == case_id)
    for test in speedup_results(materialize(case, tmp_path / case.id, SOLUTIONS), warm_servers).values():
        assert test.status == "passed", (test.id, test.message)
        assert KEEPS_SPEED[case_id] in test.message and "wait until" not in test.message, (test.id, test.message)


@pytest.mark.grading
@pytest.mark.parametrize("case_id, why", [("mha-fused-returns-zeros", "all zeros"),
                                          ("mha-fused-returns-input", "depends on its own token alone")])
def test_a_fused_module_that_skips_the_work_earns_no_speed_points(case_id, why, tmp_path, warm_servers):
    """However fast, a module whose timed outputs show no work of attention (read from the outputs, in the grader's
    process) earns none of the three timed checks, and is told what its outputs showed instead."""
    case = next(c for c in load_corpus()["bug"] if c.id == case_id)
    for test in speedup_results(materialize(case, tmp_path / case.id, SOLUTIONS), warm_servers).values():
        assert test.status == "failed" and "did not do the work of attention" in test.message, (test.id, test.message)
        assert why in test.message, (test.id, test.message)


def _fused_outputs(module, xs):
    with torch.no_grad():
        return [module(x) for x in xs]


def test_the_work_of_attention_is_read_from_the_timed_outputs_alone():
    """timing.work_skipped, on the outputs of a block's squares of inputs: the reference fused module and fused
    modules with one value bug show the work of attention, a split by view alone too (at the timed 64 heads over 4
    tokens each head holds features of one token: no head mixes two tokens, yet each multiplies queries and keys);
    zeros, the input, a position-wise projection, a nonlinearity of each position alone and a running sum of the
    projections (positions mixed with weights of their own) do not."""
    import math

    stacked, fused = timing.reference_modules()
    d_out = timing.SIZES["num_heads"] * timing.SIZES["head_dim"]
    xs, squares = timing.block(timing.REPS, seed=7)
    assert len(squares) == timing.REPS // 4

    def no_wo(x):  # the merged heads, without Wo
        B, T, _ = x.shape
        H, hd = timing.SIZES["num_heads"], timing.SIZES["head_dim"]
        q, k, v = (W(x).view(B, T, H, hd).transpose(1, 2) for W in (fused.Wq, fused.Wk, fused.Wv))
        scores = (q @ k.transpose(2, 3) / math.sqrt(hd)).masked_fill(~fused.mask[:T, :T], float("-inf"))
        return (scores.softmax(-1) @ v).transpose(1, 2).reshape(B, T, d_out)

    def view_split(x):  # the heads split by view(B, H, T, head_dim) alone (examples/buggy-student)
        B, T, _ = x.shape
        H, hd = timing.SIZES["num_heads"], timing.SIZES["head_dim"]
        q, k, v = (W(x).view(B, H, T, hd) for W in (fused.Wq, fused.Wk, fused.Wv))
        scores = (q @ k.transpose(2, 3) / math.sqrt(hd)).masked_fill(~fused.mask[:T, :T], float("-inf"))
        return fused.Wo((scores.softmax(-1) @ v).transpose(1, 2).reshape(B, T, d_out))

    works = {"the reference": fused, "no Wo": no_wo, "the reference stacked": stacked,
             "a split by view alone": view_split}
    skips = {"zeros": lambda x: x.new_zeros(*x.shape[:-1], d_out), "its input": lambda x: x.repeat(1, 1, 2),
             "a position-wise projection": lambda x: fused.Wo(fused.Wv(x)),
             "a nonlinearity of each position alone": lambda x: fused.Wo(fused.Wv(x).softmax(-1)),
             "a running sum": lambda x: fused.Wo(fused.Wv(x).cumsum(1))}
    for name, module in works.items():
        assert timing.work_skipped(_fused_outputs(module, xs), xs, squares, d_out) == "", name
    for name, module in skips.items():
        assert timing.work_skipped(_fused_outputs(module, xs), xs, squares, d_out), f"{name} showed the work"
    wrong_shape = _fused_outputs(lambda x: x, xs)
    assert "not a float tensor (2, 4, 128)" in timing.work_skipped(wrong_shape, xs, squares, d_out)


def test_a_square_of_timed_inputs_changes_half_of_one_token_the_rest_and_both():
    """Each square of a block: x, x with half the features of the token at p replaced, x with everything else
    replaced, and both; p is never the first or last position; every input of the block differs from every
    other."""
    xs, squares = timing.block(timing.REPS, seed=3)
    T, d_in = timing.SIZES["tokens"], timing.SIZES["d_in"]
    for a, b, c, d, p in squares:
        assert 0 < p < T - 1
        part = (xs[a] != xs[b]).any(0)  # (T, d_in): what the second input replaced
        assert int(part.sum()) == int(part[p].sum()) == d_in // 2  # half the features of token p, nothing else
        assert torch.equal(xs[a][:, part], xs[c][:, part]) and (xs[a][:, ~part] != xs[c][:, ~part]).all()
        assert torch.equal(xs[d][:, part], xs[b][:, part]) and torch.equal(xs[d][:, ~part], xs[c][:, ~part])
    assert len({x.numpy().tobytes() for x in xs}) == timing.REPS
    assert torch.equal(timing.inputs(reps=timing.REPS, seed=3), xs), "the timed inputs are the block's"


def test_a_public_stand_in_is_the_operation_the_contract_asks_for():
    """The public stand-ins a module whose part crashes is timed with compute what the reference parts compute."""
    from autograder.sandbox import standin
    from solutions import attention, heads, masks

    x = torch.randn(2, 5, 12)
    assert torch.equal(standin.PUBLIC[("heads", "split_heads")](x, 3), heads.split_heads(x, 3))
    split = heads.split_heads(x, 3)  # (2, 3, 5, 4)
    assert torch.equal(standin.PUBLIC[("heads", "merge_heads")](split), heads.merge_heads(split))
    assert torch.equal(standin.PUBLIC[("masks", "causal_mask")](5), masks.causal_mask(5))
    got = standin.PUBLIC[("attention", "scaled_dot_product_attention")](split, split, split, masks.causal_mask(5))
    expected = attention.scaled_dot_product_attention(split, split, split, masks.causal_mask(5))
    assert all(torch.allclose(g, e) for g, e in zip(got, expected))


SPIN = {  # the module's forward first works 30 ms on a CPU: in its own thread, or in another one
    "one thread": ("        import time\n        end = time.thread_time() + 0.03\n"
                   "        while time.thread_time() < end:\n            pass\n"),
    "a new thread": ("        import threading, time\n        def spin():\n"
                     "            end = time.thread_time() + 0.03\n            while time.thread_time() < end:\n"
                     "                pass\n        worker = threading.Thread(target=spin)\n        worker.start()\n"
                     "        worker.join()\n"),
    "a waiting thread": ("        _go.set()\n        _done.wait()\n        _done.clear()\n"),
}
WAITING_WORKER = """import threading as _threading, time as _t
_go, _done = _threading.Event(), _threading.Event()
def _worker():
    while True:
        _go.wait()
        _go.clear()
        end = _t.thread_time() + 0.03
        while _t.thread_time() < end:
            pass
        _done.set()
_threading.Thread(target=_worker, daemon=True).start()
"""


@pytest.mark.grading  # starts a student process
@pytest.mark.parametrize("how", list(SPIN))
def test_only_the_run_delay_of_a_block_run_by_one_thread_is_taken_off(tmp_path, how, monkeypatch):
    """Load is taken off the student's block only when one thread did all its work: the time that thread
    waited for a CPU. Work in another thread, new or already waiting, is timed by the wall clock alone."""
    import os
    import subprocess
    import sys
    import time

    from autograder.sandbox import batchlock, freeze
    from autograder.sandbox.client import Sandbox

    if how == "one thread":  # a task started anywhere on this busy machine also stops the correction
        monkeypatch.setattr(freeze, "tasks_created", lambda: 0)
    monkeypatch.setattr(freeze, "own_run_delay", lambda: 0)  # the grader's own wait, always taken off: none here
    monkeypatch.setattr(freeze, "own_schedstat", lambda: (time.thread_time_ns(), 0))
    folder = fused_variant(tmp_path, patch_timers=False)
    text = (folder / "mha.py").read_text().replace(SLEEP, SPIN[how] + "        B, T, _ = x.shape\n"
                                                    "        H, hd = self.num_heads, self.head_dim")
    if how == "a waiting thread":
        text = WAITING_WORKER + text
    (folder / "mha.py").write_text(text)
    cpus = os.sched_getaffinity(0)
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        with Sandbox(folder) as sandbox:
            remote = timing.build_fused(sandbox)
            root = sandbox.process_tree_root()
            student = freeze.tree(root)[-1]
            while len(os.listdir(f"/proc/{student}/task")) > (2 if how == "a waiting thread" else 1):
                time.sleep(0.05)  # the student process's start-up thread (a meta-device warm-up) has ended
            for pid in freeze.tree(root) + [busy.pid]:  # one CPU for all: the block must wait for it
                for tid in os.listdir(f"/proc/{pid}/task"):
                    os.sched_setaffinity(int(tid), {min(cpus)})
            os.sched_setaffinity(0, {min(cpus)})  # this thread too: a block runs on the CPU of the grader's thread
            xs = timing.inputs(reps=4)
            with batchlock.quiet(root):  # as a real measurement: no other grading of the machine stops it meanwhile
                wall_minus, outputs, waited = timing.time_student_block(remote, xs, root)
    finally:
        os.sched_setaffinity(0, cpus)
        busy.kill()
        busy.wait()
    assert len(outputs) == 4 and wall_minus >= 0.03
    if how == "one thread":
        assert waited > 0, "expected the time the block waited behind the busy loop taken off"
    else:
        assert waited == 0, "expected a block that used two threads timed by the wall clock alone"


SPAWNED = {**SPIN, "a new process": ("        import os, time\n        child = os.fork()\n"
                                       "        if child == 0:\n            end = time.thread_time() + 0.03\n"
                                       "            while time.thread_time() < end:\n                pass\n"
                                       "            os._exit(0)\n        os.waitpid(child, 0)\n")}


@pytest.mark.grading  # starts a student process
@pytest.mark.parametrize("how", ["one thread", "a new thread", "a new process"])
def test_the_cpu_of_every_thread_that_ran_in_a_block_is_counted(tmp_path, how, monkeypatch):
    """Whatever is taken off a block as load, the CPU time the student's processes used in it stays: every
    thread and process that ran, those started and ended inside each pass included. Here the grader's own
    run delay is made to cover the whole block (as a student thread that keeps the CPU after answering, or a
    wait counted twice, would make it): what is left is the 30 ms of work per pass, wherever it ran (a thread
    started and joined inside forward was missed: about 1 ms per pass was left)."""
    import itertools
    import time

    from autograder.sandbox import batchlock, freeze
    from autograder.sandbox.client import Sandbox

    late = itertools.count(0, 100 * 10**9)  # the grader's run delay: 100 s more at every reading
    monkeypatch.setattr(freeze, "own_run_delay", lambda: next(late))
    monkeypatch.setattr(freeze, "own_schedstat", lambda: (time.thread_time_ns(), next(late)), raising=False)
    folder = fused_variant(tmp_path, patch_timers=False)
    (folder / "mha.py").write_text((folder / "mha.py").read_text().replace(
        SLEEP, SPAWNED[how] + "        B, T, _ = x.shape\n        H, hd = self.num_heads, self.head_dim"))
    with Sandbox(folder) as sandbox:
        remote = timing.build_fused(sandbox)
        root = sandbox.process_tree_root()
        with batchlock.quiet(root):
            seconds, outputs, waited = timing.time_student_block(remote, timing.inputs(reps=4), root)
    assert len(outputs) == 4
    assert seconds >= 0.027, (f"expected the 30 ms of CPU per pass that {how} used to count, got "
                              f"{seconds * 1e3:.1f} ms per pass ({waited * 1e3:.1f} ms taken off)")


def test_the_run_delay_of_a_student_thread_that_lowered_its_priority_is_not_taken_off(monkeypatch):
    """A student thread at nice 19 (or SCHED_IDLE) waits for a CPU by its own choice: its run delay is no load
    of the machine, and nothing of it is taken off; at the grader's own priority it is."""
    import time

    from autograder.sandbox import freeze

    class Remote:  # a block of 4 passes that takes 80 ms by the wall clock
        def time(self, xs, discard=False):
            return ["out"] * len(xs), 0.08, 0.0

    def block(nice, policy=freeze.SCHED_OTHER):
        readings = iter([{(1, 1): (0, 0)}, {(1, 1): (int(4e6), int(60e6))}])  # 4 ms on a CPU, 60 ms queued
        monkeypatch.setattr(freeze, "thread_times", lambda pids: next(readings))
        monkeypatch.setattr(freeze, "priority", lambda pid, tid: (policy, nice) if pid == 1 else (0, 0))
        return timing.time_student_block(Remote(), [0, 1, 2, 3], root=1)

    monkeypatch.setattr(freeze, "tree", lambda root: [1])
    monkeypatch.setattr(freeze, "tree_cpu_ns", lambda pids: {1: 0})
    monkeypatch.setattr(freeze, "block_cpu_ns", lambda before, pids: int(4e6))
    monkeypatch.setattr(freeze, "tasks_created", lambda: 7)
    assert block(0)[2] == pytest.approx(0.015), "expected the 60 ms the thread waited taken off (15 ms per pass)"
    for nice, policy, what in ((19, freeze.SCHED_OTHER, "nice 19"), (0, 5, "SCHED_IDLE"), (0, 3, "SCHED_BATCH")):
        seconds, _, waited = block(nice, policy)
        assert waited == 0 and seconds == pytest.approx(0.02), f"expected nothing taken off a thread at {what}"


def test_what_is_taken_off_leaves_the_cpu_of_both_sides_of_the_relay(monkeypatch):
    """A wait counted twice (the grader's thread and the student's queued behind the same load at once, or a
    student thread kept runnable whose run delay is the grader's own work) takes nothing off either side's
    work: the student's CPU and the grader's own (writing requests, reading answers) stay."""
    from autograder.sandbox import freeze

    class Remote:  # 4 passes in 40 ms; the grader's thread ran 8 ms of them and waited 20 ms for a CPU
        sandbox = type("Sandbox", (), {"relay_cpu": 0.008})()

        def time(self, xs, discard=False):
            return ["out"] * len(xs), 0.04, 0.02

    readings = iter([{(1, 1): (0, 0)}, {(1, 1): (int(24e6), int(40e6))}])  # 24 ms on a CPU, 40 ms queued
    monkeypatch.setattr(freeze, "tree", lambda root: [1])
    monkeypatch.setattr(freeze, "thread_times", lambda pids: next(readings))
    monkeypatch.setattr(freeze, "tree_cpu_ns", lambda pids: {1: 0})
    monkeypatch.setattr(freeze, "block_cpu_ns", lambda before, pids: int(24e6))
    monkeypatch.setattr(freeze, "priority", lambda pid, tid: (0, 0))
    monkeypatch.setattr(freeze, "tasks_created", lambda: 7)
    seconds, _, waited = timing.time_student_block(Remote(), [0, 1, 2, 3], root=1)
    assert seconds == pytest.approx(0.008), f"expected (24 + 8) ms / 4 passes left, got {seconds * 1e3:.2f} ms"


def test_a_run_delay_longer_than_the_block_leaves_the_threads_time_on_a_cpu(monkeypatch):
    """The kernel counts a wait in the run delay when it ends, so a wait that began before the block (the
    student thread still queued after its last answer, on a loaded machine) can exceed the block itself:
    what is taken off never leaves less than the thread's own time on a CPU (it left 0 s: a division by
    zero in the speedup)."""
    import time

    from autograder.sandbox import freeze

    class Remote:  # a block of 4 passes that takes 30 ms by the wall clock
        def time(self, xs, discard=False):
            time.sleep(0.03)
            return ["out"] * len(xs), 0.03, 0.0

    readings = iter([{(1, 1): (0, 0)}, {(1, 1): (int(2e6) * 4, int(50e6) * 4)}])  # 2 ms on a CPU, 50 ms queued
    monkeypatch.setattr(freeze, "tree", lambda root: [1])
    monkeypatch.setattr(freeze, "thread_times", lambda pids: next(readings))
    monkeypatch.setattr(freeze, "tree_cpu_ns", lambda pids: {1: 0})
    monkeypatch.setattr(freeze, "block_cpu_ns", lambda before, pids: int(2e6) * 4)
    monkeypatch.setattr(freeze, "priority", lambda pid, tid: (0, 0))
    monkeypatch.setattr(freeze, "tasks_created", lambda: 7)
    seconds, outputs, waited = timing.time_student_block(Remote(), [0, 1, 2, 3], root=1)
    assert len(outputs) == 4
    assert seconds >= 0.002, f"expected at least the thread's 2 ms on a CPU per pass to count, got {seconds * 1e3:.3f} ms"
    assert waited >= 0


@pytest.mark.parametrize("seed", [0, 123, 2**52 - 1])
def test_the_kits_seed_draws_what_torch_manual_seed_draws_on_the_cpu(seed):
    """seeding.manual_seed seeds the CPU as torch.manual_seed does: the reference modules built after it, and
    every draw, are the same."""
    from autograder.sandbox.seeding import manual_seed

    torch.manual_seed(seed)
    expected = (torch.nn.Linear(3, 4).weight.detach().clone(), torch.rand(5), torch.initial_seed())
    manual_seed(seed)
    got = (torch.nn.Linear(3, 4).weight.detach().clone(), torch.rand(5), torch.initial_seed())
    assert torch.equal(got[0], expected[0]) and torch.equal(got[1], expected[1]) and got[2] == expected[2], (
        f"after seeding.manual_seed({seed}) expected the draws of torch.manual_seed({seed}), got others")


def test_the_kits_seed_queues_nothing_for_devices_that_have_not_started():
    """torch.manual_seed queues its seed for CUDA not started, with a stack trace of its caller (~0.35 ms at the
    depth of a check): seeding.manual_seed seeds CUDA only once it runs, where no lazy seed is needed."""
    from autograder.sandbox.seeding import manual_seed

    tracker = getattr(torch.cuda, "_lazy_seed_tracker", None)
    slot = next((s for s in ("manual_seed_all_cb", "manual_seed_for_all_devices") if hasattr(tracker, s)), None)
    if slot is None or torch.cuda.is_initialized():
        pytest.skip("this torch keeps no lazy CUDA seed to look at, or CUDA has started in this process")
    setattr(tracker, slot, None)
    torch.manual_seed(5)
    assert getattr(tracker, slot) is not None, "expected torch.manual_seed to queue a CUDA seed here"
    setattr(tracker, slot, None)
    manual_seed(5)
    assert getattr(tracker, slot) is None, "expected seeding.manual_seed to queue no CUDA seed"


SEES_ALONE = {  # corpus case -> what it prints once it has looked at its first timed pass
    "hidden-loop-batched-through-base": "a timed pass's input has base None",
    "hidden-loop-batched-through-storage": "a timed pass's storage holds 1 input(s)",
    "hidden-loop-reads-ahead": "0 bytes sent ahead, 0 later input(s) in reach",
}


@pytest.mark.grading
@pytest.mark.parametrize("case_id", list(SEES_ALONE))
def test_a_timed_pass_sees_its_own_input_alone_and_only_when_it_runs(case_id, tmp_path):
    """Each pass of a timed block is a request of its own, sent once the pass before it has answered, its input
    in a storage of its own: no view of a stacked block (._base), no storage shared with other passes, nothing
    of a later pass in the process (on the call stack or sent ahead). Told by the corpus's cases that look."""
    from tests.corpus import load_attacks
    from autograder.sandbox.client import Sandbox

    case = next(c for c in load_attacks() if c.id == case_id)
    with Sandbox(materialize(case, tmp_path / case.id, SOLUTIONS, params={})) as sandbox:
        many, _ = timing.build_timed(sandbox)
        outputs, seconds, _ = many.time(timing.inputs(reps=4))
        said = sandbox.output_tail()
    assert len(outputs) == 4 and seconds > 0
    assert SEES_ALONE[case_id] in said, f"expected {SEES_ALONE[case_id]!r} in what the module printed, got {said!r}"
