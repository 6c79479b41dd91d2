"""Blame the module that is wrong, once: does a failing attention module only inherit a fault of its parts?

A student's CausalAttention, StackedMultiHeadAttention and MultiHeadAttention
may call the student's own `scaled_dot_product_attention` (attention.py),
`split_heads` / `merge_heads` (heads.py) and `causal_mask` (masks.py). A bug
in one of those is graded in its own module; it must not cost every MHA
check again. So when an MHA value check fails, the trusted process runs the
reference *wiring* of that module (projections, split, mask, attention,
merge, output projection, as in solutions/mha.py) with the student's module
weights, but sends some steps to the student process as requests to the
student's own functions (tensors in, tensors out; no instructor code ever
runs there). If the student's output equals such a composition, and that
composition differs from the reference, the module is right given its parts:
the check passes with a note that names the part to blame. Otherwise the
module has a fault of its own and the check fails as before.

A composition that explains the output is not yet evidence that the module is
right: a part whose fault leaves the module nothing to compute (a mask that
blocks every key, so every output is NaN; an attention that returns zeros)
would excuse a module that computes nothing. So the verdict is confirmed by
running the student's module once more with the blamed parts stood in for
(sandbox/standin.py, below): given working parts, it must give the
reference's output.

Shapes: x (B, T, d_in); q, k, v (B, T, d_out) per head (CausalAttention) or
(B, H, T, head_dim) after the split (MultiHeadAttention).
"""
from __future__ import annotations

import itertools
import re

import torch
import torch.nn.functional as F

from autograder.sandbox import standin
from autograder.sandbox.errors import StudentError
from solutions import attention as ref_attention
from solutions import heads as ref_heads
from solutions import masks as ref_masks

# part -> (student module, function), for the messages and the requests
PARTS = {
    "attention": ("attention", "scaled_dot_product_attention"),
    "mask": ("masks", "causal_mask"),
    "split": ("heads", "split_heads"),
    "merge": ("heads", "merge_heads"),
}
REFERENCE = {
    "attention": ref_attention.scaled_dot_product_attention,
    "mask": ref_masks.causal_mask,
    "split": ref_heads.split_heads,
    "merge": ref_heads.merge_heads,
}
USED_BY = {
    "CausalAttention": ("attention", "mask"),
    "StackedMultiHeadAttention": ("attention", "mask"),
    "MultiHeadAttention": ("attention", "mask", "split", "merge"),
}


class _Broken(Exception):
    """A student part raised or returned something unusable: no composition with it."""


class Parts:
    """The four steps, each either the reference's (run here) or the student's (a request to its process)."""

    def __init__(self, student, use):
        self.student, self.use = student, set(use)

    def _step(self, part, *args):
        """Run step `part`: the reference's here, or the student's function in its process; a tensor."""
        if part not in self.use:
            out = REFERENCE[part](*args)
        else:
            module, name = PARTS[part]
            try:
                out, _ = self.student.call(module, name, *args)
            except StudentError as exc:
                raise _Broken(str(exc)) from None
        if part == "attention" and isinstance(out, (list, tuple)) and out:
            out = out[0]  # (output, weights)
        if not isinstance(out, torch.Tensor):
            raise _Broken(f"{PARTS[part][1]} returned no tensor")
        return out

    def attention(self, q, k, v, mask):
        return self._step("attention", q, k, v, mask)

    def mask(self, T):
        return self._step("mask", T)

    def split(self, x, H):
        return self._step("split", x, H)

    def merge(self, x):
        return self._step("merge", x)


def _linear(params, name, x):
    return F.linear(x, params[f"{name}.weight"], params.get(f"{name}.bias"))


def _causal(params, x, parts, prefix=""):
    q, k, v = (_linear(params, f"{prefix}W{p}", x) for p in "qkv")  # (B, T, d_out) each
    return parts.attention(q, k, v, parts.mask(x.shape[1]).to(x.device))  # (B, T, d_out)


def _stacked(params, x, parts, num_heads):
    return torch.cat([_causal(params, x, parts, f"heads.{h}.") for h in range(num_heads)], dim=-1)  # (B, T, H*d_out)


def _fused(params, x, parts, num_heads):
    q, k, v = (parts.split(_linear(params, f"W{p}", x), num_heads) for p in "qkv")  # (B, H, T, head_dim)
    context = parts.attention(q, k, v, parts.mask(x.shape[1]).to(x.device))  # (B, H, T, head_dim)
    return _linear(params, "Wo", parts.merge(context))  # (B, T, d_out)


