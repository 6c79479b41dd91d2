"""Multi-head attention built from my own attention, heads and masks modules."""
import torch
from torch import nn

from attention import scaled_dot_product_attention
from heads import merge_heads, split_heads
from masks import causal_mask


class CausalAttention(nn.Module):
    def __init__(self, d_in, d_out, context_length, dropout=0.0, qkv_bias=False):
        super().__init__()
        self.Wq = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.Wk = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.Wv = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("mask", causal_mask(context_length))

    def forward(self, x):
        T = x.shape[1]
        out, _ = scaled_dot_product_attention(
            self.Wq(x), self.Wk(x), self.Wv(x), mask=self.mask[:T, :T], dropout=self.dropout
        )
        return out


class StackedMultiHeadAttention(nn.Module):
    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__()
        self.heads = nn.ModuleList(
            CausalAttention(d_in, d_out, context_length, dropout, qkv_bias) for _ in range(num_heads)
        )

    def forward(self, x):
        return torch.cat([head(x) for head in self.heads], dim=-1)


class MultiHeadAttention(nn.Module):
    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__()
        if d_out % num_heads:
            raise ValueError(f"num_heads={num_heads} must divide d_out={d_out}")
        self.num_heads = num_heads
        self.Wq = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.Wk = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.Wv = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.Wo = nn.Linear(d_out, d_out)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("mask", causal_mask(context_length))

    def forward(self, x):
        T = x.shape[1]
        q, k, v = (split_heads(proj(x), self.num_heads) for proj in (self.Wq, self.Wk, self.Wv))
        # all heads at once: (B, H, T, head_dim)
        context, _ = scaled_dot_product_attention(q, k, v, mask=self.mask[:T, :T], dropout=self.dropout)
        return self.Wo(merge_heads(context))
