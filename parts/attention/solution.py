"""Scaled dot-product attention.

《PyTorch快餐教程(5)》 gives the formula and the code, 《Self-Attention详解》 works it out
by hand:

    Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V

Every query is compared with every key (a dot product), the scores are scaled
by 1 / sqrt(d_k) so that they do not grow with the dimension, a softmax over
the keys turns each row of scores into weights that sum to 1, and the output
is the weighted sum of the values.
"""
import math

import torch


def scaled_dot_product_attention(query, key, value, mask=None, dropout=None):
    """Compute scaled dot-product attention.

    Args:
        query: (..., L, d_k) tensor, one row per query position.
        key:   (..., S, d_k) tensor, one row per key position.
        value: (..., S, d_v) tensor, one row per key position.
            Any number of leading (batch, head) dims; L and S may differ.
            Called per head of multi-head attention, d_k = d_v = head_dim.
        mask: optional bool tensor broadcastable to (..., L, S).
            True means "may attend"; positions where it is False get zero
            weight (fill their scores with float("-inf") before the softmax,
            or torch.finfo(scores.dtype).min; not -1e9, which float16 cannot
            hold: masked_fill raises).
            This is the polarity of torch.nn.functional.scaled_dot_product_attention;
            the tutorials' `mask == 0` marks the blocked positions, the same thing.
        dropout: optional nn.Module applied to the weights after the softmax
            (the convention of 《PyTorch快餐教程(5)》); None means no dropout.

    Returns:
        (output, weights):
            output  (..., L, d_v) = weights @ value
            weights (..., L, S)   = softmax(query @ key^T / sqrt(d_k)) over
                                    the last dim, then dropout if given.

    Worked example (《Self-Attention详解》): q1 = (1, 2), q2 = (1, 1), K = V = I (2x2)
    gives scaled scores (0.71, 1.41) for q1 and outputs b1 = (0.33, 0.67),
    b2 = (0.50, 0.50).

    Do not modify the inputs in place, and create no tensor on a fixed
    device: the output lives where the inputs live, in their dtype.
    """
    ### BEGIN SOLUTION
    d_k = query.size(-1)
    scores = query @ key.transpose(-2, -1) / math.sqrt(d_k)  # (..., L, S)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)  # (..., L, S), rows sum to 1
    if dropout is not None:
        weights = dropout(weights)
    output = weights @ value  # (..., L, d_v)
    return output, weights
    ### END SOLUTION
