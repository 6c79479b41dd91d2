"""Decoding with a KV cache: the fused multi-head attention of mha.py, one token at a time.

A model that generates text runs its causal attention once per new token. Run as a full causal pass, step T
recomputes the queries, keys and values of all T tokens so far, and the T x T scores, to keep only the last
row: T steps cost about T^2 / 2 tokens' projections, and T^3 / 3 scores. Yet under the causal mask (True = may
attend, j <= i), nothing at positions j < T depends on the new token: their keys and values are the same at
every step. So keep them. A step then

1. adds the positional encoding of the token's TRUE position t (the number of tokens already cached) to the one
   new token x (B, 1, d_in): PE[t], not PE[:T] as PositionalEncoding.forward adds to T tokens (with T = 1 that
   is PE[0] at every step, and every token is decoded as if it were the first);
2. projects it alone: q, k, v (B, H, 1, head_dim), as MultiHeadAttention.forward does for T tokens;
3. appends k and v to the cache of keys and values (B, H, t, head_dim) -> (B, H, t + 1, head_dim);
4. scores its one query row against every cached key: (B, H, 1, t + 1). No causal mask: the new token is the
   last one, and may attend to every key in the cache, its own included. (The mask of a full pass, applied to a
   one-row query, keeps its first row: the new token would see only the first key.)
5. merges the heads and applies Wo: (B, 1, d_out), the output of the new token.

The outputs, token by token, are exactly those of the full causal pass on x + PE[:T] (`causal_pass`), at every
position, for a step's cost that grows with t only in its one row of scores. PE is positional.py's
sinusoidal_encoding, kept as the buffer `pe`.

Decoding is inference: run it in eval mode (no dropout is applied in `step`).
"""
import math

import torch
from torch import nn

from mha import MultiHeadAttention
from positional import sinusoidal_encoding


class KVCacheAttention(MultiHeadAttention):
    """Your fused MultiHeadAttention (mha.py), with a positional encoding, decoding one token at a time.

    Args: as for MultiHeadAttention (d_in, d_out, context_length, dropout, num_heads, qkv_bias); your
    MultiHeadAttention's constructor builds Wq, Wk, Wv and Wo. d_in must be even (the positional encoding).

    Attributes (besides your MultiHeadAttention's): `pe`, a buffer (context_length, d_in): your
    sinusoidal_encoding(context_length, d_in) (positional.py), row p the encoding of position p; `num_heads` H
    and `head_dim` = d_out // H. (This constructor is given: write `step` and `forward`.)

    The cache is a pair of tensors, keys and values, each (B, H, t, head_dim): the keys and values of the t
    tokens decoded so far, position 0 first. An empty cache has t = 0 (`empty_cache`).
    """

    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__(d_in, d_out, context_length, dropout, num_heads, qkv_bias)
        table = sinusoidal_encoding(context_length, d_in).to(torch.get_default_dtype())  # (context_length, d_in)
        self.register_buffer("pe", table)  # follows the module to any device and dtype
        self.num_heads = num_heads
        self.head_dim = d_out // num_heads

    def empty_cache(self, x):
        """The cache before the first token: keys and values (B, H, 0, head_dim), on x's device and dtype."""
        empty = x.new_zeros(x.shape[0], self.num_heads, 0, self.head_dim)
        return empty, empty.clone()

    def causal_pass(self, x):
        """The full causal pass that decoding must reproduce: MultiHeadAttention.forward(x + PE[:T]),
        (B, T, d_in) -> (B, T, d_out). Its output at position t is the output of step t."""
        return MultiHeadAttention.forward(self, x + self.pe[:x.shape[1]])

    def step(self, x, keys, values):
        """One decoding step: the new token's output, and the cache grown by its key and value.

        Args:
            x: the new token, (B, 1, d_in), at position t = keys.shape[2] (the tokens already cached).
            keys, values: the cache, (B, H, t, head_dim) each (t may be 0).

        Returns:
            (output (B, 1, d_out), keys (B, H, t + 1, head_dim), values (B, H, t + 1, head_dim)): the new
            token's output, equal to the full causal pass's output at position t; the cache with the new
            token's key and value appended at position t (the first t entries unchanged).

        Project the one new token only, and score its one query row against every cached key:
            x = x + self.pe[t]                                 # its true position t, not PE[:1] = PE[0]
            q, k, v = Wq(x), Wk(x), Wv(x) as (B, H, 1, head_dim)
            keys, values = keys + [k], values + [v]            # torch.cat on dim 2: (B, H, t + 1, head_dim)
            scores = q @ keys.transpose(2, 3) / sqrt(head_dim) # (B, H, 1, t + 1): no mask
            output = Wo(merged(softmax(scores) @ values))      # (B, 1, d_out)
        """
        ### BEGIN SOLUTION
        B = x.shape[0]
        H, hd = self.num_heads, self.head_dim  # hd: head_dim
        t = keys.shape[2]  # the new token's position: the number of tokens already cached
        x = x + self.pe[t]  # (B, 1, d_in): the token at its true position
        q = self.Wq(x).view(B, 1, H, hd).transpose(1, 2)  # (B, H, 1, head_dim)
        k = self.Wk(x).view(B, 1, H, hd).transpose(1, 2)  # (B, H, 1, head_dim)
        v = self.Wv(x).view(B, 1, H, hd).transpose(1, 2)  # (B, H, 1, head_dim)
        keys = torch.cat((keys, k), dim=2)  # (B, H, t + 1, head_dim)
        values = torch.cat((values, v), dim=2)  # (B, H, t + 1, head_dim)
        scores = q @ keys.transpose(2, 3) / math.sqrt(hd)  # (B, H, 1, t + 1): one query row, every key allowed
        weights = torch.softmax(scores, dim=-1)  # (B, H, 1, t + 1)
        context = (weights @ values).transpose(1, 2).reshape(B, 1, H * hd)  # (B, 1, d_out)
        return self.Wo(context), keys, values  # (B, 1, d_out), the cache grown by one token
        ### END SOLUTION

    def forward(self, x, keys=None, values=None):
        """Decode the tokens of x one at a time, each with one `step`, continuing the cache (keys, values).

        Args:
            x: (B, T, d_in), the next T tokens, at positions t .. t + T - 1.
            keys, values: the cache of the t tokens before them, (B, H, t, head_dim) each; None: an empty
                cache (`empty_cache`, t = 0).

        Returns:
            (output (B, T, d_out), keys, values (B, H, t + T, head_dim)): the outputs of the T steps, in
            order, and the cache after the last one. From an empty cache, output equals causal_pass(x).

        One step per token, never one pass over all T tokens at once: that is the full causal pass again.
        """
        ### BEGIN SOLUTION
        if keys is None or values is None:
            keys, values = self.empty_cache(x)
        outputs = []
        for i in range(x.shape[1]):
            out, keys, values = self.step(x[:, i:i + 1], keys, values)  # (B, 1, d_out)
            outputs.append(out)
        return torch.cat(outputs, dim=1), keys, values  # (B, T, d_out), the cache of t + T tokens
        ### END SOLUTION
