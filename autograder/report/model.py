"""The outcome of grading one submission, and its three formats (text, json, gradescope).

Also the one place where what a student can put into a report is made safe to
show: `safe_text` / `safe_line` for every renderer, `csv_cell` for every CSV
the kit writes.
"""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field, fields
from decimal import Decimal

from autograder import LEVEL_HELP, MODULES, NAMESPACES_REMEDY
from autograder.scoring import NOT_HANDED_IN, fmt
from autograder.scoring import figures as _figures

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


# What the student's code printed is shown at its end, at most this many characters, in every format (the
# documentation's promise: docs/security/index.md). The sandbox keeps as much (sandbox.process.LOG_TAIL), but the
# report cuts it again, whatever came in: a report read back from JSON (`grader_cli.py render`) may hold any length.
PRINTED_TAIL = 1500
PRINTED_TITLE = f"Printed output (the last {PRINTED_TAIL} characters at most)"


# -- one message per cause, the cause first --------------------------------------------------------------
# A fault often fails several checks with one message: a crash inside merge_heads fails every check that runs
# the module, the same traceback each time; a fault inherited by a module is the same note under each of its
# checks. Each format shows the cause once, first, and the checks it failed under it: the "Likely bug" line that
# names the fix (else the message's first line: the error, the note), then what came back (the rest of the
# message), then the checks, each with what it cost. On a phone the fix is then on the first screen, not after a
# dozen headings of checks. A check of its own with no "Likely bug" line is shown as before: its name, then its
# message. A module whose every check failed because nothing in it is written yet is one line.
_FRAME = re.compile(r'\s*File "')
NOT_STARTED = "not started: every function still raises NotImplementedError"
LIKELY = "Likely bug: "


def cause(message: str) -> str:
    """What the messages of checks that fail for one reason share: an error's own text and the line that raised
    it (the call that met it, and the frames that led there, differ from check to check: a crash inside
    merge_heads is one cause, met in the heads checks and again through the MHA), else the "Likely bug" lines,
    else the whole message."""
    lines = str(message).splitlines()
    frames = [i for i, line in enumerate(lines) if _FRAME.match(line)]
    if frames:
        error = next((line.split(" raised ", 1)[1] for line in reversed(lines[:frames[0]]) if " raised " in line), "")
        return "\n".join([error, *(line.strip() for line in lines[frames[-1]:])])
    likely = [line for line in lines if line.startswith(LIKELY)]
    return "\n".join(likely) if likely else str(message).strip()


def fix_first(message: str) -> str:
    """`message` with its "Likely bug" lines first, then the rest in its order (what was expected and what came
    back, a traceback): what one check shows where the format has no room for a heading (Gradescope's output of
    a check, JUnit's failure, Classroom's message). A message without such a line is returned as it is."""
    lines = str(message).splitlines()
    likely = [line for line in lines if line.startswith(LIKELY)]
    return "\n".join([*likely, *(line for line in lines if not line.startswith(LIKELY))]) if likely else message


def not_started(tests) -> list[str]:
    """The modules of `tests` (one report's) whose every check failed on a NotImplementedError: not started."""
    by_module: dict[str, list] = {}
    for t in tests:
        if t.status != "skipped":
            by_module.setdefault(t.module, []).append(t)
    return [m for m, ts in by_module.items()
            if all(t.status == "failed" and "NotImplementedError" in t.message for t in ts)]


@dataclass
class Entry:
    """One entry of a listing of checks: the checks of one cause and their message, or a module not started."""

    tests: list  # the checks it stands for: one, or every check of a module not started
    message: str  # what to show for them (may be "")
    module: str = ""  # set for a module not started

    @property
    def headed(self) -> bool:
        """Whether the cause heads the entry, the checks under it: when the message names a likely bug, or is
        shared by several checks. Else (one check, its own message) the check's name comes first."""
        return not self.module and bool(self.message) and (len(self.tests) > 1 or bool(self.fixes))

    @property
    def fixes(self) -> list[str]:
        """The message's "Likely bug" lines (each names a fix), in order."""
        return [line for line in self.message.splitlines() if line.startswith(LIKELY)]

    @property
    def heading(self) -> list[str]:
        """The cause, as the entry's heading: the "Likely bug" lines, else the message's first line."""
        return self.fixes or self.message.splitlines()[:1]

    @property
    def details(self) -> str:
        """The message less its heading: what was expected and what came back, a traceback ("" when nothing)."""
        lines = self.message.splitlines()
        rest = [line for line in lines if not line.startswith(LIKELY)] if self.fixes else lines[1:]
        return "\n".join(rest).strip("\n")

    def checks_line(self, verb: str = "fails") -> str:
        """What introduces the checks under a headed entry: "It fails this check:", "It fails these 6 checks:"."""
        return f"It {verb} this check:" if len(self.tests) == 1 else f"It {verb} these {len(self.tests)} checks:"


