"""Self-check: run the public checks on your own code.

    python selfcheck.py            (in the folder with your five modules)
    python selfcheck.py PATH       (or point it at that folder)

It runs what the notebooks' self-check cells run, on your .py files: the
tutorials' worked examples, the shapes, attention with a mask and with a
dropout module, the causal mask, causality, float64 and the meta device,
the contract's ValueErrors, and the positional table and its buffer. It prints
what passed and, for a failure, what was expected, what came back and the
notebook's hint; it exits 1 when a check fails. A failure names the line of
your code to look at: the line that raised, or, when your code ran but gave
a wrong result, the function or class checked. Masks are drawn as
✓ (may attend) and · (blocked). These are the public checks only: the
course's hidden graders check much more (random inputs, dtypes, devices,
speed), so passing here is a good start, not a grade.

It reads the .py files. A part whose .py file is still the template (or is
not there) while its notebook in the folder holds other code is worked in
the notebook: its checks are not run here, and the self-check says to run
that notebook's check cells, which run the same checks.
"""
import inspect
import math
import os
import re
import sys
import traceback

POINTS = {"attention": 23, "heads": 15, "masks": 8, "mha": 40, "positional": 14}  # written by the kit's release step

CHECKS = []


def check(module, title, subject, cell=None):
    """Register a check of `subject`: the names of `module` it calls, space-separated. `cell`: the grade id of
    the check cell of the module's notebook that runs it too (the release writes the check there)."""
    def register(fn):
        CHECKS.append((module, title, subject, fn))
        return fn
    return register


def show(*values, **options):
    """What a worked example computed, printed by the notebook's check cell (as print(*values, **options)); the
    self-check prints only whether each check passed."""


# BEGIN HELPERS: the check cells of the notebooks hold these too (the kit's release step writes them into each
# notebook's check-helpers cell), with a `check` that runs the check at once and a `show` that prints.
MASK_LEGEND = "✓ may attend, · blocked"  # the graders' legend too


class Failed(AssertionError):
    """A public check that failed: what was expected and what came back, and the notebook's hint for it."""

    def __init__(self, message, hint=None, subject=None):
        super().__init__(message)
        self.hint, self.subject = hint, subject  # subject: the one name of the check's subject at fault


def _drawn(mask):
    """A bool mask a line per query row: "✓ · · ·"."""
    return [" ".join("✓" if v else "·" for v in row) for row in mask.tolist()]


def _side_by_side(left_title, left, right_title, right):
    """Two drawn masks (_drawn) side by side under their titles, as indented lines."""
    width = max(len(left_title), *(len(line) for line in left))
    return "\n".join(f"  {a:<{width}}   {b}" for a, b in zip([left_title, *left], [right_title, *right]))


def _rows(values):
    """Rows of numbers for a message: [(0.3302, 0.6698), (0.5000, 0.5000)]."""
    return "[" + ", ".join("(" + ", ".join(f"{v:.4f}" for v in row) + ")" for row in values) + "]"


def near(got, expected, what, hint=None, tol=1e-4):
    """Check that the tensor `got` (`what`: which values these are, as the message says it) is `expected`
    (nested lists); `hint`, the notebook's hint for this check, is printed with a failure."""
    import torch

    expected = torch.tensor(expected, dtype=torch.float64)
    if not isinstance(got, torch.Tensor):
        raise Failed(f"{what}: expected a tensor, got {type(got).__name__}")
    if tuple(got.shape) != tuple(expected.shape):
        raise Failed(f"{what}: expected shape {tuple(expected.shape)}, got {tuple(got.shape)}", hint)
    got = got.detach().double().cpu()
    if torch.allclose(got, expected, atol=tol, rtol=0):
        return
    if expected.numel() <= 24:  # up to six rows of four: the rows, as the reports write them
        want, have = (t.reshape(-1, t.shape[-1] if t.dim() else 1).tolist() for t in (expected, got))
        raise Failed(f"{what}: expected {_rows(want)}, got {_rows(have)}", hint)
    wrong = ~torch.isclose(got, expected, atol=tol, rtol=0)
    first = [int(i) for i in wrong.nonzero()[0]]
    raise Failed(f"{what}: expected {expected[tuple(first)].item():.4f} at index {first}, got "
                         f"{got[tuple(first)].item():.4f} ({int(wrong.sum())} of {wrong.numel()} entries differ)", hint)


def shape(got, expected, what, hint=None):
    if tuple(getattr(got, "shape", ())) != tuple(expected):
        raise Failed(f"{what}: expected shape {tuple(expected)}, got {tuple(getattr(got, 'shape', ()))}",
                             hint)


def holds(condition, message, hint=None, subject=None):
    if not condition:
        raise Failed(message, hint, subject)


def raises_value_error(call, what, why):
    """`call()` must raise ValueError (`why`: the contract's reason)."""
    try:
        call()
    except ValueError:
        return
    raise Failed(f"{what} should raise ValueError: {why}")


