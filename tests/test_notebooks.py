"""Notebook submissions: the notebook's code becomes the module, and nothing else in it can break grading.

A notebook becomes a module on the trusted side, before any process starts: the source notebooks are graded
cold (as `grader_cli.py grade` does), the other cases through the session's warm servers (as a class run's)."""
import json
import shutil

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from autograder.grade.engine import grade
from autograder.release import ASSIGNMENT_DIR, CHECK_HELPERS, NOTEBOOKS, module_cell
from autograder.submission.notebooks import module_of_notebook, notebook_to_source
from tests.conftest import MODULES, TEMPLATE


@pytest.mark.parametrize("name, module", [("01_attention.ipynb", "attention"), ("mha.ipynb", "mha"),
                                          ("5-positional.ipynb", "positional"), ("notes.ipynb", None),
                                          ("01_attention_old.ipynb", None)])
def test_notebook_names_map_to_modules(name, module):
    assert module_of_notebook(name) == module


def test_module_keeps_imports_functions_classes_and_constants():
    nb = new_notebook(cells=[
        new_markdown_cell("# Attention"),
        new_code_cell("%matplotlib inline\nimport math\nSCALE = 2.0\nx = compute()  # not a constant"),
        new_code_cell("def f(a):\n    return a * SCALE\n\nprint(f(1))\nassert f(1) == 3"),
        new_code_cell("import matplotlib.pyplot as plt\nplt.plot([1, 2])\nplt.show()"),
        new_code_cell("raise RuntimeError('exploration that fails')"),
        new_code_cell("def broken(:\n    pass"),  # an exploration cell that does not parse
        new_code_cell("@staticmethod\ndef g():\n    return 1\nclass C:\n    pass"),
    ])
    source = notebook_to_source(nb, "attention")
    namespace = {}
    exec(compile(source, "attention.py", "exec"), namespace)
    assert namespace["f"](1) == 2.0 and "C" in namespace and "g" in namespace
    assert "math" in namespace and "x" not in namespace  # imports are kept, calls are not
    assert "plt" not in namespace  # plotting packages go with the plots
    for dropped in ("print(", "assert", "plt.plot", "RuntimeError", "broken", "%matplotlib", "matplotlib"):
        assert dropped not in source


def test_module_cell_that_does_not_parse_fails_at_import():
    cell = new_code_cell("def scaled_dot_product_attention(q, k, v:\n    pass")
    cell.metadata["nbgrader"] = {"grade_id": "attention-code", "solution": True}
    source = notebook_to_source(new_notebook(cells=[cell]), "attention")
    with pytest.raises(SyntaxError):
        compile(source, "attention.py", "exec")


@pytest.mark.grading
def test_source_notebooks_score_100():
    report = grade(ASSIGNMENT_DIR)
    assert not report.failed(), [f"{t.id}: {t.message}" for t in report.failed()]
    assert report.score == 100


@pytest.mark.grading
def test_untouched_template_notebooks_score_0(tmp_path, warm_servers):
    for name in NOTEBOOKS.values():
        shutil.copy(TEMPLATE / name, tmp_path / name)
    report = grade(tmp_path, servers=warm_servers)
    assert report.status == "empty" and report.score == 0, (report.status, report.error)  # no student work found
    assert not [t for t in report.tests if t.status == "passed"]
    assert not [t for t in report.tests if t.grader_error]


@pytest.mark.grading
def test_plots_raising_cells_and_stderr_do_not_cost_points(tmp_path, warm_servers):
    for module, name in NOTEBOOKS.items():
        nb = nbformat.read(ASSIGNMENT_DIR / name, as_version=4)
        nb.cells[1:1] = [new_code_cell("import warnings, sys\nwarnings.warn('noisy')\nprint('x', file=sys.stderr)")]
        nb.cells += [
            new_code_cell("import matplotlib.pyplot as plt\nfig, ax = plt.subplots()\nax.imshow([[1, 0], [0, 1]])\nplt.show()"),
            new_code_cell("raise ValueError('this cell fails when run')"),
            new_code_cell("while True:\n    pass  # an experiment left running"),
        ]
        nbformat.write(nb, tmp_path / name)
    report = grade(tmp_path, servers=warm_servers)
    assert not report.failed(), [f"{t.id}: {t.message}" for t in report.failed()]


@pytest.mark.grading
def test_single_notebook_is_graded_as_its_module(warm_servers):
    report = grade(ASSIGNMENT_DIR / NOTEBOOKS["masks"], servers=warm_servers)
    modules = report.modules()
    assert modules["masks"][0] == modules["masks"][1] > 0
    assert all(modules[m][0] == 0 for m in MODULES if m != "masks")


@pytest.mark.grading
def test_unreadable_notebook_costs_its_module_only(tmp_path, warm_servers):
    for name in NOTEBOOKS.values():
        shutil.copy(ASSIGNMENT_DIR / name, tmp_path / name)
    (tmp_path / NOTEBOOKS["heads"]).write_text("{ this is not json")
    report = grade(tmp_path, servers=warm_servers)
    modules = report.modules()
    assert modules["heads"][0] == 0
    assert all(modules[m][0] == modules[m][1] for m in MODULES if m != "heads")
    assert "02_heads.ipynb is not a readable notebook" in report.failed()[0].message


def test_source_module_cells_are_the_solutions():
    for module, name in NOTEBOOKS.items():
        nb = json.loads((ASSIGNMENT_DIR / name).read_text())
        assert "".join(module_cell(nb, module)["source"]) == (ASSIGNMENT_DIR.parent.parent / "solutions" / f"{module}.py").read_text(), \
            f"{name}: run `python grader_cli.py release`"


