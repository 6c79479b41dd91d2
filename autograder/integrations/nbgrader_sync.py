"""Bring the hidden graders' scores into an nbgrader course's gradebook.

In a standard nbgrader course, `nbgrader autograde` runs the notebooks, but
the kit's hidden graders never run inside a student's kernel (where they
could be fooled). Each source notebook therefore ends with an nbgrader task
cell, `<module>-hidden-graders`, worth that module's points. After
`nbgrader autograde`, `sync_course` grades every submission with the kit's
engine and writes each module's figure (autograder.scoring: the same figure
every other format shows) into that task cell's grade, as its manual score,
which nbgrader's totals and `nbgrader export` use, with the failed checks as
the cell's comment.

A score a TA set by hand in formgrader is kept: the kit knows its own by the
comment it writes with it ("Hidden graders (mha kit): 9.41/23"), and a cell
whose manual score is not the one its comment records was graded by hand.
`overwrite_manual` replaces those too. Either way, what was kept is said.

nbgrader adds the cells' scores as floats in SQL (9.41 + 15 + 4.57 + 26.67 +
4.31 comes to 59.96000000000001); the written scores are nudged by the last
binary digit where needed, so that the gradebook's total reads as the kit's.
"""
from __future__ import annotations

import math
import os
from contextlib import ExitStack
from dataclasses import dataclass, field
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

from autograder import PARTS
from autograder.grade.engine import grade
from autograder.grade.servers import LazyServers
from autograder.release import ASSIGNMENT, nbgrader_env
from autograder.scoring import fmt
from autograder.submission.notebooks import load_nbformat, notebook_name

MARKER = "Hidden graders (mha kit):"  # how the comment the kit writes begins, before the score it wrote


class SyncError(Exception):
    """The course folder, its gradebook or the assignment named is not usable, or the grader cannot run."""


@dataclass
class Synced:
    student: str
    score: float | None  # out of 100: the kit's total (None: the grading did not complete, nothing written)
    modules: dict  # module -> score written into the gradebook
    kept: dict = field(default_factory=dict)  # module -> a manual score set by hand, kept (not overwritten)
    status: str = "graded"  # the grading's status (autograder.report.model.STATUSES)
    error: str = ""
    gradebook_total: float | None = None  # the submission's total as nbgrader now computes it
    out_of: float = 100  # what `score` is out of: 100, or the total of the course file graded under


def _comment(report, module, score, max_score):
    head = f"{MARKER} {fmt(score)}/{fmt(max_score)}"
    if report.status == "empty":
        return f"{head}\nNothing to grade: {report.error}"
    failed = [t for t in report.failed() if t.module == module]
    if not failed:
        return f"{head}\nAll hidden checks passed."
    cost = {id(t): mx for t, (_, mx) in zip(report.tests, report.figures().checks)}
    return "\n".join([head, *(f"- {t.name} (-{fmt(cost[id(t)])}): {(t.message.splitlines() or [''])[0]}"
                              for t in failed)])


def _written_by_kit(grade_row, comment_row) -> bool:
    """Whether the cell's manual score is the one the kit wrote (or none): else a TA set it by hand."""
    if grade_row.manual_score is None:
        return True
    text = (comment_row.manual_comment or "") if comment_row is not None else ""
    first = text.splitlines()[0] if text else ""
    if not first.startswith(MARKER):
        return False
    recorded = first[len(MARKER):].strip().split("/")[0]
    try:
        return Decimal(recorded) == Decimal(repr(float(grade_row.manual_score))).quantize(Decimal("0.01"),
                                                                                            ROUND_HALF_UP)
    except ArithmeticError:
        return False


def _exact_total(gb, assignment, student, written, want):
    """Nudge the scores just written ({grade row: value}) by a binary digit until nbgrader's total (summed in
    SQL as floats) is `want`, the sum of every cell's score as decimals; give up after a few tries."""
    if not written:
        return
    rows = sorted(written, key=lambda g: -written[g])  # the largest first: a digit there is the least visible
    for attempt in range(24):
        gb.db.commit()
        submission = gb.find_submission(assignment, student)
        gb.db.refresh(submission)
        got = submission.score
        if got == want:
            return
        row = rows[attempt % len(rows)]
        row.manual_score = math.nextafter(row.manual_score, math.inf if got < want else -math.inf)


def known_assignments(course: Path) -> list[str]:
    """The assignments the course's gradebook knows."""
    load_nbformat()  # before nbgrader imports it
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{Path(course) / 'gradebook.db'}") as gb:
        return sorted(a.name for a in gb.assignments)