def hinted(call, hint, subject=None, about=""):
    """`call()`, the student's code; when it raises (an error whose message holds `about`: the evidence that the
    hint is its cause), that error with the notebook's hint for this check, which would otherwise never print
    (the error's traceback is kept: the line of their code that raised is named)."""
    try:
        return call()
    except NotImplementedError:
        raise
    except Exception as exc:  # whatever the student's code raises: the check's hint goes with it
        if about not in str(exc):
            raise
        raise Failed(f"{type(exc).__name__}: {exc}", hint, subject).with_traceback(exc.__traceback__) from None


SEED_004 = [[0.43, 0.15, 0.89], [0.55, 0.87, 0.66], [0.57, 0.85, 0.64],
            [0.22, 0.58, 0.33], [0.77, 0.25, 0.10], [0.05, 0.80, 0.55]]
# A (4, 4) mask, True = may attend (01_attention.ipynb's): the same for every batch and head.
MASK = [[True, False, True, False], [True, True, False, False], [False, True, True, True], [True, True, True, True]]
# END HELPERS


# BEGIN CHECKS: in the shipped selfcheck.py the release writes here the public checks of each part handed out,
# parts/<name>/checks.py (its docstring left out), in teaching order; in the kit they are read from there.
def _part_checks():
    """In the kit: run each part's parts/<name>/checks.py here, in this module's namespace, as the release inlines
    it (the parts of POINTS, or every part folder with a checks.py)."""
    folder, namespace = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "parts"), globals()
    doc = namespace["__doc__"]  # each checks.py's docstring would replace this module's
    for name in list(POINTS) or sorted(os.listdir(folder)):
        path = os.path.join(folder, name, "checks.py")
        if os.path.isfile(path):
            with open(path, encoding="utf-8") as fh:
                exec(compile(fh.read(), path, "exec"), namespace)
    namespace["__doc__"] = doc


_part_checks()
# END CHECKS


_NOTEBOOK_MODULE = re.compile(r'"""\w+\.py, taken from (.+?): ')
_CELL = re.compile(r"# --- cell (\d+)\b")


def _place(filename, lineno):
    """"attention.py, line 12"; for a module the grader made of a notebook, "01_attention.ipynb, cell 7,
    line 3" (its lines sit under a `# --- cell N` line, in the cell's own order)."""
    name = os.path.basename(filename)
    try:
        with open(filename, encoding="utf-8") as fh:
            lines = fh.read().splitlines()
    except (OSError, UnicodeDecodeError):
        return f"{name}, line {lineno}"
    notebook = _NOTEBOOK_MODULE.match(lines[0]) if lines else None
    if notebook:
        for row in range(min(lineno, len(lines)) - 1, -1, -1):
            cell = _CELL.match(lines[row])
            if cell and lineno - row - 1 > 0:
                return f"{notebook[1]}, cell {cell[1]}, line {lineno - row - 1}"
    return f"{name}, line {lineno}"


def _where(exc, folder, module, subject):
    """Where in the student's code to look: the deepest line of their code that the error passed through;
    else (their code ran, but the result is wrong) the function or class checked."""
    own = os.path.abspath(__file__)
    frames = [f for f in traceback.extract_tb(exc.__traceback__)
              if os.path.abspath(f.filename).startswith(folder + os.sep) and os.path.abspath(f.filename) != own]
    if frames:
        line = f": {frames[-1].line.strip()}" if frames[-1].line else ""
        return f"at {_place(frames[-1].filename, frames[-1].lineno)}{line}"
    found, places = sys.modules.get(module), []
    for name in (getattr(exc, "subject", None) or subject).split():
        try:
            target = getattr(found, name)
            filename, lineno = inspect.getsourcefile(target), inspect.getsourcelines(target)[1]
        except (AttributeError, TypeError, OSError):
            continue
        if os.path.abspath(filename).startswith(folder + os.sep):
            places.append(f"{name} at {_place(filename, lineno)}")
    return "see " + " and ".join(places) if places else ""


def _uses_failed(module, failed):
    """The names `module` (the student's, imported) takes from the student's modules in `failed`: an earlier
    failure there is the one to fix first."""
    found = sys.modules.get(module)
    return sorted(name for name, value in vars(found).items()
                  if not name.startswith("_") and getattr(value, "__module__", None) in failed) if found else []


def _reason(exc, hint=True):
    """What went wrong, and (`hint`) the hint that goes with it, as lines."""
    if isinstance(exc, NotImplementedError):
        return ["not implemented yet"]
    lines = (str(exc) if isinstance(exc, Failed) else f"{type(exc).__name__}: {exc}").splitlines() or [""]
    return lines + ([f"hint: {exc.hint}"] if hint and getattr(exc, "hint", None) else [])


