"""Hidden graders for mha.py: CausalAttention, StackedMultiHeadAttention, MultiHeadAttention."""
import re

import torch

from autograder.graders import checks, timing
from autograder.graders.checks import needs_cuda, needs_student_cuda, points
from autograder.graders import blame
from autograder.graders.common import (SEED_004_FUSED, SEED_004_INPUTS, SEED_004_STACKED, on_device_error,
                                       params_of, randn, seeded, where_raised)
from autograder.sandbox.errors import StudentError
from autograder.sandbox.seeding import manual_seed
from parts.mha import diagnose
from solutions import mha as ref

# Operators that multiply matrices, as torch's dispatcher sees them.
MATMUL_OPS = {
    "mm", "bmm", "addmm", "baddbmm", "addbmm", "matmul", "dot", "vdot", "mv", "addmv", "linear", "einsum",
    "scaled_dot_product_attention", "_scaled_dot_product_attention_math",
    "_scaled_dot_product_flash_attention", "_scaled_dot_product_flash_attention_for_cpu",
    "_scaled_dot_product_efficient_attention", "_scaled_dot_product_cudnn_attention",
}


def new(student, name, *args, **kwargs):
    """The student's module `name` built with these args; when its constructor crashes inside the student's
    causal_mask, built again with a stand-in for it, and a note (graders/blame.py: charged once, in masks)."""
    try:
        return student.new("mha", name, *args, **kwargs)
    except StudentError as exc:
        again = blame.stand_in_construction("mha", name, args, kwargs, exc)
        if again is None:
            raise
        stand_ins, note = again
        remote = student.new("mha", name, *args, stand_ins=stand_ins, **kwargs)
        checks.note(note)
        return remote


def build(student, name, *args, **kwargs):
    """The student's module `name`, holding the weights of the reference module built with the same args."""
    manual_seed(0)
    reference = getattr(ref, name)(*args, **kwargs).eval()
    remote = new(student, name, *args, **kwargs)
    load(remote, params_of(reference))
    return remote, reference


def load(remote, params):
    """remote.load(params); when the student's module lacks one of them, the error names the likely cause
    (what its parameters, read back from it, show)."""
    checks.with_hint(lambda: remote.load(params), lambda exc: missing_parameter_cause(lambda: remote, exc))


def structure_cause(remote, state=None, missing_name=None):
    """diagnose.structure_cause of the student's `remote` (its state, read back unless given), against the
    reference module built with the same arguments."""
    state = remote.state() if state is None else state
    try:
        with torch.random.fork_rng(devices=[]):
            reference = getattr(ref, remote.name)(*getattr(remote, "args", ()), **getattr(remote, "kwargs", {}))
    except (AttributeError, TypeError, ValueError):
        return None  # arguments the reference refuses: no contract to compare with
    return diagnose.structure_cause(state, [n for n, _ in reference.named_parameters()], missing_name)


def missing_parameter_cause(remote, exc):
    """The hint for `exc`, raised when weights were loaded into the student's module (`remote()`, asked only
    then): the cause of the absence of the parameter that the error names, or None."""
    named = re.search(r"no parameter named '([^']+)'", str(exc))
    return structure_cause(remote(), missing_name=named[1]) if named else None


def run(remote, x, **kw):
    """remote(x, **kw): (value, args after); when the module crashes inside one of the student's parts, or
    raises with what one of them returns (a float mask that it inverts with ~, say), the same forward with a
    stand-in for that part, and a note (graders/blame.py: charged once, in the part's module). `remote.stood_in`
    then names the part."""
    try:
        return remote(x, **kw)
    except StudentError as exc:
        def call(target, stand_ins):
            return target(x, stand_ins=stand_ins, **kw)

        again = blame.stand_in_forward(remote, x, exc, call) or blame.stand_in_faulty(remote, x, call)
        if again is None:
            checks.raise_with_hint(exc, raised_like_wiring(remote, x))
        value, note, remote.stood_in = again
        checks.note(note)
        return value


def raised_like_wiring(remote, x):
    """A hint for checks.raise_with_hint: the mistake of the module's own wiring that raises exactly what the
    student's `remote` raised for `x` (diagnose.module_errors: a mask not cut to T, merged attention weights),
    named with the line it raised at."""
    def hint(exc):
        args, kwargs = getattr(remote, "args", ()), getattr(remote, "kwargs", {})
        context_length = kwargs.get("context_length", args[2] if len(args) > 2 else None)
        params = diagnose.all_parameters(remote.state())
        name = diagnose.module_errors(remote.name, params, x, num_heads_of(remote), context_length).get(
            f"{exc.exc_type}: {exc.detail}")
        where = where_raised(exc)
        return f"{name}; it raised at {where}" if name and where else name
    return hint


def forward(remote, x, **kw):
    value, after = run(remote, x, **kw)
    return checks.tensor(value, f"{remote.name}.forward(x {tuple(x.shape)})"), after


