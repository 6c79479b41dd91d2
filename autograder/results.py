"""The outcome of grading one submission, and its three formats (text, json, gradescope).

Also the one place where what a student can put into a report is made safe to
show: `safe_text` / `safe_line` for every renderer, `csv_cell` for every CSV
the kit writes.
"""
from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field

from autograder import LEVEL_HELP, MODULES

# -- student text, made safe to show -------------------------------------------------
# Every string a submission can influence (exception messages, its printed output, its file and folder
# names, hence its submission id and the errors about it) reaches an instructor's terminal, a spreadsheet,
# Gradescope, CI logs. Escape sequences in it could hide the real total (ESC[8m conceals text), retitle the
# terminal or plant a hyperlink (OSC), and a newline or CR could start a line that looks like the grader's
# own ("Total: 100/100"). So, before showing it: the C0 and C1 controls and DEL, the Unicode format
# characters (bidi overrides and isolates, zero-width characters, ...), line and paragraph separators and
# lone surrogates are written as escapes (ESC as \x1b), never deleted, so that a message still says what
# came back; tab and newline are kept where a renderer can indent what follows; accents, CJK and every
# other printable character stay as they are. The set is the Unicode categories Cc, Cf, Cs, Zl and Zp
# (tests/test_hostile_reports.py checks it against unicodedata).
_UNSAFE = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u00ad\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891\u08e2\u180e"
    "\u200b-\u200f\u2028-\u202e\u2060-\u2064\u2066-\u206f\ud800-\udfff\ufeff\ufff9-\ufffb"
    "\U000110bd\U000110cd\U00013430-\U0001343f\U0001bca0-\U0001bca3\U0001d173-\U0001d17a"
    "\U000e0001\U000e0020-\U000e007f]")
_UNSAFE_IN_LINE = re.compile(f"[\t\n]|{_UNSAFE.pattern}")
# Spreadsheets (Excel, LibreOffice, Google Sheets) evaluate a cell that starts with one of these as a
# formula: =HYPERLINK(...), +cmd|..., -2+3, @SUM(...). A leading ' makes the cell text, and the ' itself is
# not shown; a cell that starts with ' gets one more, so that reading it back is exact.
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r", "'")


_SHORT_ESCAPES = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}


def _escape(match) -> str:
    """One character as Python writes it in a string literal: \\n, \\x1b, \\u202e, \\U000e0041."""
    char = match.group()
    code = ord(char)
    if char in _SHORT_ESCAPES:
        return _SHORT_ESCAPES[char]
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def safe_text(text, continuation: str = "") -> str:
    """`text` (student-derived, maybe several lines) with its control and format characters escaped.

    Newlines and tabs are kept; CRLF counts as one newline, a lone CR is
    escaped (it would return to column 0 and overwrite the line).
    `continuation` is put before every line after the first, so that a
    renderer that indents a message indents all of it: no student line can
    start at column 0 and pass for a line of the grader's own.
    """
    text = _UNSAFE.sub(_escape, str(text).replace("\r\n", "\n"))
    return text.replace("\n", "\n" + continuation) if continuation else text


def safe_line(text) -> str:
    """`text` as one line: as `safe_text`, with newlines and tabs escaped too (ids, file names, table cells)."""
    return _UNSAFE_IN_LINE.sub(_escape, str(text))


def csv_cell(text) -> str:
    """A string cell of a CSV the kit writes: one safe line, a formula made text with a leading '.

    Only for strings: numbers (totals, scores, seconds) are written as they
    are, so that a spreadsheet still reads them as numbers.
    """
    text = safe_line(text)
    return "'" + text if text.startswith(_FORMULA_START) else text


def csv_value(cell: str) -> str:
    """What `csv_cell` was given (up to the escapes, which stay escaped): its leading ' taken off."""
    return cell[1:] if cell.startswith("'") else cell


