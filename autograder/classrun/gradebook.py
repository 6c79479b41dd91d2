"""A class run's gradebook and OUT's names: OUT/gradebook.csv, a row per submission, and where each
submission's files go.

A row (`Row`) holds a submission's total and figures per part, its status, how it was confined, how long it took,
the first line of what went wrong, and its fingerprint (autograder.classrun.fingerprints). A submission's name is
the student's to choose: its string cells go through autograder.report.model.csv_cell (control characters
escaped, a cell that a spreadsheet would take for a formula made text), and a row is found again by `row_key`,
the id as it reads back from the gradebook. The gradebook is rewritten whole and atomically (write_atomic).
"""
from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from pathlib import Path

from autograder import MODULES, PARTS
from autograder.files import SHARED, write_atomic
from autograder.report.model import GradeReport, csv_cell, csv_value, safe_line
from autograder.scoring import fmt

GRADEBOOK = "gradebook.csv"
MANIFEST = "shard.json"  # a shard's record of what it was assigned and what graded it (autograder.classrun.shards)
CLASS_PAGE, CLASS_CSV = "class.html", "class.csv"  # the class at a glance, from the reports (classrun/classpage.py)
GRADER_FAILURE = "the grader could not run student code: "  # how the error of such a row begins
DONE = ("graded", "empty")  # rows a second run keeps while their fingerprint holds; the others are graded again
COLUMNS = ["id", "total", *MODULES, "status", "isolation", "grading_time_s", "error", "fingerprint"]


def columns(parts=MODULES) -> list[str]:
    """The gradebook's columns: COLUMNS, with a column for each of `parts` (a course file's parts; the kit's by
    default) in place of the five modules'."""
    return ["id", "total", *parts, "status", "isolation", "grading_time_s", "error", "fingerprint"]


def parts_of(rows) -> tuple:
    """The parts that the rows were graded on, in the kit's order (autograder.PARTS): those of their figures, an
    optional part a course file handed out included; the kit's five where no row has figures (COLUMNS as
    before)."""
    found = {m for r in rows for m in r.modules}
    return tuple(m for m in PARTS if m in found) or MODULES


@dataclass
class Row:
    id: str
    total: float | None  # None: no score (status "timeout" or "error": the grading did not complete)
    modules: dict  # module -> figure, on the same scale as the total (autograder.scoring)
    status: str  # graded | empty | timeout | error (autograder.report.model.STATUSES)
    seconds: float
    error: str = ""
    isolation: str = ""  # how student code was confined (autograder.LEVELS)
    fingerprint: str = ""  # what graded it: submission content, kit code, limits (fingerprint())

    def as_csv(self, parts=None):
        """The gradebook row: strings through csv_cell, numbers as numbers (never prefixed); a column for each of
        `parts` (default: the kit's five modules)."""
        parts = parts or MODULES
        scores = {"total": "", **{m: "" for m in parts}} if self.total is None else {
            "total": fmt(self.total), **{m: fmt(self.modules.get(m) or 0) for m in parts}}
        return {"id": csv_cell(self.id), **scores, "status": csv_cell(self.status),
                "isolation": csv_cell(self.isolation), "grading_time_s": f"{self.seconds:.1f}",
                "error": csv_cell(self.error), "fingerprint": self.fingerprint}

    @classmethod
    def from_csv(cls, rec):
        number = (lambda text: float(text) if text not in ("", None) else None)
        text = (lambda key: csv_value(rec.get(key) or ""))
        return cls(text("id"), number(rec["total"]), {m: number(rec[m]) for m in PARTS if m in rec}, text("status"),
                   float(rec["grading_time_s"]), text("error"), text("isolation"), rec.get("fingerprint") or "")


def row_key(sub_id: str) -> str:
    """How the id `sub_id` reads back from the gradebook (its control characters stay escaped there): the
    key of its row in `read_gradebook` and `grade_all`, so that a second run finds every row again."""
    return safe_line(sub_id)


RESERVED = frozenset({GRADEBOOK, MANIFEST, CLASS_PAGE, CLASS_CSV})  # the kit's own files in OUT (its temporary
# files begin with ".", as hidden ids)


def output_folder(out: Path, sub_id: str) -> Path:
    """OUT/<id>/, where a submission's files go. An id that names one of the kit's own files (gradebook.csv,
    shard.json, class.html, class.csv) or ends with "~" gets a "~" appended, so that no submission's folder is
    one of those files and no two ids share a folder (the mapping is one to one; `folder_id` inverts it)."""
    return Path(out) / (sub_id + "~" if sub_id in RESERVED or sub_id.endswith("~") else sub_id)


def folder_id(name: str) -> str:
    """The id whose `output_folder` is named `name`: one "~" less where it ends with "~", else the name."""
    return name[:-1] if name.endswith("~") else name


def discover(folder: Path) -> list[tuple[str, Path]]:
    """(id, path) for every submission in `folder`, sorted by id; hidden entries are skipped."""
    return sorted((p.name, p) for p in Path(folder).iterdir() if not p.name.startswith((".", "__MACOSX")))


def read_gradebook(out: Path) -> dict[str, Row]:
    path = Path(out) / GRADEBOOK
    if not path.is_file():
        return {}
    with open(path, newline="", encoding="utf-8") as fh:
        rows = [Row.from_csv(rec) for rec in csv.DictReader(fh)]
    return {row_key(row.id): row for row in rows}


def write_gradebook(out: Path, rows: dict[str, Row]):
    buf = io.StringIO()
    parts = parts_of(rows.values())
    writer = csv.DictWriter(buf, fieldnames=columns(parts))
    writer.writeheader()
    for key in sorted(rows):
        writer.writerow(rows[key].as_csv(parts))
    write_atomic(Path(out) / GRADEBOOK, buf.getvalue(), mode=SHARED)  # the user's umask decides who reads it


def row_from_report(report: GradeReport, seconds: float = 0.0) -> Row:
    """The gradebook row of a grading: the figures every other format of it shows (autograder.scoring), no
    score at all when the grading did not complete, the first line of the reason otherwise."""
    fig = report.figures()
    known = report.course.get("parts") or MODULES
    modules = {m: float(f.score) if f.graded else 0.0 for m, f in fig.modules.items() if m in known} \
        if report.has_score else {}
    error = report.error.splitlines()[0] if report.error else ""
    total = float(fig.total) if report.has_score else None
    return Row(report.submission, total, modules, report.status, seconds, error, report.isolation)


SUMMARY = (("empty", "nothing to grade, 0"), ("timeout", "no score"), ("error", "no score"))


def status_lines(rows: dict[str, Row]) -> list[str]:
    """The summary's lines that name the ids of each status but graded (empty, timeout, error), in the gradebook's
    order: what grade-all and merge print after a run."""
    ordered = [rows[key] for key in sorted(rows)]
    lines = []
    for status, meaning in SUMMARY:
        ids = [r.id for r in ordered if r.status == status]
        if ids:
            lines.append(f"{status} ({meaning}): {', '.join(safe_line(i) for i in ids)}")
    return lines


def grader_failures(rows: dict[str, Row]) -> list[Row]:
    """The rows of submissions that the grader could not grade (status error: no score, graded again next run)."""
    return [r for r in rows.values() if r.status == "error" and r.error.startswith(GRADER_FAILURE)]
