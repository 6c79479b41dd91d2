"""The causal mask."""
import torch


def causal_mask(seq_len, device=None):
    # like the tutorial: ones above the diagonal are the future tokens
    ones = torch.ones(seq_len, seq_len, dtype=torch.bool, device=device)
    return torch.triu(ones, diagonal=1)
