"""Tests for autograder.release, the generator of the student template."""
import ast
import shutil
import subprocess
import sys
import textwrap

import pytest

from autograder import release

# The student contract (shared/spec/student-api.md), written out independently of the generator.
CONTRACT = {
    "attention": ["scaled_dot_product_attention"],
    "heads": ["split_heads", "merge_heads"],
    "masks": ["causal_mask"],
    "mha": ["CausalAttention", "StackedMultiHeadAttention", "MultiHeadAttention"],
    "positional": ["sinusoidal_encoding", "PositionalEncoding"],
}


@pytest.fixture(scope="module")
def expected():
    return release.expected_template()


@pytest.fixture()
def template_copy(tmp_path):
    dest = tmp_path / "template"
    assert release.write_template(dest) == sorted(release.expected_template())
    return dest


def _run(code, cwd):
    """Run python code in a fresh interpreter with only `cwd` added to sys.path."""
    return subprocess.run(
        [sys.executable, "-B", "-c", f"import sys; sys.path.insert(0, {str(cwd)!r})\n" + code],
        cwd=cwd, capture_output=True, text=True, timeout=300,
    )


def _solution_regions(source):
    """(lines inside solution regions, text outside them) of a solution file."""
    inside, outside, in_region = [], [], False
    for line in source.splitlines():
        if "### BEGIN SOLUTION" in line:
            in_region = True
        elif "### END SOLUTION" in line:
            in_region = False
        else:
            (inside if in_region else outside).append(line)
    return inside, "\n".join(outside)


def test_checked_in_template_is_up_to_date():
    drift = release.check_template()
    assert drift == [], f"student_template/ is out of date ({drift}); run `python grader_cli.py release`"


def test_source_notebooks_module_cells_are_in_sync():
    stale = release.check_sources()
    assert stale == [], f"module cells differ from solutions/ ({stale}); run `python grader_cli.py release`"


def test_check_sources_detects_an_edited_module_cell(tmp_path):
    import shutil

    shutil.copytree(release.ASSIGNMENT_DIR, tmp_path / "mha")
    nb = tmp_path / "mha" / release.NOTEBOOKS["masks"]
    nb.write_text(nb.read_text().replace("torch.tril(", "torch.triu("))
    assert release.check_sources(tmp_path / "mha") == [f"assignments/mha/{release.NOTEBOOKS['masks']}"]


def test_release_check_cli_exits_0_on_main():
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "grader_cli.py", "release", "--check"], cwd=release.ROOT,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_expected_template_holds_exactly_the_stubs_notebooks_and_readme(expected):
    assert sorted(expected) == sorted([f"{m}.py" for m in release.MODULES] + ["README.md", "selfcheck.py"]
                                      + list(release.NOTEBOOKS.values()))
    assert release.MODULES == tuple(CONTRACT)
    for name, content in expected.items():
        if name.endswith(".ipynb") or name == "selfcheck.py":
            continue
        header = release.HEADER if name.endswith(".py") else f"<!-- {release.HEADER[2:]} -->"
        assert header in content.splitlines()[:30], name
    readme = expected["README.md"]
    assert "True means \"may attend\"" in readme
    for module, names in CONTRACT.items():
        assert f"`{module}.py`" in readme and all(f"`{n}`" in readme for n in names)


def test_check_template_reports_edited_extra_and_missing_files(template_copy):
    assert release.check_template(template_copy) == []
    (template_copy / "heads.py").write_text("# edited\n")
    (template_copy / "extra.py").write_text("x = 1\n")
    (template_copy / "masks.py").unlink()
    (template_copy / "notes.txt").write_text("not a managed kind of file\n")
    assert release.check_template(template_copy) == ["extra.py", "heads.py", "masks.py"]
    assert (template_copy / "heads.py").read_text() == "# edited\n"  # check changes nothing


def test_write_template_repairs_drift_and_is_idempotent(template_copy):
    (template_copy / "heads.py").write_text("# edited\n")
    (template_copy / "stale.py").write_text("x = 1\n")
    assert release.write_template(template_copy) == ["heads.py", "stale.py"]
    assert not (template_copy / "stale.py").exists()
    assert release.write_template(template_copy) == []
    assert release.check_template(template_copy) == []


