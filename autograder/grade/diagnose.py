"""Known wrong variants, computed from the reference, so feedback can name the likely bug.

When a student's output differs from the reference, the graders compute what
the common mistakes would have produced on the same inputs (the reference
computation with one step changed) and check whether the student's output
matches one of them: "your weights equal softmax without the 1/sqrt(d_k)
scaling". Every variant here is computed, none is a canned message keyed to
a test: a hint is shown only when the student's output equals what its bug
produces, and nothing is said otherwise.

The attention modules (mha.py) are diagnosed the same way: their reference
wiring (projections, split, mask, softmax, merge, output projection) is run
here with the student's own weights and one step changed (`module_variants`).
"""
from __future__ import annotations

import itertools
import math

import torch
import torch.nn.functional as F

from solutions import masks as ref_masks
from solutions import positional as ref_positional

# The sentence added to a variant whose rows end up with every key blocked (softmax of a row of -inf is NaN).
NAN_ROWS = "the softmax of a row where every score is -inf is NaN (0/0)"
# Mistakes named both from wrong numbers and, where they raise on some shapes, from the error.
TRANSPOSED_MASK = "the mask applied on the wrong axes (transposed): mask[..., i, j] is for query i and key j"
UNSQUEEZED_MASK = ("the mask broadcast over the wrong dimension: mask.unsqueeze(1) (《PyTorch快餐教程(5)》's step to share a "
                   "mask between heads) inside scaled_dot_product_attention, whose mask already broadcasts to "
                   "(..., L, S)")
DROPOUT_ON_OUTPUT = "dropout applied to the output (weights @ value) instead of to the attention weights"
# scaled_dot_product_attention's pair in the wrong order: named from its values, or from its shapes where they differ
SWAPPED_RETURNS = "you return (weights, output); the contract's order is (output, weights)"
# The seed's -1e9 fill on float16 scores: masked_fill raises, as float16 holds nothing beyond 65504 in magnitude.
HALF_FILL = ("the blocked scores filled with a number float16 cannot hold, such as -1e9 (《PyTorch快餐教程(5)》's): "
             "float16's largest is 65504, so masked_fill raises; fill them with float('-inf'), or "
             "torch.finfo(scores.dtype).min, which every floating dtype holds")
# The mistakes of the mask's fill and of the softmax's place, named alike in scaled_dot_product_attention and in the
# attention modules ("{w}": the key size's name there).
FILL_FIX = "fill with float('-inf') or a large negative number such as torch.finfo(scores.dtype).min"
FILL_NEAR_ZERO = ("your mask fills the blocked scores with a number close to 0 (such as -1e-9, -1e-12 or 1e-9) "
                  "instead of a large negative one, so the blocked keys keep their weight: " + FILL_FIX)
FILL_POS_INF = ("your mask fills the blocked scores with +inf (float('inf')) instead of -inf, so every row with a "
                "blocked key is NaN after the softmax (inf - inf): " + FILL_FIX)
AFTER_SOFTMAX_NEG_INF = ("the mask applied to the weights after the softmax, with -inf: the blocked weights are -inf "
                         "(and the outputs -inf or NaN), and the others are not renormalised; mask the scores before "
                         "the softmax (" + FILL_FIX + ")")
SCALED_AFTER_SOFTMAX = ("the scores scaled after the softmax: you divide the weights by sqrt({w}), so each row sums to "
                        "1/sqrt({w}) instead of 1; divide the scores q @ k^T by sqrt({w}) before the softmax")
WEIGHTS_TIMES_KEY = ("the keys and values swapped: your output is weights @ key; the output is the weighted sum of "
                     "the values, weights @ value")


