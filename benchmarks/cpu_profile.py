"""Benchmark: where the CPU of a class run goes, per submission, in every process of the run.

    python benchmarks/cpu_profile.py [--class correct bugs mix] [--students 12] [--jobs 2] [--profile]
                                     [--kit DIR --python PY ...] [--rounds 1] [--keep DIR]

Builds each class named (the same submissions for every kit compared):

* correct: copies of the reference solution;
* bugs: the planted bugs of tests/corpus (submissions.toml), taken evenly across the corpus;
* mix: half correct copies, a tenth untouched templates, every fifth of the correct ones zipped, the rest
  planted bugs (the class issue 51 measures throughput on);

and grades it with `grader_cli.py grade-all --jobs N` as a whole process, once per kit given (`--kit DIR
--python PY`, repeated; default: this checkout and its interpreter), the kits in turn round after round, so
that a busy machine weighs on each alike. What it measures, side by side:

* CPU per submission: the user and system time of the whole process tree of the run (the CLI, both warm
  servers, every grading and every student process: each is waited for by its parent, so the kernel sums
  them into the run's rusage, os.wait4), divided by the class's size; and the submissions per minute (wall
  time, noisy where the machine is shared: the CPU time is the figure to compare);
* whether the gradebooks agree row for row (every column but the grading time and the fingerprint);
* with --profile, a second run of each class under py-spy (`record --subprocesses --format raw`: every
  process of the run sampled, forks included), whose samples are sorted by the role of the process they come
  from (the CLI, the grader server, a grading forked from it, the student zygote, a student process forked
  from it, a cold process) and, within each role, by function (the time spent in a function and what it
  calls, for the functions with the most): a table of where the CPU goes per submission (idle threads are not
  sampled). py-spy pauses a process for each sample, so the profiled run is not the one timed. py-spy
  is a development tool, not a dependency of the kit: `python -m pip install py-spy`. It needs to ptrace
  the run's processes (root, or kernel.yama.ptrace_scope 0: the servers are not dumpable); where it cannot,
  the table is empty and the CPU figures still stand. Read its figures as shares within a role, not as CPU:
  py-spy samples by the wall clock, so a process waiting for a core on a busy machine counts as running, and
  it cannot tell a thread blocked in a read from a running one in a process of another PID namespace (the
  student processes at the namespaces level: their `receive` is mostly waiting for the grader). The CPU by
  role comes from the kernel (above). Do not profile beside other gradings of the same user (the suite, a
  class run): they share the machine-wide batch, whose measurements stop every grading's processes, and each
  sample's ptrace stop and resume makes a stopped process run a few microseconds in the kernel. A measurement
  then sees its stopped neighbours use CPU ("another grading's processes used 1.3 ms of CPU during the
  measurement") and vouches for none of its rounds: 100 attach-detach cycles on a stopped process add ~0.6 ms
  to its CPU time (measured here, 2026-11-28). Profile on a quiet machine.
"""
from __future__ import annotations

import argparse
import collections
import csv
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from autograder.paths import KIT as ROOT, SOLUTIONS, STUDENT_TEMPLATE  # the kit is installed (make setup)

sys.path.insert(0, str(ROOT))  # for the kit's test corpus (tests/corpus), which is not installed

from tests.corpus import load_corpus, materialize  # noqa: E402

#: gradebook columns that say how a row was graded, not what it got (left out when gradebooks are compared)
UNGRADED_COLUMNS = ("grading_time_s", "fingerprint")
RATE = 100  # py-spy's samples per second


# -- the classes --------------------------------------------------------------------------------------------

def _copy_reference(dest: Path):
    dest.mkdir(parents=True)
    for name in ("attention.py", "heads.py", "masks.py", "mha.py", "positional.py"):
        shutil.copyfile(SOLUTIONS / name, dest / name)


def _template(dest: Path):
    dest.mkdir(parents=True)
    for path in STUDENT_TEMPLATE.glob("*.py"):
        if path.name != "selfcheck.py":
            shutil.copyfile(path, dest / path.name)


