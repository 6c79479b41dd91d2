"""The answers' format (autograder/sandbox/wire.py): what a frame costs the trusted side is bounded by its size.

Each bomb below is a frame that the old format (torch.save read back with
torch.load(weights_only=True)) decoded at a cost far above its size; the
tests show first that the bomb is real (the old reader pays for it), then
that `wire.decode` refuses it at once. The student side's `encode` is also
checked to carry every legitimate answer unchanged, and requests (the
other way) to arrive as the grader sent them: views, shared storages,
dtypes, devices and tuples.
"""
from __future__ import annotations

import io
import json
import struct
import subprocess
import sys
import time
import tracemalloc
import zipfile

import pytest
import torch

from autograder.sandbox import client, wire
from tests.conftest import ROOT, once_per_run


def frame(header, payload=b""):
    """A frame with a hand-written header, as a hostile student process would write it."""
    body = json.dumps(header).encode()
    return struct.pack(">Q", len(body)) + body + payload


_COST = """
import io, struct, sys
import torch
from autograder.grade.plugin import peak_mib
from autograder.sandbox import wire
stream = sys.stdin.buffer
while header := stream.read(9):
    reader, size = header[:1], struct.unpack(">Q", header[1:])[0]
    data = stream.read(size)
    base = peak_mib()
    try:
        if reader == b"o":
            torch.load(io.BytesIO(data), weights_only=True)
        else:
            wire.decode(data)
        outcome = "decoded"
    except ValueError as exc:
        outcome = type(exc).__name__
    print(outcome, peak_mib() - base, flush=True)
"""


def decode_costs(*readings):
    """[(outcome, MiB)] of each reading, (data, reader: "wire" or "old"), in one fresh process, in turn: 'decoded'
    or the exception, and the growth of its peak resident memory during that reading (a process of its own, so
    that no earlier test's peak hides these: the peak only grows, so the readings that must cost nothing come
    first, and the one that must cost a lot last). One process for them all: each imports torch, ~3 s."""
    stdin = b"".join((b"o" if reader == "old" else b"w") + struct.pack(">Q", len(data)) + data
                     for data, reader in readings)
    out = subprocess.run([sys.executable, "-c", _COST], input=stdin, capture_output=True, check=True,
                         cwd=ROOT, timeout=300).stdout.decode().split()
    return [(out[i], float(out[i + 1])) for i in range(0, len(out), 2)]


# -- legitimate answers travel unchanged ------------------------------------------------
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.complex64,
                                   torch.int64, torch.int8, torch.uint8, torch.bool])
def test_a_tensor_of_every_dtype_travels_unchanged(dtype):
    t = (torch.randn(2, 3, 5) * 10).to(dtype)  # (B, T, d)
    back = wire.decode(wire.encode({"ok": True, "value": t}))["value"]
    assert back.dtype == dtype and back.shape == t.shape and torch.equal(back, t)


def test_views_transposes_and_conjugates_arrive_as_their_values():
    base = torch.randn(4, 6)
    z = torch.randn(3, 3, dtype=torch.complex64)
    for t in (base.t(), base[:, 1::2], base.expand(2, 4, 6), z.conj(), -z, torch.zeros(0, 5), torch.tensor(3.5)):
        back = wire.decode(wire.encode(t))
        assert back.shape == t.shape and torch.equal(back, t.resolve_conj().resolve_neg())


def test_containers_scalars_and_meta_tensors_travel_unchanged():
    answer = {"ok": True, "value": [torch.ones(2), (torch.zeros(3, dtype=torch.int64), None)], "n": 3,
              "x": float("nan"), "flag": False, "name": "q1", "m": torch.empty(2, 1 << 40, device="meta")}
    back = wire.decode(wire.encode(answer))
    assert back["n"] == 3 and back["x"] != back["x"] and back["flag"] is False and back["name"] == "q1"
    assert torch.equal(back["value"][0], torch.ones(2)) and back["value"][1][1] is None
    assert back["m"].device.type == "meta" and back["m"].shape == (2, 1 << 40)  # a shape, no data


def test_a_sparse_tensor_is_refused_with_a_description_of_what_came_back():
    sparse = torch.eye(3).to_sparse()
    with pytest.raises(wire.Refused, match=r"sparse_coo float32 tensor of shape \(3, 3\)"):
        wire.decode(wire.encode({"ok": True, "value": sparse}))


# -- bombs: frames whose decoding used to cost far more than their size ------------------
def deflate_bomb(numel):
    """torch.save of `numel` zeros (the zip format), its records recompressed with DEFLATE: ~1000:1."""
    raw = io.BytesIO()
    torch.save({"ok": True, "value": torch.zeros(numel)}, raw)
    bomb = io.BytesIO()
    with zipfile.ZipFile(raw) as src, zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            dst.writestr(info.filename, src.read(info))
    return bomb.getvalue()


