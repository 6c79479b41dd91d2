"""Heads with reshape and permute (no view/contiguous bookkeeping)."""


def split_heads(x, num_heads):
    B, T, D = x.shape
    if D % num_heads:
        raise ValueError(f"cannot split d_model={D} into {num_heads} heads")
    # (B, T, D) -> (B, T, H, D/H) -> (B, H, T, D/H)
    return x.reshape(B, T, num_heads, D // num_heads).permute(0, 2, 1, 3)


def merge_heads(x):
    B, H, T, d_k = x.shape
    # (B, H, T, d_k) -> (B, T, H, d_k) -> (B, T, H*d_k)
    return x.permute(0, 2, 1, 3).reshape(B, T, H * d_k)
