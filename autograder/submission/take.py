"""A submission taken in: `taken(path)` reads a folder, a zip of one or a single notebook through
autograder.submission.intake, folder and zips (regular files only, never through a link, each within its limit,
a zip checked before it is unpacked) into a fresh private folder of its .py modules, the modules that only a
notebook holds converted (autograder.submission.notebooks). Everything here runs before any student process
starts, and names a submission by its id (`submission_id`), never by a path of this machine."""
from __future__ import annotations

import os
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from autograder import PARTS
from autograder.scoring import NOT_HANDED_IN
from autograder.submission import folder as folders, intake, zips
from autograder.submission.intake import SubmissionError
from autograder.submission.notebooks import (CellLines, handed_out, handing_out, module_of_notebook, not_handed_in,
                                             notebook_name, notebook_source)


@dataclass
class Intake:
    """A submission as the grader takes it in (autograder.submission.intake): a private folder of its .py modules.

    `notes`: {file of the submission: why it was not graded}, e.g. {"zz.py":
    "zz.py is a symbolic link: not graded ..."}; `missing`: {module: why},
    for the modules whose file was left out, so that their checks say why;
    `notebooks`: {module: (its notebook's name, CellLines of the module written from it)}, for the modules
    that a notebook became, so that messages name the notebook's cells (`in_notebook_terms`); `absent`:
    {module: where its code goes} for the modules not handed in at all (no file, no note: their checks say only
    autograder.scoring.NOT_HANDED_IN, and the report says this once, GradeReport.missing).
    """

    folder: Path
    notes: dict = field(default_factory=dict)
    missing: dict = field(default_factory=dict)
    notebooks: dict = field(default_factory=dict)
    absent: dict = field(default_factory=dict)


def submission_id(path) -> str:
    """The name a submission goes by in every report: its file or folder name (`/home/me/class/bob.zip` ->
    `bob.zip`), never a path of the grading machine."""
    return os.path.basename(os.path.abspath(path)) or str(path)


def _by_id(text: str, path) -> str:
    """`text` with the paths of the submission `path` written as its id (`submission_id`)."""
    name = submission_id(path)
    forms = {str(path), os.path.abspath(path), str(Path(path).resolve())}
    forms |= {intake.shown(f) for f in forms}
    for form in sorted(forms, key=len, reverse=True):
        if form and form != name:
            text = text.replace(form, name)
    return text


@contextmanager
def taken(path, max_unzipped=None, parts=None):
    """Yield an Intake of the submission at `path`: a folder, a zip of one, or a single notebook.

    The folder is always a fresh private copy, made by autograder.submission.intake:
    regular files only, never through a link, each within its size limit;
    a zip is checked before it is unpacked. A module that the submission has
    only as a notebook (`01_attention.ipynb`) is converted
    (autograder.submission.notebooks); of a module's two forms, the one with work is
    taken (autograder.submission.forms.one_form). Raises SubmissionError when `path` cannot be
    read at all (no such path, not a zip, a zip bomb, too many entries); its message names the submission by
    its id (`submission_id`), never by a path of this machine.
    `max_unzipped`: the most bytes a submission may unpack to (default
    autograder.submission.intake.MAX_UNZIPPED). `parts`: the parts handed out (a course file's, an optional
    part included), whose files are taken as modules (the name rule, autograder.submission.notebooks.handing_out)
    and whose absence is noted; None: autograder.MODULES, as with no course file (any other part's file is then
    taken as a helper file, under its own name).
    """
    path = Path(path)
    if not path.exists():
        raise SubmissionError(f"no such file or folder: {submission_id(path)}")
    with tempfile.TemporaryDirectory(prefix="mha-intake-") as tmp:
        folder = Path(tmp) / "submission"
        folder.mkdir()
        with handing_out(parts):
            try:
                files, notes = _take(path, Path(tmp), intake.MAX_UNZIPPED if max_unzipped is None else max_unzipped)
            except SubmissionError as exc:
                raise SubmissionError(_by_id(str(exc), path)) from None
            notebooks, absent = {}, {}
            missing = _write_modules(files, folder, notes, notebooks, absent)
        yield Intake(folder, notes, missing, notebooks, absent)


