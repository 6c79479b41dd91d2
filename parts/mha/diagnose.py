"""The known mistakes of the attention modules (mha.py), diagnosed from the student's own weights: their reference
wiring (projections, split, mask, softmax, merge, output projection) is run here with one step changed
(`module_variants`, `module_errors`), and a module's parameters are read for their structure (`structure_cause`,
`init_order`). The attention steps' mistakes are those of scaled_dot_product_attention (parts/attention/
diagnose.py); the machinery (match) is the kit's, autograder/grade/diagnose.py.
"""
from __future__ import annotations

import itertools
import math

import torch
import torch.nn.functional as F

from autograder.grade.diagnose import _error, _same, match  # noqa: F401  (the graders' diagnose.match)
from parts.attention.diagnose import (AFTER_SOFTMAX_NEG_INF, FILL_NEAR_ZERO, FILL_POS_INF, NAN_ROWS,
                                      SCALED_AFTER_SOFTMAX, _attention, _nan_rows)

# -- the attention modules (mha.py) -------------------------------------------------------------------------

def _linear(params, name, x):
    return F.linear(x, params[f"{name}.weight"], params.get(f"{name}.bias"))


def _split(t, H, how):
    B, T, d = t.shape
    hd = d // H
    if how == "no-transpose":
        return t.reshape(B, H, T, hd)
    if how == "strided":
        return t.reshape(B, T, hd, H).permute(0, 3, 1, 2)
    return t.reshape(B, T, H, hd).transpose(1, 2)  # (B, H, T, hd)


def _merge(c, how):
    B, H, T, hd = c.shape
    if how == "no-transpose":
        return c.reshape(B, T, H * hd)
    if how == "interleaved":
        return c.permute(0, 2, 3, 1).reshape(B, T, H * hd)  # (B, T, hd, H): feature c*H + h
    if how == "wrong-axes":
        return c.transpose(2, 3).reshape(B, T, H * hd)
    return c.transpose(1, 2).reshape(B, T, H * hd)  # (B, T, H*hd)


def _causal_mask(T, how, context_length=None, device=None):
    """The causal mask for T tokens (True = may attend), or the mistake `how`; "whole", "rows", "columns": the
    buffer (context_length, context_length) used whole, cut to T on its first axis only ([:T]), on its second only."""
    if how in ("whole", "rows", "columns"):
        buffer = torch.ones(context_length, context_length, dtype=torch.bool, device=device).tril()
        return {"whole": buffer, "rows": buffer[:T], "columns": buffer[:, :T]}[how]
    allowed = torch.ones(T, T, dtype=torch.bool, device=device).tril()  # True = may attend
    return {"none": None, "transposed": allowed.T, "no-diagonal": allowed.tril(-1)}.get(how, allowed)


def _qkv(params, x, prefix, swap_kv):
    q, k, v = (_linear(params, f"{prefix}W{p}", x) for p in "qkv")  # (B, T, d_out)
    return (q, v, k) if swap_kv else (q, k, v)  # swap_kv: the keys from Wv and the values from Wk


def _head(params, x, prefix="", *, mask="causal", context_length=None, swap_kv=False, **att):
    q, k, v = _qkv(params, x, prefix, swap_kv)  # (B, T, d_out)
    return _attention(q, k, v, _causal_mask(x.shape[1], mask, context_length, x.device), **att)[0]  # (B, T, d_out)


def _fused(params, x, H, *, split="transpose", merge="transpose", mask="causal", context_length=None, swap_kv=False,
           no_wo=False, **att):
    """merge="weights": the attention weights (B, H, T, T) merged instead of the context; no_wo: the merged heads
    returned without the output projection Wo (a module without Wo has none either)."""
    q, k, v = (_split(t, H, split) for t in _qkv(params, x, "", swap_kv))  # (B, H, T, hd)
    mask = _causal_mask(x.shape[1], mask, context_length, x.device)
    context, weights = _attention(q, k, v, mask, **att)  # (B, H, T, hd)
    if merge == "weights-view":  # the weights merged into (B, T, d_out) directly, as the context would be
        merged = weights.transpose(1, 2).reshape(*x.shape[:2], H * q.size(-1))
    else:
        merged = _merge(weights, "transpose") if merge == "weights" else _merge(context, merge)  # (B, T, d_out)
    return merged if no_wo or "Wo.weight" not in params else _linear(params, "Wo", merged)


