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
that line k of cell N sits k lines below its marker (`cell_of` maps a line
of the module back to the notebook's cell and line).

Reads notebooks with nbformat; stdlib otherwise, no torch. A notebook file is
read through autograder.intake (a regular file of the submission, never
through a link, and no larger than its limit).
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

import nbformat

from autograder import MODULES
from autograder.intake import MAX_FILE, NOTEBOOK_NAME, Refused, read_regular

_NAME = NOTEBOOK_NAME
_KEEP = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
# Packages that only draw or display: their imports are left out with the plots that use them.
DISPLAY_ONLY = ("matplotlib", "seaborn", "IPython", "plotly", "ipywidgets")


def _is_display_import(node) -> bool:
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    elif isinstance(node, ast.ImportFrom):
        names = [node.module or ""]
    else:
        return False
    return all(n.split(".")[0] in DISPLAY_ONLY for n in names)


def module_of(path: Path) -> str | None:
    """The contract module a notebook stands for: `01_attention.ipynb` -> "attention"."""
    match = _NAME.match(Path(path).stem.lower())
    return match["module"] if match and match["module"] in MODULES else None


def _is_constant(node) -> bool:
    if not isinstance(node, (ast.Assign, ast.AnnAssign)) or node.value is None:
        return False
    try:
        ast.literal_eval(node.value)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False
    return True


def _strip_magics(source: str) -> str:
    """IPython magics and shell escapes become blank lines (line numbers stay)."""
    return "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines())


def _is_module_cell(cell, module) -> bool:
    meta = cell.get("metadata", {}).get("nbgrader", {})
    return meta.get("grade_id") == f"{module}-code" or bool(meta.get("solution"))


def notebook_to_source(nb, module: str, name: str = "notebook") -> str:
    """The Python source of `module` taken from the notebook `nb` (an nbformat node).

    Each cell that contributes becomes `# --- cell N` (N counts every cell, markdown included, from 1)
    and then the cell's lines, with those left out blank: line k of the cell is k lines below the marker.
    """
    parts = [f'"""{module}.py, taken from {name}: its imports, functions, classes and constants."""']
    for index, cell in enumerate(nb.cells, 1):
        if cell.cell_type != "code":
            continue
        source = _strip_magics(cell.source)
        try:
            tree = ast.parse(source)
        except SyntaxError:
            if _is_module_cell(cell, module):
                parts.append(f"# --- cell {index} (does not parse)\n{source}")
            continue
        lines = source.splitlines()
        kept = [""] * len(lines)
        for node in tree.body:
            if (isinstance(node, _KEEP) and not _is_display_import(node)) or _is_constant(node):
                start = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
                kept[start - 1:node.end_lineno] = lines[start - 1:node.end_lineno]
        while kept and not kept[-1].strip():
            kept.pop()
        if kept:
            parts.append(f"# --- cell {index}\n" + "\n".join(kept))
    return "\n\n".join(parts) + "\n"


_MARKER = re.compile(r"# --- cell (\d+)\b")


def cell_of(source: str, lineno: int) -> tuple[int, int] | None:
    """(cell, line in that cell) of line `lineno` of a module made by `notebook_to_source`; None for a line
    outside the cells (the module's docstring)."""
    lines = source.splitlines()
    for row in range(min(lineno, len(lines)) - 1, -1, -1):
        match = _MARKER.match(lines[row])
        if match:
            return (int(match[1]), lineno - row - 1) if lineno - row - 1 > 0 else None
    return None


def missing_message(module: str) -> str:
    """Why a module of a notebook submission has no code, in words a student can act on: the notebook to
    hand in, and the cell its code goes in (from the released template, autograder/released.py)."""
    try:
        from autograder.released import MODULE_CELLS, NAMES
    except ImportError:  # a kit never released
        MODULE_CELLS, NAMES = {}, {}
    notebook = f"{MODULES.index(module) + 1:02d}_{module}.ipynb"  # as released: 01_attention.ipynb, ...
    names = NAMES.get(module) or []
    what = " and ".join(", ".join(names).rsplit(", ", 1)) if names else "its code"
    cell = f"cell {MODULE_CELLS[module]}, " if module in MODULE_CELLS else ""
    return (f"{notebook} is missing from the submission (and {module}.py too): {what} go"
            f"{'es' if len(names) == 1 else ''} in its code cell marked # YOUR CODE HERE ({cell}under "
            f"\"Your task\"); hand in the notebook under its own name, {notebook}")


def notebook_file_to_source(path: Path) -> str:
    """Read a notebook file and return its module source; ValueError when it is not a notebook, or not a
    regular file within its size limit (a link, a FIFO: see autograder.intake)."""
    path = Path(path)
    try:
        data = read_regular(path, MAX_FILE[".ipynb"], path.name)
    except Refused as exc:
        raise ValueError(str(exc)) from None
    return notebook_source(data, path.name)


def notebook_source(data: bytes, name: str) -> str:
    """The module source of the notebook file `name` whose bytes are `data`; ValueError when it is not a
    notebook."""
    try:
        nb = nbformat.reads(data.decode("utf-8"), as_version=4)
    except Exception as exc:  # nbformat raises many kinds of errors on a broken file
        raise ValueError(f"{name} is not a readable notebook: {type(exc).__name__}: {exc}") from None
    return notebook_to_source(nb, module_of(name) or Path(name).stem, name)


def notebooks_in(folder: Path) -> dict[str, Path]:
    """module -> notebook for the contract modules that `folder` has as notebooks (by name: a link or a FIFO
    of that name is listed too, and refused when read, so that the report can say why)."""
    found = {}
    for nb_path in sorted(Path(folder).glob("*.ipynb")):
        if not nb_path.is_symlink() and nb_path.is_dir():
            continue
        module = module_of(nb_path)
        if module and module not in found:
            found[module] = nb_path
    return found


def write_module(nb_path: Path, dest: Path) -> Path:
    """Write the module of the notebook `nb_path` into the folder `dest`.

    A notebook that cannot be read becomes a module that raises ImportError
    saying so, which costs exactly the checks of that module.
    """
    module = module_of(nb_path) or Path(nb_path).stem
    try:
        source = notebook_file_to_source(nb_path)
    except ValueError as exc:
        source = f"raise ImportError({str(exc)!r})\n"
    target = Path(dest) / f"{module}.py"
    target.write_text(source)
    return target
