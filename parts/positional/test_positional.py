"""Hidden graders for positional.py: sinusoidal_encoding and PositionalEncoding."""
import math

import torch

from autograder.graders import checks
from autograder.graders.checks import needs_cuda, needs_student_cuda, points
from autograder.graders.common import on_device_error, randn
from autograder.sandbox.errors import StudentError
from parts.positional import diagnose
from solutions import positional as ref

CASES = [(1, 2), (4, 6), (10, 16), (50, 64)]  # (seq_len, d_model), smallest first


def table(student, seq_len, d_model):
    value, _ = student.call("positional", "sinusoidal_encoding", seq_len, d_model)
    return checks.tensor(value, f"sinusoidal_encoding({seq_len}, {d_model})")


def build(student, *args, **kwargs):
    return student.new("positional", "PositionalEncoding", *args, **kwargs)


# One fault, one charge, within the module too: a PositionalEncoding that holds and adds the table of the
# student's own sinusoidal_encoding is right given it. Its checks then pass with a note; the table's fault is
# charged by the sinusoidal_encoding checks, once.
INHERITED = ("Your PositionalEncoding is right given your sinusoidal_encoding: it inherits that function's fault; "
             "see the sinusoidal_encoding checks, where those points are lost (once).")


def own_table(student, max_len, d_model):
    """The student's own sinusoidal_encoding(max_len, d_model), when it is a (max_len, d_model) tensor unlike the
    reference's table (values or dtype); None otherwise."""
    try:
        value, _ = student.call("positional", "sinusoidal_encoding", max_len, d_model)
    except StudentError:
        return None
    expected = ref.sinusoidal_encoding(max_len, d_model)
    if not isinstance(value, torch.Tensor) or value.is_meta or tuple(value.shape) != tuple(expected.shape):
        return None
    if value.dtype == expected.dtype and torch.allclose(value.double(), expected.double(), atol=1e-5):
        return None
    return value.cpu()


def unless_own_table(student, got, expected, failure, max_len=20, d_model=8):
    """Raise `failure`, unless `got` is `expected(table)` for the student's own table (own_table): then note it."""
    table = own_table(student, max_len, d_model)
    if table is not None and isinstance(got, torch.Tensor) and not got.is_meta:
        want = expected(table)
        if (got.shape == want.shape and got.dtype == want.dtype
                and torch.allclose(got.cpu().double(), want.double(), atol=1e-5, rtol=1e-4, equal_nan=True)):
            checks.note(INHERITED)
            return
    raise failure


def in_default_dtype(got, what):
    """Check that the table `got` is in torch's default dtype; a float64 one gets the why and the fix."""
    default = torch.get_default_dtype()
    if isinstance(got, torch.Tensor) and got.dtype != default and got.is_floating_point():
        name, want = (str(d).replace("torch.", "") for d in (got.dtype, default))
        raise AssertionError(
            f"{what}: expected dtype {default}, got {got.dtype}" + checks.likely_name(
                f"your table is {name}: build it in torch's default dtype ({want}), or x + pe promotes a {want} x "
                f"to {name} in PositionalEncoding"))
    return checks.dtype(got, default, what)


@points(1, "shape")
def test_encoding_shape_and_dtype(student):
    """sinusoidal_encoding(T, d) is a float32 tensor (T, d)"""
    got = checks.shape(table(student, 6, 8), (6, 8), "sinusoidal_encoding(6, 8)")
    in_default_dtype(got, "sinusoidal_encoding(6, 8)")


@points(2, "worked-example")
def test_encoding_first_positions(student):
    """position 0 is (0, 1, 0, 1, ...) and position 1 starts (sin 1, cos 1) = (0.8415, 0.5403)"""
    got = checks.shape(table(student, 4, 8), (4, 8), "sinusoidal_encoding(4, 8)")
    row0 = torch.tensor([0.0, 1.0] * 4)
    variants, expected = checks.lazy(lambda: diagnose.encoding_variants(4, 8)), ref.sinusoidal_encoding(4, 8)
    if not torch.allclose(got[0].double(), row0.double(), atol=1e-5):
        raise AssertionError(f"sinusoidal_encoding(4, 8)[0]: position 0 should be sin 0, cos 0, ... = "
                             f"{checks.rows(row0[None])}, got {checks.rows(got[:1])}"
                             + checks.likely_bug(got, variants, expected))
    first = torch.tensor([math.sin(1.0), math.cos(1.0)])
    if not torch.allclose(got[1, :2].double(), first.double(), atol=1e-4):
        raise AssertionError(f"sinusoidal_encoding(4, 8)[1, :2] should be (sin 1, cos 1) = {checks.rows(first[None])}, "
                             f"got {checks.rows(got[1:2, :2])}" + checks.likely_bug(got, variants, expected))