def test_release_notebook_module_cells_are_the_py_stubs():
    for module, name in NOTEBOOKS.items():
        cell = "".join(module_cell(json.loads((TEMPLATE / name).read_text()), module)["source"])
        stub = (TEMPLATE / f"{module}.py").read_text()
        stub = "".join(line for line in stub.splitlines(keepends=True) if not line.startswith("# Student template"))
        assert cell == stub, name
        assert "raise NotImplementedError()" in cell and "BEGIN SOLUTION" not in cell


@pytest.mark.grading
def test_source_notebooks_run_top_to_bottom(tmp_path):
    """The teaching notebooks run clean with the solutions in place (real kernel, nbclient)."""
    from nbclient import NotebookClient

    for name in NOTEBOOKS.values():
        nb = nbformat.read(ASSIGNMENT_DIR / name, as_version=4)
        NotebookClient(nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
        errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
        assert not errors, f"{name}: {errors[0]['ename']}: {errors[0]['evalue']}"


def test_the_module_keeps_each_cells_line_numbers():
    """Line k of a notebook cell is line k below its `# --- cell N` marker, so messages can name the cell."""
    from autograder.submission.notebooks import cell_of

    nb = new_notebook(cells=[
        new_markdown_cell("# Title"),
        new_code_cell("import math\nprint('dropped')\nx = compute()\n\ndef f(a):\n    return a / 0\n"),
        new_code_cell("plt.plot([1])\nclass C:\n    pass"),
    ])
    source = notebook_to_source(nb, "attention", "01_attention.ipynb")
    lines = source.splitlines()
    row = next(i for i, line in enumerate(lines, 1) if "return a / 0" in line)
    assert cell_of(source, row) == (2, 6)
    row = next(i for i, line in enumerate(lines, 1) if line == "class C:")
    assert cell_of(source, row) == (3, 2)
    assert cell_of(source, 1) is None  # the module's docstring
    namespace = {}
    exec(compile(source, "attention.py", "exec"), namespace)
    with pytest.raises(ZeroDivisionError) as info:
        namespace["f"](1)
    assert cell_of(source, info.traceback[-1].lineno + 1) == (2, 6)


def test_a_missing_notebook_is_named_with_the_cell_its_code_goes_in():
    from autograder.submission.notebooks import not_handed_in
    from autograder.submission.released import MODULE_CELLS

    text = not_handed_in("heads", notebook=True)
    assert text.startswith("02_heads.ipynb: split_heads and merge_heads go in its code cell marked # YOUR CODE "
                           f"HERE (cell {MODULE_CELLS['heads']}, "), text
    assert "causal_mask goes in" in not_handed_in("masks", notebook=True)
    assert not_handed_in("heads", notebook=False) == "heads.py: split_heads and merge_heads"


def _cell_code(module, grade_id=None, contains=None):
    nb = nbformat.read(ASSIGNMENT_DIR / NOTEBOOKS[module], as_version=4)
    cells = [c for c in nb.cells if c.cell_type == "code"
             and (grade_id is None or c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)
             and (contains is None or contains in c.source)]
    assert len(cells) == 1
    return cells[0].source


def _run_check_cell(module, grade_id, names):
    """Run the check cell `grade_id` of `module`'s source notebook as the notebook runs it (after its check-helpers
    cell, as __main__), with `names` (the student's definitions) in place of its module cell; what it printed."""
    import contextlib
    import io

    namespace = {"__name__": "__main__", **names}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(_cell_code(module, CHECK_HELPERS), namespace)
        exec(_cell_code(module, grade_id), namespace)
    return out.getvalue()


@pytest.mark.parametrize("divide, hint", [("d_k", True), ("1", True), ("math.sqrt(d_k)", False)])
def test_notebook_01_hints_at_the_scaling_on_the_assert_a_scaling_bug_fails(divide, hint):
    import math

    import torch

    def attention(q, k, v, mask=None, dropout=None):
        d_k = q.size(-1)
        weights = torch.softmax(q @ k.transpose(-2, -1) / eval(divide, {"math": math, "d_k": d_k}), dim=-1)
        return weights @ v, weights

    names = {"scaled_dot_product_attention": attention}
    if not hint:
        assert "OK: 《Self-Attention详解》" in _run_check_cell("attention", "check-seed-001", names)
        return
    with pytest.raises(AssertionError) as info:
        _run_check_cell("attention", "check-seed-001", names)
    assert "sqrt(d_k)" in str(info.value), f"the failing assert gives no scaling hint: {info.value}"


@pytest.mark.parametrize("bug, hint", [
    (None, None),
    ("Wo first", "your layers were created in the order ['Wo', 'Wq', 'Wk', 'Wv']"),
    ("other numbers", ""),  # a bug elsewhere: the order is right, so no word of it
])
def test_notebook_04_compares_the_whole_fused_example_and_names_the_layer_order_only_when_it_differs(bug, hint):
    import math

    import torch
    from torch import nn

    from solutions.mha import MultiHeadAttention as Reference

    class Student(Reference):
        def __init__(self, d_in, d_out, context_length, dropout, num_heads):
            if bug != "Wo first":
                super().__init__(d_in, d_out, context_length, dropout, num_heads)
                return
            nn.Module.__init__(self)
            self.Wo = nn.Linear(d_out, d_out)
            self.Wq, self.Wk, self.Wv = (nn.Linear(d_in, d_out, bias=False) for _ in range(3))
            self.d_out, self.num_heads, self.head_dim = d_out, num_heads, d_out // num_heads
            self.dropout = nn.Dropout(dropout)
            self.register_buffer("mask", torch.tril(torch.ones(context_length, context_length, dtype=torch.bool)))

        def forward(self, x):
            if bug == "other numbers":
                x = x * math.sqrt(2)  # any change of the numbers with the layers in the right order
            return super().forward(x)

    names = {"MultiHeadAttention": Student}
    if bug is None:
        assert "OK: 《多头注意力：堆叠与权重分割》: fused" in _run_check_cell("mha", "check-seed-004-fused", names)
        return
    with pytest.raises(AssertionError) as info:
        _run_check_cell("mha", "check-seed-004-fused", names)
    assert "the six rows of the output (tokens 'Your' to 'step'): expected [" in str(info.value)
    if hint:
        assert hint in str(info.value), info.value
    else:
        assert "order" not in str(info.value), f"a hint without evidence: {info.value}"


def test_notebook_04_plots_the_weights_the_students_forward_computed():
    import matplotlib

    matplotlib.use("Agg")
    import torch
    from torch import nn

    marked = torch.full((2, 2, 6, 6), 0.25)

    class StudentMHA(nn.Module):  # its forward hands recognisable weights to its dropout module
        def __init__(self, *args):
            super().__init__()
            self.drop = nn.Dropout(0.0)

        def forward(self, x):
            weights = self.drop(marked.clone())
            return x + weights.sum() * 0

    class NoDropout(nn.Module):
        def __init__(self, *args):
            super().__init__()

        def forward(self, x):
            return x

    code = _cell_code("mha", contains="register_forward_pre_hook")
    assert ".Wq(" not in code and ".Wk(" not in code, "the plot must not recompute the weights"
    batch = torch.rand(2, 6, 3)
    namespace = {"MultiHeadAttention": StudentMHA, "batch": batch}
    exec(code, namespace)
    assert torch.equal(namespace["weights"], marked)
    namespace = {"MultiHeadAttention": NoDropout, "batch": batch}
    exec(code, namespace)
    assert namespace["weights"] is None


def test_one_notation_for_the_width_of_a_head():
    """head_dim everywhere a student reads (《多头注意力：堆叠与权重分割》's name): no d_h, no hd, no d_k for the split."""
    import re

    for path in sorted(TEMPLATE.iterdir()):
        if path.suffix in (".py", ".ipynb", ".md"):
            text = path.read_text()
            assert not re.search(r"\bd_h\b|\bhd\b|d_\{h\}", text), path.name
    heads = (TEMPLATE / "heads.py").read_text()
    assert "d_k" not in heads.replace("《PyTorch快餐教程(5)》 calls it d_k", ""), "heads.py: the split's width is head_dim"
    assert "(B, H, T, head_dim)" in heads
    readme = (TEMPLATE / "README.md").read_text()
    assert "| `head_dim` |" in readme and "`d_out`" in readme and "True means \"may attend\"" in readme


# -- conversions of honest work, and notebooks shaped to hurt the trusted side (issue 15) --------------------
def _module(*sources, module_cell_index=None):
    nb = new_notebook(cells=[new_code_cell(s) for s in sources])
    if module_cell_index is not None:
        nb.cells[module_cell_index].metadata["nbgrader"] = {"grade_id": "attention-code", "solution": True}
    return notebook_to_source(nb, "attention", "01_attention.ipynb")


def _run(source):
    namespace = {}
    exec(compile(source, "attention.py", "exec"), namespace)
    return namespace


def test_continuation_lines_that_begin_like_a_magic_are_code():
    """black puts an operator first on a continuation line: `% b`, `!= c` are code there, not magics."""
    source = _module("%matplotlib inline\n!pip install torch\n"
                     "def f(a, b):\n    return (a\n            % b)\n"
                     "def g(c, d):\n    return (c\n            != d)\n"
                     "def h():\n    return '''\n%not a magic\n'''\n")
    namespace = _run(source)
    assert namespace["f"](7, 4) == 3 and namespace["g"](1, 2) is True and "%not a magic" in namespace["h"]()
    assert "%matplotlib" not in source and "!pip" not in source


def test_a_constant_computed_by_a_call_is_kept_when_the_module_reads_it():
    source = _module('import torch\nNEG_INF = float("-inf")\nSCALE = torch.tensor(2.0).sqrt()\n'
                     "def masked(x):\n    return x.masked_fill(x < 0, NEG_INF) / SCALE\n",
                     "out = masked(torch.ones(2))  # an experiment\nprint(out)\nfig = plt.figure()")
    namespace = _run(source)
    assert namespace["NEG_INF"] == float("-inf") and "masked" in namespace
    assert "out" not in namespace and "fig" not in namespace, "an experiment the module does not read is left out"


def test_an_assignment_that_reads_a_plotting_name_is_not_kept_even_if_a_function_reads_it():
    source = _module("import matplotlib.pyplot as plt\nfig, ax = plt.subplots()\n"
                     "def show():\n    ax.imshow([[1]])\n")
    assert "plt.subplots" not in source
    _run(source)


@pytest.mark.parametrize("cell", [
    {"cell_type": "code", "source": 123, "metadata": {}, "outputs": [], "execution_count": None},
    {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None},
    {"cell_type": "code", "source": "x = " + "(" * 5000 + ")" * 5000, "metadata": {}, "outputs": []},
])
def test_a_malformed_or_unparsable_cell_is_left_out_and_the_rest_is_read(cell):
    from autograder.submission.notebooks import notebook_source

    nb = {"nbformat": 4, "nbformat_minor": 5, "metadata": {},
          "cells": [cell, {"cell_type": "code", "source": "def f():\n    return 1\n", "metadata": {}, "outputs": [],
                           "execution_count": None}]}
    source = notebook_source(json.dumps(nb).encode(), "01_attention.ipynb")
    assert _run(source)["f"]() == 1


def test_a_notebook_whose_cells_have_no_ids_is_read_without_a_warning(recwarn):
    """Format 4.5 gave cells ids; a notebook written by hand or by an older tool often lacks them, and nbformat
    warned about it in the instructor's terminal (MissingIDFieldWarning) at every such notebook of a class."""
    from autograder.submission.notebooks import notebook_source

    cell = {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None}
    nb = {"nbformat": 4, "nbformat_minor": 5, "metadata": {},
          "cells": [dict(cell, source="x = 1\n"), dict(cell, id="cell-0", source="y = 2\n"),
                    dict(cell, source="def f():\n    return 1\n")]}
    source = notebook_source(json.dumps(nb).encode(), "01_attention.ipynb")
    assert _run(source)["f"]() == 1
    assert [str(w.message)[:60] for w in recwarn] == [], "expected no warning"


def test_a_notebook_nbformat_cannot_read_is_a_clear_error_of_its_module_alone():
    from autograder.submission.notebooks import notebook_source

    nb = {"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": ["not a cell"]}
    with pytest.raises(ValueError, match="^01_attention.ipynb is not a readable notebook: ValidationError"):
        notebook_source(json.dumps(nb).encode(), "01_attention.ipynb")


def test_a_cell_too_long_to_read_is_not_parsed_and_its_module_says_so():
    """5 million `x=1` lines made the trusted process reach 11.9 GB parsing them: a cell over the cap is never
    parsed; in the module cell, the module raises ImportError saying why (that module's checks only)."""
    from autograder.submission.notebooks import MAX_CELL_CHARS

    lines = MAX_CELL_CHARS // 4 + 1
    source = _module("def f():\n    return 1\n", "x=1\n" * lines, module_cell_index=1)
    assert "x=1" not in source and len(source) < 1000
    with pytest.raises(ImportError, match=f"cell 2 of 01_attention.ipynb holds more than {MAX_CELL_CHARS:,}"):
        _run(source)


@pytest.mark.parametrize("as_list", [False, True])
def test_a_file_with_a_cell_too_long_to_read_is_never_validated_line_by_line(as_list):
    """The cell is emptied in the JSON before nbformat validates it (4 million lines took 20 s and 500 MB)."""
    from autograder.submission.notebooks import MAX_CELL_CHARS, notebook_source

    lines = ["x=1\n"] * (MAX_CELL_CHARS // 4 + 1)
    nb = {"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [
        {"cell_type": "markdown", "id": "m", "source": "# Attention", "metadata": {}},
        {"cell_type": "code", "id": "c", "source": lines if as_list else "".join(lines), "outputs": [],
         "execution_count": None, "metadata": {"nbgrader": {"grade_id": "attention-code", "solution": True}}}]}
    source = notebook_source(json.dumps(nb).encode(), "01_attention.ipynb")
    assert "x=1" not in source
    with pytest.raises(ImportError, match=f"cell 2 of 01_attention.ipynb holds more than {MAX_CELL_CHARS:,}"):
        _run(source)


def test_a_module_cell_the_parser_cannot_hold_or_without_text_says_so():
    """100,000 unary minuses make Python's parser give up (MemoryError); a `"source": 123` is no text: neither
    is parsed again in the student process, whose module raises ImportError saying why (that module only)."""
    deep = _module("def f():\n    return 1\n", "-" * 100_000 + "1\n", module_cell_index=1)
    assert len(deep) < 1000
    with pytest.raises(ImportError, match="cell 2 of 01_attention.ipynb nests deeper than Python's parser can hold"):
        _run(deep)
    nb = {"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [
        {"cell_type": "code", "id": "c", "source": 123, "outputs": [], "execution_count": None,
         "metadata": {"nbgrader": {"grade_id": "attention-code", "solution": True}}}]}
    from autograder.submission.notebooks import notebook_source

    with pytest.raises(ImportError, match="cell 1 of 01_attention.ipynb has no text as its source"):
        _run(notebook_source(json.dumps(nb).encode(), "01_attention.ipynb"))


