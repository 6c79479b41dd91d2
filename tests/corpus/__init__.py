"""The submission corpus: planted bugs and correct alternatives, as data.

The cases live in each part's folder, ``parts/<name>/corpus.toml`` (and
``submissions.toml`` next to this file, whose header says the format); each one
is the reference solution with a few textual patches applied. This module reads
them all and writes a case out as a submission folder::

    from tests.corpus import load_corpus, materialize

    corpus = load_corpus()
    for case in corpus["bug"]:
        folder = materialize(case, tmp_path / case.id, SOLUTIONS_DIR)

``tests/test_corpus.py`` grades every case with the real engine; a bug's
``diagnosis`` lists the "Likely bug" lines its report must print, and no
other may appear.

``attacks.toml`` holds the adversarial corpus: hostile submissions, each
shaped so that it would earn points if its attack worked, with what it may
earn. ``load_attacks`` reads it; ``materialize`` writes an attack case too
(its module replaced wholesale or patched, ``${name}`` placeholders filled
from ``params``; symbolic links, padding, or a zip with entries of its own,
for the attacks on the grader's intake). ``tests/test_attacks.py`` grades
every attack case.
"""
from __future__ import annotations

import os
import re
import shutil
import stat
try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: tomli, its source (requirements.txt)
    import tomli as tomllib
import warnings
import zipfile
from dataclasses import dataclass, field, replace
from pathlib import Path

__all__ = [
    "ATTACKS_FILE",
    "ATTACK_KINDS",
    "AttackCase",
    "CORPUS_FILE",
    "corpus_files",
    "KINDS",
    "Link",
    "MODULES",
    "MODULE_FILES",
    "Case",
    "CorpusError",
    "Patch",
    "ModuleFile",
    "NEEDS",
    "PatchError",
    "SCENARIOS",
    "ZIP_FOLDER",
    "ZipEntry",
    "all_cases",
    "case_parts",
    "course_of",
    "load_attacks",
    "load_corpus",
    "materialize",
    "substitute",
]

#: The modules of a submission, in the order of the contract: the kit's own list (autograder.MODULES).
from autograder import MODULES, PARTS  # noqa: E402

#: Their file names.
MODULE_FILES: tuple[str, ...] = tuple(f"{m}.py" for m in MODULES)
#: The tables of submissions.toml: planted bugs, correct alternatives, hostile or broken submissions.
KINDS: tuple[str, ...] = ("bug", "alternative", "hostile")
#: The corpus file that says the format (its cases, if any, are loaded with the parts').
CORPUS_FILE = Path(__file__).resolve().with_name("submissions.toml")


def corpus_files() -> list[Path]:
    """Every file of the corpus: CORPUS_FILE, then each part's parts/<name>/corpus.toml (autograder.PARTS order)."""
    from autograder.paths import PARTS_DIR

    return [CORPUS_FILE, *(f for f in (PARTS_DIR / name / "corpus.toml" for name in PARTS) if f.is_file())]