def _wiring(name, params, num_heads):
    if name == "CausalAttention":
        return lambda x, parts: _causal(params, x, parts)
    if name == "StackedMultiHeadAttention":
        return lambda x, parts: _stacked(params, x, parts, num_heads)
    return lambda x, parts: _fused(params, x, parts, num_heads)


def _num_heads(name, params, args, kwargs):
    if name == "StackedMultiHeadAttention":
        return len({key.split(".")[1] for key in params if key.startswith("heads.")})
    if name == "MultiHeadAttention":
        return kwargs.get("num_heads", args[4] if len(args) > 4 else None)
    return 1


def _close(a, b):
    """The same tensor up to rounding: NaN where the other has NaN, and the same infinities, count as equal (a
    fault of a part that makes NaN, say a row whose every key is blocked, is inherited like any other)."""
    return (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.shape == b.shape
            and bool(torch.allclose(a.double(), b.double(), atol=1e-4, rtol=1e-4, equal_nan=True)))


def inherited_from(student, remote, x, got) -> list[str] | None:
    """The student's parts that explain `got` (the output of `remote` for `x`, eval mode), or None.

    None: no composition of the reference wiring with some of the student's
    parts gives `got` (the module has a fault of its own), or the student's
    parts agree with the reference's (then nothing is inherited).
    """
    name = getattr(remote, "name", None)
    if name not in USED_BY or not isinstance(got, torch.Tensor) or got.is_meta:
        return None
    wiring = _student_wiring(remote, x.dtype)
    if wiring is None:
        return None
    run, _ = wiring
    try:
        with torch.no_grad():
            reference = run(x, Parts(student, ()))
    except (KeyError, RuntimeError, ValueError, TypeError):
        return None  # the student's module does not have the reference's parameters: not this question
    if _close(got, reference):
        return None
    parts = USED_BY[name]
    for size in range(1, len(parts) + 1):
        for use in itertools.combinations(parts, size):
            try:
                with torch.no_grad():
                    composed = run(x, Parts(student, use))
            except (_Broken, KeyError, RuntimeError, ValueError, TypeError):
                continue
            if _close(got, composed) and not _close(composed, reference):
                return list(use)
    return None


def describe(parts) -> str:
    """'scaled_dot_product_attention (attention.py) and causal_mask (masks.py)'."""
    return " and ".join(f"{PARTS[p][1]} ({PARTS[p][0]}.py)" for p in parts)


def note(remote, parts) -> str:
    """What the report says of a check whose failure is inherited."""
    modules = sorted({PARTS[p][0] for p in parts})
    return (f"Your {remote.name} is right given its parts; it inherits the fault of your {describe(parts)}: "
            f"see the {' and '.join(modules)} checks, where those points are lost (once).")


# -- a part that crashes -----------------------------------------------------------------------------------
# When the module raises inside one of the student's parts (merge_heads without .contiguous(), say), the module
# is run again with that part stood in for: in the student process, a stand-in answers the reference's output
# for exactly the inputs the reference wiring gives that part here, with the student's other parts, and for no
# other input (autograder/sandbox/standin.py seals each answer with its input). The module then passes a check
# only if its output is right given a working part; the crash is charged in the part's own module, once.
_FRAME = re.compile(r'File "([^"\n]+)", line (\d+), in (\S+)')


def crashed_part(error, module, name):
    """(part, line) when `error` (a StudentError) was raised inside the student's part called by the module
    `name` of `module`.py: the frame right after the module's own last one is that part's function, and `line`
    is where in the part's file it raised. None otherwise."""
    if not isinstance(error, StudentError) or error.kind != "raised":
        return None
    frames = _FRAME.findall(error.traceback or "")
    own = [i for i, (file, _, _) in enumerate(frames) if file == f"{module}.py"]
    if not own or own[-1] + 1 >= len(frames):
        return None
    file, _, function = frames[own[-1] + 1]
    for part in USED_BY.get(name, ()):
        if (file, function) == (f"{PARTS[part][0]}.py", PARTS[part][1]):
            line = next(int(n) for f, n, _ in reversed(frames) if f == file)
            return part, line
    return None


class _Recording(Parts):
    """The student's parts in `use`, the reference's for the others; the calls of the `stood_in` parts (reference
    steps) sealed with their arguments, for their stand-ins."""

    def __init__(self, student, use, stood_in):
        super().__init__(student, use)
        self.stood_in, self.answers = set(stood_in), {}

    def _step(self, part, *args):
        if part in self.stood_in:
            self.answers.setdefault(part, []).append(standin.seal(PARTS[part], args, {}, REFERENCE[part](*args)))
        return super()._step(part, *args)