def _listing(title, tests, suffix):
    """Text report lines for `tests` under `title`: each check's name, then its message indented ([] if none)."""
    if not tests:
        return []
    lines = ["", f"{title} ({len(tests)}):"]
    for t in tests:
        lines.append(f"  [{t.module}] {safe_line(t.name)}{suffix(t)}")
        lines.append("      " + safe_text(t.message.rstrip("\n"), "      "))
    return lines


@dataclass
class TestResult:
    id: str
    name: str
    module: str
    aspect: str
    points: float
    status: str  # passed | failed | skipped
    message: str = ""
    grader_error: bool = False
    duration: float = 0.0
    data: dict = field(default_factory=dict)  # what a grader recorded for feedback (e.g. heatmaps)

    @property
    def score(self):
        return self.points if self.status == "passed" else 0.0

    @property
    def max_score(self):
        """Skipped tests (no CUDA here) count in neither score nor max score."""
        return 0.0 if self.status == "skipped" else self.points

    @property
    def tags(self):
        return [self.module, self.aspect]


@dataclass
class GradeReport:
    submission: str
    tests: list[TestResult] = field(default_factory=list)
    status: str = "graded"  # graded | timeout | error
    error: str = ""
    execution_time: float = 0.0
    student_output: str = ""
    timings: dict = field(default_factory=dict)
    isolation: str = ""  # how the student process was confined: "namespaces", "landlock" or "none"
    grader_failure: bool = False  # the grader could not run student code (status "error"): no score at all
    notes: list = field(default_factory=list)  # files of the submission not graded, and why (autograder.intake)
    grader_peak_mib: float = 0.0  # the grader process's peak resident memory (what the submission cost it)

    @property
    def earned(self):
        return sum(t.score for t in self.tests)

    @property
    def available(self):
        return sum(t.max_score for t in self.tests)

    @property
    def score(self):
        """Out of 100: the points earned over the points that could be earned on this machine."""
        return round(100.0 * self.earned / self.available, 2) if self.available else 0.0

    def modules(self):
        """module -> (earned, available), in the contract's order."""
        out = {}
        for m in MODULES:
            tests = [t for t in self.tests if t.module == m]
            out[m] = (sum(t.score for t in tests), sum(t.max_score for t in tests))
        return out

    def failed(self):
        return [t for t in self.tests if t.status == "failed"]

    def skipped(self):
        return [t for t in self.tests if t.status == "skipped"]

    def noted(self):
        """Checks that passed with something to say (e.g. that they inherit a fault graded elsewhere)."""
        return [t for t in self.tests if t.status == "passed" and t.message]

    # -- formats -------------------------------------------------------------
    def to_dict(self):
        return {
            "submission": self.submission,
            "status": self.status,
            "error": self.error,
            "score": None if self.grader_failure else self.score,
            "earned": self.earned,
            "available": self.available,
            "execution_time": round(self.execution_time, 3),
            "modules": {m: {"score": e, "max_score": a} for m, (e, a) in self.modules().items()},
            "tests": [{**asdict(t), "score": t.score, "max_score": t.max_score, "tags": t.tags} for t in self.tests],
            "timings": self.timings,
            "isolation": self.isolation,
            "grader_failure": self.grader_failure,
            "notes": self.notes,
            "grader_peak_mib": self.grader_peak_mib,
        }

    def to_gradescope(self):
        """results.json as in Gradescope's autograder specification.

        Gradescope renders `output` and test names in the format the file
        names (text, html, simple_format, md or ansi): here always "text", so
        that a student's message shows as the characters it holds, never as
        markup or colours, and its control characters are escaped.
        """
        tests = []
        for number, t in enumerate(self.tests, 1):
            output = "Passed." if t.status == "passed" else safe_text(t.message)
            if t.status == "passed" and t.message:
                output = f"Passed. {safe_text(t.message)}"
            if t.status == "skipped":
                output = f"Not graded here: {safe_text(t.message)}"
            tests.append({
                "name": safe_line(f"{t.module}: {t.name}"),
                "number": str(number),
                "score": t.score,
                "max_score": t.max_score,
                "status": "failed" if t.status == "failed" else "passed",
                "output": output,
                "tags": t.tags,
                "visibility": "visible",
            })
        result = {"score": self.score, "execution_time": round(self.execution_time, 3),
                  "output": f"{self.summary_line()}\n{self.isolation_line()}".strip(), "tests": tests,
                  "visibility": "visible", "stdout_visibility": "hidden",
                  "output_format": "text", "test_output_format": "text", "test_name_format": "text"}
        if self.notes:
            result["output"] += "\nFiles not graded:\n" + "\n".join(f"  {safe_line(n)}" for n in self.notes)
        if self.grader_failure:  # run_autograder exits non-zero too: Gradescope shows a failure, not this 0
            result["output"] = f"Autograder failure, not a grade: {safe_text(self.error)}"
        elif self.status != "graded":
            result["output"] = f"{self.summary_line()}\n{safe_text(self.error)}"
        return result

    def summary_line(self):
        note = f" (scaled from {self.earned:g}/{self.available:g})" if self.available not in (0, 100) else ""
        return f"Total: {self.score:g}/100{note}"

    def to_text(self, color=False):
        """The readable report, for a terminal. Every student-derived string goes through safe_text or
        safe_line, indented: only the grader's own lines start at column 0 (Total, Failed checks...)."""
        lines = [f"Grading {safe_line(self.submission)}"]
        if self.isolation:
            lines.append(self.isolation_line())
        if self.grader_failure:
            return "\n".join([*lines, f"  GRADER FAILURE (no score): {safe_text(self.error, '      ')}"])
        if self.status != "graded":
            lines.append(f"  {self.status.upper()}: {safe_text(self.error, '      ')}")
        lines.append("")
        width = max(len(m) for m in MODULES)
        for m, (earned, available) in self.modules().items():
            mark = "ok" if earned == available and available else "  "
            lines.append(f"  {m:<{width}}  {earned:>5g} / {available:<5g} {mark}")
        if self.notes:
            lines += ["", f"Files not graded ({len(self.notes)}):", *(f"  {safe_line(n)}" for n in self.notes)]
        lines += _listing("Failed checks", self.failed(), lambda t: f"  (-{t.points:g})")
        lines += _listing("Passed, with a note", self.noted(), lambda t: "")
        skipped = self.skipped()
        if skipped:
            pts = sum(t.points for t in skipped)
            lines += ["", f"Not graded on this machine ({len(skipped)} checks, {pts:g} points): "
                      + "; ".join(sorted({safe_line(t.message) for t in skipped}))]
        lines += ["", self.summary_line()]
        return "\n".join(lines)

    def isolation_line(self):
        """How the student code was confined, in one line ("" when unknown)."""
        if not self.isolation:
            return ""
        return f"Isolation: {self.isolation} ({LEVEL_HELP.get(self.isolation, 'unknown level')})"

    def isolation_note(self):
        """A line for the instructor when student code ran below the namespaces level, else ""."""
        if not self.isolation or self.isolation == "namespaces":
            return ""
        return (f"Note: student code ran at the {self.isolation} isolation level, not in Linux namespaces; "
                "resource limits applied, and results are written by the grader only. "
                "--require-isolation LEVEL refuses to grade below a level.")

    def render(self, fmt):
        if fmt == "text":
            return self.to_text()
        if fmt == "json":
            return json.dumps(self.to_dict(), indent=2)
        if fmt == "gradescope":
            return json.dumps(self.to_gradescope(), indent=2)
        if fmt in ("markdown", "html"):
            from autograder import feedback

            return feedback.to_markdown(self) if fmt == "markdown" else feedback.to_html(self)
        if fmt in ("junit", "classroom"):
            from autograder import ci_formats

            return ci_formats.to_junit(self) if fmt == "junit" else ci_formats.to_classroom(self)
        raise ValueError(f"unknown format {fmt!r}")
