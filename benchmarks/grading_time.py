"""Benchmark: wall time of grading one complete submission, median of N runs, with its breakdown.

    python benchmarks/grading_time.py [SUBMISSION] [--runs 5]

The first check waits for the student process to be ready, so "checks:
attention" includes that wait; the student process starts in parallel with
the grader's own imports.
"""
import argparse
import statistics

from autograder.grade.engine import grade  # the kit is installed (make setup)
from autograder.paths import SOLUTIONS


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("submission", nargs="?", default=str(SOLUTIONS))
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    reports = []
    for i in range(args.runs):
        report = grade(args.submission)
        reports.append(report)
        print(f"run {i + 1}: {report.execution_time:.2f} s, score {report.score:g}", flush=True)
    times = sorted(r.execution_time for r in reports)
    median = statistics.median(times)
    print(f"\ngrading {args.submission}: median {median:.2f} s over {args.runs} runs "
          f"(min {times[0]:.2f}, max {times[-1]:.2f}); goal <= 3 s")
    middle = min(reports, key=lambda r: abs(r.execution_time - median))
    print("\nbreakdown of the median run (seconds):")
    for key, value in middle.timings.items():
        print(f"  {key:<55} {value:6.2f}")


if __name__ == "__main__":
    main()
