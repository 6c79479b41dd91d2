"""The speedup checks: is the student's fused module really faster?

Kept in one place, and in layers (each its own grader test):

1. structure (in the graders): the fused forward's matrix-product count,
   counted with torch's dispatch mode, does not grow with num_heads;
2. the student's fused module against the instructor's reference *stacked*
   module (never the student's own stacked one, which could be made slow):
   it must be at least MIN_SPEEDUP times faster;
3. the student's fused module against the reference *fused* module: at most
   MAX_SLOWDOWN times slower.

Timing the student cannot fake, and load cannot move: every duration is read
by the trusted process's own clocks. The student process runs a block of
forward passes on request; the grader times the whole request by the wall
clock, so a module that sleeps, or works in other threads or processes, is
slow however it patches the timers of its own process. From that wall time
one thing may be taken off: when a single thread of the student's whole
process tree worked during the block (and no thread or process started or
ended meanwhile), the time
that thread was runnable but waited for a CPU, which the kernel counts
(run delay, /proc/<pid>/task/<tid>/schedstat): that is the machine's load,
not the module's cost (`time_student_block`). The reference modules run in
the grader's own thread and are timed by its CPU clock (`time.thread_time`),
which preemption does not advance. Timed by the wall clock, the long
reference stacked block (about 15 times a fused one) was inflated by load
so much that a loop-over-heads module looked 4.5 times faster than it, and
an inflated reference fused block once let a loop pass the second check
(benchmarks/speedup_reliability.py, under heavy load); with these clocks,
load changes neither side. The sizes make per-operator overhead dominate
(many small heads), where fusing pays most: the reference stacked module runs
about ten operators per head, a fused one about fifteen in all. Both sides
run single-threaded; rounds of the three modules are interleaved and each
side's best round is compared, which filters out the moments the machine was
busy; a failing measurement is repeated up to RETRIES times. On CUDA the
blocks are synchronised and the reference side is timed with CUDA events.

Inputs nobody can predict or replay: each try draws a fresh secret seed in
this process (`secrets`), and each round's inputs (and the warm-up's) come
from a seed derived from it by a hash, so no input of one round tells
anything of another's, no try reuses an input of an earlier one, and a table
of inputs computed in advance or a cache of earlier answers never hits. The
seeds are recorded in the report, so an instructor can rebuild every input
(`round_inputs`). And no student code runs while anything of the reference
is timed: the whole student process tree is stopped around each reference
block (autograder/sandbox/freeze.py), and a round in which any of it still used CPU
is discarded.
"""
from __future__ import annotations

import hashlib
import secrets
import time
from dataclasses import dataclass, field

import torch

from autograder.sandbox import batchlock, freeze, wire
from autograder.sandbox.freeze import frozen
from autograder.sandbox.seeding import manual_seed

from solutions import mha as ref

SIZES = {"batch": 2, "tokens": 16, "d_in": 64, "num_heads": 32, "head_dim": 2}
# Measured here (benchmarks/speedup_reliability.py, 40 gradings each, a busy loop on one of the 2 cores
# and the kit's whole test suite on the other): a correct fused module is 4.8-12.6x faster than the
# reference stacked one (median 10.0) and 1.04-2.4x as slow as the reference fused one (median 1.27); a
# fused module that loops over the heads is 1.1-1.7x faster (median 1.41) and 8.1-10.1x as slow (median
# 8.9). Load moves neither figure much (see the clocks above), so each threshold sits about halfway, on a
# log scale, between the honest module's worst and the loop's best: 1.6-1.8x from each side for
# MIN_SPEEDUP, 1.7-2x for MAX_SLOWDOWN (which leaves room for honest styles slower than the reference).
MIN_SPEEDUP = 3.0  # fused vs the reference stacked module
MAX_SLOWDOWN = 4.0  # fused vs the reference fused module
ROUNDS = 5
#: A try may stop after this many rounds once its figures pass both checks (`measure`'s `enough`): a pass is
#: decided by each side's best round, so further rounds could only confirm it or, by luck, undo it; a failing
#: measurement that is only slow takes all ROUNDS and the retries, a wrong one ends at its first mismatched round.
MIN_ROUNDS = 2
REPS = 20
#: Passes of the reference stacked module timed in a round: the first STACKED_REPS of the round's REPS inputs. It
#: runs here, timed by this thread's CPU clock with no round trip to share out, and one pass takes ~3.7 ms (about
#: 15 fused ones), so five passes give its time per pass as well as twenty did; twenty were a quarter of the CPU
#: of a grading that passes, and most of one whose module is too slow (RETRIES x ROUNDS rounds). Measured back to
#: back here (benchmarks/speedup_reliability.py, 60 gradings each, a busy loop on one core), 5 against 20: the
#: correct module 6.35-8.17x faster than the reference stacked one (median 7.48) against 5.87-7.23x (6.84); the
#: loop over heads 1.44-1.53x (1.48) against 1.38-1.46x (1.40); each side ~6 % higher, the gap and both checks'
#: outcomes unchanged; the corpus's three timing attacks failed 60/60 with 5.
STACKED_REPS = 5
RETRIES = 3


