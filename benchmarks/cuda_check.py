"""The checks that need a GPU, as one short run for a machine that has one (the kit's tests run their code path
on the CPU, tests/test_device_path.py; this is what they cannot show).

    python benchmarks/cuda_check.py [--bench]

1. The reference, graded cold at every isolation level that works here: 100, with its 5 CUDA checks run and
   passed (not skipped).
   The reference graded twice more through warm servers (grade-all's route: forks of a grader server that
   imported the CUDA build of torch and the graders, and of a student zygote), with the same result.
2. CUDA refused in the student process on purpose (MHA_REFUSE=cuda@student, as device nodes that the student's
   uid may not open would): still 100, the 5 CUDA checks skipped with the reason, none failed.
3. The untouched template: "empty", 0. The buggy example: its bugs fail their CUDA checks too.
4. With --bench: the fused and stacked modules timed side by side on CUDA (grader_cli.py bench --device cuda).

Prints one line per check and exits 0 when every one holds, 1 when one does not, 2 where CUDA is not there.
docs/platforms/gpu.md ("What a GPU machine changes") says what an H200 gave.
"""
import argparse
import os
import sys

import torch

from autograder import LEVELS
from autograder.grade.engine import grade
from autograder.grade.servers import WarmServers
from autograder.paths import KIT, SOLUTIONS
from autograder.sandbox.isolation import probe

CUDA_CHECKS = 5  # one per module


def cuda_checks(report):
    return [t for t in report.tests if "cuda" in t.id]


def outcome(name, ok, detail):
    print(f"{'ok  ' if ok else 'FAIL'} {name}: {detail}", flush=True)
    return ok


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bench", action="store_true", help="also time the modules on CUDA")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA here (torch.cuda.is_available() is False): nothing to check", file=sys.stderr)
        return 2
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, Python {sys.version.split()[0]}, "
          f"uid {os.geteuid()}")
    results = []
    for level in LEVELS:
        why = probe(level, sys.executable)
        if why is not None:
            print(f"--   {level}: not available here ({why})")
            continue
        report = grade(SOLUTIONS, isolation=level)
        ran = [t for t in cuda_checks(report) if t.status == "passed"]
        results.append(outcome(f"reference at {level}", report.score == 100 and len(ran) == CUDA_CHECKS,
                               f"{report.score:g}/100, {len(ran)} of {CUDA_CHECKS} CUDA checks passed, "
                               f"{report.execution_time:.1f} s"
                               + "".join(f"\n       {t.module}/{t.id}: {t.status}: {t.message[:300]}"
                                         for t in cuda_checks(report) if t.status != "passed")))
    # grade-all's route: forks of a grader server that imported torch and the graders, and of a student zygote
    with WarmServers() as servers:
        for _ in range(2):  # the second from the same servers: their first forks left them able to fork again
            report = grade(SOLUTIONS, servers=servers)
            ran = [t for t in cuda_checks(report) if t.status == "passed"]
            results.append(outcome("reference, warm servers", report.score == 100 and len(ran) == CUDA_CHECKS,
                                   f"{report.score:g}/100, {len(ran)} of {CUDA_CHECKS} CUDA checks passed, "
                                   f"{report.execution_time:.1f} s"))
    os.environ["MHA_REFUSE"] = "cuda@student"
    try:
        report = grade(SOLUTIONS)
    finally:
        del os.environ["MHA_REFUSE"]
    skipped = [t for t in cuda_checks(report) if t.status == "skipped" and "in the student process" in t.message]
    results.append(outcome("reference, CUDA refused in the student process", report.score == 100
                           and len(skipped) == CUDA_CHECKS, f"{report.score:g}/100, {len(skipped)} CUDA checks "
                           f"skipped with the reason; {report.to_dict()['not_graded']['note'] or 'no note'}"))
    template = grade(KIT / "student_template")
    results.append(outcome("template", template.status == "empty" and template.score == 0,
                           f"{template.status}, {template.score:g}"))
    buggy = grade(KIT / "examples" / "buggy-student")
    failed = [t for t in cuda_checks(buggy) if t.status == "failed"]
    results.append(outcome("buggy example", 0 < buggy.score < 100 and bool(failed),
                           f"{buggy.score:g}/100, {len(failed)} CUDA checks failed with its bugs"))
    if args.bench:
        import subprocess
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            bench = subprocess.run([sys.executable, str(KIT / "grader_cli.py"), "bench", str(SOLUTIONS), "--device",
                                    "cuda", "--plot", os.path.join(tmp, "bench.png")], capture_output=True, text=True)
        print(bench.stdout[-6000:] or bench.stderr[-3000:])
        results.append(outcome("bench --device cuda", bench.returncode == 0, f"exit {bench.returncode}"))
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
