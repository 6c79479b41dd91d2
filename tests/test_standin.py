"""The stand-in for a part that crashes answers exactly the inputs it was made for, and gives nothing else away.

autograder/sandbox/standin.py is what the student process runs in place of the
student's crashing merge_heads (say) while the MHA is graded again; student code
runs beside it and can read it. The graded cases (a crash inside merge_heads,
scaled_dot_product_attention or causal_mask, met through the MHA) are in
tests/corpus/submissions.toml.
"""
import pytest
import torch

from autograder.sandbox import standin
from solutions.attention import scaled_dot_product_attention
from solutions.heads import merge_heads

MERGE = ("heads", "merge_heads")
ATTENTION = ("attention", "scaled_dot_product_attention")


def context(seed=0):
    return torch.randn(2, 3, 5, 4, generator=torch.Generator().manual_seed(seed))  # (B, H, T, head_dim)


def test_the_exact_input_gets_the_reference_answer():
    x = context()
    sealed = standin.seal(MERGE, (x,), {}, merge_heads(x))
    assert torch.equal(standin.answer(MERGE, [sealed], (x,), {}), merge_heads(x))  # (B, T, H * head_dim)


def test_an_input_one_rounding_away_gets_no_answer():
    x = context()
    sealed = standin.seal(MERGE, (x,), {}, merge_heads(x))
    near = x.clone()
    near[0, 0, 0, 0] = torch.nextafter(near[0, 0, 0, 0], torch.tensor(1.0))
    with pytest.raises(standin.NoAnswer):
        standin.answer(MERGE, [sealed], (near,), {})


def test_the_same_values_in_a_view_with_other_strides_get_the_answer():
    x = context()
    sealed = standin.seal(MERGE, (x,), {}, merge_heads(x))
    strided = x.transpose(1, 2).contiguous().transpose(1, 2)  # same values, another layout
    assert torch.equal(standin.answer(MERGE, [sealed], (strided,), {}), merge_heads(x))


def test_an_answer_is_found_whether_its_arguments_come_by_position_or_by_name():
    q, k, v = context(1), context(2), context(3)
    mask = torch.tril(torch.ones(5, 5, dtype=torch.bool))
    sealed = standin.seal(ATTENTION, (q, k, v, mask), {}, scaled_dot_product_attention(q, k, v, mask))
    output, weights = standin.answer(ATTENTION, [sealed], (q, k), {"value": v, "mask": mask, "dropout": object()})
    expected = scaled_dot_product_attention(q, k, v, mask)
    assert torch.equal(output, expected[0]) and torch.equal(weights, expected[1])


def test_given_a_dropout_module_the_attentions_stand_in_drops_the_weights_and_multiplies_the_values_by_them():
    # a module whose own attention applies its dropout wrongly is graded, in training mode, given one that drops
    # the weights: the module's own dropout module, applied to the reference's weights
    q, k, v = context(1), context(2), context(3)
    mask = torch.tril(torch.ones(5, 5, dtype=torch.bool))
    sealed = standin.seal(ATTENTION, (q, k, v, mask), {}, scaled_dot_product_attention(q, k, v, mask))
    pattern = (torch.rand(2, 3, 5, 5, generator=torch.Generator().manual_seed(4)) < 0.5).float() * 2.0
    output, weights = standin.answer(ATTENTION, [sealed], (q, k, v, mask), {"dropout": lambda w: w * pattern})
    expected = scaled_dot_product_attention(q, k, v, mask, dropout=lambda w: w * pattern)
    assert torch.allclose(weights, expected[1]) and torch.allclose(output, expected[0])


def test_a_dropout_module_that_changes_nothing_leaves_the_answer_as_sealed():
    q, k, v = context(1), context(2), context(3)
    sealed = standin.seal(ATTENTION, (q, k, v, None), {}, scaled_dot_product_attention(q, k, v))
    output, weights = standin.answer(ATTENTION, [sealed], (q, k, v), {"dropout": torch.nn.Dropout(0.5).eval()})
    expected = scaled_dot_product_attention(q, k, v)
    assert torch.equal(output, expected[0]) and torch.equal(weights, expected[1])


