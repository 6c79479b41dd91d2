"""One file of each module: a submission that holds a module twice (`attention.py` and `01_attention.ipynb`,
`masks.py` and `masks (1).py`) is graded on the file that holds the student's work (`one_form`).

A file whose code is still the released template's (its `code_digest` is the one the release step stored in
autograder/submission/released.py) holds none; when a .py file and a notebook both hold work, the `.py` file
is graded. The file left out is named in the notes, with the reason. When two files of one form both hold
work, which one to grade is not clear: that module is not graded, one note names both files, and the other
modules are graded as usual. Stdlib only (a notebook's code is read with autograder.submission.notebooks,
which imports nbformat only when a notebook is read).
"""
from __future__ import annotations

import ast
import hashlib
import io
import tokenize
from pathlib import Path

from autograder import PARTS
from autograder.submission.intake import may_be_module, modules_named, shown
from autograder.submission.notebooks import handed_out, notebook_name, notebook_source


def code_digest(source) -> str | None:
    """A digest of a module's code that only the code changes: docstrings, comments, blank lines and
    trailing spaces do not count (nor CRLF line ends). None when `source` is not valid Python.

    Made of the source text itself (never of a syntax-tree dump, which differs between Python
    versions), so that a digest stored at release time holds on any Python that grades.
    """
    if isinstance(source, bytes):
        source = source.decode("utf-8", "replace")
    source = source.replace("\r\n", "\n").replace("\r", "\n")
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return None
    lines = source.split("\n")
    for node in ast.walk(tree):  # docstrings: the first statement of a module, class or function, if a str
        body = getattr(node, "body", None)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and body:
            first = body[0]
            if (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
                    and isinstance(first.value.value, str)):
                for row in range(first.lineno - 1, first.end_lineno):
                    lines[row] = ""
    try:
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            if token.type == tokenize.COMMENT:  # always the end of its line
                row, col = token.start
                lines[row - 1] = lines[row - 1][:col]
    except (tokenize.TokenError, SyntaxError):
        pass  # parsed, but not tokenized: compare with the comments in
    code = "\n".join(line.rstrip() for line in lines if line.strip())
    return hashlib.sha256(code.encode("utf-8")).hexdigest()


def _template_digests() -> dict:
    """{module: {"py": digest, "ipynb": digest}} of the released template (autograder/submission/released.py)."""
    try:
        from autograder.submission.released import TEMPLATE_DIGESTS
    except ImportError:  # a kit never released: no form counts as the template
        return {}
    return TEMPLATE_DIGESTS


def form_digest(name, data: bytes) -> str | None:
    """The code digest of one form of a module: a .py file's code, or the code a notebook is graded on
    (autograder.submission.notebooks: its imports, functions, classes and constants). None when it cannot be read."""
    if str(name).lower().endswith(".ipynb"):
        try:
            return code_digest(notebook_source(data, Path(str(name)).name))
        except ValueError:
            return None
    return code_digest(data)


def is_template(module, name, data: bytes) -> bool:
    """True when the file `name` (`attention.py`, `01_attention.ipynb`) holds no student work: its code is
    the released template's."""
    kind = "ipynb" if str(name).lower().endswith(".ipynb") else "py"
    stored = _template_digests().get(module, {}).get(kind)
    return stored is not None and form_digest(name, data) == stored


#: The most files of one module that are read to choose the one to grade (`one_form`): past it, the module's
#: files are refused unread.
MAX_CANDIDATES = 8


def _listed(names, cap=4) -> str:
    """"a", "a and b", "a, b and c", "a, b, c, d and 3 more files"."""
    names = list(names)
    if len(names) > cap:
        names = names[:cap] + [f"{len(names) - cap:,} more files"]
    return " and ".join(", ".join(names).rsplit(", ", 1)) if len(names) > 1 else "".join(names)


def _why_left_out(dropped, kept, blank, same) -> str:
    """Why the file `dropped` of a module is not graded, `kept` being graded ("(... )" of one_form's note);
    `same`: the two hold the same code."""
    is_py = {n: n.lower().endswith(".py") for n in (dropped, kept)}

    def called(name, other):  # the form's word when the two are of two forms (as notes said before), else its name
        return "the notebook" if is_py[other] and not is_py[name] else shown(name)

    if blank[dropped] and blank[kept]:
        return "both are the untouched template"
    if blank[dropped]:
        return f"{called(dropped, kept)} is the untouched template and {called(kept, dropped)} holds your work"
    if is_py[dropped] == is_py[kept] and same:
        return "both hold the same code"
    return "both hold work, and then the .py file is graded: hand in one form of each module, not both"


