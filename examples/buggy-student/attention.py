"""Scaled dot-product attention."""
import torch


def scaled_dot_product_attention(query, key, value, mask=None, dropout=None):
    # query: (..., L, d_k), key: (..., S, d_k), value: (..., S, d_v)
    d_k = query.shape[-1]
    scores = torch.matmul(query, key.transpose(-2, -1)) / d_k  # scale the scores

    if mask is not None:
        # True = may attend, so fill the other positions before the softmax
        scores = scores.masked_fill(mask.logical_not(), float("-inf"))

    weights = torch.softmax(scores, dim=-1)  # each row sums to 1
    if dropout is not None:
        weights = dropout(weights)

    output = torch.matmul(weights, value)  # (..., L, d_v)
    return output, weights
