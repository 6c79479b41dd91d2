"""The parts of the assignment, each one folder: what the kit reads of `parts/<name>/`.

`autograder.PARTS` lists the parts in teaching order (the one list); each has a folder `parts/<name>/`
(autograder.paths.PARTS_DIR) that holds everything of it, under fixed names (docs/contributing/parts.md):

    part.toml        what it is: title, notebook (its released name), optional, needs
    solution.py      the reference solution, with the release's markers: the stub is rendered from it
    notebook.ipynb   the nbgrader source notebook (its module cell a copy of solution.py, kept so by the release)
    test_<name>.py   the hidden graders, `@points` markers and all (pytest imports them as parts.<name>.test_<name>)
    checks.py        its public checks, @check(...) functions: the release writes them into the shipped selfcheck.py
    diagnose.py      its "Likely bug" diagnoses, the known mistakes computed from the reference (its graders import
                     it; the machinery, match, is autograder/grade/diagnose.py)
    __init__.py      makes the folder a package, for that name

The release copies solution.py to solutions/<name>.py (the package the graders import the reference from, and
a complete submission) and, for a part handed out by default, notebook.ipynb to assignments/mha/NN_<name>.ipynb
(the nbgrader source folder of the kit as it is; `release --nbgrader-source` writes a course's); `release --check`
holds the copies. tests/test_parts.py names, per part, what of the list is missing.

Nothing here imports torch or runs a part's code.
"""
from __future__ import annotations

import functools
import sys
from dataclasses import dataclass
from pathlib import Path

from autograder import MODULES, OPTIONAL, PARTS
from autograder.paths import PARTS_DIR  # noqa: F401  (registry.PARTS_DIR: where the folders are)

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the backport (requirements.txt)
    import tomli as tomllib

#: The keys of a part.toml: key -> (type, default; None: required).
KEYS = {"title": (str, None), "notebook": (str, None), "optional": (bool, False), "needs": (list, [])}


class PartError(ValueError):
    """A part whose folder cannot be read: its message names the part and what is wrong."""


@dataclass(frozen=True)
class Part:
    """One part of the assignment, as its folder says it."""

    name: str  # the student module's name: <name>.py
    title: str
    notebook: str  # its notebook's name in the release, NN_<name>.ipynb
    optional: bool  # handed out only where a course file lists it
    needs: tuple  # the other parts whose code this one calls
    folder: Path

    @property
    def solution(self) -> Path:
        return self.folder / "solution.py"

    @property
    def source_notebook(self) -> Path:
        return self.folder / "notebook.ipynb"

    @property
    def graders(self) -> Path:
        return self.folder / f"test_{self.name}.py"

    @property
    def diagnoses(self) -> Path:
        return self.folder / "diagnose.py"

    @property
    def diagnose_module(self) -> str:
        """The name its diagnoses are imported under (by its graders, and autograder.grade.diagnose.of)."""
        return f"parts.{self.name}.diagnose"

    @property
    def grader_module(self) -> str:
        """The name pytest (importlib mode) imports its graders under, and the warm grader server preloads."""
        return f"parts.{self.name}.test_{self.name}"


def read(name: str, root: Path | None = None) -> Part:
    """The Part `name` from `root`/<name>/part.toml (default: the kit's parts/); PartError naming the part and
    the key where the folder or its part.toml is missing or wrong."""
    folder = Path(root or PARTS_DIR) / name
    toml = folder / "part.toml"
    if not toml.is_file():
        raise PartError(f"part {name!r}: no part.toml in {folder} (every part of autograder.PARTS is a folder "
                        f"parts/<name>/ with a part.toml: docs/contributing/parts.md)")
    try:
        data = tomllib.loads(toml.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise PartError(f"part {name!r}: part.toml is not valid TOML: {exc}") from None
    unknown = sorted(set(data) - set(KEYS))
    if unknown:
        raise PartError(f"part {name!r}: part.toml has keys the kit does not read: {', '.join(unknown)} "
                        f"(it reads {', '.join(KEYS)})")
    fields = {}
    for key, (kind, default) in KEYS.items():
        if key not in data and default is None:
            raise PartError(f"part {name!r}: part.toml has no {key}")
        value = data.get(key, default)
        if not isinstance(value, kind):
            raise PartError(f"part {name!r}: part.toml's {key} must be a {kind.__name__}, got {value!r}")
        fields[key] = value
    unknown_needs = [n for n in fields["needs"] if n not in PARTS or n == name]
    if unknown_needs:
        raise PartError(f"part {name!r}: part.toml's needs names {unknown_needs}, not other parts of "
                        f"autograder.PARTS ({', '.join(PARTS)})")
    return Part(name, fields["title"], fields["notebook"], fields["optional"], tuple(fields["needs"]), folder)


@functools.lru_cache(maxsize=None)
def part(name: str) -> Part:
    """The kit's part `name` (one of autograder.PARTS), read once."""
    if name not in PARTS:
        raise PartError(f"{name!r} is not a part of the kit (autograder.PARTS: {', '.join(PARTS)})")
    return read(name)


def parts(names=PARTS) -> list[Part]:
    """The kit's parts named (default: all of autograder.PARTS), in teaching order."""
    return [part(name) for name in PARTS if name in names]


def grader_files(names=MODULES) -> list[Path]:
    """The hidden graders of the parts named (default: those handed out with no course file), in teaching order:
    what a grading collects."""
    return [p.graders for p in parts(names)]


def grader_modules(names=PARTS) -> list[str]:
    """The module names of the graders of the parts named (default: every part), as pytest imports them."""
    return [p.grader_module for p in parts(names)]


__all__ = ["KEYS", "MODULES", "OPTIONAL", "PARTS", "Part", "PartError", "grader_files", "grader_modules", "part",
           "parts", "read"]
