"""The public checks of the attention modules (mha.py), written once: the release writes them into the
shipped selfcheck.py, which runs them with its helpers in scope (`check`, `near`, `shape`, `holds`, `hinted`,
`raises_value_error`, `Failed`, `show`; the shared inputs `SEED_004`, `MASK`, `MASK_LEGEND`: autograder/selfcheck.py),
and each into the check cell of 04_mha.ipynb that its `cell=` names, which runs it at once.
"""


@check("mha", "CausalAttention(3, 2, 6): nn.Linear Wq, Wk, Wv without bias; token 0 sees only itself; shorter "
       "inputs work", "CausalAttention", cell="check-causal-attention")
def _():
    import torch
    from mha import CausalAttention

    torch.manual_seed(0)
    head = CausalAttention(3, 2, 6)
    batch = torch.tensor([SEED_004, SEED_004])
    with torch.no_grad():
        out = head(batch)
        shape(out, (2, 6, 2), "CausalAttention(3, 2, 6) on the tutorial's batch (2, 6, 3)")
        for name in ("Wq", "Wk", "Wv"):
            layer = getattr(head, name, None)
            holds(isinstance(layer, torch.nn.Linear), f"CausalAttention needs an nn.Linear attribute named {name}")
            holds(tuple(layer.weight.shape) == (2, 3) and layer.bias is None,
                  f"{name} should be nn.Linear(3, 2, bias=False)")
        show(out[0])
        near(out[:, 0], head.Wv(batch[:, 0]).tolist(), "the output at token 0",
             "the first token may only attend to itself, so its output should be its own value vector", tol=1e-6)
        short_hint = "a shorter input (T = 4 < context_length = 6) should work too: slice the mask to (T, T)"
        near(hinted(lambda: head(batch[:, :4]), short_hint), out[:, :4].tolist(),
             "the output for the first 4 tokens alone", short_hint, tol=1e-6)
    holds(CausalAttention(3, 2, 6, qkv_bias=True).Wq.bias is not None, "qkv_bias=True should give Wq, Wk, Wv a bias")


@check("mha", "《多头注意力：堆叠与权重分割》: stacked heads with W = torch.rand(3, 2) after torch.manual_seed(123), all six rows",
       "StackedMultiHeadAttention CausalAttention", cell="check-seed-004-stacked")
def _():
    import torch
    from mha import StackedMultiHeadAttention

    module = StackedMultiHeadAttention(3, 2, 6, 0.0, 2)
    torch.manual_seed(123)
    with torch.no_grad():
        for head in module.heads:
            for name in ("Wq", "Wk", "Wv"):
                getattr(head, name).weight.copy_(torch.rand(3, 2).T)  # x @ W == Linear with weight W.T
        out = module(torch.tensor([SEED_004, SEED_004]))
    shape(out, (2, 6, 4), "the output for the tutorial's batch (2, 6, 3)", "2 heads of d_out = 2 give 4 features")
    near(out[0], [[0.1855, 0.8812, 1.3211, 0.8098], [0.3116, 0.9549, 1.6063, 1.1493],  # all six rows: row 0
                  [0.3395, 0.9652, 1.6530, 1.2084], [0.3129, 0.8747, 1.5012, 1.0955],  # alone attends only to
                  [0.2865, 0.7897, 1.4100, 1.0398], [0.2990, 0.8040, 1.4025, 1.0361]],  # itself: no scaling shows
         "the six rows of the output", "row 0 attends only to itself: if it alone is right, check the scaling "
         "(sqrt(d_k)) and the mask")
    near(out[1], out[0].tolist(), "the second copy of the batch against the first", "each sequence of the batch is "
         "attended to alone: the two copies give the same output", tol=1e-6)
    show(out)


@check("mha", "《多头注意力：堆叠与权重分割》: fused MultiHeadAttention(3, 4, 6, 0.0, 2) after torch.manual_seed(123), all six rows",
       "MultiHeadAttention", cell="check-seed-004-fused")
