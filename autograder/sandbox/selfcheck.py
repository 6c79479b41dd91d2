"""Self-check: run the public checks on your own code.

    python selfcheck.py            (in the folder with your five modules)
    python selfcheck.py PATH       (or point it at that folder)

It checks the tutorials' worked examples, the shapes, and the causal mask,
prints what passed and what to look at, and exits 1 when a check fails.
A failure names the line of your code to look at: the line that raised, or,
when your code ran but gave a wrong result, the function or class checked.
These are the public checks only: the course's hidden graders check much
more (random inputs, masking, dtypes, devices, speed), so passing here is a
good start, not a grade.
"""
import inspect
import math
import os
import re
import sys
import traceback

POINTS = {"attention": 23, "heads": 15, "masks": 8, "mha": 40, "positional": 14}  # written by the kit's release step

CHECKS = []


def check(module, title, subject):
    """Register a check of `subject`: the names of `module` it calls, space-separated."""
    def register(fn):
        CHECKS.append((module, title, subject, fn))
        return fn
    return register


def near(got, expected, tol=1e-4):
    import torch

    expected = torch.tensor(expected, dtype=torch.float64)
    if not isinstance(got, torch.Tensor):
        raise AssertionError(f"expected a tensor, got {type(got).__name__}")
    if tuple(got.shape) != tuple(expected.shape):
        raise AssertionError(f"expected shape {tuple(expected.shape)}, got {tuple(got.shape)}")
    got = got.detach().double().cpu()
    if not torch.allclose(got, expected, atol=tol, rtol=0):
        if expected.numel() <= 8:
            want = [round(v, 4) for v in expected.flatten().tolist()]
            raise AssertionError(f"expected {want}, got {[round(v, 4) for v in got.flatten().tolist()]}")
        wrong = ~torch.isclose(got, expected, atol=tol, rtol=0)
        first = [int(i) for i in wrong.nonzero()[0]]
        raise AssertionError(f"expected {expected[tuple(first)].item():.4f} at index {first}, got "
                             f"{got[tuple(first)].item():.4f} ({int(wrong.sum())} of {wrong.numel()} entries differ)")


def shape(got, expected):
    if tuple(getattr(got, "shape", ())) != tuple(expected):
        raise AssertionError(f"expected shape {tuple(expected)}, got {tuple(getattr(got, 'shape', ()))}")


SEED_004 = [[0.43, 0.15, 0.89], [0.55, 0.87, 0.66], [0.57, 0.85, 0.64],
            [0.22, 0.58, 0.33], [0.77, 0.25, 0.10], [0.05, 0.80, 0.55]]


@check("attention", "tutorial 001: b1 = (0.33, 0.67), b2 = (0.50, 0.50)", "scaled_dot_product_attention")
def _():
    import torch
    from attention import scaled_dot_product_attention

    q, eye = torch.tensor([[1.0, 2.0], [1.0, 1.0]]), torch.eye(2)
    out, weights = scaled_dot_product_attention(q, eye, eye)
    b1 = 1 / (1 + math.exp(-1 / math.sqrt(2)))
    near(out, [[1 - b1, b1], [0.5, 0.5]])


@check("attention", "shapes: output (..., L, d_v), weights (..., L, S); rows sum to 1", "scaled_dot_product_attention")
def _():
    import torch
    from attention import scaled_dot_product_attention

    q, k, v = torch.randn(2, 3, 5, 4), torch.randn(2, 3, 7, 4), torch.randn(2, 3, 7, 6)
    out, weights = scaled_dot_product_attention(q, k, v)
    shape(out, (2, 3, 5, 6))
    shape(weights, (2, 3, 5, 7))
    near(weights.sum(-1), [[[1.0] * 5] * 3] * 2, tol=1e-5)


@check("heads", "tutorial 001: q1 = (1, 1, 0, 1) splits into (1, 1) and (0, 1)", "split_heads")
def _():
    import torch
    from heads import split_heads

    near(split_heads(torch.tensor([[[1.0, 1.0, 0.0, 1.0]]]), 2), [[[[1.0, 1.0]], [[0.0, 1.0]]]])


@check("heads", "shapes: split (B, T, d_model) -> (B, H, T, head_dim); merge undoes split",
       "split_heads merge_heads")
def _():
    import torch
    from heads import merge_heads, split_heads

    x = torch.randn(2, 5, 12)
    heads = split_heads(x, 3)
    shape(heads, (2, 3, 5, 4))
    near(merge_heads(heads), x.tolist(), tol=1e-6)


@check("masks", "causal_mask(4): bool, lower triangle with the diagonal (True = may attend)", "causal_mask")
def _():
    import torch
    from masks import causal_mask

    mask = causal_mask(4)
    if mask.dtype != torch.bool:
        raise AssertionError(f"expected a bool tensor, got {mask.dtype}")
    expected = [[j <= i for j in range(4)] for i in range(4)]
    if mask.tolist() != expected:
        raise AssertionError(f"expected {expected}, got {mask.tolist()}")


