"""Self-check: run the public checks on your own code.

    python selfcheck.py            (in the folder with your five modules)
    python selfcheck.py PATH       (or point it at that folder)

It runs what the notebooks' self-check cells run, on your .py files: the
tutorials' worked examples, the shapes, attention with a mask and with a
dropout module, the causal mask, causality, float64 and the meta device,
the contract's ValueErrors, and the positional table and its buffer. It prints
what passed and, for a failure, what was expected, what came back and the
notebook's hint; it exits 1 when a check fails. A failure names the line of
your code to look at: the line that raised, or, when your code ran but gave
a wrong result, the function or class checked. Masks are drawn as
✓ (may attend) and · (blocked). These are the public checks only: the
course's hidden graders check much more (random inputs, dtypes, devices,
speed), so passing here is a good start, not a grade.

It reads the .py files. A part whose .py file is still the template (or is
not there) while its notebook in the folder holds other code is worked in
the notebook: its checks are not run here, and the self-check says to run
that notebook's check cells, which run the same checks.
"""
import inspect
import math
import os
import re
import sys
import traceback

POINTS = {"attention": 23, "heads": 15, "masks": 8, "mha": 40, "positional": 14}  # written by the kit's release step

CHECKS = []


def check(module, title, subject, cell=None):
    """Register a check of `subject`: the names of `module` it calls, space-separated. `cell`: the grade id of
    the check cell of the module's notebook that runs it too (the release writes the check there)."""
    def register(fn):
        CHECKS.append((module, title, subject, fn))
        return fn
    return register


def show(*values, **options):
    """What a worked example computed, printed by the notebook's check cell (as print(*values, **options)); the
    self-check prints only whether each check passed."""


# BEGIN HELPERS: the check cells of the notebooks hold these too (the kit's release step writes them into each
# notebook's check-helpers cell), with a `check` that runs the check at once and a `show` that prints.
MASK_LEGEND = "✓ may attend, · blocked"  # the graders' legend too


class Failed(AssertionError):
    """A public check that failed: what was expected and what came back, and the notebook's hint for it."""

    def __init__(self, message, hint=None, subject=None):
        super().__init__(message)
        self.hint, self.subject = hint, subject  # subject: the one name of the check's subject at fault


def _drawn(mask):
    """A bool mask a line per query row: "✓ · · ·"."""
    return [" ".join("✓" if v else "·" for v in row) for row in mask.tolist()]


def _side_by_side(left_title, left, right_title, right):
    """Two drawn masks (_drawn) side by side under their titles, as indented lines."""
    width = max(len(left_title), *(len(line) for line in left))
    return "\n".join(f"  {a:<{width}}   {b}" for a, b in zip([left_title, *left], [right_title, *right]))


def _rows(values):
    """Rows of numbers for a message: [(0.3302, 0.6698), (0.5000, 0.5000)]."""
    return "[" + ", ".join("(" + ", ".join(f"{v:.4f}" for v in row) + ")" for row in values) + "]"


def near(got, expected, what, hint=None, tol=1e-4):
    """Check that the tensor `got` (`what`: which values these are, as the message says it) is `expected`
    (nested lists); `hint`, the notebook's hint for this check, is printed with a failure."""
    import torch

    expected = torch.tensor(expected, dtype=torch.float64)
    if not isinstance(got, torch.Tensor):
        raise Failed(f"{what}: expected a tensor, got {type(got).__name__}")
    if tuple(got.shape) != tuple(expected.shape):
        raise Failed(f"{what}: expected shape {tuple(expected.shape)}, got {tuple(got.shape)}", hint)
    got = got.detach().double().cpu()
    if torch.allclose(got, expected, atol=tol, rtol=0):
        return
    if expected.numel() <= 24:  # up to six rows of four: the rows, as the reports write them
        want, have = (t.reshape(-1, t.shape[-1] if t.dim() else 1).tolist() for t in (expected, got))
        raise Failed(f"{what}: expected {_rows(want)}, got {_rows(have)}", hint)
    wrong = ~torch.isclose(got, expected, atol=tol, rtol=0)
    first = [int(i) for i in wrong.nonzero()[0]]
    raise Failed(f"{what}: expected {expected[tuple(first)].item():.4f} at index {first}, got "
                         f"{got[tuple(first)].item():.4f} ({int(wrong.sum())} of {wrong.numel()} entries differ)", hint)