def unless_inherited(remote, x, got, failure, also=None, otherwise=None):
    """Raise `failure`, unless `got` is what the reference wiring gives with some of the student's own parts
    (attention, heads, masks): then the module is right given its parts, and the check passes with a note
    naming the part to blame (graded in its own module, once). The failure names the likely bug when `got`
    is what a usual mistake in the module's own wiring gives (autograder.grade.diagnose), or one of `also`;
    when none is, what `otherwise()` says (None: nothing)."""
    parts = inherited(remote, x, got)
    if parts is None:
        bug = likely_bug(remote, x, got, also)
        if not bug and otherwise:
            try:
                bug = checks.likely_name(otherwise())
            except StudentError:
                pass
        raise AssertionError(str(failure) + bug) from None
    return parts


def inherited(remote, x, got):
    """The student's parts whose fault explains `got`, the wrong output of `remote` for `x`, with a note that
    names them; None when the module has a fault of its own. Explained: `got` is what the reference wiring gives
    with some of the student's parts, and the module gives the reference's output given working ones
    (blame.inherited_from, blame.confirmed); or no composition gives `got` (the module cannot use what a part
    returns: another dtype, another order), but the module, run again with the student's faulty parts stood in
    for, gives the reference's output (blame.right_given_working_parts)."""
    parts = blame.inherited_from(remote.sandbox, remote, x, got)
    if parts is not None and blame.confirmed(remote, x, parts):
        checks.note(blame.note(remote, parts))
        return parts
    parts = blame.right_given_working_parts(remote, x)
    if parts is not None:
        checks.note(blame.note(remote, parts))
    return parts


def expect_shape(remote, x, got, expected, what):
    """checks.shape(got, expected, what) of `got`, the output of `remote` for `x`; a wrong shape that a fault of
    the student's parts explains (inherited) passes with a note, and returns None."""
    try:
        return checks.shape(got, expected, what)
    except AssertionError:
        if not isinstance(got, torch.Tensor) or inherited(remote, x, got) is None:
            raise
        return None


def num_heads_of(remote):
    args, kwargs = getattr(remote, "args", ()), getattr(remote, "kwargs", {})
    return kwargs.get("num_heads", args[4] if len(args) > 4 else None)


def likely_bug(remote, x, got, also=None):
    """The "Likely bug" line for `got`, the output of the student's `remote` for `x` (eval mode): the usual
    mistakes of the module's wiring, computed here with the module's own weights, read back from it."""
    try:
        state = remote.state()
        cause = structure_cause(remote, state)
    except StudentError:
        return ""
    params = diagnose.all_parameters(state)
    variants = {**(also(state["parameters"]) if also else {}),
                **diagnose.module_variants(remote.name, params, x, num_heads_of(remote))}
    if cause:  # parameters that are not the contract's: evidence when the wiring with them gives `got`
        output = diagnose.module_output(remote.name, params, x, num_heads_of(remote))
        if output is not None:
            variants[cause] = output
    return checks.likely_bug(got, variants)


def expect_same(remote, reference, x, what, otherwise=None):
    """Check the output for `x` against the reference; return the student's parts it inherits a fault from
    ([] when it matches the reference itself). `otherwise`: as for unless_inherited."""
    got, _ = forward(remote, x)
    try:
        with torch.no_grad():
            checks.close(got, reference(x), f"{remote.name} output for x {tuple(x.shape)} {what}".strip())
    except AssertionError as failure:
        return unless_inherited(remote, x, got, failure, otherwise=otherwise)
    return []


def random_in_eval_mode(remote, x):
    """A hint for an output wrong in eval mode, when two eval-mode calls with other seeds answer differently."""
    def hint():
        first, _ = remote(x, seed=1)
        second, _ = remote(x, seed=2)
        if (isinstance(first, torch.Tensor) and isinstance(second, torch.Tensor) and first.shape == second.shape
                and not torch.equal(first, second)):
            return (f"your {remote.name}'s output in eval mode changes with the random seed, so dropout acts in eval "
                    "mode: apply the module's nn.Dropout (self.dropout), which model.eval() switches off, or "
                    "F.dropout(..., training=self.training)")
        return None
    return hint


def check_causal(remote, d_in, what):
    """Changing tokens after position t changes no output at or before t."""
    x = randn(1, 6, d_in, seed=11)
    before, _ = forward(remote, x)
    for t in range(5):
        changed = x.clone()
        changed[:, t + 1:] = randn(1, 5 - t, d_in, seed=20 + t)
        after, _ = forward(remote, changed)
        if before.shape != after.shape or not torch.allclose(before[:, :t + 1], after[:, :t + 1], atol=1e-6):
            failure = AssertionError(
                f"{what} is not causal: changing the tokens after position {t} changed the output at "
                f"positions 0..{t}; position i may only attend to positions j <= i")
            unless_inherited(remote, changed, after, failure)
            return


