"""What a class run leaves in its OUT (issue 36): one run at a time, and files that the user's umask decides who
reads. tests/test_shards.py shows that a refused merge leaves no earlier gradebook that passes for the current one.

- grade-all locks OUT (an fcntl lock on OUT/.grade-all.lock, held from before its plan to its end): a second
  grade-all into the same OUT is refused at once, naming the first, and grades nothing; the kernel releases the
  lock when the first process dies, however it dies.
- gradebook.csv, shard.json and every report are made as `open` makes a file: 0644 under the usual umask 022,
  0640 under 027 (a course's group only). The student processes' own files are not these (autograder/sandbox).
"""
from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from autograder.classrun import gradebook, merge, outlock, run, shards
from tests.conftest import ROOT

HANG_GUARD = 600  # seconds: a guard against a hang, never a bound on speed


def grade_all(folder, out, *more):
    return [sys.executable, str(ROOT / "grader_cli.py"), "grade-all", str(folder), "--output", str(out), *more]


def mode(path: Path) -> str:
    return oct(stat.S_IMODE(os.stat(path).st_mode))


def with_umask(mask, action):
    previous = os.umask(mask)
    try:
        return action()
    finally:
        os.umask(previous)


@pytest.mark.parametrize("mask, expected", [(0o022, "0o644"), (0o027, "0o640"), (0o077, "0o600")])
def test_the_gradebook_the_manifest_and_the_reports_follow_the_umask(tmp_path, mask, expected):
    folder = tmp_path / "class"
    folder.mkdir()
    (folder / "notes.txt").write_text("not a submission\n")  # graded "empty" at intake: no student process

    def graded():
        planned = shards.prepare(folder, tmp_path / "out", 0, 1)
        return run.grade_all(folder, tmp_path / "out", planned=planned, jobs=1, warm=False)

    rows = with_umask(mask, graded)
    assert rows["notes.txt"].status == "empty", rows
    written = [tmp_path / "out" / name for name in ("gradebook.csv", "shard.json")] + \
        sorted((tmp_path / "out" / "notes.txt").iterdir())
    assert [p.name for p in written] == ["gradebook.csv", "shard.json", "feedback.html", "feedback.md",
                                         "results.json"]
    got = {p.name: mode(p) for p in written}
    assert got == dict.fromkeys(got, expected), f"umask {oct(mask)}: expected every file {expected}, got {got}"


def test_a_merged_gradebook_follows_the_umask_too(tmp_path):
    folder = tmp_path / "class"
    folder.mkdir()
    (folder / "notes.txt").write_text("not a submission\n")

    def graded_and_merged():
        planned = shards.prepare(folder, tmp_path / "shard", 0, 1)
        run.grade_all(folder, tmp_path / "shard", planned=planned, jobs=1, warm=False)
        merge.merge([tmp_path / "shard"], tmp_path / "merged")

    with_umask(0o027, graded_and_merged)
    got = (mode(tmp_path / "merged"), mode(tmp_path / "merged" / "gradebook.csv"),
           mode(tmp_path / "merged" / "notes.txt" / "feedback.html"))
    assert got == ("0o750", "0o640", "0o640"), f"expected the folder 0o750 and its files 0o640, got {got}"


def test_the_lock_is_counted_within_one_process(tmp_path):
    with outlock.output_lock(tmp_path / "out") as locked:
        with outlock.output_lock(tmp_path / "out"):
            pass
        other = subprocess.run([sys.executable, "-c", "import sys; from autograder.classrun import outlock\n"
                                "with outlock.output_lock(sys.argv[1]): pass", str(tmp_path / "out")],
                               capture_output=True, text=True, cwd=ROOT, timeout=HANG_GUARD)
    assert locked and other.returncode == 1 and "outlock.Busy" in other.stderr and \
        f"pid {os.getpid()} on " in other.stderr, f"expected the inner release to keep the lock held:\n{other.stderr}"


def test_a_shard_graded_from_the_library_is_refused_before_its_manifest_while_another_process_holds_it(tmp_path):
    folder = tmp_path / "class"
    folder.mkdir()
    (folder / "notes.txt").write_text("not a submission\n")
    holder = subprocess.Popen([sys.executable, "-c", "import sys; from autograder.classrun import outlock\n"
                               "with outlock.output_lock(sys.argv[1]):\n print('held', flush=True); sys.stdin.read()",
                               str(tmp_path / "out")], cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        with pytest.raises(outlock.Busy, match=f"pid {holder.pid} on "):
            shards.grade_shard(folder, tmp_path / "out", 0, 1, jobs=1, warm=False)
        assert os.listdir(tmp_path / "out") == [outlock.LOCK], "expected no manifest and no row written"
    finally:
        holder.communicate("", timeout=HANG_GUARD)


@pytest.mark.grading
def test_a_second_grade_all_into_the_same_folder_is_refused_and_the_first_ones_death_frees_it(tmp_path):
    """Two real grade-all processes: the first grades a submission that sleeps at import (it holds OUT while it
    waits); the second, on the same OUT, is refused at once (exit 2), naming the first, and writes nothing.
    Once the first is killed (SIGKILL: no code of it runs), the same second command grades."""
    sleeper = tmp_path / "class" / "sleeper"
    sleeper.mkdir(parents=True)
    (sleeper / "attention.py").write_text("import time\ntime.sleep(600)\n")
    out = tmp_path / "out"
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    first = subprocess.Popen(grade_all(tmp_path / "class", out, "--jobs", "1"), stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + HANG_GUARD
        while f"pid {first.pid} on " not in _read(out / outlock.LOCK):
            assert first.poll() is None and time.monotonic() < deadline, "expected the first run to hold OUT"
            time.sleep(0.1)
        (tmp_path / "other").mkdir()
        (tmp_path / "other" / "notes.txt").write_text("not a submission\n")
        second = subprocess.run(grade_all(tmp_path / "other", out, "--jobs", "1"), capture_output=True, text=True,
                                env=env, timeout=HANG_GUARD)
        assert second.returncode == 2, f"expected exit 2, got {second.returncode}:\n{second.stderr}"
        assert f"is being graded into by another grade-all (pid {first.pid} on " in second.stderr, second.stderr
        assert not (out / "notes.txt").exists() and not (out / gradebook.GRADEBOOK).exists(), \
            f"expected nothing written by the refused run, got {sorted(os.listdir(out))}"
    finally:
        os.killpg(first.pid, signal.SIGKILL)
        first.wait(timeout=HANG_GUARD)
    again = subprocess.run(grade_all(tmp_path / "other", out, "--jobs", "1"), capture_output=True, text=True,
                           env=env, timeout=HANG_GUARD)
    assert again.returncode == 0 and "1 rows in" in again.stdout, f"expected the lock gone with its process:\n" \
        f"{again.stdout}{again.stderr}"


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except FileNotFoundError:
        return ""