def _():
    import torch
    from mha import MultiHeadAttention

    torch.manual_seed(123)
    module = MultiHeadAttention(3, 4, 6, 0.0, 2)
    with torch.no_grad():
        out = module(torch.tensor([SEED_004, SEED_004]))
    shape(out, (2, 6, 4), "the output for the tutorial's batch (2, 6, 3)")
    order = [name for name, _ in module.named_children() if name in ("Wq", "Wk", "Wv", "Wo")]
    near(out[0], [[0.1184, 0.3120, -0.0847, -0.5774], [0.0178, 0.3221, -0.0763, -0.4225],
                  [-0.0147, 0.3259, -0.0734, -0.3721], [-0.0116, 0.3138, -0.0708, -0.3624],
                  [-0.0117, 0.2973, -0.0698, -0.3543], [-0.0132, 0.2990, -0.0689, -0.3490]],
         "the six rows of the output (tokens 'Your' to 'step')",
         f"your layers were created in the order {order}; the tutorial's numbers need Wq, Wk, Wv, then Wo (the seed's "
         "draws go to the layers in the order they are made)" if order != ["Wq", "Wk", "Wv", "Wo"] else
         "row 0 attends only to itself: if it alone is right, check the scaling (sqrt(head_dim)) and the mask")
    near(out[1], out[0].tolist(), "the second copy of the batch against the first", "each sequence of the batch is "
         "attended to alone: the two copies give the same output", tol=1e-6)
    show(out)


@check("mha", "the fused module equals the stacked one given the same per-head weights, Wo = identity and a zero "
       "bias", "MultiHeadAttention StackedMultiHeadAttention", cell="check-fused-equals-stacked")
def _():
    import torch
    from mha import MultiHeadAttention, StackedMultiHeadAttention

    torch.manual_seed(1)
    d_in, head_dim, num_heads, t = 5, 3, 4, 7
    stacked = StackedMultiHeadAttention(d_in, head_dim, t, 0.0, num_heads)  # num_heads heads of width head_dim
    fused = MultiHeadAttention(d_in, num_heads * head_dim, t, 0.0, num_heads)  # total width num_heads * head_dim
    with torch.no_grad():
        for name in ("Wq", "Wk", "Wv"):
            rows = [getattr(head, name).weight for head in stacked.heads]  # each (head_dim, d_in)
            getattr(fused, name).weight.copy_(torch.cat(rows, dim=0))  # (num_heads * head_dim, d_in)
        fused.Wo.weight.copy_(torch.eye(num_heads * head_dim))
        fused.Wo.bias.zero_()
        x = torch.randn(2, t, d_in)
        a, b = stacked(x), fused(x)
    shape(a, (2, t, num_heads * head_dim), "the stacked output for x (2, 7, 5), 4 heads of width 3")
    near(b, a.tolist(), "the fused output against the stacked one", "with the same per-head weights and Wo = I the "
         "two agree: head h of the fused module is rows h*head_dim:(h+1)*head_dim of Wq, Wk, Wv", tol=1e-5)
    show("largest difference:", (a - b).abs().max().item())


@check("mha", "all three modules are causal and follow .to('meta'); num_heads must divide d_out",
       "CausalAttention StackedMultiHeadAttention MultiHeadAttention", cell="check-causality")
def _():
    import torch
    from mha import CausalAttention, MultiHeadAttention, StackedMultiHeadAttention

    torch.manual_seed(0)
    x = torch.randn(2, 6, 3)
    changed = x.clone()
    changed[:, 4:] = torch.randn(2, 2, 3)  # tokens 4 and 5 only
    modules = {"CausalAttention": CausalAttention(3, 4, 6),
               "StackedMultiHeadAttention": StackedMultiHeadAttention(3, 2, 6, 0.0, 2),
               "MultiHeadAttention": MultiHeadAttention(3, 4, 6, 0.0, 2)}
    with torch.no_grad():
        for name, module in modules.items():
            before, after = module(x), module(changed)
            holds(torch.allclose(before[:, :4], after[:, :4], atol=1e-6),
                  f"{name} is not causal: changing tokens 4 and 5 changed the outputs at positions 0..3",
                  "position i may only attend to positions j <= i (the mask: True = may attend)", name)
            holds(not torch.allclose(before[:, 4:], after[:, 4:]),
                  f"{name}: the outputs at positions 4 and 5 did not change with their own tokens",
                  "position i attends to itself too: j <= i, the diagonal included", name)
    raises_value_error(lambda: MultiHeadAttention(3, 10, 6, 0.0, 3), "MultiHeadAttention(3, 10, 6, 0.0, 3)",
                       "3 heads do not divide d_out = 10")
    meta_hint = "is the mask a buffer? nothing may be created on a fixed device"
    for name, module in modules.items():
        module.to("meta")
        out = hinted(lambda: module(torch.randn(2, 5, 3, device="meta")), f"{name} after .to('meta'): {meta_hint}",
                     name, about="device")
        holds(out.device.type == "meta", f"{name} should run on the meta device after .to('meta'), its output "
              f"is on {out.device}", meta_hint, name)
