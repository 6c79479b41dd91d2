"""Hidden graders for heads.py: split_heads and merge_heads."""
import torch

from autograder.graders import checks
from autograder.graders.checks import needs_cuda, needs_student_cuda, points
from autograder.graders.common import fixed_device, made_on_fixed_device, randn
from parts.heads import diagnose
from solutions import heads as ref

# (B, T, d_model, num_heads), smallest first.
CASES = [(1, 2, 4, 2), (2, 3, 8, 4), (2, 5, 12, 3), (3, 4, 16, 1)]


def split(student, x, num_heads, **kw):
    value, after = student.call("heads", "split_heads", x, num_heads, **kw)
    return checks.tensor(value, f"split_heads(x {tuple(x.shape)}, {num_heads})"), after


def merge(student, x, **kw):
    value, after = student.call("heads", "merge_heads", x, **kw)
    return checks.tensor(value, f"merge_heads(x {tuple(x.shape)})"), after


@points(2, "shape")
def test_split_shape(student):
    """split_heads: (B, T, d_model) -> (B, H, T, head_dim), head_dim = d_model // H"""
    x = randn(2, 5, 12)
    out, _ = split(student, x, 3)
    checks.shape(out, (2, 3, 5, 4), "split_heads(x (2, 5, 12), 3)", variants=diagnose.split_variants(x, 3))


@points(2, "worked-example")
def test_split_worked_example_seed_001(student):
    """reproduces 《Self-Attention详解》: q1 = (1, 1, 0, 1) gives (1, 1) to head 1 and (0, 1) to head 2"""
    q = torch.tensor([[[1.0, 1.0, 0.0, 1.0]]])  # (B=1, T=1, d_model=4)
    out, _ = split(student, q, 2)
    out = checks.shape(out, (1, 2, 1, 2), "split_heads(q (1, 1, 4), 2)", variants=diagnose.split_variants(q, 2))
    expected = torch.tensor([[1.0, 1.0], [0.0, 1.0]])  # head 1, head 2
    if not torch.equal(out[0, :, 0], expected):
        raise AssertionError(f"《Self-Attention详解》: splitting q1 = (1, 1, 0, 1) over 2 heads should give head 1 "
                             f"(1, 1) and head 2 (0, 1), got {checks.rows(out[0, :, 0], 0)}"
                             + checks.likely_bug(out, diagnose.split_variants(q, 2), ref.split_heads(q, 2)))


@points(2, "values")
def test_split_head_h_holds_its_features(student):
    """split_heads: head h holds features h*head_dim : (h+1)*head_dim of every token"""
    for B, T, d, H in CASES:
        x = randn(B, T, d, seed=d)
        out, _ = split(student, x, H)
        checks.close(out, ref.split_heads(x, H), f"split_heads(x {tuple(x.shape)}, {H})",
                     variants=diagnose.split_variants(x, H))


@points(1, "shape")
def test_merge_shape(student):
    """merge_heads: (B, H, T, head_dim) -> (B, T, H * head_dim)"""
    x = randn(2, 3, 5, 4)
    out, _ = merge(student, x)
    checks.shape(out, (2, 5, 12), "merge_heads(x (2, 3, 5, 4))", variants=diagnose.merge_variants(x))


@points(3, "values")
def test_merge_inverts_split(student):
    """merge_heads(split_heads(x, H)) gives back x, also for the non-contiguous output of a split"""
    for B, T, d, H in CASES:
        x = randn(B, T, d, seed=d)
        heads = ref.split_heads(x, H)  # (B, H, T, head_dim), a transposed (non-contiguous) view
        out, _ = merge(student, heads)
        checks.close(out, x, f"merge_heads of the {H} heads of x {tuple(x.shape)}",
                     variants=diagnose.merge_variants(heads))
        contiguous = heads.contiguous()
        out, _ = merge(student, contiguous)
        checks.close(out, x, f"merge_heads of the {H} heads of x {tuple(x.shape)} (contiguous copy)",
                     variants=diagnose.merge_variants(heads))


@points(1, "errors")
def test_split_raises_value_error(student):
    """split_heads raises ValueError when num_heads does not divide d_model"""
    checks.raises(lambda: student.call("heads", "split_heads", randn(2, 3, 10), 3), "ValueError",
                  "split_heads(x (2, 3, 10), 3)", "3 heads do not divide d_model = 10")


@points(1, "dtype")
def test_float64_kept(student):
    """split and merge keep float64"""
    x = randn(2, 3, 8, dtype=torch.float64)
    out, _ = split(student, x, 2)
    checks.close(out, ref.split_heads(x, 2), "split_heads(x float64 (2, 3, 8), 2)",
                 variants=diagnose.split_variants(x, 2))
    out, _ = merge(student, ref.split_heads(x, 2))
    checks.close(out, x, "merge_heads(x float64 (2, 2, 3, 4))", variants=diagnose.merge_variants(ref.split_heads(x, 2)))


@points(1, "inputs")
def test_inputs_left_unmodified(student):
    """split and merge leave their input unmodified"""
    x = randn(2, 3, 8)
    _, after = split(student, x, 2, capture_args=True)
    checks.unchanged(after[0], x, "the input of split_heads")
    heads = ref.split_heads(x, 2)
    _, after = merge(student, heads, capture_args=True)
    checks.unchanged(after[0], heads, "the input of merge_heads")


@points(1, "device")
def test_runs_on_meta_device(student):
    """split and merge run on the meta device"""
    x = randn(2, 3, 8).to("meta")
    out, _ = checks.with_hint(lambda: split(student, x, 2), fixed_device("split_heads"))
    checks.device(checks.shape(out, (2, 2, 3, 4), "split_heads on meta"), "meta", "split_heads",
                  made_on_fixed_device("split_heads"))
    out, _ = checks.with_hint(lambda: merge(student, randn(2, 2, 3, 4).to("meta")), fixed_device("merge_heads"))
    checks.device(checks.shape(out, (2, 3, 8), "merge_heads on meta"), "meta", "merge_heads",
                  made_on_fixed_device("merge_heads"))


def check_device(student, device):
    """split and merge run on `device` and match the CPU reference (the kit's tests run this on the CPU too)."""
    x = randn(2, 3, 8)
    out, _ = checks.with_hint(lambda: split(student, x.to(device), 2), fixed_device("split_heads", device))
    checks.close(checks.device(out, device, "split_heads", made_on_fixed_device("split_heads", device)).cpu(),
                 ref.split_heads(x, 2), f"split_heads on {device}")
    out, _ = checks.with_hint(lambda: merge(student, ref.split_heads(x, 2).to(device)),
                              fixed_device("merge_heads", device))
    checks.close(checks.device(out, device, "merge_heads", made_on_fixed_device("merge_heads", device)).cpu(), x,
                 f"merge_heads on {device}")


@needs_cuda
@points(1, "device")
def test_runs_on_cuda_and_matches_cpu(student):
    """split and merge run on CUDA and match the CPU reference"""
    needs_student_cuda(student)
    check_device(student, "cuda")
