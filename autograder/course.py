"""The course file: how an instructor shapes the assignment, read once, the same way by every command.

`grade`, `grade-all`, `merge`, `gradescope-zip`, `release` and `nbgrader-sync` take `--course FILE`, a TOML
file, and read it here (`load`), before anything is graded or written. Its tables:

    [parts]            # required: the parts handed out, and what each is worth (a part not listed is not);
                       # any of autograder.PARTS, an optional one too (handed out only where listed here)
    attention = 23
    heads = 15
    masks = 16         # each masks check's points scaled by 16/8: every check doubles
    mha = 40

    [speed]            # optional: the thresholds of the MHA speed checks (autograder/graders/timing.py)
    min_speedup = 4.0  # the fused MHA at least this many times faster than the reference stacked module
    max_slowdown = 4.0 # at most this many times slower than the reference fused module
    max_growth = 4.0   # its time grows with the head count at most this many times as the reference's
    kv_min_speedup = 3.0  # the optional part kvcache: its cached decoding at least this many times faster than the
                          # reference's full passes (parts/kvcache/test_kvcache.py; nothing where kvcache is not
                          # handed out, as min_speedup where mha is not)

    [time_limits]      # optional: seconds (the command line's --call-timeout, --submission-timeout win)
    call_seconds = 10
    submission_seconds = 600

    [cuda]             # optional: whether the checks that need a GPU count (default true)
    counts = true

The total is the sum of the parts' worths; each check of a part is worth its graders' points times the part's
worth over the part's worth in the kit (the sum of its graders' `@points` markers: the graders' plugin scales
them as it records each check, autograder/grade/plugin.py, and the release writes the same from
autograder.release.course_points). A check
that needs CUDA, where CUDA checks do not count, is not run; its points count as the other checks of its part,
as on a machine with no GPU.

Anything the kit does not know is refused with `CourseError`, whose message names the key and the file: a
misspelt table or key (with the nearest known name), a part that is not one of the kit's, a worth or a
threshold that is not a positive number, a value of the wrong type. No course file (`None`): the kit as it is
without one, every figure, file and column as before.

Every report graded under a course file names it with its SHA-256 (`Course.sha256`), as `--version` names the
graders' checksum, and so does the class page; a class run's fingerprint holds it, so a changed file grades the
class again.
"""
from __future__ import annotations

import difflib
import hashlib
import sys
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path

from autograder import PARTS

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the backport (requirements.txt)
    import tomli as tomllib

#: The tables of a course file and their keys: key -> (type, what it must be), in the order the docs give them.
SPEED = {"min_speedup": "MIN_SPEEDUP", "max_slowdown": "MAX_SLOWDOWN", "max_growth": "GROWTH_LIMIT"}  # -> timing.*
#: [speed] keys of a part's own threshold, kept in its graders (parts/<part>/test_<part>.py): key -> (part, name);
#: the graders' plugin sets it there before the part's test runs, which reads it as it runs.
PART_SPEED = {"kv_min_speedup": ("kvcache", "MIN_SPEEDUP")}
SPEED_KEYS = (*SPEED, *PART_SPEED)
TIME_LIMITS = ("call_seconds", "submission_seconds")
TABLES = ("parts", "speed", "time_limits", "cuda")


class CourseError(ValueError):
    """A course file that cannot be used: its message names the file and the key."""


@dataclass(frozen=True)
class Course:
    """A course file, read and checked (`load`)."""

    file: str  # its name, as reports show it (never a path of this machine)
    sha256: str  # of its bytes
    parts: dict  # part -> worth, in the kit's order of parts
    speed: dict = field(default_factory=dict)  # key of SPEED or PART_SPEED -> threshold, those given
    time_limits: dict = field(default_factory=dict)  # key of TIME_LIMITS -> seconds, those given
    cuda_counts: bool = True
    text: bytes = b""  # the file itself (embedded in the Gradescope zip)

    @property
    def total(self):
        """What the assignment is out of: the sum of the parts' worths."""
        return _number(sum(Decimal(str(w)) for w in self.parts.values()))

    def grading(self) -> dict:
        """What the graders' process is told of the course (autograder.grade.spec.GradingSpec.course): the parts
        and their worths (the plugin scales each check's points by worth / the sum of its part's markers), the
        speed thresholds, whether CUDA checks count."""
        return {"parts": dict(self.parts), "speed": dict(self.speed), "cuda_counts": self.cuda_counts}

    def report(self) -> dict:
        """What a report records of the course (autograder.report.model.GradeReport.course)."""
        return {"file": self.file, "sha256": self.sha256, "parts": dict(self.parts)}

    def graded_by(self) -> dict:
        """What a class run's reports record of the course (fingerprints.versions: strings, shown on the class page)."""
        return {"course": self.file, "course_sha256": self.sha256, "course_total": str(self.total)}

    def settings(self) -> dict:
        """What a class run's fingerprint and a shard's manifest hold of the course."""
        return {"course_sha256": self.sha256}


