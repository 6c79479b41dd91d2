"""The public checks of the causal mask (masks.py), written once: the release writes them into the
shipped selfcheck.py, which runs them with its helpers in scope (`check`, `near`, `shape`, `holds`, `hinted`,
`raises_value_error`, `Failed`, `show`; the shared inputs `SEED_004`, `MASK`, `MASK_LEGEND`: autograder/selfcheck.py),
and each into the check cell of 03_masks.ipynb that its `cell=` names, which runs it at once.
"""


@check("masks", "《多头注意力：堆叠与权重分割》's triu mask: causal_mask(T) == (triu(ones(T, T), diagonal=1) == 0), T = "
       "1..6: the same mask, opposite polarity", "causal_mask", cell="check-seed-004-relation")
def _():
    import torch
    from masks import causal_mask

    for t in range(1, 7):
        blocked = torch.triu(torch.ones(t, t), diagonal=1)  # 《多头注意力：堆叠与权重分割》's: 1 = blocked
        mask = causal_mask(t)
        same = isinstance(mask, torch.Tensor) and mask.tolist() == (blocked == 0).tolist()
        holds(same, f"causal_mask({t}) should be True exactly where triu(ones({t}, {t}), diagonal=1) is 0",
              "the same mask, opposite polarity: True = may attend, j <= i")
    show("triu(ones(6, 6), diagonal=1), 1 = blocked:", blocked.int(), "causal_mask(6), 1 = may attend:", mask.int(),
         sep="\n")


@check("masks", f"causal_mask(4): bool, lower triangle with the diagonal ({MASK_LEGEND}); T = 1, 2, 5, 16; as "
       "attn_mask, what is_causal=True does", "causal_mask", cell="check-values")
def _():
    import torch
    import torch.nn.functional as F
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
    for t in (1, 2, 5, 16):
        holds(causal_mask(t).tolist() == torch.ones(t, t).tril().bool().tolist(),
              f"causal_mask({t}) is not the bool lower triangle with the diagonal", "True = may attend: j <= i")
    torch.manual_seed(0)
    q, k, v = torch.randn(2, 3, 6, 4), torch.randn(2, 3, 6, 4), torch.randn(2, 3, 6, 4)
    near(F.scaled_dot_product_attention(q, k, v, attn_mask=causal_mask(6)),
         F.scaled_dot_product_attention(q, k, v, is_causal=True).tolist(),
         "F.scaled_dot_product_attention with attn_mask=causal_mask(6), against is_causal=True",
         "True = may attend, the polarity of F.scaled_dot_product_attention's attn_mask", tol=1e-6)


@check("masks", "causal_mask(5, device='meta') is a bool (5, 5) tensor on the meta device; device=None: torch's "
       "default device; a torch.device works too", "causal_mask", cell="check-device")
def _():
    import torch
    from masks import causal_mask

    device_hint = "build the mask on `device` (torch.ones(..., dtype=torch.bool, device=device))"
    mask = causal_mask(5, device="meta")
    holds(mask.device.type == "meta", f"causal_mask(5, device='meta') should be on the meta device, got {mask.device}",
          device_hint)
    holds(mask.dtype == torch.bool, f"causal_mask(5, device='meta') should be a bool tensor, got {mask.dtype}")
    shape(mask, (5, 5), "causal_mask(5, device='meta')")
    holds(causal_mask(5).device == torch.empty(0).device,
          f"causal_mask(5) should be on torch's default device ({torch.empty(0).device}), got {causal_mask(5).device}",
          "device=None: the default device, as torch.ones(..., device=None) does")
    holds(causal_mask(5, device=torch.device("cpu")).device.type == "cpu",
          "causal_mask(5, device=torch.device('cpu')) should be on the CPU", device_hint)
    if torch.cuda.is_available():
        gpu = causal_mask(5, device="cuda")
        holds(gpu.is_cuda and torch.equal(gpu.cpu(), causal_mask(5)),
              "causal_mask(5, device='cuda') should be the same mask on the GPU", device_hint)
