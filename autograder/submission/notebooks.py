"""Notebook submissions: turn a student's notebook into the module of the same name.

`01_attention.ipynb` becomes `attention.py`. The module keeps what a module
is made of: the notebook's imports, functions, classes and constant
assignments, in cell order. Everything else a notebook holds (plots and the
imports of plotting packages, prints, experiments, self-check asserts, a cell
that raises) is left out, so it can neither break grading nor slow it down. A cell that does not parse is left
out too, unless it is the notebook's module cell (the nbgrader solution cell
`<module>-code`): then its syntax error is kept and reported at import.

Line numbers are kept: each cell that contributes code becomes a line
`# --- cell N` followed by the cell's own lines, those left out blanked, so
that line k of cell N sits k lines below its marker (`cell_of` and `CellLines` map a line
of the module back to the notebook's cell and line, and `in_notebook_terms` puts the
lines that a grader's message names in those terms).

Reads notebooks with nbformat; stdlib otherwise, no torch. A notebook file is
read through autograder.submission.intake (a regular file of the submission, never
through a link, and no larger than its limit).
"""
from __future__ import annotations

import ast
import bisect
import builtins
import contextvars
import json
import re
import sys
from contextlib import contextmanager
from pathlib import Path

from autograder import MODULES, PARTS

#: The words of a file name's stem, for the name rule (`modules_named`): a copy mark `(N)`, a run of ASCII
#: digits, or a run of other letters and digits; everything else (`_`, `-`, spaces, dots, brackets) separates words.
NAME_WORDS = re.compile(r"\([ \t]*[0-9]+[ \t]*\)|[0-9]+|[^\W0-9_]+")
#: A stem longer than this stands for no module (no file system gives a file a longer name).
MAX_NAME = 255
_KEEP = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
# Packages that only draw or display: their imports are left out with the plots that use them.
DISPLAY_ONLY = ("matplotlib", "seaborn", "IPython", "plotly", "ipywidgets")


#: The parts handed out, as the intake takes a submission in (`handed_out`): autograder.MODULES with no course
#: file, the course file's parts (any of autograder.PARTS, an optional one too) under one (`handing_out`).
_HANDED_OUT = contextvars.ContextVar("handed_out", default=MODULES)


def handed_out() -> tuple[str, ...]:
    """The parts handed out, in teaching order: the modules the name rule (`modules_named`) knows, the intake
    takes and a submission is graded on. autograder.MODULES unless a course file's parts are handed out
    (`handing_out`, which autograder.submission.take.taken sets for the intake of a submission under a course)."""
    return _HANDED_OUT.get()


@contextmanager
def handing_out(parts=None):
    """Within it, the parts `parts` (a course file's: any of autograder.PARTS, in any order) are those handed
    out (`handed_out`), in teaching order; None: autograder.MODULES, as with no course file."""
    token = _HANDED_OUT.set(MODULES if parts is None else tuple(p for p in PARTS if p in parts))
    try:
        yield
    finally:
        _HANDED_OUT.reset(token)


def load_nbformat():
    """nbformat, imported without a grammar that nothing of the kit's uses: the kit's one way to import it.

    nbformat imports jsonschema, which imports rfc3987-syntax (it comes with the notebook stack, for
    jsonschema's optional "iri" format checks) when it can. That module builds 38 Lark parsers as it is
    imported: ~0.9 s of CPU, nine tenths of importing nbformat, paid by every grading of a notebook before
    its processes start. Neither nbformat's validation nor nbgrader's gradebook checks string formats, so the
    kit's processes leave it out, as if it were not installed (jsonschema then checks no "iri" format).
    Where jsonschema is imported already, nothing changes."""
    sys.modules.setdefault("rfc3987_syntax", None)  # `import rfc3987_syntax` raises ImportError, which jsonschema expects
    import nbformat

    return nbformat


def _is_display_import(node) -> bool:
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    elif isinstance(node, ast.ImportFrom):
        names = [node.module or ""]
    else:
        return False
    return all(n.split(".")[0] in DISPLAY_ONLY for n in names)


