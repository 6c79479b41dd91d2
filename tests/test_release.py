"""Tests for autograder.release, the generator of the student template."""
import ast
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

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


@pytest.mark.grading
def test_checked_in_template_is_up_to_date():
    drift = release.check_template()
    assert drift == [], f"student_template/ is out of date ({drift}); run `python grader_cli.py release`"


def test_source_notebooks_module_cells_are_in_sync():
    stale = release.check_sources()
    assert stale == [], f"module cells differ from the parts' solutions ({stale}); run `python grader_cli.py release`"


def test_check_sources_names_a_stale_copy_of_a_solution_and_an_extra_file(tmp_path):
    """solutions/ is the release's: a copy that differs from its part's solution.py, or a file of no part, is
    named (and the release writes the one, removes the other)."""
    shutil.copytree(release.SOLUTIONS_DIR, tmp_path / "solutions", ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "solutions" / "masks.py").write_text("edited by hand\n")
    (tmp_path / "solutions" / "rotary.py").write_text("a part that is not one\n")
    step = next(s for s in release.steps(solutions_dir=tmp_path / "solutions") if s.shown_as == "solutions/")
    assert step.stale() == ["masks.py", "rotary.py"]
    assert step.write() == ["masks.py", "rotary.py"] and step.stale() == []


def test_check_sources_detects_an_edited_module_cell(tmp_path):
    import shutil

    shutil.copytree(release.ASSIGNMENT_DIR, tmp_path / "mha")
    nb = tmp_path / "mha" / release.NOTEBOOKS["masks"]
    nb.write_text(nb.read_text().replace("torch.tril(", "torch.triu("))
    assert release.check_sources(tmp_path / "mha") == [f"assignments/mha/{release.NOTEBOOKS['masks']}"]


@pytest.mark.grading
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


@pytest.mark.grading
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


# -- points: one source, the graders' markers --------------------------------------------------------
def _task_cells(folder):
    """module -> (nbgrader points, heading) of the task cell of each notebook in `folder`."""
    import nbformat

    out = {}
    for module, name in release.NOTEBOOKS.items():
        cell = release.task_cell(nbformat.read(folder / name, as_version=4), module)
        out[module] = (cell.metadata["nbgrader"]["points"], cell.source.splitlines()[0])
    return out


def test_points_add_up_to_100_and_every_place_that_shows_them_reads_the_markers():
    points = release.grader_points()
    assert sum(p.points for p in points.values()) == 100, points
    expected = {m: (p.points, f"## Hidden graders ({p.points:g} points)") for m, p in points.items()}
    assert _task_cells(release.ASSIGNMENT_DIR) == expected
    assert _task_cells(release.TEMPLATE_DIR) == expected
    readme = (release.TEMPLATE_DIR / "README.md").read_text()
    for module, p in points.items():
        assert f"| `{module}.py` |" in readme and readme.split(f"| `{module}.py` |")[1].split("\n")[0].endswith(
            f"| {p.points:g} |"), module
    namespace = {}
    exec(next(line for line in (release.TEMPLATE_DIR / "selfcheck.py").read_text().splitlines()
              if line.startswith("POINTS = ")), namespace)
    assert namespace["POINTS"] == {m: p.points for m, p in points.items()}
    assert release.points_table(points) in GRADING_PAGE.read_text(encoding="utf-8")
    parts = release.parts_table(points)
    assert all(f"| {p.points:g} |" in parts for p in points.values())
    for page in (release.KIT_README, release.DOCS / "student.md"):
        assert parts in page.read_text(encoding="utf-8"), page


#: Where the documentation explains the points, with the points table and the example report.
GRADING_PAGE = release.DOCS / "instructor" / "grading.md"


def test_the_documentation_states_the_markers_points_wherever_it_gives_them():
    """The prose, the example report's maxima (CUDA checks included, autograder/scoring.py) and its line of
    CUDA checks not graded."""
    points = release.grader_points()
    text = GRADING_PAGE.read_text(encoding="utf-8")
    assert f"CUDA checks included ({', '.join(f'{p.points:g}' for p in points.values())})" in text
    rows = dict(re.findall(r"^  (attention|heads|masks|mha|positional) +[\d.]+ / ([\d.]+)", text, re.M))
    assert rows == {m: f"{p.points:g}" for m, p in points.items()}, (
        "the documented example report is stale: grade examples/buggy-student again and paste its report")
    cuda = sum(p.cuda_points for p in points.values())
    checks = sum(p.cuda_checks for p in points.values())
    assert f"Not graded on this machine ({checks} checks, {cuda:g} points)" in text


