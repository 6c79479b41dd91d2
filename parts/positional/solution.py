"""Sinusoidal positional encoding.

Attention by itself does not see the order of the tokens: 《Self-Attention详解》
swaps a2 and a3 and b1 does not change (attention is permutation-equivariant). So a
position code of the same shape is added to every token embedding. "Attention
Is All You Need" uses fixed sinusoids, interleaved sin/cos:

    PE[p, 2i]   = sin(p / 10000^(2i / d_model))
    PE[p, 2i+1] = cos(p / 10000^(2i / d_model))

Each pair of features (2i, 2i+1) turns at its own frequency, from 1 radian
per position down to 1/10000.
"""
import math

import torch
from torch import nn


def sinusoidal_encoding(seq_len, d_model):
    """Return the sinusoidal position table.

    Args:
        seq_len: number of positions.
        d_model: number of features; must be even.

    Returns:
        float tensor (seq_len, d_model) (torch's default dtype) with
        PE[p, 2i] = sin(p / 10000^(2i/d_model)) in the even columns and
        PE[p, 2i+1] = cos(p / 10000^(2i/d_model)) in the odd ones.

    Raises:
        ValueError: when d_model is odd.
    """
    ### BEGIN SOLUTION
    if d_model % 2 != 0:
        raise ValueError(f"d_model must be even, got {d_model}")
    position = torch.arange(seq_len, dtype=torch.float64).unsqueeze(1)  # (T, 1)
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)  # (d_model/2,)
    angle = position / 10000 ** (two_i / d_model)  # (T, d_model/2)
    pe = torch.zeros(seq_len, d_model, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(angle)
    pe[:, 1::2] = torch.cos(angle)
    return pe.to(torch.get_default_dtype())
    ### END SOLUTION


class PositionalEncoding(nn.Module):
    """Add the sinusoidal table to a batch of embeddings, then dropout.

    Args:
        d_model: number of features (even).
        max_len: longest sequence the table covers.
        dropout: dropout probability applied after the addition.

    Keep the table as a buffer named `pe` of shape (max_len, d_model)
    (`self.register_buffer("pe", ...)`): a buffer moves with `.to(device)`
    and is saved in the state dict, a plain attribute does neither. A
    buffer registered with `persistent=False` (moved, not saved: the table
    can be rebuilt from its size) is right too.

    forward(x): x (B, T, d_model) with T <= max_len -> dropout(x + pe[:T]),
    shape (B, T, d_model).
    """

    def __init__(self, d_model, max_len=5000, dropout=0.0):
        super().__init__()
        ### BEGIN SOLUTION
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("pe", sinusoidal_encoding(max_len, d_model))
        ### END SOLUTION

    def forward(self, x):
        ### BEGIN SOLUTION
        T = x.size(1)
        return self.dropout(x + self.pe[:T])  # (B, T, d_model)
        ### END SOLUTION
