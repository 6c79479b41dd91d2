"""A fault is charged once, in the module that has it (autograder/graders/blame.py), with real gradings.

The submission's mha.py is built from the student's own parts, as the
contract allows (`from attention import scaled_dot_product_attention`, ...).
A bug planted in one part costs points in that part's module only: the MHA
checks pass, each saying which part it inherits the fault from. A fault of
the MHA's own, next to a faulty part, still costs MHA points.
"""
import pytest

from autograder.grade.engine import grade
from tests.conftest import SOLUTIONS

pytestmark = pytest.mark.grading  # every test here grades or starts student processes

COMPOSED_IMPORTS = '''from attention import scaled_dot_product_attention
from heads import merge_heads, split_heads
from masks import causal_mask
'''
CAUSAL_FORWARD = ('''        B, T, _ = x.shape
        q, k, v = self.Wq(x), self.Wk(x), self.Wv(x)  # (B, T, d_out)
        scores = q @ k.transpose(1, 2) / math.sqrt(k.size(-1))  # (B, T, T)
        scores = scores.masked_fill(~self.mask[:T, :T], float("-inf"))
        weights = self.dropout(torch.softmax(scores, dim=-1))  # (B, T, T)
        return weights @ v  # (B, T, d_out)
''', '''        B, T, _ = x.shape
        q, k, v = self.Wq(x), self.Wk(x), self.Wv(x)  # (B, T, d_out)
        context, _ = scaled_dot_product_attention(q, k, v, causal_mask(T, x.device), self.dropout)
        return context  # (B, T, d_out)
''')
FUSED_FORWARD = ('''        B, T, _ = x.shape
        H, hd = self.num_heads, self.head_dim  # hd: head_dim
        q = self.Wq(x).view(B, T, H, hd).transpose(1, 2)  # (B, H, T, head_dim)
        k = self.Wk(x).view(B, T, H, hd).transpose(1, 2)  # (B, H, T, head_dim)
        v = self.Wv(x).view(B, T, H, hd).transpose(1, 2)  # (B, H, T, head_dim)
        scores = q @ k.transpose(2, 3) / math.sqrt(hd)  # (B, H, T, T)
        scores = scores.masked_fill(~self.mask[:T, :T], float("-inf"))
        weights = self.dropout(torch.softmax(scores, dim=-1))  # (B, H, T, T)
        context = (weights @ v).transpose(1, 2).contiguous().view(B, T, self.d_out)  # (B, T, d_out)
        return self.Wo(context)  # (B, T, d_out)
''', '''        B, T, _ = x.shape
        q, k, v = (split_heads(W(x), self.num_heads) for W in (self.Wq, self.Wk, self.Wv))  # (B, H, T, hd)
        context, _ = scaled_dot_product_attention(q, k, v, causal_mask(T, x.device), self.dropout)
        return self.Wo(merge_heads(context))  # (B, T, d_out)
''')
BUGS = {
    "attention": ("/ math.sqrt(d_k)  # (..., L, S)", "/ d_k  # (..., L, S)"),
    "heads": ("return x.view(B, T, num_heads, d_k).transpose(1, 2)  # (B, H, T, head_dim)",
              "return x.view(B, num_heads, T, d_k)  # (B, H, T, head_dim)"),
    "masks": ("return torch.tril(torch.ones(seq_len, seq_len, dtype=torch.bool, device=device))",
              "return torch.triu(torch.ones(seq_len, seq_len, dtype=torch.bool, device=device))"),
}
MHA_OWN_BUG = ("return self.Wo(merge_heads(context))  # (B, T, d_out)", "return merge_heads(context)  # (B, T, d_out)")
SELECT = "not faster_than and not close_to_reference and not grow_with_heads"  # the timed checks: only where they are the question


def _replace(text, old, new):
    assert text.count(old) == 1, f"expected exactly one {old!r} in the reference to patch"
    return text.replace(old, new)


SLOW_FIRST_ROUND = ("""        B, T, _ = x.shape
        q, k, v = (split_heads""", """        self.passes = getattr(self, "passes", 0) + 1
        if 2 < self.passes <= 22:  # the speed check's warm-up is 2 passes, its first timed round 20
            time.sleep(0.005)
        B, T, _ = x.shape
        q, k, v = (split_heads""")


