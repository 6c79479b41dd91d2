"""The outcome of grading one submission, and its three formats (text, json, gradescope)."""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

from autograder import LEVEL_HELP, MODULES


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
        }

    def to_gradescope(self):
        """results.json as in Gradescope's autograder specification."""
        tests = []
        for number, t in enumerate(self.tests, 1):
            output = "Passed." if t.status == "passed" else t.message
            if t.status == "skipped":
                output = f"Not graded here: {t.message}"
            tests.append({
                "name": f"{t.module}: {t.name}",
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
                  "visibility": "visible", "stdout_visibility": "hidden"}
        if self.grader_failure:  # run_autograder exits non-zero too: Gradescope shows a failure, not this 0
            result["output"] = f"Autograder failure, not a grade: {self.error}"
        elif self.status != "graded":
            result["output"] = f"{self.summary_line()}\n{self.error}"
        return result

    def summary_line(self):
        note = f" (scaled from {self.earned:g}/{self.available:g})" if self.available not in (0, 100) else ""
        return f"Total: {self.score:g}/100{note}"

    def to_text(self, color=False):
        lines = [f"Grading {self.submission}"]
        if self.isolation:
            lines.append(self.isolation_line())
        if self.grader_failure:
            return "\n".join([*lines, f"  GRADER FAILURE (no score): {self.error}"])
        if self.status != "graded":
            lines.append(f"  {self.status.upper()}: {self.error}")
        lines.append("")
        width = max(len(m) for m in MODULES)
        for m, (earned, available) in self.modules().items():
            mark = "ok" if earned == available and available else "  "
            lines.append(f"  {m:<{width}}  {earned:>5g} / {available:<5g} {mark}")
        failed = self.failed()
        if failed:
            lines += ["", f"Failed checks ({len(failed)}):"]
            for t in failed:
                lines.append(f"  [{t.module}] {t.name}  (-{t.points:g})")
                for msg_line in t.message.splitlines() or [""]:
                    lines.append(f"      {msg_line}")
        skipped = self.skipped()
        if skipped:
            pts = sum(t.points for t in skipped)
            lines += ["", f"Not graded on this machine ({len(skipped)} checks, {pts:g} points): "
                      + "; ".join(sorted({t.message for t in skipped}))]
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