def _specs(answers):
    return [{"module": PARTS[part][0], "name": PARTS[part][1], "answers": sealed} for part, sealed in answers.items()]


def _student_wiring(remote, dtype):
    """(the reference wiring of `remote`'s module with its own weights read back in `dtype`, those weights), or
    None when they cannot be read or give no number of heads."""
    try:
        state = remote.state()
    except StudentError:
        return None
    params = {k: v.detach().to(dtype) for k, v in state.get("parameters", {}).items()}
    num_heads = _num_heads(remote.name, params, getattr(remote, "args", ()), getattr(remote, "kwargs", {}))
    return (_wiring(remote.name, params, num_heads), params) if num_heads else None


def with_stand_ins(remote, x, parts, call):
    """`call(target, stand_ins)`: the forward of the student's module `remote` (or of a copy built again, when
    the mask is stood in for: the contract builds its buffer in the constructor) on `x`, with the student's
    `parts` stood in for by the reference's answers to exactly the inputs the reference wiring gives them here
    (with the student's other parts); (its value, the reference wiring's own output), or None when the wiring
    or the copy cannot be made."""
    name = remote.name
    wiring = _student_wiring(remote, x.dtype)
    if wiring is None:
        return None
    run, params = wiring
    recording = _Recording(remote.sandbox, [p for p in USED_BY[name] if p not in parts], parts)
    try:
        with torch.no_grad():
            expected = run(x, recording)
        target = remote
        if "mask" in parts:  # a copy built with the stand-in, holding the module's weights, where they are
            args, kwargs = getattr(remote, "args", ()), getattr(remote, "kwargs", {})
            built = _construction(name, args, kwargs)
            if built is None:
                return None
            recording.answers.setdefault("mask", []).extend(built)
            target = remote.sandbox.new(remote.module, name, *args, stand_ins=_specs({"mask": built}), **kwargs)
            first = next(iter(params.values()), None)
            if first is not None:
                target.to(device=first.device.type, dtype=first.dtype)
            target.load(params)
        return call(target, _specs(recording.answers)), expected
    except (_Broken, StudentError, KeyError, RuntimeError, ValueError, TypeError, standin.NoAnswer):
        return None


def _construction(name, args, kwargs):
    """The sealed answer of causal_mask(context_length), the contract's mask buffer, for a constructor."""
    context_length = kwargs.get("context_length", args[2] if len(args) > 2 else None)
    if not isinstance(context_length, int) or isinstance(context_length, bool):
        return None
    return [standin.seal(PARTS["mask"], (context_length,), {}, REFERENCE["mask"](context_length))]


def confirmed(remote, x, parts):
    """Whether the student's module is right given working `parts` (the parts inherited_from blames): run again
    on `x` with those parts stood in for, it gives the reference's output. So a part whose fault leaves the
    module nothing to compute (a mask that blocks every key, an attention that returns zeros) cannot excuse a
    module that computes nothing."""
    again = with_stand_ins(remote, x, parts, lambda target, specs: target(x, stand_ins=specs)[0])
    return again is not None and _close(*again)


def note_crash(name, part, line):
    """What the report says of a check graded with a stand-in for the student's crashing part."""
    module, function = PARTS[part]
    return (f"Your {name} crashed inside your {function} ({module}.py, line {line}): graded as if {function} "
            f"worked (the grader stood in for it, answering the inputs it should get); that fault costs points in "
            f"the {module} checks only.")


def stand_in_forward(remote, x, error, call):
    """`call(target, stand_ins)`: the forward on `x` of `remote` (or of its copy: with_stand_ins) again, with
    the student's part that raised `error` stood in for; (its value, the note, that part), or None when the
    error is not a crash inside a part, or no stand-in helps (the student's other parts break too, or the
    module gives the part other inputs than the reference wiring does)."""
    crashed = crashed_part(error, remote.module, remote.name)
    if crashed is None:
        return None
    part, line = crashed
    again = with_stand_ins(remote, x, [part], call)
    return None if again is None else (again[0], note_crash(remote.name, part, line), part)


def stand_in_construction(module, name, args, kwargs, error):
    """The stand-ins that build the module `name` when its constructor raised `error` inside the student's
    causal_mask (the contract's mask buffer, causal_mask(context_length)), and the note; None otherwise."""
    crashed = crashed_part(error, module, name)
    built = _construction(name, args, kwargs) if crashed is not None and crashed[0] == "mask" else None
    return None if built is None else (_specs({"mask": built}), note_crash(name, "mask", crashed[1]))