def shape(got, expected, what, hint=None):
    if tuple(getattr(got, "shape", ())) != tuple(expected):
        raise Failed(f"{what}: expected shape {tuple(expected)}, got {tuple(getattr(got, 'shape', ()))}",
                             hint)


def holds(condition, message, hint=None, subject=None):
    if not condition:
        raise Failed(message, hint, subject)


def raises_value_error(call, what, why):
    """`call()` must raise ValueError (`why`: the contract's reason)."""
    try:
        call()
    except ValueError:
        return
    raise Failed(f"{what} should raise ValueError: {why}")


def hinted(call, hint, subject=None, about=""):
    """`call()`, the student's code; when it raises (an error whose message holds `about`: the evidence that the
    hint is its cause), that error with the notebook's hint for this check, which would otherwise never print
    (the error's traceback is kept: the line of their code that raised is named)."""
    try:
        return call()
    except NotImplementedError:
        raise
    except Exception as exc:  # whatever the student's code raises: the check's hint goes with it
        if about not in str(exc):
            raise
        raise Failed(f"{type(exc).__name__}: {exc}", hint, subject).with_traceback(exc.__traceback__) from None


SEED_004 = [[0.43, 0.15, 0.89], [0.55, 0.87, 0.66], [0.57, 0.85, 0.64],
            [0.22, 0.58, 0.33], [0.77, 0.25, 0.10], [0.05, 0.80, 0.55]]
# A (4, 4) mask, True = may attend (01_attention.ipynb's): the same for every batch and head.
MASK = [[True, False, True, False], [True, True, False, False], [False, True, True, True], [True, True, True, True]]
# END HELPERS


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
    for name in (getattr(exc, "subject", None) or subject).split():
        try:
            target = getattr(found, name)
            filename, lineno = inspect.getsourcefile(target), inspect.getsourcelines(target)[1]
        except (AttributeError, TypeError, OSError):
            continue
        if os.path.abspath(filename).startswith(folder + os.sep):
            places.append(f"{name} at {_place(filename, lineno)}")
    return "see " + " and ".join(places) if places else ""


def _uses_failed(module, failed):
    """The names `module` (the student's, imported) takes from the student's modules in `failed`: an earlier
    failure there is the one to fix first."""
    found = sys.modules.get(module)
    return sorted(name for name, value in vars(found).items()
                  if not name.startswith("_") and getattr(value, "__module__", None) in failed) if found else []


def _reason(exc, hint=True):
    """What went wrong, and (`hint`) the hint that goes with it, as lines."""
    if isinstance(exc, NotImplementedError):
        return ["not implemented yet"]
    lines = (str(exc) if isinstance(exc, Failed) else f"{type(exc).__name__}: {exc}").splitlines() or [""]
    return lines + ([f"hint: {exc.hint}"] if hint and getattr(exc, "hint", None) else [])


_TEMPLATE_LINE = "# Student template generated"  # the first comment of a .py stub, which its notebook cell lacks


def _notebook(folder, module):
    """The notebook of `module` in `folder` (01_attention.ipynb, or a name that ends with it as uploads are
    named: bea_01_attention.ipynb, 01_attention (1).ipynb), or None."""
    try:
        names = sorted(n for n in os.listdir(folder) if n.endswith(".ipynb") and module in n)
    except OSError:
        return None
    return names[0] if names else None


def _code_cells(path):
    """The sources of a notebook's code cells ([] when it cannot be read)."""
    import json

    try:
        with open(path, encoding="utf-8") as fh:
            cells = json.load(fh).get("cells", [])
        return ["".join(c["source"]) if isinstance(c["source"], list) else c["source"]
                for c in cells if c.get("cell_type") == "code"]
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return []