def entries(tests, everything=None) -> list[Entry]:
    """`tests` as a listing shows them: one entry per module not started (judged on `everything`, the report's
    checks, when `tests` are some of them), then one entry per cause: the checks that share a message (the same
    cause) with that message once (the first check's); first the causes whose message names a likely bug (a fix),
    then the others, each in the order the first of its checks ran."""
    skip = set(not_started(tests if everything is None else everything))
    out = [Entry([t for t in tests if t.module == m], NOT_STARTED, module=m) for m in dict.fromkeys(
        t.module for t in tests) if m in skip]
    groups: dict[object, list] = {}
    for t in tests:
        if t.module not in skip:
            groups.setdefault(cause(t.message) if t.message else id(t), []).append(t)
    causes = [Entry(group, group[0].message.rstrip("\n")) for group in groups.values()]
    return out + sorted(causes, key=lambda e: not e.fixes)  # the causes that name a fix first, else as they ran


def _listing(title, tests, everything, cost=None, verb="fails"):
    """Text report lines for `tests` under `title` (`entries`): for each cause, the cause first (its "Likely bug"
    lines, else its message's first line), the rest of its message indented under it, then the checks it
    `verb` (each with what it cost, `cost(t)`); a check of its own, its name, then its message. [] when there is
    no check."""
    if not tests:
        return []
    lines = ["", f"{title} ({len(tests)}):"]
    for e in entries(tests, everything):
        if e.module:
            lost = f"  (-{fmt(sum(cost(t) for t in e.tests))})" if cost else ""
            lines.append(f"  [{e.module}] {e.message} ({len(e.tests)} checks){lost}")
            continue
        check = (lambda t, indent: f"{indent}[{t.module}] {safe_line(t.name)}" + (f"  (-{fmt(cost(t))})" if cost
                                                                                 else ""))
        if e.headed:
            lines += [f"  {safe_line(line)}" for line in e.heading]
            if e.details:
                lines.append("      " + safe_text(e.details, "      "))
            lost = f" (-{fmt(sum(cost(t) for t in e.tests))} in all)" if cost and len(e.tests) > 1 else ""
            lines.append(f"    {e.checks_line(verb)[:-1]}{lost}:")
            lines += [check(t, "      ") for t in e.tests]
            continue
        lines += [check(t, "  ") for t in e.tests]
        if e.message:
            lines.append("      " + safe_text(e.message, "      "))
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

    @classmethod
    def from_dict(cls, data: dict) -> TestResult:
        """The TestResult a `to_dict()` entry of "tests" (or the graders' results file) was made from: derived
        keys (score, max_score, tags) are recomputed, keys a newer TestResult does not know are ignored."""
        known = _field_names(cls)
        return cls(**{k: v for k, v in data.items() if k in known})


def _field_names(cls) -> set[str]:
    return {f.name for f in fields(cls)}


# What a grading can come to, in every format (the gradebook's status column, JSON's status, Gradescope's
# extra_data): "graded", a score; "empty", no student work found (the untouched template, an empty folder, a
# zip that cannot be read), 0 with what was looked for; "timeout" and "error", the grading did not complete
# (the grader failed, or ran out of time): never a score.
STATUSES = ("graded", "empty", "timeout", "error")
AUTOGRADER_FAILURE = "Autograder failure, not a grade"  # how Gradescope's output begins when the grader failed
NOT_THE_STUDENTS = ("This is not a problem with the submission: the autograder could not run here. The instructor "
                    "sees the cause in the autograder's log.")