def check_structure(remote, reference, what):
    state = remote.state()
    expected = {n: tuple(p.shape) for n, p in reference.named_parameters()}
    got = {n: tuple(p.shape) for n, p in state["parameters"].items()}
    missing = sorted(set(expected) - set(got))
    extra = sorted(set(got) - set(expected))
    if missing or extra:
        raise AssertionError(f"{what}: expected the parameters {sorted(expected)}; "
                             + (f"missing {missing}" if missing else "") + ("; " if missing and extra else "")
                             + (f"unexpected {extra}" if extra else "")
                             + checks.likely_name(diagnose.structure_cause(state, list(expected))))
    for name, shape in expected.items():
        if got[name] != shape:
            raise AssertionError(f"{what}: parameter {name} should have shape {shape}, got {got[name]}")
    return state


def check_dropout_on_weights(remote, reference, d_in, block, what, p=0.5):
    """In training mode dropout acts on the attention weights, and in eval mode not at all.

    The evidence is token 0: under the causal mask it attends only to itself,
    with weight 1, so each head's output there is exactly that head's value
    vector v0 (eval mode). Dropping that one weight zeroes the head's whole
    output block at token 0, keeping it scales the block by 1 / (1 - p): each
    block (`block` features) is all 0 or all v0 / (1 - p). Dropout anywhere
    else (on the context after weights @ V, on V, on the output) drops
    features one by one; before the softmax (on the scores, q or k) it cannot
    change a weight of 1 at all.

    A module that passes its dropout module to the student's own
    scaled_dot_product_attention inherits that function's dropout: when the
    function applies it wrongly (charged in the attention checks), the
    training-mode forward runs again with a stand-in for it that drops the
    reference's weights with the module's own dropout module
    (blame.stand_in_dropout), and the module passes when its dropout is then
    on the weights.
    """
    x = randn(8, 5, d_in, seed=31)  # (B, T, d_in)
    with torch.no_grad():
        v0 = reference(x)[:, 0]  # (B, features): each head's v0, the output at token 0 in eval mode
    if expect_same(remote, reference, x, f"in eval mode with dropout={p} (its values, checked before its dropout: "
                   "eval mode switches dropout off)",
                   otherwise=random_in_eval_mode(remote, x)):
        return  # its output inherits a fault of its parts: the evidence below depends on them (see the note)
    if getattr(remote, "stood_in", None):
        return  # a stand-in for a part that crashes answers the eval-mode inputs only: no evidence here (the note)
    got, _ = forward(remote, x, train=True, seed=5)
    got = checks.shape(got, tuple(reference(x).shape), f"{what} output in training mode")
    why = dropped_on_weights(got, v0, block, p)
    if why is None:
        return
    # the student's attention applies its dropout wrongly? Then the module's own dropout is judged given one that
    # drops the weights (the reference's weights, the module's own dropout module)
    again = blame.stand_in_dropout(remote, x, lambda target, stand_ins: target(x, train=True, seed=5,
                                                                              stand_ins=stand_ins)[0])
    if (isinstance(again, torch.Tensor) and again.shape == got.shape
            and dropped_on_weights(again, v0, block, p) is None):
        checks.note(blame.note_dropout(remote.name))
        return
    raise AssertionError(
        f"{what} with dropout={p}, in training mode, should apply dropout to the attention weights: token 0 attends only "
        f"to itself (weight 1), so each head's output there must be either all 0 (weight dropped) or all "
        f"v0 / (1 - p) = 2 * v0 (weight kept); {why}")


def dropped_on_weights(got, v0, block, p):
    """None when `got` (B, T, features), a training-mode output, is what dropout on the attention weights gives at
    token 0 (each head's block all 0 or all v0 / (1 - p), some of each); otherwise what was found, and why."""
    heads = got[:, 0].reshape(got.shape[0], -1, block)  # (B, heads, block) at token 0
    full = v0.reshape(heads.shape) / (1 - p)  # (B, heads, block)
    dropped = (heads.abs() <= 1e-6).all(-1)  # (B, heads)
    kept = torch.isclose(heads, full, rtol=1e-4, atol=1e-5).all(-1)  # (B, heads)
    if (dropped | kept).all() and dropped.any() and kept.any():
        return None
    n = dropped.numel()
    found = f"{int(dropped.sum())} head outputs of {n} all 0, {int(kept.sum())} all v0 / (1 - p)"
    elementwise = ((heads.abs() <= 1e-6) | torch.isclose(heads, full, rtol=1e-4, atol=1e-5)).all()
    if torch.isclose(heads, full * (1 - p), rtol=1e-4, atol=1e-5).all():
        why = ("nothing was dropped: dropout is not applied in training mode, or it is applied where it cannot "
               "change a weight of 1 (on the scores before the softmax, or on q or k)")
    elif elementwise:
        why = ("features were dropped one by one inside a head: dropout acts after weights @ V (on the context), "
               "on V or on the output, not on the attention weights")
    else:
        why = ("the outputs are neither dropped nor kept whole, so the weight of 1 itself changed: dropout seems to "
               "act before the softmax (on the scores); apply it to the softmax's output")
    return f"found {found}: {why}"