#: The adversarial corpus.
ATTACKS_FILE = Path(__file__).resolve().with_name("attacks.toml")
#: The attacks the adversarial corpus must cover (an attack case's `attack`); more may be added.
ATTACK_KINDS: tuple[str, ...] = (
    "exit",  # sys.exit(0) / os._exit(0), at import or inside a call
    "infinite-loop",
    "memory-bomb",
    "fork-bomb",
    "disk-fill",  # files written until something stops them, each under the output limit
    "host-resources",  # pseudo-terminals (host-wide) and file descriptors held beyond the process's share
    "patched-comparisons",  # torch.allclose, torch.equal, torch.testing.assert_close, numpy's comparisons
    "lying-objects",  # tensor subclasses and objects whose __eq__ is always true
    "fake-results-output",  # printing fake pytest or JSON results
    "results-json",  # writing results.json files wherever reachable
    "patched-timers",  # patching time.perf_counter & co. and sleeping in the fused forward
    "timing-replay",  # answering timed passes from a cache or a table of the timing inputs
    "timing-burners",  # busy processes that run while the grader times the reference modules
    "hidden-loop",  # a loop over heads hidden from the structure and speed checks (counter off, passes batched, read ahead)
    "kit-files",  # reading the kit's files (reference, hidden graders)
    "network",
    "gc-search",  # looking for the expected tensors in gc.get_objects()
    "env-tokens",  # secrets in os.environ or /proc/*/environ
    "other-student-data",
    # submissions that reach outside themselves (the grader's intake, autograder/submission/intake.py)
    "symlinks",  # a module, another file or a folder of the submission is a symbolic link to the kit or the system
    "zip-traversal",  # zip entries that would land outside the folder: absolute, "..", symbolic link entries
    "zip-bomb",  # a zip that unpacks to far more than it weighs, or holds a huge number of entries
    "huge-file",  # a module over the size limit
    # answers that would cost the trusted side far more than their size (autograder/sandbox/wire.py)
    "answer-bombs",  # DEFLATE records, stride-0 tensors, 20 MB messages, sparse tensors sent as answers
    # notebooks that would cost the trusted side's conversion far more than their size
    # (autograder/submission/notebooks.py)
    "notebook-bombs",  # a cell of millions of lines, nesting the parser cannot hold, a cell whose source is no text
    "intake-scale",  # a folder of thousands of small files around the modules: the search for them must stay linear
    "notebook-conversions",  # honest notebook code that a careless conversion breaks (lines like magics, constants)
    "class-run",  # grade-all: an id that names the kit's own file, busy loops left running next to a neighbour
    "classroom",  # GitHub Classroom: links through the kit's checkout in the student's workspace
)
#: What an attack case may need from the sandbox before it can be run safely or meaningfully.
NEEDS: tuple[str, ...] = ("isolation", "process-limit", "memory-limit")
#: Scenarios: one submission graded alone, next to another student's submission, or in a class run (grade-all) with
#: a correct neighbour.
SCENARIOS: tuple[str, ...] = ("single", "other-student", "class")
_PLACEHOLDER_RE = re.compile(r"\$\{([a-z_][a-z0-9_]*)\}")

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
    # the "Likely bug: ..." diagnoses its report must print, and no other (a bug's `diagnosis`; empty: none)
    diagnosis: tuple[str, ...] = ()
    call_timeout: float | None = None  # seconds per call to student code, where the suite's default is not needed
    on: str = ""  # a bug's `on`: the id of the [[alternative]] it is planted in (its patches come first)
    # a bug's `also_fails`: checks of other modules that it fails too, by design (each case says why in its
    # description); every other check of every other module must pass
    also_fails: tuple[str, ...] = ()
    base: tuple[Patch, ...] = ()  # that alternative's patches (load_corpus fills them in)

    @property
    def is_bug(self) -> bool:
        """Bugs and hostile submissions must lose points in their own module."""
        return self.kind in ("bug", "hostile")


@dataclass(frozen=True)
class ModuleFile:
    """A module of an attack case replaced wholesale: by `content`, or by the student template's stub."""

    name: str  # "<module>.py"
    content: str | None = None
    source: str | None = None  # "template": student_template/<name>


@dataclass(frozen=True)
class Link:
    """A symbolic link in an attack case's folder: `name` (a path in it) -> `target` (${name} filled)."""

    name: str
    target: str


@dataclass(frozen=True)
class ZipEntry:
    """An extra entry of a zip-form attack case, named as it is (`..`, absolute, ${index} numbering repeats).

    Exactly one of: `content` (text), `zeros` (that many zero bytes, deflated: a bomb), `link` (a
    symbolic link entry, its target as its data, as `zip --symlinks` writes it).
    """

    name: str
    content: str | None = None
    zeros: int | None = None
    link: str | None = None
    repeat: int = 1


@dataclass(frozen=True)
class ExtraFile:
    """A file added to a folder-form attack case, at `name` (a path in it; ${index} numbers repeats)."""

    name: str
    content: str = ""
    repeat: int = 1


@dataclass(frozen=True)
class NotebookCell:
    """The attacked module's notebook (NN_<module>.ipynb, the student template's) with its module cell's source
    replaced: `cell` repeated `repeat` times then `end`, or, with `json`, that JSON value as the source as is
    (a number, a list of anything: what a hand-edited notebook may hold)."""

    cell: str = ""
    repeat: int = 1
    end: str = ""
    json: str | None = None


#: The folder a zip-form case's files are zipped under (a zip of one folder, as students send).
ZIP_FOLDER = "submission"


