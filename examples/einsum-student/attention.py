"""Scaled dot-product attention, written with einsum.

softmax(Q K^T / sqrt(d_k)) V, with the index names spelled out:
l = query position, s = key position, d = key feature, v = value feature.
"""
import math

import torch
import torch.nn.functional as F


def scaled_dot_product_attention(query, key, value, mask=None, dropout=None):
    d_k = query.size(-1)
    # (..., L, d) x (..., S, d) -> (..., L, S)
    scores = torch.einsum("...ld,...sd->...ls", query, key) / math.sqrt(d_k)
    if mask is not None:
        # mask: True = may attend; the tutorial's convention is mask == 0 -> blocked. The tutorial fills with
        # -1e9, which float16 cannot hold (masked_fill raises): the dtype's most negative number fits every dtype
        scores = scores.masked_fill(mask == 0, torch.finfo(scores.dtype).min)
    weights = F.softmax(scores, dim=-1)
    if dropout is not None:
        weights = dropout(weights)
    # (..., L, S) x (..., S, v) -> (..., L, v)
    output = torch.einsum("...ls,...sv->...lv", weights, value)
    return output, weights