_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def _number(word) -> bool:
    return word.isascii() and word.isdigit()


def modules_named(stem) -> tuple[str, ...]:
    """The name rule: the modules the stem of a submission's file name (`bea_03_masks` of bea_03_masks.ipynb)
    stands for. The same rule for notebooks and .py files.

    1. The stem is cut into words: a copy mark `(N)`, a run of digits, a run of letters (`Copy of 03-Masks (1)`
       -> copy, of, 03, masks, (1)); any other character (`_`, `-`, a space, a dot) only separates words, and
       letters are compared in lower case.
    2. Copy suffixes that browsers, file managers and Jupyter add are dropped from the end, as many as there
       are: `(N)` (`03_masks (1)`, `03_masks(2)`), `copy` and `copy N` (`03_masks copy 2`, `03_masks-Copy1`,
       `03_masks - Copy`). A plain trailing number (`03_masks_2`) or word (`03_masks_old`) is not one.
    3. What is left must be exactly the module's name (`masks`) or end with the module's notebook name, its
       number then its name (`03_masks`, `3-masks`, `bea_03_masks`, `Copy of 03_masks`, `hw03_masks`): any
       words may come before the number, none after the name, and the number must be the module's own (3 for
       masks). A name without the number stands for a module only when it is the module's name alone
       (`bea_masks`, `test_masks`, `masks_old` stand for none).
    4. A name that passes 3 but also holds another module's name as a word
       (`03_masks_and_04_mha`, `attention_04_mha`) stands for none of them alone: it returns every module it
       names, the one it ends with first, and such a file is refused, naming it.

    Returns (module,), () for a name that stands for no module, or two or more modules (step 4). Linear in the
    length of the stem; a stem over MAX_NAME characters stands for none.
    """
    stem = str(stem)
    if len(stem) > MAX_NAME:
        return ()
    words = NAME_WORDS.findall(stem.translate(_ASCII_LOWER))  # (only A-Z: no other letter becomes a module's)
    while words:  # 2: copy suffixes, from the end
        if words[-1].startswith("(") or words[-1] == "copy":
            words.pop()
        elif len(words) > 1 and words[-2] == "copy" and _number(words[-1]):
            del words[-2:]
        else:
            break
    modules = handed_out()
    if len(words) == 1 and words[0] in modules:  # 3: the module's name alone
        module = words[0]
    elif (len(words) > 1 and words[-1] in modules and _number(words[-2])
          and words[-2].lstrip("0") == str(PARTS.index(words[-1]) + 1)):
        module = words[-1]
    else:
        return ()
    others = tuple(m for m in modules if m != module and m in words)  # 4
    return (module, *others)


def notebook_name(module) -> str:
    """The module's notebook as released: 01_attention.ipynb, ...: its place in autograder.PARTS, and its name."""
    return f"{PARTS.index(module) + 1:02d}_{module}.ipynb"


def module_of_notebook(path: Path) -> str | None:
    """The contract module a notebook stands for, by the name rule (`modules_named`): `01_attention.ipynb`,
    `bea_01_attention.ipynb`, `01_attention (1).ipynb` -> "attention"; None for a name that stands for no
    module or for several."""
    found = modules_named(Path(path).stem)
    return found[0] if len(found) == 1 else None


def _is_constant(node) -> bool:
    if not isinstance(node, (ast.Assign, ast.AnnAssign)) or node.value is None:
        return False
    try:
        ast.literal_eval(node.value)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False
    return True