def _attention(q, k, v, mask=None, *, scale=None, dim=-1, blocked_when=False, mask_after=False, mask_op=None,
               fill=float("-inf"), scale_after=False, values="value"):
    """The reference attention with one step parameterised.

    mask_op: how the mask reaches the scores, for the mistakes that build it wrongly:
    "transposed" (mask.transpose(-2, -1)), "unsqueezed" (mask.unsqueeze(1), 《PyTorch快餐教程(5)》's step for heads,
    done once too often), "times-inf" (scores + (~mask) * -inf: 0 * -inf is NaN where the mask allows).
    fill: what the blocked scores are filled with (-inf; the mistakes: a number close to 0, +inf).
    mask_after: the mask applied to the weights after the softmax instead, filling them with this value (0.0, -inf).
    scale_after: the weights of the unscaled scores divided by sqrt(d_k) after the softmax (rows sum to 1/sqrt(d_k)).
    values: what the weights multiply, "value" or "key" (the keys and values swapped: weights @ key).
    """
    d_k = q.size(-1)
    scale = 1 / math.sqrt(d_k) if scale is None else scale
    scores = q @ k.transpose(-2, -1) * (1.0 if scale_after else scale)  # (..., L, S)
    if mask is not None and mask_op == "transposed":
        mask = mask.transpose(-2, -1)
    elif mask is not None and mask_op == "unsqueezed":
        mask = mask.unsqueeze(1)
    if mask is not None and mask_op == "times-inf":
        scores = scores + (~mask).to(scores.dtype) * float("-inf")
    elif mask is not None and mask_after is False:
        scores = scores.masked_fill(mask == blocked_when, fill)
    weights = torch.softmax(scores, dim=dim)
    if scale_after:
        weights = weights / math.sqrt(d_k)
    if mask is not None and mask_after is not False:
        weights = weights.masked_fill(~mask, 0.0 if mask_after is True else mask_after)
    return weights @ (k if values == "key" else v), weights


def _nan_rows(weights, clean):
    """Whether `weights` (..., L, S) has rows that are all NaN where the reference `clean` has none."""
    return bool((torch.isnan(weights).all(-1) & ~torch.isnan(clean).any(-1)).any())


def _with_nan(name, weights, clean):
    return f"{name}; rows with every key blocked come out NaN: {NAN_ROWS}" if _nan_rows(weights, clean) else name


def attention_variants(q, k, v, mask=None):
    """name -> (output, weights) of the usual mistakes in scaled_dot_product_attention."""
    d_k, d_v = q.size(-1), v.size(-1)
    out = {
        "softmax without the 1/sqrt(d_k) scaling": _attention(q, k, v, mask, scale=1.0),
        "scores divided by d_k instead of sqrt(d_k)": _attention(q, k, v, mask, scale=1 / d_k),
        "softmax over the queries (dim=-2) instead of over the keys (dim=-1)": _attention(q, k, v, mask, dim=-2),
    }
    if d_v != d_k:
        out["scores divided by sqrt(d_v), the value size, instead of sqrt(d_k)"] = \
            _attention(q, k, v, mask, scale=1 / math.sqrt(d_v))
    out[SCALED_AFTER_SOFTMAX.replace("{w}", "d_k")] = _attention(q, k, v, mask, scale_after=True)
    output, weights = _attention(q, k, v, mask)
    out[SWAPPED_RETURNS] = (weights, output)
    out[WEIGHTS_TIMES_KEY] = _attention(q, k, v, mask, values="key")
    if mask is None:
        return out
    out[AFTER_SOFTMAX_NEG_INF] = _attention(q, k, v, mask, mask_after=float("-inf"))
    out[FILL_NEAR_ZERO] = _attention(q, k, v, mask, fill=0.0)
    out[FILL_POS_INF] = _attention(q, k, v, mask, fill=float("inf"))
    clean = weights
    inverted = _attention(q, k, v, mask, blocked_when=True)
    out[_with_nan("the mask's polarity inverted: you blocked the positions where the mask is True", inverted[1],
                  clean)] = inverted
    out["the mask applied after the softmax, so the weights are not renormalised"] = \
        _attention(q, k, v, mask, mask_after=True)
    out["the mask is never applied (the weights are those without a mask)"] = _attention(q, k, v)
    times_inf = _attention(q, k, v, mask, mask_op="times-inf")
    out["your additive mask multiplies -inf by the mask: 0 * -inf is NaN at every allowed position, and a row "
        "with a NaN is all NaN after the softmax; fill with masked_fill(~mask, float('-inf')) or torch.where "
        "instead"] = times_inf
    if mask.size(-1) == mask.size(-2):
        transposed = _attention(q, k, v, mask, mask_op="transposed")
        out[_with_nan(TRANSPOSED_MASK, transposed[1], clean)] = transposed
    try:
        out[UNSQUEEZED_MASK] = _attention(q, k, v, mask, mask_op="unsqueezed")
    except RuntimeError:
        pass  # that mistake raises on these shapes: attention_errors names it
    return out