# The attention steps of every module: name -> knobs; "{w}" is the key size's name (head_dim, or d_out for one head)
_ATTENTION_STEPS = (
    ("the causal mask is never applied, so every position attends to the later ones", {"mask": "none"}),
    ("your causal mask is applied on the wrong axes (transposed, the upper triangle): query i attends to the "
     "keys j >= i, the future, instead of j <= i; rows are queries, columns are keys", {"mask": "transposed"}),
    ("your causal mask is inverted: you fill the positions the mask allows with -inf (masked_fill(mask, -inf) on "
     "a mask whose True means 'may attend'), so query i attends only to the keys j > i", {"blocked_when": True}),
    ("your causal mask blocks the diagonal: a position must attend to itself", {"mask": "no-diagonal"}),
    ("the causal mask applied after the softmax (weights zeroed, not renormalised): mask the scores before "
     "the softmax", {"mask_after": True}),
    ("softmax without the 1/sqrt({w}) scaling", {"scale": 1.0}),
    ("scores divided by {w} instead of sqrt({w})", {"scale": "w"}),
    ("softmax over the queries (dim=-2) instead of over the keys (dim=-1)", {"dim": -2}),
    (FILL_NEAR_ZERO, {"fill": 0.0}),
    (FILL_POS_INF, {"fill": float("inf")}),
    (AFTER_SOFTMAX_NEG_INF.replace("the mask", "the causal mask", 1), {"mask_after": float("-inf")}),
    (SCALED_AFTER_SOFTMAX, {"scale_after": True}),
    ("the keys and values swapped: your output is weights @ k; multiply the weights by the values, weights @ v",
     {"values": "key"}),
    ("the K and V projections exchanged: your keys come from Wv and your values from Wk; k = Wk(x), v = Wv(x)",
     {"swap_kv": True}),
)


_UNFIT = (KeyError, RuntimeError, ValueError, TypeError, IndexError)  # parameters that do not fit the wiring


def _step_variants(run, width, width_name, clean, extra=()):
    """name -> output of `run(**knobs)` for every attention step changed, and the `extra` ones; the key size
    is `width`, named `width_name` in the messages."""
    out = {}
    for name, knobs in (*_ATTENTION_STEPS, *extra):
        knobs = {k: (1 / width if v == "w" else v) for k, v in knobs.items()}
        try:
            with torch.no_grad():
                value = run(**knobs)
        except _UNFIT:
            continue
        name = name.replace("{w}", width_name)
        if _same(value, clean, 1e-4):
            continue  # on this input the mistake changes nothing: no evidence either way
        if ("mask" in knobs or "blocked_when" in knobs) and _nan_rows(value, clean):
            name += f"; a position with every key blocked gets NaN: {NAN_ROWS}"
        out[name] = value
    return out


MERGED_WEIGHTS = ("you merge the attention weights (B, H, T, T) instead of the context, weights @ v (B, H, T, "
                  "head_dim): merge the heads of the attention's output")
_FUSED_WIRING = (  # the fused module's own steps: name -> knobs
    ("you split the heads with view(B, H, T, head_dim) alone, without view(B, T, H, head_dim).transpose(1, 2), so "
     "each head's rows mix the features of different tokens (and positions see later tokens)",
     {"split": "no-transpose"}),
    ("you merge the heads with view(B, T, d_out) alone, without transpose(1, 2) first, so each output row mixes "
     "the heads of different tokens", {"merge": "no-transpose"}),
    ("you split and merge the heads with view alone, without transpose: split with view(B, T, H, head_dim)"
     ".transpose(1, 2), merge with transpose(1, 2) then view(B, T, d_out)",
     {"split": "no-transpose", "merge": "no-transpose"}),
    ("head h takes every H-th feature (view(B, T, head_dim, H)) instead of the features h*head_dim:(h+1)*head_dim",
     {"split": "strided"}),
    ("you merge the heads in the wrong order: feature c of head h lands at c*H + h instead of h*head_dim + c "
     "(transpose(1, 2), then view(B, T, d_out))", {"merge": "interleaved"}),
    ("your merge transposes the wrong axes: transpose(2, 3) swaps the tokens and the features; swap the heads and "
     "the tokens with transpose(1, 2)", {"merge": "wrong-axes"}),
)
_FUSED_OUTPUT = (  # the fused module's last steps, mistakes with any number of heads
    (MERGED_WEIGHTS, {"merge": "weights"}),
    ("your forward returns the merged heads without the output projection: return self.Wo(context), Wo applied "
     "to the merged heads (B, T, d_out)", {"no_wo": True}),
)