@dataclass(frozen=True)
class AttackCase:
    """One hostile submission of attacks.toml and what it may earn.

    The submission is the reference solution with `module` attacked: replaced
    by `files` and/or patched by `patches`. In that module exactly the checks
    named in `passes` pass (or, with `fails`, exactly those fail); every
    other module keeps full marks; grading ends within `max_seconds`.
    With `refused`, grading must instead refuse the whole submission
    (SubmissionError, its message holding `refused`) within `max_seconds`.
    """

    id: str
    attack: str  # one of ATTACK_KINDS (or a new kind)
    module: str
    description: str
    patches: tuple[Patch, ...] = ()
    files: tuple[ModuleFile, ...] = ()
    needs: tuple[str, ...] = ()
    passes: tuple[str, ...] = ()
    fails: tuple[str, ...] | None = None  # when set: exactly these checks of `module` fail, the others pass
    max_seconds: float = 60.0
    call_timeout: float | None = None  # seconds per call to student code, when the suite's default is too short
    probe: str = ""  # a string the attack prints when it has run: must be in the student's output
    scenario: str = "single"
    known_vulnerability: str = ""  # non-empty: the engine is known to lose to this attack (strict xfail)
    links: tuple[Link, ...] = ()  # symbolic links put in the folder (the attacked module's file replaced by one)
    form: str = "folder"  # "folder", or "zip": materialize returns a zip of the folder, plus `zip_entries`
    zip_entries: tuple[ZipEntry, ...] = ()
    pad_to: int = 0  # the attacked module, padded with comment lines to this many bytes
    refused: str = ""  # the grader must refuse the whole submission (SubmissionError) with a message holding this
    notebook: NotebookCell | None = None  # the attacked module's notebook, its module cell as given
    files_under: str = ""  # where the submission's files sit: a folder's subfolder, a zip's top folder
    extra_files: tuple[ExtraFile, ...] = ()  # more files in a folder-form submission (numbered by ${index})
    submission_id: str = "student-b"  # scenario "class": the submission's name in the class folder
    neighbour_frozen: bool = False  # scenario "class": the neighbour's speed measurement must stop this one
    kind: str = field(default="attack", init=False)

    @property
    def is_bug(self) -> bool:
        return True


def _check_header(kind: str, index: int, entry, keys, strings) -> str:
    """Check a table's keys, its required strings and its kebab-case id; return how errors name it."""
    where = f"[[{kind}]] #{index + 1}"
    if not isinstance(entry, dict):
        raise CorpusError(f"{where}: not a table")
    unknown = set(entry) - set(keys)
    if unknown:
        raise CorpusError(f"{where}: unknown keys {sorted(unknown)}")
    for key in strings:
        if not isinstance(entry.get(key), str) or not entry[key].strip():
            raise CorpusError(f"{where}: missing or empty string {key!r}")
    where = f"[[{kind}]] {entry['id']!r}"
    if not _ID_RE.match(entry["id"]):
        raise CorpusError(f"{where}: id is not kebab-case")
    return where


def _call_timeout(entry: dict, where: str, below: float | None = None) -> float | None:
    """A case's `call_timeout` (seconds per call to student code), or None when it gives none: a number over 0,
    and under `below` (the case's max_seconds) when given."""
    value = entry.get("call_timeout")
    if value is None:
        return None
    if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0 \
            or (below is not None and value >= below):
        raise CorpusError(f"{where}: call_timeout must be a number of seconds in (0, max_seconds)" if below is not None
                          else f"{where}: call_timeout must be a positive number of seconds")
    return float(value)


def _case_from_entry(kind: str, index: int, entry: dict) -> Case:
    keys = {"id", "module", "description", "patch", "call_timeout"} | ({"diagnosis", "on", "also_fails"} if kind == "bug" else set())
    where = _check_header(kind, index, entry, keys, ("id", "module", "description"))
    case_id = entry["id"]
    module = entry["module"]
    if module not in PARTS:
        raise CorpusError(f"{where}: module {module!r} is not one of autograder.PARTS {PARTS}")
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
    diagnosis = _strings(entry["diagnosis"], where, "diagnosis") if "diagnosis" in entry else ()
    for text in diagnosis:
        if "\n" in text or text.startswith("Likely bug") or text.endswith("."):
            raise CorpusError(f"{where}: a diagnosis is the text after 'Likely bug: ' on one line, without the "
                              f"final period: {text!r}")
    on = entry.get("on", "")
    if not isinstance(on, str):
        raise CorpusError(f"{where}: on must be the id of an [[alternative]]")
    also_fails = _strings(entry["also_fails"], where, "also_fails") if "also_fails" in entry else ()
    return Case(case_id, kind, module, entry["description"].strip(), tuple(patches), diagnosis,
                _call_timeout(entry, where), on, also_fails)


