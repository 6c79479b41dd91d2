"""What a class run leaves in its OUT (issue 36): files that the user's umask decides who reads.

- gradebook.csv, shard.json and every report are made as `open` makes a file: 0644 under the usual umask 022,
  0640 under 027 (a course's group only). The student processes' own files are not these (autograder/sandbox).
"""
from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from autograder.grade import batch, shards


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

    def run():
        planned = shards.prepare(folder, tmp_path / "out", 0, 1)
        return batch.grade_all(folder, tmp_path / "out", planned=planned, jobs=1, warm=False)

    rows = with_umask(mask, run)
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

    def run():
        planned = shards.prepare(folder, tmp_path / "shard", 0, 1)
        batch.grade_all(folder, tmp_path / "shard", planned=planned, jobs=1, warm=False)
        shards.merge([tmp_path / "shard"], tmp_path / "merged")

    with_umask(0o027, run)
    got = (mode(tmp_path / "merged"), mode(tmp_path / "merged" / "gradebook.csv"),
           mode(tmp_path / "merged" / "notes.txt" / "feedback.html"))
    assert got == ("0o750", "0o640", "0o640"), f"expected the folder 0o750 and its files 0o640, got {got}"