def test_the_kit_reads_notebooks_without_building_jsonschemas_iri_grammar():
    """Reading a notebook costs a grading nbformat's import, not the ~0.9 s that rfc3987-syntax (an optional
    checker of jsonschema's, which nbformat imports) spends building its grammar: the kit's nbformat
    (autograder.submission.notebooks.load_nbformat) leaves it out, and still reads and validates notebooks."""
    import importlib.machinery
    import subprocess
    import sys

    # jsonschema imports rfc3987_syntax where it is installed (plain nbformat then builds its grammar, ~3 s of CPU
    # here): what the kit's import leaves out. Looked for on the path: the kit's import in this process has left
    # it out of sys.modules
    if importlib.machinery.PathFinder.find_spec("rfc3987_syntax") is None:
        pytest.skip("rfc3987-syntax is not installed here: importing nbformat builds no grammar to leave out")
    probe = ("import sys, json\nfrom autograder.submission.notebooks import load_nbformat\nnbformat = load_nbformat()\n"
             "nb = nbformat.reads(json.dumps(nbformat.v4.new_notebook()), as_version=4)\n"
             "nbformat.validate(nb)\n"
             "print(json.dumps(sorted(m for m in ('rfc3987_syntax', 'lark') if sys.modules.get(m))))")
    kits = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert json.loads(kits.stdout) == [], (f"expected the kit's nbformat to import neither rfc3987_syntax nor "
                                           f"lark, got {kits.stdout.strip()}")


