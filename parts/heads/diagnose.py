"""The known mistakes of splitting into heads and merging them back (heads.py): the output each would give on the
same input. The machinery (match) is the kit's, autograder/grade/diagnose.py.
"""
from __future__ import annotations

from autograder.grade.diagnose import match  # noqa: F401  (the graders' diagnose.match)

def split_variants(x, num_heads):
    B, T, d = x.shape
    hd = d // num_heads  # head_dim
    return {
        "your heads come from view without transpose: (B, T, d_model) viewed straight as (B, H, T, head_dim)":
            x.reshape(B, num_heads, T, hd),
        "head h takes every H-th feature (view as (B, T, head_dim, H)) instead of the features "
        "h*head_dim:(h+1)*head_dim": x.reshape(B, T, hd, num_heads).permute(0, 3, 1, 2),
        "you transposed the wrong axes: view(B, T, H, head_dim).transpose(2, 3) gives (B, T, head_dim, H); the "
        "heads come before the tokens with transpose(1, 2)": x.reshape(B, T, num_heads, hd).transpose(2, 3),
        "you transposed the wrong axes: x.transpose(1, 2) before the view mixes the tokens into the features; "
        "view as (B, T, H, head_dim) first, then transpose(1, 2)": x.transpose(1, 2).reshape(B, num_heads, T, hd),
    }


def merge_variants(x):
    B, H, T, hd = x.shape  # hd: head_dim
    return {
        "your merge uses view without transposing the heads back: (B, H, T, head_dim) viewed as "
        "(B, T, H * head_dim)": x.reshape(B, T, H * hd),
        "your merge puts the heads in the wrong order: feature c of head h lands at c*H + h (permute(0, 2, 3, 1)) "
        "instead of h*head_dim + c (transpose(1, 2), then view)": x.permute(0, 2, 3, 1).reshape(B, T, H * hd),
        "your merge transposes the wrong axes: transpose(2, 3) swaps the tokens and the features; swap the heads "
        "and the tokens with transpose(1, 2)": x.transpose(2, 3).reshape(B, T, H * hd),
    }