def test_render_stub_replaces_region_keeping_indentation():
    source = textwrap.dedent('''\
        def f(x):
            """Doc."""
            ### BEGIN SOLUTION
            y = x + 1
            return y
            ### END SOLUTION


        ### BEGIN HIDDEN TESTS
        assert f(1) == 2
        ### END HIDDEN TESTS
        z = 3
        ''')
    assert release.render_stub(source) == textwrap.dedent('''\
        def f(x):
            """Doc."""
            # YOUR CODE HERE
            raise NotImplementedError()


        z = 3
        ''')


@pytest.mark.parametrize(
    "source, line",
    [
        ("def f():\n    ### BEGIN SOLUTION\n    return 1\n", 2),  # BEGIN never closed
        ("def f():\n    return 1\n    ### END SOLUTION\n", 3),  # END without BEGIN
        ("def f():\n    ### BEGIN SOLUTION\n    ### BEGIN SOLUTION\n    ### END SOLUTION\n", 3),  # nested
        ("### BEGIN HIDDEN TESTS\nassert True\n", 1),  # hidden tests never closed
    ],
)
def test_render_stub_rejects_unmatched_markers(source, line):
    with pytest.raises(ValueError, match=rf"^demo\.py:{line}:"):
        release.render_stub(source, "demo.py")


def test_render_stub_rejects_leftover_markers_and_invalid_python():
    with pytest.raises(ValueError, match="marker left"):
        release.render_stub("x = 1  # BEGIN SOLUTION\n", "demo.py")
    with pytest.raises(ValueError, match="not valid Python"):
        release.render_stub("def f(:\n    pass\n", "demo.py")


@pytest.mark.parametrize("module", release.MODULES)
def test_stub_hides_the_solution_and_keeps_the_docstrings(module, expected):
    solution = (release.SOLUTIONS_DIR / f"{module}.py").read_text()
    stub = expected[f"{module}.py"]
    stub_tree = ast.parse(stub)
    for marker in ("BEGIN SOLUTION", "END SOLUTION", "HIDDEN TESTS"):
        assert marker not in stub
    assert "raise NotImplementedError()" in stub

    inside, outside = _solution_regions(solution)
    leaked = [
        line.strip() for line in inside
        if len(line.strip()) > 12 and line.strip() not in outside and line.strip() in stub
    ]
    assert leaked == [], f"solution lines leaked into the {module} stub"

    def docstrings(tree):
        nodes = [tree] + [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.ClassDef))]
        return {getattr(n, "name", "<module>"): ast.get_docstring(n) for n in nodes}

    assert docstrings(stub_tree) == docstrings(ast.parse(solution))


def test_stubs_import_expose_the_contract_and_raise_not_implemented(template_copy):
    checks = {
        "attention.scaled_dot_product_attention": "(torch.ones(1, 2, 4), torch.ones(1, 3, 4), torch.ones(1, 3, 5))",
        "heads.split_heads": "(torch.ones(2, 3, 8), 2)",
        "heads.merge_heads": "(torch.ones(2, 2, 3, 4))",
        "masks.causal_mask": "(3)",
        "mha.CausalAttention": "(3, 4, 6)",
        "mha.StackedMultiHeadAttention": "(3, 2, 6, 0.0, 2)",
        "mha.MultiHeadAttention": "(3, 4, 6, 0.0, 2)",
        "positional.sinusoidal_encoding": "(4, 8)",
        "positional.PositionalEncoding": "(8)",
    }
    assert sorted(checks) == sorted(f"{m}.{n}" for m, names in CONTRACT.items() for n in names)
    code = "import importlib, torch\n"
    code += "".join(f"{m} = importlib.import_module({m!r})\n" for m in CONTRACT)
    for call, args in checks.items():
        code += textwrap.dedent(f"""\
            try:
                {call}{args}
            except NotImplementedError:
                print("stubbed", {call!r})
            """)
    result = _run(code, template_copy)
    assert result.returncode == 0, result.stderr
    assert sorted(result.stdout.split("\n")[:-1]) == sorted(f"stubbed {c}" for c in checks)