#: 1 GiB of float64 claimed by a tensor's description, no byte of it sent
CLAIM = frame({"value": {"__tensor__": ["float64", [1 << 27], 0, 8 << 27, "cpu"]}})


@pytest.fixture(scope="module")
def fresh(tmp_path_factory):
    """The frames of this file whose cost is read in a fresh process, and those costs, name -> (outcome, MiB): all
    read in one process (`decode_costs`, ~3 s each), those that must cost nothing first, the old reader's bomb
    last; once for the whole run (`once_per_run`: the frames are the same in every worker, the tensor's values
    aside)."""
    bomb = deflate_bomb(1 << 25)  # 128 MiB of float32 zeros
    frames = {"claim": (CLAIM, "wire"), "bomb": (bomb, "wire"),
              "bomb framed": (struct.pack(">Q", len(bomb)) + bomb, "wire"),  # by a hostile process
              "tensor": (wire.encode(torch.randn(1024, 1024)), "wire"),  # 4 MiB
              "bomb, old reader": (bomb, "old")}
    costs = {name: tuple(cost) for name, cost in once_per_run(
        tmp_path_factory, "wire-costs", lambda: dict(zip(frames, decode_costs(*frames.values())))).items()}
    return {name: data for name, (data, _) in frames.items()}, costs


def test_a_deflate_bomb_is_refused_before_anything_is_inflated(fresh):
    frames, costs = fresh
    assert len(frames["bomb"]) < 1 << 19
    outcome, mib = costs["bomb, old reader"]
    assert outcome == "decoded" and mib > 100, f"expected the bomb real, the old reader inflating it, got {mib} MiB"
    assert costs["bomb"] == ("Malformed", pytest.approx(0, abs=16))
    assert costs["bomb framed"] == ("Malformed", pytest.approx(0, abs=16))


def test_a_stride_zero_tensor_costs_the_bytes_it_brought():
    big = torch.zeros(1).expand(1 << 25, 64)  # 2^31 elements over one float
    old = io.BytesIO()
    torch.save(big, old, _use_new_zipfile_serialization=False)
    assert len(old.getvalue()) < 2048  # the old format carried it in a few hundred bytes
    with pytest.raises(wire.Malformed):
        wire.decode(old.getvalue())
    # A hand-written header that claims the shape without its bytes is refused too.
    with pytest.raises(wire.Malformed, match="do not match"):
        wire.decode(frame({"value": {"__tensor__": ["float32", [1 << 25, 64], 0, 4, "cpu"]}}, b"\0" * 16))


def test_a_storage_declared_larger_than_its_frame_allocates_nothing(fresh):
    _, costs = fresh
    with pytest.raises(wire.Malformed, match="do not match"):
        wire.decode(CLAIM)
    with pytest.raises(wire.Malformed, match="do not match"):
        wire.decode(frame({"value": {"__tensor__": ["float64", [1 << 40], 0, 8 << 40, "cpu"]}}))
    assert costs["claim"] == ("Malformed", pytest.approx(0, abs=16))


@pytest.mark.parametrize("spec", [
    ["float32", [2], 0, 8],  # no device
    ["object", [2], 0, 8, "cpu"],
    ["float32", [2, -1], 0, 8, "cpu"],
    ["float32", [1] * 9, 0, 4, "cpu"],
    ["float32", [2], 4, 8, "cpu"],  # not aligned
    ["float32", [2], 0, 8, "cuda:0" if not torch.cuda.is_available() else "tpu"],
    ["float32", "2", 0, 8, "cpu"],
    ["float32", [2.0], 0, 8, "cpu"],
])
def test_a_tensor_description_out_of_format_is_refused(spec):
    with pytest.raises(wire.Malformed):
        wire.decode(frame({"value": {"__tensor__": spec}}, b"\0" * 64))


@pytest.mark.parametrize("data", [b"", b"\0" * 7, struct.pack(">Q", 99) + b"{}", frame(None)[:-1],
                                  struct.pack(">Q", 4) + b"\xff\xfe{}", frame("x")[:8] + b"[" * 100_000])
def test_a_frame_that_is_not_json_is_refused(data):
    with pytest.raises(wire.Malformed):
        wire.decode(data)