def check_meta(remote, d_in, d_out, what):
    remote.to(device="meta")
    hint = left_behind(remote, "meta")
    x = randn(2, 5, d_in).to("meta")
    out, _ = checks.with_hint(lambda: run(remote, x), on_device_error(hint))
    out = expect_shape(remote, x, out, (2, 5, d_out), f"{what} output on meta")
    if out is not None:
        checks.device(out, "meta", f"{what} output", hint)


def left_behind(remote, device):
    """A hint for a module moved with .to(device) whose forward fails there (the student's `error`) or answers
    elsewhere (no error): what its buffers say (read back from the student's module), and the failing line."""
    def hint(error=None):
        buffers = remote.state()["buffers"]
        if not buffers:
            return (f"your {remote.name} registers no buffer, so its causal mask (a plain attribute, or a tensor "
                    f"built in forward) did not follow .to({device!r}): keep it as a buffer "
                    "(self.register_buffer('mask', ...)), or build it on x.device")
        if all(b.device.type == torch.device(device).type for b in buffers.values()):
            where = where_raised(error)
            if where:
                return (f"your buffers moved to {device} with the module, so the tensor left behind is one your code "
                        "makes on a fixed device (torch.ones, torch.tensor or torch.FloatTensor without device=), "
                        f"used at {where}: make it on x.device (device=x.device)")
            return (f"your buffers moved to {device} with the module, so forward uses a tensor it creates on a "
                    "fixed device (torch.ones, torch.tensor or torch.FloatTensor without device=x.device)")
        return None
    return hint


def check_device(student, device):
    """The three modules run on `device` after .to(device) and match the CPU reference (the kit's tests run
    this on the CPU too)."""
    x = randn(2, 5, 3)
    for name, args in (("CausalAttention", (3, 4, 8)), ("StackedMultiHeadAttention", (3, 2, 8, 0.0, 2)),
                       ("MultiHeadAttention", (3, 4, 8, 0.0, 2))):
        remote, reference = build(student, name, *args)
        remote.to(device=device)
        hint = left_behind(remote, device)
        moved = x.to(device)
        out, _ = checks.with_hint(lambda: run(remote, moved), on_device_error(hint))
        out = checks.device(out, device, f"{name} output", hint)
        try:
            with torch.no_grad():
                checks.close(out.cpu(), reference(x), f"{name} output on {device}")
        except AssertionError:
            if inherited(remote, moved, out) is None:  # a fault of the student's parts is charged in their checks
                raise


# -- CausalAttention ------------------------------------------------------------


@points(1, "shape")
def test_causal_attention_shape(student):
    """CausalAttention: (B, T, d_in) -> (B, T, d_out), also for T < context_length"""
    remote, _ = build(student, "CausalAttention", 3, 4, 8)
    x = randn(2, 5, 3)
    out, _ = forward(remote, x)
    expect_shape(remote, x, out, (2, 5, 4), "CausalAttention(3, 4, 8) output for x (2, 5, 3)")


@points(1, "structure")
def test_causal_attention_projections(student):
    """CausalAttention has nn.Linear projections Wq, Wk, Wv (d_in -> d_out), with biases when qkv_bias=True"""
    for bias in (False, True):
        remote = new(student, "CausalAttention", 3, 4, 8, qkv_bias=bias)
        check_structure(remote, ref.CausalAttention(3, 4, 8, qkv_bias=bias), f"CausalAttention(3, 4, 8, qkv_bias={bias})")


@points(2, "values")
def test_causal_attention_values(student):
    """CausalAttention matches the reference given the same weights"""
    for args, x in (((3, 4, 6), randn(2, 6, 3)), ((8, 4, 10, 0.0, True), randn(3, 7, 8, seed=1))):
        remote, reference = build(student, "CausalAttention", *args)
        expect_same(remote, reference, x, f"(CausalAttention{args})")


@points(2, "mask")
def test_causal_attention_is_causal(student):
    """CausalAttention: changing tokens after position t changes no output at or before t"""
    remote, _ = build(student, "CausalAttention", 4, 4, 6)
    check_causal(remote, 4, "CausalAttention")


@points(1, "dropout")
def test_causal_attention_dropout(student):
    """CausalAttention and the stacked module apply dropout to the attention weights, in training mode only"""
    remote, reference = build(student, "CausalAttention", 3, 4, 6, 0.5)
    check_dropout_on_weights(remote, reference, 3, 4, "CausalAttention(3, 4, 6)")
    remote, reference = build(student, "StackedMultiHeadAttention", 3, 4, 6, 0.5, 4)
    check_dropout_on_weights(remote, reference, 3, 4, "StackedMultiHeadAttention(3, 4, 6, 4 heads)")


@points(1, "device")
def test_causal_attention_meta(student):
    """CausalAttention runs on the meta device after .to('meta')"""
    remote, _ = build(student, "CausalAttention", 3, 4, 8)
    check_meta(remote, 3, 4, "CausalAttention")


# -- StackedMultiHeadAttention ---------------------------------------------------