def _strip_magics(source: str) -> str:
    """IPython magics and shell escapes become blank lines (line numbers stay).

    Only a line that starts a statement can be a magic: a line inside brackets, a string or after a
    backslash is a continuation, whatever its first character (black's style puts `% b` or `!= c` there).
    One pass over the characters, tracking brackets, strings and comments.
    """
    out = []
    depth, quote, continued = 0, None, False  # open brackets, the open string's quote, a trailing backslash
    for line in source.splitlines():
        if depth == 0 and quote is None and not continued and line.lstrip().startswith(("%", "!")):
            out.append("")
            continue
        out.append(line)
        continued = False
        i, n = 0, len(line)
        while i < n:
            c = line[i]
            if quote is not None:
                if c == "\\":
                    i += 2
                    continue
                if line.startswith(quote, i):
                    i += len(quote)
                    quote = None
                    continue
                i += 1
                continue
            if c == "#":
                break
            if c in "\"'":
                quote = line[i:i + 3] if line[i:i + 3] in ('"""', "'''") else c
                i += len(quote)
                continue
            if c in "([{":
                depth += 1
            elif c in ")]}":
                depth = max(0, depth - 1)
            elif c == "\\" and i == n - 1:
                continued = True
            i += 1
        if quote is not None and len(quote) == 1 and not line.endswith("\\"):
            quote = None  # a one-quote string ends with its line (else it is a syntax error anyway)
    return "\n".join(out)


def _is_module_cell(cell, module) -> bool:
    meta = cell.get("metadata", {}).get("nbgrader", {})
    return meta.get("grade_id") == f"{module}-code" or bool(meta.get("solution"))


CHECK_HELPERS = "check-helpers"  # the grade id of each notebook's cell of the check cells' helpers


def check_cell_id(cell) -> str | None:
    """The nbgrader grade id of one of the release's public check cells ("check-...", the helpers' cell
    CHECK_HELPERS among them: the checks of a part, written from parts/<name>/checks.py); None for any other cell,
    whatever its metadata holds (a submitted notebook's are the student's)."""
    meta = cell.get("metadata") if isinstance(cell, dict) else None
    meta = meta.get("nbgrader") if isinstance(meta, dict) else None
    grade_id = meta.get("grade_id") if isinstance(meta, dict) else None
    return grade_id if isinstance(grade_id, str) and grade_id.startswith("check-") else None


def _is_check_cell(cell, module) -> bool:
    """A check cell checks the module and is not of it; a student's cell that claims the name only leaves its own
    code out of what is graded."""
    return check_cell_id(cell) is not None and not _is_module_cell(cell, module)


MAX_CELL_CHARS = 200_000  # a cell longer than this is not parsed here (a module cell of the kit is ~5,000)


def _cell_text(cell) -> str | None:
    """A code cell's source as one string, or None when the cell is no such thing (schema-invalid)."""
    source = cell.get("source") if isinstance(cell, dict) else None
    if isinstance(source, list) and all(isinstance(s, str) for s in source):
        source = "".join(source)
    return source if isinstance(source, str) else None


TOO_DEEP = "nests deeper than Python's parser can hold"


def _parse(source: str):
    """The cell's module AST; None when it does not parse (a syntax error: the student process raises it
    with its line), TOO_DEEP when the parser itself gives up (RecursionError, MemoryError)."""
    try:
        return ast.parse(source)
    except (SyntaxError, ValueError):
        return None
    except (RecursionError, MemoryError):
        return TOO_DEEP


def _bound_names(node) -> set[str]:
    """The names an assignment binds at module level (`A = B = ...`, `A, B = ...`, `A: int = ...`)."""
    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
    return {n.id for target in targets for n in ast.walk(target) if isinstance(n, ast.Name)}