@dataclass
class Measurement:
    """Best seconds per forward pass of each module, over the interleaved rounds."""

    student_fused: float
    reference_stacked: float
    reference_fused: float
    device: str = "cpu"
    verified: bool = True  # every timed pass of the student's module returned the reference's output
    seeds: tuple[int, ...] = ()  # the secret seed of each try (round_inputs rebuilds its inputs)
    rounds: int = ROUNDS  # rounds timed, over all tries
    discarded: int = 0  # of them, rounds in which student code ran while a reference was timed
    details: list = field(default_factory=list)  # why rounds were discarded (CPU used, new processes)
    neighbours: int = 0  # in a class run, the other submissions' process trees stopped during the measurement
    load_s: float = 0.0  # seconds per pass, summed over rounds, taken off the student's blocks: run delay
    mismatched: list = field(default_factory=list, repr=False)  # (input, output) of passes unlike the reference
    module: object = field(default=None, repr=False)  # the student's timed module (a RemoteModule)

    @property
    def vouched(self):
        """At least one round was timed with the whole student side frozen during the references."""
        return self.rounds > self.discarded

    @property
    def speedup(self):
        """How many times faster the student's fused module is than the reference stacked one."""
        return self.reference_stacked / self.student_fused if self.vouched else float("nan")

    @property
    def slowdown(self):
        """How many times slower the student's fused module is than the reference fused one."""
        return self.student_fused / self.reference_fused if self.vouched else float("nan")

    @property
    def fast_enough(self):
        return self.speedup >= MIN_SPEEDUP

    @property
    def close_to_reference(self):
        return self.slowdown <= MAX_SLOWDOWN

    def describe(self):
        s = SIZES
        text = (f"batch {s['batch']}, {s['tokens']} tokens, d_in {s['d_in']}, {s['num_heads']} heads of "
                f"{s['head_dim']} on {self.device}: your fused {self.student_fused * 1e6:.0f} us, reference stacked "
                f"{self.reference_stacked * 1e6:.0f} us, reference fused {self.reference_fused * 1e6:.0f} us per "
                f"forward pass (best of {self.rounds - self.discarded} rounds of {REPS} passes, {STACKED_REPS} of the "
                f"reference stacked")
        if self.discarded:
            text += f"; {self.discarded} more discarded: your code ran while a reference module was timed"
        return text + ")"

    def to_dict(self):
        """What the report records of the measurement (the seeds rebuild every input: round_inputs)."""
        return {"student_fused_s": self.student_fused, "reference_stacked_s": self.reference_stacked,
                "reference_fused_s": self.reference_fused, "speedup": self.speedup, "slowdown": self.slowdown,
                "device": self.device, "verified": self.verified, "seeds": list(self.seeds), "rounds": self.rounds,
                "discarded": self.discarded, "discarded_why": self.details[:5], "neighbours_stopped": self.neighbours,
                "run_delay_taken_off_s": self.load_s,
                "reps": REPS, "stacked_reps": STACKED_REPS, "sizes": dict(SIZES)}


def inputs(device="cpu", reps=REPS, seed=0):
    """`reps` different inputs stacked on dim 0: one per timed pass, new ones each round (nothing to cache)."""
    s = SIZES
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(reps, s["batch"], s["tokens"], s["d_in"], generator=gen).to(device)  # (reps, B, T, d_in)


