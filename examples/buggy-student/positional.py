"""Sinusoidal positional encoding."""
import torch
from torch import nn


def sinusoidal_encoding(seq_len, d_model):
    if d_model % 2 != 0:
        raise ValueError("d_model must be even")
    pos = torch.arange(seq_len, dtype=torch.float64)[:, None]  # (seq_len, 1)
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)  # (d_model / 2,)
    angles = pos / torch.pow(10000.0, two_i / d_model)  # (seq_len, d_model / 2)
    # sines for the first half of the features, cosines for the second half
    pe = torch.cat([torch.sin(angles), torch.cos(angles)], dim=1)
    return pe.to(torch.get_default_dtype())


class PositionalEncoding(nn.Module):
    def __init__(self, d_model, max_len=5000, dropout=0.0):
        super().__init__()
        self.dropout = nn.Dropout(p=dropout)
        self.register_buffer("pe", sinusoidal_encoding(max_len, d_model))

    def forward(self, x):
        seq_len = x.size(1)
        return self.dropout(x + self.pe[:seq_len])