_TEMPLATE_LINE = "# Student template generated"  # the first comment of a .py stub, which its notebook cell lacks


def _notebook(folder, module):
    """The notebook of `module` in `folder` (01_attention.ipynb, or a name that ends with it as uploads are
    named: bea_01_attention.ipynb, 01_attention (1).ipynb), or None."""
    try:
        names = sorted(n for n in os.listdir(folder) if n.endswith(".ipynb") and module in n)
    except OSError:
        return None
    return names[0] if names else None


def _code_cells(path):
    """The sources of a notebook's code cells ([] when it cannot be read)."""
    import json

    try:
        with open(path, encoding="utf-8") as fh:
            cells = json.load(fh).get("cells", [])
        return ["".join(c["source"]) if isinstance(c["source"], list) else c["source"]
                for c in cells if c.get("cell_type") == "code"]
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return []


def _worked_in_notebook(folder, module, errors):
    """The notebook that holds the work of `module`, where its .py file holds none; else None. The .py file
    holds none when it is not there, or when every check of it stopped at its own `raise NotImplementedError()`
    (`errors`: what each of the module's checks raised, None for a pass) while the notebook's code differs from
    it: the template's notebook cell is its .py stub to the letter, less the stub's first comment line."""
    notebook = _notebook(folder, module)
    path = os.path.join(folder, f"{module}.py")
    if notebook is None or not errors or any(e is None for e in errors):
        return None
    if not os.path.exists(path):
        return notebook if all(isinstance(e, ImportError) for e in errors) else None
    own = [f for e in errors for f in traceback.extract_tb(e.__traceback__)[-1:]]
    if not all(isinstance(e, NotImplementedError) for e in errors) or \
            any(os.path.abspath(f.filename) != os.path.abspath(path) for f in own):
        return None
    with open(path, encoding="utf-8", errors="replace") as fh:
        stub = "".join(line for line in fh.readlines() if not line.startswith(_TEMPLATE_LINE))
    return None if stub in _code_cells(os.path.join(folder, notebook)) else notebook


def main(argv):
    folder = os.path.abspath(argv[1]) if len(argv) > 1 else os.getcwd()
    sys.path.insert(0, folder)
    try:
        import torch  # noqa: F401
    except ImportError:
        print("PyTorch is not installed: pip install torch")
        return 2
    failed = set()  # the modules with a failed check
    checks = [c for c in CHECKS if not POINTS or c[0] in POINTS]  # the parts handed out (as released: all five)
    count = 0
    in_notebooks = {}  # module -> the notebook that holds its work, its checks not run here
    for module in dict.fromkeys(m for m, _, _, _ in checks):
        results = []
        for _, title, subject, fn in (c for c in checks if c[0] == module):
            try:
                fn()
                results.append((title, subject, None))
            except Exception as exc:  # a self-check reports every failure and goes on
                results.append((title, subject, exc))
        notebook = _worked_in_notebook(folder, module, [exc for _, _, exc in results])
        if notebook:
            in_notebooks[module] = notebook
            print(f"  --    {module:<10} not checked here: {module}.py holds no work and {notebook} does; run that "
                  "notebook's check cells")
            continue
        for title, subject, exc in results:
            if exc is None:
                print(f"  ok    {module:<10} {title}")
                continue
            count += 1
            where = _where(exc, folder, module, subject)
            inherited = _uses_failed(module, failed - {module})  # then the hint on the module's own code can wait
            lines = _reason(exc, hint=not inherited) + ([f"({where})"] if where else [])
            if inherited:
                lines.append(f"({module}.py uses your {', '.join(inherited)}, which failed its own check above: "
                             "fix that first)")
            failed.add(module)
            print(f"  FAIL  {module:<10} {title}" + "".join(f"\n        {line}" for line in lines))
    ran = sum(1 for m, _, _, _ in checks if m not in in_notebooks)
    run_them = ("run each from the top (Kernel > Restart Kernel and Run All Cells): a check cell that passes "
                "prints a line starting with OK:")
    if not ran:
        print(f"\nYour work is in the notebooks ({', '.join(in_notebooks.values())}), and this self-check reads the "
              f".py files, which hold none. The notebooks' check cells run these same checks: {run_them}.")
    else:
        print(f"\n{ran - count} of {ran} public checks passed."
              + ("" if count else " The hidden graders check much more: random inputs, masking, dtypes, devices, "
                 "speed."))
        if in_notebooks:
            print(f"Not run here: the {len(checks) - ran} checks of {', '.join(in_notebooks)}, whose work is in "
                  f"{', '.join(in_notebooks.values())}. Their check cells run them: {run_them}.")
    if POINTS:
        print("Hidden graders: " + ", ".join(f"{m} {p:g}" for m, p in POINTS.items())
              + f" points, {sum(POINTS.values()):g} in all.")
    return 1 if count else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