def load_corpus(path: Path | str | None = None) -> dict[str, list[Case]]:
    """Read the corpus, every file of corpus_files() (or the one file `path`): {"bug": [Case, ...],
    "alternative": [Case, ...], "hostile": [...]}, each kind in file order.

    Raises CorpusError when a file is malformed (unknown table, bad id,
    duplicate id over all the files, unknown module, a patch touching another module, ...).
    """
    corpus: dict[str, list[Case]] = {kind: [] for kind in KINDS}
    seen: set[str] = set()
    for file in ([Path(path)] if path is not None else corpus_files()):
        with open(file, "rb") as fh:
            data = tomllib.load(fh)
        unknown = set(data) - set(KINDS)
        if unknown:
            raise CorpusError(f"{file}: unknown tables {sorted(unknown)}")
        for kind in KINDS:
            entries = data.get(kind, [])
            if not isinstance(entries, list):
                raise CorpusError(f"{file}: {kind!r} must be an array of tables ([[{kind}]])")
            cases = [_case_from_entry(kind, i, e) for i, e in enumerate(entries)]
            for case in cases:
                if case.id in seen:
                    raise CorpusError(f"{file}: duplicate id {case.id!r}")
                seen.add(case.id)
            corpus[kind] += cases
    alternatives = {case.id: case for case in corpus["alternative"]}
    for kind in KINDS:
        for i, case in enumerate(corpus[kind]):
            if case.on:
                if case.on not in alternatives:
                    raise CorpusError(f"{path}: [[{kind}]] {case.id!r}: on = {case.on!r} is not an [[alternative]]")
                corpus[kind][i] = replace(case, base=alternatives[case.on].patches)
    return corpus


def case_parts(case: Case | AttackCase) -> tuple[str, ...]:
    """The parts whose solution a case's submission holds (what `materialize` copies), in teaching order: the
    parts handed out with no course file (MODULE_FILES), and for a case of an optional part (kvcache) that part
    too, with the parts it needs (its part.toml's `needs`, autograder/registry.py)."""
    module = getattr(case, "module", None)
    if module is None or module in MODULES:
        return MODULES
    from autograder import registry

    wanted, todo = {*MODULES, module}, [module]
    while todo:
        for need in registry.part(todo.pop()).needs:
            if need not in wanted:
                wanted.add(need)
                todo.append(need)
    return tuple(part for part in PARTS if part in wanted)


def course_of(case: Case | AttackCase):
    """The course file a case is graded under (autograder.course.Course): None, the kit as it is, for a case of
    a part handed out by default; for a case of an optional part, one that hands out the parts its submission
    holds (`case_parts`: the five and that part), each at its worth in the kit (the sum of its graders' points),
    so that every figure of the five is as with no course file."""
    parts = case_parts(case)
    if parts == MODULES:
        return None
    from autograder.course import parse
    from autograder.release import grader_points

    worths = grader_points(names=parts)
    text = "[parts]\n" + "".join(f"{part} = {worths[part].points:g}\n" for part in parts)
    return parse(text.encode(), f"{case.module}.toml")


def all_cases(path: Path | str | None = None) -> list[Case]:
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


def materialize(case: Case | AttackCase, dest: Path | str, solutions_dir: Path | str, *,
                template_dir: Path | str | None = None, params: dict | None = None) -> Path:
    """Write `case` as a submission folder: the solution modules of the parts it needs, patched.

    Copies attention.py, heads.py, masks.py, mha.py and positional.py from
    `solutions_dir` into `dest` (created if needed), and for a case of an
    optional part its module too (`case_parts`), applies the case's patches
    in order and returns `dest`. Raises PatchError when a `find` string does not
    occur exactly once, or when a patched module is no longer valid Python.

    For an AttackCase, the attacked module is first replaced by the case's
    [[attack.file]] (its content, or the stub of `template_dir`, by default
    the student_template next to `solutions_dir`), then patched, then its
    ${name} placeholders are filled from `params` (${solutions} and ${kit},
    the real paths of `solutions_dir` and its parent, need not be given),
    then padded to `pad_to` bytes; its [[attack.link]] links are made; all of
    it is moved under `files_under` when given, and its [[attack.extra_file]]
    files are added. A zip-form case returns `<dest>.zip` instead: the
    folder's files under its `files_under` (default ZIP_FOLDER/), then its
    [[attack.zip_entry]] entries.
    """
    dest = Path(dest)
    solutions_dir = Path(solutions_dir)
    dest.mkdir(parents=True, exist_ok=True)
    for name in (f"{part}.py" for part in case_parts(case)):
        src = solutions_dir / name
        if not src.is_file():
            raise FileNotFoundError(f"reference module missing: {src}")
        if (dest / name).is_symlink():  # an attack case's link, from an earlier run: never write through it
            (dest / name).unlink()
        shutil.copyfile(src, dest / name)
    if isinstance(case, AttackCase):
        template = Path(template_dir) if template_dir is not None else solutions_dir.parent / "student_template"
        kit = solutions_dir.resolve()
        params = {"solutions": str(kit), "kit": str(kit.parent), **(params or {})}
        _materialize_attack(case, dest, template, params)
        if case.form == "zip":
            return _zip_case(case, dest, params)
        _lay_out(case, dest, params)
        return dest
    touched: dict[str, str] = {}
    for patch in (*case.base, *case.patches):  # a bug planted in an alternative: the alternative's patches first
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


