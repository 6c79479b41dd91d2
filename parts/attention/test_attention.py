"""Hidden graders for attention.py: scaled_dot_product_attention."""
import math

import torch

from autograder.graders import checks
from autograder.graders.checks import needs_cuda, needs_student_cuda, points
from autograder.graders.common import (SEED_001_Q, fixed_device, heatmap, made_on_fixed_device, random_mask,
                                      randn)
from parts.attention import diagnose
from solutions import attention as ref

FN = "scaled_dot_product_attention"

# (leading dims, L, S, d_k, d_v), smallest first: the first failing case is reported.
CASES = [
    ((), 2, 2, 2, 2),
    ((3,), 4, 4, 8, 8),
    ((2,), 3, 5, 4, 6),  # cross-attention: L != S, d_v != d_k
    ((2, 3), 5, 7, 8, 3),
]


def qkv(lead, L, S, d_k, d_v, seed=0, dtype=torch.float32):
    q = randn(*lead, L, d_k, seed=seed, dtype=dtype)  # (..., L, d_k)
    k = randn(*lead, S, d_k, seed=seed + 1, dtype=dtype)  # (..., S, d_k)
    v = randn(*lead, S, d_v, seed=seed + 2, dtype=dtype)  # (..., S, d_v)
    return q, k, v


def run(student, q, k, v, *, hint=None, capture_args=False, **kwargs):
    """The student's (output, weights) (with `capture_args`: the arguments after the call instead). When their
    code raises, the message names the usual mistake that raises exactly that on these inputs (`hint`: asked
    first)."""
    pattern = kwargs.get("dropout", {}).get("__pattern_dropout__")  # the stand-in dropout's multipliers
    mistake = diagnose.raised_like(lambda: diagnose.attention_errors(q, k, v, kwargs.get("mask"), pattern))
    value, after = checks.with_hint(
        lambda: student.call("attention", FN, q, k, v, capture_args=capture_args, **kwargs),
        lambda error: (hint and hint(error)) or mistake(error))
    if capture_args:
        return after
    out, weights = checks.pair(value, f"{FN}(...)")
    # (..., L, d_v) and (..., L, S): a pair in the wrong order is told by its shapes alone, on any device and
    # whatever its values, so every check that meets it names it (one cause) instead of each a shape of its own
    want_out, want_weights = (*q.shape[:-1], v.size(-1)), (*q.shape[:-1], k.size(-2))
    if want_out != want_weights and (tuple(out.shape), tuple(weights.shape)) == (want_weights, want_out):
        raise AssertionError(f"{FN}(...) returned tensors of shapes {tuple(out.shape)} and {tuple(weights.shape)}: "
                             f"expected output {want_out} first, then weights {want_weights}"
                             + checks.likely_name(diagnose.SWAPPED_RETURNS))
    return out, weights


def outputs_given(variants, weights):
    """The outputs of the `variants` (a function that returns name -> (output, weights): checks.lazy) whose weights
    are the right `weights`: when the student's weights passed, a mistake that changes them is not what went wrong
    with the output. Lazy too: computed only if the output's check fails."""
    return checks.lazy(lambda: {n: o for n, (o, w) in variants().items() if w.shape == weights.shape
                                and torch.allclose(w.double(), weights.double(), atol=1e-5, equal_nan=True)})


def weights_of(variants):
    """The weights of the `variants` (a function that returns name -> (output, weights)), lazily."""
    return checks.lazy(lambda: {n: w for n, (_, w) in variants().items()})


def what_case(lead, L, S, d_k, d_v):
    """What a case of CASES has, in words: "no leading dims, L = S, d_v = d_k"."""
    dims = {0: "no leading dims", 1: "a batch dim"}.get(len(lead), "batch and head dims")
    return f"{dims}, {'L != S' if L != S else 'L = S'}, {'d_v != d_k' if d_v != d_k else 'd_v = d_k'}"


