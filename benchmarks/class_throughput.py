"""Benchmark: submissions per minute of grade-all on this machine.

Builds a class of N submissions (the reference and the corpus's planted
bugs, in turn) and grades it with autograder.classrun.run.grade_all, jobs = cores.

    python benchmarks/class_throughput.py [--students 20] [--jobs N]
"""
import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

from autograder.paths import KIT as ROOT, SOLUTIONS  # the kit is installed (make setup)

sys.path.insert(0, str(ROOT))  # for the kit's test corpus (tests/corpus), which is not installed

from autograder.classrun.run import grade_all  # noqa: E402
from tests.corpus import load_corpus, materialize  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--students", type=int, default=20)
    parser.add_argument("--jobs", type=int, default=os.cpu_count())
    args = parser.parse_args()
    bugs = load_corpus()["bug"]
    with tempfile.TemporaryDirectory() as tmp:
        subs = Path(tmp) / "class"
        for i in range(args.students):
            case = bugs[i % len(bugs)]
            materialize(case, subs / f"student-{i:03d}", SOLUTIONS)
        start = time.monotonic()
        rows = grade_all(subs, Path(tmp) / "out", jobs=args.jobs)
        elapsed = time.monotonic() - start
    statuses = {s: sum(r.status == s for r in rows.values()) for s in ("graded", "timeout", "error")}
    print(f"{len(rows)} submissions in {elapsed:.0f} s with {args.jobs} jobs: "
          f"{60 * len(rows) / elapsed:.1f} submissions per minute ({statuses})")


if __name__ == "__main__":
    main()
