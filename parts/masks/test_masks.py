"""Hidden graders for masks.py: causal_mask."""
import torch

from autograder.graders import checks
from autograder.graders.checks import needs_cuda, needs_student_cuda, points
from parts.masks import diagnose

SIZES = (1, 2, 4, 7)


def mask(student, seq_len, **kw):
    value, _ = student.call("masks", "causal_mask", seq_len, **kw)
    return checks.tensor(value, f"causal_mask({seq_len})")


@points(1, "shape")
def test_shape(student):
    """causal_mask(T) has shape (T, T)"""
    checks.shape(mask(student, 5), (5, 5), "causal_mask(5)")


@points(1, "dtype")
def test_dtype_is_bool(student):
    """causal_mask(T) is a bool tensor"""
    checks.dtype(mask(student, 5), torch.bool, "causal_mask(5)")


@points(3, "mask")
def test_values_lower_triangle_with_diagonal(student):
    """True where key j <= query i: the lower triangle, diagonal included"""
    for T in SIZES:
        got = checks.shape(mask(student, T), (T, T), f"causal_mask({T})")
        expected = torch.ones(T, T).tril().bool()  # True = may attend
        if got.dtype != torch.bool or not torch.equal(got, expected):
            raise AssertionError(f"causal_mask({T}) is not the lower triangle, diagonal included"
                                 + ("" if got.dtype == torch.bool else f" (it is {got.dtype}, read as bool)")
                                 + picture(student) + diagnosis(student))


def picture(student, T=4):
    """causal_mask(T), expected beside the student's, at a size that shows the triangle."""
    got = checks.tensor(mask(student, T), f"causal_mask({T})")
    if tuple(got.shape) != (T, T):
        return f"; causal_mask({T}) has shape {tuple(got.shape)}"
    return (f"; causal_mask({T}) ({checks.MASK_LEGEND}):\n"
            + checks.masks_side_by_side(torch.ones(T, T).tril().bool(), got.bool()))


def diagnosis(student, T=4):
    """The likely bug, judged on a mask big enough to tell the usual mistakes apart."""
    got = mask(student, T)
    return checks.likely_bug(got.bool() if got.dtype != torch.bool else got, diagnose.mask_variants(T),
                             torch.ones(T, T).tril().bool())


@points(2, "device")
def test_honours_device_argument(student):
    """causal_mask(T, device=...) creates the mask on that device"""
    got = mask(student, 4, device=torch.device("meta"))
    checks.device(checks.shape(got, (4, 4), "causal_mask(4, device='meta')"), "meta", "causal_mask(4, device='meta')",
                  ignores_device)


def ignores_device():
    """The hint of a mask that is not on the device it was asked for: the device argument was not used."""
    return ("causal_mask ignores its device argument: build the mask there (torch.ones(seq_len, seq_len, "
            "dtype=torch.bool, device=device))")


def check_device(student, device):
    """causal_mask(T, device=...) is on that device with the right values (the kit's tests run this on the CPU)."""
    got = mask(student, 4, device=torch.device(device))
    checks.close(checks.device(got, device, f"causal_mask(4, device={device!r})", ignores_device).cpu(),
                 torch.ones(4, 4).tril().bool(), f"causal_mask(4, device={device!r})")


@needs_cuda
@points(1, "device")
def test_runs_on_cuda(student):
    """causal_mask(T, device='cuda') is on CUDA and has the right values"""
    needs_student_cuda(student)
    check_device(student, "cuda")