@dataclass
class GradeReport:
    submission: str
    tests: list[TestResult] = field(default_factory=list)
    status: str = "graded"  # graded | empty | timeout | error (STATUSES)
    error: str = ""  # why, for every status but "graded" (for "empty": what was looked for and not found)
    execution_time: float = 0.0
    student_output: str = ""
    timings: dict = field(default_factory=dict)
    isolation: str = ""  # how the student process was confined: "namespaces", "landlock" or "none"
    grader_failure: bool = False  # the grader could not run student code (status "error"): no score at all
    notes: list = field(default_factory=list)  # files of the submission not graded, and why (submission.intake)
    missing: dict = field(default_factory=dict)  # {module not handed in: where its code goes}, said once
    grader_peak_mib: float = 0.0  # the grader process's peak resident memory (what the submission cost it)
    # the course file that shaped the grading (autograder.course.Course.report: its file name, SHA-256 and parts
    # with their worths); {} for the kit as it is, out of 100
    course: dict = field(default_factory=dict)

    @property
    def earned(self):
        return sum(t.score for t in self.tests)

    @property
    def available(self):
        return sum(t.max_score for t in self.tests)

    @property
    def has_score(self):
        """Whether this grading gives a score: "graded", and "empty" (0, nothing to grade); "timeout" and
        "error" never do."""
        return self.status in ("graded", "empty")

    def figures(self):
        """Every figure the formats show, on the scale of 100, rounded once (autograder.scoring).

        Computed again only when what they depend on changed (each check's module, points, status and
        message): a format asks for them once per check it shows, and a report has about 45 checks."""
        key = tuple((t.module, t.points, t.status, t.message) for t in self.tests)
        cached = self.__dict__.get("_figures_of")
        if cached is None or cached[0] != key:
            cached = self.__dict__["_figures_of"] = (key, _figures(self.tests, self.course.get("parts") or None))
        return cached[1]

    @property
    def out_of(self):
        """What the total is out of: 100, or the sum of the course file's parts."""
        parts = self.course.get("parts") if self.course else None
        if not parts:
            return 100
        total = sum(Decimal(str(w)) for w in parts.values())
        return int(total) if total == total.to_integral_value() else float(total)

    def course_line(self):
        """Which course file shaped this grading, in one line ("" for the kit as it is)."""
        if not self.course:
            return ""
        return (f"Course file: {safe_line(self.course.get('file', ''))} (sha256 {safe_line(self.course.get('sha256', ''))}"
                f"; out of {fmt(self.out_of)})")

    @property
    def score(self):
        """Out of 100: the sum of the module figures (autograder.scoring); 0.0 when there is no score (see
        `has_score`)."""
        return float(self.figures().total) if self.has_score else 0.0

    def modules(self):
        """module -> (figure, maximum) as floats, in the contract's order, on the scale of 100 or of the course
        file (a module not graded here: (0.0, 0.0))."""
        known = self.course.get("parts") or MODULES
        return {m: (float(f.score), float(f.max_score)) if f.graded else (0.0, 0.0)
                for m, f in self.figures().modules.items() if m in known}

    def check_figures(self, test):
        """(score, max_score) of one of this report's checks as every format shows it (Decimals)."""
        index = next(i for i, t in enumerate(self.tests) if t is test)
        return self.figures().checks[index]

    def failed(self):
        return [t for t in self.tests if t.status == "failed"]

    def to_fix(self):
        """The failed checks a report lists one by one: not those of a module not handed in, which say only
        NOT_HANDED_IN (`missing_lines` names those modules once)."""
        return [t for t in self.failed() if not (t.module in self.missing and t.message == NOT_HANDED_IN)]

    def missing_lines(self):
        """The modules not handed in, once: a heading, then each with where its code goes ([] when none, or
        when the grading found nothing to grade: its reason says it)."""
        if not self.missing or self.status != "graded":
            return []
        return [f"Not handed in ({len(self.missing)}):", *(f"  {safe_line(why)}" for why in self.missing.values())]

    def skipped(self):
        return [t for t in self.tests if t.status == "skipped"]

    def noted(self):
        """Checks that passed with something to say (e.g. that they inherit a fault graded elsewhere)."""
        return [t for t in self.tests if t.status == "passed" and t.message]

    def printed(self):
        """The end of what the student's code printed, raw (each renderer escapes it): at most PRINTED_TAIL
        characters, blank lines around it dropped; "" when it printed nothing to show. Cutting what is
        already cut changes nothing, so a report read back from JSON renders the same."""
        return str(self.student_output or "")[-PRINTED_TAIL:].rstrip().lstrip("\r\n")

    # -- formats -------------------------------------------------------------
    @classmethod
    def from_dict(cls, data: dict) -> GradeReport:
        """The GradeReport that `report.to_dict()` (`--format json`) was made from, so that one grading can be
        rendered in every format. Derived keys (score, max_score, tags, modules, ...) are recomputed, not read;
        keys that a newer TestResult or GradeReport does not know are ignored."""
        known = _field_names(cls) - {"tests"}
        report = cls(**{k: v for k, v in data.items() if k in known})
        report.tests = [TestResult.from_dict(t) for t in data.get("tests", [])]
        return report

    def to_dict(self):
        fig = self.figures()
        number = (lambda d: None if d is None else float(d))
        return {
            "submission": self.submission,
            "status": self.status,
            "error": self.error,
            "score": float(fig.total) if self.has_score else None,
            "max_score": self.out_of,
            "not_graded": {"checks": fig.skipped_checks, "points": float(fig.skipped_points),
                           "note": fig.skipped_note()},
            "execution_time": round(self.execution_time, 3),
            "modules": {m: {"score": number(f.score), "max_score": number(f.max_score), "graded": f.graded}
                        for m, f in fig.modules.items()},
            "tests": [{**asdict(t), "score": float(s), "max_score": float(mx), "tags": t.tags}
                      for t, (s, mx) in zip(self.tests, fig.checks)],
            "timings": self.timings,
            "isolation": self.isolation,
            "grader_failure": self.grader_failure,
            "notes": self.notes,
            "missing": self.missing,
            "grader_peak_mib": self.grader_peak_mib,
            "student_output": self.printed(),
            **({"course": self.course} if self.course else {}),
        }

    def to_gradescope(self):
        """results.json as in Gradescope's autograder specification.

        Gradescope renders `output` and test names in the format the file
        names (text, html, simple_format, md or ansi): here always "text", so
        that a student's message shows as the characters it holds, never as
        markup or colours, and its control characters are escaped.
        """
        fig = self.figures()
        tests = []
        for number, (t, (score, max_score)) in enumerate(zip(self.tests, fig.checks), 1):
            output = "Passed." if t.status == "passed" else safe_text(fix_first(t.message))
            if t.status == "passed" and t.message:
                output = f"Passed. {safe_text(t.message)}"
            if t.status == "skipped":
                output = (f"Not graded here: {safe_text(t.message)}; its {t.points:g} points count as the other "
                          f"checks of {t.module}")
            tests.append({
                "name": safe_line(f"{t.module}: {t.name}"),
                "number": str(number),
                "score": float(score),  # the checks add up to the top-level score exactly (autograder.scoring)
                "max_score": float(max_score),
                "status": "failed" if t.status == "failed" else "passed",
                "output": output,
                "tags": t.tags,
                "visibility": "visible",
            })
        result = {"score": float(fig.total) if self.has_score else 0.0,
                  "execution_time": round(self.execution_time, 3),
                  "output": "\n".join(line for line in (self.summary_line(), self.isolation_line(),
                                                         self.course_line()) if line), "tests": tests,
                  "visibility": "visible", "stdout_visibility": "hidden",
                  "output_format": "text", "test_output_format": "text", "test_name_format": "text",
                  "extra_data": {"status": self.status}}
        if self.notes:
            result["output"] += "\nFiles not graded:\n" + "\n".join(f"  {safe_line(n)}" for n in self.notes)
        if self.missing_lines():
            result["output"] += "\n" + "\n".join(self.missing_lines())
        causes = self.causes_lines() if self.status == "graded" else []
        if causes:
            result["output"] += "\n\n" + "\n".join(causes)
        if self.grader_failure:  # run_autograder exits non-zero too: Gradescope shows a failure, not this 0
            result["output"] = (f"{AUTOGRADER_FAILURE}: {safe_text(self.error)}\n{NOT_THE_STUDENTS}")
        elif self.status == "empty":
            result["output"] = f"Nothing to grade: {safe_text(self.error)}\n{self.summary_line()}"
        elif self.status != "graded":
            result["output"] = f"{self.summary_line()}\n{safe_text(self.error)}"
        printed = self.printed()
        if printed and not self.grader_failure:  # indented, as in the text report: no line of it is the grader's
            result["output"] += f"\n\n{PRINTED_TITLE}:\n    " + safe_text(printed, "    ")
        return result

    def causes_lines(self):
        """What to fix, cause by cause, for a format that shows each check's message with the check (Gradescope):
        each cause that names a likely bug or fails several checks, first, then the checks it fails, each with
        what it cost; [] when there is none. Each check's own message then starts with the same cause
        (`fix_first`)."""
        cost = {id(t): mx for t, (_, mx) in zip(self.tests, self.figures().checks)}
        headed = [e for e in entries(self.to_fix(), self.tests) if e.headed]
        if not headed:
            return []
        lines = ["What to fix (1 cause; under it, the checks it fails):" if len(headed) == 1 else
                 f"What to fix ({len(headed)} causes; under each, the checks it fails):"]
        for e in headed:
            lines += [f"  {safe_line(line)}" for line in e.heading]
            lines += [f"      {t.module}: {safe_line(t.name)}  (-{fmt(cost[id(t)])})" for t in e.tests]
        return lines

    def summary_line(self):
        """The total in one line, as every format states it, with the points not graded here and how they
        count; "no score" when the grading did not complete."""
        if self.grader_failure:
            return "Total: no score (the grader could not run student code here: not the submission's fault)"
        if not self.has_score:
            return f"Total: no score (the grading did not complete: {self.status})"
        fig = self.figures()
        if self.status == "empty":
            return f"Total: {fmt(fig.total)}/{fmt(self.out_of)} (nothing to grade: no student work found)"
        note = fig.skipped_note()
        return f"Total: {self.handed_in_part(fig)}{fmt(fig.total)}/{fmt(self.out_of)}" + (f" ({note})" if note else "")

    def handed_in_part(self, fig):
        """"8/8 for the part handed in (masks), " when some modules were not handed in (a single notebook graded
        alone): the figure of what was handed in comes first, out of its own maximum, then the total out of 100
        ("" when every module was handed in, or none was)."""
        handed = [m for m, f in fig.modules.items() if m not in self.missing and f.graded]
        if not self.missing or not handed or self.status != "graded":
            return ""
        earned = sum((fig.modules[m].score for m in handed), Decimal(0))
        top = sum((fig.modules[m].max_score for m in handed), Decimal(0))
        part = "the part" if len(handed) == 1 else "the parts"
        return f"{fmt(earned)}/{fmt(top)} for {part} handed in ({', '.join(handed)}), "

    def to_text(self, color=False):
        """The readable report, for a terminal. Every student-derived string goes through safe_text or
        safe_line, indented: only the grader's own lines start at column 0 (Total, Failed checks...)."""
        lines = [f"Grading {safe_line(self.submission)}"]
        if self.isolation:
            lines.append(self.isolation_line())
        if self.course:
            lines.append(self.course_line())
        if self.grader_failure:
            return "\n".join([*lines, f"  GRADER FAILURE (no score): {safe_text(self.error, '      ')}"])
        if self.status != "graded":
            label = "NOTHING TO GRADE" if self.status == "empty" else self.status.upper()
            lines.append(f"  {label}: {safe_text(self.error, '      ')}")
        if not self.has_score:  # a grading that did not complete shows no figure at all
            return "\n".join([*lines, "", self.summary_line()])
        fig = self.figures()
        if self.tests:
            lines.append("")
            width = max(len(m) for m in fig.modules)
            for m, f in fig.modules.items():
                if not f.graded:
                    lines.append(f"  {m:<{width}}  not graded here")
                    continue
                mark = "ok" if f.score == f.max_score else "not handed in" if m in self.missing else "  "
                lines.append(f"  {m:<{width}}  {fmt(f.score):>5} / {fmt(f.max_score):<5} {mark}")
        if self.missing_lines():
            lines += ["", *self.missing_lines()]
        if self.notes:
            lines += ["", f"Files not graded ({len(self.notes)}):", *(f"  {safe_line(n)}" for n in self.notes)]
        cost = {id(t): mx for t, (_, mx) in zip(self.tests, fig.checks)}
        if self.status != "empty":  # nothing to grade: the reason above says it, not every check again
            lines += _listing("Failed checks", self.to_fix(), self.tests, lambda t: cost[id(t)])
        lines += _listing("Passed, with a note", self.noted(), self.tests, verb="concerns")
        skipped = self.skipped()
        if skipped:
            pts = sum(t.points for t in skipped)
            lines += ["", f"Not graded on this machine ({len(skipped)} checks, {pts:g} points): "
                      + "; ".join(sorted({safe_line(t.message) for t in skipped}))]
        printed = self.printed()
        if printed:
            lines += ["", f"{PRINTED_TITLE}:", "      " + safe_text(printed, "      ")]
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
                "--require-isolation LEVEL refuses to grade below a level. For the namespaces level: "
                f"{NAMESPACES_REMEDY}.")