def test_every_string_is_cut_on_the_trusted_side():
    # the message bomb: 20 MB per failed check reached every report (a header now holds at most MAX_HEADER
    # bytes: the largest message that fits is cut too)
    message = "M" * 1_000_000
    back = wire.decode(frame({"ok": False, "error": {"type": "E" * 10_000, "message": message}, "K" * 9000: 1}))
    assert len(back["error"]["message"]) <= wire.MAX_STRING
    assert back["error"]["message"].endswith("more characters cut]")
    assert len(back["error"]["type"]) <= wire.MAX_STRING
    assert all(len(k) <= wire.MAX_STRING for k in back)


def test_a_tensor_costs_its_own_bytes_and_no_more(fresh):
    frames, costs = fresh
    assert len(frames["tensor"]) < 1024 * 1024 * 4 + 4096  # (1024, 1024) float32
    outcome, cost = costs["tensor"]
    assert outcome == "decoded" and cost < 16, (
        f"expected one copy of the payload, the tensor a view of it, got {cost} MiB")


# -- requests: what the grader sends arrives as it was sent -------------------------------------------
def request_round_trip(obj):
    return wire.decode_request(wire.encode_request(obj))


def test_a_request_keeps_views_strides_and_offsets():
    """The graders send non-contiguous views on purpose (merge_heads of a split's transposed output): a request
    delivers them as views with the same strides and offsets, as torch.load did, never made contiguous."""
    base = torch.arange(24.0).reshape(2, 3, 4)  # (B, T, C)
    sent = [base.transpose(1, 2), base[:, 1:], base.reshape(2, 3, 2, 2).transpose(1, 2)]  # (B, H, T, d_k)
    got = request_round_trip({"args": sent})["args"]
    for want, view in zip(sent, got):
        assert torch.equal(view, want)
        assert (view.stride(), view.storage_offset(), view.is_contiguous()) == \
            (want.stride(), want.storage_offset(), want.is_contiguous())


def test_tensors_that_share_memory_in_a_request_still_share_it():
    """Two arguments that are views of one tensor (K = V in the worked examples) arrive as views of one storage:
    writing through one shows in the other, as it would in the student's own notebook."""
    key = torch.eye(2)
    got = request_round_trip({"args": [key, key, key[0]], "other": torch.eye(2)})
    k, v, row = got["args"]
    k[0, 1] = 7.0
    assert v[0, 1] == 7.0 and row[1] == 7.0, "expected the three views to share one storage"
    k.resize_(3, 3)  # a storage of its own, as torch.load gave, not a fixed view of the frame
    assert got["other"][0, 1] == 0.0, "expected a tensor of its own to stay apart"


def test_a_request_carries_dtypes_devices_tuples_meta_tensors_and_scalars():
    sent = {"op": "to", "dtype": torch.float64, "device": torch.device("meta"), "shape": (2, (3, 4)),
            "meta": torch.empty(3, 2, device="meta").t(), "mask": torch.ones(3, 3, dtype=torch.bool).tril(),
            "empty": torch.empty(0, 5), "values": [None, True, 3, 2.5, "attention"],
            "grad": torch.ones(2, requires_grad=True)}
    got = request_round_trip(sent)
    assert got["dtype"] is torch.float64 and got["device"] == torch.device("meta")
    assert got["shape"] == (2, (3, 4)) and isinstance(got["shape"][1], tuple)
    assert (got["meta"].device.type, got["meta"].shape, got["meta"].stride()) == ("meta", (2, 3), (1, 2))
    assert got["mask"].dtype == torch.bool and torch.equal(got["mask"], sent["mask"])
    assert got["empty"].shape == (0, 5) and got["values"] == sent["values"]
    assert got["grad"].requires_grad and not got["mask"].requires_grad


def test_a_request_refuses_what_it_cannot_carry():
    """A grader that sends something the format has no place for fails at once, in the trusted process."""
    with pytest.raises(TypeError, match="cannot carry a object"):
        wire.encode_request({"args": [object()]})
    with pytest.raises(TypeError, match="cannot carry a sparse"):
        wire.encode_request({"args": [torch.eye(2).to_sparse()]})
    with pytest.raises(TypeError, match="keys must be strings"):
        wire.encode_request({"args": {1: 2}})


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (none on this machine)")
def test_a_request_keeps_a_cuda_view_on_its_device_and_sharing_its_storage():
    base = torch.arange(24.0, device="cuda").reshape(2, 3, 4)
    view, row = request_round_trip({"args": [base.transpose(1, 2), base[0, 1]]})["args"]
    assert view.device == base.device and torch.equal(view.cpu(), base.transpose(1, 2).cpu())
    assert view.stride() == (12, 1, 4) and view.untyped_storage().data_ptr() == row.untyped_storage().data_ptr()


