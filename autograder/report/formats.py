"""Every format a grading is shown in, by name: the one registry that the CLI, grade-all and the tests use.

`render(report, "html")` is a GradeReport in that format. The report model
(autograder.report.model) knows none of them, so the imports run one way: formats
-> model, html, ci -> model.
"""
from __future__ import annotations

import json

from autograder.report import ci, html
from autograder.report.model import GradeReport

#: name -> function(report) -> str, in the order `--help` lists them
FORMATS = {
    "text": GradeReport.to_text,  # the readable report: per-module scores, every failed check, the total
    "json": lambda report: json.dumps(report.to_dict(), indent=2),  # the same data for other tools
    "gradescope": lambda report: json.dumps(report.to_gradescope(), indent=2),  # results.json for Gradescope
    "markdown": html.to_markdown,  # feedback for the student
    "html": html.to_html,  # the same, with pictures of the attention weights
    "junit": ci.to_junit,  # JUnit XML for CI test reports
    "classroom": ci.to_classroom,  # GitHub Classroom's grading reporter
}


def render(report: GradeReport, fmt: str) -> str:
    """`report` in the format named `fmt` (a key of FORMATS); ValueError for any other name."""
    try:
        show = FORMATS[fmt]
    except KeyError:
        raise ValueError(f"unknown format {fmt!r}: expected one of {', '.join(FORMATS)}") from None
    return show(report)
