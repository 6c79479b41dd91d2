"""Similar submissions (issue 38): `grader_cli.py similarity CLASS -o OUT` (autograder/classrun/similarity.py).

A small class where two students share a copy, one of them with every local renamed, its comments replaced,
and handed in as notebooks, while the others start from the template: that pair ranks first, and no pair whose
only shared code is the template's (its .py stubs or its released notebooks) is listed. A class entry that is
a link is never followed. The page says that similarity is evidence for a person to judge, escapes every id,
and fits a phone's width. No grading: submissions are only read, through the kit's intake.
"""
from __future__ import annotations

import csv
import random
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from autograder.classrun import similarity
from autograder.report.model import csv_value
from grader_cli import cli
from tests.conftest import ROOT, SOLUTIONS, TEMPLATE
from tests.corpus.generated import make_class, rename_locals, renamed_copy
from tests.test_feedback_html import MEASURE, PHONE, browser, measure  # noqa: F401  (browser: a fixture)

NOTEBOOKS = {"attention": "01_attention", "heads": "02_heads", "masks": "03_masks", "mha": "04_mha",
             "positional": "05_positional"}
HOSTILE = "<script>alert(1)<"  # an id that is markup (one path component)
OWN_MASKS = '''"""My causal mask."""
import torch


def causal_mask(seq_len, device=None):
    positions = torch.arange(seq_len, device=device)
    return positions[None, :] <= positions[:, None]
'''


def as_notebooks(folder: Path, target: Path):
    """The modules of `folder` handed in as notebooks, one code cell each, named as the released ones."""
    import nbformat

    target.mkdir(parents=True)
    for module, name in NOTEBOOKS.items():
        nb = nbformat.v4.new_notebook()
        nb.cells = [nbformat.v4.new_markdown_cell(f"# {module}"),
                    nbformat.v4.new_code_cell((folder / f"{module}.py").read_text(encoding="utf-8"))]
        nbformat.write(nb, str(target / f"{name}.ipynb"))


@pytest.fixture(scope="module")
def classroom(tmp_path_factory):
    root = tmp_path_factory.mktemp("similarity")
    folder = root / "class"
    folder.mkdir()
    shutil.copytree(SOLUTIONS, folder / "alice", ignore=shutil.ignore_patterns("__init__.py", "__pycache__"))
    renamed = root / "renamed"
    renamed_copy(folder / "alice", renamed)
    as_notebooks(renamed, folder / HOSTILE)  # alice's work, renamed, as notebooks
    shutil.copytree(ROOT / "examples" / "einsum-student", folder / "carol")
    shutil.copytree(TEMPLATE, folder / "dave", ignore=shutil.ignore_patterns("*.ipynb", "README.md", "selfcheck.py"))
    (folder / "dave" / "masks.py").write_text(OWN_MASKS)  # the template, and one module of his own
    shutil.copytree(TEMPLATE, folder / "erin", ignore=shutil.ignore_patterns("*.ipynb"))  # the untouched .py stubs
    shutil.copytree(TEMPLATE, folder / "frank", ignore=shutil.ignore_patterns("*.py", "*.md"))  # untouched notebooks
    (folder / "link").symlink_to(folder / "alice")  # a copy by link: never followed
    result = similarity.compare(folder)
    return {"folder": folder, "result": result, "root": root}


def test_the_renamed_copy_handed_in_as_notebooks_ranks_first(classroom):
    pairs = classroom["result"].pairs
    assert pairs, "expected the copied pair listed"
    first = pairs[0]
    assert {first.a, first.b} == {"alice", HOSTILE}, f"expected alice and her renamed copy first, got {pairs}"
    assert min(first.similarity_a, first.similarity_b) >= 0.9, f"expected a whole copy found as one, got {first}"
    # masks.py's own code is one line beside the template's: shorter than a shared run is sure to be found
    shared = [s.module for s in first.shared]
    assert {"attention", "heads", "mha", "positional"} <= set(shared), f"expected the four larger modules: {shared}"


def test_no_pair_that_shares_only_the_template_is_listed(classroom):
    template_only = {"dave", "erin", "frank"}
    listed = [(p.a, p.b) for p in classroom["result"].pairs if {p.a, p.b} & template_only]
    assert listed == [], f"expected no pair with dave, erin or frank (the template, and their own work), got {listed}"
    assert template_only <= set(classroom["result"].compared), "expected them read and compared, not left out"