def _bugs(n):
    """`n` planted bugs taken evenly across the corpus (every module's), in the corpus's order."""
    bugs = load_corpus()["bug"]
    step = max(1, len(bugs) // max(n, 1))
    return [bugs[(i * step) % len(bugs)] for i in range(n)]


def build_class(kind: str, n: int, folder: Path) -> Path:
    """A class of `n` submissions of `kind` (correct, bugs, mix) in `folder`/`kind`."""
    root = folder / kind
    root.mkdir(parents=True)
    if kind == "correct":
        for i in range(n):
            _copy_reference(root / f"correct-{i:03d}")
    elif kind == "bugs":
        for i, case in enumerate(_bugs(n)):
            materialize(case, root / f"bug-{i:03d}-{case.id}", SOLUTIONS)
    elif kind == "mix":
        correct, templates = n // 2, max(1, n // 10)
        for i in range(correct):
            dest = root / f"correct-{i:03d}"
            _copy_reference(dest)
            if i % 5 == 4:  # every fifth correct copy as a zip of its folder
                shutil.make_archive(str(dest), "zip", root, dest.name)
                shutil.rmtree(dest)
        for i in range(templates):
            _template(root / f"template-{i:03d}")
        for i, case in enumerate(_bugs(n - correct - templates)):
            materialize(case, root / f"bug-{i:03d}-{case.id}", SOLUTIONS)
    else:
        raise ValueError(f"no class {kind!r}")
    return root


# -- one run ------------------------------------------------------------------------------------------------

_TICK = os.sysconf("SC_CLK_TCK")


def _cpu(pid):
    """(own CPU s, CPU s of its waited-for children) of `pid`, its command line; None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            cmdline = fh.read().replace(b"\0", b" ").decode(errors="replace")
        return (int(fields[11]) + int(fields[12])) / _TICK, (int(fields[13]) + int(fields[14])) / _TICK, cmdline, \
            int(fields[1])
    except (OSError, IndexError, ValueError):
        return None


class Roles(threading.Thread):
    """CPU per role of a run, read from /proc every 50 ms while it runs: each warm server's own time (its start:
    imports) and its children's, which it waits for (a grading forked from the grader server, a student process
    and its keeper forked from the zygote), as the kernel sums them (cutime, cstime). The last reading of a
    server is taken while it idles after the class's last grading, so it holds all of them."""

    def __init__(self, root):
        super().__init__(daemon=True)
        self.root, self.done, self.seen = root, threading.Event(), {}

    def run(self):
        while not self.done.wait(0.05):
            for pid in self._children():
                got = _cpu(pid)
                if got and got[3] == self.root and "forkserver.py" in got[2]:
                    self.seen[pid] = got

    def _children(self):
        try:  # the kernel's lists of the CLI's children, per thread (a worker thread starts the servers)
            pids = []
            for tid in os.listdir(f"/proc/{self.root}/task"):
                with open(f"/proc/{self.root}/task/{tid}/children") as fh:
                    pids += [int(pid) for pid in fh.read().split()]
            return pids
        except OSError:  # gone, or a kernel without CONFIG_PROC_CHILDREN
            return [int(name) for name in os.listdir("/proc") if name.isdigit()]

    def split(self, total):
        roles = collections.Counter()
        for own, children, cmdline, _ in self.seen.values():
            kind = "student" if "forkserver.py student" in cmdline else "grader"
            roles[f"{kind} server (start, imports)" if kind == "grader" else "student zygote (start, imports)"] += own
            roles["gradings (forks of the grader server)" if kind == "grader" else
                  "student processes (forks of the zygote)"] += children
        roles["CLI (intake, reports) and the rest"] = total - sum(roles.values())
        return roles


