"""The public checks of scaled dot-product attention (attention.py), written once: the release writes them into the
shipped selfcheck.py, which runs them with its helpers in scope (`check`, `near`, `shape`, `holds`, `hinted`,
`raises_value_error`, `Failed`, `show`; the shared inputs `SEED_004`, `MASK`, `MASK_LEGEND`: autograder/selfcheck.py),
and each into the check cell of 01_attention.ipynb that its `cell=` names, which runs it at once.
"""


@check("attention", "《Self-Attention详解》: b1 = (0.33, 0.67), b2 = (0.50, 0.50)", "scaled_dot_product_attention",
       cell="check-seed-001")
def _():
    import torch
    from attention import scaled_dot_product_attention

    a = torch.tensor([[1.0, 1.0], [1.0, 0.0]])  # a1, a2
    w_q = torch.tensor([[1.0, 1.0], [0.0, 1.0]])
    q, eye = a @ w_q, torch.eye(2)  # q1 = (1, 2), q2 = (1, 1); K = V = I: k1 = v1 = (1, 0), k2 = v2 = (0, 1)
    show("Q =", q.tolist(), "  scaled scores of q1:", [round(s, 2) for s in (q[0] @ eye.T / math.sqrt(2)).tolist()])
    out, weights = scaled_dot_product_attention(q, eye, eye)
    b1 = 1 / (1 + math.exp(-1 / math.sqrt(2)))
    near(out, [[1 - b1, b1], [0.5, 0.5]], "b1, b2",
         "did you divide the scores by sqrt(d_k) = sqrt(2)? Dividing by d_k gives b1 = (0.38, 0.62), not "
         "dividing at all (0.27, 0.73)")
    near(weights, out.tolist(), "the weights", "with V = I the output equals the weights", tol=1e-6)
    show("b1 =", [round(v, 4) for v in out[0].tolist()], "  b2 =", [round(v, 4) for v in out[1].tolist()])


@check("attention", "shapes: output (..., L, d_v), weights (..., L, S); rows sum to 1; output as "
       "F.scaled_dot_product_attention's", "scaled_dot_product_attention", cell="check-rows-and-mask")
def _():
    import torch
    import torch.nn.functional as F
    from attention import scaled_dot_product_attention

    q, k, v = torch.randn(2, 3, 5, 4), torch.randn(2, 3, 7, 4), torch.randn(2, 3, 7, 6)  # (batch, heads, L or S, d)
    out, weights = scaled_dot_product_attention(q, k, v)
    shape(out, (2, 3, 5, 6), "output for query (2, 3, 5, 4), key (2, 3, 7, 4), value (2, 3, 7, 6)")
    shape(weights, (2, 3, 5, 7), "weights for the same")
    rows_hint = "each row of weights must be positive and sum to 1: softmax over the last dim (the keys)"
    holds((weights >= 0).all(), "the weights have negative entries", rows_hint)
    near(weights.sum(-1), [[[1.0] * 5] * 3] * 2, "the sums of the rows of the weights", rows_hint, tol=1e-5)
    near(out, F.scaled_dot_product_attention(q, k, v).tolist(), "the output, against F.scaled_dot_product_attention",
         "the output should be the softmax of Q K^T / sqrt(d_k), over the keys, times V", tol=1e-5)


@check("attention", f"with a (4, 4) mask: blocked keys get zero weight, rows still sum to 1 ({MASK_LEGEND})",
       "scaled_dot_product_attention", cell="check-rows-and-mask")