@pytest.mark.grading
def test_a_changed_marker_makes_release_check_name_everything_that_shows_points(tmp_path, monkeypatch):
    parts = tmp_path / "parts"
    shutil.copytree(release.PARTS_DIR, parts, ignore=shutil.ignore_patterns("__pycache__"))
    kit = release.grader_points()["masks"].points
    source = (parts / "masks" / "test_masks.py").read_text()
    assert source.count('@points(3, "mask")') == 1
    (parts / "masks" / "test_masks.py").write_text(source.replace('@points(3, "mask")', '@points(4, "mask")'))
    monkeypatch.setattr(release, "PARTS_DIR", parts)
    assert release.grader_points()["masks"].points == kit + 1
    stale = release.check_sources()
    # every part's notebook (an optional part's task cell counts the default parts' total too), and the copies in
    # assignments/mha/ of those handed out by default (the nbgrader source folder of the kit as it is)
    assert set(stale) == {f"assignments/mha/{n}" for n in release.NOTEBOOKS.values()} | {
        f"parts/{m}/notebook.ipynb" for m in release.PARTS} | {
        "autograder/selfcheck.py"} | _pages_with_blocks("points", "parts"), stale
    assert set(release.check_template()) >= {*release.NOTEBOOKS.values(), "README.md", "selfcheck.py"}


def _pages_with_blocks(*names) -> set[str]:
    """The pages of the kit's documentation (README.md, docs/) that hold a block of one of `names`."""
    pages = [release.KIT_README, *release.DOCS.rglob("*.md")]
    return {page.relative_to(release.ROOT).as_posix() for page in pages
            if any(re.search(rf"^<!-- BEGIN {name}\b", page.read_text(encoding="utf-8"), re.M) for name in names)}


def test_the_generated_blocks_are_where_their_text_is():
    assert _pages_with_blocks("points") == {"docs/instructor/grading.md"}
    assert _pages_with_blocks("parts") == {"README.md", "docs/student.md"}
    assert _pages_with_blocks("tutorials") == {"README.md", "docs/index.md"}
    assert set(release.kit_docs_texts()) == _pages_with_blocks("points", "parts", "tutorials")
    stale = [path for path, text in release.kit_docs_texts().items()
             if (release.ROOT / path).read_text(encoding="utf-8") != text]
    assert not stale, f"{stale}: generated blocks out of date; run `python grader_cli.py release`"


@pytest.fixture()
def docs_copy(tmp_path, monkeypatch):
    """A copy of the kit's README.md and docs/, which the release reads instead of the kit's."""
    shutil.copy(release.KIT_README, tmp_path / "README.md")
    shutil.copytree(release.DOCS, tmp_path / "docs", ignore=shutil.ignore_patterns("*.png"))
    monkeypatch.setattr(release, "ROOT", tmp_path)
    monkeypatch.setattr(release, "KIT_README", tmp_path / "README.md")
    monkeypatch.setattr(release, "DOCS", tmp_path / "docs")
    return tmp_path


def _move_block(source: Path, target: Path, name: str, stale: bool = True):
    """Cut the `name` block out of `source` and put it at the end of `target`, emptied when `stale`."""
    text = source.read_text(encoding="utf-8")
    block = re.search(rf"^<!-- BEGIN {name}\b.*?^<!-- END {name} -->\n", text, re.S | re.M)[0]
    source.write_text(text.replace(block, ""), encoding="utf-8")
    if stale:
        block = block.split("\n", 1)[0] + "\n" + f"<!-- END {name} -->\n"
    target.write_text(target.read_text(encoding="utf-8") + "\n" + block, encoding="utf-8")


def test_a_generated_block_is_guarded_wherever_it_moves(docs_copy):
    """release --check (kit_docs_texts) finds a block on whatever page of docs/ it moved to, and writes it there."""
    grading, moved_to = docs_copy / "docs" / "instructor" / "grading.md", docs_copy / "docs" / "platforms" / "gpu.md"
    assert {path: text for path, text in release.kit_docs_texts().items()
            if (docs_copy / path).read_text(encoding="utf-8") != text} == {}
    _move_block(grading, moved_to, "points")
    texts = release.kit_docs_texts()
    assert "docs/instructor/grading.md" not in texts
    expected = texts["docs/platforms/gpu.md"]
    assert expected != moved_to.read_text(encoding="utf-8")
    assert release.points_table(release.grader_points()) in expected


