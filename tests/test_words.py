"""The words a student reads: one legend for masks, one notation, honest titles, each message said once."""
import pytest
import torch

from autograder.grade import checks
from autograder.grade.engine import grade
from tests.conftest import SOLUTIONS


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
    from autograder.release import expected_template

    readme = expected_template()["README.md"]
    assert readme.count("**meta device**") == 1, "explained once, where it is first named"
    assert "shape and a dtype but no data" in readme and "breaks `.to(device)` and\n  GPU use" in readme
