"""Self-check: run the public checks on your own code.

    python selfcheck.py            (in the folder with your five modules)
    python selfcheck.py PATH       (or point it at that folder)

It checks the tutorials' worked examples, the shapes, and the causal mask,
prints what passed and what to look at, and exits 1 when a check fails.
These are the public checks only: the course's hidden graders check much
more (random inputs, masking, dtypes, devices, speed), so passing here is a
good start, not a grade.
"""
import math
import os
import sys
import traceback

CHECKS = []


def check(module, title):
    def register(fn):
        CHECKS.append((module, title, fn))
        return fn
    return register


def near(got, expected, tol=1e-4):
    import torch

    expected = torch.tensor(expected, dtype=torch.float64)
    if not isinstance(got, torch.Tensor):
        raise AssertionError(f"expected a tensor, got {type(got).__name__}")
    if tuple(got.shape) != tuple(expected.shape):
        raise AssertionError(f"expected shape {tuple(expected.shape)}, got {tuple(got.shape)}")
    if not torch.allclose(got.detach().double().cpu(), expected, atol=tol, rtol=0):
        want = [round(v, 4) for v in expected.flatten().tolist()]
        raise AssertionError(f"expected {want}, got {[round(v, 4) for v in got.detach().flatten().tolist()]}")


def shape(got, expected):
    if tuple(getattr(got, "shape", ())) != tuple(expected):
        raise AssertionError(f"expected shape {tuple(expected)}, got {tuple(getattr(got, 'shape', ()))}")


SEED_004 = [[0.43, 0.15, 0.89], [0.55, 0.87, 0.66], [0.57, 0.85, 0.64],
            [0.22, 0.58, 0.33], [0.77, 0.25, 0.10], [0.05, 0.80, 0.55]]


@check("attention", "tutorial 001: b1 = (0.33, 0.67), b2 = (0.50, 0.50)")
def _():
    import torch
    from attention import scaled_dot_product_attention

    q, eye = torch.tensor([[1.0, 2.0], [1.0, 1.0]]), torch.eye(2)
    out, weights = scaled_dot_product_attention(q, eye, eye)
    b1 = 1 / (1 + math.exp(-1 / math.sqrt(2)))
    near(out, [[1 - b1, b1], [0.5, 0.5]])


@check("attention", "shapes: output (..., L, d_v), weights (..., L, S); rows sum to 1")
def _():
    import torch
    from attention import scaled_dot_product_attention

    q, k, v = torch.randn(2, 3, 5, 4), torch.randn(2, 3, 7, 4), torch.randn(2, 3, 7, 6)
    out, weights = scaled_dot_product_attention(q, k, v)
    shape(out, (2, 3, 5, 6))
    shape(weights, (2, 3, 5, 7))
    near(weights.sum(-1), [[[1.0] * 5] * 3] * 2, tol=1e-5)


@check("heads", "tutorial 001: q1 = (1, 1, 0, 1) splits into (1, 1) and (0, 1)")
def _():
    import torch
    from heads import split_heads

    near(split_heads(torch.tensor([[[1.0, 1.0, 0.0, 1.0]]]), 2), [[[[1.0, 1.0]], [[0.0, 1.0]]]])


@check("heads", "shapes: split (B, T, d) -> (B, H, T, d/H); merge undoes split")
def _():
    import torch
    from heads import merge_heads, split_heads

    x = torch.randn(2, 5, 12)
    heads = split_heads(x, 3)
    shape(heads, (2, 3, 5, 4))
    near(merge_heads(heads), x.tolist(), tol=1e-6)


@check("masks", "causal_mask(4): bool, lower triangle with the diagonal (True = may attend)")
def _():
    import torch
    from masks import causal_mask

    mask = causal_mask(4)
    if mask.dtype != torch.bool:
        raise AssertionError(f"expected a bool tensor, got {mask.dtype}")
    expected = [[j <= i for j in range(4)] for i in range(4)]
    if mask.tolist() != expected:
        raise AssertionError(f"expected {expected}, got {mask.tolist()}")


@check("mha", "tutorial 004: fused MultiHeadAttention(3, 4, 6, 0.0, 2) after torch.manual_seed(123)")
def _():
    import torch
    from mha import MultiHeadAttention

    torch.manual_seed(123)
    module = MultiHeadAttention(3, 4, 6, 0.0, 2)
    with torch.no_grad():
        out = module(torch.tensor([SEED_004, SEED_004]))
    shape(out, (2, 6, 4))
    near(out[0, [0, -1]], [[0.1184, 0.3120, -0.0847, -0.5774], [-0.0132, 0.2990, -0.0689, -0.3490]])


@check("mha", "tutorial 004: stacked heads with W = torch.rand(3, 2) after torch.manual_seed(123), all six rows")
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
    shape(out, (2, 6, 4))
    near(out[0], [[0.1855, 0.8812, 1.3211, 0.8098], [0.3116, 0.9549, 1.6063, 1.1493],  # all six rows: row 0
                  [0.3395, 0.9652, 1.6530, 1.2084], [0.3129, 0.8747, 1.5012, 1.0955],  # alone attends only to
                  [0.2865, 0.7897, 1.4100, 1.0398], [0.2990, 0.8040, 1.4025, 1.0361]])  # itself: no scaling shows


@check("positional", "sinusoidal_encoding(4, 8): position 0 = (0, 1, 0, 1, ...), PE[1, :2] = (sin 1, cos 1)")
def _():
    from positional import sinusoidal_encoding

    pe = sinusoidal_encoding(4, 8)
    shape(pe, (4, 8))
    near(pe[0], [0.0, 1.0] * 4, tol=1e-5)
    near(pe[1, :2], [math.sin(1.0), math.cos(1.0)])


def main(argv):
    folder = os.path.abspath(argv[1]) if len(argv) > 1 else os.getcwd()
    sys.path.insert(0, folder)
    try:
        import torch  # noqa: F401
    except ImportError:
        print("PyTorch is not installed: pip install torch")
        return 2
    failed = 0
    for module, title, fn in CHECKS:
        try:
            fn()
            print(f"  ok    {module:<10} {title}")
        except Exception as exc:  # a self-check reports every failure and goes on
            failed += 1
            frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename.startswith(folder)]
            where = f" ({os.path.basename(frames[-1].filename)}, line {frames[-1].lineno})" if frames else ""
            reason = "not implemented yet" if isinstance(exc, NotImplementedError) else f"{type(exc).__name__}: {exc}"
            print(f"  FAIL  {module:<10} {title}\n        {reason}{where}")
    print(f"\n{len(CHECKS) - failed} of {len(CHECKS)} public checks passed."
          + ("" if failed else " The hidden graders check much more: random inputs, masking, dtypes, devices, speed."))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
