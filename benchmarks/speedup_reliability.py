"""Benchmark: is the speedup grading reliable under load, and under attack?

Runs the speedup grading (autograder.grade.timing.measure_until, retries included:
exactly what a grading runs) RUNS times on each of: the reference fused
module (must pass every time), a fused module that loops over the heads, and
the timing attacks of the adversarial corpus (tests/corpus/attacks.toml:
replayed answers, a table of the timing inputs, CPU burners while the
references are timed), which must fail every time; while a busy loop
occupies one core (or not), and reports passes and failures with the
measured ratios. Each variant gets a fresh student process every CHUNK runs
(as every grading does; the burners of the corpus case stop after 150 s).

    python benchmarks/speedup_reliability.py [--runs 200] [--no-busy-loop] [--only NAME ...]
"""
import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from autograder.paths import KIT as ROOT, SOLUTIONS  # the kit is installed (make setup)

sys.path.insert(0, str(ROOT))  # for the kit's test corpus (tests/corpus), which is not installed

from autograder.grade import timing  # noqa: E402
from autograder.sandbox.client import Sandbox  # noqa: E402
from tests.corpus import load_attacks, load_corpus, materialize  # noqa: E402

CHUNK = 25
ATTACKS = ("timing-replay-on-retry", "timing-input-table", "timing-burners-during-reference")


def run(name, submission, runs):
    speedups, slowdowns, passed, discarded, rounds = [], [], 0, 0, 0
    fast, close = 0, 0  # each of the two graded checks on its own
    start = time.monotonic()
    for first in range(0, runs, CHUNK):
        with Sandbox(submission) as sandbox:
            remote = timing.build_fused(sandbox)
            for i in range(first, min(runs, first + CHUNK)):
                m = timing.measure_until(remote)
                passed += timing.passes(m)
                fast += bool(m.verified and m.vouched and m.fast_enough)
                close += bool(m.verified and m.vouched and m.close_to_reference)
                speedups.append(m.speedup)
                slowdowns.append(m.slowdown)
                discarded += m.discarded
                rounds += m.rounds
                if (i + 1) % 20 == 0:
                    print(f"  {name}: {i + 1}/{runs} runs, {passed} passed", flush=True)
    q = lambda xs: f"min {min(xs):.2f}, median {statistics.median(xs):.2f}, max {max(xs):.2f}"  # noqa: E731
    print(f"{name}: {passed}/{runs} passed, {runs - passed}/{runs} failed in {time.monotonic() - start:.0f} s; "
          f"{discarded}/{rounds} rounds discarded (student CPU while the references were timed)\n"
          f"    checks on their own: faster than the reference stacked module {fast}/{runs}, close to the "
          f"reference fused module {close}/{runs}\n"
          f"    speedup over the reference stacked module (needs >= {timing.MIN_SPEEDUP:g}): {q(speedups)}\n"
          f"    slowdown against the reference fused module (needs <= {timing.MAX_SLOWDOWN:g}): {q(slowdowns)}",
          flush=True)
    return passed


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--no-busy-loop", action="store_true")
    parser.add_argument("--only", nargs="*", help="variants to run (default: all): reference, loop, or attack ids")
    args = parser.parse_args()
    busy = None if args.no_busy_loop else subprocess.Popen([sys.executable, "-c", "while True: pass"])
    results = {}
    try:
        print(f"sizes {timing.SIZES}, {timing.ROUNDS} rounds of {timing.REPS}, up to {timing.RETRIES} tries; "
              f"busy loop on one core: {busy is not None}", flush=True)
        with tempfile.TemporaryDirectory() as tmp:
            variants = {"reference": SOLUTIONS}
            case = next(c for c in load_corpus()["bug"] if c.id == "mha-fused-loop-over-heads")
            variants["loop"] = materialize(case, Path(tmp) / case.id, SOLUTIONS)
            for attack in (c for c in load_attacks() if c.id in ATTACKS):
                variants[attack.id] = materialize(attack, Path(tmp) / attack.id, SOLUTIONS, params={})
            for name, folder in variants.items():
                if not args.only or name in args.only:
                    results[name] = run(name, folder, args.runs)
    finally:
        if busy:
            busy.kill()
    print()
    ok = True
    for name, passed in results.items():
        want = args.runs if name == "reference" else 0
        ok = ok and passed == want
        print(f"{name}: {passed}/{args.runs} passed (expected {want}/{args.runs})")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
