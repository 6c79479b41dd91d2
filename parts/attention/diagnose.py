"""The known mistakes of scaled_dot_product_attention (attention.py), computed from the reference so that feedback
can name the likely bug: `attention_variants` (what each mistake's output would be on the same inputs),
`attention_errors` (what each raises there), `dropout_variants`. The mistakes' sentences and the reference
computation with its knobs (`_attention`) are also the attention steps of the attention modules
(parts/mha/diagnose.py). The machinery (match, raised_like) is the kit's, autograder/grade/diagnose.py.
"""
from __future__ import annotations

import math

import torch

from autograder.grade.diagnose import _error, match, raised_like  # noqa: F401  (the graders' diagnose.raised_like)

# The sentence added to a variant whose rows end up with every key blocked (softmax of a row of -inf is NaN).
NAN_ROWS = "the softmax of a row where every score is -inf is NaN (0/0)"
# Mistakes named both from wrong numbers and, where they raise on some shapes, from the error.
TRANSPOSED_MASK = "the mask applied on the wrong axes (transposed): mask[..., i, j] is for query i and key j"
UNSQUEEZED_MASK = ("the mask broadcast over the wrong dimension: mask.unsqueeze(1) (《PyTorch快餐教程(5)》's step to share a "
                   "mask between heads) inside scaled_dot_product_attention, whose mask already broadcasts to "
                   "(..., L, S)")
DROPOUT_ON_OUTPUT = "dropout applied to the output (weights @ value) instead of to the attention weights"
# scaled_dot_product_attention's pair in the wrong order: named from its values, or from its shapes where they differ
SWAPPED_RETURNS = "you return (weights, output); the contract's order is (output, weights)"
# The seed's -1e9 fill on float16 scores: masked_fill raises, as float16 holds nothing beyond 65504 in magnitude.
HALF_FILL = ("the blocked scores filled with a number float16 cannot hold, such as -1e9 (《PyTorch快餐教程(5)》's): "
             "float16's largest is 65504, so masked_fill raises; fill them with float('-inf'), or "
             "torch.finfo(scores.dtype).min, which every floating dtype holds")
# The mistakes of the mask's fill and of the softmax's place, named alike in scaled_dot_product_attention and in the
# attention modules ("{w}": the key size's name there).
FILL_FIX = "fill with float('-inf') or a large negative number such as torch.finfo(scores.dtype).min"
FILL_NEAR_ZERO = ("your mask fills the blocked scores with a number close to 0 (such as -1e-9, -1e-12 or 1e-9) "
                  "instead of a large negative one, so the blocked keys keep their weight: " + FILL_FIX)
FILL_POS_INF = ("your mask fills the blocked scores with +inf (float('inf')) instead of -inf, so every row with a "
                "blocked key is NaN after the softmax (inf - inf): " + FILL_FIX)
AFTER_SOFTMAX_NEG_INF = ("the mask applied to the weights after the softmax, with -inf: the blocked weights are -inf "
                         "(and the outputs -inf or NaN), and the others are not renormalised; mask the scores before "
                         "the softmax (" + FILL_FIX + ")")
SCALED_AFTER_SOFTMAX = ("the scores scaled after the softmax: you divide the weights by sqrt({w}), so each row sums to "
                        "1/sqrt({w}) instead of 1; divide the scores q @ k^T by sqrt({w}) before the softmax")
WEIGHTS_TIMES_KEY = ("the keys and values swapped: your output is weights @ key; the output is the weighted sum of "
                     "the values, weights @ value")


def _attention(q, k, v, mask=None, *, scale=None, dim=-1, blocked_when=False, mask_after=False, mask_op=None,
               fill=float("-inf"), scale_after=False, values="value"):
    """The reference attention with one step parameterised.

    mask_op: how the mask reaches the scores, for the mistakes that build it wrongly:
    "transposed" (mask.transpose(-2, -1)), "unsqueezed" (mask.unsqueeze(1), 《PyTorch快餐教程(5)》's step for heads,
    done once too often), "times-inf" (scores + (~mask) * -inf: 0 * -inf is NaN where the mask allows).
    fill: what the blocked scores are filled with (-inf; the mistakes: a number close to 0, +inf).
    mask_after: the mask applied to the weights after the softmax instead, filling them with this value (0.0, -inf).
    scale_after: the weights of the unscaled scores divided by sqrt(d_k) after the softmax (rows sum to 1/sqrt(d_k)).
    values: what the weights multiply, "value" or "key" (the keys and values swapped: weights @ key).
    """
    d_k = q.size(-1)
    scale = 1 / math.sqrt(d_k) if scale is None else scale
    scores = q @ k.transpose(-2, -1) * (1.0 if scale_after else scale)  # (..., L, S)
    if mask is not None and mask_op == "transposed":
        mask = mask.transpose(-2, -1)
    elif mask is not None and mask_op == "unsqueezed":
        mask = mask.unsqueeze(1)
    if mask is not None and mask_op == "times-inf":
        scores = scores + (~mask).to(scores.dtype) * float("-inf")
    elif mask is not None and mask_after is False:
        scores = scores.masked_fill(mask == blocked_when, fill)
    weights = torch.softmax(scores, dim=dim)
    if scale_after:
        weights = weights / math.sqrt(d_k)
    if mask is not None and mask_after is not False:
        weights = weights.masked_fill(~mask, 0.0 if mask_after is True else mask_after)
    return weights @ (k if values == "key" else v), weights


