"""How an answer travels from the student process to the trusted one: JSON and raw tensor bytes, no pickle.

The student process (autograder/sandbox/student_process.py, which loads this file by path
before it confines itself) writes every answer with `encode`; the trusted
side (autograder/sandbox/client.py) reads it with `decode`. An answer is made of
dicts with string keys, lists, strings, numbers, booleans, None and dense
tensors, and nothing else.

Why not torch.save/torch.load, even with weights_only=True: what the trusted
side pays for a frame must be bounded by the frame's size, and torch's
formats let a small frame cost far more: the zip format inflates DEFLATE
records (a 5.8 MB frame decoded to 6.1 GB), a tensor may have stride 0 (390
bytes that read as 2^25 rows), and the legacy format allocates each storage
at the size the pickle declares before reading it. Here a frame is:

    8-byte big-endian header size | JSON header | payload

The header is the answer, with each tensor replaced by
{"__tensor__": [dtype, shape, offset, nbytes, device]}: the tensor's
elements, C-contiguous, are payload[offset:offset + nbytes] (a CUDA tensor
travels through the CPU and is put back on its device); a tensor on the
meta device, which has no data, by {"__meta__": [dtype, shape]}. `decode` checks every
tensor against its frame (a known dtype, at most MAX_DIMS dimensions,
numel x element size == nbytes, inside the payload), so a tensor costs
exactly the bytes it brought, and shortens every string to MAX_STRING
characters: a student's exception message or printed text cannot grow a
report. A tensor the trusted side cannot check (sparse, quantized, on
another device) is sent as {"__refused__": "what it was"} and `decode` raises
Refused with that description: the student's answer, not a grader error.

`encode` runs in the student process, so nothing in `decode` trusts it:
a frame that breaks any rule raises Malformed.

The header is bounded before it is parsed: at most MAX_HEADER bytes, with
at most MAX_VALUES of the bytes `{`, `[`, `,` and `:` (a bound on its
containers and values, those inside strings counted too), so json.loads
builds a few MB of objects at most: a 64 MiB header of [{},{},...] cost
the grader over 3 GB and 19 to 83 s of CPU before. A real answer's header
is far below both: ~60 bytes and ~11 of those bytes per tensor, error
messages cut to 2000 and 4000 characters. The tensors' bytes add up to at
most the payload (encode gives each its own), so that putting them back
on a GPU costs at most the frame too.

Requests, from the trusted side to the student process, travel in the same
frame (`encode_request`, `decode_request`), with what a request must carry
as sent and an answer must never bring: a tensor is a view
{"__view__": [storage, dtype, shape, stride, storage offset, requires grad]}
of one of the frame's storages ("__storages__": [offset, nbytes, device]
each), so that the graders' non-contiguous views stay non-contiguous and
two tensors that share memory still share it; torch dtypes, devices and
tuples are {"__dtype__": name}, {"__device__": name} and {"__tuple__":
[...]}. The student process reads what the grader wrote, so
`decode_request` checks nothing: torch.load(weights_only=True), which read
requests before, took ~320 us to read a request of three small tensors,
this ~25 us (its unpickler is pure Python).
"""
from __future__ import annotations

import ctypes
import json
import re
import struct

MAX_DIMS = 8
MAX_HEADER = 1 << 20  # bytes of JSON in one answer's header
MAX_VALUES = 100_000  # `{`, `[`, `,` and `:` bytes in one answer's header: a bound on its containers and values
MAX_STRING = 4000  # characters: longer strings are cut, with a note of how much was cut
ALIGN = 16  # each tensor's bytes start at a multiple of this in the payload: view(dtype) needs it

DTYPES = ("float16", "bfloat16", "float32", "float64", "complex64", "complex128", "uint8", "int8", "int16",
          "int32", "int64", "bool")


class Malformed(ValueError):
    """A frame that breaks the format: its header, a tensor's description, its sizes."""


class Refused(ValueError):
    """The answer holds a value that cannot be checked (a sparse or quantized tensor): the message says what."""


def _name(dtype) -> str:
    """"float32" for torch.float32: how a dtype is named in a frame (DTYPES) and in messages."""
    return str(dtype).replace("torch.", "")


def _torch():
    import torch  # late: the student process confines itself before it imports torch

    return torch


class _Payload:
    """The raw bytes after a frame's header: blocks of memory, each starting at a multiple of ALIGN."""

    def __init__(self):
        self.chunks, self.size = [], 0

    def add(self, address, nbytes) -> int:
        """Append the `nbytes` bytes at `address`; their offset in the payload."""
        pad = -self.size % ALIGN
        if pad:
            self.chunks.append(b"\0" * pad)
            self.size += pad
        offset = self.size
        if nbytes:
            self.chunks.append(ctypes.string_at(address, nbytes))
            self.size += nbytes
        return offset

    def frame(self, header) -> bytes:
        """The frame body: the header's size, the header (JSON), the payload."""
        header = json.dumps(header).encode()
        return struct.pack(">Q", len(header)) + header + b"".join(self.chunks)


