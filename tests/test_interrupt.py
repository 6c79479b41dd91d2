"""Ctrl-C in `grade-all`, typed at a real terminal (a pseudo-terminal), as an instructor would.

The terminal sends SIGINT to its foreground process group: the CLI. The
first Ctrl-C starts no new grading, lets the running one finish and records
it, writes the gradebook and says how to resume; a second one stops at once
and records nothing of the grading it stopped. An interrupted grading is
never a score, and a second run grades what is left.
"""
import pytest
import csv
import os
import pty
import re
import shutil
import signal
import sys
import threading
import time

from tests.conftest import ROOT, SOLUTIONS
from tests.corpus import load_corpus, materialize

pytestmark = pytest.mark.grading  # every test here grades or starts student processes

CLASS_SIZE = 4
SAFETY = 600  # seconds: only so that a broken kit cannot hang the suite; never reached when it works


def _class(tmp_path):
    subs = tmp_path / "class"
    subs.mkdir()
    for n in range(CLASS_SIZE):
        shutil.copytree(SOLUTIONS, subs / f"student-{n}", ignore=shutil.ignore_patterns("__init__.py", "__pycache__"))
    return subs


def _rows(out):
    path = out / "gradebook.csv"
    if not path.is_file():
        return {}
    with open(path, newline="") as fh:
        return {r["id"]: r for r in csv.DictReader(fh)}


class Terminal:
    """`grader_cli.py ARGS` on a pseudo-terminal of its own; what it prints is collected."""

    def __init__(self, *args):
        self.pid, self.fd = pty.fork()
        if self.pid == 0:  # the child: session leader, the pty its controlling terminal
            # as in an instructor's terminal: Ctrl-C interrupts. A suite started in the background of a
            # non-interactive shell (`make test &`) ignores SIGINT, and an ignored signal stays ignored
            # across exec: the CLI would never see the Ctrl-C
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.chdir(ROOT)
            os.execv(sys.executable, [sys.executable, str(ROOT / "grader_cli.py"), *args])
        self.output = bytearray()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self):
        while True:
            try:
                data = os.read(self.fd, 4096)
            except OSError:
                return
            if not data:
                return
            self.output += data

    def ctrl_c(self):
        os.write(self.fd, b"\x03")  # the terminal turns it into SIGINT for its foreground process group

    def wait(self):
        deadline = time.monotonic() + SAFETY
        while time.monotonic() < deadline:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self._reader.join(5)
                os.close(self.fd)
                return os.waitstatus_to_exitcode(status)
            time.sleep(0.1)
        os.kill(self.pid, 9)
        raise AssertionError(f"grade-all did not end; it printed: {self.text()[-2000:]}")

    def text(self):
        return self.output.decode(errors="replace")


def _wait_for_rows(out, n, term):
    deadline = time.monotonic() + SAFETY
    while len(_rows(out)) < n:
        assert time.monotonic() < deadline, f"no {n} rows in the gradebook; grade-all printed: {term.text()[-2000:]}"
        time.sleep(0.1)


def _bar_shows(text, size):
    """The last count the progress bar showed ("3/4") before the run said it was interrupted."""
    shown = re.findall(rf"\b(\d+)/{size}\b", text.split("Interrupted:")[0])
    assert shown, f"expected a progress bar counting to {size}, got: {text[-1500:]}"
    return int(shown[-1])


def test_one_ctrl_c_finishes_the_running_grading_saves_all_and_resumes(tmp_path):
    subs, out = _class(tmp_path), tmp_path / "out"
    term = Terminal("grade-all", str(subs), "--output", str(out), "--jobs", "1")
    _wait_for_rows(out, 1, term)
    term.ctrl_c()
    code = term.wait()
    text = term.text()
    book = _rows(out)
    assert code == 130, f"expected exit status 130 after Ctrl-C, got {code}: {text[-1500:]}"
    assert "Stopping: no new grading starts" in text and "Run the same command again" in text, text[-1500:]
    assert 1 <= len(book) < CLASS_SIZE, f"expected the finished gradings only, got {sorted(book)}"
    assert all(r["total"] == "100" and r["status"] == "graded" for r in book.values()), book
    assert f"{CLASS_SIZE - len(book)} submission(s) not graded" in text, text[-1500:]
    assert f"Interrupted: {len(book)} rows saved" in text, text[-1500:]
    assert _bar_shows(text, CLASS_SIZE) == len(book), f"expected the bar to count the {len(book)} rows saved: {text}"

    again = Terminal("grade-all", str(subs), "--output", str(out), "--jobs", "1")
    assert again.wait() == 0, again.text()[-1500:]
    assert f"{len(book)} already graded, {CLASS_SIZE - len(book)} to grade" in again.text(), again.text()[-1500:]
    final = _rows(out)
    assert len(final) == CLASS_SIZE and all(r["total"] == "100" for r in final.values()), final


def test_a_second_ctrl_c_stops_at_once_and_records_nothing_it_stopped(tmp_path):
    subs, out = _class(tmp_path), tmp_path / "out"
    # graded first, beside the others, and still running at both Ctrl-Cs: each call of its positional
    # module hangs until the call timeout, so the run cannot have ended before the Ctrl-Cs arrive
    materialize(next(c for c in load_corpus()["hostile"] if c.id == "positional-hangs"), subs / "a-slow", SOLUTIONS)
    term = Terminal("grade-all", str(subs), "--output", str(out), "--jobs", "2", "--call-timeout", "120")
    _wait_for_rows(out, 1, term)
    term.ctrl_c()
    deadline = time.monotonic() + SAFETY
    while "Stopping" not in term.text():
        assert time.monotonic() < deadline, f"no 'Stopping' after Ctrl-C; grade-all printed: {term.text()[-2000:]}"
        time.sleep(0.05)
    before = dict(_rows(out))
    term.ctrl_c()
    code = term.wait()
    text = term.text()
    book = _rows(out)
    assert code == 130, f"expected exit status 130, got {code}: {text[-1500:]}"
    assert "a-slow" not in book, f"expected the stopped grading recorded nowhere, got {book['a-slow']}"
    assert all(r["total"] == "100" and r["status"] == "graded" for r in book.values()), (
        f"expected only complete gradings in the gradebook (never a 0 or an error for a stopped one), got {book}")
    stopped = [name for name in os.listdir(out) if (out / name).is_dir() and name not in book]
    assert not stopped, f"expected no files of a stopped grading, found folders {stopped}"
    assert set(before) <= set(book), (before, book)
    assert f"Interrupted: {len(book)} rows saved" in text, text[-1500:]
    assert _bar_shows(text, CLASS_SIZE + 1) == len(book), f"expected the bar to count the {len(book)} rows saved: {text}"
    if len(book) < CLASS_SIZE:
        assert "Run the same command again" in text, text[-1500:]
