"""The public checks of splitting and merging heads (heads.py), written once: the release writes them into the
shipped selfcheck.py, which runs them with its helpers in scope (`check`, `near`, `shape`, `holds`, `hinted`,
`raises_value_error`, `Failed`, `show`; the shared inputs `SEED_004`, `MASK`, `MASK_LEGEND`: autograder/selfcheck.py),
and each into the check cell of 02_heads.ipynb that its `cell=` names, which runs it at once.
"""


@check("heads", "《Self-Attention详解》: q1 = (1, 1, 0, 1) splits into (1, 1) and (0, 1)", "split_heads",
       cell="check-seed-001-split")
def _():
    import torch
    from heads import split_heads

    q1 = torch.tensor([[[1.0, 1.0, 0.0, 1.0]]])  # (B, T, d_model) = (1, 1, 4)
    got = split_heads(q1, 2)
    shape(got, (1, 2, 1, 2), "split_heads(q1 as (B, T, d_model) = (1, 1, 4), 2)",
          "expected (B, H, T, head_dim) = (1, 2, 1, 2)")
    near(got[0, :, 0], [[1.0, 1.0], [0.0, 1.0]], "head 1, head 2",
         "head 1 should hold features 0:2 = (1, 1), head 2 features 2:4 = (0, 1)")
    show("shape:", tuple(got.shape), "  head 1:", got[0, 0, 0].tolist(), "  head 2:", got[0, 1, 0].tolist())


@check("heads", "shapes: split (B, T, d_model) -> (B, H, T, head_dim) for H = 1, 2, 3, 4, 6, 12; merge undoes split",
       "split_heads merge_heads", cell="check-shapes-and-inverse")
def _():
    import torch
    from heads import merge_heads, split_heads

    x = torch.randn(2, 5, 12)  # (B, T, d_model)
    for num_heads in (1, 2, 3, 4, 6, 12):
        head_dim = 12 // num_heads
        heads = split_heads(x, num_heads)
        shape(heads, (2, num_heads, 5, head_dim), f"split_heads(x (2, 5, 12), {num_heads})")
        for h in range(num_heads):
            near(heads[:, h], x[:, :, h * head_dim:(h + 1) * head_dim].tolist(),
                 f"head {h} of split_heads(x (2, 5, 12), {num_heads})",
                 f"head {h} should hold features {h * head_dim}:{(h + 1) * head_dim} of every token", tol=1e-6)
        near(merge_heads(heads), x.tolist(), f"merge_heads(split_heads(x, {num_heads}))",
             "merge_heads(split_heads(x)) should give x back", tol=1e-6)
    context = torch.randn(2, 3, 5, 4)  # a fresh contiguous (B, H, T, head_dim) tensor, like `weights @ v`
    near(merge_heads(context)[:, :, 4:8], context[:, 1].tolist(), "features 4:8 of merge_heads of a fresh "
         "(2, 3, 5, 4) tensor", "head h should land in features h*head_dim:(h+1)*head_dim", tol=1e-6)


@check("heads", "split_heads raises ValueError when num_heads does not divide d_model; float64 and meta kept",
       "split_heads merge_heads", cell="check-value-error")
def _():
    import torch
    from heads import merge_heads, split_heads

    raises_value_error(lambda: split_heads(torch.zeros(1, 2, 10), 3), "split_heads(x with d_model = 10, 3)",
                       "3 heads do not divide 10 features")
    x = torch.randn(2, 5, 12, dtype=torch.float64)
    holds(split_heads(x, 3).dtype == merge_heads(split_heads(x, 3)).dtype == torch.float64,
          "split and merge should keep float64")
    holds(split_heads(x.float().to("meta"), 3).device.type == "meta", "split_heads should keep the meta device")
