"""Causal mask from position indices."""
import torch


def causal_mask(seq_len, device=None):
    i = torch.arange(seq_len, device=device)
    # query position on the rows, key position on the columns: j <= i may attend
    return i.unsqueeze(1) >= i.unsqueeze(0)