def composed_submission(folder, bug=None, mha_bug=False, slow_first_round=False):
    """The reference, with an mha.py that calls the student's own attention, heads and masks; `bug`: a fault
    planted in that part; `slow_first_round`: the fused module sleeps 5 ms a pass in the first timed round of the
    speed check (each instance counts its passes)."""
    folder.mkdir()
    for path in SOLUTIONS.glob("*.py"):
        text = path.read_text(encoding="utf-8")
        if path.stem == "mha":
            text = _replace(text, "from torch import nn\n", "from torch import nn\n\n" + COMPOSED_IMPORTS)
            text = _replace(text, *CAUSAL_FORWARD)
            text = _replace(text, *FUSED_FORWARD)
            if mha_bug:
                text = _replace(text, *MHA_OWN_BUG)
            if slow_first_round:
                text = _replace(text, *SLOW_FIRST_ROUND)
                text = _replace(text, "import math\n", "import math\nimport time\n")
        if path.stem == bug:
            text = _replace(text, *BUGS[bug])
        (folder / path.name).write_text(text, encoding="utf-8")
    return folder


def graded(folder, servers):
    report = grade(folder, call_timeout=10.0, select=SELECT, servers=servers)
    assert report.status == "graded", report.error
    return report


def test_an_mha_built_from_correct_parts_scores_full_marks(tmp_path, warm_servers):
    report = graded(composed_submission(tmp_path / "composed"), warm_servers)
    failed = [f"{t.module}/{t.id}: {t.message[:200]}" for t in report.failed()]
    assert not failed, "expected full marks for an MHA built from the student's correct parts, got:\n" + "\n".join(failed)
    notes = [t.id for t in report.tests if t.status == "passed" and t.message]
    assert not notes, f"expected no inheritance notes when every part is right, got notes on {notes}"


@pytest.mark.parametrize("part", sorted(BUGS))
def test_a_faulty_part_costs_points_in_its_own_module_only(tmp_path, part, warm_servers):
    report = graded(composed_submission(tmp_path / part, bug=part), warm_servers)
    modules = report.modules()
    earned, available = modules[part]
    assert earned < available, f"expected the planted bug in {part}.py to cost points there, got {earned}/{available}"
    mha = [f"{t.id}: {t.message[:300]}" for t in report.failed() if t.module == "mha"]
    assert not mha, f"expected no MHA check to fail for a fault of {part}.py, got:\n" + "\n".join(mha)
    noted = [t for t in report.tests if t.module == "mha" and t.status == "passed" and t.message]
    assert noted, "expected MHA checks to say that they inherit the fault, none did"
    for t in noted:
        assert f"{part}.py" in t.message and "right given its parts" in t.message, (t.id, t.message)
        lines = t.message.splitlines()
        assert len(lines) == len(set(lines)), f"expected each note once, got {t.message!r}"


def test_speed_is_graded_for_an_mha_that_inherits_a_fault(tmp_path, warm_servers):
    """An MHA with a faulty attention keeps its speed points: speed checks judge speed (issue 48), and its timed
    passes show the work of attention whatever their values."""
    report = grade(composed_submission(tmp_path / "timed", bug="attention"), call_timeout=10.0,
                   select="faster_than or close_to_reference or grow_with_heads", servers=warm_servers)
    speed = {t.id: t for t in report.tests}
    assert set(speed) == {"test_fused_time_does_not_grow_with_heads", "test_fused_faster_than_reference_stacked",
                          "test_fused_close_to_reference_fused"}
    for t in speed.values():
        assert t.status == "passed", (t.id, t.status, t.message[:300])


def test_an_excused_mha_is_timed_over_rounds_as_a_correct_one_not_by_its_first_round(tmp_path, warm_servers):
    """The timing stops at the first round whose outputs differ from the reference's; when the student's faulty
    part explains them, that one round alone used to decide the speed, and a busy moment failed a fast module
    (seen under the suite's load). Such a module is timed again as a correct one is, over rounds and tries: here
    its first timed round sleeps 5 ms a pass (half the reference stacked module's time: a speedup of ~2, against
    4 asked), the rest run at speed."""
    report = grade(composed_submission(tmp_path / "slow", bug="attention", slow_first_round=True), call_timeout=10.0,
                   select="faster_than or close_to_reference or grow_with_heads", servers=warm_servers)
    speed = {t.id: t for t in report.tests}
    assert set(speed) == {"test_fused_time_does_not_grow_with_heads", "test_fused_faster_than_reference_stacked",
                          "test_fused_close_to_reference_fused"}
    for t in speed.values():
        assert t.status == "passed", (t.id, t.status, t.message[:300])
        # (its first round's passes take 5 ms or more: the figures are those of a round timed after it)
        assert t.data["timing"]["student_fused_s"] < 0.005, (
            f"expected the student's time from a round after the slow first (< 5 ms a pass), got {t.data['timing']}")


