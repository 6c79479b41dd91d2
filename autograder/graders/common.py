"""Shared inputs for the hidden graders.

Everything here runs in the trusted grading process: inputs are made here,
sent to the student process, and the answers are compared here against the
reference implementation in `solutions/`.
"""
import re

import torch

# The worked examples of the tutorials (see the student contract).
SEED_001_Q = torch.tensor([[1.0, 2.0], [1.0, 1.0]])  # q1, q2 = a @ W^q
SEED_004_INPUTS = torch.tensor([
    [0.43, 0.15, 0.89],  # Your     (x^1)
    [0.55, 0.87, 0.66],  # journey  (x^2)
    [0.57, 0.85, 0.64],  # starts   (x^3)
    [0.22, 0.58, 0.33],  # with     (x^4)
    [0.77, 0.25, 0.10],  # one      (x^5)
    [0.05, 0.80, 0.55],  # step     (x^6)
])
SEED_004_FUSED = torch.tensor([  # torch.manual_seed(123); MultiHeadAttention(3, 4, 6, 0.0, 2)
    [0.1184, 0.3120, -0.0847, -0.5774],
    [0.0178, 0.3221, -0.0763, -0.4225],
    [-0.0147, 0.3259, -0.0734, -0.3721],
    [-0.0116, 0.3138, -0.0708, -0.3624],
    [-0.0117, 0.2973, -0.0698, -0.3543],
    [-0.0132, 0.2990, -0.0689, -0.3490],
])
SEED_004_STACKED = torch.tensor([  # 2 heads, W_query, W_key, W_value = torch.rand(3, 2) each
    [0.1855, 0.8812, 1.3211, 0.8098],
    [0.3116, 0.9549, 1.6063, 1.1493],
    [0.3395, 0.9652, 1.6530, 1.2084],
    [0.3129, 0.8747, 1.5012, 1.0955],
    [0.2865, 0.7897, 1.4100, 1.0398],
    [0.2990, 0.8040, 1.4025, 1.0361],
])


def seeded(seed):
    """A torch.Generator for reproducible inputs that leaves the global RNG alone."""
    return torch.Generator().manual_seed(seed)


def randn(*shape, seed=0, dtype=torch.float32):
    return torch.randn(*shape, generator=seeded(seed), dtype=dtype)


def random_mask(*shape, seed=0):
    """A bool mask (True = may attend) with at least one True in every row."""
    mask = torch.rand(*shape, generator=seeded(seed)) < 0.6
    mask[..., 0] = True
    return mask


def heatmap(title, yours, expected):
    """What a grader records for a picture of attention weights (autograder/report/html.py draws it).

    The student's weights are recorded only when they have the reference's shape: a wrong answer can be
    millions of numbers (an (N, N) tensor for a 2 x 2 example), so only its shape is told then.
    """
    data = {"title": title, "expected": expected.tolist()}
    if isinstance(yours, torch.Tensor) and yours.shape == expected.shape:
        data["yours"] = yours.tolist()
    else:
        data["yours_shape"] = list(yours.shape) if isinstance(yours, torch.Tensor) else None
    return data


def params_of(module):
    """Parameter name -> detached value of a reference module."""
    return {name: p.detach().clone() for name, p in module.named_parameters()}


def fixed_device(what, device="meta"):
    """A hint for checks.with_hint: `what` (a function) raised an error about devices with every input on
    `device`, so it made a tensor of its own on a fixed device."""
    def hint(error):
        if "device" not in str(error).lower():
            return None
        return (f"every input was on {device}, and {what} raised a device mismatch: it creates a tensor on a fixed "
                "device (torch.tensor, torch.FloatTensor, torch.ones, ... without device=) and mixes it with the "
                "inputs; create it on the inputs' device (device=x.device, or torch.*_like)")
    return hint


def made_on_fixed_device(what, device="meta"):
    """A hint for checks.device: every input of `what` (a function) was on `device`, its result is not."""
    return lambda: (f"every input was on {device}, so {what} created its result on a fixed device; create tensors "
                    "on the inputs' device (device=x.device, or torch.*_like)")


def on_device_error(hint):
    """`hint(error)` for checks.with_hint, asked only when the student's error is about devices."""
    return lambda error: hint(error) if "device" in str(error).lower() else None


_FRAME = re.compile(r'File "([^"]+)", line (\d+), in [^\n]*\n[ \t]*([^\n]*)')


def where_raised(error):
    """'mha.py, line 158 (`scores = q @ k.transpose(2, 3) / scale`)': the line of the student's code where
    `error` (a StudentError) was raised, from its traceback; None when it has none."""
    frames = _FRAME.findall(getattr(error, "traceback", "") or "")
    if not frames:
        return None
    file, line, code = frames[-1]
    code = re.sub(r"\s+#[^'\"]*$", "", code.strip())  # without a comment at its end
    return f"{file}, line {line}" + (f" (`{code}`)" if code else "")
