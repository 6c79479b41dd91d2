"""The public checks of the causal mask (masks.py), written once: the release writes them into the
shipped selfcheck.py, which runs them with its helpers in scope (`check`, `near`, `shape`, `holds`, `hinted`,
`raises_value_error`, `Failed`; the shared inputs `SEED_004`, `MASK`, `MASK_LEGEND`: autograder/selfcheck.py).
"""


@check("masks", f"causal_mask(4): bool, lower triangle with the diagonal ({MASK_LEGEND})", "causal_mask")
def _():
    import torch
    from masks import causal_mask

    mask = causal_mask(4)
    holds(isinstance(mask, torch.Tensor), f"expected a tensor, got {type(mask).__name__}")
    holds(mask.dtype == torch.bool, f"expected a bool tensor, got {mask.dtype}")
    shape(mask, (4, 4), "causal_mask(4)")
    expected = [[j <= i for j in range(4)] for i in range(4)]
    if mask.tolist() != expected:
        raise Failed(
            f"causal_mask(4) ({MASK_LEGEND}):\n"
            + _side_by_side("expected", _drawn(torch.tensor(expected)), "got", _drawn(mask)),
            "True = may attend: j <= i")


@check("masks", "causal_mask(5, device='meta') is a bool (5, 5) tensor on the meta device", "causal_mask")
def _():
    from masks import causal_mask

    mask = causal_mask(5, device="meta")
    holds(mask.device.type == "meta", f"causal_mask(5, device='meta') should be on the meta device, got {mask.device}",
          "build the mask on `device` (torch.ones(..., dtype=torch.bool, device=device))")
    shape(mask, (5, 5), "causal_mask(5, device='meta')")
