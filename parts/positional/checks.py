"""The public checks of the positional encoding (positional.py), written once: the release writes them into the
shipped selfcheck.py, which runs them with its helpers in scope (`check`, `near`, `shape`, `holds`, `hinted`,
`raises_value_error`, `Failed`; the shared inputs `SEED_004`, `MASK`, `MASK_LEGEND`: autograder/selfcheck.py).
"""


@check("positional", "sinusoidal_encoding(4, 8): position 0 = (0, 1, 0, 1, ...), PE[1, :2] = (sin 1, cos 1); "
       "an odd d_model raises ValueError",
       "sinusoidal_encoding")
def _():
    from positional import sinusoidal_encoding

    pe = sinusoidal_encoding(4, 8)
    shape(pe, (4, 8), "sinusoidal_encoding(4, 8)")
    near(pe[:1], [[0.0, 1.0] * 4], "position 0 (PE[0])", "sines in the even columns, cosines in the odd ones",
         tol=1e-5)
    near(pe[1:2, :2], [[math.sin(1.0), math.cos(1.0)]], "PE[1, 0], PE[1, 1]",
         "PE[1, 0] should be sin(1) = 0.8415 and PE[1, 1] cos(1) = 0.5403")
    raises_value_error(lambda: sinusoidal_encoding(4, 5), "sinusoidal_encoding(4, 5)", "d_model must be even")


@check("positional", "PositionalEncoding(16, max_len=50): a buffer `pe` of (50, 16), forward(x) = x + pe[:T], "
       "then dropout; it follows .to('meta')",
       "PositionalEncoding")
def _():
    import torch
    from positional import PositionalEncoding, sinusoidal_encoding

    layer = PositionalEncoding(16, max_len=50)
    buffers = dict(layer.named_buffers())
    holds("pe" in buffers, "PositionalEncoding(16, max_len=50) has no buffer named pe",
          "keep the table as a buffer named pe (in the state_dict, not a parameter)")
    shape(buffers["pe"], (50, 16), "the buffer pe", "(max_len, d_model) = (50, 16)")
    holds(len(list(layer.parameters())) == 0, "PositionalEncoding has trainable parameters",
          "the table is fixed: it should not be a trainable parameter")
    x = torch.randn(2, 7, 16)
    near(hinted(lambda: layer(x), "forward(x) should be x + pe[:T], the table's first T = 7 rows"),
         (x + sinusoidal_encoding(7, 16)).tolist(), "forward(x) for x (2, 7, 16)", "forward(x) should be x + pe[:T]",
         tol=1e-6)
    dropped = PositionalEncoding(16, max_len=50, dropout=1.0).train()(x)
    holds(torch.equal(dropped, torch.zeros_like(x)), "PositionalEncoding(16, max_len=50, dropout=1.0) in training "
          "mode should zero everything", "apply dropout after the addition")
    moved = PositionalEncoding(16, max_len=50).to("meta")
    holds(moved(x.to("meta")).device.type == "meta", "PositionalEncoding should follow .to('meta')",
          "keep the table as a buffer: it moves with .to(device)")
