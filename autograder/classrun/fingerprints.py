"""What graded a row of the gradebook, so that a second class run grades again only what changed.

A row's fingerprint (`fingerprint`) hashes what intake takes of the submission (the files graded, wherever they
sit, and what was left out and why: `content_digest`), the kit's code that decides a grade (`kit_digest`: the
engine, the graders, the reference) and the settings that can change a grade (`grading_settings`: limits,
timeouts, the course file). A second run grades again every row whose fingerprint changed (a corrected file, a
new grader, other limits), and says how many. `versions` is what grades, as `--version`, the reports and the
class page say it.
"""
from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path

from autograder import __version__
from autograder.paths import KIT
from autograder.submission import intake
from autograder.submission.take import SubmissionError, taken

def content_digest(path: Path, max_unzipped: int | None = None) -> str:
    """A hash of what a grading takes of the submission at `path`: the outcome of its intake, made by the
    code a grading runs (autograder.submission.take.taken), never a walk of the raw folder.

    For a folder, a zip or a notebook, that outcome is: the names and bytes of the files the graders get (the
    .py files of the folder that intake picked, wherever it sits, a notebook converted to its module), the
    notes on what was left out and why (autograder.submission.intake: links, files over a limit or past a
    cap, the form of a module not graded), and why each missing module is missing. For a submission that
    intake refuses, its message (SubmissionError, which names the submission by its id, never by a path of
    this machine). For a class-folder entry that is neither a folder nor a regular file, its kind (a link by
    its target, never followed; a FIFO never opened), as grade_one refuses it unread.

    So every change that can change a grade or its feedback changes the digest, however many other files the
    submission holds and in whatever order they come: the digest has no cap of its own that could hide a
    module. A change that intake does not take (a data file, a file past intake's caps, a link's target, a
    notebook's markdown) cannot change the grade, and does not change the digest.

    Bounded as one intake is, whatever the submission holds (autograder.submission.folder, zips): at most MAX_SCAN
    (50,000) entries listed to find the modules' folder, MAX_FOLDER + 1 per folder; at most MAX_ENTRIES (1,000)
    files read, `max_unzipped` bytes in all; a zip's directory checked before it is parsed (MAX_ENTRIES
    entries, 4 MiB) and at most `max_unzipped` bytes unpacked, counted as they come out; a notebook at most
    MAX_FILE[".ipynb"] (32 MiB). Memory: the files taken (at most `max_unzipped`, 50 MiB by default) and a
    1 MiB buffer; disk: a temporary copy of them, removed before it returns.

    `max_unzipped`: the cap of the grading (grade-all's --max-unzipped), which decides what intake takes;
    None: intake's default. Raises OSError when the entry cannot be looked at (fingerprint: never matches).
    """
    h = hashlib.sha256()
    path = Path(path)
    mode = os.lstat(path).st_mode
    if not (stat.S_ISDIR(mode) or stat.S_ISREG(mode)):  # grade_one's refusal: never followed, never opened
        h.update(f"kind {stat.S_IFMT(mode)}".encode())
        if stat.S_ISLNK(mode):
            h.update(b"\0link " + os.fsencode(os.readlink(path)))
        return h.hexdigest()
    try:
        with taken(path, max_unzipped) as got:
            h.update(b"taken\0" + json.dumps([list(got.notes.items()), list(got.missing.items())]).encode())
            for top, dirs, files in os.walk(got.folder):  # the private copy the graders get: regular files only
                dirs.sort()
                for name in sorted(files):
                    full = os.path.join(top, name)
                    h.update(b"\0" + os.path.relpath(full, got.folder).encode("utf-8", "surrogateescape")
                             + f"\0{os.path.getsize(full)}\0".encode())
                    with open(full, "rb") as fh:
                        for chunk in iter(lambda: fh.read(1 << 20), b""):
                            h.update(chunk)
    except SubmissionError as exc:  # refused at intake: graded "empty", with this message
        h.update(b"refused\0" + str(exc).encode("utf-8", "surrogateescape"))
    return h.hexdigest()


def kit_digest() -> str:
    """A hash of the kit's code that decides a grade: the engine, the graders, the reference solution."""
    h = hashlib.sha256()
    for folder in ("autograder", "parts", "solutions"):
        for file in sorted((KIT / folder).rglob("*.py")):
            h.update(str(file.relative_to(KIT)).encode() + b"\0" + file.read_bytes() + b"\0")
    return h.hexdigest()


def versions(course=None) -> dict:
    """What grades: the kit's version, torch's, Python's, and the checksum of the code that decides a grade
    (`kit_digest`: engine, graders, reference), so that a gradebook can say what graded it; with a course file
    (autograder.course.Course), its name, checksum and total too."""
    import platform
    from importlib.metadata import PackageNotFoundError, version

    try:
        torch_version = version("torch")
    except PackageNotFoundError:
        torch_version = "not installed"
    return {"kit": __version__, "torch": torch_version, "python": platform.python_version(),
            "graders_sha256": kit_digest(), **(course.graded_by() if course is not None else {})}


def fingerprint(path: Path, kit: str, settings: dict) -> str:
    """What a row was graded from: what intake takes of the submission (`content_digest`, under the settings'
    max_unzipped), the kit (`kit_digest`) and the settings that can change a grade (limits, timeouts).

    "" when the submission cannot be digested in full (content_digest raised: an unreadable entry, an intake
    that fails other than by refusing it): a fingerprint that never matches, so that row is graded again on
    every run (plan), and its grading says what went wrong."""
    cap = settings.get("max_unzipped")
    try:
        content = content_digest(path, None if cap is None else int(cap))
    except Exception:
        return ""
    h = hashlib.sha256()
    h.update(kit.encode())
    h.update(json.dumps(settings, sort_keys=True, default=str).encode())
    h.update(content.encode())
    return h.hexdigest()[:16]


def grading_settings(timeout, call_timeout, options):
    from autograder.sandbox.limits import Limits

    limits = options.get("limits") or Limits()  # None means the defaults: the same fingerprint as given
    number = (lambda v: float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else v)  # 60 == 60.0
    return {"timeout": number(timeout), "call_timeout": number(call_timeout),
            "limits": {k: number(v) for k, v in limits.to_dict().items()},
            "max_unzipped": number(options.get("max_unzipped") or intake.MAX_UNZIPPED),
            **(options["course"].settings() if options.get("course") is not None else {})}
