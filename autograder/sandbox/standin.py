"""Stand-ins for a part that crashes: grade a module as if the student's own part worked, without handing it answers.

A student's MultiHeadAttention may call the student's own merge_heads; when
that raises, the MHA cannot run, and its checks would charge again a fault
that the heads checks already charge. So the grader runs the module once more
with the crashing part replaced, in the student process, by a stand-in that
knows the reference's answers for exactly the inputs the reference wiring
gives that part, and nothing else (autograder/graders/blame.py computes them,
with the student's other parts). The module then passes a check only if its
output is right: the module is graded given a working part.

The stand-in must not be a way to get those answers without doing the work:
student code runs beside it and can read it. So it holds each answer sealed
with the input it answers: the answer's bytes XOR a pad derived from that
input's exact bytes (SHAKE-256), found by a digest (SHA-256) of them, under a
random nonce. Code that does not already hold the right input, bit for bit,
learns nothing from it. An input that is not one of those (another wiring, a
different rounding) gets an error, and the check is graded as without the
stand-in.

The same stand-ins grade a module whose part answers what the module cannot
use (a float mask that it inverts with ~, an attention that returns
(weights, output)), and the dropout of a module whose attention applies its
dropout module wrongly: given a dropout module, the stand-in for
scaled_dot_product_attention applies it to the reference's weights, as the
contract says, and returns (dropped weights @ value, dropped weights). Those
weights are the answer's own, which the caller gets anyway, and the dropout
module and its random draws are the caller's.

A public stand-in is the other kind, for timing (autograder/graders/timing.py): a
module whose own part crashes is timed with that part replaced by the operation
the contract asks of it (PUBLIC: a transpose and a reshape, a `tril`, the
formula of attention), which any student could write; it knows no answer, so
the timed code is the student's own but for that part, and nothing sealed is
in reach. Its time is the student's: it runs in the student process.

The student process loads this file by path (student_process._sibling), the
trusted side imports it; both compute the same bytes of a value. It imports
torch only when a stand-in is made or called: the student process loads it
before its limits are set, and torch is imported under them.
"""
from __future__ import annotations

import hashlib
import os

#: The parts a stand-in can replace: (student module, function) -> its parameters in order, with the ones the
#: answer depends on (a dropout module, or a device, is not part of the key), and their defaults.
SIGNATURES = {
    ("attention", "scaled_dot_product_attention"): (("query", "key", "value", "mask", "dropout"),
                                                    ("query", "key", "value", "mask"),
                                                    {"mask": None, "dropout": None}),
    ("heads", "split_heads"): (("x", "num_heads"), ("x", "num_heads"), {}),
    ("heads", "merge_heads"): (("x",), ("x",), {}),
    ("masks", "causal_mask"): (("seq_len", "device"), ("seq_len",), {"device": None}),
}


def _split_heads(x, num_heads):
    """(B, T, d_model) -> (B, H, T, head_dim): a reshape and a transpose."""
    B, T, d_model = x.shape
    if d_model % num_heads != 0:
        raise ValueError(f"num_heads={num_heads} does not divide d_model={d_model}")
    return x.reshape(B, T, num_heads, d_model // num_heads).transpose(1, 2)


def _merge_heads(x):
    """(B, H, T, head_dim) -> (B, T, H * head_dim): a transpose and a reshape."""
    B, H, T, head_dim = x.shape
    return x.transpose(1, 2).reshape(B, T, H * head_dim)


def _causal_mask(seq_len, device=None):
    """bool (T, T), True where key j <= query i: a `tril`."""
    import torch

    return torch.tril(torch.ones(seq_len, seq_len, dtype=torch.bool, device=device))


def _attention(query, key, value, mask=None, dropout=None):
    """(output, weights) of softmax(query key^T / sqrt(d_k)) value, False of the mask blocked: the contract's
    formula, as the student's docstring gives it."""
    import math

    import torch

    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))  # (..., L, S)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)  # (..., L, S)
    if dropout is not None:
        weights = dropout(weights)
    return weights @ value, weights  # (..., L, d_v), (..., L, S)


#: The public stand-ins: (student module, function) -> the operation the contract asks of it.
PUBLIC = {
    ("attention", "scaled_dot_product_attention"): _attention,
    ("heads", "split_heads"): _split_heads,
    ("heads", "merge_heads"): _merge_heads,
    ("masks", "causal_mask"): _causal_mask,
}


class NoAnswer(Exception):
    """The stand-in has no answer for these arguments."""


def bind(function, args, kwargs):
    """The arguments of a call of `function` ((module, name)) by parameter name, defaults filled in."""
    params, _, defaults = SIGNATURES[function]
    if len(args) > len(params) or set(kwargs) - set(params) or set(params[:len(args)]) & set(kwargs):
        raise NoAnswer(f"{function[1]} called with arguments that are not its parameters {params}")
    bound = {**defaults, **dict(zip(params, args)), **kwargs}
    missing = [p for p in params if p not in bound]
    if missing:
        raise NoAnswer(f"{function[1]} called without {missing}")
    return bound


