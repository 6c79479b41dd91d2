"""The speedup checks: is the student's fused module really faster?

Kept in one place, and in layers (each its own grader test):

1. structure: the student's fused module's time per pass grows with
   num_heads (d_model fixed: FEW_HEADS heads against SIZES' 64) no more than
   GROWTH_LIMIT times as much as the reference fused module's does; a loop
   over heads grows as the reference stacked module does, tens of times
   more. Its own time with few heads counts at most as the reference fused
   module's (`Measurement.growth`), so a module cannot flatten its growth by
   being slow with few heads;
2. the student's fused module against the instructor's reference *stacked*
   module (never the student's own stacked one, which could be made slow):
   it must be at least MIN_SPEEDUP times faster;
3. the student's fused module against the reference *fused* module: at most
   MAX_SLOWDOWN times slower.

Nothing measured inside the student process decides a point: student code
can switch off, patch or lie to anything that runs there (torch's dispatch
modes, timers, the request handler). Every duration is read by the trusted
process's own clocks. The student process runs the forward passes of a block
on request, each pass a request of its own, sent only once the answer to the
pass before it is back, with its input in a storage of its own
(`RemoteModule.time`): a pass sees its own input alone, and only when it
runs, so no module can work on several passes at once or read ahead. The
grader times the whole block by the wall clock, so a module that sleeps, or
works in other threads or processes, is slow however it patches the timers
of its own process. From that wall time two things are taken off, both the
machine's load, not the module's cost: the time the grader's own thread
waited for a CPU while runnable (the kernel's run delay,
/proc/self/task/<tid>/schedstat: the grader waits for an answer that is
already there), and, when a single thread of the student's whole process
tree worked during the block (and no thread or process started or ended
meanwhile, and it kept the grader's own priority), the run delay of that
thread; never so much that less is left than the CPU time both sides used in
the block, every thread of the student's processes counted, ended ones
included (`time_student_block`). The reference modules run in
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
import os
import random
import secrets
import threading
import time
from dataclasses import dataclass, field

import torch

from autograder.sandbox import batchlock, freeze, wire
from autograder.sandbox.remote import describe_tensor, timed_pass
from autograder.sandbox.freeze import frozen
from autograder.sandbox.seeding import manual_seed

from solutions import mha as ref

#: Many small heads over few tokens: a loop's cost grows with the heads (~10 operators each), a fused module's
#: hardly does (its ~15 operators work on (B, H, T, T) scores of 2 x 64 x 4 x 4). With 32 heads over 16 tokens
#: (until 2026-11-27) a loop measured 6-8 times the reference fused module and the honest modules up to 2.2
#: times, a margin that heavy load (not two busy loops) crossed twice in 200 gradings; 64 heads over 4 tokens
#: measure 13-14 times (medians of 200) against 1.1-1.6 (benchmarks/speedup_reliability.py).
SIZES = {"batch": 2, "tokens": 4, "d_in": 64, "num_heads": 64, "head_dim": 2}
#: The structure check's second head count: d_model (128) in one head. A loop over heads does one head's work
#: here, as a fused module does; at 64 heads it does 64 heads' work, ~10 operators each.
FEW_HEADS = 1
# Measured (benchmarks/speedup_reliability.py --runs 200, 2026-11-27, a busy loop on each of the 2 cores): the
# reference, an einsum and an SDPA fused module, 200 gradings each, speedup 8.17-26.94, slowdown and growth
# 0.74-2.40; a loop over heads and five hidden loops, 200 each, speedup 2.71 at best, slowdown and growth 7.39 at
# best: each threshold sits between, 1.5-2x from each side.
MIN_SPEEDUP = 4.0  # fused vs the reference stacked module
MAX_SLOWDOWN = 4.0  # fused vs the reference fused module
#: The structure check: the student's growth from FEW_HEADS to 64 heads, over the reference fused module's.
GROWTH_LIMIT = 4.0
ROUNDS = 5
#: A try may stop after this many rounds once its figures pass every check (`measure`'s `enough`; after one, where
#: they pass by DECIDED times: `clear_pass`, below): a pass is
#: decided by each side's best round, so further rounds could only confirm it or, by luck, undo it; a failing
#: measurement that is only slow takes all ROUNDS and the retries, a wrong one ends at its first mismatched round.
MIN_ROUNDS = 2
#: A try also stops after MIN_ROUNDS vouched rounds, and no retry follows, once its figures decide every check
#: either way beyond what noise could change (`decided`): each of the three figures at least DECIDED times from
#: its threshold, past it or short of it, and at least the noise of the student's rounds to the power
#: NOISE_POWER (`Measurement.noise`: its slowest round over its fastest). Only the student's times can move a
#: figure towards passing (more rounds only lower the references' best times, which moves a failing figure
#: further from its threshold), and by at most the spread of its rounds: a loop over heads, slowdown and growth
#: 13-18 against 4 and a spread of ~1.1, is decided after two rounds instead of five rounds in each of three
#: tries; the honest modules never measured beyond 2.4 against 4 (benchmarks/speedup_reliability.py), half
#: of 2 x 4. A try whose figures pass every check stops as before (`enough`).
DECIDED = 2.0
NOISE_POWER = 4
#: A try whose first vouched round passes every check by at least DECIDED times (`clear_pass`) stops after that
#: round instead of MIN_ROUNDS. Noise only slows a block, so the student's times in later rounds could only
#: confirm the pass; the references' could only fall, by what their CPU clock lets the machine change, a few
#: per cent, not the half it would take. The honest modules measure 11-19x against 4 and 1.2-1.9 against 4 (two
#: busy loops beside), most in one clean round: a round fewer in each honest grading, ~15 % of its CPU. A round
#: that noise slowed passes by less, and the try goes on to MIN_ROUNDS as before; a failing one is unchanged.
REPS = 20
#: Passes of a reference stacked module timed in a round: the first STACKED_REPS of the round's REPS inputs. It
#: runs here, timed by this thread's CPU clock with no round trip to share out, and one pass at 64 heads takes
#: ~10 ms of CPU (about 20 fused ones, ~45 % of a round's CPU at five passes): two passes give its time per pass
#: as well as five did (benchmarks/speedup_reliability.py beside two busy loops, 2026-11-28: the margins 8.6x,
#: 8.2x and 8.6x, against 8.2x, 8.5x and 8.2x at five), and a grading's measurement costs ~60 ms less CPU.
STACKED_REPS = 2
RETRIES = 3
#: The figures of a Measurement, each the best seconds per pass over its rounds: the student's fused module
#: and the two references at SIZES' 64 heads, then at FEW_HEADS.
FIGURES = ("student_fused", "reference_stacked", "reference_fused", "student_few", "reference_stacked_few",
           "reference_fused_few")


@dataclass
class Measurement:
    """Best seconds per forward pass of each module, over the interleaved rounds."""

    student_fused: float
    reference_stacked: float
    reference_fused: float
    student_few: float = float("nan")  # the same modules with FEW_HEADS heads (the structure check)
    reference_stacked_few: float = float("nan")
    reference_fused_few: float = float("nan")
    device: str = "cpu"
    verified: bool = True  # every timed pass of the student's modules returned the reference's output
    skipped: str = ""  # what a timed block showed instead of the work of attention ("": every one showed it)
    seeds: tuple[int, ...] = ()  # the secret seed of each try (round_inputs rebuilds its inputs)
    rounds: int = ROUNDS  # rounds timed, over all tries
    discarded: int = 0  # of them, rounds in which student code ran while a reference was timed
    details: list = field(default_factory=list)  # why rounds were discarded (CPU used, new processes)
    neighbours: int = 0  # gradings of the machine stopped during the measurement (autograder/sandbox/batchlock.py)
    load_s: float = 0.0  # seconds per pass, summed over rounds, taken off the student's blocks: run delay
    mismatched: list = field(default_factory=list, repr=False)  # (input, output, module) of passes unlike the reference
    #: the student's slowest vouched round, seconds per pass, of each of its figures ("student_fused",
    #: "student_few"): with the best ones, the noise of its rounds (`noise`)
    worst: dict = field(default_factory=dict, repr=False)
    module: object = field(default=None, repr=False)  # the student's timed modules (RemoteModules: many, few heads)

    @property
    def worked(self):
        """Every timed block showed the work of attention (`work_skipped`), whatever its values."""
        return not self.skipped

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
    def growth(self):
        """How many times the student's time per pass grows from FEW_HEADS heads to 64, its time with few heads
        counted at most as the reference fused module's (being slow there flattens nothing)."""
        return self.student_fused / min(self.student_few, self.reference_fused_few) if self.vouched else float("nan")

    @property
    def noise(self):
        """How far apart the student's vouched rounds were: its slowest round's time per pass over its fastest's,
        the larger of its two blocks' (nan before two rounds)."""
        spreads = [self.worst[name] / getattr(self, name) for name in self.worst if getattr(self, name) > 0]
        return max(spreads) if len(spreads) == len(self.worst) == 2 and self.rounds - self.discarded >= 2 \
            else float("nan")

    @property
    def reference_growth(self):
        return self.reference_fused / self.reference_fused_few

    @property
    def stacked_growth(self):
        return self.reference_stacked / self.reference_stacked_few

    @property
    def relative_growth(self):
        """The student's growth over the reference fused module's: about 1 for a fused module, tens for a loop."""
        return self.growth / self.reference_growth

    @property
    def fast_enough(self):
        return self.speedup >= MIN_SPEEDUP

    @property
    def close_to_reference(self):
        return self.slowdown <= MAX_SLOWDOWN

    @property
    def flat_in_heads(self):
        return self.relative_growth <= GROWTH_LIMIT

    def describe(self):
        s = SIZES
        return (f"batch {s['batch']}, {s['tokens']} tokens, d_in {s['d_in']}, {s['num_heads']} heads of "
                f"{s['head_dim']} on {self.device}: your fused {self.student_fused * 1e6:.0f} us, reference stacked "
                f"{self.reference_stacked * 1e6:.0f} us, reference fused {self.reference_fused * 1e6:.0f} us per "
                f"forward pass ({self._rounds()})")

    def describe_growth(self):
        s = SIZES
        d = s["num_heads"] * s["head_dim"]
        few = f"{FEW_HEADS} head{'s' if FEW_HEADS > 1 else ''}"
        return (f"batch {s['batch']}, {s['tokens']} tokens, d_model {d} on {self.device}, with {few} and with "
                f"{s['num_heads']}: your fused {self.student_few * 1e6:.0f} us and {self.student_fused * 1e6:.0f} us "
                f"(x{self.growth:.2f}), reference fused {self.reference_fused_few * 1e6:.0f} us and "
                f"{self.reference_fused * 1e6:.0f} us (x{self.reference_growth:.2f}), reference stacked "
                f"{self.reference_stacked_few * 1e6:.0f} us and {self.reference_stacked * 1e6:.0f} us "
                f"(x{self.stacked_growth:.2f}) per forward pass ({self._rounds()})")

    def _rounds(self):
        kept = self.rounds - self.discarded
        text = (f"best of {kept} round{'s' if kept != 1 else ''} of {REPS} passes, each sent alone, {STACKED_REPS} "
                "of the reference stacked")
        if self.discarded:
            text += f"; {self.discarded} more discarded: your code ran while a reference module was timed"
        return text

    def to_dict(self):
        """What the report records of the measurement (the seeds rebuild every input: round_inputs)."""
        return {**{f"{name}_s": getattr(self, name) for name in FIGURES},
                "speedup": self.speedup, "slowdown": self.slowdown, "growth": self.growth,
                "reference_growth": self.reference_growth, "relative_growth": self.relative_growth,
                "device": self.device, "verified": self.verified, "skipped_work": self.skipped,
                "seeds": list(self.seeds), "rounds": self.rounds,
                "discarded": self.discarded, "discarded_why": self.details[:5], "neighbours_stopped": self.neighbours,
                "run_delay_taken_off_s": self.load_s, "reps": REPS, "stacked_reps": STACKED_REPS,
                "sizes": dict(SIZES), "few_heads": FEW_HEADS}