def _error(mistake):
    """'Type: message' of the error that `mistake()` raises, or None when it raises nothing."""
    try:
        mistake()
    except Exception as exc:  # noqa: BLE001 - the reference with one step changed: whatever it raises
        return f"{type(exc).__name__}: {exc}"
    return None


def attention_errors(q, k, v, mask=None, dropout=None):
    """"Type: message" -> name, for the usual mistakes in scaled_dot_product_attention that raise on these
    inputs (a transposed mask when L != S, dropout on the output, a -1e9 fill in float16): when the student's
    code raises exactly what a mistake raises, that is the evidence. `dropout`: the pattern of the kit's stand-in
    dropout module, which multiplies by it."""
    mistakes = []
    if mask is not None:
        mistakes += [
            (TRANSPOSED_MASK, lambda: _attention(q, k, v, mask, mask_op="transposed")),
            (TRANSPOSED_MASK, lambda: torch.where(mask.transpose(-2, -1), q @ k.transpose(-2, -1), float("-inf"))),
            (UNSQUEEZED_MASK, lambda: _attention(q, k, v, mask, mask_op="unsqueezed")),
            (HALF_FILL, lambda: (q @ k.transpose(-2, -1)).masked_fill(~mask, -1e9)),  # raises in float16 only
        ]
    if dropout is not None:
        mistakes.append((DROPOUT_ON_OUTPUT, lambda: _attention(q, k, v, mask)[0] * dropout))
    names = {}
    for name, mistake in mistakes:
        error = _error(mistake)
        if error and name not in names.setdefault(error, []):
            names[error].append(name)
    return {error: n[0] + (f" (or, raising the same error here: {'; or '.join(n[1:])})" if n[1:] else "")
            for error, n in names.items()}


def raised_like(errors):
    """A hint for checks.with_hint: the mistake whose error (`errors`, a thunk giving "Type: message" -> name,
    asked only when the student's code raised) is exactly what the student's code raised."""
    return lambda exc: errors().get(f"{exc.exc_type}: {exc.detail}")


def dropout_variants(q, k, v, pattern):
    """name -> (output, weights) of the usual mistakes with the dropout module (`pattern`: its multipliers)."""
    _, weights = _attention(q, k, v)
    out = {
        "the dropout module is never applied (your weights and output are those without dropout)":
            (weights @ v, weights),
        "dropout applied to the weights, but the output computed from the weights before dropout":
            (weights @ v, weights * pattern),
    }
    for name, (o, w) in attention_variants(q, k, v).items():
        if w.shape == pattern.shape:  # the mistakes of the weights, then dropout as it should be
            out[name] = ((w * pattern) @ (k if name == WEIGHTS_TIMES_KEY else v), w * pattern)
    return out


def split_variants(x, num_heads):
    B, T, d = x.shape
    hd = d // num_heads  # head_dim
    return {
        "your heads come from view without transpose: (B, T, d_model) viewed straight as (B, H, T, head_dim)":
            x.reshape(B, num_heads, T, hd),
        "head h takes every H-th feature (view as (B, T, head_dim, H)) instead of the features "
        "h*head_dim:(h+1)*head_dim": x.reshape(B, T, hd, num_heads).permute(0, 3, 1, 2),
        "you transposed the wrong axes: view(B, T, H, head_dim).transpose(2, 3) gives (B, T, head_dim, H); the "
        "heads come before the tokens with transpose(1, 2)": x.reshape(B, T, num_heads, hd).transpose(2, 3),
        "you transposed the wrong axes: x.transpose(1, 2) before the view mixes the tokens into the features; "
        "view as (B, T, H, head_dim) first, then transpose(1, 2)": x.transpose(1, 2).reshape(B, num_heads, T, hd),
    }


def merge_variants(x):
    B, H, T, hd = x.shape  # hd: head_dim
    return {
        "your merge uses view without transposing the heads back: (B, H, T, head_dim) viewed as "
        "(B, T, H * head_dim)": x.reshape(B, T, H * hd),
        "your merge puts the heads in the wrong order: feature c of head h lands at c*H + h (permute(0, 2, 3, 1)) "
        "instead of h*head_dim + c (transpose(1, 2), then view)": x.permute(0, 2, 3, 1).reshape(B, T, H * hd),
        "your merge transposes the wrong axes: transpose(2, 3) swaps the tokens and the features; swap the heads "
        "and the tokens with transpose(1, 2)": x.transpose(2, 3).reshape(B, T, H * hd),
    }


