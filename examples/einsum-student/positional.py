"""Sinusoidal positional encoding, interleaved sin/cos."""
import math

import torch
from torch import nn


def sinusoidal_encoding(seq_len, d_model):
    if d_model % 2:
        raise ValueError(f"d_model must be even, got {d_model}")
    # work in float64 so that long tables stay exact, cast at the end
    pos = torch.arange(seq_len, dtype=torch.float64)
    inv_freq = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float64) * (-math.log(10000.0) / d_model))
    angles = torch.einsum("p,f->pf", pos, inv_freq)  # (seq_len, d_model/2)
    # stack on a new last dim then flatten: sin, cos, sin, cos, ...
    pe = torch.stack((angles.sin(), angles.cos()), dim=-1).reshape(seq_len, d_model)
    return pe.to(torch.get_default_dtype())


class PositionalEncoding(nn.Module):
    def __init__(self, d_model, max_len=5000, dropout=0.0):
        super().__init__()
        self.register_buffer("pe", sinusoidal_encoding(max_len, d_model))
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        return self.dropout(x + self.pe[: x.shape[1]])