def test_a_class_entry_that_is_a_link_is_never_followed(classroom):
    assert "link" not in classroom["result"].compared
    assert "symbolic link" in classroom["result"].left_out["link"], classroom["result"].left_out


def test_the_rename_changes_every_local_but_not_the_code(classroom):
    source = (SOLUTIONS / "attention.py").read_text(encoding="utf-8")
    renamed = rename_locals(source, random.Random(1))
    assert "scores =" in source and "scores =" not in renamed and renamed != source


def test_the_command_writes_a_ranked_csv_and_a_page_that_says_it_is_no_verdict(classroom, tmp_path):
    result = CliRunner().invoke(cli, ["similarity", str(classroom["folder"]), "-o", str(tmp_path)],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "evidence for a person to judge, not a verdict" in result.output
    with open(tmp_path / "similarity.csv", newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    assert rows and rows[0]["rank"] == "1" and {csv_value(rows[0]["id_a"]), csv_value(rows[0]["id_b"])} == {
        "alice", HOSTILE}, rows
    page = (tmp_path / "similarity.html").read_text(encoding="utf-8")
    assert "Similarity is evidence for a person to judge, not a verdict." in page
    assert "<script>alert" not in page and "&lt;script&gt;alert(1)&lt;" in page
    assert page.count("<mark>") >= 5, "expected the shared regions marked in both sides"


def test_the_page_fits_a_phone(browser, classroom, tmp_path):  # noqa: F811
    similarity.write(classroom["result"], tmp_path)
    page = tmp_path / "page.html"
    page.write_text((tmp_path / "similarity.html").read_text(encoding="utf-8").replace("</body>", MEASURE + "</body>"),
                    encoding="utf-8")
    measured = measure(browser, page, PHONE)
    assert measured["scrollWidth"] <= PHONE and measured["wider"] == [], measured["wider"]


def test_a_planted_copy_among_generated_submissions_ranks_first(tmp_path):
    """The generated class of benchmarks/similarity_scale.py, small: 30 students, one the renamed copy of
    another (200 are measured by the benchmark)."""
    ids = make_class(tmp_path / "class", 30)
    renamed_copy(tmp_path / "class" / ids[3], tmp_path / "class" / ids[21])
    result = similarity.compare(tmp_path / "class")
    assert result.pairs and {result.pairs[0].a, result.pairs[0].b} == {ids[3], ids[21]}, result.pairs[:3]
    assert all(p.score < 0.5 for p in result.pairs[1:]), f"expected no other pair alike: {result.pairs[1:]}"


def test_a_solution_shared_by_more_than_max_share_is_said_and_shown_with_a_larger_max_share(tmp_path):
    """MOSS's trade-off, made visible: code that more than --max-share submissions hold is common code, so a
    solution that went round twelve students lists no pair; the result names them as mostly common code, and
    with --max-share above the group every pair of it is listed."""
    folder = tmp_path / "class"
    for k in range(12):
        shutil.copytree(SOLUTIONS, folder / f"s{k:02d}", ignore=shutil.ignore_patterns("__init__.py", "__pycache__"))
    default = similarity.compare(folder)
    assert default.pairs == [] and sorted(i for i, _ in default.mostly_common) == sorted(default.compared), default
    wider = similarity.compare(folder, max_share=12, top=100)
    assert len(wider.pairs) == 12 * 11 // 2 and all(p.score > 0.99 for p in wider.pairs), len(wider.pairs)


def test_an_optional_parts_module_is_compared_where_a_course_hands_it_out(tmp_path):
    """A course file that lists kvcache hands out its module: two students who share only their kvcache.py (each
    with the five stubs of the template) are a pair under that course's parts; with no course file (the kit's
    five parts) their kvcache.py is no module, and no pair is listed."""
    from autograder import MODULES

    folder = tmp_path / "class"
    for student in ("ann", "ben"):
        shutil.copytree(TEMPLATE, folder / student, ignore=shutil.ignore_patterns("*.ipynb", "*.md", "selfcheck.py"))
        shutil.copyfile(SOLUTIONS / "kvcache.py", folder / student / "kvcache.py")
    result = similarity.compare(folder, parts=(*MODULES, "kvcache"))
    assert [({p.a, p.b}, [s.module for s in p.shared]) for p in result.pairs] == [({"ann", "ben"}, ["kvcache"])], (
        result.pairs)
    assert similarity.compare(folder).pairs == []
