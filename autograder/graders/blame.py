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

A part can also be wrong in a way that no composition explains, because the
module cannot use what it returns (a float mask that the module inverts with
~, an attention that returns (weights, output)), or because the eval-mode
wiring never sees it (an attention that applies its dropout module to the
output). Then the student's parts that answer the inputs the reference wiring
gives them otherwise than the reference does are stood in for, and the module
so run decides (faulty_parts, below): it is right if it gives the reference's
output, and a training-mode forward with the attention stood in for shows
whether its own dropout is right.

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
    fault of a part that makes NaN, say a row whose every key is blocked, is inherited like any other). A meta
    tensor has no values: two are the same when their shapes are."""
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and (a.is_meta or b.is_meta):
        return a.is_meta and b.is_meta and a.shape == b.shape
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


# -- a part whose answer the module cannot use, or whose dropout is wrong ----------------------------------------
# A part can be wrong in a way no composition explains: a causal_mask that returns a float mask, which the module's
# own `~mask` (or the reference attention's) refuses; a scaled_dot_product_attention that returns (weights, output),
# whose "output" the module's merge and Wo cannot take; a dropout applied in the wrong place, which the eval-mode
# wiring never sees. The module then raises, or its output has another shape, or its dropout is wrong, and the
# part's own checks charge that fault already. Whether the module itself is right is decided as the crash of a part
# is: the student's module is run again with the student's faulty parts stood in for (their reference answers,
# sealed with the inputs the reference wiring gives them), and it must give the reference's output.
DROPOUT_PATTERN_SEED = 5


def _same(student, reference):
    """A part's answer equals the reference's: the same structure, dtypes and shapes, and close values (a meta
    tensor has none)."""
    if isinstance(reference, torch.Tensor):
        return (isinstance(student, torch.Tensor) and student.dtype == reference.dtype
                and student.shape == reference.shape and (reference.is_meta or _close(student, reference)))
    return (isinstance(student, (list, tuple)) and len(student) == len(reference)
            and all(_same(s, r) for s, r in zip(student, reference)))


class _Probe(Parts):
    """The reference wiring, asking at each part's first step whether the student's function answers those inputs
    as the reference does (the attention also with a dropout module that multiplies the weights by a fixed
    pattern); the parts that do not are `faulty`."""

    def __init__(self, student):
        super().__init__(student, ())
        self.asked, self.faulty = set(), set()

    def _step(self, part, *args):
        if part not in self.asked:
            self.asked.add(part)
            if not self._answers_as_reference(part, args):
                self.faulty.add(part)
        return super()._step(part, *args)

    def _answers_as_reference(self, part, args):
        module, name = PARTS[part]
        calls = [((), REFERENCE[part](*args))]
        if part == "attention" and not args[0].is_meta:
            _, weights = REFERENCE[part](*args)  # (..., L, S)
            generator = torch.Generator().manual_seed(DROPOUT_PATTERN_SEED)
            pattern = (torch.rand(weights.shape, generator=generator) < 0.5).to(weights) * 2.0  # weights' device
            dropped = REFERENCE[part](*args, dropout=lambda w: w * pattern)
            calls.append(((("dropout", {"__pattern_dropout__": pattern}),), dropped))
        for kwargs, expected in calls:
            try:
                got, _ = self.student.call(module, name, *args, **dict(kwargs))
            except StudentError:
                return False
            if not _same(got, expected):
                return False
        return True


def faulty_parts(remote, x) -> list[str]:
    """The student's parts that `remote`'s module may call whose answers to the inputs the reference wiring gives
    them for `x` (with the module's own weights) are not the reference's: another value, dtype, shape or order,
    an error, or (attention) a dropout module applied otherwise than to the weights; [] when none is, or the
    wiring cannot be made. Asked once per module (`remote.faulty_parts`): a check that runs it on several inputs
    stands in for the same parts each time."""
    name = getattr(remote, "name", None)
    if name not in USED_BY:
        return []
    if getattr(remote, "faulty_parts", None) is None:
        remote.faulty_parts = _faulty_parts(remote, x)
    return remote.faulty_parts


def _faulty_parts(remote, x):
    wiring = _student_wiring(remote, x.dtype)
    if wiring is None:
        return []
    run, _ = wiring
    probe = _Probe(remote.sandbox)
    try:
        with torch.no_grad():
            run(x, probe)
    except (KeyError, RuntimeError, ValueError, TypeError):
        return []
    return [p for p in USED_BY[remote.name] if p in probe.faulty]


def with_working_parts(remote, x, call, output=lambda value: value):
    """`call(target, stand_ins)` (as for with_stand_ins) with the smallest set of the student's faulty parts stood
    in for that makes it run, and give the reference's output where one does; (its value, those parts, whether
    `output(value)` is the reference wiring's output for `x`), or None when no set of them makes it run (or none is
    faulty)."""
    faulty = faulty_parts(remote, x)
    wiring = _student_wiring(remote, x.dtype) if faulty else None
    if wiring is None:
        return None
    try:
        with torch.no_grad():
            reference = wiring[0](x, Parts(remote.sandbox, ()))
    except (KeyError, RuntimeError, ValueError, TypeError):
        return None
    ran = None
    for size in range(1, len(faulty) + 1):
        for parts in itertools.combinations(faulty, size):
            again = with_stand_ins(remote, x, list(parts), call)
            if again is None:
                continue
            right = _close(output(again[0]), reference)
            if right:
                return again[0], list(parts), True
            ran = ran or (again[0], list(parts), False)
    return ran


def right_given_working_parts(remote, x):
    """The student's faulty parts given working versions of which (stood in for) the module gives the reference's
    output for `x`, or None: the evidence that the module is right by itself and its failure is theirs alone."""
    again = with_working_parts(remote, x, lambda target, stand_ins: target(x, stand_ins=stand_ins)[0])
    return again[1] if again is not None and again[2] else None


def stand_in_faulty(remote, x, call):
    """`call(target, stand_ins)` once more after the forward of `remote` on `x` raised with the student's parts,
    with the faulty ones stood in for (with_working_parts: the output of `call` is (value, args after)); (its value,
    the note, those parts), or None when none is faulty or standing in for them does not make it run."""
    again = with_working_parts(remote, x, call, output=lambda value: value[0] if value else None)
    return None if again is None else (again[0], note_unusable(remote.name, again[1]), again[1])


def stand_in_dropout(remote, x, call):
    """`call(target, stand_ins)` with the student's attention stood in for, when its dropout is wrong (faulty_parts
    asks it with a dropout module of a fixed pattern): the stand-in applies the module's own dropout module to the
    reference's weights (autograder/sandbox/standin.py), so a training-mode forward is graded given an attention
    that drops the weights; its value, or None when the attention is right, or the stand-in does not help."""
    if "attention" not in faulty_parts(remote, x):
        return None
    again = with_stand_ins(remote, x, ["attention"], call)
    return None if again is None else again[0]


def _it(parts):
    return "it" if len(parts) == 1 else "them"


def _they(parts):
    return "it" if len(parts) == 1 else "they"


def _functions(parts):
    return " and ".join(PARTS[p][1] for p in parts)


def _modules(parts):
    return " and ".join(sorted({PARTS[p][0] for p in parts}))


def note_unusable(name, parts) -> str:
    """What the report says of a check graded with stand-ins for `parts`, whose answers the module could not use."""
    return (f"Your {name} raised with what your {describe(parts)} returned, and runs with the grader standing in "
            f"for {_it(parts)} (answering the inputs {_they(parts)} should get): graded as if {_functions(parts)} "
            f"worked; that fault costs points in the {_modules(parts)} checks only.")


def note_dropout(name) -> str:
    """What the report says of a dropout check passed given an attention whose dropout works."""
    return (f"Your {name} applies dropout right given a working scaled_dot_product_attention (attention.py): run "
            "again in training mode with the grader standing in for it (the reference's weights, dropped by your "
            "module's own dropout), its dropout acts on the attention weights; the fault of your "
            "scaled_dot_product_attention's dropout costs points in the attention checks only.")