def _loaded_names(node) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def _free_names(node) -> set[str]:
    """The global names `node` may read: for a function, what it loads and does not bind itself
    (parameters, its own assignments and imports); for a class, the same for each method."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
        bound = {a.arg for a in ast.walk(node.args) if isinstance(a, ast.arg)}
        bound |= {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)}
        bound |= {(a.asname or a.name).split(".")[0] for n in ast.walk(node) if isinstance(n, (ast.Import,
                  ast.ImportFrom)) for a in n.names}
        return _loaded_names(node) - bound
    if isinstance(node, ast.ClassDef):
        names = set().union(*(_loaded_names(n) for n in node.bases + node.keywords + node.decorator_list))
        for item in node.body:
            names |= _free_names(item)
        return names
    return _loaded_names(node)


def _binds(node) -> set[str]:
    """The module-level names a kept statement binds."""
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return {(a.asname or a.name).split(".")[0] for a in node.names}
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {node.name}
    return _bound_names(node)


def _module_nodes(tree) -> list:
    """The statements of a cell a module keeps for sure: imports (not of display packages), functions,
    classes and literal constants."""
    return [node for node in tree.body
            if (isinstance(node, _KEEP) and not _is_display_import(node)) or _is_constant(node)]


def notebook_to_source(nb, module: str, name: str = "notebook", *, too_long=frozenset()) -> str:
    """The Python source of `module` taken from the notebook `nb` (an nbformat node).

    Each cell that contributes becomes `# --- cell N` (N counts every cell, markdown included, from 1)
    and then the cell's lines, with those left out blank: line k of the cell is k lines below the marker.

    The release's check cells (`_is_check_cell`) are left out: they check the module, they are not of it.
    Besides imports, functions, classes and literal constants, an assignment is kept when it binds a name
    that the kept code reads (`NEG_INF = float("-inf")` used by a function), and so on for what that
    assignment reads; an experiment (`out = mha(batch)`) binds nothing the module reads and stays out.
    A cell longer than MAX_CELL_CHARS is not parsed: the module cell then raises ImportError saying so.
    `too_long`: the numbers of cells already emptied for being too long (`_empty_long_cells`).
    """
    cells = []  # (index, source or why it was not read, tree or None, is the module cell)
    unread = set()  # indexes of the cells not read
    for index, cell in enumerate(nb.get("cells") or [], 1):
        if not isinstance(cell, dict) or cell.get("cell_type") != "code" or _is_check_cell(cell, module):
            continue
        is_module = _is_module_cell(cell, module)
        source = _cell_text(cell)
        why = None
        if source is None:
            why = "has no text as its source (not a string or a list of strings)"
        elif len(source) > MAX_CELL_CHARS or index in too_long:
            why = f"holds more than {MAX_CELL_CHARS:,} characters"
        else:
            source = _strip_magics(source)
            tree = _parse(source)
            why = TOO_DEEP if tree is TOO_DEEP else None
        if why is not None:
            unread.add(index)
            cells.append((index, why, None, is_module))
            continue
        cells.append((index, source, tree, is_module))
    sure = [node for _, _, tree, _ in cells if tree is not None for node in _module_nodes(tree)]
    kept = {id(node) for node in sure}
    available = set(dir(builtins)).union(*(_binds(node) for node in sure))
    assignments = [node for _, _, tree, _ in cells if tree is not None for node in tree.body
                   if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None
                   and id(node) not in kept]
    needed = set().union(*(_free_names(node) for node in sure))
    grew = True
    while grew:  # what the kept code reads, and what those assignments read in turn
        grew = False
        for node in assignments:
            if (id(node) not in kept and _bound_names(node) & needed
                    and _loaded_names(node.value) <= available | needed):
                kept.add(id(node))
                needed |= _loaded_names(node.value)
                available |= _bound_names(node)
                grew = True
    parts = [f'"""{module}.py, taken from {_in_docstring(name)}: its imports, functions, classes and constants."""']
    for index, source, tree, is_module in cells:
        if index in unread:  # `source` says why: the module cell raises it, any other is left out
            if is_module:
                parts.append(f"# --- cell {index} (not read)\nraise ImportError("
                             f"{f'cell {index} of {name} {source}: it was not read'!r})")
            continue
        if tree is None:
            if is_module:
                parts.append(f"# --- cell {index} (does not parse)\n{source}")
            continue
        lines = source.splitlines()
        out = [""] * len(lines)
        for node in tree.body:
            if id(node) in kept:
                start = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
                out[start - 1:node.end_lineno] = lines[start - 1:node.end_lineno]
        while out and not out[-1].strip():
            out.pop()
        if out:
            parts.append(f"# --- cell {index}\n" + "\n".join(out))
    return "\n\n".join(parts) + "\n"


def _in_docstring(name) -> str:
    """A notebook's file name as the first line of the module made of it shows it: a backslash and a quote
    escaped, and any character that is not printable (a newline, a tab) written as its escape, kept as such in
    the string (`\\n`, two characters), so that the line stays one line of one string whatever the student named
    the file (the module's lines keep their cells' numbering), and the docstring holds no line break for Python
    3.13's compiler to dedent."""
    return "".join("\\" + c if c in '"\\' else c if c.isprintable()
                   else "\\" + c.encode("unicode_escape").decode("ascii") for c in str(name))