def inputs(device="cpu", reps=REPS, seed=0):
    """`reps` different inputs stacked on dim 0: one per timed pass, new ones each round (nothing to cache); whole
    groups of four of them form squares (`block`)."""
    return block(reps, seed)[0].to(device)  # (reps, B, T, d_in)


def block(reps=REPS, seed=0):
    """(`reps` inputs (reps, B, T, d_in), their squares): the inputs of a timed block, and where in it the work of
    attention shows (`work_skipped`).

    Each whole group of four inputs is a square: an input x (every token drawn afresh), x with a part of the
    token at one position p replaced (half its features, drawn for each square), x with everything else
    replaced (the token's other features and every other token), and x with both replaced; p is drawn for each
    square, never the first position or the last (a causal mask, or one the wrong way round, still lets the
    other positions see it). Half a token, not all of it: the two halves of the token at p meet in products
    within any head that holds them both, so the work shows however the heads are cut out of the projections
    (`view(B, H, T, head_dim)` alone, at 64 heads over 4 tokens, puts each token in heads of its own: no head
    mixes two tokens there, yet each multiplies queries and keys of that token). The inputs of a block are in
    an order drawn from the seed too, so nothing but their values tells a pass where its input stands; a square
    is (its four indices in the block, p). Every input differs from every other, as before (nothing to
    cache)."""
    s = SIZES
    gen = torch.Generator().manual_seed(seed)
    xs = torch.randn(reps, s["batch"], s["tokens"], s["d_in"], generator=gen)  # (reps, B, T, d_in)
    drawn, squares = [], []
    for g in range(reps // 4):
        x, at_p, others, both = xs[4 * g:4 * g + 4].clone()  # (B, T, d_in) each, all drawn afresh
        p = int(torch.randint(1, s["tokens"] - 1, (1,), generator=gen))
        part = torch.zeros(s["tokens"], s["d_in"], dtype=torch.bool)  # (T, d_in): half the features of token p
        part[p, torch.randperm(s["d_in"], generator=gen)[:s["d_in"] // 2]] = True
        at_p = torch.where(part, at_p, x)  # x, but for that part
        others = torch.where(part, x, others)  # x, but for everything else
        both = torch.where(part, at_p, others)  # x, but for everything
        drawn += [x, at_p, others, both]
        squares.append((4 * g, 4 * g + 1, 4 * g + 2, 4 * g + 3, p))
    drawn += list(xs[4 * len(squares):])
    order = torch.randperm(reps, generator=gen).tolist()  # position in the block -> drawn input
    where = {i: n for n, i in enumerate(order)}
    squares = [(where[a], where[b], where[c], where[d], p) for a, b, c, d, p in squares]
    return torch.stack([drawn[i] for i in order]) if drawn else xs, squares


#: The work of attention shows in a square of inputs (`block`) as an interaction: at the positions other than p,
#: out(x) - out(x, half of token p replaced) - out(x, the rest replaced) + out(x, both) is far from zero, as
#: the output there depends on token p through products: its key with the other tokens' queries, the two halves
#: of its own query and key within a head. A module that mixes positions with weights of its own (a running
#: sum), works on each position alone, or returns zeros or its input gives zero there up to rounding (at most
#: 1.0e-6 of its largest output); the reference fused module gives at least 0.029 (1 head) and 0.050 (64
#: heads), a split by view alone 0.058, a fused module with the scores divided by sqrt(d_out) 0.0066 (the
#: smallest of the corpus's value bugs; every square of 200 blocks each): the threshold sits 66x below that and
#: 100x above rounding. (Whole tokens at p, until 2026-11-28, gave no interaction for a split by view alone:
#: docs/performance/index.md.)
INTERACTION = 1e-4


def work_skipped(outputs, xs, squares, d_out):
    """What the timed outputs of a block (one per input of `xs`) show instead of the work of attention, or ""
    when every square of inputs (`block`) shows it: an output at one position that depends on a part of the
    token at another one jointly with the rest of the input (through products of queries and keys), whatever
    its values.

    Read from the outputs alone, in the trusted process; nothing the student process says about itself counts."""
    if not isinstance(outputs, list) or len(outputs) != len(xs):
        return "not every timed pass returned an output"
    if not squares:
        return "no square of inputs was timed to show it"
    for out, x in zip(outputs, xs):
        expected = (*x.shape[:-1], d_out)
        if not isinstance(out, torch.Tensor) or tuple(out.shape) != expected or not out.is_floating_point():
            what = describe_tensor(out) if isinstance(out, torch.Tensor) else type(out).__name__
            return f"a timed pass returned {what} for an input {tuple(x.shape)}, not a float tensor {expected}"
    with torch.no_grad():
        for a, b, c, d, p in squares:
            square = [outputs[n].detach().double().cpu() for n in (a, b, c, d)]  # (B, T, d_out) each
            finite = [t[torch.isfinite(t)] for t in square]
            scale = max((float(t.abs().max()) for t in finite if t.numel()), default=0.0)
            if scale == 0.0:
                return "its outputs were all zeros (or not numbers)"
            rest = [t for t in range(square[0].shape[1]) if t != p]
            moved = [(square[0] - square[1])[:, rest], (square[2] - square[3])[:, rest]]  # token p: (B, T - 1, d_out)
            if all(_largest(m) <= INTERACTION * scale for m in moved):
                return ("the outputs at the other positions did not change when the token at one position did "
                        "(each position's output depends on its own token alone, or on none: no attention "
                        "between positions)")
            interaction = (square[0] - square[1] - square[2] + square[3])[:, rest]  # (B, T - 1, d_out)
            if _largest(interaction) <= INTERACTION * scale:
                return ("its outputs mixed the positions with weights that do not depend on the tokens (a change "
                        "of half of one token's features moved the other positions' outputs the same way whatever "
                        "the rest of the input was: no products of queries and keys)")
    return ""


def _largest(t):
    """The largest finite magnitude in `t` (0 when none is finite)."""
    t = t[torch.isfinite(t)]
    return float(t.abs().max()) if t.numel() else 0.0


def round_seed(secret: int, r: int, heads: int | None = None) -> int:
    """The seed of round `r` (0: the warm-up) of a try whose secret seed is `secret`, for the modules with
    `heads` heads (None: SIZES'): a hash, so that the inputs of one round or block reveal nothing of
    another's (a generator's state can be recovered from its output)."""
    tag = "" if heads in (None, SIZES["num_heads"]) else f":{heads}"
    digest = hashlib.sha256(f"mha-timing:{secret}:{r}{tag}".encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1


def round_inputs(secret: int, r: int, device="cpu", heads: int | None = None):
    """The inputs of round `r` of the try with seed `secret` (the warm-up, r = 0, has 2 passes) for the modules
    with `heads` heads (None: SIZES', else FEW_HEADS), as timed."""
    return inputs(device, 2 if r == 0 else REPS, seed=round_seed(secret, r, heads))


def new_secret() -> int:
    """A seed for one try's inputs that no student process can know in advance."""
    return secrets.randbits(52)  # exact in JSON readers that use doubles


#: heads -> the reference modules on the CPU and the generator's state just after they were built: built once per
#: process (the warm grader server builds them before it forks, `warm`), as every grading builds the same ones
_BUILT = {}


def reference_modules(device="cpu", heads=None):
    """The reference stacked and fused modules at SIZES, with `heads` heads (None: SIZES'), their weights drawn
    after seed 0.

    On the CPU they are built once per process (64 heads of three linear layers each: ~0.1 s of CPU a grading)
    and shared: nothing that times or reads them changes them. The random generators are left as building them
    leaves them, so that nothing drawn after this call depends on whether they were built now or before."""
    s = SIZES
    heads = heads or s["num_heads"]
    if device != "cpu" or heads not in _BUILT:
        d_out = s["num_heads"] * s["head_dim"]
        manual_seed(0)
        stacked = ref.StackedMultiHeadAttention(s["d_in"], d_out // heads, s["tokens"], 0.0, heads)
        fused = ref.MultiHeadAttention(s["d_in"], d_out, s["tokens"], 0.0, heads)
        if device != "cpu":
            return stacked.eval().to(device), fused.eval().to(device)
        _BUILT[heads] = stacked.eval(), fused.eval(), torch.random.get_rng_state()
    stacked, fused, after = _BUILT[heads]
    manual_seed(0)  # the devices' generators as building them leaves them (it draws on the CPU only)
    torch.random.set_rng_state(after)
    return stacked, fused


def warm():
    """Build the reference modules (the warm grader server calls this once, before it forks: forkserver.py)."""
    state = torch.random.get_rng_state()
    for heads in (None, FEW_HEADS):
        reference_modules(heads=heads)
    torch.random.set_rng_state(state)


def build_fused(student, device="cpu", heads=None, stand_ins=()):
    """The student's fused module at the timing sizes with `heads` heads (None: SIZES'), on `device`, with the
    reference fused module's weights wherever it has a parameter of that name and shape (the others keep the
    student's own initial values, drawn after seed 0: a module with no Wo, or a bias the contract does not
    have, is timed too). `stand_ins`: public stand-ins for the student's parts that crash (`public_stand_ins`),
    in place while it is built and while it is timed."""
    s = SIZES
    heads = heads or s["num_heads"]
    specs = public_stand_ins(stand_ins)
    remote = student.new("mha", "MultiHeadAttention", s["d_in"], s["num_heads"] * s["head_dim"], s["tokens"], 0.0,
                         heads, seed=0, stand_ins=specs)
    remote.timing_stand_ins = specs
    _, fused = reference_modules(heads=heads)
    own = remote.state().get("parameters", {})
    remote.load({name: p.detach().clone() for name, p in fused.named_parameters()
                 if isinstance(own.get(name), torch.Tensor) and tuple(own[name].shape) == tuple(p.shape)})
    return remote.to(device=device) if device != "cpu" else remote


def public_stand_ins(parts):
    """The requests' specs of public stand-ins (autograder/sandbox/standin.py, PUBLIC) for the student's `parts`
    ("merge", "split", "attention", "mask"): the operation each part is asked for, run in the student process,
    so that a module whose own part crashes is timed on the rest of its own code. No answer of the grader's is
    in them."""
    from autograder.graders.blame import PARTS

    return [{"module": PARTS[part][0], "name": PARTS[part][1], "public": True} for part in sorted(parts)]


def build_timed(student, device="cpu", stand_ins=()):
    """The student's two timed fused modules: (SIZES' 64 heads, FEW_HEADS)."""
    return build_fused(student, device, stand_ins=stand_ins), build_fused(student, device, FEW_HEADS, stand_ins)


def time_block(module, xs, clock=time.thread_time, outputs=None):
    """Seconds per forward pass of `module`, one pass per input of `xs`, by this process's clock.

    On CPU the clock is this thread's CPU time by default (the module must run single-threaded:
    `measure` sets one thread), so that preemption does not count; `bench`, which may run several
    threads, passes the wall clock. `outputs` (a list, on the CPU): the outputs of the passes are appended
    to it (the reference fused module's are what the student's outputs are checked against: `did_the_work`)."""
    if outputs is not None and xs.device.type == "cpu":
        with torch.no_grad():
            begin = clock()
            for x in xs:
                outputs.append(module(x))
            return (clock() - begin) / len(xs)
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
    """(seconds per forward pass, outputs, seconds per pass this thread waited for a CPU) of a module in the
    student process, by this process's clocks.

    Each pass is a request of its own, sent once the pass before it has answered (`RemoteModule.time`);
    the seconds run from sending the first to reading the last answer. `discard`: the outputs stay
    there (for `bench`, which checks nothing).
    """
    stand_ins = getattr(remote, "timing_stand_ins", None)  # public stand-ins for crashing parts (build_fused)
    if stand_ins:
        outputs, seconds, waited = remote.time(xs, discard=discard, stand_ins=stand_ins)
    else:
        outputs, seconds, waited = remote.time(xs, discard=discard)
    return seconds / len(xs), outputs, waited / len(xs)


def time_student_block(remote, xs, root):
    """(seconds per forward pass, outputs, seconds per pass not counted) of the student's block.

    The block is timed by the wall clock around its passes (`time_remote_block`). Taken off, as the
    machine's load and not the module's cost: the time this thread waited for a CPU while runnable (its
    run delay: it had an answer to read, or the next input to send); and, when a single thread of the
    student's whole process tree used CPU during the block, no task was created on the machine meanwhile
    (a thread or process that worked and ended before it was seen), and that thread kept the scheduling
    of the grader's own thread (`_own_priority`), the run delay of that thread.

    What is taken off never leaves less than the CPU time both sides of the relay used during the block:
    the student's whole process tree, every thread that ran in it, ended ones included (the processes' own
    CPU clocks: freeze.block_cpu_ns), and this thread's own side (writing requests, reading answers:
    `Sandbox.relay_cpu`). So no wait counted twice takes anything of either side's work off: the kernel
    adds a wait to the run delay when the wait ends, so a wait begun before the block can be counted in
    it; the grader's thread and the student's both wait behind the same load at once; or a student
    thread that keeps itself runnable at the lowest priority (nice 19, SCHED_IDLE) has a run delay that
    is the grader's own work. Nor is anything taken off a block that used more CPU than wall time. A
    block that used several threads or processes gets no correction of the student side, so work spread
    over them cannot be hidden; nor does one where the kernel gives no schedstat.
    """
    pids = freeze.tree(root) if root is not None else []
    before, created = freeze.thread_times(pids), freeze.tasks_created()
    spent = freeze.tree_cpu_ns(pids)
    with freeze.one_cpu(pids):
        seconds, outputs, own = time_remote_block(remote, xs)
    after_pids = freeze.tree(root) if root is not None else []
    cpu = freeze.block_cpu_ns(spent, after_pids) / 1e9 / len(xs)  # every thread of the tree, ended ones too
    relay = getattr(getattr(remote, "sandbox", None), "relay_cpu", 0.0) / len(xs)  # this thread's side
    after = freeze.thread_times(pids)
    used = {key: (after[key][0] - before[key][0], after[key][1] - before[key][1]) for key in after if key in before}
    waited = own
    ran = [key for key, (on, _) in used.items() if on > 0]
    if before and created is not None and freeze.tasks_created() == created and set(before) == set(after) \
            and len(ran) == 1 and _own_priority(*ran[0]):  # one thread did all the work, and no task started or
        waited += max(used[ran[0]][1], 0) / 1e9 / len(xs)  # ended meanwhile
    net = max(seconds - waited, min(seconds, cpu + relay))
    return net, outputs, seconds - net


def _own_priority(pid, tid):
    """Whether thread `tid` of the student process `pid` is scheduled as the grader's own thread is (the
    normal policy, its nice value or a higher priority): a thread that lowered its own priority waits for a
    CPU by its own choice, and that wait is no load of the machine to take off."""
    theirs = freeze.priority(pid, tid)
    ours = freeze.priority(os.getpid(), threading.get_native_id())
    return theirs is not None and ours is not None and theirs[0] == freeze.SCHED_OTHER and theirs[1] <= ours[1]


def serialization_cost(xs):
    """Seconds the student process's side of a block's protocol takes, as measured here: for every pass,
    reading its request and writing its answer.

    The part of a block's fixed cost that the reference modules are charged.
    It is measured in this process, never in the student's: a cost that the
    student process reported, or that it could stretch by answering some
    requests slowly, would make the references look slow.
    """
    frames = [wire.encode_request(timed_pass(1, x)) for x in xs]
    begin = time.thread_time()
    for frame, x in zip(frames, xs):
        wire.decode_request(frame)  # the request
        wire.encode({"ok": True, "output": x})  # the answer
    return time.thread_time() - begin


def did_the_work(outputs, reference, xs, mismatched=None, module=None, expected=None):
    """Whether the timed block returned, for every input, what the reference module gives for it.

    `mismatched` (a list) collects the (input, output, module) triples that differ from the reference, so
    that a grader can ask whether they are explained by a fault of the student's parts (graders/blame.py).
    `expected`: the reference's outputs for `xs`, where its timed block kept them (`time_block`), so that the
    same passes are not run twice."""
    if not isinstance(outputs, list) or len(outputs) != len(xs):
        return False
    ok = True
    with torch.no_grad():
        for i, (out, x) in enumerate(zip(outputs, xs)):
            expected_here = reference(x) if expected is None else expected[i]
            if not (isinstance(out, torch.Tensor) and out.shape == expected_here.shape
                    and torch.allclose(out, expected_here, rtol=1e-3, atol=1e-4)):
                ok = False
                if mismatched is not None:
                    mismatched.append((x, out, module))
    return ok


def measure(timed, device="cpu", rounds=ROUNDS, reps=REPS, secret=None, enough=None,
            stop_on_mismatch=True, stop_on_skip=True) -> Measurement:
    """Interleaved rounds of the student's two fused modules (`timed`: 64 heads, FEW_HEADS) and the four
    reference modules.

    Each student block includes one round trip to its process per pass;
    each reference block is charged the part of it that this process can
    measure alone: reading the same requests and writing the same answers
    (the fastest of the rounds). The rest of a round trip (waking the other
    process) is small, and a student process cannot stretch this charge.
    Every input comes from `secret` (default: a fresh secret seed), and the
    student's outputs are checked against the reference fused modules
    (which have the same weights) after the timing: a block that skips its
    work, or replays answers, is caught; and, whatever their values, for
    the work of attention (`work_skipped`: `skipped`, the first block that
    did not show it). The student's two blocks run in an
    order drawn anew each round. The references are timed with the
    student's process tree frozen; a round in which it used CPU anyway is
    discarded. The whole measurement holds the machine's measurement lock,
    with every other grading of this user on the machine stopped
    (autograder/sandbox/batchlock.py). A try ends after the first round
    whose outputs differ from the reference (nothing can pass then; unless
    `stop_on_mismatch` is false: a module whose outputs show the work of
    attention, or are excused by the student's own faulty parts,
    `remeasure_unverified`; then after the first round that skipped that
    work, unless `stop_on_skip` is false too: excused ones), or, given
    `enough` (a
    predicate on a Measurement, as `passes`), once the figures of
    MIN_ROUNDS or more rounds satisfy it.
    """
    many, few = timed
    secret = new_secret() if secret is None else secret
    references = {None: reference_modules(device), FEW_HEADS: reference_modules(device, FEW_HEADS)}
    student = {None: many, FEW_HEADS: few}
    root = many.sandbox.process_tree_root()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    verified, discarded, details, mismatched, load, skipped = True, 0, [], [], 0.0, ""
    best = {name: float("inf") for name in FIGURES}
    best["trip"] = float("inf")
    worst = {"student_fused": 0.0, "student_few": 0.0}
    draw = random.SystemRandom()
    with batchlock.quiet(root) as neighbours:  # no other grading's code runs meanwhile
        try:
            for heads in student:  # warm up both sides
                warm = round_inputs(secret, 0, device, heads)
                time_remote_block(student[heads], warm)
                for module in references[heads]:
                    time_block(module, warm)
            for r in range(1, rounds + 1):
                blocks = {heads: block(reps, seed=round_seed(secret, r, heads)) for heads in student}
                xs = {heads: blocks[heads][0].to(device) for heads in student}
                order = list(student)
                draw.shuffle(order)
                times, outputs = {}, {}
                for heads in order:
                    times[heads], outputs[heads], waited = time_student_block(student[heads], xs[heads], root)
                    load += waited
                with frozen(root) as stop:
                    figures, expected = {}, {heads: [] for heads in student}
                    for heads, suffix in ((None, ""), (FEW_HEADS, "_few")):
                        stacked, fused = references[heads]
                        figures["reference_stacked" + suffix] = time_block(stacked, xs[heads][:STACKED_REPS])
                        # CPU clock; its outputs are what the student's are checked against
                        figures["reference_fused" + suffix] = time_block(fused, xs[heads], outputs=expected[heads])
                    figures["trip"] = serialization_cost(xs[None])
                figures["student_fused"], figures["student_few"] = times[None], times[FEW_HEADS]
                for heads in student:
                    verified = did_the_work(outputs[heads], references[heads][1], xs[heads], mismatched,
                                            student[heads], expected[heads] or None) and verified
                    skipped = skipped or work_skipped(outputs[heads], xs[heads], blocks[heads][1],
                                                      SIZES["num_heads"] * SIZES["head_dim"])
                if stop.clean is False:
                    discarded += 1
                    details.append(stop.why())
                    continue
                best = {name: min(best[name], figures[name]) for name in best}
                worst = {name: max(worst[name], figures[name]) for name in worst}
                wrong = not verified and (stop_on_mismatch or skipped and stop_on_skip)
                so_far = _figures(best, reps, device, verified, secret, r, discarded, details, load, skipped, worst)
                if r < rounds:
                    accepted = enough is not None and (r >= MIN_ROUNDS or clear_pass(so_far)) and enough(so_far)
                    if wrong or accepted or r >= MIN_ROUNDS and decided(so_far):
                        rounds = r  # wrong outputs fail whatever the times; the figures already pass; or noise
                        break  # cannot change any check's verdict
        finally:
            torch.set_num_threads(threads)
    ran = [f.why().replace("the student's", "another grading's") for f in neighbours if f.clean is False]
    if ran:  # a neighbour ran anyway (its processes could not all be stopped): nothing vouched
        discarded = rounds
        details.append("; ".join(ran) + " during the measurement")
    m = _figures(best, reps, device, verified, secret, rounds, discarded, details, load, skipped, worst)
    m.mismatched, m.neighbours = mismatched, len(neighbours)
    return m


def _figures(best, reps, device, verified, secret, rounds, discarded, details, load, skipped="",
             worst=None) -> Measurement:
    """The Measurement of the best times so far (the FIGURES, and "trip": the references' charge)."""
    charge = best["trip"] / reps
    values = {name: best[name] + (charge if name.startswith("reference") else 0.0) for name in FIGURES}
    return Measurement(**values, device=device, verified=verified, skipped=skipped, seeds=(secret,), rounds=rounds,
                       discarded=discarded, details=list(details), load_s=load, worst=dict(worst or {}))


def decided(m: Measurement) -> bool:
    """Whether the figures of `m` fail a check and decide every check, either way, beyond what noise could change:
    each figure at least DECIDED times from its threshold and at least `m.noise` ** NOISE_POWER (see DECIDED).
    A measurement that passes every check is left to `enough` (false here)."""
    if not m.vouched or not m.noise >= 1.0:  # nan: fewer than two vouched rounds, or figures missing
        return False
    margins = _margins(m)
    if not all(x > 0 for x in margins) or all(x >= 1 for x in margins):
        return False
    need = max(DECIDED, m.noise ** NOISE_POWER)
    return all(max(x, 1 / x) >= need for x in margins)


def clear_pass(m: Measurement) -> bool:
    """Whether the figures of `m` pass every check by at least DECIDED times: after one vouched round, a pass that
    no later round could undo (see DECIDED's note on the first round)."""
    return m.vouched and all(x >= DECIDED for x in _margins(m))  # nan compares false: a figure missing decides nothing


def _margins(m: Measurement) -> tuple[float, float, float]:
    """How far each of the three figures of `m` is past its threshold, as a factor: above 1 it passes (the speedup
    over MIN_SPEEDUP, MAX_SLOWDOWN over the slowdown, GROWTH_LIMIT over the relative growth)."""
    return m.speedup / MIN_SPEEDUP, MAX_SLOWDOWN / m.slowdown, GROWTH_LIMIT / m.relative_growth


def passes(m: Measurement) -> bool:
    return m.verified and times_pass(m)


def earns(m: Measurement) -> bool:
    """What a grading's three timed checks ask of a measurement (graders/test_mha.py, `speedup_measurement`, which
    also excuses outputs that the student's faulty parts explain): the figures pass, and the timed passes
    returned the reference's outputs or, whatever their values, showed the work of attention."""
    return (m.verified or m.worked) and times_pass(m)


def times_pass(m: Measurement) -> bool:
    """The figures pass every check, whatever the outputs (for a module whose outputs were excused)."""
    return m.vouched and m.fast_enough and m.close_to_reference and m.flat_in_heads


def measure_until(timed, passes=passes, device="cpu", retries=RETRIES, stop_on_mismatch=True,
                  stop_on_skip=True) -> Measurement:
    """Measure; while `passes` is false, measure more, at most `retries` times in all (none after a try whose
    outputs differed from the reference's, `verified` only ever turning false, unless `stop_on_mismatch` is
    false; nor then after one whose outputs differed and skipped the work of attention, unless `stop_on_skip`
    is false too).

    The tries accumulate: each module keeps its best time over all rounds so
    far, so a retry sharpens every figure (the references' too) instead of
    drawing a fresh sample. Noise only ever makes a block slower, so the best
    times only move towards the truth, and no retry turns a slow module fast.
    Each try has inputs of its own (a new secret seed): nothing of an
    earlier try can be replayed.
    """
    result = None
    for _ in range(retries):
        m = measure(timed, device, enough=passes, stop_on_mismatch=stop_on_mismatch, stop_on_skip=stop_on_skip)
        if result is not None:
            m = Measurement(**{name: min(getattr(m, name), getattr(result, name)) for name in FIGURES},
                            device=device, verified=m.verified and result.verified,
                            skipped=result.skipped or m.skipped, seeds=result.seeds + m.seeds,
                            rounds=result.rounds + m.rounds, discarded=result.discarded + m.discarded,
                            details=result.details + m.details, mismatched=result.mismatched + m.mismatched,
                            neighbours=max(result.neighbours, m.neighbours), load_s=result.load_s + m.load_s,
                            worst={name: max(m.worst.get(name, 0.0), result.worst.get(name, 0.0))
                                   for name in {*m.worst, *result.worst}})
        result = m
        if passes(result) or (not result.verified and (stop_on_mismatch or result.skipped and stop_on_skip)):
            break  # wrong outputs are no noise: no try can undo them
        if decided(result):
            break  # no noise its rounds showed could change a verdict (DECIDED)
    return result


def measure_for_grading(timed, device="cpu") -> Measurement:
    """What a grading measures (and benchmarks/speedup_reliability.py with it): `measure_until`; when the
    outputs were not the reference's but showed the work of attention, the measurement is taken again as a
    correct module's is (`remeasure`), for speed is judged whatever the values (the value checks charge those)."""
    m = measure_until(timed, device=device)
    if not m.verified and m.worked and not times_pass(m):
        m = remeasure(timed, device)
    return m


def remeasure(timed, device="cpu", excused=False) -> Measurement:
    """The measurement of modules whose outputs differ from the reference's (whose work shows, or whose faults
    the student's own parts explain, graders/blame.py), taken as a correct module's is: its rounds and retries,
    not the one round after which `measure_until` stopped (a single round, on a busy machine, failed a fast
    module). Every mismatched pass is kept in `mismatched`, for the grader to excuse; a block that skips the
    work of attention ends it, unless the module is `excused` (the grader asks its parts again)."""
    m = measure_until(timed, passes=times_pass, device=device, stop_on_mismatch=False, stop_on_skip=not excused)
    m.module = timed
    return m


_measured = {}


def grade_speedup(student, device="cpu", stand_ins=()) -> Measurement:
    """The measurement the structure and speedup checks of one grading share (once per student process), of the
    student's module with public stand-ins for its crashing `stand_ins` parts (`public_stand_ins`), if any."""
    key = (id(student), device, tuple(sorted(stand_ins)))
    if key not in _measured:
        timed = build_timed(student, device, stand_ins)
        _measured[key] = measure_for_grading(timed, device=device)
        _measured[key].module = timed
    return _measured[key]


def remeasure_unverified(student, device="cpu", stand_ins=(), excused=False) -> Measurement:
    """`remeasure` of the modules grade_speedup timed (once per student process)."""
    key = (id(student), device, tuple(sorted(stand_ins)), "again", excused)
    if key not in _measured:
        _measured[key] = remeasure(grade_speedup(student, device, stand_ins).module, device, excused)
    return _measured[key]