# -- the student side ----------------------------------------------------------
def encode(obj) -> bytes:
    """The frame body for an answer made of plain containers, scalars and tensors."""
    torch = _torch()
    payload = _Payload()

    def tensor(t):
        if t.device.type == "meta" and t.layout == torch.strided:  # shape and dtype, no data: costs nothing
            return {"__meta__": [_name(t.dtype), list(t.shape)]}
        if t.layout != torch.strided or t.is_quantized or t.device.type not in ("cpu", "cuda"):
            where = "" if t.device.type == "cpu" else f" on {t.device.type}"
            return {"__refused__": f"a {_name(t.layout)} {_name(t.dtype)} tensor{where} of shape {tuple(t.shape)}"}
        device = str(t.device)
        t = t.detach().to("cpu").resolve_conj().resolve_neg().contiguous()
        nbytes = t.numel() * t.element_size()
        offset = payload.add(t.data_ptr(), nbytes)
        return {"__tensor__": [_name(t.dtype), list(t.shape), offset, nbytes, device]}

    def walk(value):
        if isinstance(value, torch.Tensor):
            return tensor(value)
        if isinstance(value, dict):
            return {str(k): walk(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [walk(v) for v in value]
        return value

    return payload.frame(walk(obj))


# -- requests: from the trusted side to the student process -------------------------------------------------
def encode_request(obj) -> bytes:
    """The frame body for a request: containers, scalars, strings, tensors (as views of their storages), torch
    dtypes and devices. TypeError for anything else (a grader's mistake, never the student's)."""
    torch = _torch()
    payload, storages, index = _Payload(), [], {}

    def storage(t):
        st = t.untyped_storage()
        key = (st.data_ptr(), st.nbytes(), str(t.device))  # views of one storage share its entry
        if key not in index:
            data = st if t.device.type == "cpu" else st.cpu()
            index[key] = len(storages)
            storages.append([payload.add(data.data_ptr(), data.nbytes()), data.nbytes(), str(t.device)])
        return index[key]

    def walk(value):
        if isinstance(value, torch.Tensor):
            if value.layout != torch.strided or value.is_quantized:
                raise TypeError(f"a request cannot carry a {_name(value.layout)} tensor")
            t = value.detach().resolve_conj().resolve_neg()
            if t.device.type == "meta":
                return {"__meta__": [_name(t.dtype), list(t.shape), list(t.stride())]}
            return {"__view__": [storage(t), _name(t.dtype), list(t.shape), list(t.stride()), t.storage_offset(),
                                 value.requires_grad]}
        if isinstance(value, torch.dtype):
            return {"__dtype__": _name(value)}
        if isinstance(value, torch.device):
            return {"__device__": str(value)}
        if isinstance(value, tuple):
            return {"__tuple__": [walk(v) for v in value]}
        if isinstance(value, list):
            return [walk(v) for v in value]
        if isinstance(value, dict):
            if not all(isinstance(k, str) for k in value):
                raise TypeError("a request's dict keys must be strings")
            return {k: walk(v) for k, v in value.items()}
        if value is None or isinstance(value, (bool, int, float, str)):
            return value
        raise TypeError(f"a request cannot carry a {type(value).__qualname__}")

    body = walk(obj)
    return payload.frame({"__storages__": storages, "body": body})


def decode_request(data: bytes):
    """The request that encode_request wrote (in the student process: it trusts the frame)."""
    torch = _torch()
    (size,) = struct.unpack(">Q", data[:8])
    header = json.loads(data[8:8 + size])
    buffer = bytearray(memoryview(data)[8 + size:])  # writable, as torch.frombuffer wants
    storages = []
    for offset, nbytes, device in header["__storages__"]:
        # a storage of its own (cloned), as torch.load gave: resizable, and no view of the frame's buffer
        raw = torch.frombuffer(buffer, dtype=torch.uint8, count=nbytes, offset=offset).clone() if nbytes else \
            torch.empty(0, dtype=torch.uint8)
        storages.append((raw if device == "cpu" else raw.to(device)).untyped_storage())

    def walk(value):
        if isinstance(value, dict):
            if len(value) == 1:
                (key, spec), = value.items()
                if key == "__view__":
                    index, dtype, shape, stride, offset, grad = spec
                    st = storages[index]
                    t = torch.empty(0, dtype=getattr(torch, dtype), device=st.device).set_(st, offset, shape, stride)
                    return t.requires_grad_() if grad else t
                if key == "__meta__":
                    dtype, shape, stride = spec
                    return torch.empty_strided(shape, stride, dtype=getattr(torch, dtype), device="meta")
                if key == "__dtype__":
                    return getattr(torch, spec)
                if key == "__device__":
                    return torch.device(spec)
                if key == "__tuple__":
                    return tuple(walk(v) for v in spec)
            return {k: walk(v) for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v) for v in value]
        return value

    return walk(header["body"])


# -- the trusted side ----------------------------------------------------------
def decode(data: bytes):
    """The answer in `data`; Malformed if it breaks the format, Refused if it holds an uncheckable tensor."""
    if len(data) < 8:
        raise Malformed("a frame shorter than its header size")
    (size,) = struct.unpack(">Q", data[:8])
    if size > len(data) - 8:
        raise Malformed(f"a header of {size} bytes in a frame of {len(data)}")
    if size > MAX_HEADER:
        raise Malformed(f"a header of {size} bytes (at most {MAX_HEADER} bytes: tensors travel in the payload)")
    text = data[8:8 + size]
    values = sum(text.count(c) for c in (b"{", b"[", b",", b":"))
    if values > MAX_VALUES:
        raise Malformed(f"a header of up to {values} containers and values (its {{, [, , and : bytes; at most "
                        f"{MAX_VALUES})")
    try:
        header = json.loads(text)
    except (ValueError, RecursionError) as exc:  # not JSON, nested too deep, an integer of 5000 digits
        raise Malformed(f"a header that is not JSON ({type(exc).__name__})") from None
    payload = memoryview(data)[8 + size:]
    buffer = None
    claimed = 0  # bytes of the payload that the tensors so far took: at most the payload, as encode wrote it
    torch = _torch()

    def kind(dtype, shape):
        if dtype not in DTYPES:
            raise Malformed(f"a tensor of dtype {_cut(str(dtype), 40)!r}")
        if not (isinstance(shape, list) and len(shape) <= MAX_DIMS
                and all(type(n) is int and n >= 0 for n in shape)):
            raise Malformed("a tensor shape that is not a list of at most 8 sizes")
        return getattr(torch, dtype)

    def meta(spec):
        if not (isinstance(spec, list) and len(spec) == 2):
            raise Malformed("a meta tensor described by something other than [dtype, shape]")
        return torch.empty(spec[1], dtype=kind(*spec), device="meta")

    def tensor(spec):
        nonlocal buffer, claimed
        if not (isinstance(spec, list) and len(spec) == 5):
            raise Malformed("a tensor described by something other than [dtype, shape, offset, nbytes, device]")
        dtype, shape, offset, nbytes, device = spec
        dtype_ = kind(dtype, shape)
        if device != "cpu" and not (isinstance(device, str) and re.fullmatch(r"cuda(:[0-9]{1,2})?", device)
                                    and torch.cuda.is_available()):
            raise Malformed(f"a tensor on device {_cut(str(device), 40)!r}")
        if not all(type(n) is int for n in (offset, nbytes)) or offset < 0 or offset % ALIGN:
            raise Malformed("a tensor at an offset that is not an aligned position")
        numel = 1
        for n in shape:
            numel *= n
        if numel * torch.empty((), dtype=dtype_).element_size() != nbytes or offset + nbytes > len(payload):
            raise Malformed(f"a tensor of shape {tuple(shape)} and {dtype} whose {nbytes} bytes do not match it "
                            "or lie outside the frame")
        claimed += nbytes
        if claimed > len(payload):  # tensors that share bytes: on a GPU, each would be a copy of its own
            raise Malformed(f"tensors of {claimed} bytes or more in a payload of {len(payload)}")
        if not nbytes:
            out = torch.empty(shape, dtype=dtype_)
        else:
            if buffer is None:
                buffer = bytearray(payload)  # one copy, writable: the tensors below are views of it
            out = torch.frombuffer(buffer, dtype=torch.uint8, count=nbytes, offset=offset).view(dtype_).reshape(shape)
        return out if device == "cpu" else out.to(device)

    def walk(value):
        if isinstance(value, dict):
            if len(value) == 1 and "__tensor__" in value:
                return tensor(value["__tensor__"])
            if len(value) == 1 and "__meta__" in value:
                return meta(value["__meta__"])
            if len(value) == 1 and "__refused__" in value:
                raise Refused(_cut(str(value["__refused__"]), 200))
            return {_cut(k): walk(v) for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v) for v in value]
        if isinstance(value, str):
            return _cut(value)
        return value

    try:
        return walk(header)
    except RecursionError:
        raise Malformed("an answer nested too deep") from None


def _cut(text: str, limit: int = MAX_STRING) -> str:
    """`text`, at most `limit` characters: the end is replaced by a note of how much was cut."""
    if len(text) <= limit:
        return text
    keep = limit - 40
    return f"{text[:keep]} [... {len(text) - keep} more characters cut]"