# -- the adversarial corpus (attacks.toml) -----------------------------------------
_ATTACK_KEYS = {"id", "attack", "module", "description", "needs", "passes", "fails", "max_seconds", "call_timeout",
                "probe", "scenario", "known_vulnerability", "patch", "file", "link", "form", "zip_entry", "pad_to",
                "refused", "notebook", "files_under", "extra_file", "submission_id", "neighbour_frozen"}
FORMS = ("folder", "zip")
MAX_PAD = 64 << 20  # pad_to: large enough to be over the intake's limit, small enough for a test to read


def _strings(value, where, key):
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise CorpusError(f"{where}: {key} must be a list of non-empty strings")
    if len(set(value)) != len(value):
        raise CorpusError(f"{where}: {key} has duplicates")
    return tuple(value)


def _attack_from_entry(index: int, entry: dict) -> AttackCase:
    where = _check_header("attack", index, entry, _ATTACK_KEYS, ("id", "attack", "module", "description"))
    case_id = entry["id"]
    if not _ID_RE.match(entry["attack"]):
        raise CorpusError(f"{where}: attack {entry['attack']!r} is not kebab-case")
    module = entry["module"]
    if module not in MODULES:
        raise CorpusError(f"{where}: module {module!r} is not one of {MODULES}")
    if "\n" in entry["description"]:
        raise CorpusError(f"{where}: description must be one line")
    needs = _strings(entry.get("needs", []), where, "needs")
    if set(needs) - set(NEEDS):
        raise CorpusError(f"{where}: needs {sorted(set(needs) - set(NEEDS))} not among {NEEDS}")
    passes = _strings(entry.get("passes", []), where, "passes")
    fails = _strings(entry["fails"], where, "fails") if "fails" in entry else None
    if fails is not None and passes:
        raise CorpusError(f"{where}: give passes or fails, not both")
    max_seconds = entry.get("max_seconds", 60)
    if not isinstance(max_seconds, (int, float)) or isinstance(max_seconds, bool) or not 0 < max_seconds <= 600:
        raise CorpusError(f"{where}: max_seconds must be a number of seconds in (0, 600]")
    call_timeout = _call_timeout(entry, where, below=max_seconds)
    scenario = entry.get("scenario", "single")
    if scenario not in SCENARIOS:
        raise CorpusError(f"{where}: scenario {scenario!r} is not one of {SCENARIOS}")
    for key in ("probe", "known_vulnerability"):
        if not isinstance(entry.get(key, ""), str):
            raise CorpusError(f"{where}: {key} must be a string")
    files = []
    for j, raw in enumerate(entry.get("file", [])):
        fwhere = f"{where} file #{j + 1}"
        if not isinstance(raw, dict) or "name" not in raw or len(set(raw) & {"content", "source"}) != 1 \
                or set(raw) - {"name", "content", "source"}:
            raise CorpusError(f"{fwhere}: needs name and exactly one of content, source")
        if raw["name"] != f"{module}.py":
            raise CorpusError(f"{fwhere}: replaces {raw['name']!r} but the case's module is {module!r}")
        if "source" in raw and raw["source"] != "template":
            raise CorpusError(f"{fwhere}: source must be \"template\"")
        if "content" in raw and (not isinstance(raw["content"], str) or not raw["content"].strip()):
            raise CorpusError(f"{fwhere}: empty content")
        files.append(ModuleFile(raw["name"], raw.get("content"), raw.get("source")))
    if len(files) > 1:
        raise CorpusError(f"{where}: at most one [[attack.file]] (the attacked module)")
    patches = []
    for j, raw in enumerate(entry.get("patch", [])):
        pwhere = f"{where} patch #{j + 1}"
        if not isinstance(raw, dict) or set(raw) != {"file", "find", "replace"} \
                or not all(isinstance(raw[k], str) for k in raw):
            raise CorpusError(f"{pwhere}: needs exactly the string keys file, find, replace")
        if raw["file"] != f"{module}.py":
            raise CorpusError(f"{pwhere}: patches {raw['file']!r} but the case's module is {module!r}")
        if not raw["find"]:
            raise CorpusError(f"{pwhere}: empty find")
        patches.append(Patch(raw["file"], raw["find"], raw["replace"]))
    form, links, zip_entries, pad_to, refused = _intake_keys(entry, where)
    notebook = _notebook_key(entry, where)
    files_under, extra_files = _layout_keys(entry, where, form)
    submission_id, neighbour_frozen = _class_keys(entry, where, scenario)
    if not files and not patches and not links and not zip_entries and not pad_to and not notebook \
            and not files_under and not extra_files and scenario != "class":
        raise CorpusError(f"{where}: needs an [[attack.file]] or at least one [[attack.patch]], [[attack.link]], "
                          "[[attack.zip_entry]], [[attack.extra_file]] or [[attack.notebook]], or pad_to or "
                          "files_under, or the class scenario")
    return AttackCase(case_id, entry["attack"], module, entry["description"].strip(), tuple(patches), tuple(files),
                      needs, passes, fails, float(max_seconds),
                      call_timeout, entry.get("probe", ""), scenario,
                      entry.get("known_vulnerability", "").strip(), links=links, form=form, zip_entries=zip_entries,
                      pad_to=pad_to, refused=refused, notebook=notebook, files_under=files_under,
                      extra_files=extra_files, submission_id=submission_id, neighbour_frozen=neighbour_frozen)