def mask_variants(seq_len):
    allowed = ref_masks.causal_mask(seq_len)
    return {
        "your mask blocks the diagonal: a position must be allowed to attend to itself": allowed.tril(-1),
        "your mask marks the blocked positions (《多头注意力：堆叠与权重分割》's triu(diagonal=1)); here True means 'may attend'":
            ~allowed,
        "your mask is the upper triangle: True must be where key j <= query i": allowed.T,
    }


# The frequency mistakes: name -> the angle of column c (0..d_model-1, its pair i = c // 2) at position p, float64.
# A sine goes in the even columns and a cosine in the odd ones, as they should.
FREQUENCY_MISTAKES = {
    "your frequencies are taken per column, not per pair: column c turns at 1/10000^(c/d_model) (a div_term built "
    "from torch.arange(0, d_model), or 10000 ** (i / d_model) for every column i), so each cosine's exponent, "
    "(2i+1)/d_model, is one more than its sine's; both columns of pair i, 2i and 2i+1, use 10000^(2i/d_model): "
    "build div_term from torch.arange(0, d_model, 2), one value per pair":
        lambda p, c, d: p / 10000 ** (c / d),
    "your frequencies use the column index c where the pair's 2i belongs: column c turns at 1/10000^(2c/d_model) "
    "(10000 ** (2 * i / d_model) and, for the cosine, 10000 ** (2 * (i + 1) / d_model), with i the column of the "
    "sine, as in a loop for i in range(0, d_model, 2)); both columns of pair i, 2i and 2i+1, use "
    "10000^(2i/d_model): with i the sine's column, 10000 ** (i / d_model) for both":
        lambda p, c, d: p / 10000 ** (2 * c / d),
    "the sign of your exponent is swapped: your angles are p * 10000^(2i/d_model) (torch.exp(2i * math.log(10000.0) "
    "/ d_model), without its minus sign) instead of p / 10000^(2i/d_model): the frequencies fall from 1 to 1/10000, "
    "torch.exp(2i * -math.log(10000.0) / d_model)":
        lambda p, c, d: p * 10000 ** (2 * (c // 2) / d),
    "your exponent has no parentheses: 10000 ** two_i / d_model is 10000^(2i), then divided by d_model; write "
    "10000 ** (two_i / d_model)":
        lambda p, c, d: p / 10000 ** (2 * (c // 2)) / d,
    **{f"your frequencies use the base {base} instead of 10000: PE[p, 2i] = sin(p / 10000^(2i/d_model)) (in log "
       f"space, torch.exp(2i * -math.log(10000.0) / d_model))": (lambda p, c, d, b=base: p / b ** (2 * (c // 2) / d))
       for base in (10, 1000, 100000, 1000000)},  # (base 100 is 10000^(i/d_model), named as such in encoding_variants)
}


def _from_angles(angle):
    """The table (T, d_model) with sin(angle) in the even columns and cos(angle) in the odd ones."""
    pe = torch.empty_like(angle)
    pe[:, 0::2], pe[:, 1::2] = torch.sin(angle[:, 0::2]), torch.cos(angle[:, 1::2])
    return pe


def encoding_variants(seq_len, d_model):
    pe = ref_positional.sinusoidal_encoding(seq_len, d_model)
    sin, cos = pe[:, 0::2], pe[:, 1::2]
    swapped = torch.empty_like(pe)
    swapped[:, 0::2], swapped[:, 1::2] = cos, sin
    position = torch.arange(seq_len, dtype=torch.float64).unsqueeze(1)
    i = torch.arange(d_model // 2, dtype=torch.float64)
    angle = position / 10000 ** (i / d_model)
    exponent_i = torch.empty(seq_len, d_model, dtype=torch.float64)
    exponent_i[:, 0::2], exponent_i[:, 1::2] = torch.sin(angle), torch.cos(angle)
    column = torch.arange(d_model, dtype=torch.float64)  # c
    return {
        "your sines and cosines are concatenated (all sines, then all cosines) instead of interleaved":
            torch.cat([sin, cos], dim=-1),
        "your sines and cosines are swapped: sin belongs in the even columns, cos in the odd ones": swapped,
        "your frequencies use 10000^(i/d_model) instead of 10000^(2i/d_model)": exponent_i.to(pe.dtype),
        **{name: _from_angles(angle_of(position, column, d_model)).to(pe.dtype)
           for name, angle_of in FREQUENCY_MISTAKES.items()},
    }


def table_variants(max_len, d_model):
    """name -> the buffer `pe` that the usual mistakes keep, for PositionalEncoding(d_model, max_len)."""
    pe = ref_positional.sinusoidal_encoding(max_len, d_model)
    return {"your pe has a leading batch dim, (1, max_len, d_model) (pe.unsqueeze(0), as in the Annotated "
            "Transformer); here it is (max_len, d_model) and forward adds pe[:T]": pe.unsqueeze(0),
            SEQ_FIRST_TABLE: pe.unsqueeze(1),
            **encoding_variants(max_len, d_model)}


SEQ_FIRST_TABLE = ("your pe is seq-first, (max_len, 1, d_model) (pytorch/examples' convention, for x (T, B, "
                   "d_model)); here x is batch-first, (B, T, d_model): keep pe as (max_len, d_model) and add "
                   "pe[:T] with T = x.size(1)")
SEQ_FIRST_SUM = ("your forward adds pe[:x.size(0)], one row per batch item added to all its tokens, as for a "
                 "seq-first x (T, B, d_model) (pytorch/examples' convention); here x is batch-first, (B, T, "
                 "d_model): add pe[:T] with T = x.size(1)")


def sum_variants(x, pe):
    """name -> what the usual mistakes of PositionalEncoding.forward give for `x` (B, T, d_model) with the
    table `pe` (max_len, d_model): a wrong table added, or the right one added seq-first."""
    T = x.size(1)
    one_row = {ONE_ROW: x + pe[T].to(x.dtype)} if T < pe.size(0) else {}
    return {SEQ_FIRST_SUM: x + pe[:x.size(0)].unsqueeze(1).to(x.dtype), **one_row,
            **{name: x + table[:T].to(x.dtype) for name, table in encoding_variants(T, x.size(-1)).items()}}


ONE_ROW = ("your forward adds pe[T], the one row of position T, to every token: add pe[:T], the first T rows (one "
           "per position)")


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


def _same(a, b, atol):
    if a.shape != b.shape:
        return False
    if a.dtype == torch.bool or b.dtype == torch.bool:
        return a.dtype == b.dtype and torch.equal(a, b)
    return torch.allclose(a.double(), b.double(), atol=atol, rtol=1e-3, equal_nan=True)


def _distance(a, b):
    """The largest difference between `a` and `b` (same shape), NaN equal to NaN and infinitely far from a number."""
    if a.dtype == torch.bool or b.dtype == torch.bool:
        return 0.0
    a, b = a.double(), b.double()
    both_nan = torch.isnan(a) & torch.isnan(b)
    gap = torch.where(both_nan | (a == b), torch.zeros_like(a), (a - b).abs())  # a == b: equal infinities
    return float(torch.nan_to_num(gap, nan=float("inf")).max()) if gap.numel() else 0.0


def match(got, variants, atol=1e-4, expected=None):
    """The name of the variant that `got` equals, or None. A variant that equals the `expected` value (on
    these inputs the mistake changes nothing) is no evidence and never matches; when several mistakes give
    `got` on these inputs, the name says so and names them all, the evidence favouring none.

    Equal is within `atol`. Where the tolerance is coarse (a check in bfloat16 allows 4e-2), two mistakes can both
    lie within it while `got` is far nearer one of them: the tiny fill of the blocked scores and the mask never
    applied differ by 0.03 on the first case, and bfloat16 rounds each to within 0.004. So of the variants within
    the tolerance, those that give the same output are the nearest and any within three times its distance (or
    a tenth of the tolerance, for outputs that agree to rounding): the evidence favours them over the rest."""
    if not isinstance(got, torch.Tensor) or got.is_meta:
        return None
    got = got.detach().cpu()
    if isinstance(expected, torch.Tensor):
        expected = expected.detach().cpu()
    near = {}
    for name, value in variants.items():
        if not isinstance(value, torch.Tensor):
            continue
        value = value.detach().cpu()
        if isinstance(expected, torch.Tensor) and _same(value, expected, atol):
            continue
        if _same(got, value, atol):
            near[name] = _distance(got, value)
    best = min(near.values(), default=0.0)
    names = [name for name, distance in near.items() if distance <= max(3 * best, atol / 10)]
    if len(names) > 1:
        return f"{names[0]} (or, giving the same output here: " + "; or ".join(names[1:]) + ")"
    return names[0] if names else None