def _worked_in_notebook(folder, module, errors):
    """The notebook that holds the work of `module`, where its .py file holds none; else None. The .py file
    holds none when it is not there, or when every check of it stopped at its own `raise NotImplementedError()`
    (`errors`: what each of the module's checks raised, None for a pass) while the notebook's code differs from
    it: the template's notebook cell is its .py stub to the letter, less the stub's first comment line."""
    notebook = _notebook(folder, module)
    path = os.path.join(folder, f"{module}.py")
    if notebook is None or not errors or any(e is None for e in errors):
        return None
    if not os.path.exists(path):
        return notebook if all(isinstance(e, ImportError) for e in errors) else None
    own = [f for e in errors for f in traceback.extract_tb(e.__traceback__)[-1:]]
    if not all(isinstance(e, NotImplementedError) for e in errors) or \
            any(os.path.abspath(f.filename) != os.path.abspath(path) for f in own):
        return None
    with open(path, encoding="utf-8", errors="replace") as fh:
        stub = "".join(line for line in fh.readlines() if not line.startswith(_TEMPLATE_LINE))
    return None if stub in _code_cells(os.path.join(folder, notebook)) else notebook


def main(argv):
    folder = os.path.abspath(argv[1]) if len(argv) > 1 else os.getcwd()
    sys.path.insert(0, folder)
    try:
        import torch  # noqa: F401
    except ImportError:
        print("PyTorch is not installed: pip install torch")
        return 2
    failed = set()  # the modules with a failed check
    checks = [c for c in CHECKS if not POINTS or c[0] in POINTS]  # the parts handed out (as released: all five)
    count = 0
    in_notebooks = {}  # module -> the notebook that holds its work, its checks not run here
    for module in dict.fromkeys(m for m, _, _, _ in checks):
        results = []
        for _, title, subject, fn in (c for c in checks if c[0] == module):
            try:
                fn()
                results.append((title, subject, None))
            except Exception as exc:  # a self-check reports every failure and goes on
                results.append((title, subject, exc))
        notebook = _worked_in_notebook(folder, module, [exc for _, _, exc in results])
        if notebook:
            in_notebooks[module] = notebook
            print(f"  --    {module:<10} not checked here: {module}.py holds no work and {notebook} does; run that "
                  "notebook's check cells")
            continue
        for title, subject, exc in results:
            if exc is None:
                print(f"  ok    {module:<10} {title}")
                continue
            count += 1
            where = _where(exc, folder, module, subject)
            inherited = _uses_failed(module, failed - {module})  # then the hint on the module's own code can wait
            lines = _reason(exc, hint=not inherited) + ([f"({where})"] if where else [])
            if inherited:
                lines.append(f"({module}.py uses your {', '.join(inherited)}, which failed its own check above: "
                             "fix that first)")
            failed.add(module)
            print(f"  FAIL  {module:<10} {title}" + "".join(f"\n        {line}" for line in lines))
    ran = sum(1 for m, _, _, _ in checks if m not in in_notebooks)
    run_them = ("run each from the top (Kernel > Restart Kernel and Run All Cells): a check cell that passes "
                "prints a line starting with OK:")
    if not ran:
        print(f"\nYour work is in the notebooks ({', '.join(in_notebooks.values())}), and this self-check reads the "
              f".py files, which hold none. The notebooks' check cells run these same checks: {run_them}.")
    else:
        print(f"\n{ran - count} of {ran} public checks passed."
              + ("" if count else " The hidden graders check much more: random inputs, masking, dtypes, devices, "
                 "speed."))
        if in_notebooks:
            print(f"Not run here: the {len(checks) - ran} checks of {', '.join(in_notebooks)}, whose work is in "
                  f"{', '.join(in_notebooks.values())}. Their check cells run them: {run_them}.")
    if POINTS:
        print("Hidden graders: " + ", ".join(f"{m} {p:g}" for m, p in POINTS.items())
              + f" points, {sum(POINTS.values()):g} in all.")
    return 1 if count else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