def _relative_path(value, where: str, key: str) -> str:
    if not isinstance(value, str) or not value or value.startswith("/") or ".." in Path(value).parts \
            or "\\" in value:
        raise CorpusError(f"{where}: {key} must be a relative path inside the submission, got {value!r}")
    return value


def _layout_keys(entry: dict, where: str, form: str) -> tuple[str, tuple[ExtraFile, ...]]:
    """files_under (a path) and [[attack.extra_file]] (folder form only)."""
    files_under = _relative_path(entry["files_under"], where, "files_under") if "files_under" in entry else ""
    extras = []
    for j, raw in enumerate(entry.get("extra_file", [])):
        ewhere = f"{where} extra_file #{j + 1}"
        if not isinstance(raw, dict) or "name" not in raw or set(raw) - {"name", "content", "repeat"} \
                or not isinstance(raw.get("content", ""), str):
            raise CorpusError(f"{ewhere}: needs name (and maybe content, repeat)")
        name = _relative_path(raw["name"], ewhere, "name")
        repeat = raw.get("repeat", 1)
        if not _is_int(repeat) or not 0 < repeat <= 100_000:
            raise CorpusError(f"{ewhere}: repeat must be a whole number in [1, 100000]")
        if repeat > 1 and "${index}" not in name:
            raise CorpusError(f"{ewhere}: a repeated file's name needs ${{index}}")
        extras.append(ExtraFile(name, raw.get("content", ""), repeat))
    if extras and form != "folder":
        raise CorpusError(f"{where}: [[attack.extra_file]] is for a folder; a zip has [[attack.zip_entry]]")
    return files_under, tuple(extras)


def _class_keys(entry: dict, where: str, scenario: str) -> tuple[str, bool]:
    """submission_id and neighbour_frozen, which only the class scenario has."""
    if scenario != "class":
        if "submission_id" in entry or "neighbour_frozen" in entry:
            raise CorpusError(f"{where}: submission_id and neighbour_frozen are for scenario = \"class\"")
        return "student-b", False
    submission_id = entry.get("submission_id", "student-b")
    if not isinstance(submission_id, str) or not submission_id or "/" in submission_id \
            or submission_id in (".", "..", "student-a") or submission_id.startswith("."):
        raise CorpusError(f"{where}: submission_id must be a file name other than student-a (the neighbour), not "
                          f"hidden, got {submission_id!r}")
    frozen = entry.get("neighbour_frozen", False)
    if not isinstance(frozen, bool):
        raise CorpusError(f"{where}: neighbour_frozen must be true or false")
    if entry.get("form", "folder") != "folder":
        raise CorpusError(f"{where}: a class-scenario case is a folder in the class folder (form = \"folder\")")
    return submission_id, frozen


MAX_NOTEBOOK_CELL = 64 << 20  # characters of a notebook case's module cell: a bomb, still one a test can write