def test_an_mha_with_a_fault_of_its_own_still_loses_points(tmp_path, warm_servers):
    """A faulty part next to an MHA that is wrong by itself (no Wo): the MHA is not excused."""
    report = graded(composed_submission(tmp_path / "both", bug="attention", mha_bug=True), warm_servers)
    failed = {t.id for t in report.failed() if t.module == "mha"}
    assert {"test_fused_values", "test_fused_worked_example_seed_004"} <= failed, (
        f"expected the fused MHA without Wo to fail its value checks, failed: {sorted(failed)}")


# A part whose fault leaves the module nothing to compute, next to a module that computes nothing: its output
# equals the reference wiring with that part, but given a working part it is still wrong (blame.confirmed).
DEGENERATE = {
    "masks": (("return torch.tril(torch.ones(seq_len, seq_len, dtype=torch.bool, device=device))",
               "return torch.zeros(seq_len, seq_len, dtype=torch.bool, device=device)  # blocks every key"),
              "torch.full((x.shape[0], x.shape[1], {width}), float('nan'), dtype=x.dtype, device=x.device)"),
    "attention": (("    output = weights @ value  # (..., L, d_v)\n    return output, weights",
                   "    return torch.zeros_like(weights @ value), torch.zeros_like(weights)"),
                  "{zero_or_bias}"),
}


def degenerate_submission(folder, part):
    """The composed submission, `part` planted with a fault that leaves nothing to compute, and every module's
    forward computing nothing but what that fault makes of it (NaN everywhere; zeros, or Wo's bias)."""
    composed_submission(folder)
    (old, new), body = DEGENERATE[part]
    path = folder / f"{part}.py"
    path.write_text(_replace(path.read_text(encoding="utf-8"), old, new), encoding="utf-8")
    mha = folder / "mha.py"
    text = mha.read_text(encoding="utf-8")
    causal = body.format(width="self.Wq.out_features", zero_or_bias="torch.zeros_like(self.Wv(x))")
    fused = body.format(width="self.d_out", zero_or_bias="self.Wo(torch.zeros_like(self.Wv(x)))")
    text = _replace(text, CAUSAL_FORWARD[1], f"        return {causal}\n")
    text = _replace(text, FUSED_FORWARD[1], f"        return {fused}\n")
    mha.write_text(text, encoding="utf-8")
    return folder


@pytest.mark.parametrize("part", sorted(DEGENERATE))
def test_a_part_that_leaves_nothing_to_compute_does_not_excuse_a_module_that_computes_nothing(tmp_path, part,
                                                                                               warm_servers):
    report = graded(degenerate_submission(tmp_path / part, part), warm_servers)
    failed = {t.id for t in report.failed() if t.module == "mha"}
    expected = {"test_causal_attention_values", "test_fused_values", "test_fused_worked_example_seed_004"}
    assert expected <= failed, (
        f"expected the MHA that computes nothing to fail {sorted(expected - failed)} too, though its {part}.py "
        f"leaves nothing to compute; noted: {[(t.id, t.message[:120]) for t in report.noted()]}")


# A part whose answer the module cannot use: the module raises with it (a float mask, which ~mask refuses; the
# weights where the context should be, which Wo cannot take). No composition explains that: the module, run again
# with the student's faulty parts stood in for, decides (blame.stand_in_faulty, blame.right_given_working_parts).
UNUSABLE = {
    "masks": ("return torch.tril(torch.ones(seq_len, seq_len, dtype=torch.bool, device=device))",
              "return torch.tril(torch.ones(seq_len, seq_len, device=device))  # float 0/1: ~mask raises"),
    "attention": ("    return output, weights", "    return weights, output"),
}


def with_part(folder, part, old, new):
    path = folder / f"{part}.py"
    path.write_text(_replace(path.read_text(encoding="utf-8"), old, new), encoding="utf-8")
    return folder


@pytest.mark.parametrize("part", sorted(UNUSABLE))
def test_a_part_whose_answer_the_module_cannot_use_costs_points_in_its_own_module_only(tmp_path, part,
                                                                                        warm_servers):
    report = graded(with_part(composed_submission(tmp_path / part), part, *UNUSABLE[part]), warm_servers)
    earned, available = report.modules()[part]
    assert earned < available, f"expected the planted bug in {part}.py to cost points there, got {earned}/{available}"
    mha = [f"{t.id}: {t.message[:300]}" for t in report.failed() if t.module == "mha"]
    assert not mha, f"expected no MHA check to fail for a fault of {part}.py, got:\n" + "\n".join(mha)
    noted = [t for t in report.tests if t.module == "mha" and t.status == "passed" and t.message]
    assert noted and all(f"{part}.py" in t.message for t in noted), [(t.id, t.message[:200]) for t in noted]