@points(1, "shape")
def test_stacked_shape(student):
    """StackedMultiHeadAttention: (B, T, d_in) -> (B, T, num_heads * d_out)"""
    remote, _ = build(student, "StackedMultiHeadAttention", 3, 2, 6, 0.0, 3)
    x = randn(2, 5, 3)
    out, _ = forward(remote, x)
    expect_shape(remote, x, out, (2, 5, 6),
                 "StackedMultiHeadAttention(3, 2, 6, 0.0, 3) output for x (2, 5, 3)")


@points(2, "worked-example")
def test_stacked_worked_example_seed_004(student):
    """reproduces the stacked example of 《多头注意力：堆叠与权重分割》, all six rows (the first is (0.1855, 0.8812, 1.3211, 0.8098))"""
    g = seeded(123)  # torch.manual_seed(123), then W_query, W_key, W_value = torch.rand(3, 2) per head
    params = {f"heads.{h}.{name}.weight": torch.rand(3, 2, generator=g).T  # x @ W == Linear with weight W.T
              for h in range(2) for name in ("Wq", "Wk", "Wv")}
    remote = new(student, "StackedMultiHeadAttention", 3, 2, 6, 0.0, 2)
    load(remote, params)
    batch = torch.stack((SEED_004_INPUTS, SEED_004_INPUTS))  # (2, 6, 3)
    out, _ = forward(remote, batch)
    out = expect_shape(remote, batch, out, (2, 6, 4), "the stacked output of 《多头注意力：堆叠与权重分割》")
    if out is None:
        return  # a wrong shape inherited from the student's parts (the note)
    for b in range(2):
        if not torch.allclose(out[b], SEED_004_STACKED, atol=1e-4, rtol=0):
            failure = AssertionError(f"《多头注意力：堆叠与权重分割》 (stacked): expected rows "
                                     f"{checks.rows(SEED_004_STACKED[:2])}..., got {checks.rows(out[b, :2])}... "
                                     f"for batch item {b}")
            return unless_inherited(remote, batch, out, failure)


@points(2, "values")
def test_stacked_values(student):
    """StackedMultiHeadAttention matches the reference given the same weights"""
    remote, reference = build(student, "StackedMultiHeadAttention", 5, 3, 8, 0.0, 4)
    expect_same(remote, reference, randn(2, 7, 5), "(d_in 5, d_out 3, 4 heads)")


@points(2, "structure")
def test_stacked_heads_are_independent(student):
    """StackedMultiHeadAttention keeps num_heads independent CausalAttention heads in `heads`"""
    remote = new(student, "StackedMultiHeadAttention", 3, 2, 6, 0.0, 3)
    state = check_structure(remote, ref.StackedMultiHeadAttention(3, 2, 6, 0.0, 3),
                            "StackedMultiHeadAttention(3, 2, 6, 0.0, 3)")
    names, unique = state["parameter_names"], state["parameters"]
    if len(names) != len(unique):
        raise AssertionError(f"StackedMultiHeadAttention(3, 2, 6, 0.0, 3): its {len(names)} parameters are only "
                             f"{len(unique)} distinct tensors: the heads share one module; build a new "
                             "CausalAttention for each head")


@points(1, "device")
def test_stacked_meta(student):
    """StackedMultiHeadAttention runs on the meta device"""
    remote, _ = build(student, "StackedMultiHeadAttention", 3, 2, 8, 0.0, 2)
    check_meta(remote, 3, 4, "StackedMultiHeadAttention")


# -- MultiHeadAttention (fused) --------------------------------------------------


@points(1, "shape")
def test_fused_shape(student):
    """MultiHeadAttention: (B, T, d_in) -> (B, T, d_out)"""
    remote, _ = build(student, "MultiHeadAttention", 3, 6, 8, 0.0, 3)
    x = randn(2, 5, 3)
    out, _ = forward(remote, x)
    expect_shape(remote, x, out, (2, 5, 6), "MultiHeadAttention(3, 6, 8, 0.0, 3) output for x (2, 5, 3)")


@points(2, "structure")
def test_fused_projections(student):
    """MultiHeadAttention has Wq, Wk, Wv (d_in -> d_out) and Wo (d_out -> d_out, with bias)"""
    for bias in (False, True):
        remote = new(student, "MultiHeadAttention", 3, 4, 6, 0.0, 2, qkv_bias=bias)
        check_structure(remote, ref.MultiHeadAttention(3, 4, 6, 0.0, 2, qkv_bias=bias),
                        f"MultiHeadAttention(3, 4, 6, 0.0, 2, qkv_bias={bias})")


@points(3, "worked-example")
def test_fused_worked_example_seed_004(student):
    """reproduces 《多头注意力：堆叠与权重分割》: torch.manual_seed(123); MultiHeadAttention(3, 4, 6, 0.0, 2)"""
    remote = new(student, "MultiHeadAttention", 3, 4, 6, 0.0, 2, seed=123)
    batch = torch.stack((SEED_004_INPUTS, SEED_004_INPUTS))  # (2, 6, 3)
    out, _ = forward(remote, batch)
    out = expect_shape(remote, batch, out, (2, 6, 4), "the fused output of 《多头注意力：堆叠与权重分割》")
    if out is None:
        return  # a wrong shape inherited from the student's parts (the note)
    for b in range(2):
        if not torch.allclose(out[b], SEED_004_FUSED, atol=1e-4, rtol=0):
            failure = AssertionError(
                f"《多头注意力：堆叠与权重分割》: expected first and last rows {checks.rows(SEED_004_FUSED[[0, -1]])}, "
                f"got {checks.rows(out[b, [0, -1]])} for batch item {b}")
            return unless_inherited(remote, batch, out, failure, also=lambda params: initial_weights(params, batch))