@points(2, "values")
def test_encoding_values(student):
    """PE[p, 2i] = sin(p / 10000^(2i/d)), PE[p, 2i+1] = cos(p / 10000^(2i/d))"""
    for seq_len, d_model in CASES:
        got = in_default_dtype(table(student, seq_len, d_model), f"sinusoidal_encoding({seq_len}, {d_model})")
        checks.close(got, ref.sinusoidal_encoding(seq_len, d_model),
                     f"sinusoidal_encoding({seq_len}, {d_model})",
                     variants=checks.lazy(lambda: diagnose.encoding_variants(seq_len, d_model)))


@points(1, "errors")
def test_encoding_odd_d_model_raises(student):
    """sinusoidal_encoding raises ValueError for an odd d_model"""
    checks.raises(lambda: student.call("positional", "sinusoidal_encoding", 4, 5), "ValueError",
                  "sinusoidal_encoding(4, 5)", "d_model must be even")


@points(2, "structure")
def test_module_keeps_table_as_buffer_pe(student):
    """PositionalEncoding keeps the table as a buffer named `pe` of shape (max_len, d_model)"""
    state = build(student, 8, max_len=20).state()
    if "pe" not in state["buffers"]:
        where = "a parameter" if "pe" in state["parameters"] else "not a buffer"
        raise AssertionError(f"PositionalEncoding(8, max_len=20): `pe` is {where}; register it with "
                             "self.register_buffer('pe', table) so that it moves with .to(device) (persistent=False is fine too)")
    pe = state["buffers"]["pe"]
    try:
        checks.close(pe, ref.sinusoidal_encoding(20, 8), "PositionalEncoding(8, max_len=20).pe",
                     variants=diagnose.table_variants(20, 8))
    except AssertionError as failure:
        unless_own_table(student, pe, lambda table: table, failure)


@points(2, "values")
def test_module_adds_table(student):
    """PositionalEncoding.forward(x) = x + pe[:T]"""
    x = randn(2, 5, 8)
    remote = build(student, 8, max_len=20)
    out, _ = remote(x)
    what = "PositionalEncoding(8, max_len=20) output for x (2, 5, 8)"
    out = checks.tensor(out, "PositionalEncoding output")
    try:
        dtype_of_x(remote, x, out, what)
        checks.close(out, x + ref.sinusoidal_encoding(5, 8), what,
                     variants=checks.lazy(lambda: diagnose.sum_variants(x, ref.sinusoidal_encoding(20, 8))))
    except AssertionError as failure:
        unless_own_table(student, out, lambda table: x + table[:5], failure)


def dtype_of_x(remote, x, out, what):
    """Check that the output `out` of `remote` for `x` has the dtype of x."""
    if out.dtype != x.dtype:
        raise AssertionError(f"{what}: expected dtype {x.dtype} (the dtype of x), got {out.dtype}"
                             + promoted_by_pe(remote, x.dtype, out.dtype))
    return out


def promoted_by_pe(remote, x_dtype, out_dtype):
    """The "Likely bug" line when the buffer `pe` has the dtype that x + pe was promoted to."""
    try:
        pe = remote.state()["buffers"].get("pe")
    except StudentError:
        return ""
    if not isinstance(pe, torch.Tensor) or pe.dtype != out_dtype:
        return ""
    pe_dtype, x_dtype, default = (str(d).replace("torch.", "") for d in (pe.dtype, x_dtype, torch.get_default_dtype()))
    return checks.likely_name(
        f"your buffer pe is {pe_dtype}, and x + pe promotes a {x_dtype} x to {pe_dtype}: build the table in torch's "
        f"default dtype ({default}); as a buffer it then follows the module's .to(dtype)")