# -- uploads as students make them: the name rule (issue 33) --------------------------------------------
#: (file name, the module it stands for or None). Notebooks and .py files follow one rule
#: (autograder.submission.notebooks.modules_named; docs/instructor/uploads.md).
NAME_RULE = [
    # the released names, and the names a download, a file manager or Jupyter gives a copy
    ("03_masks.ipynb", "masks"), ("masks.ipynb", "masks"), ("3_masks.ipynb", "masks"), ("03-masks.ipynb", "masks"),
    ("03_Masks.ipynb", "masks"), ("03_MASKS.IPYNB", "masks"), ("03 masks.ipynb", "masks"),
    ("03_masks (1).ipynb", "masks"), ("03_masks(2).ipynb", "masks"), ("03_masks (1) (2).ipynb", "masks"),
    ("03_masks-Copy1.ipynb", "masks"), ("03_masks copy.ipynb", "masks"), ("03_masks copy 2.ipynb", "masks"),
    ("03_masks - Copy (2).ipynb", "masks"), ("05_positional (3).ipynb", "positional"),
    # words before the module's notebook name: the student's, a tool's
    ("bea_03_masks.ipynb", "masks"), ("Copy of 03_masks.ipynb", "masks"), ("Copy_of_04_mha.ipynb", "mha"),
    ("hw03_masks.ipynb", "masks"), ("Bea Smith - 01_attention.ipynb", "attention"),
    ("Копия 03_masks.ipynb", "masks"), ("v2_02_heads.ipynb", "heads"),
    # words after the name, a bare name after other words, another number: no module
    ("04_mha_notes.ipynb", None), ("masks_old.ipynb", None), ("03_masks_old.ipynb", None),
    ("01_attention_old.ipynb", None), ("03_masks_2.ipynb", None), ("03_masks.v2.ipynb", None),
    ("bea_masks.ipynb", None), ("test_masks.ipynb", None), ("my masks.ipynb", None), ("Copy of masks.ipynb", None),
    ("04_masks.ipynb", None), ("13_masks.ipynb", None), ("103_masks.ipynb", None), ("mask.ipynb", None),
    ("notes.ipynb", None), ("copy.ipynb", None), ("(1).ipynb", None), ("03.ipynb", None), (".ipynb", None),
    ("03_masks.ipynb.bak", None), ("03_masks.txt", None), ("Ω_masks.ipynb", None), ("\uff10\uff13_masks.ipynb", None),
    # two modules' names in one name: none of them
    ("03_masks_and_04_mha.ipynb", None), ("attention_04_mha.ipynb", None), ("04_mha_03_masks.ipynb", None),
    # .py files: the same rule
    ("masks.py", "masks"), ("masks (1).py", "masks"), ("masks(2).py", "masks"), ("Masks.py", "masks"),
    ("MASKS.PY", "masks"), ("masks copy.py", "masks"), ("masks-Copy1.py", "masks"), ("03_masks.py", "masks"),
    ("bea_03_masks.py", "masks"), ("bea_masks.py", None), ("test_masks.py", None), ("masks_old.py", None),
    ("masks_utils.py", None), ("masks_2.py", None), ("selfcheck.py", None), ("masks_and_mha.py", None),
    # hostile names: bounded, and never more than the rule
    ("x" * 300 + "_03_masks.ipynb", None), ("(1" * 120 + " 03_masks.ipynb", "masks"),
    ("(1" * 120 + "03_masks.ipynb", None),
    ("copy " * 48 + "masks.py", None), ("masks" + " copy" * 48 + ".py", "masks"), ('we"""ird\n03_masks.ipynb', "masks"),
]


