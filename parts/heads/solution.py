"""Splitting d_model into heads and merging them back.

Each of the H heads gets head_dim = d_model // H features of every token
(the head_dim of 《多头注意力：堆叠与权重分割》; 《PyTorch快餐教程(5)》 calls it d_k).
《Self-Attention详解》 splits q1 = (1, 1, 0, 1) into (1, 1) for head 1 and
(0, 1) for head 2: head h takes features h*head_dim : (h+1)*head_dim.
《PyTorch快餐教程(5)》 and 《多头注意力：堆叠与权重分割》 do it for a whole
batch with `view` then `transpose`:

    (B, T, d_model) -view-> (B, T, H, head_dim) -transpose(1, 2)-> (B, H, T, head_dim)

and undo it with `transpose(1, 2)`, `contiguous()` and `view`. A transposed
tensor is not contiguous in memory, which is why `view` needs `contiguous()`
first (or use `reshape`).
"""
import torch


def split_heads(x, num_heads):
    """Split the last dim of x into num_heads heads.

    Args:
        x: (B, T, d_model) tensor.
        num_heads: number of heads H; must divide d_model.

    Returns:
        (B, H, T, head_dim) tensor with head_dim = d_model // H, where head h
        holds the features h*head_dim : (h+1)*head_dim of every token.

    Raises:
        ValueError: when num_heads does not divide d_model.
    """
    ### BEGIN SOLUTION
    B, T, d_model = x.shape
    if d_model % num_heads != 0:
        raise ValueError(f"num_heads={num_heads} does not divide d_model={d_model}")
    d_k = d_model // num_heads  # head_dim, the width of one head
    return x.view(B, T, num_heads, d_k).transpose(1, 2)  # (B, H, T, head_dim)
    ### END SOLUTION


def merge_heads(x):
    """Merge the heads back: the exact inverse of split_heads.

    Args:
        x: (B, H, T, head_dim) tensor.

    Returns:
        (B, T, H * head_dim) tensor (H * head_dim = d_model), so that
        merge_heads(split_heads(x, H)) equals x.
    """
    ### BEGIN SOLUTION
    B, H, T, d_k = x.shape  # d_k = head_dim
    return x.transpose(1, 2).contiguous().view(B, T, H * d_k)  # (B, T, H * head_dim)
    ### END SOLUTION