def run_class(kit: Path, python: str, subs: Path, out: Path, jobs: int, profile: Path | None = None):
    """Grade `subs` into `out` with `kit`'s grade-all; (CPU seconds of the whole tree, wall seconds, CPU by role:
    a Counter, without a profile)."""
    command = [python, str(kit / "grader_cli.py"), "grade-all", str(subs), "-o", str(out), "--jobs", str(jobs)]
    if profile is not None:
        spy = shutil.which("py-spy", path=os.pathsep.join([str(Path(python).parent), str(Path(sys.executable).parent),
                                                           os.environ.get("PATH", "")]))
        if spy is None:
            raise SystemExit("py-spy is not installed: python -m pip install py-spy")
        command = [spy, "record", "--subprocesses", "--format", "raw", "--rate", str(RATE),
                   "-o", str(profile), "--", *command]
    start = time.monotonic()
    proc = subprocess.Popen(command, cwd=kit, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    roles = Roles(proc.pid)
    if profile is None:
        roles.start()
    _, status, usage = os.wait4(proc.pid, 0)
    roles.done.set()
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.monotonic() - start
    if proc.returncode not in (0, 2):  # 2: some rows are errors, which the comparison shows
        sys.stderr.write(proc.stderr.read().decode(errors="replace")[-3000:])
        raise SystemExit(f"grade-all exited with {proc.returncode}")
    proc.stderr.close()
    total = usage.ru_utime + usage.ru_stime
    if roles.is_alive():
        roles.join()
    return total, wall, roles.split(total)


def gradebook(out: Path) -> dict[str, dict]:
    with open(out / "gradebook.csv", newline="", encoding="utf-8") as fh:
        return {row["id"]: {k: v for k, v in row.items() if k not in UNGRADED_COLUMNS} for row in csv.DictReader(fh)}


def differences(books: list[dict]) -> list[str]:
    """Rows where the gradebooks disagree (the first book against each other)."""
    lines = []
    for other in books[1:]:
        for key in sorted(set(books[0]) | set(other)):
            if books[0].get(key) != other.get(key):
                lines.append(f"  {key}: {books[0].get(key)} != {other.get(key)}")
    return lines


# -- the profile --------------------------------------------------------------------------------------------

_FRAME = re.compile(r"^(?P<function>.*) \((?P<file>[^()]*?)(?::\d+)?\)$")


def role(process: str, frames: list[str]) -> str:
    """The role of a sampled process, from its command line and its stack (a fork keeps its server's command
    line: what it runs tells them apart)."""
    names = {f.split(" (", 1)[0] for f in frames}
    if "forkserver.py student" in process:
        return "student process (fork)" if "forked" in names else "student zygote"
    if "forkserver.py grader" in process:
        # a fork runs its grading afresh (`fresh`) or in the server's prepared session (from `Prepared.resume` on:
        # the checks, the session's finish); the server prepares that session and serves (autograder/grade/prepared.py)
        grading = {"fresh", "Prepared.resume", "runtestprotocol", "pytest_sessionfinish", "pytest_unconfigure"}
        return "grading (fork of the grader server)" if grading & names else "grader server"
    if "student_process.py" in process:
        return "student process (cold)"
    if "pytest" in process:
        return "grading (cold)"
    if "grader_cli.py" in process:
        return "CLI (grade-all)"
    return "other"


def _short(frame: str) -> str:
    """`function (path:line)` as `function (file)`, the path from site-packages or the kit's root on."""
    match = _FRAME.match(frame)
    if not match:
        return frame
    path = match["file"]
    for marker in ("site-packages/", "/autograder/", "/lib/python3"):
        if marker in path:
            path = (marker.strip("/") + "/" if marker == "/autograder/" else "") + path.split(marker, 1)[1]
            break
    return f"{match['function']} ({path})"


def read_profile(path: Path):
    """{role: Counter of samples}, {role: Counter of samples per function (inclusive)}, {role: Counter (self)}."""
    total, inclusive, own = collections.Counter(), collections.defaultdict(collections.Counter), \
        collections.defaultdict(collections.Counter)
    for line in path.read_text(errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        frames = stack.split(";")
        # a sampled process's stack comes under its parents' "process PID:cmdline" frames: its own is the last
        first = max((i for i, f in enumerate(frames) if f.startswith("process ")), default=-1)
        process = frames[first] if first >= 0 else ""
        frames = [f for f in frames[first + 1:] if not f.startswith("thread ")]
        who = role(process, frames)
        n = int(count)
        total[who] += n
        for name in {_short(f) for f in frames}:
            inclusive[who][name] += n
        if frames:
            own[who][_short(frames[-1])] += n
    return total, inclusive, own


def profile_table(path: Path, submissions: int, top: int) -> list[str]:
    total, inclusive, own = read_profile(path)
    samples = sum(total.values())
    if not samples:
        return ["  (no samples: py-spy could not attach here; see the docstring)"]
    lines = [f"  {'process role':<40} {'CPU s/submission':>17} {'share':>6}"]
    for who, n in total.most_common():
        lines.append(f"  {who:<40} {n / RATE / submissions:>17.3f} {n / samples:>6.1%}")
    for who, n in total.most_common():
        if n / samples < 0.02:
            continue
        lines.append(f"\n  {who}: the functions with the most CPU (with what they call; s/submission, share of the role)")
        shown = 0
        for name, m in inclusive[who].most_common():
            if m / n > 0.97 or shown >= top:  # the frames every sample of the role passes through say nothing
                continue
            lines.append(f"    {m / RATE / submissions:7.3f}  {m / n:6.1%}  {name}")
            shown += 1
        lines.append("    own time (the leaf frame):")
        for name, m in own[who].most_common(5):
            lines.append(f"    {m / RATE / submissions:7.3f}  {m / n:6.1%}  {name}")
    return lines


# -- main ---------------------------------------------------------------------------------------------------

def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--class", dest="classes", nargs="+", default=["correct", "bugs"],
                        choices=["correct", "bugs", "mix"])
    parser.add_argument("--students", type=int, default=12)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--kit", action="append", type=Path, default=[],
                        help="a checkout of the kit to run (repeat to compare; default: this one)")
    parser.add_argument("--python", action="append", default=[],
                        help="the interpreter of each --kit, in the same order (default: this one)")
    parser.add_argument("--rounds", type=int, default=1, help="runs of each class per kit, the kits in turn")
    parser.add_argument("--profile", action="store_true", help="also a run of each class under py-spy")
    parser.add_argument("--top", type=int, default=12, help="functions shown per role")
    parser.add_argument("--keep", type=Path, help="keep the classes, gradebooks and profiles in this folder")
    args = parser.parse_args()
    kits = args.kit or [ROOT]
    pythons = args.python or [sys.executable] * len(kits)
    if len(pythons) != len(kits):
        parser.error("give one --python per --kit")
    work = Path(args.keep or tempfile.mkdtemp(prefix="mha-cpu-profile-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        for kind in args.classes:
            subs = build_class(kind, args.students, work / "classes")
            print(f"\n== class {kind}: {args.students} submissions, grade-all --jobs {args.jobs} ==", flush=True)
            cpu, wall, books, split = collections.defaultdict(list), collections.defaultdict(list), [], {}
            for r in range(args.rounds):
                for i, (kit, python) in enumerate(zip(kits, pythons)):
                    out = work / "out" / f"{kind}-{i}-{r}"
                    c, w, roles = run_class(kit, python, subs, out, args.jobs)
                    if not cpu[i] or c < min(cpu[i]):
                        split[i] = roles
                    cpu[i].append(c)
                    wall[i].append(w)
                    books.append(gradebook(out))
                    print(f"  round {r + 1}, {kit}: {c / args.students:.3f} CPU s/submission, "
                          f"{60 * args.students / w:.1f} submissions/min", flush=True)
            print(f"\n  {'kit':<48} {'CPU s/submission':>17} {'submissions/min':>16}")
            for i, kit in enumerate(kits):
                print(f"  {f'kit {i + 1}: {kit}':<48} {min(cpu[i]) / args.students:>17.3f} "
                      f"{60 * args.students / min(wall[i]):>16.1f}   (best of {args.rounds})")
            print(f"\n  CPU s/submission by role (the best run of each kit; /proc)")
            print(f"  {'role':<42}" + "".join(f" {'kit ' + str(i + 1):>10}" for i in range(len(kits))))
            for who in split[0]:
                print(f"  {who:<42}" + "".join(f" {split[i][who] / args.students:>10.3f}" for i in range(len(kits))))
            diff = differences(books)
            print(f"  gradebooks: {'identical row for row' if not diff else f'{len(diff)} rows differ'} "
                  f"({len(books)} runs)")
            print("\n".join(diff[:40]))
            if args.profile:
                for i, (kit, python) in enumerate(zip(kits, pythons)):
                    raw = work / f"profile-{kind}-{i}.txt"
                    run_class(kit, python, subs, work / "out" / f"{kind}-{i}-profiled", args.jobs, profile=raw)
                    print(f"\n  profile of {kit} ({raw.name}; py-spy, {RATE} samples/s, every process):")
                    print("\n".join(profile_table(raw, args.students, args.top)), flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