_MARKER = re.compile(r"# --- cell (\d+)\b")


class CellLines:
    """Where each line of a module made by `notebook_to_source` sits in its notebook: read from the module's text
    once, then each look-up takes O(log n), whatever line number it is asked about (a number read from a
    student's traceback: any size)."""

    def __init__(self, source: str):
        lines = source.splitlines()
        self._rows = [row for row, line in enumerate(lines, 1) if line.startswith("# --- cell ")
                      and _MARKER.match(line)]  # the markers' line numbers, in order
        self._cells = [int(_MARKER.match(lines[row - 1])[1]) for row in self._rows]
        self._size = len(lines)

    def __call__(self, lineno) -> tuple[int, int] | None:
        """(cell, line in that cell) of line `lineno` of the module; None for a line outside the cells (the
        module's docstring, a marker, a line past the end)."""
        if not isinstance(lineno, int) or not 0 < lineno <= self._size:
            return None
        at = bisect.bisect_right(self._rows, lineno) - 1  # the last marker at or above the line
        return (self._cells[at], lineno - self._rows[at]) if at >= 0 and self._rows[at] < lineno else None


def cell_of(source: str, lineno: int) -> tuple[int, int] | None:
    """(cell, line in that cell) of line `lineno` of a module made by `notebook_to_source`; None for a line
    outside the cells (the module's docstring)."""
    return CellLines(source)(lineno)


def place(notebook: str, cell: int, line: int) -> str:
    """How a line of a notebook is named to its student, as the self-check names it
    (autograder/selfcheck.py, `_place`): "01_attention.ipynb, cell 7, line 3"."""
    return f"{notebook}, cell {cell}, line {line}"


#: A line of a module named in a message: `File "mha.py", line 154` (a traceback's) or `mha.py, line 154`.
_MODULE_LINE = re.compile(r'(?P<quote>"?)\b(?P<module>' + "|".join(PARTS)
                          + r')\.py(?P=quote), line (?P<line>[0-9]{1,9})(?![0-9])')


def in_notebook_terms(text: str, notebooks: dict) -> str:
    """`text` (a check's message: the student's traceback, a "Likely bug" line) with each line of a module that
    a notebook became named in the notebook's terms: `File "mha.py", line 154` -> `File "04_mha.ipynb", cell 5,
    line 151`, `(heads.py, line 30)` -> `(02_heads.ipynb, cell 5, line 27)`.

    `notebooks`: {module: (the notebook's name, CellLines of the module the intake wrote from it)}, on the
    trusted side. The text is only searched for line numbers to look up there (each a bounded look-up); a
    line outside the cells, or of a module that no notebook became, is left as it is."""
    def named(match):
        found = notebooks.get(match["module"])
        where = found[1](int(match["line"])) if found else None
        if where is None:
            return match[0]
        quote = match["quote"]  # the name in one line: a character that is not printable as its escape
        name = "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in found[0])
        return place(f"{quote}{name}{quote}", *where)

    return _MODULE_LINE.sub(named, text) if notebooks and isinstance(text, str) else text


