"""Split d_model into heads and merge them back."""
import torch


def split_heads(x, num_heads):
    batch, seq_len, d_model = x.shape
    if d_model % num_heads != 0:
        raise ValueError("d_model must be divisible by num_heads")
    head_dim = d_model // num_heads
    x = x.view(batch, seq_len, num_heads, head_dim)  # (B, T, H, d_k)
    return x.transpose(1, 2)  # (B, H, T, d_k)


def merge_heads(x):
    batch, num_heads, seq_len, head_dim = x.shape
    x = x.transpose(1, 2).contiguous()  # (B, T, H, d_k)
    return x.view(batch, seq_len, num_heads * head_dim)