def compare_cases(student, dtype=torch.float32, with_mask=False):
    for n, (lead, L, S, d_k, d_v) in enumerate(CASES, 1):
        q, k, v = qkv(lead, L, S, d_k, d_v, dtype=dtype)
        kwargs = {"mask": random_mask(*lead, L, S, seed=7)} if with_mask else {}
        out, weights = run(student, q, k, v, **kwargs)
        ref_out, ref_weights = ref.scaled_dot_product_attention(q, k, v, **kwargs)
        case = (f"query {tuple(q.shape)}, key {tuple(k.shape)}, value {tuple(v.shape)}"
                + (", with a mask" if with_mask else "") + f", {str(dtype).replace('torch.', '')} "
                f"(case {n} of {len(CASES)}, smallest first: {what_case(lead, L, S, d_k, d_v)})")
        variants = checks.lazy(lambda: diagnose.attention_variants(q, k, v, kwargs.get("mask")))
        checks.close(weights, ref_weights, f"weights for {case}", variants=weights_of(variants))
        checks.close(out, ref_out, f"output for {case}", variants=outputs_given(variants, ref_weights))


@points(2, "shape")
def test_output_and_weights_shapes(student):
    """returns output (..., L, d_v) and weights (..., L, S)"""
    q, k, v = qkv((2, 3), 5, 7, 4, 6)
    out, weights = run(student, q, k, v)
    variants = checks.lazy(lambda: diagnose.attention_variants(q, k, v))
    checks.shape(out, (2, 3, 5, 6), "output for query (2, 3, 5, 4), key (2, 3, 7, 4), value (2, 3, 7, 6)",
                 variants=checks.lazy(lambda: {n: o for n, (o, _) in variants().items()}))
    checks.shape(weights, (2, 3, 5, 7), "weights for query (2, 3, 5, 4), key (2, 3, 7, 4), value (2, 3, 7, 6)",
                 variants=weights_of(variants))


@points(3, "worked-example")
def test_worked_example_seed_001(student, record_property):
    """reproduces 《Self-Attention详解》: b1 = (0.33, 0.67), b2 = (0.50, 0.50)"""
    eye = torch.eye(2)  # K = V = I
    out, weights = run(student, SEED_001_Q, eye, eye)
    record_property("heatmap", heatmap("《Self-Attention详解》: weights of q1, q2 over k1, k2", weights,
                                       ref.scaled_dot_product_attention(SEED_001_Q, eye, eye)[1]))  # (2, 2)
    s = 1 / math.sqrt(2)  # scaled scores of q1: (0.71, 1.41)
    b1 = torch.softmax(torch.tensor([s, 2 * s]), dim=0)
    expected = torch.stack([b1, torch.tensor([0.5, 0.5])])  # [[0.3302, 0.6698], [0.5, 0.5]]
    got = checks.shape(out, (2, 2), "output for q = [[1, 2], [1, 1]], K = V = I")
    if not torch.allclose(got.double(), expected.double(), atol=1e-4, rtol=0):
        variants = {n: o for n, (o, _) in diagnose.attention_variants(SEED_001_Q, eye, eye).items()}
        raise AssertionError(f"《Self-Attention详解》: with q1 = (1, 2), q2 = (1, 1) and K = V = I, expected "
                             f"b1, b2 = {checks.rows(expected)}, got {checks.rows(got)}"
                             + checks.likely_bug(got, variants, expected))


# Half precision: float16 keeps 11 significant bits (machine epsilon 2^-10, about 0.001), bfloat16 8 (2^-7, about
# 0.008). The student's attention runs in that dtype; the reference runs in float32 on the same (rounded) inputs and
# is then rounded to the dtype. The correct styles (a fill of -inf or of torch.finfo(dtype).min, torch.where,
# einsum, torch's own attention) differ from it by one unit in the last place at most (measured on CASES with their
# mask: 0.00098 in float16, 0.0078 in bfloat16); the tolerance, atol and rtol alike, is about five units at 1.0, and
# the usual mistakes are off by 0.6 or more on these cases.
HALF_TOLERANCE = {torch.float16: 5e-3, torch.bfloat16: 4e-2}