@pytest.mark.parametrize("part", sorted(UNUSABLE))
def test_an_mha_with_a_fault_of_its_own_beside_a_part_it_cannot_use_still_loses_points(tmp_path, part, warm_servers):
    folder = with_part(composed_submission(tmp_path / part, mha_bug=True), part, *UNUSABLE[part])
    failed = {t.id for t in graded(folder, warm_servers).failed() if t.module == "mha"}
    assert {"test_fused_values", "test_fused_worked_example_seed_004"} <= failed, (
        f"expected the fused MHA without Wo to fail its value checks beside a broken {part}.py, failed: "
        f"{sorted(failed)}")


def test_a_module_that_computes_nothing_is_not_excused_by_a_part_it_cannot_use(tmp_path, warm_servers):
    folder = with_part(composed_submission(tmp_path / "nothing"), "masks", *UNUSABLE["masks"])
    mha = folder / "mha.py"
    text = _replace(mha.read_text(encoding="utf-8"), CAUSAL_FORWARD[1], "        return torch.zeros_like(self.Wv(x))\n")
    mha.write_text(_replace(text, FUSED_FORWARD[1], "        return self.Wo(torch.zeros_like(self.Wv(x)))\n"),
                   encoding="utf-8")
    failed = {t.id for t in graded(folder, warm_servers).failed() if t.module == "mha"}
    expected = {"test_causal_attention_values", "test_fused_values", "test_fused_worked_example_seed_004"}
    assert expected <= failed, f"expected the MHA that computes nothing to fail {sorted(expected - failed)} too"


# Dropout: the MHA passes its dropout module to the student's attention, which applies it to the output instead of
# the weights. The MHA's dropout checks inherit that fault (charged in the attention checks): run in training mode
# with a stand-in that drops the reference's weights with the MHA's own dropout module, the MHA passes. An MHA that
# applies its dropout wrongly itself (to the context, keeping it from the attention) still fails.
DROPOUT_ON_OUTPUT = ("    output = weights @ value  # (..., L, d_v)\n",
                     "    output = weights @ value  # (..., L, d_v)\n    if dropout is not None:\n"
                     "        output = dropout(output)\n")
NO_DROPOUT = ("    if dropout is not None:\n        weights = dropout(weights)\n", "")
MHA_OWN_DROPOUT = ("context, _ = scaled_dot_product_attention(q, k, v, causal_mask(T, x.device), self.dropout)",
                   "context, _ = scaled_dot_product_attention(q, k, v, causal_mask(T, x.device))\n"
                   "        context = self.dropout(context)  # on the context, not on the weights")


def test_a_dropout_fault_of_the_attention_costs_points_in_the_attention_checks_only(tmp_path, warm_servers):
    folder = with_part(composed_submission(tmp_path / "dropout"), "attention", *NO_DROPOUT)
    report = grade(with_part(folder, "attention", *DROPOUT_ON_OUTPUT), call_timeout=10.0, select="dropout",
                   servers=warm_servers)
    status = {f"{t.module}/{t.id}": t for t in report.tests}
    assert status["attention/test_dropout_module_applied_to_weights"].status == "failed"
    for check in ("mha/test_causal_attention_dropout", "mha/test_fused_dropout"):
        t = status[check]
        assert t.status == "passed" and "scaled_dot_product_attention (attention.py)" in t.message, (
            check, t.status, t.message[:300])


def test_an_mha_whose_own_dropout_is_wrong_is_not_excused_by_the_attentions(tmp_path, warm_servers):
    folder = with_part(composed_submission(tmp_path / "both"), "attention", *NO_DROPOUT)
    folder = with_part(folder, "attention", *DROPOUT_ON_OUTPUT)
    mha = folder / "mha.py"
    text = mha.read_text(encoding="utf-8")
    assert text.count(MHA_OWN_DROPOUT[0]) == 2  # CausalAttention's and MultiHeadAttention's forward
    mha.write_text(text.replace(*MHA_OWN_DROPOUT), encoding="utf-8")
    report = grade(folder, call_timeout=10.0, select="dropout", servers=warm_servers)
    failed = {t.id for t in report.failed() if t.module == "mha"}
    assert failed == {"test_causal_attention_dropout", "test_fused_dropout"}, (
        failed, [(t.id, t.message[:200]) for t in report.tests])


def test_the_device_check_inherits_a_fault_of_the_parts_too(tmp_path):
    """The CUDA check's logic (check_device), run on the CPU: a CausalAttention given the weights where the context
    should be (the student's attention returns (weights, output)) is right given its parts there as elsewhere."""
    from parts.mha import test_mha
    from autograder.sandbox.client import Sandbox

    folder = with_part(composed_submission(tmp_path / "device"), "attention", *UNUSABLE["attention"])
    with Sandbox(folder, call_timeout=10.0) as sandbox:
        test_mha.check_device(sandbox, "cpu")
