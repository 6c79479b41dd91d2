"""The submission corpus: planted bugs and correct alternatives, as data.

The cases live in ``submissions.toml`` next to this file; each one is the
reference solution with a few textual patches applied. This module reads the
file and writes a case out as a submission folder::

    from tests.corpus import load_corpus, materialize

    corpus = load_corpus()
    for case in corpus["bug"]:
        folder = materialize(case, tmp_path / case.id, SOLUTIONS_DIR)

``tests/test_corpus.py`` grades every case with the real engine.
"""
from __future__ import annotations

import re
import shutil
import tomllib
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "CORPUS_FILE",
    "KINDS",
    "MODULES",
    "MODULE_FILES",
    "Case",
    "CorpusError",
    "Patch",
    "PatchError",
    "all_cases",
    "load_corpus",
    "materialize",
]

#: The five modules of a submission, in the order of the contract.
MODULES: tuple[str, ...] = ("attention", "heads", "masks", "mha", "positional")
#: Their file names.
MODULE_FILES: tuple[str, ...] = tuple(f"{m}.py" for m in MODULES)
#: The tables of submissions.toml: planted bugs, correct alternatives, hostile or broken submissions.
KINDS: tuple[str, ...] = ("bug", "alternative", "hostile")
#: The corpus file.
CORPUS_FILE = Path(__file__).resolve().with_name("submissions.toml")

_ID_RE = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")


class CorpusError(ValueError):
    """submissions.toml is malformed."""


class PatchError(ValueError):
    """A patch does not apply: its `find` does not occur exactly once."""


@dataclass(frozen=True)
class Patch:
    file: str
    find: str
    replace: str


@dataclass(frozen=True)
class Case:
    id: str
    kind: str  # "bug", "alternative" or "hostile"
    module: str  # one of MODULES, the only module the patches touch
    description: str
    patches: tuple[Patch, ...]

    @property
    def is_bug(self) -> bool:
        """Bugs and hostile submissions must lose points in their own module."""
        return self.kind in ("bug", "hostile")


def _case_from_entry(kind: str, index: int, entry: dict) -> Case:
    where = f"[[{kind}]] #{index + 1}"
    if not isinstance(entry, dict):
        raise CorpusError(f"{where}: not a table")
    unknown = set(entry) - {"id", "module", "description", "patch"}
    if unknown:
        raise CorpusError(f"{where}: unknown keys {sorted(unknown)}")
    for key in ("id", "module", "description"):
        if not isinstance(entry.get(key), str) or not entry[key].strip():
            raise CorpusError(f"{where}: missing or empty string {key!r}")
    case_id = entry["id"]
    where = f"[[{kind}]] {case_id!r}"
    if not _ID_RE.match(case_id):
        raise CorpusError(f"{where}: id is not kebab-case")
    module = entry["module"]
    if module not in MODULES:
        raise CorpusError(f"{where}: module {module!r} is not one of {MODULES}")
    if "\n" in entry["description"]:
        raise CorpusError(f"{where}: description must be one line")
    raw_patches = entry.get("patch")
    if not isinstance(raw_patches, list) or not raw_patches:
        raise CorpusError(f"{where}: needs at least one [[{kind}.patch]]")
    patches = []
    for j, raw in enumerate(raw_patches):
        pwhere = f"{where} patch #{j + 1}"
        if not isinstance(raw, dict) or set(raw) != {"file", "find", "replace"}:
            raise CorpusError(f"{pwhere}: needs exactly the keys file, find, replace")
        if not all(isinstance(raw[k], str) for k in ("file", "find", "replace")):
            raise CorpusError(f"{pwhere}: file, find and replace must be strings")
        if raw["file"] != f"{module}.py":
            raise CorpusError(
                f"{pwhere}: patches {raw['file']!r} but the case's module is {module!r}"
            )
        if not raw["find"]:
            raise CorpusError(f"{pwhere}: empty find")
        patches.append(Patch(raw["file"], raw["find"], raw["replace"]))
    return Case(case_id, kind, module, entry["description"].strip(), tuple(patches))


def load_corpus(path: Path | str = CORPUS_FILE) -> dict[str, list[Case]]:
    """Read submissions.toml: {"bug": [Case, ...], "alternative": [Case, ...]}.

    Raises CorpusError when the file is malformed (unknown table, bad id,
    duplicate id, unknown module, a patch touching another module, ...).
    """
    with open(path, "rb") as fh:
        data = tomllib.load(fh)
    unknown = set(data) - set(KINDS)
    if unknown:
        raise CorpusError(f"{path}: unknown tables {sorted(unknown)}")
    corpus: dict[str, list[Case]] = {}
    seen: set[str] = set()
    for kind in KINDS:
        entries = data.get(kind, [])
        if not isinstance(entries, list):
            raise CorpusError(f"{path}: {kind!r} must be an array of tables ([[{kind}]])")
        cases = [_case_from_entry(kind, i, e) for i, e in enumerate(entries)]
        for case in cases:
            if case.id in seen:
                raise CorpusError(f"{path}: duplicate id {case.id!r}")
            seen.add(case.id)
        corpus[kind] = cases
    return corpus


def all_cases(path: Path | str = CORPUS_FILE) -> list[Case]:
    """Every case, bugs first, in file order."""
    corpus = load_corpus(path)
    return [case for kind in KINDS for case in corpus[kind]]


def apply_patch(text: str, patch: Patch, *, case_id: str = "?") -> str:
    """Apply one patch to a module's text; PatchError unless `find` occurs exactly once."""
    count = text.count(patch.find)
    if count != 1:
        excerpt = patch.find if len(patch.find) <= 120 else patch.find[:117] + "..."
        raise PatchError(
            f"case {case_id!r}: the find string occurs {count} times in {patch.file} "
            f"(it must occur exactly once): {excerpt!r}"
        )
    return text.replace(patch.find, patch.replace, 1)


def materialize(case: Case, dest: Path | str, solutions_dir: Path | str) -> Path:
    """Write `case` as a submission folder: the five solution modules, patched.

    Copies attention.py, heads.py, masks.py, mha.py and positional.py from
    `solutions_dir` into `dest` (created if needed), applies the case's patches
    in order and returns `dest`. Raises PatchError when a `find` string does not
    occur exactly once, or when a patched module is no longer valid Python.
    """
    dest = Path(dest)
    solutions_dir = Path(solutions_dir)
    dest.mkdir(parents=True, exist_ok=True)
    for name in MODULE_FILES:
        src = solutions_dir / name
        if not src.is_file():
            raise FileNotFoundError(f"reference module missing: {src}")
        shutil.copyfile(src, dest / name)
    touched: dict[str, str] = {}
    for patch in case.patches:
        path = dest / patch.file
        text = touched.get(patch.file, path.read_text(encoding="utf-8"))
        touched[patch.file] = apply_patch(text, patch, case_id=case.id)
    for name, text in touched.items():
        try:
            compile(text, str(dest / name), "exec")
        except SyntaxError as exc:
            if case.kind != "hostile":  # a hostile case may be broken on purpose
                raise PatchError(f"case {case.id!r}: patched {name} is not valid Python: {exc}") from exc
        (dest / name).write_text(text, encoding="utf-8")
    return dest