def compare_half(student, dtype):
    """CASES with a mask in `dtype` (float16 or bfloat16), against the float32 reference rounded to `dtype`; the
    usual mistakes too are computed in float32 and rounded, and named within the same tolerance."""
    tol = HALF_TOLERANCE[dtype]
    for n, (lead, L, S, d_k, d_v) in enumerate(CASES, 1):
        q, k, v = (t.to(dtype) for t in qkv(lead, L, S, d_k, d_v))
        mask = random_mask(*lead, L, S, seed=7)
        out, weights = run(student, q, k, v, mask=mask)
        ref_out, ref_weights = (t.to(dtype) for t in
                                ref.scaled_dot_product_attention(q.float(), k.float(), v.float(), mask=mask))
        case = (f"query {tuple(q.shape)}, key {tuple(k.shape)}, value {tuple(v.shape)}, with a mask, "
                f"{str(dtype).replace('torch.', '')} (case {n} of {len(CASES)}, smallest first: "
                f"{what_case(lead, L, S, d_k, d_v)})")
        variants = checks.lazy(lambda: {name: (o.to(dtype), w.to(dtype)) for name, (o, w) in
                                        diagnose.attention_variants(q.float(), k.float(), v.float(), mask).items()})
        checks.close(weights, ref_weights, f"weights for {case}", atol=tol, rtol=tol, variants=weights_of(variants))
        checks.close(out, ref_out, f"output for {case}", atol=tol, rtol=tol,
                     variants=outputs_given(variants, ref_weights))


@points(3, "values")
def test_matches_reference_float32(student):
    """matches softmax(Q K^T / sqrt(d_k)) V on random float32 inputs, from (2, 2) matrices to batch and head dims with L != S and d_v != d_k"""
    compare_cases(student)


@points(2, "values")
def test_weights_rows_sum_to_one(student):
    """the weights of each query sum to 1 over the keys (softmax over the last dim)"""
    q, k, v = qkv((2,), 3, 5, 4, 6)
    _, weights = run(student, q, k, v)
    weights = checks.shape(weights, (2, 3, 5), "weights for query (2, 3, 4), key (2, 5, 4)")
    sums = weights.double().sum(-1)  # (2, 3)
    if not torch.allclose(sums, torch.ones_like(sums), atol=1e-5):
        variants = {n: w for n, (_, w) in diagnose.attention_variants(q, k, v).items()}
        raise AssertionError("each row of the weights should sum to 1 over the keys; "
                             f"for query (2, 3, 4) and key (2, 5, 4) your rows sum to {checks.rows(sums)}"
                             + checks.likely_bug(weights, variants, ref.scaled_dot_product_attention(q, k, v)[1]))


@points(1, "dtype")
def test_float64_keeps_dtype_and_values(student):
    """float64 inputs give float64 outputs that match the reference"""
    compare_cases(student, dtype=torch.float64)


@points(1, "dtype")
def test_masked_float16_keeps_dtype_and_values(student):
    """with a mask, float16 inputs give float16 outputs that match the reference"""
    compare_half(student, torch.float16)


@points(1, "dtype")
def test_masked_bfloat16_keeps_dtype_and_values(student):
    """with a mask, bfloat16 inputs give bfloat16 outputs that match the reference"""
    compare_half(student, torch.bfloat16)


@points(3, "mask")
def test_masked_positions_get_zero_weight(student, record_property):
    """positions where the mask is False get exactly zero weight"""
    q, k, v = qkv((2,), 4, 6, 8, 8)
    mask = random_mask(2, 4, 6, seed=3)  # True = may attend
    _, weights = run(student, q, k, v, mask=mask)
    variants = {n: w for n, (_, w) in diagnose.attention_variants(q, k, v, mask).items()}
    expected = ref.scaled_dot_product_attention(q, k, v, mask=mask)[1]
    weights = checks.shape(weights, (2, 4, 6), "weights for query (2, 4, 8), key (2, 6, 8)", variants=variants)
    record_property("heatmap", heatmap("weights with a mask (first batch item; blocked positions must be 0)",
                                       weights[0], expected[0]))  # (4, 6)
    leaked = (weights != 0) & ~mask
    if leaked.any():
        b, i, j = (int(x) for x in leaked.nonzero()[0])
        raise AssertionError(
            f"mask[{b}, {i}, {j}] is False (blocked; True means 'may attend'), so weights[{b}, {i}, {j}] should "
            f"be 0, got {weights[b, i, j].item():.4f}" + checks.likely_bug(weights, variants, expected))
    unmasked = weights.masked_fill(~mask, 0).double().sum(-1)
    if not torch.allclose(unmasked, torch.ones_like(unmasked), atol=1e-5):
        raise AssertionError("with a mask, the weights of the allowed positions should still sum to 1; "
                             f"your rows sum to {checks.rows(unmasked[0])}"
                             + checks.likely_bug(weights, variants, expected))