def test_a_block_missing_unclosed_or_unknown_is_refused(docs_copy):
    grading = docs_copy / "docs" / "instructor" / "grading.md"
    text = grading.read_text(encoding="utf-8")
    grading.write_text(re.sub(r"^<!-- END points -->\n", "", text, flags=re.M), encoding="utf-8")
    with pytest.raises(ValueError, match="points block without its end"):
        release.kit_docs_texts()
    grading.write_text(re.sub(r"^<!-- BEGIN points.*?^<!-- END points -->\n", "", text, flags=re.S | re.M),
                       encoding="utf-8")
    with pytest.raises(ValueError, match="has no points block"):
        release.kit_docs_texts()
    grading.write_text(text + "\n<!-- BEGIN pointz (a typo) -->\n<!-- END pointz -->\n", encoding="utf-8")
    with pytest.raises(ValueError, match="a block named 'pointz'"):
        release.kit_docs_texts()


@pytest.mark.parametrize("decorators, error", [
    ('@pytest.mark.parametrize("n", [1, 2])\n@points(1, "values")', "run once"),
    ('@points(1, "values")\n@points(2, "values")', "run once"),
    ("@points(POINTS, 'values')", "not literals"),
])
def test_grader_points_refuses_what_it_cannot_count(tmp_path, decorators, error):
    for module in release.MODULES:
        (tmp_path / f"test_{module}.py").write_text(f"{decorators}\ndef test_x(student, n=1):\n    pass\n")
    with pytest.raises(ValueError, match=error):
        release.grader_points(tmp_path)


def test_grader_points_counts_cuda_checks_and_keyword_markers(tmp_path):
    for module in release.MODULES:
        (tmp_path / f"test_{module}.py").write_text(textwrap.dedent('''\
            @points(2, "values")
            def test_a(student): ...

            @needs_cuda
            @pytest.mark.points(points=3, aspect="device")
            def test_b(student): ...

            def test_not_graded(student): ...
            '''))
    assert set(release.grader_points(tmp_path).values()) == {release.Points(5, 2, 3, 1)}


# -- what grading knows of the released template -------------------------------------------------------
def test_released_digests_tell_the_template_from_work(expected):
    from autograder.submission import forms
    from autograder.submission.released import MODULE_CELLS, NAMES

    assert release.RELEASED.read_text() == release.released_text(expected)
    for module in release.MODULES:
        stub, book = f"{module}.py", release.NOTEBOOKS[module]
        assert forms.is_template(module, stub, expected[stub].encode()), stub
        assert forms.is_template(module, book, expected[book].encode()), book
        assert not forms.is_template(module, stub, (release.SOLUTIONS_DIR / stub).read_bytes()), stub
        assert not forms.is_template(module, book, (release.ASSIGNMENT_DIR / book).read_bytes()), book
        assert NAMES[module] == CONTRACT[module]
        nb = release._load(expected[book])
        assert nb["cells"][MODULE_CELLS[module] - 1] is release.module_cell(nb, module)


def test_code_digest_sees_code_only():
    from autograder.submission.forms import code_digest

    source = 'def f(x):\n    """Doc."""\n    return x + 1  # add one\n'
    same = ['"""Module doc."""\n# a comment\n\n' + source, source.replace("\n", "\r\n"), source + "\n\n\n",
            source.replace('"""Doc."""', '"""Another doc,\n    on two lines."""'), source.replace("  # add one", "")]
    assert {code_digest(s) for s in same} == {code_digest(source)}
    assert code_digest(source.replace("x + 1", "x + 2")) != code_digest(source)
    assert code_digest("def f(:\n") is None
    assert code_digest('s = "# not a comment"\n') != code_digest('s = ""\n')


def test_the_shipped_selfcheck_holds_the_public_checks_of_the_parts_handed_out():
    """The public checks are written once, parts/<name>/checks.py: the shipped selfcheck.py holds those of the parts
    handed out, in teaching order, in place of the kit's block that reads them from the part folders."""
    from autograder import course

    default = release.selfcheck_text()
    assert "# BEGIN CHECKS" not in default and "_part_checks" not in default
    assert [m for m in release.PARTS if f'@check("{m}",' in default] == list(release.MODULES)
    for module in release.MODULES:
        assert release.part_checks(module) in default
    kit = release.selfcheck_text(kit=True)
    assert "# BEGIN CHECKS" in kit and "@check(" not in kit.split("# END CHECKS")[0].split("# BEGIN CHECKS")[1]
    with_kvcache = release.selfcheck_text(release.course_points(course.parse(
        b"[parts]\nattention = 23\nmasks = 16\nkvcache = 11\n")))
    assert [m for m in release.PARTS if f'@check("{m}",' in with_kvcache] == ["attention", "masks", "kvcache"]
    assert release.part_checks("kvcache") in with_kvcache and '"""The KV-cache part' not in with_kvcache