def initial_weights(params, x):
    """{the init mistake: the output the reference wiring gives for `x` with the student's `params`}, when the
    student's MultiHeadAttention(3, 4, 6, 0.0, 2) built after torch.manual_seed(123) has other initial weights
    than the reference's: then an output equal to that wiring's is wrong by its weights alone."""
    order = diagnose.init_order(params, 3, 4, seed=123)
    if order is None:
        return {}
    if order:
        name = (f"your layers are created in the order {', '.join(order)}: after torch.manual_seed(123) each "
                "nn.Linear draws its initial weights when it is created, so create Wq, Wk, Wv, then Wo "
                "(《多头注意力：堆叠与权重分割》)")
    else:
        name = ("your initial weights are not those of torch.manual_seed(123) followed by nn.Linear(d_in, d_out) "
                "for Wq, Wk, Wv and nn.Linear(d_out, d_out) for Wo, created in that order with their default "
                "init: create no other layer or random tensor before them, and keep nn.Linear's own init")
    clean = diagnose.module_output("MultiHeadAttention", params, x, 2)
    return {name: clean} if clean is not None else {}


@points(2, "values")
def test_fused_values(student):
    """MultiHeadAttention matches the reference given the same weights (float32, with and without qkv bias)"""
    for args, x in (((3, 4, 6, 0.0, 2), randn(2, 6, 3)), ((8, 12, 10, 0.0, 3, True), randn(3, 7, 8, seed=1))):
        remote, reference = build(student, "MultiHeadAttention", *args)
        expect_same(remote, reference, x, f"(MultiHeadAttention{args})")


@points(2, "values")
def test_fused_equals_stacked_with_same_head_weights(student):
    """MultiHeadAttention equals StackedMultiHeadAttention given the same per-head weights and Wo = identity"""
    d_in, head_dim, H = 5, 3, 4
    manual_seed(1)
    stacked = ref.StackedMultiHeadAttention(d_in, head_dim, 8, 0.0, H).eval()
    params = {f"W{p}.weight": torch.cat([getattr(h, f"W{p}").weight for h in stacked.heads]).detach()  # (H*hd, d_in)
              for p in "qkv"}
    params["Wo.weight"] = torch.eye(H * head_dim)
    params["Wo.bias"] = torch.zeros(H * head_dim)
    remote = new(student, "MultiHeadAttention", d_in, H * head_dim, 8, 0.0, H)
    load(remote, params)
    x = randn(2, 7, d_in)
    got, _ = forward(remote, x)
    try:
        with torch.no_grad():
            checks.close(got, stacked(x), "MultiHeadAttention with the heads' weights stacked in Wq, Wk, Wv (head h "
                         "in rows h*head_dim:(h+1)*head_dim) and Wo = identity, against StackedMultiHeadAttention")
    except AssertionError as failure:
        unless_inherited(remote, x, got, failure)


@points(2, "mask")
def test_fused_is_causal(student):
    """MultiHeadAttention: changing tokens after position t changes no output at or before t"""
    remote, _ = build(student, "MultiHeadAttention", 4, 4, 6, 0.0, 2)
    check_causal(remote, 4, "MultiHeadAttention")


@points(1, "dtype")
def test_fused_float64(student):
    """MultiHeadAttention in float64 (model.double()) gives float64 outputs that match the reference"""
    remote, reference = build(student, "MultiHeadAttention", 3, 4, 6, 0.0, 2)
    remote.to(dtype=torch.float64)
    x = randn(2, 6, 3, dtype=torch.float64)
    expect_same(remote, reference.double(), x, "in float64", otherwise=float32_constant(remote, x))


def float32_constant(remote, x):
    """A hint for a float64 output that is wrong by a float32 rounding of the scale (diagnose.float32_scale)."""
    def hint():
        got, _ = remote(x)
        params = diagnose.all_parameters(remote.state())
        return diagnose.float32_scale(remote.name, params, x, got, num_heads_of(remote))
    return hint


@points(1, "errors")
def test_fused_raises_value_error(student):
    """MultiHeadAttention raises ValueError when num_heads does not divide d_out"""
    checks.raises(lambda: student.new("mha", "MultiHeadAttention", 3, 10, 6, 0.0, 3), "ValueError",
                  "MultiHeadAttention(3, 10, 6, 0.0, 3)", "3 heads do not divide d_out = 10")


