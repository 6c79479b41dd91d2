"""The students' self-check and `grader_cli.py check`: same checks, same exit codes."""
import subprocess
import sys

import pytest

from autograder.release import SELF_CHECK
from tests.conftest import ROOT, SOLUTIONS, TEMPLATE
from tests.corpus import load_corpus, materialize

pytestmark = pytest.mark.grading  # every test here grades or starts student processes


def _public_checks(*modules):
    """How many public checks the parts `modules` have (default: those handed out), from parts/<name>/checks.py."""
    import re

    from autograder import release

    return sum(len(re.findall(r"^@check\(", release.part_checks(m), re.M)) for m in modules or release.MODULES)


PUBLIC = _public_checks()  # the self-check's "N of N"


def check(path):
    return subprocess.run([sys.executable, "grader_cli.py", "check", str(path)], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)


def test_reference_passes_every_public_check():
    proc = check(SOLUTIONS)
    assert proc.returncode == 0, proc.stdout
    assert f"{PUBLIC} of {PUBLIC} public checks passed" in proc.stdout


def test_missing_scaling_fails_with_exit_1(tmp_path):
    case = next(c for c in load_corpus()["bug"] if c.id == "attention-no-scaling")
    proc = check(materialize(case, tmp_path / case.id, SOLUTIONS))
    assert proc.returncode == 1
    assert "FAIL  attention  《Self-Attention详解》" in proc.stdout
    # the worked example, and the two checks against F.scaled_dot_product_attention (unmasked, masked)
    assert proc.stdout.count("FAIL  attention") == 3, proc.stdout
    assert f"{PUBLIC - 3} of {PUBLIC} public checks passed" in proc.stdout


