"""A class graded in shards as a cluster would (issue 17), simulated here: N real `grader_cli.py grade-all --shard
K/N` processes, a few at a time, then `grader_cli.py merge`, for N = 1, 3 and 7, and a shard killed halfway
(SIGKILL to its process group) and run again. The merged gradebook must equal the gradebook of one `grade-all`
run of the whole class, row for row and in order, in every column but `TIMED` (measurements of time, which
differ between any two runs); the merged OUT must hold the same submission folders, with the same files.

The class: 20 submissions whose scores do not depend on timing or load. Three are graded for real: the reference
(100; its speed checks pass with a large margin), the buggy example (67.39: its fused module's values are wrong,
but it does the work of attention as fast as the reference, so its speed checks pass with the same margin) and the reference without mha.py (60:
no speed check at all). The 17 others are "empty" without a student process or nearly so (entries that are no
submission: plain files, FIFOs, links, an unreadable zip, a folder with no module), named to be hostile to paths,
spreadsheets and terminals (gradebook.csv, shard.json, a~, a newline, a formula...). Every grading counts: about
13 real gradings in all (3 per run: the single run, N = 1, 3, 7, plus what the killed shard had in flight).
"""
from __future__ import annotations

import csv
import os
import shutil
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from autograder.classrun import gradebook, outlock, shards
from tests.conftest import ROOT, SOLUTIONS

pytestmark = pytest.mark.grading  # every test here grades, through real grade-all processes

TIMED = ("grading_time_s",)  # the columns that measure time: every other column of the gradebook is compared
COMPARED = [c for c in gradebook.COLUMNS if c not in TIMED]
REAL = ("reference", "buggy", "no-mha")  # the submissions graded for real; the others are empty at once
PARALLEL = 3  # shard processes at once (a 2-core machine: they wait on their student processes much of the time)
HANG_GUARD = 600  # seconds: a guard against a hang, never a bound on speed


def make_class(folder: Path):
    folder.mkdir()
    shutil.copytree(SOLUTIONS, folder / "reference", ignore=shutil.ignore_patterns("__init__.py", "__pycache__"))
    shutil.copytree(ROOT / "examples" / "buggy-student", folder / "buggy")
    shutil.copytree(SOLUTIONS, folder / "no-mha", ignore=shutil.ignore_patterns("__init__.py", "__pycache__", "mha.py"))
    (folder / "only-a-readme").mkdir()
    (folder / "only-a-readme" / "README.md").write_text("my work is elsewhere\n")
    for name in ("gradebook.csv", "José Ñ.txt", "=HYPERLINK(1)", "-rf", "new\nline", "tab\there", "notes.md",
                 "report.pdf", "space name.docx", "ünïcödé"):
        (folder / name).write_text("not a submission\n")
    (folder / "bad.zip").write_bytes(b"not a zip at all")
    (folder / "bad.ipynb").write_text("{ not a notebook")
    with zipfile.ZipFile(folder / "empty.zip", "w"):
        pass
    os.mkfifo(folder / "shard.json")
    os.mkfifo(folder / "fifo")
    (folder / "a~").symlink_to(folder / "reference")  # a link is never followed
    assert len(list(folder.iterdir())) == 20


def grade_all(folder, out, *more):
    return [sys.executable, str(ROOT / "grader_cli.py"), "grade-all", str(folder), "--output", str(out), *more]


def start(command, env):
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                            start_new_session=True)  # its own process group: killed as a whole


def finish(proc):
    try:
        output, _ = proc.communicate(timeout=HANG_GUARD)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        output, _ = proc.communicate()
        raise AssertionError(f"hung: {proc.args}\n{output}") from None
    return proc.returncode, output


def run_all(commands, env, parallel=PARALLEL):
    """Run `commands` (lists), `parallel` at a time; [(exit status, output)] in their order."""
    results, running, queue = {}, {}, list(enumerate(commands))
    while queue or running:
        while queue and len(running) < parallel:
            index, command = queue.pop(0)
            running[index] = start(command, env)
        index = next(iter(running))
        results[index] = finish(running.pop(index))
    return [results[i] for i in range(len(commands))]