def _wiring(name, params, x, num_heads):
    """(run, key size, its name, extra mistakes) for the reference wiring of `name` with `params` on `x`:
    run(**knobs) is its output with the steps `knobs` changed (none: the reference's computation)."""
    if name in ("CausalAttention", "StackedMultiHeadAttention"):
        stacked = name == "StackedMultiHeadAttention"
        H = len({k.split(".")[1] for k in params if k.startswith("heads.")}) if stacked else 1
        prefixes = [f"heads.{h}." for h in range(H)] if stacked else [""]
        d_in, d_out = x.shape[-1], params[f"{prefixes[0]}Wq.weight"].shape[0]

        def run(cat_dim=-1, **kn):  # every head with the same mistake, concatenated on `cat_dim`
            return torch.cat([_head(params, x, prefix, **kn) for prefix in prefixes], dim=cat_dim)

        extra = ()
        if d_in != d_out:
            extra += (("scores divided by sqrt(d_in), the input width (x.size(-1)), instead of sqrt(d_out), the key "
                       "size", {"scale": 1 / math.sqrt(d_in)}),)
        if stacked:
            extra += (("the heads concatenated on dim=1 (the tokens) instead of the last dim (the features)",
                       {"cat_dim": 1}),)
        return run, d_out, "d_out", extra
    if name == "MultiHeadAttention" and num_heads:
        d_out = params["Wq.weight"].shape[0]
        extra = (*_FUSED_WIRING, ("scores divided by sqrt(d_out), the full width, instead of sqrt(head_dim)",
                                  {"scale": 1 / math.sqrt(d_out)}))
        # with one head, the split, merge and width mistakes change nothing
        return (lambda **kn: _fused(params, x, num_heads, **kn)), d_out // num_heads, "head_dim", \
            (*(extra if num_heads > 1 else ()), *_FUSED_OUTPUT)
    return None


def module_variants(name, params, x, num_heads=None):
    """name -> what the usual mistakes make `name` (CausalAttention, StackedMultiHeadAttention or
    MultiHeadAttention) output for `x`, computed with the student's parameters `params`; {} when those
    parameters do not fit the reference wiring (a structure check reports that)."""
    try:
        wiring = _wiring(name, {k: v.detach().to(x.dtype) for k, v in params.items()}, x, num_heads)
        if wiring is None:
            return {}
        run, width, width_name, extra = wiring
        with torch.no_grad():
            clean = run()
        return _step_variants(run, width, width_name, clean, extra)
    except _UNFIT:
        return {}


UNSLICED_MASK = ("your causal mask is not cut to the sequence length T: the buffer self.mask is (context_length, "
                 "context_length) and the scores (..., T, T), so it fits only when T = context_length; use "
                 "self.mask[:T, :T], cut on both axes (not self.mask whole, nor self.mask[:T])")