def round_seed(secret: int, r: int) -> int:
    """The seed of round `r` (0: the warm-up) of a try whose secret seed is `secret`: a hash, so that the
    inputs of one round reveal nothing of another's (a generator's state can be recovered from its output)."""
    digest = hashlib.sha256(f"mha-timing:{secret}:{r}".encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1


def round_inputs(secret: int, r: int, device="cpu"):
    """The inputs of round `r` of the try with seed `secret` (the warm-up, r = 0, has 2 passes), as timed."""
    return inputs(device, 2 if r == 0 else REPS, seed=round_seed(secret, r))


def new_secret() -> int:
    """A seed for one try's inputs that no student process can know in advance."""
    return secrets.randbits(52)  # exact in JSON readers that use doubles


def reference_modules(device="cpu"):
    s = SIZES
    manual_seed(0)
    stacked = ref.StackedMultiHeadAttention(s["d_in"], s["head_dim"], s["tokens"], 0.0, s["num_heads"])
    fused = ref.MultiHeadAttention(s["d_in"], s["num_heads"] * s["head_dim"], s["tokens"], 0.0, s["num_heads"])
    return stacked.eval().to(device), fused.eval().to(device)


def build_fused(student, device="cpu"):
    """The student's fused module at the timing sizes, on `device`, with the reference fused module's weights."""
    s = SIZES
    remote = student.new("mha", "MultiHeadAttention", s["d_in"], s["num_heads"] * s["head_dim"], s["tokens"], 0.0,
                         s["num_heads"], seed=0)
    _, fused = reference_modules()
    remote.load({name: p.detach().clone() for name, p in fused.named_parameters()})
    return remote.to(device=device) if device != "cpu" else remote


def time_block(module, xs, clock=time.thread_time):
    """Seconds per forward pass of `module`, one pass per input of `xs`, by this process's clock.

    On CPU the clock is this thread's CPU time by default (the module must run single-threaded:
    `measure` sets one thread), so that preemption does not count; `bench`, which may run several
    threads, passes the wall clock."""
    with torch.no_grad():
        if xs.device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize()
            start.record()
            for x in xs:
                module(x)
            end.record()
            torch.cuda.synchronize()
            return start.elapsed_time(end) / 1e3 / len(xs)
        begin = clock()  # CPU time by default: a reference preempted by a busy machine is not made slower
        for x in xs:
            module(x)
        return (clock() - begin) / len(xs)


def time_remote_block(remote, xs, discard=False):
    """(seconds per forward pass, outputs) of a module in the student process, by this process's clock.

    The request runs the whole block there (synchronising CUDA at its end);
    the round trip's fixed cost is shared by the passes. `discard`: the
    outputs stay there (for `bench`, which checks nothing).
    """
    begin = time.perf_counter()
    outputs = remote.time(xs, discard=discard)
    return (time.perf_counter() - begin) / len(xs), outputs


def time_student_block(remote, xs, root):
    """(seconds per forward pass, outputs, seconds per pass not counted) of the student's block.

    The block is timed by the wall clock around the whole request (`time_remote_block`). When a single
    thread of the student's whole process tree used CPU during it, and no task was created on the machine
    meanwhile (a thread or process that worked and ended before it was seen), the time that
    thread spent runnable but waiting for a CPU (the kernel's run delay, /proc/.../schedstat) is taken
    off: that is the machine's load, not the module's cost. What is left is the thread's time on a CPU
    plus any time it chose to wait (sleeping stays counted), and never less than that time on a CPU. A
    block that used other threads or processes is not corrected, so work spread over them cannot be
    hidden; nor is one where the kernel gives no schedstat (then the wall clock alone counts, as before).
    """
    pids = freeze.tree(root) if root is not None else []
    before, created = freeze.thread_times(pids), freeze.tasks_created()
    seconds, outputs = time_remote_block(remote, xs)
    after = freeze.thread_times(pids)
    if not before or created is None or freeze.tasks_created() != created or set(before) != set(after):
        return seconds, outputs, 0.0  # a thread or process started (anywhere), or one ended: no correction
    ran = [key for key, (cpu, _) in after.items() if cpu > before[key][0]]
    if len(ran) != 1:
        return seconds, outputs, 0.0
    key = ran[0]
    on_cpu = (after[key][0] - before[key][0]) / 1e9 / len(xs)
    waited = (after[key][1] - before[key][1]) / 1e9 / len(xs)
    # never below the thread's own time on a CPU: the kernel adds a wait to the run delay when the wait ends,
    # so a wait that began before the block (the thread still queued after its last answer, on a loaded
    # machine) can be counted in it; taken off whole, it left a block of 0 s (a division by zero)
    waited = min(max(waited, 0.0), max(seconds - on_cpu, 0.0))
    return seconds - waited, outputs, waited


def serialization_cost(xs):
    """Seconds to serialise and read back a block's request and answer, measured here.

    The part of a block's fixed cost that the reference modules are charged.
    It is measured in this process, never in the student's: a cost that the
    student process reported, or that it could stretch by answering some
    requests slowly, would make the references look slow.
    """
    begin = time.thread_time()
    wire.decode_request(wire.encode_request({"op": "time", "inputs": xs}))  # the request
    wire.decode(wire.encode({"ok": True, "outputs": xs.clone()}))  # the answer
    return time.thread_time() - begin


def did_the_work(outputs, reference, xs, mismatched=None):
    """Whether the timed block returned, for every input, what the reference module gives for it.

    `mismatched` (a list) collects the (input, output) pairs that differ from the reference, so that a
    grader can ask whether they are explained by a fault of the student's parts (graders/blame.py)."""
    if not isinstance(outputs, list) or len(outputs) != len(xs):
        return False
    ok = True
    with torch.no_grad():
        for out, x in zip(outputs, xs):
            expected = reference(x)
            if not (isinstance(out, torch.Tensor) and out.shape == expected.shape
                    and torch.allclose(out, expected, rtol=1e-3, atol=1e-4)):
                ok = False
                if mismatched is not None:
                    mismatched.append((x, out))
    return ok


def measure(fused_remote, device="cpu", rounds=ROUNDS, reps=REPS, secret=None, enough=None,
            stop_on_mismatch=True) -> Measurement:
    """Interleaved rounds of the student's fused module and the two reference modules.

    The student's block includes one round trip to its process; each
    reference block is charged the part of it that this process can measure
    alone: serialising the same request and answer (the fastest of the
    rounds). The rest of a round trip (waking the other process) is small,
    and a student process cannot stretch this charge. Every input comes from
    `secret` (default: a fresh secret seed), and the student's outputs are
    checked against the reference fused module (which has the same weights)
    after the timing: a block that skips its work, or replays answers, is
    caught. The references are timed with the student's process tree
    frozen; a round in which it used CPU anyway is discarded. In a class
    run (autograder/sandbox/batchlock.py) the whole measurement holds the batch's
    lock, with every other submission's process tree stopped. A try ends
    after the first round whose outputs differ from the reference (nothing
    can pass then; unless `stop_on_mismatch` is false: the outputs of a
    module excused by the student's own faulty parts, `remeasure_excused`),
    or, given `enough` (a predicate on a Measurement, as `passes`), once the
    figures of MIN_ROUNDS or more rounds satisfy it.
    """
    secret = new_secret() if secret is None else secret
    stacked, fused = reference_modules(device)
    root = fused_remote.sandbox.process_tree_root()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    verified, discarded, details, mismatched, load = True, 0, [], [], 0.0
    with batchlock.quiet(root) as neighbours:  # in a class run: no other submission's code runs meanwhile
        try:
            warm = round_inputs(secret, 0, device)
            time_remote_block(fused_remote, warm)  # warm up both sides
            time_block(stacked, warm), time_block(fused, warm)
            best = [float("inf")] * 4
            for r in range(1, rounds + 1):
                xs = inputs(device, reps, seed=round_seed(secret, r))
                student, outputs, waited = time_student_block(fused_remote, xs, root)
                load += waited
                with frozen(root) as stop:
                    ref_stacked, ref_fused = time_block(stacked, xs[:STACKED_REPS]), time_block(fused, xs)  # CPU clock
                    trip = serialization_cost(xs)
                verified = did_the_work(outputs, fused, xs, mismatched) and verified
                if stop.clean is False:
                    discarded += 1
                    details.append(stop.why())
                    continue
                best = [min(b, t) for b, t in zip(best, (student, ref_stacked, ref_fused, trip))]
                if r < rounds and ((not verified and stop_on_mismatch) or enough is not None and r >= MIN_ROUNDS
                                   and enough(_figures(best, reps, device, verified, secret, r, discarded, details,
                                                       load))):
                    rounds = r  # decided: wrong outputs fail whatever the times; or the figures already pass
                    break
        finally:
            torch.set_num_threads(threads)
    ran = [f.why().replace("the student's", "another submission's") for f in neighbours if f.clean is False]
    if ran:  # a neighbour of the batch ran anyway (its processes could not all be stopped): nothing vouched
        discarded = rounds
        details.append("; ".join(ran) + " during the measurement")
    m = _figures(best, reps, device, verified, secret, rounds, discarded, details, load)
    m.mismatched, m.neighbours = mismatched, len(neighbours)
    return m


def _figures(best, reps, device, verified, secret, rounds, discarded, details, load) -> Measurement:
    """The Measurement of the best times so far (student, reference stacked, reference fused, serialisation)."""
    student, ref_stacked, ref_fused, trip = best
    return Measurement(student, ref_stacked + trip / reps, ref_fused + trip / reps, device=device, verified=verified,
                       seeds=(secret,), rounds=rounds, discarded=discarded, details=list(details), load_s=load)


def passes(m: Measurement) -> bool:
    return m.verified and m.vouched and m.fast_enough and m.close_to_reference


def times_pass(m: Measurement) -> bool:
    """The figures pass both checks, whatever the outputs (for a module whose outputs were excused)."""
    return m.vouched and m.fast_enough and m.close_to_reference


def measure_until(fused_remote, passes=passes, device="cpu", retries=RETRIES, stop_on_mismatch=True) -> Measurement:
    """Measure; while `passes` is false, measure more, at most `retries` times in all (none after a try whose
    outputs differed from the reference's, `verified` only ever turning false, unless `stop_on_mismatch` is
    false).

    The tries accumulate: each module keeps its best time over all rounds so
    far, so a retry sharpens every figure (the references' too) instead of
    drawing a fresh sample. Noise only ever makes a block slower, so the best
    times only move towards the truth, and no retry turns a slow module fast.
    Each try has inputs of its own (a new secret seed): nothing of an
    earlier try can be replayed.
    """
    result = None
    for _ in range(retries):
        m = measure(fused_remote, device, enough=passes, stop_on_mismatch=stop_on_mismatch)
        if result is not None:
            m = Measurement(min(m.student_fused, result.student_fused),
                            min(m.reference_stacked, result.reference_stacked),
                            min(m.reference_fused, result.reference_fused), device=device,
                            verified=m.verified and result.verified, seeds=result.seeds + m.seeds,
                            rounds=result.rounds + m.rounds, discarded=result.discarded + m.discarded,
                            details=result.details + m.details, mismatched=result.mismatched + m.mismatched,
                            neighbours=max(result.neighbours, m.neighbours), load_s=result.load_s + m.load_s)
        result = m
        if passes(result) or (not result.verified and stop_on_mismatch):  # wrong outputs are no noise: no try
            break  # can undo them
    return result


_measured = {}


def grade_speedup(student, device="cpu") -> Measurement:
    """The measurement both speedup checks of one grading share (taken once per student process)."""
    key = (id(student), device)
    if key not in _measured:
        remote = build_fused(student, device)
        _measured[key] = measure_until(remote, device=device)
        _measured[key].module = remote
    return _measured[key]


def remeasure_excused(student, device="cpu") -> Measurement:
    """The measurement of a module whose outputs differ from the reference's only by the student's own faulty
    parts (graders/blame.py excused them), taken as a correct module's is: its rounds and retries, not the one
    round after which grade_speedup stopped (a single round, on a busy machine, failed a fast module). Every
    mismatched pass is kept in `mismatched`, for the grader to excuse again. Once per student process."""
    key = (id(student), device, "excused")
    if key not in _measured:
        remote = grade_speedup(student, device).module
        _measured[key] = measure_until(remote, passes=times_pass, device=device, stop_on_mismatch=False)
        _measured[key].module = remote
    return _measured[key]