@points(1, "dropout")
def test_fused_dropout(student):
    """MultiHeadAttention applies dropout to the attention weights, in training mode only"""
    remote, reference = build(student, "MultiHeadAttention", 3, 16, 6, 0.5, 4)
    identity = {"Wo.weight": torch.eye(16), "Wo.bias": torch.zeros(16)}  # the output shows the merged heads
    load(remote, identity)
    reference.load_state_dict(identity, strict=False)
    check_dropout_on_weights(remote, reference, 3, 4, "MultiHeadAttention(3, 16, 6, 4 heads)")


@points(1, "inputs")
def test_fused_input_unmodified(student):
    """MultiHeadAttention leaves its input unmodified"""
    remote, _ = build(student, "MultiHeadAttention", 3, 4, 6, 0.0, 2)
    x = randn(2, 6, 3)
    _, after = forward(remote, x, capture_args=True)
    checks.unchanged(after[0], x, "the input x")


@points(1, "device")
def test_fused_meta(student):
    """MultiHeadAttention runs on the meta device"""
    remote, _ = build(student, "MultiHeadAttention", 3, 4, 8, 0.0, 2)
    check_meta(remote, 3, 4, "MultiHeadAttention")


@points(3, "structure")
def test_fused_time_does_not_grow_with_heads(student, record_property):
    """MultiHeadAttention computes all heads at once: its time per pass grows with num_heads (d_model fixed) at most 4x as much as the reference fused module's"""
    result = speedup_measurement(student, record_property)
    counts = matmul_counts(student)
    if not result.flat_in_heads:
        raise AssertionError(
            f"MultiHeadAttention's time per forward pass grew {result.relative_growth:.1f} times as much as the "
            f"reference fused module's from {timing.FEW_HEADS} head to {timing.SIZES['num_heads']} (at most "
            f"{timing.GROWTH_LIMIT:g} allowed): {result.describe_growth()}. Compute every head at once with "
            "batched products (view + transpose to (B, H, T, head_dim), then q @ k.transpose(2, 3)), not a loop "
            f"over heads{counts_hint(counts)}")
    if counts is not None and not any(counts.values()):  # every product hidden from torch's dispatcher
        raise AssertionError(
            "MultiHeadAttention's forward returned the right outputs, yet torch's dispatcher saw no matrix "
            "product in it: it hides its operations from torch (a dispatch mode switched off or patched?), and "
            "nothing that hides can be graded")


def matmul_counts(student):
    """num_heads -> matrix products in one forward pass, as torch's dispatch mode counts them in the student
    process (a diagnosis for messages only: student code can switch the count off or change it); None when the
    count could not be taken."""
    counts = {}
    try:
        for heads in (2, 8):
            remote = student.new("mha", "MultiHeadAttention", 8, 16, 6, 0.0, heads)
            ops = remote.count_ops(randn(2, 5, 8))
            counts[heads] = sum(n for op, n in ops.items() if op in MATMUL_OPS)
    except StudentError:
        return None
    return counts


def counts_hint(counts):
    if not counts or counts[8] <= counts[2]:
        return ""
    return (f" (counted in your process, MultiHeadAttention(8, 16, 6, 0.0, num_heads).forward ran {counts[2]} "
            f"matrix products with 2 heads and {counts[8]} with 8)")


SKIPPED = ("no speed points: the timed forward passes of MultiHeadAttention did not do the work of attention, "
           "whatever their values")
SKIPPED_WHY = ("Speed is graded for a module that does that work (an output at one position that depends on the "
               "token at another jointly with the rest of the input, through products of queries and keys), right "
               "values or not: the value checks grade the values")
#: What a public stand-in for a crashing part is, in the words of the note (autograder/sandbox/standin.py, PUBLIC).
PUBLIC_STAND_IN = {"merge": "a transpose and a reshape", "split": "a reshape and a transpose", "mask": "a tril",
                   "attention": "the formula of attention"}