def test_another_mask_is_another_input():
    q, k, v = context(1), context(2), context(3)
    mask = torch.tril(torch.ones(5, 5, dtype=torch.bool))
    sealed = standin.seal(ATTENTION, (q, k, v, mask), {}, scaled_dot_product_attention(q, k, v, mask))
    with pytest.raises(standin.NoAnswer):
        standin.answer(ATTENTION, [sealed], (q, k, v, None), {})


def test_what_the_student_process_holds_does_not_contain_the_answer():
    # student code can read the stand-in's answers: they must be useless without the exact input
    x = context()
    expected = merge_heads(x).contiguous().view(-1).view(torch.uint8).numpy().tobytes()
    sealed = standin.seal(MERGE, (x,), {}, merge_heads(x))
    held = b"".join(v.numpy().tobytes() for v in sealed.values() if isinstance(v, torch.Tensor))
    assert expected[:16] not in held and x.numpy().tobytes()[:16] not in held
    assert len(sealed["sealed"]) == len(expected)  # the same size, all of it sealed


def test_two_sealings_of_one_answer_differ():
    x = context()
    one, two = (standin.seal(MERGE, (x,), {}, merge_heads(x)) for _ in range(2))
    assert not torch.equal(one["sealed"], two["sealed"])  # a fresh nonce each time: nothing to compare across


def test_a_meta_input_gets_a_meta_answer_of_the_reference_shape():
    x = context().to("meta")
    sealed = standin.seal(MERGE, (x,), {}, merge_heads(x))
    got = standin.answer(MERGE, [sealed], (x,), {})
    assert got.device.type == "meta" and tuple(got.shape) == (2, 5, 12)


def test_an_argument_that_is_no_parameter_of_the_part_gets_no_answer():
    x = context()
    sealed = standin.seal(MERGE, (x,), {}, merge_heads(x))
    with pytest.raises(standin.NoAnswer):
        standin.answer(MERGE, [sealed], (x,), {"heads": 3})


# -- graded: a module that forges a crash inside merge_heads to read the stand-in ----------------------------
FORGER = '''

def _forged_crash():
    # a frame that reads as heads.py's merge_heads: the grader then stands in for merge_heads
    scope = {}
    exec(compile("def merge_heads(x):\\n    raise RuntimeError('forged')\\n", heads.__file__, "exec"), scope)
    scope["merge_heads"](None)


def _forward(self, x):
    stand_in = heads.merge_heads
    answers = getattr(stand_in, "answers", None)
    if not answers:
        _forged_crash()
    B, T, _ = x.shape
    sealed = answers[0]["sealed"]  # all it can read: the answer, sealed with an input it never computed
    merged = sealed.view(torch.float32)[: B * T * self.d_out].reshape(B, T, self.d_out)
    return self.Wo(merged)


MultiHeadAttention.forward = _forward
'''


ZEROS = '''

def _forward(self, x):
    B, T, _ = x.shape
    return self.Wo(torch.zeros(B, T, self.d_out, dtype=x.dtype, device=x.device))


MultiHeadAttention.forward = _forward
'''


@pytest.mark.grading
def test_a_module_that_forges_a_crash_to_read_the_stand_in_earns_nothing_by_it(tmp_path, warm_servers):
    # it reads the stand-in's answers; all it gets is what a module that never computes anything gets
    from autograder.grade.engine import grade
    from tests.conftest import SOLUTIONS
    from tests.corpus import load_corpus, materialize

    base = next(c for c in load_corpus()["alternative"] if c.id == "mha-all-use-own-parts")
    scores = {}
    for name, forward in (("forger", FORGER), ("zeros", ZEROS)):
        folder = materialize(base, tmp_path / name, SOLUTIONS)
        mha = folder / "mha.py"
        mha.write_text(mha.read_text().replace("from heads import merge_heads, split_heads",
                                               "import heads\nfrom heads import merge_heads, split_heads") + forward)
        report = grade(folder, call_timeout=5.0, servers=warm_servers)
        scores[name] = {t.id for t in report.tests if t.module == "mha" and t.status == "passed"}
        assert report.modules()["heads"][0] == report.modules()["heads"][1]  # heads.py untouched, and right
    assert scores["forger"] <= scores["zeros"], f"the forger passed more: {sorted(scores['forger'] - scores['zeros'])}"
    assert "test_fused_values" not in scores["forger"]
