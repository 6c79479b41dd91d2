"""The public checks of the positional encoding (positional.py), written once: the release writes them into the
shipped selfcheck.py, which runs them with its helpers in scope (`check`, `near`, `shape`, `holds`, `hinted`,
`raises_value_error`, `Failed`, `show`; the shared inputs `SEED_004`, `MASK`, `MASK_LEGEND`: autograder/selfcheck.py),
and each into the check cell of 05_positional.ipynb that its `cell=` names, which runs it at once.
"""


@check("positional", "sinusoidal_encoding(10, 8): position 0 = (0, 1, 0, 1, ...), PE[1, :2] = (sin 1, cos 1), the "
       "whole table", "sinusoidal_encoding", cell="check-values")
def _():
    from positional import sinusoidal_encoding

    pe = sinusoidal_encoding(10, 8)
    shape(pe, (10, 8), "sinusoidal_encoding(10, 8)")
    near(pe[:1], [[0.0, 1.0] * 4], "position 0 (PE[0])", "sines in the even columns, cosines in the odd ones",
         tol=1e-5)
    near(pe[1:2, :2], [[math.sin(1.0), math.cos(1.0)]], "PE[1, 0], PE[1, 1]",
         "PE[1, 0] should be sin(1) = 0.8415 and PE[1, 1] cos(1) = 0.5403")
    near(pe[1:2, 2:4], [[math.sin(0.1), math.cos(0.1)]], "PE[1, 2], PE[1, 3]",
         "pair i = 1 turns at 1 / 10000^(2/8) = 0.1 per position: sin(0.1) = 0.0998, cos(0.1) = 0.9950")
    near(pe, [[math.sin(p / 10000 ** (2 * (c // 2) / 8)) if c % 2 == 0 else math.cos(p / 10000 ** (2 * (c // 2) / 8))
               for c in range(8)] for p in range(10)], "the table sinusoidal_encoding(10, 8)",
         "PE[p, 2i] = sin(p / 10000^(2i/d_model)), PE[p, 2i+1] = cos(p / 10000^(2i/d_model)), interleaved", tol=1e-5)
    for p in range(3):
        show(f"PE[{p}] =", " ".join(f"{v:7.4f}" for v in pe[p].tolist()))


@check("positional", "sinusoidal_encoding(T, d_model): shape (T, d_model) in torch's default dtype, values in "
       "[-1, 1]; an odd d_model raises ValueError", "sinusoidal_encoding", cell="check-shape-dtype-errors")
def _():
    import torch
    from positional import sinusoidal_encoding

    for seq_len, d_model in ((1, 2), (7, 10), (50, 64)):
        pe = sinusoidal_encoding(seq_len, d_model)
        shape(pe, (seq_len, d_model), f"sinusoidal_encoding({seq_len}, {d_model})")
        holds(pe.dtype == torch.get_default_dtype(), f"sinusoidal_encoding({seq_len}, {d_model}) should be in torch's "
              f"default dtype {torch.get_default_dtype()}, got {pe.dtype}")
        holds(pe.abs().max() <= 1.0 + 1e-6, f"sinusoidal_encoding({seq_len}, {d_model}) has values outside [-1, 1]",
              "every entry is a sine or a cosine")
    raises_value_error(lambda: sinusoidal_encoding(4, 5), "sinusoidal_encoding(4, 5)", "d_model must be even")


@check("positional", "PositionalEncoding(16, max_len=50): a buffer `pe` of (50, 16), forward(x) = x + pe[:T], "
       "then dropout; it follows .to('meta')",
       "PositionalEncoding", cell="check-module")
def _():
    import torch
    from positional import PositionalEncoding, sinusoidal_encoding

    layer = PositionalEncoding(16, max_len=50)
    buffers = dict(layer.named_buffers())
    holds("pe" in buffers, "PositionalEncoding(16, max_len=50) has no buffer named pe",
          "keep the table as a buffer named pe (in the state_dict, not a parameter)")
    shape(buffers["pe"], (50, 16), "the buffer pe", "(max_len, d_model) = (50, 16)")
    near(buffers["pe"], sinusoidal_encoding(50, 16).tolist(), "the buffer pe against sinusoidal_encoding(50, 16)",
         "the buffer holds the table: sinusoidal_encoding(max_len, d_model)", tol=1e-6)
    holds(len(list(layer.parameters())) == 0, "PositionalEncoding has trainable parameters",
          "the table is fixed: it should not be a trainable parameter")
    holds("pe" in layer.state_dict(), "the buffer pe is not in the state_dict", "keep it a persistent buffer "
          "(the default): it is saved with the module")
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