def module_errors(name, params, x, num_heads=None, context_length=None):
    """"Type: message" -> name, for the usual mistakes of `name`'s wiring that raise on an input of x's shape (a
    mask not cut to T, merged attention weights): when the student's module raises exactly what a mistake raises,
    that is the evidence. Only the shapes of `params` and `x` matter (and x's device, where torch words its errors
    its own way): the wiring runs on zeros of those shapes there."""
    zeros = {k: torch.zeros(v.shape, device=x.device) for k, v in params.items()}  # on x's device: on meta, torch
    try:  # words its errors otherwise
        wiring = _wiring(name, zeros, torch.zeros(x.shape, device=x.device), num_heads)
    except _UNFIT:
        return {}
    if wiring is None or _error(wiring[0]):
        return {}  # the reference wiring itself does not run with these shapes: no evidence
    mistakes = []
    if context_length and context_length != x.shape[1]:
        mistakes += [(UNSLICED_MASK, {"mask": how, "context_length": context_length})
                     for how in ("whole", "rows", "columns")]
    if name == "MultiHeadAttention":
        mistakes += [(MERGED_WEIGHTS, {"merge": "weights"}), (MERGED_WEIGHTS, {"merge": "weights-view"})]
    names = {}
    for mistake, knobs in mistakes:
        with torch.no_grad():
            error = _error(lambda: wiring[0](**knobs))
        if error and mistake not in names.setdefault(error, []):
            names[error].append(mistake)
    return {error: n[0] + (f" (or, raising the same error here: {'; or '.join(n[1:])})" if n[1:] else "")
            for error, n in names.items()}


def module_output(name, params, x, num_heads=None):
    """What the reference wiring of `name` outputs for `x` with the parameters `params`, or None when they
    do not fit it."""
    try:
        wiring = _wiring(name, {k: v.detach().to(x.dtype) for k, v in params.items()}, x, num_heads)
        with torch.no_grad():
            return None if wiring is None else wiring[0]()
    except _UNFIT:
        return None


FLOAT32_SCALE = ("your scale is a float32 tensor (torch.FloatTensor, or torch.tensor without dtype=), so in float64 "
                 "the scores are divided by a rounded sqrt({w}): divide by math.sqrt({w}), a Python float")


def float32_scale(name, params, x, got, num_heads=None):
    """FLOAT32_SCALE when `got`, the student's float64 output for `x`, is exactly (to 1e-12) what the reference
    wiring of `name` gives with the student's `params` and its scale rounded to float32 (divided by
    float32(sqrt(w)), or times float32(1/sqrt(w))), and that differs from the wiring's own output; else None."""
    try:
        wiring = _wiring(name, {k: v.detach().to(x.dtype) for k, v in params.items()}, x, num_heads)
        if wiring is None or not isinstance(got, torch.Tensor) or got.dtype != torch.float64:
            return None
        run, width, width_name = wiring[:3]
        f32 = lambda value: torch.tensor(value, dtype=torch.float32).item()  # noqa: E731
        with torch.no_grad():
            clean = run()
            rounded = [run(scale=1 / f32(math.sqrt(width))), run(scale=f32(1 / math.sqrt(width)))]
    except _UNFIT:
        return None
    got = got.detach().cpu()
    for value in rounded:
        if (value.shape == got.shape and torch.allclose(got, value, atol=1e-12, rtol=0)
                and not torch.allclose(value, clean, atol=1e-12, rtol=0)):
            return FLOAT32_SCALE.replace("{w}", width_name)
    return None


def all_parameters(state):
    """name -> value of every parameter of a module read back with RemoteModule.state, a shared one under each
    of its names (the state lists it once, under the first): heads that are one module object each get its
    weights, as they do in the student's forward."""
    params, aliases = state["parameters"], state.get("aliases", {})
    names = state.get("parameter_names") or list(params)
    return {n: params[aliases.get(n, n)] for n in names if aliases.get(n, n) in params}


def _listed(names):
    """'Wq, Wk and Wv'."""
    names = list(names)
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def _shared(state):
    """The sentence for submodules or parameters of the student's module that are one object under several
    names (state["aliases"]), or None."""
    aliases, parameters = state.get("aliases", {}), set(state.get("parameter_names", ()))
    top = {n: a for n, a in aliases.items() if n.rsplit(".", 1)[0] not in aliases or "." not in n}
    modules = {n: a for n, a in top.items() if n not in parameters}
    found, what = (modules, "module object") if modules else (top, "tensor")
    if not found:
        return None
    groups = {}
    for n, a in found.items():
        groups.setdefault(a, []).append(n)
    same = "; ".join(f"{_listed(ns)} {'is' if len(ns) == 1 else 'are'} {a}" for a, ns in groups.items())
    if modules and all(n.startswith("heads.") for n in found):
        heads = {".".join(n.split(".")[:2]) for n in parameters if n.startswith("heads.")}
        which = "your heads are" if len(found) == len(heads) - 1 else f"some of your heads ({same}) are"
        return (f"{which} the same module object, so they share their weights: create a new CausalAttention for "
                "each head, e.g. [CausalAttention(...) for _ in range(num_heads)]")
    return f"your {'submodules' if modules else 'parameters'} are the same {what} under several names ({same}): " \
           "give each its own"