def _nan_rows(weights, clean):
    """Whether `weights` (..., L, S) has rows that are all NaN where the reference `clean` has none."""
    return bool((torch.isnan(weights).all(-1) & ~torch.isnan(clean).any(-1)).any())


def _with_nan(name, weights, clean):
    return f"{name}; rows with every key blocked come out NaN: {NAN_ROWS}" if _nan_rows(weights, clean) else name


def attention_variants(q, k, v, mask=None):
    """name -> (output, weights) of the usual mistakes in scaled_dot_product_attention."""
    d_k, d_v = q.size(-1), v.size(-1)
    out = {
        "softmax without the 1/sqrt(d_k) scaling": _attention(q, k, v, mask, scale=1.0),
        "scores divided by d_k instead of sqrt(d_k)": _attention(q, k, v, mask, scale=1 / d_k),
        "softmax over the queries (dim=-2) instead of over the keys (dim=-1)": _attention(q, k, v, mask, dim=-2),
    }
    if d_v != d_k:
        out["scores divided by sqrt(d_v), the value size, instead of sqrt(d_k)"] = \
            _attention(q, k, v, mask, scale=1 / math.sqrt(d_v))
    out[SCALED_AFTER_SOFTMAX.replace("{w}", "d_k")] = _attention(q, k, v, mask, scale_after=True)
    output, weights = _attention(q, k, v, mask)
    out[SWAPPED_RETURNS] = (weights, output)
    out[WEIGHTS_TIMES_KEY] = _attention(q, k, v, mask, values="key")
    if mask is None:
        return out
    out[AFTER_SOFTMAX_NEG_INF] = _attention(q, k, v, mask, mask_after=float("-inf"))
    out[FILL_NEAR_ZERO] = _attention(q, k, v, mask, fill=0.0)
    out[FILL_POS_INF] = _attention(q, k, v, mask, fill=float("inf"))
    clean = weights
    inverted = _attention(q, k, v, mask, blocked_when=True)
    out[_with_nan("the mask's polarity inverted: you blocked the positions where the mask is True", inverted[1],
                  clean)] = inverted
    out["the mask applied after the softmax, so the weights are not renormalised"] = \
        _attention(q, k, v, mask, mask_after=True)
    out["the mask is never applied (the weights are those without a mask)"] = _attention(q, k, v)
    times_inf = _attention(q, k, v, mask, mask_op="times-inf")
    out["your additive mask multiplies -inf by the mask: 0 * -inf is NaN at every allowed position, and a row "
        "with a NaN is all NaN after the softmax; fill with masked_fill(~mask, float('-inf')) or torch.where "
        "instead"] = times_inf
    if mask.size(-1) == mask.size(-2):
        transposed = _attention(q, k, v, mask, mask_op="transposed")
        out[_with_nan(TRANSPOSED_MASK, transposed[1], clean)] = transposed
    try:
        out[UNSQUEEZED_MASK] = _attention(q, k, v, mask, mask_op="unsqueezed")
    except RuntimeError:
        pass  # that mistake raises on these shapes: attention_errors names it
    return out


def attention_errors(q, k, v, mask=None, dropout=None):
    """"Type: message" -> name, for the usual mistakes in scaled_dot_product_attention that raise on these
    inputs (a transposed mask when L != S, dropout on the output, a -1e9 fill in float16): when the student's
    code raises exactly what a mistake raises, that is the evidence. `dropout`: the pattern of the kit's stand-in
    dropout module, which multiplies by it."""
    mistakes = []
    if mask is not None:
        mistakes += [
            (TRANSPOSED_MASK, lambda: _attention(q, k, v, mask, mask_op="transposed")),
            (TRANSPOSED_MASK, lambda: torch.where(mask.transpose(-2, -1), q @ k.transpose(-2, -1), float("-inf"))),
            (UNSQUEEZED_MASK, lambda: _attention(q, k, v, mask, mask_op="unsqueezed")),
            (HALF_FILL, lambda: (q @ k.transpose(-2, -1)).masked_fill(~mask, -1e9)),  # raises in float16 only
        ]
    if dropout is not None:
        mistakes.append((DROPOUT_ON_OUTPUT, lambda: _attention(q, k, v, mask)[0] * dropout))
    names = {}
    for name, mistake in mistakes:
        error = _error(mistake)
        if error and name not in names.setdefault(error, []):
            names[error].append(name)
    return {error: n[0] + (f" (or, raising the same error here: {'; or '.join(n[1:])})" if n[1:] else "")
            for error, n in names.items()}


def dropout_variants(q, k, v, pattern):
    """name -> (output, weights) of the usual mistakes with the dropout module (`pattern`: its multipliers)."""
    _, weights = _attention(q, k, v)
    out = {
        "the dropout module is never applied (your weights and output are those without dropout)":
            (weights @ v, weights),
        "dropout applied to the weights, but the output computed from the weights before dropout":
            (weights @ v, weights * pattern),
    }
    for name, (o, w) in attention_variants(q, k, v).items():
        if w.shape == pattern.shape:  # the mistakes of the weights, then dropout as it should be
            out[name] = ((w * pattern) @ (k if name == WEIGHTS_TIMES_KEY else v), w * pattern)
    return out
