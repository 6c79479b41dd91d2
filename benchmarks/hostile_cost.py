"""Benchmark: what grading a hostile submission costs next to the reference, whole process, side by side in one run.

    python benchmarks/hostile_cost.py [--runs 3] [--only ID ...] [-- GRADE OPTIONS]

For the reference and every hostile case of the corpora (tests/corpus: the memory bombs and infinite loops of
attacks.toml, the `hostile` cases of the parts' corpus.toml), in interleaved rounds (one cold `grader_cli.py grade`
of each per round, so that a change in the machine's load hits every case alike): the wall time, the user and the
kernel (system) CPU seconds of the whole process tree (os.wait4 of the grade command, which waits for its children),
and its peak resident memory; then the median of each, and the wall time as a multiple of the reference's. Issue
50's bar: every hostile case within 3x the reference's wall time, and a memory bomb's kernel time under 5 s (each
GiB a bomb fills costs about 1.2 s of kernel time on a 2-core VM as its pages are written: the default
`--memory-limit` bounds it). Anything after `--` is passed to every `grade` (e.g. `-- --memory-limit 4GiB`).
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from autograder.paths import KIT, SOLUTIONS  # the kit is installed (make setup)

sys.path.insert(0, str(KIT))  # the corpora's loader, tests/corpus
from tests.corpus import load_attacks, load_corpus, materialize  # noqa: E402


def cases():
    """id -> corpus case (None: the reference): the memory bombs and infinite loops, and every hostile case."""
    found = {"reference": None}
    found.update((c.id, c) for c in load_attacks() if c.attack in ("memory-bomb", "infinite-loop"))
    found.update((c.id, c) for c in load_corpus()["hostile"])
    return found


def grade_once(folder, out, extra):
    """One cold grading as a user runs it: (wall s, user s, sys s, peak MiB, score)."""
    cmd = [sys.executable, str(KIT / "grader_cli.py"), "grade", "--format", "json", "-o", str(out), *extra,
           str(folder)]
    start = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=KIT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.monotonic() - start
    try:
        score = json.loads(Path(out).read_text(encoding="utf-8")).get("score")
    except (OSError, ValueError):
        score = f"exit {os.waitstatus_to_exitcode(status)}"
    return wall, usage.ru_utime, usage.ru_stime, usage.ru_maxrss / 1024, score


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="rounds; the table shows each figure's median")
    parser.add_argument("--only", nargs="+", metavar="ID", help="these case ids (and the reference) only")
    parser.add_argument("grade_options", nargs="*", help="after --: options for every grade")
    args = parser.parse_args()
    chosen = {k: v for k, v in cases().items() if not args.only or k == "reference" or k in args.only}
    work = Path(tempfile.mkdtemp(prefix="hostile-cost-"))
    os.chmod(work, 0o755)  # a sandbox uid of its own reads the submissions (root)
    folders = {}
    for cid, case in chosen.items():
        if case is None:
            folders[cid] = shutil.copytree(SOLUTIONS, work / cid, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            folders[cid] = materialize(case, work / cid, SOLUTIONS, params={"port": "1", "marker": "m"})
    figures = {cid: [] for cid in chosen}
    try:
        for r in range(args.runs):
            for cid, case in chosen.items():
                extra = list(args.grade_options)
                if case is not None and getattr(case, "call_timeout", None):
                    extra[:0] = ["--call-timeout", str(case.call_timeout)]
                figures[cid].append(grade_once(folders[cid], work / f"{cid}.json", extra))
                wall, user, kernel, peak, score = figures[cid][-1]
                print(f"round {r + 1}/{args.runs} {cid}: wall {wall:.1f} s, user {user:.1f} s, sys {kernel:.1f} s, "
                      f"peak {peak:.0f} MiB, score {score}", file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    med = {cid: [statistics.median(run[i] for run in runs) for i in range(4)] for cid, runs in figures.items()}
    ref = med["reference"][0]
    print(f"{'case':42} {'wall s':>7} {'user s':>7} {'sys s':>6} {'peak MiB':>8} {'x ref wall':>10}  score")
    for cid, (wall, user, kernel, peak) in med.items():
        print(f"{cid:42} {wall:7.1f} {user:7.1f} {kernel:6.1f} {peak:8.0f} {wall / ref:10.2f}  {figures[cid][-1][4]}")
    print(f"\nmedian of {args.runs} interleaved rounds; {os.cpu_count()} CPUs, load average "
          f"{', '.join(f'{x:.2f}' for x in os.getloadavg())} at the end")


if __name__ == "__main__":
    main()
