"""Bring the hidden graders' scores into an nbgrader course's gradebook.

In a standard nbgrader course, `nbgrader autograde` runs the notebooks, but
the kit's hidden graders never run inside a student's kernel (where they
could be fooled). Each source notebook therefore ends with an nbgrader task
cell, `<module>-hidden-graders`, worth that module's points. After
`nbgrader autograde`, `sync_course` grades every submission with the kit's
engine and writes each module's score into that task cell's grade (as its
manual score, which nbgrader's totals and `nbgrader export` use), with the
failed checks as the cell's comment.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from autograder.engine import grade
from autograder.release import ASSIGNMENT, NOTEBOOKS, nbgrader_env


class SyncError(Exception):
    """The course folder or its gradebook is not usable."""


@dataclass
class Synced:
    student: str
    score: float  # out of 100
    modules: dict  # module -> score written into the gradebook


def _feedback(report, module):
    failed = [t for t in report.failed() if t.module == module]
    if not failed:
        return "All hidden checks passed."
    return "\n".join(f"- {t.name} (-{t.points:g}): {t.message.splitlines()[0]}" for t in failed)


def sync_course(course: Path, assignment: str = ASSIGNMENT, students=None, *, progress=None) -> list[Synced]:
    """Grade the submissions of `assignment` and write the module scores into the gradebook."""
    from nbgrader.api import Gradebook, MissingEntry

    os.environ["PATH"] = nbgrader_env()["PATH"]  # the gradebook runs the `alembic` script
    course = Path(course)
    submitted = course / "submitted"
    db = course / "gradebook.db"
    if not db.is_file():
        raise SyncError(f"{db} does not exist: run `nbgrader generate_assignment` and `nbgrader autograde` first")
    if students is None:
        students = sorted(p.name for p in submitted.iterdir() if (p / assignment).is_dir()) if submitted.is_dir() else []
    results = []
    with Gradebook(f"sqlite:///{db}") as gb:
        for student in students:
            folder = submitted / student / assignment
            if not folder.is_dir():
                raise SyncError(f"no submission of {assignment} by {student} in {submitted}")
            report = grade(folder)
            written = {}
            for module, (earned, available) in report.modules().items():
                notebook = NOTEBOOKS[module].removesuffix(".ipynb")
                try:
                    nb = gb.find_submission_notebook(notebook, assignment, student)
                except MissingEntry:
                    raise SyncError(f"the gradebook has no {notebook} of {student}: run `nbgrader autograde "
                                    f"{assignment}` first") from None
                cell = f"{module}-hidden-graders"
                grades = [g for g in nb.grades if g.name == cell]
                if not grades:
                    raise SyncError(f"{notebook} has no task cell {cell} in the gradebook: was it released from "
                                    "the kit's assignments/ notebooks?")
                target = grades[0]
                score = round(target.max_score * earned / available, 2) if available else 0.0
                target.manual_score = score
                target.needs_manual_grade = False
                for comment in nb.comments:
                    if comment.name == cell:
                        comment.manual_comment = _feedback(report, module)
                written[module] = score
            gb.db.commit()
            results.append(Synced(student, report.score, written))
            if progress:
                progress(student, report)
    return results