@check("mha", "tutorial 004: fused MultiHeadAttention(3, 4, 6, 0.0, 2) after torch.manual_seed(123)",
       "MultiHeadAttention")
def _():
    import torch
    from mha import MultiHeadAttention

    torch.manual_seed(123)
    module = MultiHeadAttention(3, 4, 6, 0.0, 2)
    with torch.no_grad():
        out = module(torch.tensor([SEED_004, SEED_004]))
    shape(out, (2, 6, 4))
    near(out[0, [0, -1]], [[0.1184, 0.3120, -0.0847, -0.5774], [-0.0132, 0.2990, -0.0689, -0.3490]])


@check("mha", "tutorial 004: stacked heads with W = torch.rand(3, 2) after torch.manual_seed(123), all six rows",
       "StackedMultiHeadAttention CausalAttention")
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


@check("positional", "sinusoidal_encoding(4, 8): position 0 = (0, 1, 0, 1, ...), PE[1, :2] = (sin 1, cos 1)",
       "sinusoidal_encoding")
def _():
    from positional import sinusoidal_encoding

    pe = sinusoidal_encoding(4, 8)
    shape(pe, (4, 8))
    near(pe[0], [0.0, 1.0] * 4, tol=1e-5)
    near(pe[1, :2], [math.sin(1.0), math.cos(1.0)])


_NOTEBOOK_MODULE = re.compile(r'"""\w+\.py, taken from (.+?): ')
_CELL = re.compile(r"# --- cell (\d+)\b")


def _place(filename, lineno):
    """"attention.py, line 12"; for a module the grader made of a notebook, "01_attention.ipynb, cell 7,
    line 3" (its lines sit under a `# --- cell N` line, in the cell's own order)."""
    name = os.path.basename(filename)
    try:
        with open(filename, encoding="utf-8") as fh:
            lines = fh.read().splitlines()
    except (OSError, UnicodeDecodeError):
        return f"{name}, line {lineno}"
    notebook = _NOTEBOOK_MODULE.match(lines[0]) if lines else None
    if notebook:
        for row in range(min(lineno, len(lines)) - 1, -1, -1):
            cell = _CELL.match(lines[row])
            if cell and lineno - row - 1 > 0:
                return f"{notebook[1]}, cell {cell[1]}, line {lineno - row - 1}"
    return f"{name}, line {lineno}"


def _where(exc, folder, module, subject):
    """Where in the student's code to look: the deepest line of their code that the error passed through;
    else (their code ran, but the result is wrong) the function or class checked."""
    own = os.path.abspath(__file__)
    frames = [f for f in traceback.extract_tb(exc.__traceback__)
              if os.path.abspath(f.filename).startswith(folder + os.sep) and os.path.abspath(f.filename) != own]
    if frames:
        line = f": {frames[-1].line.strip()}" if frames[-1].line else ""
        return f"at {_place(frames[-1].filename, frames[-1].lineno)}{line}"
    found, places = sys.modules.get(module), []
    for name in subject.split():
        try:
            target = getattr(found, name)
            filename, lineno = inspect.getsourcefile(target), inspect.getsourcelines(target)[1]
        except (AttributeError, TypeError, OSError):
            continue
        if os.path.abspath(filename).startswith(folder + os.sep):
            places.append(f"{name} at {_place(filename, lineno)}")
    return "see " + " and ".join(places) if places else ""


def main(argv):
    folder = os.path.abspath(argv[1]) if len(argv) > 1 else os.getcwd()
    sys.path.insert(0, folder)
    try:
        import torch  # noqa: F401
    except ImportError:
        print("PyTorch is not installed: pip install torch")
        return 2
    failed = 0
    for module, title, subject, fn in CHECKS:
        try:
            fn()
            print(f"  ok    {module:<10} {title}")
        except Exception as exc:  # a self-check reports every failure and goes on
            failed += 1
            where = _where(exc, folder, module, subject)
            reason = "not implemented yet" if isinstance(exc, NotImplementedError) else f"{type(exc).__name__}: {exc}"
            print(f"  FAIL  {module:<10} {title}\n        {reason}" + (f"\n        ({where})" if where else ""))
    print(f"\n{len(CHECKS) - failed} of {len(CHECKS)} public checks passed."
          + ("" if failed else " The hidden graders check much more: random inputs, masking, dtypes, devices, speed."))
    if POINTS:
        print("Hidden graders: " + ", ".join(f"{m} {p:g}" for m, p in POINTS.items())
              + f" points, {sum(POINTS.values()):g} in all.")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
