"""The KV-cache part's trusted decoding, and the usual mistakes of a step, each computed so that feedback can name it.

Everything here runs in the grading process, on weights and tables read back from the student's module: the
reference step (`decode`, the contract of kvcache.KVCacheAttention.step, docs/instructor/kvcache.md) with one
mistake planted (`MISTAKES`), so that a student's output names its bug only when it equals what that bug gives
on the same inputs (autograder.grade.diagnose.match), never from a guess.

The mistakes, as a student makes them in `step`:

- NOT_GROWN: the new key and value replace the cache instead of being appended to it (`keys = k`), or the grown
  cache is not returned: each token attends to itself alone.
- OWN_KEY_LEFT_OUT: the query is scored against the cache as it came in, before the new key and value are
  appended (the cache sliced one short): the new token attends to the tokens before it but not to itself (and
  token 0, to nothing: its output is Wo's bias).
- MASK_ONE_ROW: the causal mask of a full pass applied to the step's one query row (`mask[:1, :t + 1]` is the
  mask's row 0): the new token sees only the first key.
- POSITION_ZERO: each new token is given the positional encoding of position 0 (`x + self.pe[:T]`, the full
  pass's PE[:T], on a one-token x adds PE[:1]): positions restart at 0 every step.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from solutions import mha as ref_mha

NOT_GROWN = ("the cache does not grow: each step's key and value replace the cache instead of being appended to it "
             "(keys = torch.cat((keys, k), dim=2), the same for values), or the grown cache is not returned, so "
             "every token attends to itself alone")
OWN_KEY_LEFT_OUT = ("the new token's query is scored against the cache as it came in, before its own key and value "
                    "are appended: append first (torch.cat on dim 2), then score, so that the new token attends to "
                    "every token up to and including itself")
MASK_ONE_ROW = ("the causal mask of a full pass applied to the step's one query row: its first row (mask[:1]) lets "
                "the new token see only the first key; a step needs no mask, as every cached key is at or before "
                "the new token")
POSITION_ZERO = ("every new token gets the positional encoding of position 0 (pe[:T], the full pass's rows, with "
                 "T = 1 is PE[0]): add self.pe[t], the row of its true position t = keys.shape[2], the number of "
                 "tokens already cached")

#: mistake -> its "Likely bug" line (without "Likely bug: " and the final period)
MISTAKES = {"not_grown": NOT_GROWN, "own_key_left_out": OWN_KEY_LEFT_OUT, "mask_one_row": MASK_ONE_ROW,
            "position_zero": POSITION_ZERO}


def _linear(params, name, x):
    return F.linear(x, params[f"{name}.weight"], params.get(f"{name}.bias"))


def step(params, pe, num_heads, x, keys, values, mistake=None):
    """The reference step (kvcache.KVCacheAttention.step) with `params` (Wq, Wk, Wv, Wo's weights and biases, by
    name) and the positional table `pe` (max_len, d_in): x (B, 1, d_in), keys and values (B, H, t, head_dim) ->
    (output (B, 1, d_out), keys, values (B, H, t + 1, head_dim)); `mistake`: one of MISTAKES planted."""
    B, t = x.shape[0], keys.shape[2]
    d_out = params["Wq.weight"].shape[0]
    H, hd = num_heads, d_out // num_heads
    x = x + pe[0 if mistake == "position_zero" else t].to(x.dtype)  # (B, 1, d_in)
    q, k, v = (_linear(params, name, x).view(B, 1, H, hd).transpose(1, 2) for name in ("Wq", "Wk", "Wv"))
    grown_k, grown_v = torch.cat((keys, k), dim=2), torch.cat((values, v), dim=2)  # (B, H, t + 1, head_dim)
    if mistake == "not_grown":
        grown_k, grown_v = k, v
    seen_k, seen_v = (keys, values) if mistake == "own_key_left_out" else (grown_k, grown_v)
    scores = q @ seen_k.transpose(2, 3) / math.sqrt(hd)  # (B, H, 1, seen)
    if mistake == "mask_one_row":
        first_row = torch.zeros(scores.shape[-1], dtype=torch.bool)
        first_row[0] = True
        scores = scores.masked_fill(~first_row, float("-inf"))
    weights = torch.softmax(scores, dim=-1)  # (B, H, 1, seen)
    context = (weights @ seen_v).transpose(1, 2).reshape(B, 1, d_out)  # (B, 1, d_out)
    return _linear(params, "Wo", context), grown_k, grown_v


def empty_cache(x, num_heads, d_out):
    """keys, values (B, H, 0, head_dim): the cache before the first token."""
    empty = x.new_zeros(x.shape[0], num_heads, 0, d_out // num_heads)
    return empty, empty.clone()


def decode(params, pe, num_heads, x, keys=None, values=None, mistake=None):
    """The reference forward (kvcache.KVCacheAttention.forward): x (B, T, d_in), one step per token from the
    cache (None: empty) -> (output (B, T, d_out), keys, values (B, H, t + T, head_dim))."""
    with torch.no_grad():
        if keys is None:
            keys, values = empty_cache(x, num_heads, params["Wq.weight"].shape[0])
        outputs = []
        for i in range(x.shape[1]):
            out, keys, values = step(params, pe, num_heads, x[:, i:i + 1], keys, values, mistake)
            outputs.append(out)
        return torch.cat(outputs, dim=1), keys, values


def causal_pass(params, pe, num_heads, x):
    """The full causal pass that decoding reproduces: the reference fused MultiHeadAttention (solutions/mha.py)
    with `params`, on x + PE[:T], (B, T, d_in) -> (B, T, d_out)."""
    d_out, d_in = params["Wq.weight"].shape
    with torch.random.fork_rng(devices=[]):
        module = ref_mha.MultiHeadAttention(d_in, d_out, x.shape[1], 0.0, num_heads, "Wq.bias" in params)
    module.load_state_dict({name: p.detach() for name, p in params.items()}, strict=False)
    if "Wo.bias" not in params:  # a module with no bias there is judged given its layers: no bias
        module.Wo.bias = None
    module = module.to(x.dtype).eval()
    with torch.no_grad():
        return module(x + pe[:x.shape[1]].to(x.dtype))


def variants(params, pe, num_heads, x, keys=None, values=None, part="output"):
    """Likely-bug line -> what `decode` gives with that mistake planted: its output (`part` "output"), or its
    keys or values ("keys", "values"), for checks.likely_bug."""
    index = {"output": 0, "keys": 1, "values": 2}[part]
    found = {}
    for mistake, line in MISTAKES.items():
        try:
            found[line] = decode(params, pe, num_heads, x, keys, values, mistake)[index]
        except RuntimeError:
            continue
    return found