def sync_course(course_dir: Path, assignment: str = ASSIGNMENT, students=None, *, overwrite_manual: bool = False,
                progress=None, **grade_options) -> list[Synced]:
    """Grade the submissions of `assignment` in the nbgrader course folder `course_dir` and write the module figures
    into its gradebook.

    Raises SyncError when the course has no gradebook, the gradebook knows no
    assignment `assignment` (the message names those it knows), a student
    has no submission or notebook, or the grader cannot run student code
    here. Scores set by hand are kept unless `overwrite_manual` (Synced.kept).
    A grading that did not complete writes nothing (Synced.status).
    `grade_options` go to autograder.grade.engine.grade (a course file, `course`, among them: the parts it
    hands out are the cells written). Unless they name
    `servers`, the gradings share two fork servers that import torch once
    (autograder.grade.servers.LazyServers, as `grade-all` does), started by
    the first grading that runs graders; cold gradings where they cannot start.
    """
    load_nbformat()  # before nbgrader imports it
    from nbgrader.api import Gradebook, MissingEntry

    from autograder.sandbox.errors import GraderUnavailable

    os.environ["PATH"] = nbgrader_env()["PATH"]  # the gradebook runs the `alembic` script
    submitted = Path(course_dir) / "submitted"
    db = Path(course_dir) / "gradebook.db"
    if not db.is_file():
        raise SyncError(f"{db} does not exist: run `nbgrader generate_assignment` and `nbgrader autograde` first")
    results = []
    with ExitStack() as stack:
        gb = stack.enter_context(Gradebook(f"sqlite:///{db}"))
        if "servers" not in grade_options:
            grade_options["servers"] = stack.enter_context(LazyServers(python=grade_options.get("python")))
        known = sorted(a.name for a in gb.assignments)
        if assignment not in known:
            raise SyncError(f"the gradebook has no assignment {assignment!r}; it knows: "
                            f"{', '.join(known) if known else 'none (run `nbgrader generate_assignment` first)'}")
        if students is None:
            students = sorted(p.name for p in submitted.iterdir()
                              if (p / assignment).is_dir()) if submitted.is_dir() else []
        for student in students:
            folder = submitted / student / assignment
            if not folder.is_dir():
                raise SyncError(f"no submission of {assignment} by {student} in {submitted}")
            try:
                report = grade(folder, **grade_options)
            except GraderUnavailable as exc:
                raise SyncError(f"the grader cannot run student code here: {exc}") from None
            if not report.has_score:  # never a score: nothing is written, the cells stay as they are
                results.append(Synced(student, None, {}, status=report.status, error=report.error))
                continue
            fig = report.figures()
            written, kept, to_fix = {}, {}, {}
            for module, figure in fig.modules.items():  # the parts handed out (a course file's: kvcache too)
                if module not in PARTS:
                    continue
                notebook = notebook_name(module).removesuffix(".ipynb")
                try:
                    nb = gb.find_submission_notebook(notebook, assignment, student)
                except MissingEntry:
                    raise SyncError(f"the gradebook has no {notebook} of {student}: run `nbgrader autograde "
                                    f"{assignment}` first") from None
                cell = f"{module}-hidden-graders"
                grades = [g for g in nb.grades if g.name == cell]
                if not grades:
                    raise SyncError(f"{notebook} has no task cell {cell} in the gradebook: was it released from "
                                    "the kit's source notebooks (`grader_cli.py release --nbgrader-source`)?")
                target = grades[0]
                comment = next((c for c in nb.comments if c.name == cell), None)
                if not overwrite_manual and not _written_by_kit(target, comment):
                    kept[module] = target.manual_score
                    continue
                cell_max = Decimal(repr(float(target.max_score)))
                if figure.graded and figure.max_score:  # the module's figure, on the cell's scale when it differs
                    score = (figure.score * cell_max / figure.max_score).quantize(Decimal("0.01"), ROUND_HALF_UP)
                else:
                    score = Decimal(0)
                target.manual_score = float(score)
                target.needs_manual_grade = False
                if comment is not None:
                    comment.manual_comment = _comment(report, module, score, cell_max)
                written[module] = float(score)
                to_fix[target] = float(score)
            gb.db.commit()
            submission = gb.find_submission(assignment, student)
            want = float(sum((Decimal(repr(float(g.score))) for nb in submission.notebooks for g in nb.grades
                              if g.score is not None), Decimal(0)))
            _exact_total(gb, assignment, student, to_fix, want)
            gb.db.commit()
            total = gb.find_submission(assignment, student)
            gb.db.refresh(total)
            results.append(Synced(student, report.score, written, kept, report.status, report.error, total.score,
                                  out_of=report.out_of))
            if progress:
                progress(student, report)
    return results
