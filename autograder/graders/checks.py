"""Assertions whose messages a student can act on.

Each helper fails with a plain AssertionError whose text says what was
expected and what came back. The comparisons run in the trusted grading
process on tensors read back from the student process.
"""
from __future__ import annotations

import functools

import pytest
import torch


def points(points, aspect):
    """Mark a grader test with what it is worth and the aspect it checks (shape, values, mask, ...):
    `@points(3, "mask")`. The release step reads these markers from the source, so both stay literals."""
    return pytest.mark.points(points=points, aspect=aspect)


_notes: list[str] = []


def note(text):
    """Say something of a check that passes (e.g. that it inherits a fault graded elsewhere); shown as its message."""
    _notes.append(text)


def take_notes() -> str:
    """The notes of the check that just ran, and forget them (autograder/grade/plugin.py)."""
    text = "\n".join(dict.fromkeys(_notes))  # each note once, in order
    _notes.clear()
    return text


#: Asked when the check runs (a string condition: pytest evaluates it in the grader module, which imports torch),
#: in the process that runs it: never in the grader server, which imports the graders and then forks a grading.
#: Asked there, at import, torch's question would start CUDA or NVML in the server before its forks.
needs_cuda = pytest.mark.skipif("not torch.cuda.is_available()", reason="needs CUDA (none on this machine)")


def needs_student_cuda(student):
    """Skip a CUDA check where CUDA runs for the grader but not in the confined student process (device nodes
    its uid may not open, say), as that process found before any student code ran: the machine's failure, not
    the student's. As on a machine with no GPU, its points count as the other checks of its module."""
    why = student.cuda_problem()
    if why:
        pytest.skip(f"needs CUDA in the student process, where it does not start on this machine: {why}")


def describe(value):
    """A short description of a value that came back: "float32 tensor (2, 3)"."""
    if isinstance(value, torch.Tensor):
        from autograder.sandbox.remote import describe_tensor

        return describe_tensor(value)
    if isinstance(value, dict) and "__unsupported__" in value:
        return f"an object of type {value['__unsupported__']}"
    if isinstance(value, list):
        return f"a sequence of {len(value)} items"
    from autograder.sandbox.remote import RemoteModule

    if isinstance(value, RemoteModule):  # a module built in the student process: the student's name for it
        return f"a {value.name} (built without an error)"
    return f"{type(value).__name__} {value!r}"[:120]


def tensor(value, what):
    """Check that `value` is a tensor and return it."""
    if not isinstance(value, torch.Tensor):
        raise AssertionError(f"{what}: expected a torch.Tensor, got {describe(value)}")
    return value


def pair(value, what, names=("output", "weights")):
    """Check that `value` is a 2-tuple of tensors and return it."""
    if not isinstance(value, list) or len(value) != 2:
        raise AssertionError(f"{what}: expected a tuple ({names[0]}, {names[1]}), got {describe(value)}")
    return tuple(tensor(v, f"{what}, {n}") for v, n in zip(value, names))


def shape(value, expected, what, variants=None):
    """Check the shape of `value`; `variants`, as for close(), may name the likely bug of a wrong one."""
    value = tensor(value, what)
    if tuple(value.shape) != tuple(expected):
        raise AssertionError(f"{what}: expected shape {tuple(expected)}, got {tuple(value.shape)}"
                             + likely_bug(value, variants))
    return value


def dtype(value, expected, what):
    value = tensor(value, what)
    if value.dtype != expected:
        raise AssertionError(f"{what}: expected dtype {expected}, got {value.dtype}")
    return value


def device(value, expected, what, hint=None):
    """Check that `value` is on `expected`; `hint()`, called only then, may name the likely bug."""
    value = tensor(value, what)
    if value.device.type != torch.device(expected).type:
        raise AssertionError(f"{what}: expected a tensor on {expected}, got one on {value.device}"
                             + likely_name(_ask(hint)))
    return value


def likely_name(name):
    """The "Likely bug: ..." line that names `name` (nothing for None)."""
    return f"\nLikely bug: {name}." if name else ""


def _ask(hint):
    """What `hint()` says, or None (also when asking needs the student process and that fails)."""
    from autograder.sandbox.errors import StudentError

    try:
        return hint() if hint else None
    except StudentError:
        return None


def with_hint(call, hint):
    """`call()`, a request to the student process; when the student's code raises, the error as an
    AssertionError with the "Likely bug" line of `hint(error)` (called only then; None: no line)."""
    from autograder.sandbox.errors import StudentError

    try:
        return call()
    except StudentError as exc:
        raise_with_hint(exc, hint)


def raise_with_hint(exc, hint):
    """Raise `exc`, the StudentError of a request whose student code raised, as with_hint does: as an
    AssertionError with the "Likely bug" line of `hint(exc)`, or as it is when that names nothing."""
    name = _ask(lambda: hint(exc)) if exc.kind == "raised" else None
    if not name:
        raise exc
    raise AssertionError(str(exc) + likely_name(name) + (f"\n{exc.traceback}" if exc.traceback else "")) from None


def _fmt(x):
    return f"{x:.4f}" if isinstance(x, float) else repr(x)


