"""Known wrong variants, computed from the reference, so feedback can name the likely bug.

When a student's output differs from the reference, the graders compute what
the common mistakes would have produced on the same inputs (the reference
computation with one step changed) and check whether the student's output
matches one of them: "your weights equal softmax without the 1/sqrt(d_k)
scaling". Every variant here is computed, none is a canned message keyed to
a test.
"""
from __future__ import annotations

import math

import torch

from solutions import masks as ref_masks
from solutions import positional as ref_positional


def _attention(q, k, v, mask=None, *, scale=None, dim=-1, blocked_when=False, mask_after=False):
    """The reference attention with one step parameterised."""
    scale = 1 / math.sqrt(q.size(-1)) if scale is None else scale
    scores = q @ k.transpose(-2, -1) * scale  # (..., L, S)
    if mask is not None and not mask_after:
        scores = scores.masked_fill(mask == blocked_when, float("-inf"))
    weights = torch.softmax(scores, dim=dim)
    if mask is not None and mask_after:
        weights = weights.masked_fill(~mask, 0.0)
    return weights @ v, weights


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
    if mask is not None:
        out["the mask's polarity inverted: you blocked the positions where the mask is True"] = \
            _attention(q, k, v, mask, blocked_when=True)
        out["the mask applied after the softmax, so the weights are not renormalised"] = \
            _attention(q, k, v, mask, mask_after=True)
    return out


def split_variants(x, num_heads):
    B, T, d = x.shape
    return {
        "your heads come from view without transpose: (B, T, d_model) viewed straight as (B, H, T, d_k)":
            x.reshape(B, num_heads, T, d // num_heads),
        "head h takes every H-th feature (view as (B, T, d_k, H)) instead of features h*d_k:(h+1)*d_k":
            x.reshape(B, T, d // num_heads, num_heads).permute(0, 3, 1, 2),
    }


def merge_variants(x):
    B, H, T, d_k = x.shape
    return {"your merge uses view without transposing the heads back: (B, H, T, d_k) viewed as (B, T, H*d_k)":
            x.reshape(B, T, H * d_k)}


def mask_variants(seq_len):
    allowed = ref_masks.causal_mask(seq_len)
    return {
        "your mask blocks the diagonal: a position must be allowed to attend to itself": allowed.tril(-1),
        "your mask marks the blocked positions (seed 004's triu(diagonal=1)); here True means 'may attend'":
            ~allowed,
        "your mask is the upper triangle: True must be where key j <= query i": allowed.T,
    }


def encoding_variants(seq_len, d_model):
    pe = ref_positional.sinusoidal_encoding(seq_len, d_model)
    sin, cos = pe[:, 0::2], pe[:, 1::2]
    swapped = torch.empty_like(pe)
    swapped[:, 0::2], swapped[:, 1::2] = cos, sin
    position = torch.arange(seq_len, dtype=torch.float64).unsqueeze(1)
    i = torch.arange(d_model // 2, dtype=torch.float64)
    angle = position / 10000 ** (i / d_model)
    exponent_i = torch.empty(seq_len, d_model, dtype=torch.float64)
    exponent_i[:, 0::2], exponent_i[:, 1::2] = torch.sin(angle), torch.cos(angle)
    return {
        "your sines and cosines are concatenated (all sines, then all cosines) instead of interleaved":
            torch.cat([sin, cos], dim=-1),
        "your sines and cosines are swapped: sin belongs in the even columns, cos in the odd ones": swapped,
        "your frequencies use 10000^(i/d_model) instead of 10000^(2i/d_model)": exponent_i.to(pe.dtype),
    }


def match(got, variants, atol=1e-4):
    """The name of the first variant that `got` equals, or None."""
    if not isinstance(got, torch.Tensor):
        return None
    got = got.detach().cpu()
    for name, value in variants.items():
        value = value.detach().cpu()
        if got.shape != value.shape:
            continue
        if got.dtype == torch.bool or value.dtype == torch.bool:
            if got.dtype == value.dtype and torch.equal(got, value):
                return name
            continue
        if torch.allclose(got.double(), value.double(), atol=atol, rtol=1e-3, equal_nan=True):
            return name
    return None