@points(1, "dropout")
def test_module_dropout(student):
    """PositionalEncoding applies dropout in training mode (dropout=1.0 drops everything)"""
    remote, x = build(student, 8, max_len=20, dropout=1.0), randn(2, 5, 8)
    out, _ = remote(x, train=True)
    what = "PositionalEncoding(8, dropout=1.0) output in training mode"
    out = checks.tensor(out, "PositionalEncoding output")
    undropped = {"the dropout is never applied (your output is x + pe[:T])": x + ref.sinusoidal_encoding(5, 8)}
    try:
        dtype_of_x(remote, x, out, what)
        checks.close(out, torch.zeros(2, 5, 8), what, variants=undropped)
    except AssertionError as failure:  # all dropped, in the dtype x + the student's own table has
        unless_own_table(student, out, lambda table: torch.zeros(2, 5, 8, dtype=torch.result_type(x, table)), failure)


@points(1, "dtype")
def test_module_float64(student):
    """PositionalEncoding keeps float64 inputs in float64"""
    x = randn(2, 5, 8, dtype=torch.float64)
    remote = build(student, 8, max_len=20).to(dtype=torch.float64)
    out, _ = remote(x)
    out = checks.tensor(out, "PositionalEncoding output")
    try:
        checks.close(out, x + ref.sinusoidal_encoding(5, 8).double(),
                     "PositionalEncoding output for float64 x (2, 5, 8)", atol=1e-6, rtol=1e-6,
                     variants=checks.lazy(lambda: diagnose.sum_variants(x, ref.sinusoidal_encoding(20, 8))))
    except AssertionError as failure:
        unless_own_table(student, out, lambda table: x + table[:5].double(), failure)


@points(1, "device")
def test_module_meta(student):
    """PositionalEncoding runs on the meta device after .to('meta')"""
    remote = build(student, 8, max_len=20).to(device="meta")
    hint = table_left_behind(remote, "meta")
    out, _ = checks.with_hint(lambda: remote(randn(2, 5, 8).to("meta")), on_device_error(hint))
    out = checks.shape(checks.tensor(out, "PositionalEncoding output"), (2, 5, 8), "PositionalEncoding output on meta")
    checks.device(out, "meta", "PositionalEncoding output", hint)


def table_left_behind(remote, device):
    """A hint for a PositionalEncoding moved with .to(device) whose forward fails there or answers elsewhere:
    what its buffers say (read back from the student's module)."""
    def hint(error=None):
        buffers = remote.state()["buffers"]
        pe = buffers.get("pe")
        if not isinstance(pe, torch.Tensor):
            return (f"your table pe is not a registered buffer (it is not among the module's buffers()), so "
                    f".to({device!r}) left it where it was: keep it with self.register_buffer('pe', table)")
        if pe.device.type == torch.device(device).type:
            return (f"your buffer pe moved to {device} with the module, so forward adds a tensor made on a fixed "
                    "device instead (a table rebuilt in forward, e.g. sinusoidal_encoding(T, d_model)): add "
                    "self.pe[:T]")
        return None
    return hint


def check_device(student, device):
    """PositionalEncoding runs on `device` and matches the CPU reference (the kit's tests run this on the CPU)."""
    x = randn(2, 5, 8)
    remote = build(student, 8, max_len=20).to(device=device)
    hint = table_left_behind(remote, device)
    out, _ = checks.with_hint(lambda: remote(x.to(device)), on_device_error(hint))
    out = checks.device(checks.tensor(out, "output"), device, "PositionalEncoding output", hint).cpu()
    try:
        checks.close(out, x + ref.sinusoidal_encoding(5, 8), f"PositionalEncoding output on {device}")
    except AssertionError as failure:
        unless_own_table(student, out, lambda table: x + table[:5], failure)


@needs_cuda
@points(1, "device")
def test_module_runs_on_cuda_and_matches_cpu(student):
    """PositionalEncoding runs on CUDA and matches the CPU reference"""
    needs_student_cuda(student)
    check_device(student, "cuda")
