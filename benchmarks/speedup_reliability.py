"""Benchmark: are the structure and speed checks reliable under load, and under attack?

Runs the timed measurement of a grading (autograder.graders.timing.measure_for_grading,
retries included: exactly what a grading runs, and what its structure and two
speed checks read, `timing.earns`) RUNS times on each of: the honest modules
(the reference fused module, the corpus's einsum and SDPA variants, and a fused
module with a value bug, Wq, Wk and Wv with a bias, and one whose split is view
alone: speed is judged whatever the values), which must pass every check every time; and the cheating ones,
which must fail every time: a fused module that returns zeros, one that returns
its input, one that loops over the heads, the corpus's hidden loops (tests/corpus/
attacks.toml: a dispatch mode switched off, a patched counter, passes batched
through ._base or storage arithmetic, a pass that reads ahead) and its timing
attacks (replayed answers, a table of the inputs, CPU burners while the
references are timed). By default one busy loop per core runs beside it all
(`--busy 0`: none). Prints, per module and for all, passes and the three
figures (min, median, max), then a table of the worst honest figure against
the best cheating one. `--details FILE`: every run whose outcome was not the
expected one (an honest module failing, a cheating one passing) is written
there, one JSON line each (the report's timing record: every figure, the
seeds, the rounds discarded and the run delay taken off).

    python benchmarks/speedup_reliability.py [--runs 200] [--cheat-runs N] [--busy N] [--only NAME ...] [--details FILE]
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from autograder.paths import KIT as ROOT, SOLUTIONS  # the kit is installed (make setup)

sys.path.insert(0, str(ROOT))  # for the kit's test corpus (tests/corpus), which is not installed

from autograder.graders import timing  # noqa: E402
from autograder.sandbox.client import Sandbox  # noqa: E402
from tests.corpus import load_attacks, load_corpus, materialize  # noqa: E402

CHUNK = 25
HONEST = ("reference", "mha-fused-einsum", "mha-fused-sdpa-is-causal", "mha-fused-qkv-bias-always",
          "mha-fused-view-without-transpose")
CHEATS = ("mha-fused-returns-zeros", "mha-fused-returns-input", "mha-fused-loop-over-heads",
          "hidden-loop-dispatch-mode-off", "hidden-loop-patched-counter",
          "hidden-loop-batched-through-base", "hidden-loop-batched-through-storage", "hidden-loop-reads-ahead",
          "timing-replay-on-retry", "timing-input-table", "timing-burners-during-reference")
#: figure -> (how it reads, the threshold, True when a higher figure is better)
FIGURES = {"relative_growth": ("growth over the reference fused module's", timing.GROWTH_LIMIT, False),
           "speedup": ("speedup over the reference stacked module", timing.MIN_SPEEDUP, True),
           "slowdown": ("slowdown against the reference fused module", timing.MAX_SLOWDOWN, False)}


def run(name, submission, runs, details=None):
    values, passed, start = {f: [] for f in FIGURES}, 0, time.monotonic()
    for first in range(0, runs, CHUNK):
        with Sandbox(submission) as sandbox:
            timed = timing.build_timed(sandbox)
            for i in range(first, min(runs, first + CHUNK)):
                m = timing.measure_for_grading(timed)
                ok = timing.earns(m)
                passed += ok
                if details is not None and ok != (name in HONEST):
                    with open(details, "a") as out:
                        out.write(json.dumps({"module": name, "run": i + 1, "passed": ok, **m.to_dict()}) + "\n")
                for f in FIGURES:
                    values[f].append(getattr(m, f) if (m.verified or m.worked) and m.vouched else math.nan)
                if (i + 1) % 20 == 0:
                    print(f"  {name}: {i + 1}/{runs} runs, {passed} passed", flush=True)
    q = lambda xs: (f"min {min(xs):.2f}, median {statistics.median(xs):.2f}, max {max(xs):.2f}"  # noqa: E731
                    if xs else "no run that did the work")
    print(f"{name}: {passed}/{runs} passed in {time.monotonic() - start:.0f} s", flush=True)
    for f, (words, threshold, higher) in FIGURES.items():
        xs = [x for x in values[f] if not math.isnan(x)]
        print(f"    {words} (needs {'>=' if higher else '<='} {threshold:g}): {q(xs)}", flush=True)
    return passed, values


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--cheat-runs", type=int, default=None,
                        help="runs of each cheating module (default: --runs; each takes ~4x an honest one's time)")
    parser.add_argument("--busy", type=int, default=os.cpu_count(), help="busy loops beside it (default: one per core)")
    parser.add_argument("--only", nargs="*", help="modules to run (default: all): reference, or corpus ids")
    parser.add_argument("--details", help="a file to append each unexpected run's figures to (JSON lines)")
    args = parser.parse_args()
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.busy)]
    results = {}
    try:
        print(f"sizes {timing.SIZES}, {timing.FEW_HEADS} head against {timing.SIZES['num_heads']}, {timing.ROUNDS} "
              f"rounds of {timing.REPS}, up to {timing.RETRIES} tries; {len(busy)} busy loop(s) on "
              f"{os.cpu_count()} cores", flush=True)
        with tempfile.TemporaryDirectory() as tmp:
            cases = {c.id: c for kind in ("bug", "alternative") for c in load_corpus()[kind]}
            attacks = {c.id: c for c in load_attacks()}
            for name in (*HONEST, *CHEATS):
                if args.only and name not in args.only:
                    continue
                if name == "reference":
                    folder = SOLUTIONS
                elif name in attacks:
                    folder = materialize(attacks[name], Path(tmp) / name, SOLUTIONS, params={})
                else:
                    folder = materialize(cases[name], Path(tmp) / name, SOLUTIONS)
                runs = args.runs if name in HONEST or args.cheat_runs is None else args.cheat_runs
                results[name] = run(name, folder, runs, args.details)
    finally:
        for proc in busy:
            proc.kill()
    print()
    ok = True
    for name, (passed, values) in results.items():
        runs = len(values["speedup"])
        want = runs if name in HONEST else 0
        ok = ok and passed == want
        print(f"{name}: {passed}/{runs} passed (expected {want}/{runs})")
    honest = [v for n, (_, v) in results.items() if n in HONEST]
    cheats = [v for n, (_, v) in results.items() if n in CHEATS]
    if honest and cheats:
        print("\n| figure | threshold | worst honest | best cheating | margin (worst honest / best cheating) |")
        print("|---|---|---|---|---|")
        for f, (words, threshold, higher) in FIGURES.items():
            h = [x for v in honest for x in v[f] if not math.isnan(x)]
            c = [x for v in cheats for x in v[f] if not math.isnan(x)]
            if not h or not c:
                continue
            worst, best = (min(h), max(c)) if higher else (max(h), min(c))
            margin = worst / best if higher else best / worst
            ok = ok and margin >= 2
            print(f"| {words} | {threshold:g} | {worst:.2f} | {best:.2f} | {margin:.2f}x |")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