# -- a header is bounded before it is parsed (issue 32) -----------------------------------------------------------
def decode_time_and_peak(data):
    """(outcome, CPU seconds, MiB of extra peak Python memory) of wire.decode(data) in this process: 'decoded' or
    the exception's name."""
    tracemalloc.start()
    start = time.process_time()
    try:
        wire.decode(data)
        outcome = "decoded"
    except ValueError as exc:
        outcome = type(exc).__name__
    seconds = time.process_time() - start
    peak = tracemalloc.get_traced_memory()[1] / (1 << 20)
    tracemalloc.stop()
    return outcome, seconds, peak


def test_a_64_mib_header_of_empty_objects_is_refused_at_once():
    """The JSON bomb: a 64 MiB header [{},{},...] is well-formed, and json.loads made ~22 million dicts of it
    (over 3 GB and 19 to 83 s of the grader's CPU); it is refused before it is parsed."""
    size = client.MAX_ANSWER - 8  # the largest answer the grader reads
    header = b"[" + b"{}," * ((size - 2) // 3)
    header = header[:-1] + b"]" + b" " * (size - len(header))  # still JSON: whitespace may follow
    data = struct.pack(">Q", len(header)) + header
    del header
    outcome, seconds, peak = decode_time_and_peak(data)
    assert outcome == "Malformed", f"expected the 64 MiB header to be refused, got {outcome}"
    assert seconds < 20, f"expected milliseconds to refuse it, got {seconds:.1f} s of CPU"
    assert peak < 256, f"expected under 256 MiB of extra memory to refuse it, got {peak:.0f} MiB"


def test_a_header_under_the_size_cap_with_too_many_values_is_refused():
    header = b"[" + b"0," * ((wire.MAX_HEADER - 2) // 2 - 1) + b"0]"  # ~500k values in just under 1 MiB
    assert len(header) <= wire.MAX_HEADER and json.loads(header)[-1] == 0  # under the size cap, and JSON
    with pytest.raises(wire.Malformed, match=f"at most {wire.MAX_VALUES}"):
        wire.decode(struct.pack(">Q", len(header)) + header)


def test_a_large_real_answer_is_far_below_both_caps_and_decodes():
    """A state answer of 300 named tensors and an error message and traceback at the student process's cuts
    (2000 and 4000 characters), written in the characters the value count counts and the non-ASCII ones that
    JSON escapes: under a tenth of each cap."""
    params = {f"blocks.{i}.heads.{i % 8}.proj.weight": torch.randn(4, 3) for i in range(300)}  # (d_out, d_in)
    error = {"type": "ValueError", "mro": ["ValueError", "Exception", "BaseException", "object"],
             "message": ("{[:,]}é" * 1000)[:2000], "traceback": ("✓,{:[" * 1000)[:4000]}
    data = wire.encode({"ok": True, "parameters": params, "parameter_names": list(params), "error": error})
    (size,) = struct.unpack(">Q", data[:8])
    values = sum(data[8:8 + size].count(c) for c in (b"{", b"[", b",", b":"))
    assert size < wire.MAX_HEADER // 10, f"expected a header under a tenth of the cap, got {size} bytes"
    assert values < wire.MAX_VALUES // 10, f"expected under a tenth of the values cap, got {values}"
    back = wire.decode(data)
    assert list(back["parameters"]) == list(params) and back["error"] == error
    assert all(torch.equal(back["parameters"][k], v) for k, v in params.items())


def test_tensors_that_claim_the_same_bytes_twice_are_refused():
    """encode gives each tensor bytes of its own: a frame whose tensors share theirs would, put back on a GPU,
    cost one copy per tensor (thousands of copies of one 64 MiB block)."""
    block = {"__tensor__": ["float32", [16], 0, 64, "cpu"]}
    assert wire.decode(frame({"value": [block]}, b"\0" * 64))["value"][0].shape == (16,)  # once: fine
    with pytest.raises(wire.Malformed, match="in a payload of 64"):
        wire.decode(frame({"value": [block, block]}, b"\0" * 64))


def test_decoding_an_answer_counts_against_the_calls_deadline(monkeypatch):
    """An answer that arrives in time but takes past the deadline to decode is a timeout (Sandbox.exchange)."""
    body = wire.encode({"ok": True})
    decode = wire.decode
    monkeypatch.setattr(wire, "decode", lambda data: (time.sleep(0.3), decode(data))[1])  # a slow decoding
    assert client._decoded([body], time.monotonic() + 30) == [{"ok": True}]  # in time: the answer
    with pytest.raises(TimeoutError):
        client._decoded([body], time.monotonic() + 0.2)
