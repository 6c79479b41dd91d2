"""The machinery of the "Likely bug" diagnoses; each part's known mistakes are in its folder.

When a student's output differs from the reference, the graders compute what
the common mistakes would have produced on the same inputs (the reference
computation with one step changed) and check whether the student's output
matches one of them: "your weights equal softmax without the 1/sqrt(d_k)
scaling". Every variant is computed, none is a canned message keyed to
a test: a hint is shown only when the student's output equals what its bug
produces, and nothing is said otherwise.

The mistakes are each part's, in parts/<name>/diagnose.py (found through the
registry: `of(name)`; each part's graders import their own): the attention
modules (mha.py) are diagnosed the same way, their reference wiring run with
the student's own weights and one step changed. Here: what they share,
`match` (is the output one of the variants?), `raised_like` (is the error one
of the mistakes'?) and `_error`.
"""
from __future__ import annotations

import importlib

import torch

from autograder import registry


def of(part: str):
    """The diagnoses of a part of autograder.PARTS: its parts/<name>/diagnose.py, as a module."""
    return importlib.import_module(registry.part(part).diagnose_module)


def _error(mistake):
    """'Type: message' of the error that `mistake()` raises, or None when it raises nothing."""
    try:
        mistake()
    except Exception as exc:  # noqa: BLE001 - the reference with one step changed: whatever it raises
        return f"{type(exc).__name__}: {exc}"
    return None


def raised_like(errors):
    """A hint for checks.with_hint: the mistake whose error (`errors`, a thunk giving "Type: message" -> name,
    asked only when the student's code raised) is exactly what the student's code raised."""
    return lambda exc: errors().get(f"{exc.exc_type}: {exc.detail}")


def _same(a, b, atol):
    if a.shape != b.shape:
        return False
    if a.dtype == torch.bool or b.dtype == torch.bool:
        return a.dtype == b.dtype and torch.equal(a, b)
    return torch.allclose(a.double(), b.double(), atol=atol, rtol=1e-3, equal_nan=True)


def _distance(a, b):
    """The largest difference between `a` and `b` (same shape), NaN equal to NaN and infinitely far from a number."""
    if a.dtype == torch.bool or b.dtype == torch.bool:
        return 0.0
    a, b = a.double(), b.double()
    both_nan = torch.isnan(a) & torch.isnan(b)
    gap = torch.where(both_nan | (a == b), torch.zeros_like(a), (a - b).abs())  # a == b: equal infinities
    return float(torch.nan_to_num(gap, nan=float("inf")).max()) if gap.numel() else 0.0


def match(got, variants, atol=1e-4, expected=None):
    """The name of the variant that `got` equals, or None. A variant that equals the `expected` value (on
    these inputs the mistake changes nothing) is no evidence and never matches; when several mistakes give
    `got` on these inputs, the name says so and names them all, the evidence favouring none.

    Equal is within `atol`. Where the tolerance is coarse (a check in bfloat16 allows 4e-2), two mistakes can both
    lie within it while `got` is far nearer one of them: the tiny fill of the blocked scores and the mask never
    applied differ by 0.03 on the first case, and bfloat16 rounds each to within 0.004. So of the variants within
    the tolerance, those that give the same output are the nearest and any within three times its distance (or
    a tenth of the tolerance, for outputs that agree to rounding): the evidence favours them over the rest."""
    if not isinstance(got, torch.Tensor) or got.is_meta:
        return None
    got = got.detach().cpu()
    if isinstance(expected, torch.Tensor):
        expected = expected.detach().cpu()
    near = {}
    for name, value in variants.items():
        if not isinstance(value, torch.Tensor):
            continue
        value = value.detach().cpu()
        if isinstance(expected, torch.Tensor) and _same(value, expected, atol):
            continue
        if _same(got, value, atol):
            near[name] = _distance(got, value)
    best = min(near.values(), default=0.0)
    names = [name for name, distance in near.items() if distance <= max(3 * best, atol / 10)]
    if len(names) > 1:
        return f"{names[0]} (or, giving the same output here: " + "; or ".join(names[1:]) + ")"
    return names[0] if names else None
