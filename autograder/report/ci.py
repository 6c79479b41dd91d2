"""Formats for CI systems: JUnit XML, and GitHub Classroom's autograding result.

`to_junit(report)`: one `<testsuite>` per module, one `<testcase>` per check,
as CI systems (GitHub Actions test reporters, GitLab, Jenkins) read it.

`to_classroom(report)`: the base64 string that a step of a GitHub Classroom
workflow publishes as its output `result` and that
`classroom-resources/autograding-grading-reporter` decodes. The reporter
(src/main.js, console-results.js, notify-classroom.js) reads:

- top level: `status` ("fail" or "error" fail the job), `max_score` (a
  runner with no max_score is ignored), `tests`;
- per test: `name`, `status` ("pass", "fail", or "error", whose `message` it
  prints), `score` (the runner's points are the sum of the tests' scores),
  `line_no` (printed when not 0), `test_code` (printed when not empty).

Classroom receives `Points <sum of scores>/<max_score>`. Scores are whole
numbers here: fractional points are summed as floats (3.0000000000000004)
and such totals are reported to be exported as 0 (github/gh-classroom#83).
So Classroom gets the kit's total rounded half up to a whole point (59.96 ->
60), apportioned to the passed checks; every other format carries the
figures of autograder.scoring to the cent.

A report read back from `--format json` is `GradeReport.from_dict(d)`
(autograder/report/model.py), beside `to_dict`.
"""
from __future__ import annotations

import base64
import json
import math
import re
import xml.etree.ElementTree as ET
from fractions import Fraction

from autograder import MODULES
from autograder.report.model import GradeReport, fix_first, safe_line, safe_text
from autograder.scoring import apportion, fmt

# The reporter receives the result through an environment variable, and Linux
# limits one environment string to 128 KiB; stay well below.
CLASSROOM_MAX_CHARS = 64_000
CLASSROOM_MESSAGE_LIMITS = (2000, 500, 120, 0)

# Characters that XML 1.0 cannot carry, even escaped (NUL, ESC, lone surrogates...).
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def _xml_text(text) -> str:
    """Text for an XML attribute or element: control characters escaped as everywhere (safe_text; CI pages
    and logs show it), then what XML still cannot carry (U+FFFE, U+FFFF)."""
    return _NOT_XML.sub(lambda m: f"\\x{ord(m.group()):02x}", safe_text(text))


def _first_line(text: str) -> str:
    lines = text.strip().splitlines()
    return lines[0] if lines else ""


def _g(x) -> str:
    return fmt(x)


def _modules_in(report: GradeReport) -> list[str]:
    present = {t.module for t in report.tests}
    return [m for m in MODULES if m in present] + sorted(present - set(MODULES))


# -- JUnit XML ----------------------------------------------------------------
def _properties(parent, items):
    props = ET.SubElement(parent, "properties")
    for name, value in items:
        ET.SubElement(props, "property", name=name, value=_xml_text(value))


def to_junit(report: GradeReport) -> str:
    """JUnit XML: one testsuite per module, one testcase per check.

    The figures are the report's (autograder.scoring), as in every format:
    each suite's `points` / `max_points` attributes and `score` /
    `max_score` properties are the module's figure and maximum, each case's
    `score` / `points` the check's, `total_score` and the root's `score` the
    total out of 100 (the modules add up to it); `not_graded` states the
    points skipped here and how they count. Skipped checks (CUDA where there
    is none) are `<skipped>`; failed checks are `<failure>` (type
    "grader-error" when the grader itself broke); a grading with nothing to
    grade adds a suite "grading" with one `<failure>` saying why, one that
    did not complete (timeout, error) one `<error>`, and then no score at all.
    """
    fig = report.figures()
    shown = {id(t): figures for t, figures in zip(report.tests, fig.checks)}
    total = _g(fig.total) if report.has_score else ""
    root = ET.Element("testsuites", name="mha-autograder")
    totals = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0, "time": 0.0}
    for module in _modules_in(report):
        tests = [t for t in report.tests if t.module == module]
        figure = fig.modules[module]
        earned, available = (figure.score, figure.max_score) if figure.graded else (0, 0)
        counts = {
            "tests": len(tests),
            "failures": sum(t.status == "failed" for t in tests),
            "errors": 0,
            "skipped": sum(t.status == "skipped" for t in tests),
            "time": sum(t.duration for t in tests),
        }
        suite = ET.SubElement(root, "testsuite", name=module,
                              **{k: (f"{v:.3f}" if k == "time" else str(v)) for k, v in counts.items()},
                              points=_g(earned), max_points=_g(available))
        for k, v in counts.items():
            totals[k] += v
        _properties(suite, [("score", _g(earned)), ("max_score", _g(available)),
                            ("total_score", total), ("total_max_score", fmt(report.out_of)),
                            ("not_graded", fig.skipped_note())])
        for t in tests:
            case = ET.SubElement(suite, "testcase", classname=f"mha.{module}", name=_xml_text(t.id),
                                 time=f"{t.duration:.3f}")
            score, points = shown[id(t)]
            _properties(case, [("description", t.name), ("aspect", t.aspect), ("points", _g(points)),
                               ("score", _g(score))])
            if t.status == "failed":
                message = fix_first(t.message) or "check failed"  # the cause first: the likely bug, if named
                failure = ET.SubElement(case, "failure", message=_xml_text(_first_line(message)),
                                        type="grader-error" if t.grader_error else "check-failed")
                failure.text = _xml_text(message)
            elif t.status == "skipped":
                ET.SubElement(case, "skipped", message=_xml_text(t.message or "skipped"))
    if report.status != "graded":
        error = report.error or report.status
        kind = "failures" if report.has_score else "errors"  # nothing to grade: the student's; else the grader's
        counts = {"failures": "0", "errors": "0", kind: "1"}
        suite = ET.SubElement(root, "testsuite", name="grading", tests="1", **counts, skipped="0",
                              time=f"{report.execution_time:.3f}")
        case = ET.SubElement(suite, "testcase", classname="mha.grading", name=report.status,
                             time=f"{report.execution_time:.3f}")
        err = ET.SubElement(case, kind[:-1], message=_xml_text(_first_line(error)), type=report.status)
        err.text = _xml_text(error)
        totals["tests"] += 1
        totals[kind] += 1
    totals["time"] = max(totals["time"], report.execution_time)  # the whole grading, when known
    for k, v in totals.items():
        root.set(k, f"{v:.3f}" if k == "time" else str(v))
    root.set("status", report.status)
    if report.has_score:  # a grading that did not complete has no score, not a 0
        root.set("score", total)
    root.set("max_score", fmt(report.out_of))
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode")