def _value_bytes(value) -> bytes:
    """The exact bytes of one argument: a tensor's dtype, shape and elements (C order; a meta tensor, which has
    no elements, by its dtype and shape alone), or a plain value's type and repr."""
    import torch

    if isinstance(value, torch.Tensor):
        t = value.detach()
        head = f"tensor {t.dtype} {tuple(t.shape)} {'meta' if t.device.type == 'meta' else 'data'}:".encode()
        if t.device.type == "meta":
            return head
        return head + _tensor_bytes(t)
    if value is None or type(value) in (bool, int, float):
        return f"{type(value).__name__} {value!r}".encode()
    raise NoAnswer(f"an argument of type {type(value).__name__}")


def key_bytes(function, bound) -> bytes:
    """The bytes an answer of `function` is keyed on: its keyed arguments', each with its length."""
    _, keyed, _ = SIGNATURES[function]
    parts = [_value_bytes(bound[name]) for name in keyed]
    return b"".join(len(p).to_bytes(8, "big") + p for p in parts)


def _tensor_bytes(t) -> bytes:
    """The elements of a tensor with data, C order, as bytes."""
    import torch

    t = t.detach().cpu().contiguous().reshape(-1)
    return t.view(torch.uint8).numpy().tobytes() if t.numel() else b""


def _pad(nonce: bytes, data: bytes, size: int) -> bytes:
    return hashlib.shake_256(b"mha-kit stand-in pad\0" + nonce + data).digest(size)


def _digest(nonce: bytes, data: bytes) -> bytes:
    return hashlib.sha256(b"mha-kit stand-in key\0" + nonce + data).digest()


def _xor(a: bytes, b: bytes) -> bytes:
    return (int.from_bytes(a, "big") ^ int.from_bytes(b, "big")).to_bytes(len(a), "big") if a else b""


def _u8(data: bytes):
    import torch

    return torch.frombuffer(bytearray(data), dtype=torch.uint8) if data else torch.zeros(0, dtype=torch.uint8)


def seal(function, args, kwargs, outputs) -> dict:
    """One answer of a stand-in for `function`: `outputs` (a tensor, or a tuple of tensors) for exactly these
    arguments, sealed with them. Made on the trusted side; plain tensors and lists, for the wire."""
    data = key_bytes(function, bind(function, args, kwargs))
    many = isinstance(outputs, (tuple, list))
    tensors = [t.detach() for t in (outputs if many else (outputs,))]
    meta = [t.device.type == "meta" for t in tensors]
    plain = b"".join(b"" if m else _tensor_bytes(t) for t, m in zip(tensors, meta))
    nonce = os.urandom(16)
    return {"nonce": _u8(nonce), "key": _u8(_digest(nonce, data)),
            "sealed": _u8(_xor(plain, _pad(nonce, data, len(plain)))),
            "dtypes": [str(t.dtype).replace("torch.", "") for t in tensors], "shapes": [list(t.shape) for t in tensors],
            "meta": meta, "many": many}


def _dropped(function, bound, out):
    """The attention's answer (output, weights) with the caller's dropout module applied to the weights, as the
    contract says, when it changes them (training mode): (dropout(weights) @ value, dropout(weights)). The weights
    are those of the answer, which the caller gets anyway; the dropout module is the caller's own, and its random
    draws too."""
    dropout = bound.get("dropout") if function == ("attention", "scaled_dot_product_attention") else None
    if not callable(dropout) or len(out) != 2:
        return out
    _, weights = out
    dropped = dropout(weights)
    if dropped is weights:
        return out
    return dropped @ bound["value"], dropped


def answer(function, answers, args, kwargs):
    """What the stand-in for `function` returns for this call: the answer sealed with exactly these arguments,
    on the device of its first tensor argument (or its `device`); NoAnswer when it has none."""
    import torch

    bound = bind(function, args, kwargs)
    data = key_bytes(function, bound)
    for a in answers:
        nonce = bytes(a["nonce"].tolist())
        if bytes(a["key"].tolist()) != _digest(nonce, data):
            continue
        sealed = a["sealed"].numpy().tobytes()
        plain = _xor(sealed, _pad(nonce, data, len(sealed)))
        device = bound.get("device") or next((v.device for v in bound.values() if isinstance(v, torch.Tensor)), None)
        out, offset = [], 0
        for dtype, shape, meta in zip(a["dtypes"], a["shapes"], a["meta"]):
            dtype = getattr(torch, dtype)
            if meta:
                out.append(torch.empty(shape, dtype=dtype, device="meta"))
                continue
            size = torch.Size(shape).numel() * torch.empty(0, dtype=dtype).element_size()
            t = _u8(plain[offset:offset + size])
            offset += size
            t = t.view(dtype).reshape(shape)
            out.append(t.to(device) if device is not None else t)
        return _dropped(function, bound, tuple(out)) if a["many"] else out[0]
    raise NoAnswer(f"{function[1]} got an input that the reference wiring does not give it")
