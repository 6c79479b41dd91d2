"""The submission corpus: planted bugs and correct alternatives, as data.

The cases live in ``submissions.toml`` next to this file; each one is the
reference solution with a few textual patches applied. This module reads the
file and writes a case out as a submission folder::

    from tests.corpus import load_corpus, materialize

    corpus = load_corpus()
    for case in corpus["bug"]:
        folder = materialize(case, tmp_path / case.id, SOLUTIONS_DIR)

``tests/test_corpus.py`` grades every case with the real engine.

``attacks.toml`` holds the adversarial corpus: hostile submissions, each
shaped so that it would earn points if its attack worked, with what it may
earn. ``load_attacks`` reads it; ``materialize`` writes an attack case too
(its module replaced wholesale or patched, ``${name}`` placeholders filled
from ``params``). ``tests/test_attacks.py`` grades every attack case.
"""
from __future__ import annotations

import re
import shutil
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "ATTACKS_FILE",
    "ATTACK_KINDS",
    "AttackCase",
    "CORPUS_FILE",
    "KINDS",
    "MODULES",
    "MODULE_FILES",
    "Case",
    "CorpusError",
    "Patch",
    "ModuleFile",
    "NEEDS",
    "PatchError",
    "SCENARIOS",
    "all_cases",
    "load_attacks",
    "load_corpus",
    "materialize",
    "substitute",
]

#: The five modules of a submission, in the order of the contract.
MODULES: tuple[str, ...] = ("attention", "heads", "masks", "mha", "positional")
#: Their file names.
MODULE_FILES: tuple[str, ...] = tuple(f"{m}.py" for m in MODULES)
#: The tables of submissions.toml: planted bugs, correct alternatives, hostile or broken submissions.
KINDS: tuple[str, ...] = ("bug", "alternative", "hostile")
#: The corpus file.
CORPUS_FILE = Path(__file__).resolve().with_name("submissions.toml")
#: The adversarial corpus.
ATTACKS_FILE = Path(__file__).resolve().with_name("attacks.toml")
#: The attacks the adversarial corpus must cover (an attack case's `attack`); more may be added.
ATTACK_KINDS: tuple[str, ...] = (
    "exit",  # sys.exit(0) / os._exit(0), at import or inside a call
    "infinite-loop",
    "memory-bomb",
    "fork-bomb",
    "patched-comparisons",  # torch.allclose, torch.equal, torch.testing.assert_close, numpy's comparisons
    "lying-objects",  # tensor subclasses and objects whose __eq__ is always true
    "fake-results-output",  # printing fake pytest or JSON results
    "results-json",  # writing results.json files wherever reachable
    "patched-timers",  # patching time.perf_counter & co. and sleeping in the fused forward
    "timing-replay",  # answering timed passes from a cache or a table of the timing inputs
    "timing-burners",  # busy processes that run while the grader times the reference modules
    "kit-files",  # reading the kit's files (reference, hidden graders)
    "network",
    "gc-search",  # looking for the expected tensors in gc.get_objects()
    "env-tokens",  # secrets in os.environ or /proc/*/environ
    "other-student-data",
)
#: What an attack case may need from the sandbox before it can be run safely or meaningfully.
NEEDS: tuple[str, ...] = ("isolation", "process-limit", "memory-limit")
#: Scenarios: one submission graded alone, or next to another student's submission.
SCENARIOS: tuple[str, ...] = ("single", "other-student")
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
class AttackCase:
    """One hostile submission of attacks.toml and what it may earn.

    The submission is the reference solution with `module` attacked: replaced
    by `files` and/or patched by `patches`. In that module exactly the checks
    named in `passes` pass (or, with `fails`, exactly those fail); every
    other module keeps full marks; grading ends within `max_seconds`.
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


def _case_from_entry(kind: str, index: int, entry: dict) -> Case:
    where = _check_header(kind, index, entry, {"id", "module", "description", "patch"}, ("id", "module", "description"))
    case_id = entry["id"]
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


def materialize(case: Case | AttackCase, dest: Path | str, solutions_dir: Path | str, *,
                template_dir: Path | str | None = None, params: dict | None = None) -> Path:
    """Write `case` as a submission folder: the five solution modules, patched.

    Copies attention.py, heads.py, masks.py, mha.py and positional.py from
    `solutions_dir` into `dest` (created if needed), applies the case's patches
    in order and returns `dest`. Raises PatchError when a `find` string does not
    occur exactly once, or when a patched module is no longer valid Python.

    For an AttackCase, the attacked module is first replaced by the case's
    [[attack.file]] (its content, or the stub of `template_dir`, by default
    the student_template next to `solutions_dir`), then patched, then its
    ${name} placeholders are filled from `params`.
    """
    dest = Path(dest)
    solutions_dir = Path(solutions_dir)
    dest.mkdir(parents=True, exist_ok=True)
    for name in MODULE_FILES:
        src = solutions_dir / name
        if not src.is_file():
            raise FileNotFoundError(f"reference module missing: {src}")
        shutil.copyfile(src, dest / name)
    if isinstance(case, AttackCase):
        template = Path(template_dir) if template_dir is not None else solutions_dir.parent / "student_template"
        _materialize_attack(case, dest, template, params or {})
        return dest
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


# -- the adversarial corpus (attacks.toml) -----------------------------------------
_ATTACK_KEYS = {"id", "attack", "module", "description", "needs", "passes", "fails", "max_seconds", "call_timeout",
                "probe", "scenario", "known_vulnerability", "patch", "file"}


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
    call_timeout = entry.get("call_timeout")
    if call_timeout is not None and (not isinstance(call_timeout, (int, float)) or isinstance(call_timeout, bool)
                                     or not 0 < call_timeout < max_seconds):
        raise CorpusError(f"{where}: call_timeout must be a number of seconds in (0, max_seconds)")
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
    if not files and not patches:
        raise CorpusError(f"{where}: needs an [[attack.file]] or at least one [[attack.patch]]")
    return AttackCase(case_id, entry["attack"], module, entry["description"].strip(), tuple(patches), tuple(files),
                      needs, passes, fails, float(max_seconds),
                      None if call_timeout is None else float(call_timeout), entry.get("probe", ""), scenario,
                      entry.get("known_vulnerability", "").strip())


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