def test_template_selfcheck_runs_in_the_students_folder():
    proc = subprocess.run([sys.executable, "selfcheck.py"], cwd=TEMPLATE, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1
    assert "not implemented yet" in proc.stdout and f"0 of {PUBLIC} public checks passed" in proc.stdout


def test_selfcheck_holds_no_hidden_grader_and_no_solution():
    from autograder import release

    text = (TEMPLATE / "selfcheck.py").read_text()
    assert text == release.selfcheck_text()  # the kit's, the public checks of parts/<name>/checks.py written in
    for forbidden in ("autograder", "solutions", "BEGIN SOLUTION", "masked_fill", "softmax(", "register_buffer"):
        assert forbidden not in text, forbidden


@pytest.mark.parametrize("path", ["/no/such/submission"])
def test_unreadable_path_exits_2(path):
    assert check(path).returncode == 2


def _student_folder(tmp_path, edits):
    """The reference modules with `edits` ({module: (old, new)}) and the self-check, as a student has them."""
    import shutil

    folder = tmp_path / "student"
    folder.mkdir()
    for module in ("attention", "heads", "masks", "mha", "positional"):
        text = (SOLUTIONS / f"{module}.py").read_text()
        if module in edits:
            old, new = edits[module]
            assert text.count(old) == 1, old
            text = text.replace(old, new)
        (folder / f"{module}.py").write_text(text)
    shutil.copyfile(TEMPLATE / "selfcheck.py", folder / "selfcheck.py")
    return folder


def test_a_failure_cites_the_students_line_never_the_selfchecks(tmp_path):
    folder = _student_folder(tmp_path, {
        "attention": ("math.sqrt(d_k)", "d_k"),  # runs, wrong result: the function checked is named
        "heads": ("d_k = d_model // num_heads", "d_k = d_model // num_heads // undefined_name"),  # raises
    })
    proc = subprocess.run([sys.executable, "selfcheck.py"], cwd=folder, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1
    assert "selfcheck.py" not in proc.stdout, proc.stdout
    heads = (folder / "heads.py").read_text().splitlines()
    line = next(i for i, text in enumerate(heads, 1) if "undefined_name" in text)
    assert f"(at heads.py, line {line}: d_k = d_model // num_heads // undefined_name" in proc.stdout, proc.stdout
    attention = (folder / "attention.py").read_text().splitlines()
    line = next(i for i, text in enumerate(attention, 1) if text.startswith("def scaled_dot_product_attention"))
    assert f"(see scaled_dot_product_attention at attention.py, line {line})" in proc.stdout, proc.stdout


def test_selfcheck_states_the_graders_points():
    from autograder.release import grader_points

    proc = check(SOLUTIONS)
    points = grader_points()
    assert ("Hidden graders: " + ", ".join(f"{m} {p.points:g}" for m, p in points.items())
            + f" points, {sum(p.points for p in points.values()):g} in all.") in proc.stdout, proc.stdout


def _selfcheck(folder):
    return subprocess.run([sys.executable, "selfcheck.py"], cwd=folder, capture_output=True, text=True, timeout=300)


def _failures(stdout):
    """module -> the lines of its failed checks (title and details), from the self-check's output."""
    failed, current = {}, None
    for line in stdout.splitlines():
        if line.startswith("  FAIL  "):
            current = line.split()[1]
            failed.setdefault(current, []).append(line)
        elif line.startswith("        ") and current:
            failed[current].append(line)
        else:
            current = None
    return failed


def test_attention_that_fills_blocked_scores_with_zero_fails_naming_attention_py(tmp_path):
    folder = _student_folder(tmp_path, {"attention": ('scores.masked_fill(~mask, float("-inf"))',
                                                      "scores.masked_fill(~mask, 0)")})
    proc = _selfcheck(folder)
    assert proc.returncode == 1
    failed = _failures(proc.stdout)
    assert sorted(failed) == ["attention"], f"expected only attention to fail, got {sorted(failed)}:\n{proc.stdout}"
    text = "\n".join(failed["attention"])
    assert "with a (4, 4) mask" in text and "(see scaled_dot_product_attention at attention.py" in text, text
    assert "mha.py" not in proc.stdout, proc.stdout


def test_mha_built_on_a_failed_attention_points_back_to_it(tmp_path):
    folder = _student_folder(tmp_path, {
        "attention": ('scores.masked_fill(~mask, float("-inf"))', "scores.masked_fill(~mask, 0)"),
        "mha": ("import torch\n", "import torch\nfrom attention import scaled_dot_product_attention\n"),
    })
    text = (folder / "mha.py").read_text().replace(
        """        scores = q @ k.transpose(2, 3) / math.sqrt(hd)  # (B, H, T, T)
        scores = scores.masked_fill(~self.mask[:T, :T], float("-inf"))
        weights = self.dropout(torch.softmax(scores, dim=-1))  # (B, H, T, T)
        context = (weights @ v)""",
        """        context, _ = scaled_dot_product_attention(q, k, v, self.mask[:T, :T], self.dropout)
        context = (context)""")
    (folder / "mha.py").write_text(text)
    proc = _selfcheck(folder)
    mha = "\n".join(_failures(proc.stdout).get("mha", []))
    assert ("(mha.py uses your scaled_dot_product_attention, which failed its own check above: fix that first)"
            in mha), proc.stdout


def test_a_failure_prints_the_notebooks_hint(tmp_path):
    folder = _student_folder(tmp_path, {"attention": ("math.sqrt(d_k)", "d_k")})
    attention = "\n".join(_failures(_selfcheck(folder).stdout)["attention"])
    assert ("hint: did you divide the scores by sqrt(d_k) = sqrt(2)? Dividing by d_k gives b1 = (0.38, 0.62), "
            "not dividing at all (0.27, 0.73)") in attention, attention


def test_a_wrong_mask_is_drawn_4x4_with_its_legend(tmp_path):
    folder = _student_folder(tmp_path, {"masks": ("torch.tril(torch.ones(seq_len, seq_len, dtype=torch.bool, "
                                                  "device=device))",
                                                  "torch.triu(torch.ones(seq_len, seq_len, dtype=torch.bool, "
                                                  "device=device), diagonal=1)")})
    masks = "\n".join(_failures(_selfcheck(folder).stdout)["masks"])
    assert "causal_mask(4) (✓ may attend, · blocked):" in masks, masks
    drawn = ["expected   got", "✓ · · ·    · ✓ ✓ ✓", "✓ ✓ · ·    · · ✓ ✓", "✓ ✓ ✓ ·    · · · ✓", "✓ ✓ ✓ ✓    · · · ·"]
    assert all(f"          {line}" in masks.splitlines() for line in drawn), masks
    assert "[[T" not in masks and "[[." not in masks, masks


def test_worked_example_rows_say_which_rows(tmp_path):
    folder = _student_folder(tmp_path, {"mha": ("self.head_dim = d_out // num_heads\n",  # draws before Wq
                                                "self.head_dim = d_out // num_heads\n        nn.Linear(1, 1)\n")})
    mha = "\n".join(_failures(_selfcheck(folder).stdout)["mha"])
    assert "the six rows of the output (tokens 'Your' to 'step'): expected [(0.1184, 0.3120" in mha, mha


def test_a_notebook_students_folder_is_told_to_run_the_notebooks_check_cells(tmp_path):
    """Issue 48: in the template folder of a student who works in the notebooks, the .py files are still the
    template and the self-check said "0 of 15 public checks passed". It says to run the notebooks' check cells,
    and fails nothing; a part worked in its .py file beside them is checked as before. The untouched template,
    whose notebooks are the template too, still fails every check (test_template_selfcheck_...)."""
    import shutil

    from autograder.release import ASSIGNMENT_DIR, NOTEBOOKS

    folder = tmp_path / "student"
    shutil.copytree(TEMPLATE, folder)
    for name in NOTEBOOKS.values():  # the source notebooks: the solutions in their code cells
        shutil.copyfile(ASSIGNMENT_DIR / name, folder / name)
    proc = _selfcheck(folder)
    assert proc.returncode == 0, proc.stdout
    assert "public checks passed" not in proc.stdout and "FAIL" not in proc.stdout, proc.stdout
    assert ("Your work is in the notebooks (01_attention.ipynb, 02_heads.ipynb, 03_masks.ipynb, 04_mha.ipynb, "
            "05_positional.ipynb), and this self-check reads the .py files, which hold none. The notebooks' check "
            "cells run these same checks: run each from the top (Kernel > Restart Kernel and Run All Cells)") \
        in proc.stdout, proc.stdout
    shutil.copyfile(SOLUTIONS / "masks.py", folder / "masks.py")  # one part worked in its .py file
    (folder / "heads.py").unlink()  # and one handed in as its notebook alone
    proc = _selfcheck(folder)
    assert proc.returncode == 0, proc.stdout
    masks = _public_checks("masks")
    assert f"{masks} of {masks} public checks passed." in proc.stdout, proc.stdout
    assert ("  --    heads      not checked here: heads.py holds no work and 02_heads.ipynb does; run that "
            "notebook's check cells") in proc.stdout, proc.stdout
    assert (f"Not run here: the {PUBLIC - masks} checks of attention, heads, mha, positional, whose work is in"
            in proc.stdout), proc.stdout


def test_a_hint_prints_when_the_students_code_raises_before_the_check_compares(tmp_path):
    """Issue 48: a CausalAttention that uses its whole mask raises on a shorter input before the check compares
    anything; the failure still prints the notebook's hint (slice the mask) and names the student's line."""
    folder = _student_folder(tmp_path, {"mha": ('''        scores = q @ k.transpose(1, 2) / math.sqrt(k.size(-1))  # (B, T, T)
        scores = scores.masked_fill(~self.mask[:T, :T], float("-inf"))''', '''        scores = q @ k.transpose(1, 2) / math.sqrt(k.size(-1))  # (B, T, T)
        scores = scores.masked_fill(~self.mask, float("-inf"))''')})
    mha = "\n".join(_failures(_selfcheck(folder).stdout)["mha"])
    assert "hint: a shorter input (T = 4 < context_length = 6) should work too: slice the mask to (T, T)" in mha, mha
    assert "RuntimeError: " in mha and '(at mha.py, line ' in mha and 'masked_fill(~self.mask, float("-inf"))' in mha
