"""The grader process runs the reference on the meta device without importing torch._dynamo
(autograder/grade/lazy_dynamo.py): ~1.3 s of CPU per grading whose student code raised there."""
import json
import subprocess
import sys

from tests.conftest import ROOT

SCRIPT = """
import json, sys
import torch
import autograder.grade.plugin  # the grader process's first kit import: installs the stand-in
from autograder.grade import diagnose

q, k, v = torch.randn(2, 3, 4), torch.randn(2, 5, 4), torch.randn(2, 5, 6)  # (B, L, d_k), (B, S, d_k), (B, S, d_v)
mask = torch.rand(2, 3, 5) > 0.3  # (B, L, S): L != S, so the transposed mask raises
on_meta = diagnose.attention_errors(*(t.to("meta") for t in (q, k, v, mask)))
out = {"named": sorted(on_meta.values()), "after_meta_op": type(sys.modules["torch._dynamo"]).__name__}
torch._dynamo.config  # anything but `disable`: the real module
out["after_real_use"] = type(sys.modules["torch._dynamo"]).__name__
print(json.dumps(out))
"""


def test_meta_device_diagnoses_run_without_importing_dynamo_until_something_really_uses_it():
    proc = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert any("transposed" in name for name in out["named"]), (
        f"expected the meta-device diagnosis to name the transposed mask, got {out['named']}")
    assert out["after_meta_op"] == "LazyDynamo", (
        f"expected torch._dynamo not imported by a meta-device op, found {out['after_meta_op']}")
    assert out["after_real_use"] == "module", (
        f"expected torch._dynamo imported on its first real use, found {out['after_real_use']}")
