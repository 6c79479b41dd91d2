"""Notebook submissions: the notebook's code becomes the module, and nothing else in it can break grading."""
import json
import shutil

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from autograder.engine import grade
from autograder.notebooks import module_of, notebook_to_source
from autograder.release import ASSIGNMENT_DIR, NOTEBOOKS, module_cell
from tests.conftest import MODULES, TEMPLATE


@pytest.mark.parametrize("name, module", [("01_attention.ipynb", "attention"), ("mha.ipynb", "mha"),
                                          ("5-positional.ipynb", "positional"), ("notes.ipynb", None),
                                          ("01_attention_old.ipynb", None)])
def test_notebook_names_map_to_modules(name, module):
    assert module_of(name) == module


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


def test_source_notebooks_score_100():
    report = grade(ASSIGNMENT_DIR)
    assert not report.failed(), [f"{t.id}: {t.message}" for t in report.failed()]
    assert report.score == 100


def test_untouched_template_notebooks_score_0(tmp_path):
    for name in NOTEBOOKS.values():
        shutil.copy(TEMPLATE / name, tmp_path / name)
    report = grade(tmp_path)
    assert report.status == "graded"
    assert not [t for t in report.tests if t.status == "passed"]
    assert not [t for t in report.tests if t.grader_error]


def test_plots_raising_cells_and_stderr_do_not_cost_points(tmp_path):
    for module, name in NOTEBOOKS.items():
        nb = nbformat.read(ASSIGNMENT_DIR / name, as_version=4)
        nb.cells[1:1] = [new_code_cell("import warnings, sys\nwarnings.warn('noisy')\nprint('x', file=sys.stderr)")]
        nb.cells += [
            new_code_cell("import matplotlib.pyplot as plt\nfig, ax = plt.subplots()\nax.imshow([[1, 0], [0, 1]])\nplt.show()"),
            new_code_cell("raise ValueError('this cell fails when run')"),
            new_code_cell("while True:\n    pass  # an experiment left running"),
        ]
        nbformat.write(nb, tmp_path / name)
    report = grade(tmp_path)
    assert not report.failed(), [f"{t.id}: {t.message}" for t in report.failed()]


def test_single_notebook_is_graded_as_its_module():
    report = grade(ASSIGNMENT_DIR / NOTEBOOKS["masks"])
    modules = report.modules()
    assert modules["masks"][0] == modules["masks"][1] > 0
    assert all(modules[m][0] == 0 for m in MODULES if m != "masks")


def test_unreadable_notebook_costs_its_module_only(tmp_path):
    for name in NOTEBOOKS.values():
        shutil.copy(ASSIGNMENT_DIR / name, tmp_path / name)
    (tmp_path / NOTEBOOKS["heads"]).write_text("{ this is not json")
    report = grade(tmp_path)
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


def test_source_notebooks_run_top_to_bottom(tmp_path):
    """The teaching notebooks run clean with the solutions in place (real kernel, nbclient)."""
    from nbclient import NotebookClient

    for name in NOTEBOOKS.values():
        nb = nbformat.read(ASSIGNMENT_DIR / name, as_version=4)
        NotebookClient(nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
        errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
        assert not errors, f"{name}: {errors[0]['ename']}: {errors[0]['evalue']}"