def _notebook_key(entry: dict, where: str) -> NotebookCell | None:
    raw = entry.get("notebook")
    if raw is None:
        return None
    if not isinstance(raw, list) or len(raw) != 1 or not isinstance(raw[0], dict):
        raise CorpusError(f"{where}: at most one [[attack.notebook]] (the attacked module's)")
    raw = raw[0]
    nwhere = f"{where} notebook"
    if set(raw) - {"cell", "repeat", "end", "json"} or ("json" in raw) == bool(set(raw) & {"cell", "repeat", "end"}):
        raise CorpusError(f"{nwhere}: needs cell (and maybe repeat, end), or json")
    if "json" in raw:
        import json

        try:
            json.loads(raw["json"])
        except (TypeError, ValueError) as exc:
            raise CorpusError(f"{nwhere}: json is not a JSON value: {exc}") from None
        return NotebookCell(json=raw["json"])
    cell, end, repeat = raw.get("cell", ""), raw.get("end", ""), raw.get("repeat", 1)
    if not isinstance(cell, str) or not isinstance(end, str) or not (cell or end):
        raise CorpusError(f"{nwhere}: cell and end must be strings, not both empty")
    if not _is_int(repeat) or repeat < 1 or len(cell) * repeat + len(end) > MAX_NOTEBOOK_CELL:
        raise CorpusError(f"{nwhere}: repeat must be a whole number >= 1, the cell at most {MAX_NOTEBOOK_CELL} "
                          "characters")
    return NotebookCell(cell, repeat, end)


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _intake_keys(entry: dict, where: str):
    """The keys of a case that attacks the grader's intake: form, [[attack.link]], [[attack.zip_entry]], pad_to,
    refused (see attacks.toml)."""
    form = entry.get("form", "folder")
    if form not in FORMS:
        raise CorpusError(f"{where}: form {form!r} is not one of {FORMS}")
    links = []
    for j, raw in enumerate(entry.get("link", [])):
        lwhere = f"{where} link #{j + 1}"
        if not isinstance(raw, dict) or set(raw) != {"name", "target"} or not all(
                isinstance(raw[k], str) and raw[k] for k in raw):
            raise CorpusError(f"{lwhere}: needs exactly the non-empty string keys name, target")
        parts = Path(raw["name"]).parts
        if raw["name"].startswith("/") or ".." in parts or not parts:
            raise CorpusError(f"{lwhere}: name must be a path inside the submission, got {raw['name']!r}")
        links.append(Link(raw["name"], raw["target"]))
    if links and form != "folder":
        raise CorpusError(f"{where}: [[attack.link]] is for a folder; a zip has [[attack.zip_entry]] link = ...")
    entries = []
    for j, raw in enumerate(entry.get("zip_entry", [])):
        zwhere = f"{where} zip_entry #{j + 1}"
        if not isinstance(raw, dict) or set(raw) - {"name", "content", "zeros", "link", "repeat"} \
                or len(set(raw) & {"content", "zeros", "link"}) != 1:
            raise CorpusError(f"{zwhere}: needs name and exactly one of content, zeros, link (and maybe repeat)")
        if not isinstance(raw.get("name"), str) or not raw["name"]:
            raise CorpusError(f"{zwhere}: missing or empty string 'name'")
        for key in ("content", "link"):
            if key in raw and not isinstance(raw[key], str):
                raise CorpusError(f"{zwhere}: {key} must be a string")
        if "zeros" in raw and (not _is_int(raw["zeros"]) or not 0 < raw["zeros"] <= 1 << 31):
            raise CorpusError(f"{zwhere}: zeros must be a number of bytes in (0, 2 GiB]")
        repeat = raw.get("repeat", 1)
        if not _is_int(repeat) or not 0 < repeat <= 100_000:
            raise CorpusError(f"{zwhere}: repeat must be a whole number in [1, 100000]")
        if repeat > 1 and "${index}" not in raw["name"]:
            raise CorpusError(f"{zwhere}: a repeated entry's name needs ${{index}}")
        entries.append(ZipEntry(raw["name"], raw.get("content"), raw.get("zeros"), raw.get("link"), repeat))
    if entries and form != "zip":
        raise CorpusError(f"{where}: [[attack.zip_entry]] needs form = \"zip\"")
    pad_to = entry.get("pad_to", 0)
    if not _is_int(pad_to) or not 0 <= pad_to <= MAX_PAD:
        raise CorpusError(f"{where}: pad_to must be a number of bytes in [0, {MAX_PAD}]")
    refused = entry.get("refused", "")
    if not isinstance(refused, str):
        raise CorpusError(f"{where}: refused must be a string")
    if refused and (entry.get("passes") or "fails" in entry):
        raise CorpusError(f"{where}: a refused submission earns nothing: no passes or fails")
    return form, tuple(links), tuple(entries), pad_to, refused.strip()


def load_attacks(path: Path | str = ATTACKS_FILE) -> list[AttackCase]:
    """Read attacks.toml: its [[attack]] cases, in file order.

    Raises CorpusError when the file is malformed (unknown key or table, bad
    or duplicate id, unknown module or need, a patch or file touching another
    module than the case's, ...).
    """
    with open(path, "rb") as fh:
        data = tomllib.load(fh)
    if set(data) - {"attack"}:
        raise CorpusError(f"{path}: unknown tables {sorted(set(data) - {'attack'})}")
    entries = data.get("attack", [])
    if not isinstance(entries, list):
        raise CorpusError(f"{path}: 'attack' must be an array of tables ([[attack]])")
    cases = [_attack_from_entry(i, e) for i, e in enumerate(entries)]
    ids = [c.id for c in cases]
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    if dupes:
        raise CorpusError(f"{path}: duplicate ids {dupes}")
    return cases


