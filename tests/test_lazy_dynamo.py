"""The grader process runs the reference on the meta device without importing torch._dynamo
(autograder/sandbox/lazy_dynamo.py, installed by the plugin): ~1.3 s of CPU per grading whose student code
raised there."""
import json
import subprocess
import sys

from tests.conftest import ROOT

PROBE = '''
import json, os, sys
import torch
from parts.attention import diagnose


def test_probe():
    q, k, v = torch.randn(2, 3, 4), torch.randn(2, 5, 4), torch.randn(2, 5, 6)  # (B, L, d_k), (B, S, d_k), (B, S, d_v)
    mask = torch.rand(2, 3, 5) > 0.3  # (B, L, S): L != S, so the transposed mask raises
    named = diagnose.attention_errors(*(t.to("meta") for t in (q, k, v, mask)))
    out = {"named": sorted(named.values()), "after_meta_op": type(sys.modules["torch._dynamo"]).__name__}
    torch._dynamo.config  # anything but `disable`: the real module
    out["after_real_use"] = type(sys.modules["torch._dynamo"]).__name__
    with open(os.environ["PROBE_OUT"], "w") as fh:
        json.dump(out, fh)
'''


def test_meta_device_diagnoses_run_without_importing_dynamo_until_something_really_uses_it(tmp_path):
    (tmp_path / "test_probe.py").write_text(PROBE)
    out = tmp_path / "out.json"
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "autograder.grade.plugin",
                           "--rootdir", str(tmp_path), str(tmp_path / "test_probe.py")],
                          cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "PROBE_OUT": str(out)})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    got = json.loads(out.read_text())
    assert any("transposed" in name for name in got["named"]), (
        f"expected the meta-device diagnosis to name the transposed mask, got {got['named']}")
    assert got["after_meta_op"] == "LazyDynamo", (
        f"expected torch._dynamo not imported by a meta-device op under the plugin, found {got['after_meta_op']}")
    assert got["after_real_use"] == "module", (
        f"expected torch._dynamo imported on its first real use, found {got['after_real_use']}")


WARM_PROBE = '''
import json, os, sys
from autograder.grade.servers import GRADER_PRELOAD
from autograder.sandbox.forkserver import preload

preload(GRADER_PRELOAD)  # what the warm grader server holds before it forks a grading
import torch
from parts.attention import diagnose

before = set(sys.modules)
q, k, v = torch.randn(2, 3, 4), torch.randn(2, 5, 4), torch.randn(2, 5, 6)  # (B, L, d_k), (B, S, d_k), (B, S, d_v)
mask = torch.rand(2, 3, 5) > 0.3  # (B, L, S)
diagnose.attention_errors(*(t.to("meta") for t in (q, k, v, mask)))
with open(os.environ["PROBE_OUT"], "w") as fh:
    json.dump(sorted(set(sys.modules) - before), fh)
'''


def test_a_warm_graders_meta_device_diagnosis_imports_nothing_in_the_grading(tmp_path):
    """The warm grader server runs the meta device's first batched product before it forks (plugin.warm): the
    diagnosis of code that raised on the meta device (the untouched template, every device bug) imports
    torch.fx.experimental.symbolic_shapes and sympy there, ~0.4 s of CPU, once per class run instead of once per
    such grading."""
    out = tmp_path / "out.json"
    proc = subprocess.run([sys.executable, "-c", WARM_PROBE], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "PROBE_OUT": str(out)})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    imported = json.loads(out.read_text())
    assert imported == [], f"expected the meta-device diagnosis to import nothing after the warm-up, it imported " \
                           f"{len(imported)} modules: {', '.join(imported[:12])}"
