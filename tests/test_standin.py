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