def substitute(text: str, params: dict, *, case_id: str = "?") -> str:
    """Fill the ${name} placeholders of `text` from `params`; PatchError for a name without a value."""
    def fill(match):
        name = match.group(1)
        if name not in params:
            raise PatchError(f"case {case_id!r}: no value for the placeholder ${{{name}}}")
        return str(params[name])

    return _PLACEHOLDER_RE.sub(fill, text)


def _materialize_attack(case: AttackCase, dest: Path, template_dir: Path, params: dict) -> None:
    texts = {}
    for f in case.files:
        if f.source == "template":
            src = template_dir / f.name
            if not src.is_file():
                raise FileNotFoundError(f"template module missing: {src}")
            texts[f.name] = src.read_text(encoding="utf-8")
        else:
            texts[f.name] = f.content
    for patch in case.patches:
        text = texts.get(patch.file, (dest / patch.file).read_text(encoding="utf-8"))
        texts[patch.file] = apply_patch(text, patch, case_id=case.id)
    for name, text in texts.items():
        text = substitute(text, params, case_id=case.id)
        try:
            compile(text, str(dest / name), "exec")
        except SyntaxError as exc:
            raise PatchError(f"case {case.id!r}: {name} is not valid Python: {exc}") from exc
        (dest / name).write_text(text, encoding="utf-8")
    if case.pad_to:  # a module over the intake's size limit, still valid Python
        path = dest / f"{case.module}.py"
        size = path.stat().st_size
        line = "# " + "padding " * 9 + "\n"
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(line * max(0, (case.pad_to - size) // len(line) + 1))
    if case.notebook:
        _write_notebook(case, dest, template_dir)
    for link in case.links:
        path = dest / link.name
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.is_symlink() or path.is_file():
            path.unlink()
        os.symlink(substitute(link.target, params, case_id=case.id), path)


def _lay_out(case: AttackCase, dest: Path, params: dict) -> None:
    """A folder-form case: its files moved under `files_under`, then its [[attack.extra_file]] files written."""
    if case.files_under:
        under = dest / case.files_under
        under.mkdir(parents=True, exist_ok=True)
        top = Path(case.files_under).parts[0]
        for entry in sorted(os.listdir(dest)):
            if entry != top:
                os.replace(dest / entry, under / entry)
    for extra in case.extra_files:
        for index in range(extra.repeat):
            values = {**params, "index": index}
            path = dest / substitute(extra.name, values, case_id=case.id)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(substitute(extra.content, values, case_id=case.id), encoding="utf-8")


def _write_notebook(case: AttackCase, dest: Path, template_dir: Path) -> None:
    """The student template's notebook of the case's module, its module cell's source as the case gives it."""
    import json

    from autograder.release import NOTEBOOKS, module_cell

    name = NOTEBOOKS[case.module]
    nb = json.loads((template_dir / name).read_text(encoding="utf-8"))
    cell = case.notebook
    module_cell(nb, case.module)["source"] = json.loads(cell.json) if cell.json is not None \
        else cell.cell * cell.repeat + cell.end
    (dest / name).write_text(json.dumps(nb), encoding="utf-8")


def _zip_case(case: AttackCase, dest: Path, params: dict) -> Path:
    """`<dest>.zip`: the regular files of `dest` under ZIP_FOLDER/, then the case's zip entries, as named."""
    out = dest.parent / f"{dest.name}.zip"
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Duplicate name": a case may shadow a file of the folder on purpose
        for path in sorted(dest.rglob("*")):
            if path.is_file() and not path.is_symlink():
                zf.write(path, f"{case.files_under or ZIP_FOLDER}/{path.relative_to(dest).as_posix()}")
        for entry in case.zip_entries:
            for index in range(entry.repeat):
                values = {**params, "index": index}
                info = zipfile.ZipInfo(substitute(entry.name, values, case_id=case.id), (2024, 1, 1, 0, 0, 0))
                info.compress_type = zipfile.ZIP_DEFLATED
                info.external_attr = ((stat.S_IFLNK | 0o777) if entry.link is not None else (stat.S_IFREG | 0o644)) << 16
                if entry.zeros is not None:
                    with zf.open(info, "w", force_zip64=entry.zeros > (1 << 30)) as fh:
                        for start in range(0, entry.zeros, 1 << 20):
                            fh.write(bytes(min(1 << 20, entry.zeros - start)))
                else:
                    text = entry.link if entry.link is not None else entry.content
                    zf.writestr(info, substitute(text, values, case_id=case.id).encode())
    return out