@pytest.mark.parametrize("name, module", NAME_RULE)
def test_the_name_rule(name, module):
    from autograder.submission import intake

    assert intake.module_of_file(name) == module
    if name.lower().endswith(".ipynb"):
        assert module_of_notebook(name) == module  # the notebook's own reading (the module cell it looks for)


def test_a_name_that_holds_two_modules_names_is_told_apart_from_a_name_of_none():
    from autograder.submission import intake

    assert sorted(intake.modules_named("03_masks_and_04_mha.ipynb")) == ["masks", "mha"]
    assert sorted(intake.modules_named("attention_04_mha.ipynb")) == ["attention", "mha"]
    assert intake.modules_named("04_mha_notes.ipynb") == () and intake.modules_named("masks_mha_helpers.py") == ()


def test_a_notebook_of_any_name_makes_a_module_of_one_docstring_line():
    """The module's first line names the notebook as the student named it: a quote, a backslash or a newline in
    the name is escaped there, so the module compiles and its cells keep their line numbers."""
    from autograder.submission.notebooks import cell_of

    name = 'bea """ \\ \n\t 03_masks (1).ipynb'
    nb = new_notebook(cells=[new_code_cell("def f():\n    return 1 / 0")])
    source = notebook_to_source(nb, "masks", name)
    namespace = {}
    exec(compile(source, "masks.py", "exec"), namespace)
    shown = name.replace("\n", "\\n").replace("\t", "\\t")  # as escapes: no line break in the docstring
    assert namespace["__doc__"].startswith(f"masks.py, taken from {shown}: "), namespace["__doc__"]
    row = next(i for i, line in enumerate(source.splitlines(), 1) if "1 / 0" in line)
    assert cell_of(source, row) == (1, 2)