def structure_cause(state, expected, missing_name=None):
    """The cause, in the student's terms, of a module (read back with RemoteModule.state) whose parameters are
    not the contract's `expected` names (those of the reference module built with the same arguments, in its
    order): heads or layers that are one object, no output projection Wo, missing or unexpected biases; None
    when the parameters are the contract's, or differ otherwise (the structure check lists them).
    `missing_name`: only the cause of that parameter's absence (an error that names it), or None."""
    shared = _shared(state)
    if shared and missing_name is None:
        return shared
    got = set(all_parameters(state))
    order = list(dict.fromkeys(n.split(".")[-2] for n in expected if "." in n))  # Wq, Wk, Wv, Wo
    expected = set(expected)
    missing, extra = expected - got, got - expected
    causes = []  # (sentence, the parameter names it explains)
    if {"Wo.weight", "Wo.bias"} <= missing:
        causes.append(("your MultiHeadAttention has no output projection Wo: create self.Wo = nn.Linear(d_out, "
                       "d_out) and return Wo applied to the merged heads (B, T, d_out)", {"Wo.weight", "Wo.bias"}))

    def biases(names):  # the layers (Wq, Wk, ...) with a bias among `names` whose weight is expected, in order
        found = {n.split(".")[-2] for n in names if n.endswith(".bias") and f"{n[:-len('.bias')]}.weight" in expected}
        return [layer for layer in order if layer in found], {n for n in names if n.split(".")[-2] in found}

    lacking, names = biases(missing - {"Wo.bias"} if "Wo.weight" in missing else missing)
    if "Wo" in lacking:
        causes.append(("your Wo has no bias: the contract's Wo is nn.Linear(d_out, d_out), with its bias (the "
                       "default bias=True), whatever qkv_bias says", {"Wo.bias"}))
    qkv = [n for n in lacking if n != "Wo"]
    if qkv:
        causes.append((f"your {_listed(qkv)} {'has' if len(qkv) == 1 else 'have'} no bias although qkv_bias=True: "
                       f"create {'it' if len(qkv) == 1 else 'them'} with nn.Linear(d_in, d_out, bias=qkv_bias)",
                       names - {"Wo.bias"}))
    unexpected, names = biases(extra)
    if unexpected:
        causes.append((f"unexpected parameters: {_listed(f'{n}.bias' for n in unexpected)}; the contract has no "
                       f"bias on {_listed(unexpected)} when qkv_bias=False: create them with nn.Linear(d_in, d_out, "
                       "bias=qkv_bias)", names))
    causes = [c for c, names in causes if missing_name is None or missing_name in names]
    return "; and ".join(causes) if causes else None


def init_order(params, d_in, d_out, seed, qkv_bias=False):
    """How a fused MultiHeadAttention built after torch.manual_seed(seed) got its weights `params`.

    None when they are the reference's (Wq, Wk, Wv, then Wo, each a default nn.Linear), or when the module
    has other parameters than those (not a question of init); else the creation order that gives them, as a
    tuple of names, or () when no order of those four layers does.
    """
    from torch import nn

    def made(order):
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            layers = {n: nn.Linear(d_out if n == "Wo" else d_in, d_out, bias=(n == "Wo") or qkv_bias) for n in order}
        return {f"{n}.{p}": t.detach() for n, layer in layers.items() for p, t in layer.named_parameters()}

    def same(a):
        return set(a) == set(params) and all(
            params[k].shape == a[k].shape and torch.allclose(params[k].detach().cpu().double(), a[k].double(),
                                                             atol=1e-6) for k in a)

    reference = ("Wq", "Wk", "Wv", "Wo")
    expected = made(reference)
    if set(params) != set(expected) or same(expected):
        return None  # other parameters: a structure check says so; the same ones: the weights are right
    for order in itertools.permutations(reference):
        if order != reference and same(made(order)):
            return order
    return ()
