"""Benchmark: what each isolation level costs per grading, measured side by side in one run.

    python benchmarks/isolation_cost.py [SUBMISSION] [--rounds 5] [--python PATH]

For every level that works here (namespaces, landlock, none), in interleaved
rounds (one grading per level per round, so that a change in the machine's
load hits every level alike): the wall time of a complete cold grading
(engine.grade), the start of the student process up to its handshake
(confinement, limits, `import torch`), and the probe that decides the level.
As root, the landlock and none levels run student code as a uid of its own,
which must read Python: without --python, a venv that any uid can run is made
from /usr/bin/python3 for the run (tests/conftest.py).
"""
import argparse
import os
import statistics
import sys
import time

from autograder.paths import KIT as ROOT, SOLUTIONS  # the kit is installed (make setup)

sys.path.insert(0, str(ROOT))  # for tests/conftest.py's readable venv (tests/ is not installed)

from autograder import LEVELS  # noqa: E402
from autograder.grade.engine import grade  # noqa: E402
from autograder.sandbox.isolation import _probe, probe  # noqa: E402


def spread(values):
    values = sorted(values)
    return f"{statistics.median(values):6.2f} ({values[0]:.2f}-{values[-1]:.2f})"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("submission", nargs="?", default=str(SOLUTIONS))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--python", help="interpreter of the student process (default: see above)")
    args = parser.parse_args()
    python = args.python
    if python is None and os.geteuid() == 0:
        from tests.conftest import _readable_python

        python, why = _readable_python()
        if python is None:
            print(f"note: no interpreter for a student uid ({why}); only the namespaces level can run as root")
    python = python or sys.executable
    levels = [lvl for lvl in LEVELS if probe(lvl, python) is None]
    for lvl in sorted(set(LEVELS) - set(levels)):
        print(f"{lvl}: not available here ({probe(lvl, python)})")
    grading, start, probing = ({lvl: [] for lvl in levels} for _ in range(3))
    for r in range(args.rounds):
        for lvl in levels:
            t = time.perf_counter()
            _probe(lvl, python)
            probing[lvl].append(time.perf_counter() - t)
            report = grade(args.submission, isolation=lvl, python=python)
            assert report.isolation == lvl, report.isolation
            grading[lvl].append(report.execution_time)
            start[lvl].append(report.timings.get("student process start (python, torch), in parallel", float("nan")))
            print(f"round {r + 1}, {lvl}: {report.execution_time:.2f} s, score {report.score:g}", flush=True)
    print(f"\n{args.submission}, {args.rounds} interleaved rounds, student interpreter {python}, uid {os.geteuid()}")
    print(f"seconds, median (min-max)\n{'level':<12} {'grading':>20} {'student start':>20} {'probe':>20}")
    for lvl in levels:
        print(f"{lvl:<12} {spread(grading[lvl]):>20} {spread(start[lvl]):>20} {spread(probing[lvl]):>20}")


if __name__ == "__main__":
    main()
