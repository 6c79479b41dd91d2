"""Grade a whole class: the library behind `grader_cli.py grade-all`.

Every entry of the input folder is one submission (a folder of .py modules
or notebooks, a zip, or a single notebook); its name is the submission id.
Submissions are graded in parallel; for each, OUT/<id>/results.json
(Gradescope format), feedback.md and feedback.html are written, and
OUT/gradebook.csv is rewritten atomically after every submission, so an
interrupted run loses nothing and a second run resumes where it stopped.

A submission's name is the student's to choose: its string cells in the
gradebook go through autograder.results.csv_cell (control characters escaped,
a cell that a spreadsheet would take for a formula made text), and a row is
found again by `row_key`, the id as it reads back from the gradebook.
"""
from __future__ import annotations

import csv
import io
import os
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from autograder import MODULES
from autograder.engine import SubmissionError, WarmServers, grade
from autograder.feedback import to_html, to_markdown
from autograder.results import GradeReport, csv_cell, csv_value, safe_line
from autograder.sandbox import GraderUnavailable

GRADEBOOK = "gradebook.csv"
GRADER_FAILURE = "the grader could not run student code: "  # how the error of such a row begins
COLUMNS = ["id", "total", *MODULES, "status", "isolation", "grading_time_s", "error"]


@dataclass
class Row:
    id: str
    total: float | None  # None: no score (status "error": the submission could not be graded)
    modules: dict
    status: str  # graded | timeout | error
    seconds: float
    error: str = ""
    isolation: str = ""  # how student code was confined (autograder.LEVELS)

    def as_csv(self):
        """The gradebook row: strings through csv_cell, numbers as numbers (never prefixed)."""
        scores = {"total": "", **{m: "" for m in MODULES}} if self.total is None else {
            "total": f"{self.total:g}", **{m: f"{self.modules.get(m, 0):g}" for m in MODULES}}
        return {"id": csv_cell(self.id), **scores, "status": csv_cell(self.status),
                "isolation": csv_cell(self.isolation), "grading_time_s": f"{self.seconds:.1f}",
                "error": csv_cell(self.error)}

    @classmethod
    def from_csv(cls, rec):
        number = (lambda text: float(text) if text not in ("", None) else None)
        text = (lambda key: csv_value(rec.get(key) or ""))
        return cls(text("id"), number(rec["total"]), {m: number(rec[m]) for m in MODULES}, text("status"),
                   float(rec["grading_time_s"]), text("error"), text("isolation"))


def row_key(sub_id: str) -> str:
    """How the id `sub_id` reads back from the gradebook (its control characters stay escaped there): the
    key of its row in `read_gradebook` and `grade_all`, so that a second run finds every row again."""
    return safe_line(sub_id)


def discover(folder: Path) -> list[tuple[str, Path]]:
    """(id, path) for every submission in `folder`, sorted by id; hidden entries are skipped."""
    return sorted((p.name, p) for p in Path(folder).iterdir() if not p.name.startswith((".", "__MACOSX")))


def _write_atomic(path: Path, text: str):
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w", encoding="utf-8", newline="") as fh:
        fh.write(text)
    os.replace(tmp, path)


def read_gradebook(out: Path) -> dict[str, Row]:
    path = Path(out) / GRADEBOOK
    if not path.is_file():
        return {}
    with open(path, newline="", encoding="utf-8") as fh:
        rows = [Row.from_csv(rec) for rec in csv.DictReader(fh)]
    return {row_key(row.id): row for row in rows}


def write_gradebook(out: Path, rows: dict[str, Row]):
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=COLUMNS)
    writer.writeheader()
    for key in sorted(rows):
        writer.writerow(rows[key].as_csv())
    _write_atomic(Path(out) / GRADEBOOK, buf.getvalue())


def grade_one(sub_id: str, path: Path, out: Path, timeout: float, call_timeout: float = 10.0, **options) -> Row:
    """Grade one submission and write its files; never raises for a bad submission.

    `options` go to autograder.engine.grade (limits, isolation, servers, python).
    """
    start = time.monotonic()
    try:
        report = grade(path, timeout=timeout, call_timeout=call_timeout, **options)
    except SubmissionError as exc:
        report = GradeReport(submission=sub_id, status="error", error=str(exc))
    except GraderUnavailable as exc:  # the grader's failure: an error row, never a 0
        report = GradeReport(submission=sub_id, status="error", error=f"{GRADER_FAILURE}{exc}", grader_failure=True,
                             isolation=options.get("isolation", ""))
    except Exception as exc:  # the batch goes on whatever happens to one submission
        report = GradeReport(submission=sub_id, status="error", error=f"{type(exc).__name__}: {exc}")
    report.submission = sub_id
    folder = Path(out) / sub_id
    folder.mkdir(parents=True, exist_ok=True)
    _write_atomic(folder / "results.json", report.render("gradescope") + "\n")
    _write_atomic(folder / "feedback.md", to_markdown(report))
    _write_atomic(folder / "feedback.html", to_html(report))
    modules = {m: earned for m, (earned, _) in report.modules().items()}
    error = report.error.splitlines()[0] if report.error else ""
    total = None if report.status == "error" else report.score
    return Row(sub_id, total, modules, report.status, time.monotonic() - start, error, report.isolation)


def grade_all(folder: Path, out: Path, *, jobs: int | None = None, force: bool = False, timeout: float = 300.0,
              call_timeout: float = 10.0, progress=None, warm: bool = True, **options) -> dict[str, Row]:
    """Grade every submission of `folder` into `out`; return id -> Row for all of them.

    Submissions already in OUT/gradebook.csv with status "graded" are skipped
    unless `force`; those that timed out or could not be graded are tried
    again. `progress(row)` is called after each graded submission. With
    `warm` (the default), two fork servers import torch once for the whole
    run (autograder.engine.WarmServers); where they cannot start, each
    grading starts cold. `options` go to autograder.engine.grade.
    """
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    rows = {} if force else read_gradebook(out)
    todo = [(i, p) for i, p in discover(folder) if force or rows.get(row_key(i)) is None
            or rows[row_key(i)].status != "graded" or not (out / i / "results.json").is_file()]
    jobs = jobs or os.cpu_count() or 1
    with ExitStack() as stack:
        if warm and todo:
            try:
                options["servers"] = stack.enter_context(WarmServers(python=options.get("python")))
            except (OSError, RuntimeError):
                pass  # cold gradings: slower, same results
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            futures = [pool.submit(grade_one, i, p, out, timeout, call_timeout, **options) for i, p in todo]
            for future in as_completed(futures):
                row = future.result()
                rows[row_key(row.id)] = row
                write_gradebook(out, rows)
                if progress:
                    progress(row)
    if not todo:
        write_gradebook(out, rows)
    return rows