def _():
    import torch
    import torch.nn.functional as F
    from attention import scaled_dot_product_attention

    torch.manual_seed(0)
    q, k, v = torch.randn(2, 3, 4, 8), torch.randn(2, 3, 4, 8), torch.randn(2, 3, 4, 8)  # (batch, heads, T, d_k)
    mask = torch.tensor(MASK)  # (L, S)
    out, weights = scaled_dot_product_attention(q, k, v, mask=mask)
    shape(weights, (2, 3, 4, 4), "weights for query (2, 3, 4, 8) with a (4, 4) mask")
    leaked = (weights != 0) & ~mask
    if leaked.any():
        raise Failed(
            "keys where the mask is False must get exactly zero weight; the mask (" + MASK_LEGEND + ") beside "
            "your weights for batch 0, head 0 (✓ not 0, · exactly 0):\n"
            + _side_by_side("mask", _drawn(mask), "your weights", _drawn(weights[0, 0] != 0)),
            "True means 'may attend': check the polarity; and fill the blocked scores with -inf (or "
            "torch.finfo(scores.dtype).min), not with 0: a score of 0 still gets a weight, e^0 = 1")
    near(weights.sum(-1), [[[1.0] * 4] * 3] * 2, "the sums of the rows of the masked weights",
         "masked rows must still sum to 1", tol=1e-5)
    near(out, F.scaled_dot_product_attention(q, k, v, attn_mask=mask).tolist(),
         "output with the mask, against F.scaled_dot_product_attention",
         "with a mask, the output differs from F.scaled_dot_product_attention", tol=1e-5)
    key_hint = "a key mask of shape (S,) should broadcast over all queries"
    _, weights = hinted(lambda: scaled_dot_product_attention(q, k, v, mask=torch.tensor([True, True, True, False])),
                        key_hint)
    holds((weights[..., 3] == 0).all(), "a key mask of shape (S,) = (✓ ✓ ✓ ·) should give key 3 zero weight "
          "for every query", key_hint)


@check("attention", "output = weights @ value (L = 3, S = 5, d_v = 7); the dropout module acts on the weights; float64 "
       "stays float64, inputs untouched, output on the inputs' device (meta)", "scaled_dot_product_attention",
       cell="check-shapes")
def _():
    import torch
    from attention import scaled_dot_product_attention

    class Halve(torch.nn.Module):  # a stand-in for dropout that is easy to check
        def forward(self, weights):
            return weights / 2

    q, k, v = torch.randn(2, 3, 4), torch.randn(2, 5, 4), torch.randn(2, 5, 7)  # L = 3, S = 5, d_k = 4, d_v = 7
    out, weights = scaled_dot_product_attention(q, k, v)
    shape(out, (2, 3, 7), "output for query (2, 3, 4), key (2, 5, 4), value (2, 5, 7)", "(batch, L, d_v) = (2, 3, 7)")
    shape(weights, (2, 3, 5), "weights for the same", "(batch, L, S) = (2, 3, 5)")
    near(out, (weights @ v).tolist(), "the output against weights @ value", "the output should be weights @ value",
         tol=1e-6)
    dropout_hint = "the dropout module should be applied to the weights after the softmax: dropout(weights)"
    out_h, weights_h = hinted(lambda: scaled_dot_product_attention(q, k, v, dropout=Halve()), dropout_hint)
    near(weights_h, (weights / 2).tolist(), "the weights with a dropout module that halves them", dropout_hint,
         tol=1e-6)
    near(out_h, (weights_h @ v).tolist(), "the output with that dropout module",
         "the weights after dropout are the ones that multiply value", tol=1e-6)
    q64, k64, v64 = q.double(), k.double(), v.double()
    saved = [t.clone() for t in (q64, k64, v64)]
    out64, weights64 = scaled_dot_product_attention(q64, k64, v64)
    holds(out64.dtype == weights64.dtype == torch.float64,
          f"float64 inputs should give float64 outputs, got {out64.dtype} and {weights64.dtype}")
    holds(all(torch.equal(t, c) for t, c in zip((q64, k64, v64), saved)), "the inputs were modified in place",
          "compute new tensors (out-of-place operations)")
    out_meta, _ = hinted(lambda: scaled_dot_product_attention(q.to("meta"), k.to("meta"), v.to("meta")),
                         "on meta inputs: the output should live on the inputs' device; create no tensor on a "
                         "fixed device", about="device")
    holds(out_meta.device.type == "meta", f"the output should live on the inputs' device (meta), got {out_meta.device}",
          "create no tensor on a fixed device")