def one_form(files: dict, prefix="") -> tuple[dict, dict]:
    """Keep at most one file of each module of `files` ({name: bytes}); a module's files are those whose names
    stand for it by the name rule (`modules_named`: `masks.py`, `masks (1).py`, `03_masks.ipynb`,
    `bea_03_masks.ipynb`).

    Of a module's files, those that hold work count: a file identical to the released template's form
    (`is_template`) holds none. One file with work (or several files of one form with the same code, as
    `code_digest` reads it: an upload made twice): it is graded. Several: when the .py files among them hold
    one code, a .py file is graded (a module handed in as a .py file and as a notebook); otherwise the module
    is not graded at all, and one note names its files with work (`03_masks.ipynb and bea_03_masks.ipynb: not graded:
    ...`), so that a student never has the wrong one graded silently. No file with work: one is kept (a .py
    file first, then the released name), its module's checks say it is the template. Of files that tie, the
    .py file is kept first, then the file of the released name, then the first by name.

    A file whose name holds several modules' names (`03_masks_and_04_mha.ipynb`) is not graded, and named.
    A module with more than MAX_CANDIDATES files is refused without reading them. Returns (files kept,
    {shown name: why it is not graded}): one note for a module refused, and one note for each reason a file was
    left out for another, naming the files left out and those graded instead (the five notebooks beside the
    graded .py files: one line, not five). A file left out that is the untouched template, beside a graded .py
    file or another untouched one, gets none: that the .py file is graded is the rule, and the checks of a
    module never started say so.
    """
    kept, notes, by_module = dict(files), {}, {}
    instead = {}  # kind of reason -> [(file not graded, file graded instead, why)], for one note a kind
    for name in sorted(files):
        found = modules_named(name) if may_be_module(name) else ()
        if len(found) > 1:
            del kept[name]
            shown_name = shown(prefix + name)
            notes[shown_name] = (f"{shown_name}: not graded: its name holds the names of {len(found)} modules "
                                 f"({_listed(sorted(found, key=PARTS.index))}), and a file stands for one module: "
                                 f"hand in each module in a file of its own, named after it "
                                 f"({_listed(notebook_name(m) for m in sorted(found, key=PARTS.index))})")
        elif found:
            by_module.setdefault(found[0], []).append(name)
    for module in handed_out():  # the parts handed out (autograder.MODULES with no course file)
        released = (f"{module}.py", notebook_name(module))
        names = sorted(by_module.get(module, ()), key=lambda n: (not n.lower().endswith(".py"), n not in released, n))
        if len(names) < 2:
            continue
        about = (f"a file whose name is {module}.py or ends with {notebook_name(module)[:-6]} (as "
                 f"{notebook_name(module)} or bea_{notebook_name(module)}) stands for {module}")
        if len(names) > MAX_CANDIDATES:
            for name in names:
                del kept[name]
            shown_names = [shown(prefix + n) for n in names]
            notes[shown_names[0]] = (f"{_listed(shown_names)}: not graded: {len(names):,} files stand for the module "
                                     f"{module}, more than the {MAX_CANDIDATES} compared: hand in one file of "
                                     f"{module} ({about})")
            continue
        stored = _template_digests().get(module, {})
        digest = {n: form_digest(n, files[n]) for n in names}
        blank = {n: digest[n] is not None and digest[n] == stored.get("py" if n.lower().endswith(".py") else "ipynb")
                 for n in names}
        work = [n for n in names if not blank[n]]
        py_work = [n for n in work if n.lower().endswith(".py")]
        codes = {(n.lower().endswith(".py"), digest[n] or n) for n in work}  # unreadable: a code of its own
        py_codes = {code for code in codes if code[0]}
        if len(codes) > 1 and len(py_codes) != 1:  # which one to grade is not clear: none is
            for name in names:
                del kept[name]
            shown_work = [shown(prefix + n) for n in work]
            untouched = [shown(prefix + n) for n in names if blank[n]]
            every = "both" if len(work) == 2 else "all"
            notes[shown_work[0]] = (
                f"{_listed(shown_work)}: not graded: {every} are files of the module {module} and {every} hold "
                f"work, and only one file of a module is graded: hand in one of them, and remove or rename the "
                f"others ({about})"
                + (f"; {_listed(untouched)} {'is' if len(untouched) == 1 else 'are'} the untouched template"
                   if untouched else ""))
            continue
        keep = (py_work or work or names)[0]
        for name in names:
            if name != keep:
                del kept[name]
                same = digest[name] is not None and digest[name] == digest[keep]
                if blank[name] and (blank[keep] or keep.lower().endswith(".py")):
                    continue  # an untouched template beside the graded file: nothing to say (its checks say the rest)
                instead.setdefault(_left_out_kind(name, keep, blank, same), []).append(
                    (shown(prefix + name), shown(prefix + keep), _why_left_out(name, keep, blank, same)))
    for kind, pairs in instead.items():  # one note for each reason, however many modules it holds for
        if len(pairs) == 1:
            (name, keep, why), = pairs
            notes[name] = f"{name}: not graded: {keep} was graded instead ({why})"
        else:
            names, keeps, cap = [n for n, _, _ in pairs], [k for _, k, _ in pairs], len(handed_out())
            notes[names[0]] = (f"{_listed(names, cap)}: not graded: {_listed(keeps, cap)} were "
                               f"graded instead ({_LEFT_OUT_MANY.get(kind, pairs[0][2])})")
    return kept, notes


#: Why the files of several modules are not graded, one file graded instead of each (`one_form`), by the
#: kind of the reason (`_left_out_kind`): the plural of `_why_left_out` (where it names the two files' forms).
_LEFT_OUT_MANY = {
    ("template", True, False): "the .py files are the untouched template and the notebooks hold your work",
    ("template", False, True): "the notebooks are the untouched template and the .py files hold your work",
    ("template", True, True): "those not graded are the untouched template and those graded hold your work",
    ("template", False, False): "those not graded are the untouched template and those graded hold your work",
    ("same", True, True): "each holds the same code as the one graded",
    ("same", False, False): "each holds the same code as the one graded",
}  # ("work", False, True): "both hold work, and then the .py file is graded: ...", the same words for several


def _left_out_kind(dropped, kept, blank, same) -> tuple:
    """The kind of `_why_left_out`'s reason, and the forms of the two files (is each a .py file): the notes of
    one kind are said in one (`one_form`)."""
    forms = (dropped.lower().endswith(".py"), kept.lower().endswith(".py"))
    if blank[dropped]:
        return ("template", *forms)
    if forms[0] == forms[1] and same:
        return ("same", *forms)
    return ("work", *forms)