def _number(d: Decimal):
    return int(d) if d == d.to_integral_value() else float(d)


def _where(path, table, key=None):
    return f"{path}: [{table}]" + (f" {key}" if key is not None else "")


def _unknown(what, name, known):
    near = difflib.get_close_matches(str(name), list(known), n=1)
    hint = f" (did you mean {near[0]!r}?)" if near else ""
    return f"{what} {name!r} is not one the kit knows{hint}; known: {', '.join(known)}"


def _positive(value, where, two_decimals=False):
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise CourseError(f"{where} must be a number, got {type(value).__name__} {value!r}")
    if not value > 0 or value != value or value == float("inf"):
        raise CourseError(f"{where} must be a positive number, got {value!r}")
    if two_decimals and Decimal(str(value)).as_tuple().exponent < -2:
        raise CourseError(f"{where} must have at most two decimals (points are kept to the cent), got {value!r}")
    return value


def _table(data, name, path):
    value = data.get(name, {})
    if not isinstance(value, dict):
        raise CourseError(f"{path}: {name} must be a table ([{name}]), got {type(value).__name__} {value!r}")
    return value


def parse(data: bytes, name: str = "course.toml") -> Course:
    """The Course of a course file's bytes; CourseError naming `name` and the key when it cannot be used."""
    try:
        doc = tomllib.loads(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise CourseError(f"{name}: not UTF-8 text ({exc})") from None
    except tomllib.TOMLDecodeError as exc:
        raise CourseError(f"{name}: not valid TOML: {exc}") from None
    for key in doc:
        if key not in TABLES:
            raise CourseError(f"{name}: " + _unknown("table", key, TABLES))
    if "parts" not in doc:
        raise CourseError(f"{name}: no [parts] table: list the parts handed out and what each is worth "
                          f"(the kit's parts: {', '.join(PARTS)})")
    parts_in = _table(doc, "parts", name)
    if not parts_in:
        raise CourseError(f"{name}: [parts] lists no part: list at least one of {', '.join(PARTS)}")
    for key, value in parts_in.items():
        if key not in PARTS:
            raise CourseError(f"{name}: [parts] " + _unknown("part", key, PARTS))
        _positive(value, _where(name, "parts", key), two_decimals=True)
    parts = {m: parts_in[m] for m in PARTS if m in parts_in}  # the kit's order, whatever the file's
    speed = _table(doc, "speed", name)
    for key, value in speed.items():
        if key not in SPEED_KEYS:
            raise CourseError(f"{name}: [speed] " + _unknown("key", key, SPEED_KEYS))
        _positive(value, _where(name, "speed", key))
    limits = _table(doc, "time_limits", name)
    for key, value in limits.items():
        if key not in TIME_LIMITS:
            raise CourseError(f"{name}: [time_limits] " + _unknown("key", key, TIME_LIMITS))
        _positive(value, _where(name, "time_limits", key))
    cuda = _table(doc, "cuda", name)
    for key, value in cuda.items():
        if key != "counts":
            raise CourseError(f"{name}: [cuda] " + _unknown("key", key, ("counts",)))
        if not isinstance(value, bool):
            raise CourseError(f"{_where(name, 'cuda', key)} must be true or false, got {type(value).__name__} "
                              f"{value!r}")
    return Course(file=name, sha256=hashlib.sha256(data).hexdigest(), parts=parts, speed=dict(speed),
                  time_limits=dict(limits), cuda_counts=cuda.get("counts", True), text=bytes(data))


def load(path) -> Course | None:
    """The course file at `path` (None: no course file, the kit as it is). CourseError when it cannot be read
    or used, naming the file and the key."""
    if path is None:
        return None
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise CourseError(f"{path}: cannot be read: {exc.strerror or exc}") from None
    return parse(data, path.name)