# -- GitHub Classroom ----------------------------------------------------------
def classroom_scores(report: GradeReport) -> list[int]:
    """Whole-point scores of the graded (non-skipped) checks, out of 100 in all.

    The report's total (autograder.scoring) rounded half up to a whole point
    is apportioned to the passed checks by the largest remainder of their own
    figures, so the scores add up to it; failed checks score 0.
    """
    fig = report.figures()
    graded = [(t, score) for t, (score, _) in zip(report.tests, fig.checks) if t.status != "skipped"]
    if not report.has_score:
        return [0] * len(graded)
    exact = [Fraction(str(score)) for _, score in graded]
    return apportion(exact, math.floor(Fraction(str(fig.total)) + Fraction(1, 2)))


def _classroom_payload(report: GradeReport, message_limit: int) -> dict:
    def clip(text):
        text = safe_text(text).strip()
        if len(text) <= message_limit:
            return text
        return text[:max(message_limit - 15, 0)].rstrip() + " ... (cut)" if message_limit else ""

    graded = [t for t in report.tests if t.status != "skipped"]
    tests = []
    for t, score in zip(graded, classroom_scores(report)):
        tests.append({
            "name": safe_line(f"{t.module}: {t.name}"),
            "status": "pass" if t.status == "passed" else "fail",
            "score": score,
            "message": clip(fix_first(t.message)) if t.status == "failed" else "",
            "test_code": "",
            "filename": "",
            "line_no": 0,
            "duration": int(round(t.duration * 1000)),
        })
    if report.status == "empty":  # the student's: no work found (0), and why
        status = "fail"
        tests.append({"name": "submission", "status": "fail", "score": 0,
                      "message": clip(safe_line(f"nothing to grade: {report.error}")), "test_code": "",
                      "filename": "", "line_no": 0, "duration": int(round(report.execution_time * 1000))})
    elif report.status != "graded" or not graded:
        status = "error"
        # console-results prints the message of a test whose status is "error" into the job's log, where a
        # line of its own could be a workflow command (::error::...): one line, newlines escaped
        tests.append({"name": "grading", "status": "error", "score": 0,
                      "message": clip(safe_line(f"grading {report.status}: {report.error or 'no check ran'}"))
                      or f"grading {report.status}",
                      "test_code": "", "filename": "", "line_no": 0,
                      "duration": int(round(report.execution_time * 1000))})
    else:
        status = "pass" if all(t.status == "passed" for t in graded) else "fail"
    return {"version": 1, "status": status, "max_score": report.out_of, "tests": tests}


def classroom_payload(report: GradeReport) -> dict:
    """The decoded result: messages shortened until the encoded form fits CLASSROOM_MAX_CHARS."""
    for limit in CLASSROOM_MESSAGE_LIMITS:
        payload = _classroom_payload(report, limit)
        if len(_encode(payload)) <= CLASSROOM_MAX_CHARS:
            return payload
    return payload  # only names left: 100-odd checks fit many times over


def _encode(payload: dict) -> str:
    return base64.b64encode(json.dumps(payload, separators=(",", ":")).encode("utf-8")).decode("ascii")


def to_classroom(report: GradeReport) -> str:
    """Base64 of the JSON that classroom-resources/autograding-grading-reporter decodes."""
    return _encode(classroom_payload(report))
