"""The speedup check: is the student's fused module faster than the reference stacked one?

Kept in one place so that it can be hardened without touching the graders.
The sizes make per-operator overhead dominate (many small heads), where
fusing the heads pays most: the reference stacked module runs about ten
operators per head, a fused one about fifteen in all. Both sides run
single-threaded; rounds are interleaved and the minimum of each side is
compared, which filters out the moments when the machine was busy.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from solutions import mha as ref

SIZES = {"batch": 2, "tokens": 16, "d_in": 64, "num_heads": 16, "head_dim": 4}
MIN_SPEEDUP = 2.0  # the fused module must be at least this much faster than the reference stacked one
ROUNDS = 5
REPS = 20


@dataclass
class Speedup:
    stacked_s: float  # best time of one forward pass of the reference stacked module
    fused_s: float  # best time of one forward pass of the student's fused module
    threshold: float = MIN_SPEEDUP

    @property
    def ratio(self):
        return self.stacked_s / self.fused_s if self.fused_s > 0 else float("inf")

    @property
    def passed(self):
        return self.ratio >= self.threshold

    def describe(self):
        s = SIZES
        return (f"batch {s['batch']}, {s['tokens']} tokens, d_in {s['d_in']}, {s['num_heads']} heads of "
                f"{s['head_dim']}: reference stacked {self.stacked_s * 1e6:.0f} us, your fused "
                f"{self.fused_s * 1e6:.0f} us per forward pass, speedup {self.ratio:.2f}x "
                f"(at least {self.threshold:g}x expected)")


def _time_local(module, x, reps):
    times = []
    with torch.no_grad():
        for _ in range(reps):
            start = time.perf_counter()
            module(x)
            times.append(time.perf_counter() - start)
    return times


def measure(fused_remote, rounds=ROUNDS, reps=REPS) -> Speedup:
    """Time the student's fused module (already built remotely) against the reference stacked one."""
    s = SIZES
    x = torch.randn(s["batch"], s["tokens"], s["d_in"], generator=torch.Generator().manual_seed(0))
    stacked = ref.StackedMultiHeadAttention(s["d_in"], s["head_dim"], s["tokens"], 0.0, s["num_heads"]).eval()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        fused_times, stacked_times = [], []
        for _ in range(rounds):
            fused_times += fused_remote.time(x, reps=reps)
            stacked_times += _time_local(stacked, x, reps)
    finally:
        torch.set_num_threads(threads)
    return Speedup(min(stacked_times), min(fused_times))


def build_fused(student):
    """The student's fused module at the timing sizes."""
    s = SIZES
    return student.new("mha", "MultiHeadAttention", s["d_in"], s["num_heads"] * s["head_dim"], s["tokens"], 0.0,
                       s["num_heads"], seed=0)