def _released(module: str) -> tuple[str, int, int | None]:
    """(what goes in the module's code cell, "split_heads and merge_heads"; how many names that is; the cell's
    number or None), from the released template (autograder/submission/released.py)."""
    try:
        from autograder.submission.released import MODULE_CELLS, NAMES
    except ImportError:  # a kit never released
        MODULE_CELLS, NAMES = {}, {}
    names = NAMES.get(module) or []
    what = " and ".join(", ".join(names).rsplit(", ", 1)) if names else "its code"
    return what, len(names), MODULE_CELLS.get(module)


def not_handed_in(module: str, notebook: bool) -> str:
    """What a report says, once, of a module that the submission does not hold: its notebook and the cell its
    code goes in, for a submission of notebooks (`notebook`), else its .py file and what it holds:
    "02_heads.ipynb: split_heads and merge_heads go in its code cell marked # YOUR CODE HERE (cell 5, under
    "Your task")", "heads.py: split_heads and merge_heads"."""
    what, count, cell = _released(module)
    if not notebook:
        return f"{module}.py: {what}"
    cell = f"cell {cell}, " if cell else ""
    return (f"{notebook_name(module)}: {what} go{'es' if count == 1 else ''} in its code cell marked "
            f"# YOUR CODE HERE ({cell}under \"Your task\")")


def _empty_long_cells(raw) -> set[int]:
    """Empty, in a notebook's JSON (format 4), every cell whose source is longer than MAX_CELL_CHARS, before
    nbformat validates it (validating 4 million lines took 20 s and 500 MB); return their numbers (from 1)."""
    cells = raw.get("cells") if isinstance(raw, dict) and raw.get("nbformat") == 4 else None
    found = set()
    for index, cell in enumerate(cells if isinstance(cells, list) else [], 1):
        source = cell.get("source") if isinstance(cell, dict) else None
        if isinstance(source, list):
            size = len(source) if len(source) > MAX_CELL_CHARS else sum(len(s) for s in source if isinstance(s, str))
        else:
            size = len(source) if isinstance(source, str) else 0
        if size > MAX_CELL_CHARS:
            cell["source"] = ""
            found.add(index)
    return found


def _give_cells_ids(raw) -> bool:
    """Give every cell of a notebook's JSON (format 4.5 or later) that has no id one of its own, as
    nbformat.validator.normalize would; whether any was missing. Such notebooks are common (written by hand or by
    an older tool) and lack nothing the kit reads; without this, nbformat warns about each (MissingIDFieldWarning)
    in the instructor's terminal."""
    if not (isinstance(raw, dict) and raw.get("nbformat") == 4 and isinstance(raw.get("nbformat_minor"), int)
            and raw["nbformat_minor"] >= 5 and isinstance(raw.get("cells"), list)):
        return False
    cells = [cell for cell in raw["cells"] if isinstance(cell, dict)]
    taken = {cell["id"] for cell in cells if isinstance(cell.get("id"), str)}
    missing = [cell for cell in cells if "id" not in cell]
    for index, cell in enumerate(missing):
        while f"cell-{index}" in taken:
            index += len(missing)
        cell["id"] = f"cell-{index}"
        taken.add(cell["id"])
    return bool(missing)


def notebook_source(data: bytes, name: str) -> str:
    """The module source of the notebook file `name` whose bytes are `data`; ValueError when it is not a
    notebook."""
    try:
        text = data.decode("utf-8")
        raw = json.loads(text)
        too_long = _empty_long_cells(raw)
        renamed = _give_cells_ids(raw)
        nbformat = load_nbformat()  # here, not at the top: most submissions hold no notebook
        nb = nbformat.reads(json.dumps(raw) if too_long or renamed else text, as_version=4)
    except Exception as exc:  # nbformat raises many kinds of errors on a broken file
        raise ValueError(f"{name} is not a readable notebook: {type(exc).__name__}: {str(exc)[:300]}") from None
    try:
        return notebook_to_source(nb, module_of_notebook(name) or Path(name).stem, name, too_long=too_long)
    except (Exception, RecursionError, MemoryError) as exc:  # a notebook of an unexpected shape: its module only
        raise ValueError(f"{name} could not be read as a notebook: {type(exc).__name__}") from None