@pytest.mark.grading
@pytest.mark.parametrize("uploaded", ["bea_03_masks.ipynb", "03_masks (1).ipynb"])
def test_a_single_notebook_named_as_students_upload_it_is_graded_as_its_module(tmp_path, uploaded):
    """`grader_cli.py grade FILE` on the reference notebook, renamed: its module gets its points (masks 8 of 8),
    the report names the file as uploaded. The kit refused both names before (issue 33)."""
    from click.testing import CliRunner

    from grader_cli import cli

    shutil.copyfile(ASSIGNMENT_DIR / NOTEBOOKS["masks"], tmp_path / uploaded)
    out = tmp_path / "report.json"
    result = CliRunner().invoke(cli, ["grade", str(tmp_path / uploaded), "--format", "json", "--output", str(out)],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    assert report["submission"] == uploaded and report["status"] == "graded", report["error"]
    assert report["modules"]["masks"] == {"score": 8, "max_score": 8, "graded": True}, report["modules"]
    assert report["score"] == 8 and not report["notes"]


def test_a_single_notebook_whose_name_stands_for_no_module_or_for_two_is_refused_saying_why(tmp_path):
    from autograder.submission.take import SubmissionError

    for name, why in [("03_masks_old.ipynb", "a notebook is named after its module, e.g. 01_attention.ipynb, or "
                                             "ends with that name (bea_01_attention.ipynb, 01_attention (1).ipynb)"),
                      ("03_masks_and_04_mha.ipynb", "its name holds the names of 2 modules (masks, mha): a notebook "
                                                    "holds one module and is named after it (03_masks.ipynb, "
                                                    "04_mha.ipynb)")]:
        shutil.copyfile(ASSIGNMENT_DIR / NOTEBOOKS["masks"], tmp_path / name)
        with pytest.raises(SubmissionError) as info:
            grade(tmp_path / name)
        assert str(info.value) == f"{name}: {why}"


@pytest.mark.grading
def test_a_traceback_of_a_notebook_names_the_cell_and_the_cells_own_line(tmp_path, warm_servers):
    """Issue 35: a notebook student's traceback names the notebook, the cell and the line in that cell, as the
    self-check does, never the line of the module the grader made of it (`File "heads.py", line 58`); so does
    the note of a module that crashed inside that part ("crashed inside your merge_heads (heads.py, line 58)")."""
    for name in NOTEBOOKS.values():
        shutil.copy(ASSIGNMENT_DIR / name, tmp_path / name)
    path = tmp_path / NOTEBOOKS["heads"]
    nb = nbformat.read(path, as_version=4)
    number, cell = next((i, c) for i, c in enumerate(nb.cells, 1) if "def merge_heads" in c.source)
    planted = "return x.transpose(1, 2).contiguous().view(B, T, H * d_k)"
    assert planted in cell.source
    cell.source = cell.source.replace(planted, "raise RuntimeError('planted in merge_heads')")
    line = next(k for k, text in enumerate(cell.source.splitlines(), 1) if "planted in merge_heads" in text)
    nbformat.write(nb, path)
    path = tmp_path / NOTEBOOKS["mha"]  # a MultiHeadAttention that calls the student's own merge_heads
    nb = nbformat.read(path, as_version=4)
    mha = next(c for c in nb.cells if "class MultiHeadAttention" in c.source)
    merge = "(weights @ v).transpose(1, 2).contiguous().view(B, T, self.d_out)"
    assert merge in mha.source and "from torch import nn\n" in mha.source
    mha.source = mha.source.replace(merge, "merge_heads(weights @ v)").replace(
        "from torch import nn\n", "from torch import nn\nfrom heads import merge_heads\n")
    nbformat.write(nb, path)
    report = grade(tmp_path, servers=warm_servers)
    messages = [t.message for t in report.failed() if "planted in merge_heads" in t.message]
    assert messages, f"expected checks that fail with the planted error, got {[t.message for t in report.failed()]}"
    expected = f'File "02_heads.ipynb", cell {number}, line {line}, in merge_heads'
    for message in messages:
        assert expected in message, f"expected the traceback line {expected!r}, got:\n{message}"
        assert 'File "heads.py"' not in message, f"expected no line of the module heads.py, got:\n{message}"
    notes = [t.message for t in report.tests if t.module == "mha" and "crashed inside your merge_heads" in t.message]
    assert notes, f"expected the MHA's note of the crash, got {[t.message for t in report.tests if t.module == 'mha']}"
    for note in notes:
        assert f"(02_heads.ipynb, cell {number}, line {line})" in note and "heads.py" not in note, note


def test_a_cause_named_from_a_crash_names_the_notebooks_cell_and_line(tmp_path, warm_servers):
    """Issue 48: the cause named from the error of a module (a causal mask used whole, not cut to T) says where it
    raised in the notebook's terms, notebook, cell and line, never the line of the module the grader made of it."""
    for name in NOTEBOOKS.values():
        shutil.copy(ASSIGNMENT_DIR / name, tmp_path / name)
    path = tmp_path / NOTEBOOKS["mha"]
    nb = nbformat.read(path, as_version=4)
    number, cell = next((i, c) for i, c in enumerate(nb.cells, 1) if "class CausalAttention" in c.source)
    planted = "masked_fill(~self.mask[:T, :T], "
    first = cell.source.index(planted)  # CausalAttention's, the first of the cell
    cell.source = cell.source[:first] + "masked_fill(~self.mask, " + cell.source[first + len(planted):]
    line = cell.source[:first].count("\n") + 1
    nbformat.write(nb, path)
    report = grade(tmp_path, servers=warm_servers, select="causal_attention_shape")
    (check,) = report.failed()
    hint = next(ln for ln in check.message.splitlines() if ln.startswith("Likely bug: "))
    assert "your causal mask is not cut to the sequence length T" in hint, hint
    assert f"it raised at {NOTEBOOKS['mha']}, cell {number}, line {line} (" in hint and "mha.py" not in hint, hint


def test_the_grader_and_the_self_check_name_every_line_of_a_notebook_the_same_way(tmp_path):
    """The self-check runs alone on a student's machine and imports nothing of the kit, so it keeps its own
    reading of the `# --- cell N` markers (selfcheck._place): both readings agree on every line of a module that
    code can run from (a marker is a comment: no traceback names it)."""
    from autograder.selfcheck import _place
    from autograder.submission.notebooks import CellLines, notebook_source, place

    name = NOTEBOOKS["mha"]
    source = notebook_source((ASSIGNMENT_DIR / name).read_bytes(), name)
    path = tmp_path / "mha.py"
    path.write_text(source)
    lines = CellLines(source)
    for lineno, text in enumerate(source.splitlines(), 1):
        if text.startswith("# --- cell "):
            continue
        where = lines(lineno)
        expected = place(name, *where) if where else f"mha.py, line {lineno}"
        got = _place(str(path), lineno)
        assert got == expected, f"line {lineno}: expected {expected!r}, got {got!r}"


def test_a_message_is_put_in_notebook_terms_only_where_a_line_of_a_notebooks_module_is_named():
    from autograder.submission.notebooks import CellLines, in_notebook_terms

    nb = new_notebook(cells=[new_markdown_cell("# Heads"),
                             new_code_cell("import torch\n\ndef f(x):\n    return x / 0")])
    source = notebook_to_source(nb, "heads", "02_heads.ipynb")
    row = next(i for i, line in enumerate(source.splitlines(), 1) if "x / 0" in line)
    notebooks = {"heads": ("02_heads.ipynb", CellLines(source))}
    text = (f'  File "heads.py", line {row}, in f\nLikely bug: crashed in f (heads.py, line {row}); '
            f'File "mha.py", line {row}; heads.py, line 1; heads.py, line {10 ** 9 - 1}; bea_heads.py, line {row}')
    expected = (f'  File "02_heads.ipynb", cell 2, line 4, in f\nLikely bug: crashed in f (02_heads.ipynb, cell 2, '
                f'line 4); File "mha.py", line {row}; heads.py, line 1; heads.py, line {10 ** 9 - 1}; '
                f'bea_heads.py, line {row}')
    assert in_notebook_terms(text, notebooks) == expected, in_notebook_terms(text, notebooks)
    assert in_notebook_terms(text, {}) == text
    hostile = 'File "heads.py", line 99999999999999999999999, ' * 10_000  # long numbers, many of them: bounded
    assert in_notebook_terms(hostile, notebooks) == hostile
    odd = {"heads": ('bea "x"\n02_heads.ipynb', CellLines(source))}  # a file name that would break the line
    assert in_notebook_terms(f"(heads.py, line {row})", odd) == '(bea "x"\\n02_heads.ipynb, cell 2, line 4)'


@pytest.mark.grading
def test_a_single_filled_notebook_names_the_missing_notebooks_once_in_a_short_report(warm_servers):
    """Issue 35: 03_masks.ipynb graded alone gave 36 copies of "01_attention.ipynb is missing ...", one inside
    "expected ValueError (...), got 02_heads.ipynb is missing ...", in 122 lines. The report names each missing
    notebook once, with the cell its code goes in, and each check of a missing module says only that."""
    from autograder.scoring import NOT_HANDED_IN

    report = grade(ASSIGNMENT_DIR / NOTEBOOKS["masks"], servers=warm_servers)
    text = report.to_text()
    for module in ("attention", "heads", "mha", "positional"):
        assert text.count(NOTEBOOKS[module]) == 1, f"expected {NOTEBOOKS[module]} named once, got:\n{text}"
        messages = {t.message for t in report.failed() if t.module == module}
        assert messages == {NOT_HANDED_IN}, f"expected the checks of {module} to say {NOT_HANDED_IN!r}, got {messages}"
    assert "is missing" not in text and "got not handed in" not in text, text
    assert len(text.splitlines()) < 60, f"expected a report under 60 lines, got {len(text.splitlines())}:\n{text}"


def _mha_namespace(**classes):
    """The names 04_mha.ipynb's check cells use: the reference classes, `classes` in their place."""
    from solutions import mha

    names = {name: getattr(mha, name) for name in ("CausalAttention", "StackedMultiHeadAttention",
                                                   "MultiHeadAttention")}
    return {**names, **classes}


def test_a_check_cells_hint_prints_when_the_students_forward_raises_first():
    """Issue 48: a hint inside an `assert` never printed when the student's code raised before the assert was
    reached (a mask not sliced to T, a mask kept as a plain attribute, a table added whole, a tensor made on the
    CPU): the check cell catches the error and raises its hint, the error chained to it (its traceback stays)."""
    import math

    import torch

    from solutions.attention import scaled_dot_product_attention
    from solutions.mha import CausalAttention
    from solutions.positional import PositionalEncoding, sinusoidal_encoding

    class Unsliced(CausalAttention):  # self.mask used whole: the (6, 6) mask does not fit (B, 4, 4) scores
        def forward(self, x):
            q, k, v = self.Wq(x), self.Wk(x), self.Wv(x)
            scores = (q @ k.transpose(1, 2) / math.sqrt(k.size(-1))).masked_fill(~self.mask, float("-inf"))
            return torch.softmax(scores, dim=-1) @ v

    class PlainMask(CausalAttention):  # the mask a plain attribute: it stays on the CPU under .to("meta")
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            mask = self.mask
            del self.mask
            self.mask = mask

    class WholeTable(PositionalEncoding):  # x + pe: the (50, 16) table does not add to (2, 7, 16)
        def forward(self, x):
            return self.dropout(x + self.pe)

    def cpu_scale(q, k, v, mask=None, dropout=None):  # a float32 CPU tensor mixed with the inputs
        out, weights = scaled_dot_product_attention(q, k, v, mask, dropout)
        return out / torch.sqrt(torch.FloatTensor([1.0])), weights

    for (module, grade_id), names, hint in [
        (("mha", "check-causal-attention"), _mha_namespace(CausalAttention=Unsliced),
         "\nhint: a shorter input (T = 4 < context_length = 6) should work too: slice the mask to (T, T)"),
        (("mha", "check-causality"), _mha_namespace(CausalAttention=PlainMask),
         "\nhint: CausalAttention after .to('meta'): is the mask a buffer? nothing may be created on a fixed device"),
        (("positional", "check-module"),
         {"PositionalEncoding": WholeTable, "sinusoidal_encoding": sinusoidal_encoding},
         "\nhint: forward(x) should be x + pe[:T], the table's first T = 7 rows"),
        (("attention", "check-shapes"), {"scaled_dot_product_attention": cpu_scale},
         "\nhint: on meta inputs: the output should live on the inputs' device; create no tensor on a fixed device"),
    ]:
        with pytest.raises(AssertionError) as info:
            _run_check_cell(module, grade_id, names)
        assert hint in str(info.value), info.value
        cause = info.value.__cause__
        assert isinstance(cause, Exception) and not isinstance(cause, AssertionError), \
            "the student's own error is chained to the hint"
        assert str(info.value).startswith(f"{type(cause).__name__}: "), f"the error first, then the hint: {info.value}"
    with pytest.raises(RuntimeError) as info:  # a fault that is not of the device: no word of the buffer
        _run_check_cell("mha", "check-causality", _mha_namespace(CausalAttention=Unsliced))
    assert "buffer" not in str(info.value), info.value
    for grade_id in ("check-causal-attention", "check-causality"):
        assert "OK: " in _run_check_cell("mha", grade_id, _mha_namespace())  # the reference passes
    assert "OK: " in _run_check_cell("attention", "check-shapes",
                                     {"scaled_dot_product_attention": scaled_dot_product_attention})


def test_the_check_cells_write_numbers_to_4_decimals_as_the_reports_do():
    """Issue 48: `expected.tolist()` of a float32 tensor printed 0.11840000003576279; the cells write rows of
    numbers to 4 decimals, as the graders' reports do."""
    import math
    import re

    from solutions.mha import MultiHeadAttention, StackedMultiHeadAttention

    class Off(MultiHeadAttention):  # any change of the numbers
        def forward(self, x):
            return super().forward(x * math.sqrt(2))

    class OffStacked(StackedMultiHeadAttention):
        def forward(self, x):
            return super().forward(x * math.sqrt(2))

    for grade_id, namespace, first, what in [
            ("check-seed-004-fused", _mha_namespace(MultiHeadAttention=Off), "(0.1184, 0.3120, -0.0847, -0.5774)",
             " (tokens 'Your' to 'step')"),
            ("check-seed-004-stacked", _mha_namespace(StackedMultiHeadAttention=OffStacked),
             "(0.1855, 0.8812, 1.3211, 0.8098)", "")]:
        with pytest.raises(AssertionError) as info:
            _run_check_cell("mha", grade_id, namespace)
        message = str(info.value)
        assert f"the six rows of the output{what}: expected [{first}, " in message, message
        assert not re.search(r"\d\.\d{5,}", message), f"float noise in {message}"


def _check_cells_run(nb, module):
    """Run a notebook's module cell, its check-helpers cell and each of its check cells, in order, as the notebook
    runs them (as __main__): grade id -> (its checks, what the check cell printed, the error it raised or None)."""
    import contextlib
    import io
    import re

    from autograder.release import is_check_cell

    namespace, ran = {"__name__": "__main__"}, {}
    for cell in nb.cells:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        if grade_id not in (f"{module}-code", CHECK_HELPERS) and not is_check_cell(cell):
            continue
        out, error = io.StringIO(), None
        try:
            with contextlib.redirect_stdout(out):
                exec(compile(cell.source, f"{module}:{grade_id}", "exec"), namespace)
        except Exception as exc:  # a failed check: what the test says
            error = exc
        if is_check_cell(cell):
            ran[grade_id] = (len(re.findall(r"^@check\(", cell.source, re.M)), out.getvalue(), error)
        else:
            assert error is None, f"{module}: the cell {grade_id} raised {error!r}"
    return ran


def test_every_check_cell_prints_ok_on_the_solution_and_fails_on_the_untouched_template():
    """The check cells are written by the release from parts/<name>/checks.py (one cell may hold several checks):
    run as the notebook runs them, on the reference each prints one "OK: <title>" line per check and raises
    nothing; on the untouched template (its module cell the stub) each raises and prints no OK line."""
    import sys

    from autograder import PARTS
    from autograder.paths import PARTS_DIR
    from autograder.release import _solution, render_stub
    from autograder.submission.notebooks import notebook_name
    from tests.conftest import SOLUTIONS

    before, sys.path[:0] = set(sys.modules), [str(SOLUTIONS)]  # the kvcache notebook imports mha and positional
    try:
        for module in PARTS:
            # the part's source notebook (assignments/mha/ holds the default parts' copies only)
            source = nbformat.read(PARTS_DIR / module / "notebook.ipynb", as_version=4)
            ran = _check_cells_run(source, module)
            assert ran, f"{module}: no check cell"
            for grade_id, (checks, printed, error) in ran.items():
                assert error is None, f"{module}, {grade_id}: {error!r}"
                assert printed.count("OK: ") == checks > 0, f"{module}, {grade_id}: {printed}"
            if (TEMPLATE / notebook_name(module)).is_file():
                template = nbformat.read(TEMPLATE / notebook_name(module), as_version=4)
            else:  # an optional part: its module cell as nbgrader's release writes it, the stub
                template = source
                module_cell(template, module).source = render_stub(_solution(module))
            for grade_id, (_, printed, error) in _check_cells_run(template, module).items():
                assert isinstance(error, (NotImplementedError, AssertionError)), f"{module}, {grade_id}: {error!r}"
                assert "OK: " not in printed, f"{module}, {grade_id}: {printed}"
    finally:
        sys.path.remove(str(SOLUTIONS))
        for name in set(sys.modules) - before:
            del sys.modules[name]


def test_the_module_graded_from_a_notebook_leaves_out_its_check_cells():
    """The check-helpers and check cells check the module and are not of it: the module graded from the notebook
    holds none of their code (which would read as the student's: its getattr and imports put an attack case's
    module among those graded at every level), and importing it runs no check and prints nothing."""
    import contextlib
    import io

    for module, name in NOTEBOOKS.items():
        source = notebook_to_source(nbformat.read(ASSIGNMENT_DIR / name, as_version=4), module, name)
        assert "@check(" not in source and "class Failed" not in source, f"{name}: expected no check in {source}"
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(source, f"{module}.py", "exec"), {"__name__": module})
        assert out.getvalue() == "", f"{name}: importing the graded module printed {out.getvalue()!r}"
