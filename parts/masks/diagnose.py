"""The known mistakes of the causal mask (masks.py): the mask each would give. The machinery (match) is the kit's,
autograder/grade/diagnose.py.
"""
from __future__ import annotations

from autograder.grade.diagnose import match  # noqa: F401  (the graders' diagnose.match)
from solutions import masks as ref_masks

def mask_variants(seq_len):
    allowed = ref_masks.causal_mask(seq_len)
    return {
        "your mask blocks the diagonal: a position must be allowed to attend to itself": allowed.tril(-1),
        "your mask marks the blocked positions (《多头注意力：堆叠与权重分割》's triu(diagonal=1)); here True means 'may attend'":
            ~allowed,
        "your mask is the upper triangle: True must be where key j <= query i": allowed.T,
    }