@points(1, "mask")
def test_masked_values_match_reference(student):
    """with a mask, output and weights match the reference"""
    compare_cases(student, with_mask=True)


@points(1, "mask")
def test_mask_broadcasts_over_batch_and_heads(student):
    """a (L, S) mask applies to every batch and head"""
    q, k, v = qkv((2, 3), 4, 4, 8, 8)
    mask = torch.tril(torch.ones(4, 4, dtype=torch.bool))  # (L, S)
    out, weights = run(student, q, k, v, mask=mask)
    ref_out, ref_weights = ref.scaled_dot_product_attention(q, k, v, mask=mask)
    variants = checks.lazy(lambda: diagnose.attention_variants(q, k, v, mask))
    checks.close(weights, ref_weights, "weights for query (2, 3, 4, 8) with a (4, 4) causal mask",
                 variants=weights_of(variants))
    checks.close(out, ref_out, "output for query (2, 3, 4, 8) with a (4, 4) causal mask",
                 variants=outputs_given(variants, ref_weights))


@points(2, "dropout")
def test_dropout_module_applied_to_weights(student):
    """the dropout module is applied to the weights, which then multiply the values"""
    q, k, v = qkv((2,), 3, 4, 4, 5)
    pattern = (torch.rand(2, 3, 4, generator=torch.Generator().manual_seed(5)) < 0.5).float() * 2.0
    out, weights = run(student, q, k, v, dropout={"__pattern_dropout__": pattern})
    ref_weights = torch.softmax(q @ k.transpose(-2, -1) / 2.0, dim=-1) * pattern  # sqrt(d_k) = 2
    variants = checks.lazy(lambda: diagnose.dropout_variants(q, k, v, pattern))
    checks.close(weights, ref_weights, "weights with a dropout module (the weights after dropout)",
                 variants=weights_of(variants))
    checks.close(out, ref_weights @ v, "output with a dropout module (dropped weights @ value)",
                 variants=outputs_given(variants, ref_weights))


@points(1, "inputs")
def test_inputs_left_unmodified(student):
    """query, key, value and mask are left unmodified"""
    q, k, v = qkv((2,), 3, 5, 4, 6)
    mask = random_mask(2, 3, 5, seed=1)
    after = run(student, q, k, v, mask=mask, capture_args=True)
    for name, before, got in zip(("query", "key", "value"), (q, k, v), after):
        scaled = {f"{name} divided in place by sqrt(d_k) ({name} /= math.sqrt(d_k)); write {name} / math.sqrt(d_k)":
                  before / math.sqrt(q.size(-1)),
                  f"{name} divided in place by d_k ({name} /= d_k)": before / q.size(-1)}
        checks.unchanged(got, before, name, variants=scaled if name != "value" else None)


@points(1, "device")
def test_runs_on_meta_device(student):
    """runs on the meta device: creates no tensor on a fixed device"""
    q, k, v = (t.to("meta") for t in qkv((2,), 3, 5, 4, 6))
    mask = random_mask(2, 3, 5).to("meta")
    out, weights = run(student, q, k, v, mask=mask, hint=fixed_device(FN))
    checks.device(checks.shape(out, (2, 3, 6), "output on meta"), "meta", "output", made_on_fixed_device(FN))
    checks.device(checks.shape(weights, (2, 3, 5), "weights on meta"), "meta", "weights", made_on_fixed_device(FN))


def check_device(student, device):
    """Runs on `device` and matches the CPU reference (the CUDA check; the kit's tests run it on the CPU too)."""
    q, k, v = qkv((2,), 3, 5, 4, 6)
    mask = random_mask(2, 3, 5)
    out, weights = run(student, q.to(device), k.to(device), v.to(device), mask=mask.to(device),
                       hint=fixed_device(FN, device))
    ref_out, ref_weights = ref.scaled_dot_product_attention(q, k, v, mask=mask)
    fixed = made_on_fixed_device(FN, device)
    checks.close(checks.device(out, device, "output", fixed).cpu(), ref_out, f"output on {device}")
    checks.close(checks.device(weights, device, "weights", fixed).cpu(), ref_weights, f"weights on {device}")


@needs_cuda
@points(1, "device")
def test_runs_on_cuda_and_matches_cpu(student):
    """runs on CUDA and matches the CPU reference"""
    needs_student_cuda(student)
    check_device(student, "cuda")