def read_rows(out: Path) -> list[dict]:
    with open(out / gradebook.GRADEBOOK, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def compared(out: Path) -> list[dict]:
    return [{c: row[c] for c in COMPARED} for row in read_rows(out)]


def folders(out: Path) -> dict[str, list[str]]:
    """What an OUT holds: each submission folder with the names of its files (the gradebook and the class page
    aside, which every OUT has: tests/test_class_page.py compares the pages)."""
    assert (out / gradebook.CLASS_PAGE).is_file() and (out / gradebook.CLASS_CSV).is_file(), f"no class page in {out}"
    return {p.name: sorted(f.name for f in p.iterdir()) for p in out.iterdir()
            if p.name not in (gradebook.GRADEBOOK, outlock.LOCK, gradebook.CLASS_PAGE, gradebook.CLASS_CSV)}
    # (the lock: held by the grade-all that wrote OUT)


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    """The class, its single run, and its shards for N = 1, 3, 7, shard `killed` of N = 3 killed once it had
    written a row and then run again. Module-scoped: every test below reads these runs."""
    root = tmp_path_factory.mktemp("course")
    folder = root / "class"
    make_class(folder)
    tmp = root / "tmp"  # the processes' temporary folders: whatever a killed run leaves stays here
    tmp.mkdir()
    env = {**os.environ, "TMPDIR": str(tmp), "PYTHONUNBUFFERED": "1"}
    ids = sorted(p.name for p in folder.iterdir())

    # the shard to kill: N = 3's with the most real gradings, one of them after its first row (--jobs 1 grades
    # in id order, so its gradebook has a row while a real grading runs)
    def kill_candidate(k):
        mine = [i for i in ids if shards.shard_of(i, 3) == k]
        return sum(i in REAL for i in mine[1:]), k
    killed = max(range(3), key=kill_candidate)
    assert kill_candidate(killed)[0] >= 1, "expected a shard of N = 3 with a real grading after its first entry"
    assigned = [i for i in ids if shards.shard_of(i, 3) == killed]
    out3 = root / "n3"
    victim = start(grade_all(folder, out3 / str(killed), "--shard", f"{killed}/3", "--jobs", "1"), env)
    seen = 0
    try:
        deadline = time.monotonic() + HANG_GUARD
        while victim.poll() is None and time.monotonic() < deadline:
            if (out3 / str(killed) / gradebook.GRADEBOOK).is_file():
                seen = len(read_rows(out3 / str(killed)))
                if seen >= 1:
                    break
            time.sleep(0.02)
    finally:
        os.killpg(victim.pid, signal.SIGKILL)
        victim.communicate()
    after_kill = len(read_rows(out3 / str(killed))) if (out3 / str(killed) / gradebook.GRADEBOOK).is_file() else 0

    runs = {("single", 0): grade_all(folder, root / "single", "--jobs", "2")}
    for n in (1, 3, 7):
        for k in range(n):
            runs[(n, k)] = grade_all(folder, root / f"n{n}" / str(k), "--shard", f"{k}/{n}", "--jobs", "1")
    rerun = runs.pop((3, killed))  # the killed shard's command, the same, run once the others are done
    results = dict(zip(runs, run_all(list(runs.values()), env)))
    merge_before_rerun = subprocess.run(
        [sys.executable, str(ROOT / "grader_cli.py"), "merge", *(str(out3 / str(k)) for k in range(3)), "-o",
         str(root / "too-early")], capture_output=True, text=True, timeout=HANG_GUARD)
    results[(3, killed)] = finish(start(rerun, env))
    merged = {}
    for n in (1, 3, 7):
        merged[n] = subprocess.run(
            [sys.executable, str(ROOT / "grader_cli.py"), "merge", *(str(root / f"n{n}" / str(k)) for k in range(n)),
             "-o", str(root / f"merged-{n}")], capture_output=True, text=True, timeout=HANG_GUARD, env=env)
    return {"root": root, "class": folder, "ids": ids, "env": env, "results": results, "merged": merged,
            "killed": killed, "assigned": assigned, "seen": seen, "after_kill": after_kill,
            "too_early": merge_before_rerun}


def test_the_single_run_grades_the_class_as_expected(course):
    code, output = course["results"][("single", 0)]
    assert code == 0, output
    rows = {r["id"]: r for r in read_rows(course["root"] / "single")}
    assert len(rows) == 20
    assert (rows["reference"]["total"], rows["buggy"]["total"], rows["no-mha"]["total"]) == ("100", "67.39", "60")
    assert all(r["status"] == "empty" for i, r in rows.items() if i not in REAL), rows


@pytest.mark.parametrize("n", [1, 3, 7])
def test_n_shards_merge_into_the_single_runs_gradebook_row_for_row(course, n):
    root = course["root"]
    for k in range(n):
        code, output = course["results"][(n, k)]
        assert code == 0, f"shard {k}/{n}:\n{output}"
        assert f"(shard {k}/{n} of the class)" in output, output
    merged = course["merged"][n]
    assert merged.returncode == 0, merged.stdout + merged.stderr
    assert f"20 rows in {root / f'merged-{n}' / 'gradebook.csv'} (merged from {n} shards)" in merged.stdout
    assert read_rows(root / f"merged-{n}")[0].keys() == read_rows(root / "single")[0].keys()
    single, got = compared(root / "single"), compared(root / f"merged-{n}")
    assert [r["id"] for r in got] == [r["id"] for r in single], "the same rows, in grade-all's order"
    for mine, theirs in zip(got, single):
        assert mine == theirs, f"N = {n}: every column but {TIMED} equal"
    assert folders(root / f"merged-{n}") == folders(root / "single"), "laid out as the single run's OUT"
    merged_table, single_table = (root / f"merged-{n}" / gradebook.CLASS_CSV), (root / "single" / gradebook.CLASS_CSV)
    assert merged_table.read_text() == single_table.read_text(), \
        f"N = {n}: expected the class page's figures and ids of the single run"
    assert "empty (nothing to grade, 0): " in merged.stderr, "the summary grade-all prints"


def test_each_shard_grades_its_own_ids_and_nothing_else(course):
    for n in (1, 3, 7):
        for k in range(n):
            out = course["root"] / f"n{n}" / str(k)
            expected = [i for i in course["ids"] if shards.shard_of(i, n) == k]
            manifest = shards.read_manifest(out)
            assert [i for i, _ in manifest["submissions"]] == expected
            assert len(read_rows(out)) == len(expected)


def test_a_killed_shard_run_again_changes_nothing(course):
    """Killed (SIGKILL to its process group) once its gradebook had a row and before the end; merging then
    lists its missing ids and writes nothing; run again, it resumes, and the merge equals the single run's
    (test_n_shards_merge_into_the_single_runs_gradebook_row_for_row[3])."""
    killed, assigned = course["killed"], course["assigned"]
    assert 1 <= course["seen"] and course["after_kill"] < len(assigned), (course["seen"], course["after_kill"])
    early = course["too_early"]
    assert early.returncode == 1 and f"shard {killed} (" in early.stderr and "assigned, no row" in early.stderr, \
        early.stderr
    assert not (course["root"] / "too-early").exists()
    code, output = course["results"][(3, killed)]
    assert code == 0 and f"{course['after_kill']} already graded" in output, output
    assert compared(course["root"] / "merged-3") == compared(course["root"] / "single")


def test_a_finished_shard_run_again_grades_nothing_and_the_merge_resumes_as_one_run(course):
    root, env = course["root"], course["env"]
    again = subprocess.run(grade_all(course["class"], root / "n7" / "0", "--shard", "0/7"), capture_output=True,
                           text=True, timeout=HANG_GUARD, env=env)
    assert again.returncode == 0 and "0 to grade" in again.stderr, again.stderr
    resumed = subprocess.run(grade_all(course["class"], root / "merged-7"), capture_output=True, text=True,
                             timeout=HANG_GUARD, env=env)
    assert resumed.returncode == 0 and "20 submissions, 20 already graded, 0 to grade" in resumed.stderr, \
        resumed.stderr
    wrong = subprocess.run(grade_all(course["class"], root / "n7" / "1", "--shard", "1/3"), capture_output=True,
                           text=True, timeout=HANG_GUARD, env=env)
    assert wrong.returncode == 2 and "holds the results of shard 1/7" in wrong.stderr, wrong.stderr
