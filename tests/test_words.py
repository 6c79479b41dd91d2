"""The words a student reads: one legend for masks, one notation, honest titles, each message said once."""
import pytest
import torch

from autograder.graders import checks
from autograder.grade.engine import grade
from tests.conftest import SOLUTIONS, TEMPLATE


def test_a_mask_is_drawn_with_marks_the_legend_defines():
    mask = torch.ones(3, 3).tril().bool()
    assert checks.MASK_LEGEND == "✓ may attend, · blocked"
    assert checks.mask_lines(mask) == ["✓ · ·", "✓ ✓ ·", "✓ ✓ ✓"]
    assert checks.rows(mask) == "[✓ · ·, ✓ ✓ ·, ✓ ✓ ✓]"


def test_masks_side_by_side_put_expected_beside_got():
    expected, got = torch.ones(4, 4).tril().bool(), torch.ones(4, 4).triu(1).bool()
    assert checks.masks_side_by_side(expected, got).splitlines() == [
        "    expected   got",
        "    ✓ · · ·    · ✓ ✓ ✓",
        "    ✓ ✓ · ·    · · ✓ ✓",
        "    ✓ ✓ ✓ ·    · · · ✓",
        "    ✓ ✓ ✓ ✓    · · · ·",
    ]


def _copy_with(tmp_path, module, old, new):
    folder = tmp_path / "submission"
    folder.mkdir()
    for path in SOLUTIONS.glob("*.py"):
        text = path.read_text(encoding="utf-8")
        if path.stem == module:
            assert text.count(old) == 1, old
            text = text.replace(old, new)
        (folder / path.name).write_text(text, encoding="utf-8")
    return folder


@pytest.mark.grading
def test_a_wrong_causal_mask_is_shown_4x4_with_its_legend(tmp_path, warm_servers):
    folder = _copy_with(tmp_path, "masks", "torch.tril(torch.ones(seq_len, seq_len, dtype=torch.bool, device=device))",
                        "torch.ones(seq_len, seq_len, dtype=torch.bool, device=device).triu(1)")
    report = grade(folder, select="test_values_lower_triangle_with_diagonal", servers=warm_servers)
    (check,) = [t for t in report.tests if t.status == "failed"]
    message = check.message
    assert f"causal_mask(4) ({checks.MASK_LEGEND}):" in message, message
    assert checks.masks_side_by_side(torch.ones(4, 4).tril().bool(), torch.ones(4, 4).triu(1).bool()) in message, \
        message
    assert "[[T" not in message and "[[." not in message, message


def test_the_student_readme_explains_the_meta_device_once():
    readme = (TEMPLATE / "README.md").read_text(encoding="utf-8")  # as released (test_release: never stale)
    assert readme.count("**meta device**") == 1, "explained once, where it is first named"
    assert "shape and a dtype but no data" in readme and "breaks `.to(device)` and\n  GPU use" in readme


def _check_titles(module):
    """test name -> title (its docstring) of the graders of `module`."""
    import ast

    from autograder import registry

    tree = ast.parse(registry.part(module).graders.read_text(encoding="utf-8"))
    return {f.name: ast.get_docstring(f) for f in tree.body
            if isinstance(f, ast.FunctionDef) and f.name.startswith("test_")}


@pytest.mark.parametrize("module", ["heads", "masks", "mha", "positional"])
def test_check_titles_call_a_heads_width_head_dim(module):
    """d_k is attention's width of the queries and keys (the student README); a head's width is head_dim."""
    said = {name: title for name, title in _check_titles(module).items() if "d_k" in title}
    assert not said, f"expected head_dim, got d_k in {said}"


def test_the_float32_title_says_the_cases_start_small():
    title = _check_titles("attention")["test_matches_reference_float32"]
    assert "from (2, 2) matrices to batch and head dims with L != S and d_v != d_k" in title, title


@pytest.mark.grading
def test_a_value_mismatch_says_which_case_it_is(tmp_path, warm_servers):
    folder = _copy_with(tmp_path, "attention", "math.sqrt(d_k)", "d_k")
    report = grade(folder, select="test_matches_reference_float32", servers=warm_servers)
    (check,) = [t for t in report.tests if t.status == "failed"]
    assert check.message.startswith("weights for query (2, 2), key (2, 2), value (2, 2), float32 (case 1 of 4, "
                                    "smallest first: no leading dims, L = S, d_v = d_k): expected "), check.message


@pytest.mark.grading
def test_why_speed_was_not_timed_is_said_once(tmp_path, warm_servers):
    """One measurement serves the three timed checks: the report lists them together and says why once."""
    from parts.mha.test_mha import SKIPPED

    folder = _copy_with(tmp_path, "mha", "        H, hd = self.num_heads, self.head_dim  # hd: head_dim\n",
                        "        return x.new_zeros(B, T, self.d_out)\n")
    report = grade(folder, select="faster_than or close_to_reference or grow_with_heads", servers=warm_servers)
    assert [t.status for t in report.tests] == ["failed"] * 3, [t.message for t in report.tests]
    text = report.to_text()
    assert text.count(SKIPPED) == 1 and "It fails these 3 checks" in text, text




def _kit_texts():
    """(path, text) of every file of the kit a student or an instructor reads, generated ones included."""
    from autograder.paths import KIT

    for pattern in ("solutions/*.py", "autograder/**/*.py", "assignments/**/*.ipynb", "student_template/*",
                    "examples/**/*", "README.md", "docs/**/*.md", "tests/corpus/*.toml"):
        for path in sorted(KIT.glob(pattern)):
            relative = path.relative_to(KIT).as_posix()
            if path.is_file() and path.suffix in (".py", ".ipynb", ".md", ".toml"):
                yield relative, path.read_text(encoding="utf-8")


def test_tutorials_are_cited_by_title_not_by_number():
    import re

    numbered = {path: re.findall(r"(?i)tutorials? 00\d.{0,20}", text) for path, text in _kit_texts()}
    assert not {p: found for p, found in numbered.items() if found}, "expected titles, got numbers"


def test_every_cited_title_is_in_the_one_list():
    import re

    from autograder.tutorials import TUTORIALS

    cited = {title for path, text in _kit_texts() if path != "autograder/tutorials.py"  # the list itself
             for title in re.findall(r"《[^》]*》", text)}
    assert cited and cited <= set(TUTORIALS), f"cited but not in autograder/tutorials.py: {cited - set(TUTORIALS)}"


def test_both_readmes_list_the_tutorials_with_their_titles():
    from autograder import tutorials
    from autograder.paths import README

    for name, text in (("README.md", README.read_text(encoding="utf-8")),
                       ("student README", (TEMPLATE / "README.md").read_text(encoding="utf-8"))):
        assert tutorials.table() in text, name
    assert "PyTorch快餐教程(5)-Multi-Head Attention" in tutorials.table()
    assert "Transformer中Self-Attention以及Multi-Head Attention详解" in tutorials.table()