def likely_bug(got, variants, expected=None, atol=1e-4):
    """A "Likely bug: ..." line when `got` equals one of the known wrong variants (autograder.grade.diagnose) that
    differ from the `expected` value (equals: within `atol`, the tolerance of a check in float16, say). `variants`:
    name -> value, or a function that returns them (`lazy`), called only here, once a check has failed."""
    from autograder.grade.diagnose import match

    variants = variants() if callable(variants) else variants
    return likely_name(match(got, variants, atol=atol, expected=expected) if variants else None)


def lazy(variants):
    """`variants()` (the usual mistakes' values, name -> value), computed at the first call and kept: what a check
    passes as its `variants`, so that they are computed only where a check fails (the right value needs no
    diagnosis: computing every mistake of every case beforehand was ~6 % of a correct grading's CPU)."""
    return functools.cache(variants)


def close(got, expected, what, *, atol=None, rtol=None, variants=None):
    """Check shape, dtype and values of `got` against the trusted `expected`.

    `variants` maps the usual mistakes to what they would have produced; the
    message names the one that `got` matches (within 1e-4, or within `atol`
    where the check allows more).
    """
    got = tensor(got, what)
    if tuple(got.shape) != tuple(expected.shape):
        raise AssertionError(f"{what}: expected shape {tuple(expected.shape)}, got {tuple(got.shape)}"
                             + likely_bug(got, variants, expected))
    if got.dtype != expected.dtype:
        raise AssertionError(f"{what}: expected dtype {expected.dtype}, got {got.dtype}")
    if got.dtype == torch.bool:
        bad = got.cpu() != expected.cpu()
    else:
        if atol is None:
            atol, rtol = (1e-5, 1e-4) if expected.dtype != torch.float64 else (1e-10, 1e-8)
        rtol = 0.0 if rtol is None else rtol
        g, e = got.detach().cpu().double(), expected.detach().cpu().double()
        bad = ~((g - e).abs() <= atol + rtol * e.abs())
        bad |= torch.isnan(g) & ~torch.isnan(e)
        bad &= ~(torch.isinf(e) & (g == e))
    bad = bad.cpu()
    if bad.any():
        index = tuple(int(i) for i in bad.nonzero()[0])
        count = int(bad.sum())
        g = got.detach().cpu()[index].item()
        e = expected.detach().cpu()[index].item()
        where = f" at index {list(index)}" if index else ""
        raise AssertionError(f"{what}: expected {_fmt(e)}{where}, got {_fmt(g)} "
                             f"({count} of {got.numel()} entries differ)"
                             + likely_bug(got, variants, expected, atol=max(atol or 0.0, 1e-4)))
    return got


def unchanged(after, before, what, variants=None):
    """Check that an input tensor came back as it was sent; `variants` may name how it was changed."""
    after = tensor(after, what)
    if after.shape != before.shape or not torch.equal(after, before):
        raise AssertionError(f"{what} was modified in place; leave the inputs untouched (compute new tensors "
                             "with out-of-place operations)" + likely_bug(after, variants))


#: How a bool mask is drawn in a message: one mark per (query, key), a line per query (mask_lines).
MAY_ATTEND, BLOCKED = "✓", "·"
MASK_LEGEND = f"{MAY_ATTEND} may attend, {BLOCKED} blocked"


def mask_lines(mask):
    """A small 2-D bool mask drawn a line per query row: "✓ · · ·" (✓ may attend, · blocked)."""
    return [" ".join(MAY_ATTEND if v else BLOCKED for v in row) for row in mask.detach().cpu().bool().tolist()]


def masks_side_by_side(expected, got, indent="    "):
    """Two small 2-D bool masks, expected beside got, under a header: lines a message can end with."""
    left, right = mask_lines(expected), mask_lines(got)
    width = max(len("expected"), *(len(line) for line in left))
    lines = [f"{'expected':<{width}}   got", *(f"{a:<{width}}   {b}" for a, b in zip(left, right))]
    lines += [f"{'':<{width}}   {b}" for b in right[len(left):]]
    return "\n".join(indent + line for line in lines)


def rows(t, decimals=4):
    """Format the rows of a small 1-D or 2-D tensor for a message (a bool one as [✓ · ·, ✓ ✓ ·]: say
    MASK_LEGEND beside it)."""
    t = t.detach().cpu()
    if t.dim() < 2:
        t = t.reshape(1, -1)
    if t.dtype == torch.bool:
        return "[" + ", ".join(mask_lines(t)) + "]"
    return "[" + ", ".join("(" + ", ".join(f"{v:.{decimals}f}" for v in row.tolist()) + ")" for row in t) + "]"


def raises(call, exc_name, what, why):
    """Check that `call()` (a request to the student process) raises `exc_name`."""
    from autograder.sandbox.errors import StudentError

    try:
        value = call()
    except StudentError as exc:
        if exc.raised(exc_name):
            return
        if exc.kind == "missing":  # nothing ran: the reason alone ("not handed in"), not "expected ..., got" it
            raise
        got = f"{exc}" if exc.kind != "raised" else f"{exc.exc_type}"
        raise AssertionError(f"{what}: expected {exc_name} ({why}), got {got}") from None
    if isinstance(value, tuple):
        value = value[0]
    raise AssertionError(f"{what}: expected {exc_name} ({why}), but it returned {describe(value)}")
