"""Causal self-attention, stacked multi-head attention and fused multi-head attention.

《多头注意力：堆叠与权重分割》 builds multi-head attention twice:

1. Stacked: a list of independent single heads (CausalAttention), run one
   after another, their outputs concatenated on the last dim. Simple, but it
   runs as many small matrix products as there are heads.
2. Fused ("weight splitting"): one big projection per Q, K, V computes every
   head at once; `view` + `transpose` turn (B, T, d_out) into
   (B, H, T, head_dim) and one batched product `q @ k.transpose(2, 3)`
   scores all heads together. An output projection Wo mixes the heads.

`d_out` follows 《多头注意力：堆叠与权重分割》 and so means two things under the same
signature: in CausalAttention and StackedMultiHeadAttention it is the width
of ONE head (the stacked output has H * d_out features); in
MultiHeadAttention it is the TOTAL width, split over the heads
(head_dim = d_out // H).

All three are causal: query position i attends to key positions j <= i only.
Keep the causal mask as a bool buffer, True = may attend
(`self.register_buffer("mask", ...)`), so that it follows the module to any
device; build nothing on a fixed device.
"""
import math

import torch
from torch import nn


class CausalAttention(nn.Module):
    """One causal self-attention head (the building block of 《多头注意力：堆叠与权重分割》).

    Args:
        d_in: input features.
        d_out: output features of the head: its width (its head_dim, and the
            d_k of its attention).
        context_length: longest sequence T; the causal mask covers it.
        dropout: dropout probability applied to the attention weights.
        qkv_bias: whether Wq, Wk, Wv have a bias.

    Attributes (created in this order): Wq, Wk, Wv, each nn.Linear(d_in,
    d_out, bias=qkv_bias); a dropout module; a causal mask buffer
    (context_length, context_length), bool, True = may attend (j <= i).

    forward(x): x (B, T, d_in), T <= context_length -> (B, T, d_out):
        q, k, v = Wq(x), Wk(x), Wv(x)                   # (B, T, d_out)
        weights = softmax(q k^T / sqrt(d_out)), causal  # (B, T, T)
        return dropout(weights) @ v                     # (B, T, d_out)
    """

    def __init__(self, d_in, d_out, context_length, dropout=0.0, qkv_bias=False):
        super().__init__()
        ### BEGIN SOLUTION
        self.Wq = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.Wk = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.Wv = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.dropout = nn.Dropout(dropout)
        causal = torch.tril(torch.ones(context_length, context_length, dtype=torch.bool))
        self.register_buffer("mask", causal)  # True = may attend
        ### END SOLUTION

    def forward(self, x):
        ### BEGIN SOLUTION
        B, T, _ = x.shape
        q, k, v = self.Wq(x), self.Wk(x), self.Wv(x)  # (B, T, d_out)
        scores = q @ k.transpose(1, 2) / math.sqrt(k.size(-1))  # (B, T, T)
        scores = scores.masked_fill(~self.mask[:T, :T], float("-inf"))
        weights = self.dropout(torch.softmax(scores, dim=-1))  # (B, T, T)
        return weights @ v  # (B, T, d_out)
        ### END SOLUTION


class StackedMultiHeadAttention(nn.Module):
    """Multi-head attention as a stack of single heads (《多头注意力：堆叠与权重分割》's MultiHeadAttentionStack).

    Args:
        d_in, context_length, dropout, qkv_bias: as for CausalAttention.
        d_out: output features of EACH head (its head_dim), as for
            CausalAttention: the output has H * d_out features.
        num_heads: number of heads H.

    Attributes: `heads`, an nn.ModuleList of H independent
    CausalAttention(d_in, d_out, context_length, dropout, qkv_bias), each
    with its own causal mask (True = may attend).

    forward(x): x (B, T, d_in) -> every head on x, (B, T, d_out) each,
    concatenated on the last dim: (B, T, H * d_out). No output projection.
    """

    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__()
        ### BEGIN SOLUTION
        self.heads = nn.ModuleList(
            [CausalAttention(d_in, d_out, context_length, dropout, qkv_bias) for _ in range(num_heads)]
        )
        ### END SOLUTION

    def forward(self, x):
        ### BEGIN SOLUTION
        return torch.cat([head(x) for head in self.heads], dim=-1)  # (B, T, H * d_out)
        ### END SOLUTION


class MultiHeadAttention(nn.Module):
    """Fused multi-head attention (《多头注意力：堆叠与权重分割》's MultiHeadAttention).

    Args:
        d_in: input features.
        d_out: output features IN ALL, split over the heads: each head has
            head_dim = d_out // H (unlike StackedMultiHeadAttention, where
            d_out is per head).
        context_length: longest sequence T; the causal mask covers it.
        dropout: dropout probability on the attention weights.
        num_heads: number of heads H; head_dim = d_out // H.
        qkv_bias: whether Wq, Wk, Wv have a bias.

    Raises:
        ValueError: when num_heads does not divide d_out.

    Attributes (created in this order): Wq, Wk, Wv = nn.Linear(d_in, d_out,
    bias=qkv_bias); Wo = nn.Linear(d_out, d_out) (with bias); a dropout
    module; a causal mask buffer (context_length, context_length), bool,
    True = may attend (j <= i).

    forward(x): x (B, T, d_in) -> (B, T, d_out). Compute all heads together
    with batched matrix products, never with a Python loop over the heads:
        q = Wq(x).view(B, T, H, head_dim).transpose(1, 2)  # (B, H, T, head_dim)
        scores = q @ k.transpose(2, 3) / sqrt(head_dim)    # (B, H, T, T)
        context = dropout(softmax(causal(scores))) @ v     # (B, H, T, head_dim)
        merge the heads back to (B, T, d_out), then apply Wo: (B, T, d_out).
    """

    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__()
        ### BEGIN SOLUTION
        if d_out % num_heads != 0:
            raise ValueError(f"num_heads={num_heads} does not divide d_out={d_out}")
        self.d_out = d_out
        self.num_heads = num_heads
        self.head_dim = d_out // num_heads
        self.Wq = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.Wk = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.Wv = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.Wo = nn.Linear(d_out, d_out)
        self.dropout = nn.Dropout(dropout)
        causal = torch.tril(torch.ones(context_length, context_length, dtype=torch.bool))
        self.register_buffer("mask", causal)  # True = may attend
        ### END SOLUTION

    def forward(self, x):
        ### BEGIN SOLUTION
        B, T, _ = x.shape
        H, hd = self.num_heads, self.head_dim  # hd: head_dim
        q = self.Wq(x).view(B, T, H, hd).transpose(1, 2)  # (B, H, T, head_dim)
        k = self.Wk(x).view(B, T, H, hd).transpose(1, 2)  # (B, H, T, head_dim)
        v = self.Wv(x).view(B, T, H, hd).transpose(1, 2)  # (B, H, T, head_dim)
        scores = q @ k.transpose(2, 3) / math.sqrt(hd)  # (B, H, T, T)
        scores = scores.masked_fill(~self.mask[:T, :T], float("-inf"))
        weights = self.dropout(torch.softmax(scores, dim=-1))  # (B, H, T, T)
        context = (weights @ v).transpose(1, 2).contiguous().view(B, T, self.d_out)  # (B, T, d_out)
        return self.Wo(context)  # (B, T, d_out)
        ### END SOLUTION