def _parts_copy(tmp_path):
    """The notebooks and public checks of every part, copied: a parts folder to edit."""
    for module in release.PARTS:
        (tmp_path / module).mkdir()
        for name in ("notebook.ipynb", "checks.py"):
            shutil.copyfile(release.PARTS_DIR / module / name, tmp_path / module / name)
    return tmp_path


def test_the_check_cells_are_written_from_the_parts_checks(tmp_path):
    """Written once: each check cell of a source notebook holds the checks of parts/<name>/checks.py that name it
    (`cell=`), the check-helpers cell the self-check's helpers; a cell edited in the notebook is named, with its part
    and its cell, and `release --check` names the notebook."""
    import json

    assert release.drifted_check_cells() == []
    for module in release.PARTS:
        nb = json.loads((release.PARTS_DIR / module / "notebook.ipynb").read_text(encoding="utf-8"))
        cells = {c["metadata"]["nbgrader"]["grade_id"]: "".join(c["source"]) for c in nb["cells"]
                 if release.is_check_cell(c) or c["metadata"].get("nbgrader", {}).get("grade_id") == "check-helpers"}
        preamble, sources = release.part_check_cells(module)
        assert cells == {"check-helpers": release.helpers_cell_text(preamble), **sources}, module
        assert "\n".join(cells.values()).count("@check(") == release.part_checks(module).count("@check(")
    parts = _parts_copy(tmp_path)
    path = parts / "masks" / "notebook.ipynb"
    nb = json.loads(path.read_text(encoding="utf-8"))
    cell = next(c for c in nb["cells"] if c["metadata"].get("nbgrader", {}).get("grade_id") == "check-values")
    cell["source"] = "".join(cell["source"]).replace("causal_mask(4)", "causal_mask(3)")
    path.write_text(json.dumps(nb), encoding="utf-8")
    assert release.drifted_check_cells(parts) == [
        "part 'masks': the check cell 'check-values' of parts/masks/notebook.ipynb differs from what the release "
        "writes from parts/masks/checks.py (the checks are written once, there)"]
    assert [m for refused, m in release.check_cell_problems(parts) if refused] == []  # the release writes it back
    assert release.Step(parts, "parts/", release.part_notebooks, "sources").stale() == ["masks/notebook.ipynb"]


def test_a_check_with_no_cell_or_a_cell_with_no_check_is_refused_naming_the_part_and_the_cell(tmp_path):
    parts = _parts_copy(tmp_path)
    checks = parts / "masks" / "checks.py"
    text = checks.read_text(encoding="utf-8")
    checks.write_text(text.replace(', cell="check-device"', ""), encoding="utf-8")
    assert release.drifted_check_cells(parts) == [
        "part 'masks': the check \"causal_mask(5, device='meta') is a bool (5, 5) tensor on the meta device; "
        "device=None: torch's default device; a torch.device works too\" of parts/masks/checks.py names no "
        "check cell of 03_masks.ipynb: give its @check a cell=\"check-...\" (the grade id of the cell that runs it)"]
    checks.write_text(text.replace('cell="check-device"', 'cell="check-devices"'), encoding="utf-8")
    assert release.drifted_check_cells(parts) == [
        "part 'masks': parts/masks/checks.py names the check cell 'check-devices', which "
        "parts/masks/notebook.ipynb does not have (a code cell with that nbgrader grade_id)"]
    checks.write_text(text.replace('cell="check-device"', 'cell="check-values"'), encoding="utf-8")
    assert release.drifted_check_cells(parts) == [
        "part 'masks': the check cell 'check-device' of parts/masks/notebook.ipynb runs no check of "
        "parts/masks/checks.py: name it in a check's cell=, or remove the cell"]
    refused = [m for refused, m in release.check_cell_problems(parts) if refused]
    assert refused == release.drifted_check_cells(parts)  # release refuses, saying why