def _take(path, tmp, max_unzipped):
    """({name: bytes}, {name: why not graded}) of the submission at `path` (autograder.submission.intake), the
    notes capped (autograder.submission.folder.capped_notes: each module's first, at most MAX_NOTES in all, the
    rest counted)."""
    if path.is_dir():
        files, notes = folders.take_folder(path, max_unzipped)
        return files, folders.capped_notes(notes)
    if path.suffix.lower() == ".ipynb":
        if module_of_notebook(path) is None:  # the name rule (autograder.submission.notebooks.modules_named)
            raise SubmissionError(_unnamed(path.name))
        try:
            return {path.name: intake.read_regular(path, intake.MAX_FILE[".ipynb"], path.name, follow=True)}, {}
        except intake.Refused as exc:
            return {}, {path.name: str(exc)}
    unpacked = tmp / "unpacked"
    unpacked.mkdir()
    notes = zips.unzip(path, unpacked, max_unzipped)
    files, more = folders.take_folder(unpacked, max_unzipped)
    return files, folders.capped_notes({**notes, **more})


def _unnamed(name) -> str:
    """Why a single notebook handed in stands for no module (its name), and how to name it."""
    shown, several = intake.shown(name), intake.modules_named(name)
    if len(several) > 1:
        several = sorted(several, key=PARTS.index)
        return (f"{shown}: its name holds the names of {len(several)} modules ({', '.join(several)}): a notebook "
                f"holds one module and is named after it ({', '.join(map(notebook_name, several))})")
    return (f"{shown}: a notebook is named after its module, e.g. 01_attention.ipynb, or ends with that name "
            f"(bea_01_attention.ipynb, 01_attention (1).ipynb)")


def _write_modules(files, folder, notes, notebooks, absent):
    """Write the .py files of `files` ({name: bytes}) into `folder`, and the modules that only a notebook
    holds; return {module: why it is missing} for the modules whose file was left out (`notes`) or that are not
    handed in at all (NOT_HANDED_IN). Each module written from a notebook goes into `notebooks` as
    {module: (the notebook's name, CellLines of what was written)}, each module not handed in into `absent` as
    {module: where its code goes} (autograder.submission.notebooks.not_handed_in).

    A module's .py file is written as `<module>.py` whatever the student named it (`masks (1).py` ->
    `masks.py`: one_form left at most one file of each module); any other .py file under its own name."""
    for name, data in files.items():
        module = intake.module_of_file(name) if name.lower().endswith(".py") else None
        if module or name.endswith(".py"):  # (MASKS.PY is a module's; HELPER.PY, no module's, is not taken)
            target = folder / (f"{module}.py" if module else name)
            if not target.exists():  # (never: one file a module, and no other file is named <module>.py)
                intake.write_new(target, data)
    for name, data in sorted(files.items()):
        module = module_of_notebook(name) if name.lower().endswith(".ipynb") else None
        if module is None or (folder / f"{module}.py").exists():
            continue
        try:
            source = notebook_source(data, name)
        except ValueError as exc:  # costs exactly the checks of that module
            source = f"raise ImportError({str(exc)!r})\n"
        intake.write_new(folder / f"{module}.py", source.encode())
        notebooks[module] = (name.rsplit("/", 1)[-1], CellLines(source))
    missing = {}
    notebooks = any(name.lower().endswith(".ipynb") for name in [*files, *notes])
    for module in handed_out():
        if not (folder / f"{module}.py").exists():
            why = [note for name, note in notes.items() if module in intake.modules_named(name.rsplit("/", 1)[-1])]
            if why:
                missing[module] = "; ".join(why)
            else:  # said once by the report: the notebook (of a notebook submission) and the cell its code goes in
                missing[module] = NOT_HANDED_IN
                absent[module] = not_handed_in(module, notebooks)
    return missing


@contextmanager
def prepared(path, max_unzipped=None, parts=None):
    """Yield a private folder of the submission's .py modules, for a folder, a zip or a notebook (`taken`)."""
    with taken(path, max_unzipped, parts) as got:
        yield got.folder
