#!/usr/bin/env python
"""Check every corpus case standalone (a developer tool, not a pytest test).

    python tests/corpus/validate.py            # every case, plus the reference and examples/
    python tests/corpus/validate.py -v         # also print every failing check's message
    python tests/corpus/validate.py --only mha-fused-sdpa --only masks-no-diagonal
    python tests/corpus/validate.py --json out.json

For each case in submissions.toml it materializes the submission into a
temporary folder and, in a subprocess with that folder first on sys.path,
imports the five modules by their plain names and runs a battery of checks
against the reference (solutions/, loaded from its files under other names):
random inputs, the worked examples of the contract, dtypes, the meta device
(torch.device("meta"): a CPU-only machine's stand-in for "any device"),
structure (named_parameters, named_buffers, ValueError) and the number of
matrix products as num_heads grows (counted with a TorchDispatchMode).

It does not use the kit's grading engine: it is an independent check that

* every bug fails at least one check of its own module and none of the others,
* every alternative passes every check (values within 1e-5 of the reference,
  same parameter and buffer names, works on meta),
* the reference passes every check, examples/einsum-student passes every check
  and examples/buggy-student fails exactly in the modules its README lists.

Checks marked advisory are reported but decide nothing: they show where a
grader would be stricter than the contract (float16 with -1e9, dropout RNG).

Exit status 0 when every row is as expected, 1 otherwise.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
SOLUTIONS = REPO / "solutions"
EXAMPLES = REPO / "examples"


def _load_corpus_package():
    """Import tests/corpus/__init__.py by path (works whether or not tests/ is a package)."""
    spec = importlib.util.spec_from_file_location("_corpus_pkg", HERE / "__init__.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look the module up while building
    spec.loader.exec_module(mod)
    return mod


# Expected outcome of the example submissions: the modules where they must lose points.
EXAMPLE_EXPECTATIONS = {
    "einsum-student": set(),
    "buggy-student": {"attention", "masks", "mha", "positional"},
}


# ===========================================================================
# Child side: runs inside the subprocess, with the submission on sys.path.
# ===========================================================================

def _child_main(cand_dir: str, ref_dir: str) -> None:
    import math
    import traceback
    import warnings
    from collections import Counter

    import torch
    from torch import nn
    from torch.utils._python_dispatch import TorchDispatchMode

    warnings.simplefilter("ignore")
    torch.set_num_threads(1)
    MODULES = ("attention", "heads", "masks", "mha", "positional")

    sys.path.insert(0, cand_dir)
    cands, refs, import_errors = {}, {}, {}
    for name in MODULES:
        spec = importlib.util.spec_from_file_location(f"_ref_{name}", Path(ref_dir) / f"{name}.py")
        ref = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(ref)
        refs[name] = ref
    for name in MODULES:
        try:
            cands[name] = __import__(name)
        except BaseException as exc:  # noqa: BLE001 - a submission may raise anything
            import_errors[name] = f"import failed: {type(exc).__name__}: {exc}"

    CHECKS: dict[str, list] = {m: [] for m in MODULES}

    def check(module, name, advisory=False):
        def deco(fn):
            CHECKS[module].append((name, fn, advisory))
            return fn
        return deco

    # ---------------------------------------------------------------- helpers
    def cmp(got, exp, what="output", atol=1e-5, rtol=1e-5):
        if not isinstance(got, torch.Tensor):
            return f"{what}: not a tensor ({type(got).__name__})"
        if got.shape != exp.shape:
            return f"{what}: shape {tuple(got.shape)} != {tuple(exp.shape)}"
        if got.dtype != exp.dtype:
            return f"{what}: dtype {got.dtype} != {exp.dtype}"
        if got.device != exp.device:
            return f"{what}: device {got.device} != {exp.device}"
        g, e = got.detach(), exp.detach()
        if g.device.type == "meta":
            return None
        if not torch.allclose(g, e, atol=atol, rtol=rtol):
            diff = (g.double() - e.double()).abs()
            if torch.isnan(diff).any():
                return f"{what}: values differ (NaN)"
            return f"{what}: values differ (max abs diff {diff.max().item():.3g})"
        return None

    def first(*msgs):
        for m in msgs:
            if m:
                return m
        return None

    def pair(result, what=("output", "weights")):
        if not isinstance(result, (tuple, list)) or len(result) != 2:
            return None, f"returned {type(result).__name__}, not a pair (output, weights)"
        return result, None

    def expect_valueerror(fn):
        try:
            fn()
        except ValueError:
            return None
        except Exception as exc:  # noqa: BLE001
            return f"raised {type(exc).__name__} instead of ValueError"
        return "no ValueError raised"

    def randn(*shape, seed=0, dtype=torch.float32):
        g = torch.Generator().manual_seed(seed)
        return torch.randn(*shape, generator=g, dtype=torch.float64).to(dtype)

    def rand_mask(L, S, seed=0):
        g = torch.Generator().manual_seed(seed)
        m = torch.rand(L, S, generator=g) > 0.5
        m[:, 0] = True  # no row all False
        return m

    def on_device(fn_cand, expect_shape, device_type="meta"):
        y = fn_cand()
        if not isinstance(y, torch.Tensor):
            return f"returned {type(y).__name__}"
        if y.device.type != device_type:
            return f"output on {y.device}, expected {device_type}"
        if tuple(y.shape) != tuple(expect_shape):
            return f"shape {tuple(y.shape)} != {tuple(expect_shape)}"
        return None

    def same_structure(cm, rm):
        cp = [(n, tuple(p.shape)) for n, p in cm.named_parameters()]
        rp = [(n, tuple(p.shape)) for n, p in rm.named_parameters()]
        if cp != rp:
            return f"named_parameters {cp} != reference {rp}"
        cb = sorted(n for n, _ in cm.named_buffers())
        rb = sorted(n for n, _ in rm.named_buffers())
        if cb != rb:
            return f"buffers {cb} != reference {rb}"
        return None

    def build_pair(cls_name, *args, seed=0, **kw):
        torch.manual_seed(seed)
        cm = getattr(cands["mha"], cls_name)(*args, **kw)
        torch.manual_seed(seed)
        rm = getattr(refs["mha"], cls_name)(*args, **kw)
        return cm, rm

    class FixedScale(nn.Module):
        """A deterministic stand-in for dropout: multiplies by a fixed (L, S) tensor."""

        def __init__(self, factor):
            super().__init__()
            self.factor = factor

        def forward(self, w):
            return w * self.factor

    class OpCounter(TorchDispatchMode):
        MATMUL = {"mm", "bmm", "addmm", "baddbmm", "matmul", "dot", "mv", "addmv", "addbmm", "einsum"}

        def __init__(self):
            super().__init__()
            self.matmuls = 0
            self.ops = Counter()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            name = func.overloadpacket.__name__
            self.ops[name] += 1
            if name in self.MATMUL or "scaled_dot_product" in name:
                self.matmuls += 1
            return func(*args, **(kwargs or {}))

    INPUTS_004 = torch.tensor([[0.43, 0.15, 0.89], [0.55, 0.87, 0.66], [0.57, 0.85, 0.64],
                               [0.22, 0.58, 0.33], [0.77, 0.25, 0.10], [0.05, 0.80, 0.55]])
    BATCH_004 = torch.stack([INPUTS_004, INPUTS_004])

    # ------------------------------------------------------------- attention
    def sdpa_vs_ref(args, kwargs=None, atol=1e-5, rtol=1e-5, seed=None, clone_dropout=False):
        kwargs = kwargs or {}
        if seed is not None:
            torch.manual_seed(seed)
        got, err = pair(cands["attention"].scaled_dot_product_attention(*args, **kwargs))
        if err:
            return err
        if seed is not None:
            torch.manual_seed(seed)
        exp = refs["attention"].scaled_dot_product_attention(*args, **kwargs)
        return first(cmp(got[0], exp[0], "output", atol, rtol), cmp(got[1], exp[1], "weights", atol, rtol))

    @check("attention", "worked_001")
    def _():
        q = torch.tensor([[1.0, 2.0], [1.0, 1.0]])
        eye = torch.eye(2)
        got, err = pair(cands["attention"].scaled_dot_product_attention(q, eye, eye))
        if err:
            return err
        exp = torch.tensor([[0.3302, 0.6698], [0.5, 0.5]])
        return first(cmp(got[0], exp, "output", atol=1e-3), cmp(got[1], exp, "weights", atol=1e-3))

    @check("attention", "values_dv_ne_dk")
    def _():
        return sdpa_vs_ref((randn(2, 3, 5, 4, seed=1), randn(2, 3, 7, 4, seed=2), randn(2, 3, 7, 6, seed=3)))

    @check("attention", "values_2d")
    def _():
        return sdpa_vs_ref((randn(5, 8, seed=4), randn(6, 8, seed=5), randn(6, 3, seed=6)))

    @check("attention", "mask")
    def _():
        q, k, v = randn(2, 3, 5, 4, seed=1), randn(2, 3, 7, 4, seed=2), randn(2, 3, 7, 6, seed=3)
        return sdpa_vs_ref((q, k, v), {"mask": rand_mask(5, 7)})

    @check("attention", "mask_causal_4d")
    def _():
        q, k, v = randn(2, 3, 6, 4, seed=7), randn(2, 3, 6, 4, seed=8), randn(2, 3, 6, 5, seed=9)
        mask = torch.ones(6, 6, dtype=torch.bool).tril()[None, None]
        return sdpa_vs_ref((q, k, v), {"mask": mask})

    @check("attention", "rows_sum_to_one")
    def _():
        q, k, v = randn(2, 5, 4, seed=1), randn(2, 7, 4, seed=2), randn(2, 7, 6, seed=3)
        got, err = pair(cands["attention"].scaled_dot_product_attention(q, k, v, mask=rand_mask(5, 7)))
        if err:
            return err
        w = got[1]
        if not isinstance(w, torch.Tensor) or w.shape != (2, 5, 7):
            return f"weights shape {getattr(w, 'shape', None)} != (2, 5, 7)"
        return cmp(w.sum(-1), torch.ones(2, 5), "row sums")

    @check("attention", "dropout_module")
    def _():
        q, k, v = randn(2, 5, 4, seed=1), randn(2, 7, 4, seed=2), randn(2, 7, 6, seed=3)
        factor = torch.rand(5, 7, generator=torch.Generator().manual_seed(11)) * 2
        return sdpa_vs_ref((q, k, v), {"dropout": FixedScale(factor)})

    @check("attention", "dropout_p1")
    def _():
        q, k, v = randn(2, 5, 4, seed=1), randn(2, 7, 4, seed=2), randn(2, 7, 6, seed=3)
        return sdpa_vs_ref((q, k, v), {"dropout": nn.Dropout(1.0).train()})

    @check("attention", "inputs_unchanged")
    def _():
        q, k, v = randn(2, 5, 4, seed=1), randn(2, 7, 4, seed=2), randn(2, 7, 6, seed=3)
        mask = rand_mask(5, 7)
        before = [t.clone() for t in (q, k, v, mask)]
        cands["attention"].scaled_dot_product_attention(q, k, v, mask=mask)
        for name, b, a in zip("qkvm", before, (q, k, v, mask)):
            if not torch.equal(a, b):
                return f"input {name} modified in place"
        return None

    @check("attention", "float64")
    def _():
        q, k, v = (randn(2, 5, 4, seed=1, dtype=torch.float64), randn(2, 7, 4, seed=2, dtype=torch.float64),
                   randn(2, 7, 6, seed=3, dtype=torch.float64))
        return sdpa_vs_ref((q, k, v), {"mask": rand_mask(5, 7)}, atol=1e-12, rtol=1e-10)

    @check("attention", "bfloat16_mask")
    def _():
        q, k, v = (randn(2, 5, 4, seed=1, dtype=torch.bfloat16), randn(2, 7, 4, seed=2, dtype=torch.bfloat16),
                   randn(2, 7, 6, seed=3, dtype=torch.bfloat16))
        return sdpa_vs_ref((q, k, v), {"mask": rand_mask(5, 7)}, atol=3e-2, rtol=3e-2)

    @check("attention", "float16")
    def _():
        q, k, v = (randn(2, 5, 4, seed=1, dtype=torch.float16), randn(2, 7, 4, seed=2, dtype=torch.float16),
                   randn(2, 7, 6, seed=3, dtype=torch.float16))
        return sdpa_vs_ref((q, k, v), atol=1e-2, rtol=1e-2)

    @check("attention", "float16_mask", advisory=True)
    def _():
        q, k, v = (randn(2, 5, 4, seed=1, dtype=torch.float16), randn(2, 7, 4, seed=2, dtype=torch.float16),
                   randn(2, 7, 6, seed=3, dtype=torch.float16))
        return sdpa_vs_ref((q, k, v), {"mask": rand_mask(5, 7)}, atol=1e-2, rtol=1e-2)

    @check("attention", "meta")
    def _():
        q = torch.empty(2, 3, 5, 4, device="meta")
        k = torch.empty(2, 3, 7, 4, device="meta")
        v = torch.empty(2, 3, 7, 6, device="meta")
        mask = torch.empty(5, 7, dtype=torch.bool, device="meta")
        got, err = pair(cands["attention"].scaled_dot_product_attention(q, k, v, mask=mask))
        if err:
            return err
        return first(on_device(lambda: got[0], (2, 3, 5, 6)), on_device(lambda: got[1], (2, 3, 5, 7)))

    # ------------------------------------------------------------------ heads
    @check("heads", "split_worked_001")
    def _():
        x = torch.tensor([[[1.0, 1.0, 0.0, 1.0]]])
        return cmp(cands["heads"].split_heads(x, 2), torch.tensor([[[[1.0, 1.0]], [[0.0, 1.0]]]]), "split")

    @check("heads", "split_values")
    def _():
        x = randn(2, 5, 12)
        return cmp(cands["heads"].split_heads(x, 3), refs["heads"].split_heads(x, 3), "split")

    @check("heads", "split_valueerror")
    def _():
        return expect_valueerror(lambda: cands["heads"].split_heads(randn(2, 5, 10), 3))

    @check("heads", "merge_values")
    def _():
        y = randn(2, 3, 5, 4)  # contiguous, as weights @ v returns it
        return cmp(cands["heads"].merge_heads(y), refs["heads"].merge_heads(y), "merge")

    @check("heads", "roundtrip")
    def _():
        x, y = randn(2, 5, 12), randn(2, 4, 5, 3)
        h = cands["heads"]
        return first(cmp(h.merge_heads(h.split_heads(x, 3)), x, "merge(split(x))"),
                     cmp(h.split_heads(h.merge_heads(y), 4), y, "split(merge(y))"))

    @check("heads", "float64")
    def _():
        x = randn(2, 5, 12, dtype=torch.float64)
        return cmp(cands["heads"].split_heads(x, 4), refs["heads"].split_heads(x, 4), "split")

    @check("heads", "meta")
    def _():
        h = cands["heads"]
        return first(on_device(lambda: h.split_heads(torch.empty(2, 5, 12, device="meta"), 3), (2, 3, 5, 4)),
                     on_device(lambda: h.merge_heads(torch.empty(2, 3, 5, 4, device="meta")), (2, 5, 12)))

    # ------------------------------------------------------------------ masks
    @check("masks", "worked_T3")
    def _():
        exp = torch.tensor([[True, False, False], [True, True, False], [True, True, True]])
        return cmp(cands["masks"].causal_mask(3), exp, "mask")

    @check("masks", "values_T1_to_8")
    def _():
        for T in range(1, 9):
            err = cmp(cands["masks"].causal_mask(T), refs["masks"].causal_mask(T), f"mask T={T}")
            if err:
                return err
        return None

    @check("masks", "device_meta")
    def _():
        m = cands["masks"].causal_mask(5, device=torch.device("meta"))
        return first(on_device(lambda: m, (5, 5)), None if m.dtype == torch.bool else f"dtype {m.dtype}")

    @check("masks", "device_str")
    def _():
        return on_device(lambda: cands["masks"].causal_mask(4, "meta"), (4, 4))

    @check("masks", "default_device")
    def _():
        return on_device(lambda: cands["masks"].causal_mask(4), (4, 4), device_type="cpu")

    # -------------------------------------------------------- mha: causal
    @check("mha", "causal_structure")
    def _():
        return first(same_structure(*build_pair("CausalAttention", 5, 4, 8, 0.0)),
                     same_structure(*build_pair("CausalAttention", 5, 4, 8, 0.0, qkv_bias=True)))

    @check("mha", "causal_values")
    def _():
        cm, rm = build_pair("CausalAttention", 5, 4, 8, 0.0, seed=1)
        x = randn(2, 6, 5, seed=2)
        return cmp(cm.eval()(x), rm.eval()(x))

    @check("mha", "causal_values_full_context_bias")
    def _():
        cm, rm = build_pair("CausalAttention", 5, 4, 6, 0.1, qkv_bias=True, seed=3)
        x = randn(3, 6, 5, seed=4)
        return cmp(cm.eval()(x), rm.eval()(x))

    @check("mha", "causal_dropout_p1")
    def _():
        cm, rm = build_pair("CausalAttention", 5, 4, 8, 1.0, seed=1)
        x = randn(2, 6, 5, seed=2)
        return cmp(cm.train()(x), rm.train()(x))

    @check("mha", "causal_float64")
    def _():
        cm, rm = build_pair("CausalAttention", 5, 4, 8, 0.0, seed=1)
        x = randn(2, 6, 5, seed=2, dtype=torch.float64)
        return cmp(cm.double().eval()(x), rm.double().eval()(x), atol=1e-12)

    @check("mha", "causal_meta_ctx")
    def _():
        with torch.device("meta"):
            m = cands["mha"].CausalAttention(5, 4, 8, 0.0)
            return on_device(lambda: m(torch.empty(2, 6, 5)), (2, 6, 4))

    @check("mha", "causal_to_meta")
    def _():
        m = cands["mha"].CausalAttention(5, 4, 8, 0.0).to("meta")
        return on_device(lambda: m(torch.empty(2, 6, 5, device="meta")), (2, 6, 4))

    # ------------------------------------------------------- mha: stacked
    @check("mha", "stacked_structure")
    def _():
        return same_structure(*build_pair("StackedMultiHeadAttention", 5, 3, 8, 0.0, 3))

    @check("mha", "stacked_values")
    def _():
        cm, rm = build_pair("StackedMultiHeadAttention", 5, 3, 8, 0.0, 3, seed=5)
        x = randn(2, 6, 5, seed=6)
        return cmp(cm.eval()(x), rm.eval()(x))

    @check("mha", "stacked_worked_004")
    def _():
        m = cands["mha"].StackedMultiHeadAttention(3, 2, 6, 0.0, 2)
        torch.manual_seed(123)
        with torch.no_grad():
            for head in m.heads:
                for name in ("Wq", "Wk", "Wv"):
                    getattr(head, name).weight.copy_(torch.rand(3, 2).T)
        y = m.eval()(BATCH_004)
        if not isinstance(y, torch.Tensor) or y.shape != (2, 6, 4):
            return f"shape {getattr(y, 'shape', None)} != (2, 6, 4)"
        return cmp(y[0, 0], torch.tensor([0.1855, 0.8812, 1.3211, 0.8098]), "first row", atol=1e-4)

    @check("mha", "stacked_to_meta")
    def _():
        m = cands["mha"].StackedMultiHeadAttention(5, 3, 8, 0.0, 3).to("meta")
        return on_device(lambda: m(torch.empty(2, 6, 5, device="meta")), (2, 6, 9))

    # --------------------------------------------------------- mha: fused
    @check("mha", "fused_structure")
    def _():
        return first(same_structure(*build_pair("MultiHeadAttention", 5, 8, 8, 0.0, 4)),
                     same_structure(*build_pair("MultiHeadAttention", 5, 8, 8, 0.0, 4, qkv_bias=True)))

    @check("mha", "fused_worked_004")
    def _():
        torch.manual_seed(123)
        m = cands["mha"].MultiHeadAttention(3, 4, 6, 0.0, 2)
        y = m.eval()(BATCH_004)
        if not isinstance(y, torch.Tensor) or y.shape != (2, 6, 4):
            return f"shape {getattr(y, 'shape', None)} != (2, 6, 4)"
        return first(cmp(y[0, 0], torch.tensor([0.1184, 0.3120, -0.0847, -0.5774]), "first row", atol=1e-4),
                     cmp(y[1, -1], torch.tensor([-0.0132, 0.2990, -0.0689, -0.3490]), "last row", atol=1e-4))

    @check("mha", "fused_values")
    def _():
        cm, rm = build_pair("MultiHeadAttention", 5, 8, 8, 0.0, 4, seed=7)
        x = randn(2, 6, 5, seed=8)
        return cmp(cm.eval()(x), rm.eval()(x))

    @check("mha", "fused_values_bias_full_context")
    def _():
        cm, rm = build_pair("MultiHeadAttention", 6, 12, 10, 0.1, 3, qkv_bias=True, seed=9)
        x = randn(3, 10, 6, seed=10)
        return cmp(cm.eval()(x), rm.eval()(x))

    @check("mha", "fused_valueerror")
    def _():
        return expect_valueerror(lambda: cands["mha"].MultiHeadAttention(3, 6, 6, 0.0, 4))

    @check("mha", "fused_dropout_p1")
    def _():
        cm, rm = build_pair("MultiHeadAttention", 5, 8, 8, 1.0, 4, seed=7)
        x = randn(2, 6, 5, seed=8)
        return cmp(cm.train()(x), rm.train()(x))

    @check("mha", "fused_dropout_same_seed", advisory=True)
    def _():
        cm, rm = build_pair("MultiHeadAttention", 5, 8, 8, 0.5, 4, seed=7)
        x = randn(2, 6, 5, seed=8)
        torch.manual_seed(99)
        got = cm.train()(x)
        torch.manual_seed(99)
        return cmp(got, rm.train()(x))

    @check("mha", "fused_batched_heads")
    def _():
        counts = {}
        for heads in (1, 4):
            m = cands["mha"].MultiHeadAttention(5, 8, 8, 0.0, heads).eval()
            x = randn(2, 6, 5)
            with torch.no_grad(), OpCounter() as counter:
                m(x)
            counts[heads] = counter.matmuls
        if counts[1] != counts[4]:
            return f"matrix products grow with num_heads: {counts[1]} for 1 head, {counts[4]} for 4"
        return None

    @check("mha", "fused_float64")
    def _():
        cm, rm = build_pair("MultiHeadAttention", 5, 8, 8, 0.0, 4, seed=7)
        x = randn(2, 6, 5, seed=8, dtype=torch.float64)
        return cmp(cm.double().eval()(x), rm.double().eval()(x), atol=1e-12)

    @check("mha", "fused_meta_ctx")
    def _():
        with torch.device("meta"):
            m = cands["mha"].MultiHeadAttention(5, 8, 8, 0.0, 4)
            return on_device(lambda: m(torch.empty(2, 6, 5)), (2, 6, 8))

    @check("mha", "fused_to_meta")
    def _():
        m = cands["mha"].MultiHeadAttention(5, 8, 8, 0.0, 4).to("meta")
        return on_device(lambda: m(torch.empty(2, 6, 5, device="meta")), (2, 6, 8))

    # ------------------------------------------------------------- positional
    @check("positional", "worked")
    def _():
        pe = cands["positional"].sinusoidal_encoding(4, 8)
        if not isinstance(pe, torch.Tensor) or pe.shape != (4, 8):
            return f"shape {getattr(pe, 'shape', None)} != (4, 8)"
        p = torch.arange(4, dtype=torch.float64)
        w = 1 / 10000 ** (2 / 8)
        exp = torch.stack([torch.sin(p), torch.cos(p), torch.sin(p * w), torch.cos(p * w)], dim=1).float()
        return cmp(pe[:, :4].float(), exp, "PE[:, :4]", atol=1e-6)

    @check("positional", "table_small")
    def _():
        return cmp(cands["positional"].sinusoidal_encoding(50, 16),
                   refs["positional"].sinusoidal_encoding(50, 16), "table", atol=1e-6, rtol=0)

    @check("positional", "table_5000x512")
    def _():
        return cmp(cands["positional"].sinusoidal_encoding(5000, 512),
                   refs["positional"].sinusoidal_encoding(5000, 512), "table", atol=1e-5, rtol=0)

    @check("positional", "dtype_follows_default")
    def _():
        old = torch.get_default_dtype()
        try:
            torch.set_default_dtype(torch.float64)
            pe = cands["positional"].sinusoidal_encoding(6, 4)
        finally:
            torch.set_default_dtype(old)
        pe32 = cands["positional"].sinusoidal_encoding(6, 4)
        if pe.dtype != torch.float64 or pe32.dtype != torch.float32:
            return f"dtypes {pe32.dtype} / {pe.dtype} under default float32 / float64"
        return None

    @check("positional", "odd_valueerror")
    def _():
        return expect_valueerror(lambda: cands["positional"].sinusoidal_encoding(10, 7))

    @check("positional", "module_buffer")
    def _():
        m = cands["positional"].PositionalEncoding(16, 100)
        buffers = dict(m.named_buffers())
        if "pe" not in buffers:
            return f"no buffer 'pe' (buffers: {sorted(buffers)})"
        if tuple(buffers["pe"].shape) != (100, 16):
            return f"pe shape {tuple(buffers['pe'].shape)} != (100, 16)"
        if "pe" not in m.state_dict():
            return "pe not in state_dict (non-persistent buffer)"
        return None

    @check("positional", "module_forward")
    def _():
        torch.manual_seed(0)
        cm = cands["positional"].PositionalEncoding(16, 100, 0.1).eval()
        rm = refs["positional"].PositionalEncoding(16, 100, 0.1).eval()
        x = randn(2, 7, 16)
        return cmp(cm(x), rm(x))

    @check("positional", "module_dropout_p1")
    def _():
        cm = cands["positional"].PositionalEncoding(16, 100, 1.0).train()
        rm = refs["positional"].PositionalEncoding(16, 100, 1.0).train()
        x = randn(2, 7, 16)
        return cmp(cm(x), rm(x))

    @check("positional", "module_float64")
    def _():
        cm = cands["positional"].PositionalEncoding(16, 100).double().eval()
        rm = refs["positional"].PositionalEncoding(16, 100).double().eval()
        x = randn(2, 7, 16, dtype=torch.float64)
        return cmp(cm(x), rm(x), atol=1e-12)

    @check("positional", "module_meta_ctx")
    def _():
        with torch.device("meta"):
            m = cands["positional"].PositionalEncoding(16, 100)
            return on_device(lambda: m(torch.empty(2, 7, 16)), (2, 7, 16))

    @check("positional", "module_to_meta")
    def _():
        m = cands["positional"].PositionalEncoding(16, 100).to("meta")
        return on_device(lambda: m(torch.empty(2, 7, 16, device="meta")), (2, 7, 16))

    # ---------------------------------------------------------------- run all
    results = {}
    for module in MODULES:
        results[module] = {}
        for name, fn, advisory in CHECKS[module]:
            key = f"~{name}" if advisory else name
            if module in import_errors:
                results[module][key] = import_errors[module]
                continue
            torch.manual_seed(0)
            try:
                results[module][key] = fn()
            except Exception as exc:  # noqa: BLE001 - the submission's errors are findings
                tb = traceback.extract_tb(exc.__traceback__)
                where = next((f"{Path(f.filename).name}:{f.lineno}" for f in reversed(tb)
                              if Path(f.filename).parent == Path(cand_dir)), "")
                msg = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
                results[module][key] = f"raised {msg[:160]}" + (f" ({where})" if where else "")
    print("@@RESULTS@@" + json.dumps(results))


# ===========================================================================
# Driver side.
# ===========================================================================

def run_checks(folder: Path, timeout: float = 600) -> dict:
    """Run the check battery on a submission folder in a subprocess."""
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONDONTWRITEBYTECODE="1")
    proc = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--child", str(folder), str(SOLUTIONS)],
        capture_output=True, text=True, timeout=timeout, env=env, cwd=str(folder),
    )
    for line in proc.stdout.splitlines():
        if line.startswith("@@RESULTS@@"):
            return json.loads(line[len("@@RESULTS@@"):])
    raise RuntimeError(f"checker crashed on {folder} (rc={proc.returncode}):\n{proc.stderr[-3000:]}")


def _failures(results: dict, module: str | None = None, advisory: bool = False) -> dict[str, str]:
    out = {}
    for mod, checks in results.items():
        if module is not None and mod != module:
            continue
        for name, msg in checks.items():
            if msg is not None and name.startswith("~") == advisory:
                out[f"{mod}.{name.lstrip('~')}"] = msg
    return out


def judge(kind: str, module: str | None, results: dict, expected_modules: set[str] | None = None):
    """Return (ok, summary, details) for one row."""
    hard = _failures(results)
    soft = _failures(results, advisory=True)
    failing_modules = {k.split(".")[0] for k in hard}
    if kind == "bug":
        own = {k: v for k, v in hard.items() if k.split(".")[0] == module}
        leaked = {k: v for k, v in hard.items() if k.split(".")[0] != module}
        ok = bool(own) and not leaked
        names = [k.split(".", 1)[1] for k in own]
        summary = ", ".join(names) if names else "NOT DETECTED"
        if leaked:
            summary += "  | ALSO FAILS ELSEWHERE: " + ", ".join(leaked)
        return ok, summary, {**hard, **{f"~{k}": v for k, v in soft.items()}}
    if kind == "example":
        ok = failing_modules == expected_modules
        summary = "fails in: " + (", ".join(sorted(failing_modules)) or "nothing")
        if not ok:
            summary += f"  | EXPECTED: {', '.join(sorted(expected_modules)) or 'nothing'}"
        return ok, summary, {**hard, **{f"~{k}": v for k, v in soft.items()}}
    # alternative / reference
    ok = not hard
    summary = "all checks pass" if ok else "FAILS: " + ", ".join(hard)
    if soft:
        summary += "  (advisory: " + ", ".join(soft) + ")"
    return ok, summary, {**hard, **{f"~{k}": v for k, v in soft.items()}}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", action="append", default=[], help="check only this case id (repeatable)")
    parser.add_argument("-v", "--verbose", action="store_true", help="print each failing check's message")
    parser.add_argument("--json", metavar="FILE", help="also write the full results as JSON")
    parser.add_argument("--jobs", type=int, default=max(1, (os.cpu_count() or 2)), help="parallel subprocesses")
    parser.add_argument("--no-extras", action="store_true", help="skip the reference and examples/ rows")
    args = parser.parse_args(argv)

    corpus = _load_corpus_package()
    cases = corpus.all_cases()
    if args.only:
        unknown = set(args.only) - {c.id for c in cases}
        if unknown:
            parser.error(f"unknown case ids: {sorted(unknown)}")
        cases = [c for c in cases if c.id in args.only]

    rows = []  # (id, kind, module, folder, expected_modules)
    with tempfile.TemporaryDirectory(prefix="corpus-validate-") as tmp:
        for case in cases:
            folder = corpus.materialize(case, Path(tmp) / case.id, SOLUTIONS)
            rows.append((case.id, case.kind, case.module, folder, None))
        if not args.only and not args.no_extras:
            rows.insert(0, ("reference", "reference", "-", SOLUTIONS, None))
            for name, expected in EXAMPLE_EXPECTATIONS.items():
                folder = EXAMPLES / name
                if folder.is_dir():
                    rows.append((f"examples/{name}", "example", "-", folder, expected))

        with ThreadPoolExecutor(max_workers=args.jobs) as pool:
            all_results = list(pool.map(lambda row: run_checks(row[3]), rows))

    table, problems, dump = [], 0, {}
    for (case_id, kind, module, _folder, expected), results in zip(rows, all_results):
        ok, summary, details = judge(kind, None if module == "-" else module, results, expected)
        problems += not ok
        table.append((case_id, kind, module, "ok" if ok else "PROBLEM", summary, details))
        dump[case_id] = {"kind": kind, "module": module, "ok": ok, "summary": summary, "results": results}

    w_id = max(len(r[0]) for r in table)
    w_kind = max(len(r[1]) for r in table)
    w_mod = max(len(r[2]) for r in table)
    header = f"{'id':<{w_id}}  {'kind':<{w_kind}}  {'module':<{w_mod}}  {'status':<7}  detected-by / result"
    print(header)
    print("-" * len(header))
    for case_id, kind, module, status, summary, details in table:
        print(f"{case_id:<{w_id}}  {kind:<{w_kind}}  {module:<{w_mod}}  {status:<7}  {summary}")
        if args.verbose or status != "ok":
            for name, msg in details.items():
                print(f"{'':<{w_id}}      {name}: {msg}")
    n_bugs = sum(1 for r in table if r[1] == "bug")
    n_alts = sum(1 for r in table if r[1] == "alternative")
    print(f"\n{n_bugs} bugs, {n_alts} alternatives, {len(table)} rows, {problems} problem(s)")
    if args.json:
        Path(args.json).write_text(json.dumps(dump, indent=2))
    return 1 if problems else 0


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--child":
        _child_main(sys.argv[2], sys.argv[3])
    else:
        sys.exit(main())
