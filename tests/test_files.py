"""autograder/files.py: whole writes, and the graders' signed results that nothing else can forge."""
import os

from autograder.files import read_signed, write_atomic, write_signed

KEY = b"k" * 32


def test_signed_results_read_back_with_their_key(tmp_path):
    write_signed(tmp_path / "r.json", KEY, {"tests": [{"name": "a"}]})
    assert read_signed(tmp_path / "r.json", KEY) == {"tests": [{"name": "a"}]}


def test_results_signed_with_another_key_or_edited_are_refused(tmp_path):
    write_signed(tmp_path / "r.json", b"other", {"tests": []})
    assert read_signed(tmp_path / "r.json", KEY) is False
    write_signed(tmp_path / "s.json", KEY, {"score": 10})
    (tmp_path / "s.json").write_bytes((tmp_path / "s.json").read_bytes().replace(b"10", b"99"))
    assert read_signed(tmp_path / "s.json", KEY) is False


def test_no_results_file_is_none_and_a_link_or_fifo_is_never_followed(tmp_path):
    assert read_signed(tmp_path / "missing.json", KEY) is None
    write_signed(tmp_path / "real.json", KEY, {"tests": []})
    (tmp_path / "link.json").symlink_to(tmp_path / "real.json")
    assert read_signed(tmp_path / "link.json", KEY) is False
    os.mkfifo(tmp_path / "fifo.json")  # opened without blocking, and refused: not a regular file
    assert read_signed(tmp_path / "fifo.json", KEY) is False


def test_an_atomic_write_replaces_the_file_whole_and_leaves_no_temporary(tmp_path):
    target = tmp_path / "gradebook.csv"
    write_atomic(target, "old\n")
    write_atomic(target, "id,total\r\nalice,60\r\n")
    assert target.read_bytes() == b"id,total\r\nalice,60\r\n"  # newline="" keeps the csv module's line ends
    write_atomic(target, b"\x00bytes")
    assert target.read_bytes() == b"\x00bytes"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gradebook.csv"]


def test_an_atomic_write_to_a_link_replaces_the_link_not_its_target(tmp_path):
    outside = tmp_path / "outside.txt"
    outside.write_text("keep")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "feedback.md").symlink_to(outside)
    write_atomic(tmp_path / "out" / "feedback.md", "new")
    assert outside.read_text() == "keep" and not (tmp_path / "out" / "feedback.md").is_symlink()
