"""Benchmark: is the speedup grading reliable under load?

Runs the speedup grading (autograder.timing.measure_until, retries included:
exactly what a grading runs) RUNS times on the reference fused module and
RUNS times on a fused module that loops over the heads, while a busy loop
occupies one core, and reports passes and failures with the measured ratios.

    python benchmarks/speedup_reliability.py [--runs 200] [--no-busy-loop]
"""
import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from autograder import timing  # noqa: E402
from autograder.sandbox import Sandbox  # noqa: E402
from tests.corpus import load_corpus, materialize  # noqa: E402


def run(name, submission, runs):
    speedups, slowdowns, passed = [], [], 0
    start = time.monotonic()
    with Sandbox(submission) as sandbox:
        remote = timing.build_fused(sandbox)
        for i in range(runs):
            m = timing.measure_until(remote)
            passed += timing.passes(m)
            speedups.append(m.speedup)
            slowdowns.append(m.slowdown)
            if (i + 1) % 20 == 0:
                print(f"  {name}: {i + 1}/{runs} runs, {passed} passed", flush=True)
    q = lambda xs: f"min {min(xs):.2f}, median {statistics.median(xs):.2f}, max {max(xs):.2f}"  # noqa: E731
    print(f"{name}: {passed}/{runs} passed, {runs - passed}/{runs} failed in {time.monotonic() - start:.0f} s\n"
          f"    speedup over the reference stacked module (needs >= {timing.MIN_SPEEDUP:g}): {q(speedups)}\n"
          f"    slowdown against the reference fused module (needs <= {timing.MAX_SLOWDOWN:g}): {q(slowdowns)}",
          flush=True)
    return passed


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--no-busy-loop", action="store_true")
    args = parser.parse_args()
    busy = None if args.no_busy_loop else subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        print(f"sizes {timing.SIZES}, {timing.ROUNDS} rounds of {timing.REPS}, up to {timing.RETRIES} tries; "
              f"busy loop on one core: {busy is not None}", flush=True)
        good = run("reference fused", ROOT / "solutions", args.runs)
        case = next(c for c in load_corpus()["bug"] if c.id == "mha-fused-loop-over-heads")
        with tempfile.TemporaryDirectory() as tmp:
            bad = run("loop over heads", materialize(case, Path(tmp) / case.id, ROOT / "solutions"), args.runs)
    finally:
        if busy:
            busy.kill()
    print(f"\nreference fused: {good}/{args.runs} passes; loop over heads: {args.runs - bad}/{args.runs} failures")
    sys.exit(0 if good == args.runs and bad == 0 else 1)


if __name__ == "__main__":
    main()
