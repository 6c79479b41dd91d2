"""The causal mask.

A language model predicts token t from tokens 0..t only, so query position i
may attend to key positions j <= i and never to later ones.
《多头注意力：堆叠与权重分割》 builds the blocked part with `torch.triu(..., diagonal=1)`; this kit uses the
opposite, equivalent polarity of torch.nn.functional.scaled_dot_product_attention:

    True = "may attend" (j <= i, the diagonal included), False = blocked.

For seq_len = 3:
    [[ True, False, False],
     [ True,  True, False],
     [ True,  True,  True]]
"""
import torch


def causal_mask(seq_len, device=None):
    """Return the causal mask for seq_len positions.

    Args:
        seq_len: number of positions T.
        device: where to create the mask (None: torch's default device).

    Returns:
        bool tensor (T, T) on `device`, True ("may attend") where key
        position j <= query position i (lower triangle, diagonal included),
        False (blocked) where j > i.
    """
    ### BEGIN SOLUTION
    return torch.tril(torch.ones(seq_len, seq_len, dtype=torch.bool, device=device))
    ### END SOLUTION