def speedup_measurement(student, record_property):
    """The measurement the structure and speedup checks share; its figures and seeds go into the report.

    Speed is judged whatever the values (the value checks charge those, once): the timed passes must return the
    reference's outputs or, if not, show the work of attention (timing.work_skipped, read from the outputs in
    this process). A module that crashes inside the student's own part is timed with a public stand-in for that
    part (the operation the contract asks of it, no answer of the grader's), the rest of the timed code its own."""
    stood_in, crashes, faulty = [], [], None
    while True:
        try:
            result, parts = timing.grade_speedup(student, stand_ins=stood_in), None
            break
        except StudentError as exc:
            crashed = blame.crashed_part(exc, "mha", "MultiHeadAttention")
            # a part whose answer the module cannot use (a float mask that the attention inverts with ~, an attention
            # that returns (weights, output)) is the fault, wherever the module then raised: stand in for it
            if faulty is None:  # asked once: what the student's parts answer does not change between tries
                faulty = unusable_parts(student)
            unusable = [p for p in faulty if p not in stood_in]
            if unusable and (crashed is None or crashed[0] not in unusable):
                stood_in += unusable
                continue
            if crashed is not None and crashed[0] not in stood_in:
                stood_in.append(crashed[0])
                crashes.append(crashed)
                continue
            if crashed is None and not stood_in:
                try:
                    cause = missing_parameter_cause(
                        lambda: student.new("mha", "MultiHeadAttention", 3, 4, 6, 0.0, 2), exc)
                except StudentError:
                    cause = None
                if cause is not None:
                    raise AssertionError(str(exc) + checks.likely_name(cause)) from None
            raise
    if not result.verified and not result.worked:  # excused if the student's faulty parts explain its outputs
        parts = inherited_in_timing(student, result) if not stood_in else None
        if parts and not timing.times_pass(result):  # one round, then stopped: measure it as a correct module
            result = timing.remeasure_unverified(student, excused=True)
            parts = parts if inherited_in_timing(student, result) == parts else None
    record_property("timing", result.to_dict())
    for part, line in crashes:
        module, function = blame.PARTS[part]
        checks.note(f"Your MultiHeadAttention crashed inside your {function} ({module}.py, line {line}): timed "
                    f"with a public stand-in for {function} ({PUBLIC_STAND_IN[part]}) in its place, the rest of the "
                    f"timed code your own; that fault costs points in the {module} checks only.")
    unusables = [p for p in stood_in if p not in {part for part, _ in crashes}]
    if unusables:  # timed with public stand-ins; the note of the value checks, which stood in for the same parts
        checks.note(blame.note_unusable("MultiHeadAttention", unusables))
    if not result.verified and not result.worked:
        assert parts, f"{SKIPPED}: {result.skipped}. {SKIPPED_WHY}" + mismatch_cause(result)
        checks.note(blame.note(result.module[0], parts))
    assert result.vouched, (
        f"not timed: in every one of the {result.rounds} rounds, processes of your submission used the CPU while "
        f"the reference modules were timed (they must be idle then; {'; '.join(result.details[:2])})")
    return result


def unusable_parts(student):
    """The student's parts that answer the reference wiring of a small MultiHeadAttention (d_in 8, d_out 16, two
    heads, 6 tokens) otherwise than the reference (blame.faulty_parts), or [] when the module cannot be built."""
    try:
        remote = new(student, "MultiHeadAttention", 8, 16, 6, 0.0, 2)
    except StudentError:
        return []
    manual_seed(0)
    return blame.faulty_parts(remote, torch.randn(2, 6, 8))


def mismatch_cause(result):
    """The "Likely bug" line of the first timed pass whose output was not the reference's ("" when none names
    its cause)."""
    for x, out, module in result.mismatched[:1]:
        try:
            return likely_bug(module, x, out)
        except StudentError:
            return ""
    return ""


def inherited_in_timing(student, result, samples=3):
    """The student's parts that explain the timed outputs unlike the reference's, or None.

    For each timed module (64 heads, FEW_HEADS), a few of its mismatched passes, drawn at random here after
    the timing (the student process cannot know which), must each equal the reference wiring run with the
    student's faulty parts (graders/blame.py): a block that skipped its work on some passes is caught as
    before, and the module, run again on one of them with those parts stood in for, must give the reference's
    output (blame.confirmed). The parts of both modules together; decided once per measurement, so the three
    timed checks agree."""
    import random

    if result.module is None or not result.mismatched:
        return None
    if not hasattr(result, "inherited"):
        draw, found = random.SystemRandom(), set()
        for remote in result.module:
            passes = [(x, out) for x, out, module in result.mismatched if module is remote]
            seen = None
            for x, out in draw.sample(passes, min(samples, len(passes))):
                parts = blame.inherited_from(student, remote, x, out)
                if parts is None or (seen is not None and parts != seen):
                    found = None
                    break
                if seen is None and not blame.confirmed(remote, x, parts):  # right given working parts?
                    found = None
                    break
                seen = parts
            if found is None:
                break
            found.update(seen or ())
        result.inherited = sorted(found) if found else None
    return result.inherited


@points(2, "speedup")
def test_fused_faster_than_reference_stacked(student, record_property):
    """MultiHeadAttention is at least 4x faster than the reference stacked module (many small heads)"""
    result = speedup_measurement(student, record_property)
    assert result.fast_enough, (
        f"MultiHeadAttention should be at least {timing.MIN_SPEEDUP:g}x faster than the reference stacked module, "
        f"it is {result.speedup:.2f}x: {result.describe()}")


@points(1, "speedup")
def test_fused_close_to_reference_fused(student, record_property):
    """MultiHeadAttention is at most 4x slower than the reference fused module"""
    result = speedup_measurement(student, record_property)
    assert result.close_to_reference, (
        f"MultiHeadAttention should be at most {timing.MAX_SLOWDOWN:g}x slower than the reference fused module, "
        f"it is {result.slowdown:.2f}x slower: {result.describe()}")


@needs_cuda
@points(1, "device")
def test_modules_run_on_cuda_and_match_cpu(student):
    """CausalAttention, StackedMultiHeadAttention and MultiHeadAttention run on CUDA and match the CPU reference"""
    needs_student_cuda(student)
    check_device(student, "cuda")
