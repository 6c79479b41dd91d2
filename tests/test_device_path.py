"""The CUDA checks' logic, run on the CPU.

The graders' CUDA tests are skipped here (no GPU), so each calls a small
`check_device(student, device)` that this test runs with device="cpu": the
same code path that moves inputs and modules, runs them in the student
process and compares with the CPU reference.
"""
import importlib

import pytest
import torch

from autograder.sandbox.client import Sandbox
from autograder.sandbox.errors import StudentError
from tests.conftest import MODULES, SOLUTIONS, TEMPLATE

pytestmark = pytest.mark.grading  # every test here grades or starts student processes

GRADERS = {m: importlib.import_module(f"parts.{m}.test_{m}") for m in MODULES}


@pytest.fixture(scope="module")
def reference():
    with Sandbox(SOLUTIONS) as sandbox:
        yield sandbox


@pytest.fixture(scope="module")
def stubs():
    with Sandbox(TEMPLATE) as sandbox:
        yield sandbox


@pytest.mark.parametrize("module", MODULES)
def test_device_check_passes_on_the_reference(reference, module):
    GRADERS[module].check_device(reference, "cpu")


@pytest.mark.parametrize("module", MODULES)
def test_device_check_fails_on_the_stubs(stubs, module):
    with pytest.raises((AssertionError, StudentError)):
        GRADERS[module].check_device(stubs, "cpu")


def test_every_grader_has_a_skipped_cuda_check():
    for module, grader in GRADERS.items():
        cuda_tests = [name for name in dir(grader) if name.startswith("test_") and "cuda" in name]
        assert len(cuda_tests) == 1, module


def test_the_grader_server_asks_for_cuda_without_spoiling_cuda_for_its_forks():
    """The grader server imports the graders, then forks a process per grading, which may run the CUDA checks.
    Should anything in it ask torch.cuda.is_available() through the CUDA runtime (torch's default), the question
    would initialise CUDA in the server and the forks could not use it; through NVML it does not (seen on an
    H200). A CPU-only machine cannot show the difference, so the environment that selects NVML is checked."""
    from autograder.sandbox.limits import grader_env

    assert grader_env().get("PYTORCH_NVML_BASED_CUDA_CHECK") == "1", grader_env()


def test_importing_the_graders_asks_nothing_about_cuda():
    """`needs_cuda` asks whether CUDA is there when a check runs, in the process that runs it: importing the
    graders, as the grader server does before it forks the gradings, asks nothing (on an H200, a process that
    had imported the CUDA build of torch and asked was multi-threaded when it forked)."""
    import subprocess
    import sys

    code = ("import torch\ncalls = []\n"
            "torch.cuda.is_available = lambda: calls.append('is_available') or False\n"
            "torch.cuda.device_count = lambda: calls.append('device_count') or 0\n"
            + "".join(f"import parts.{m}.test_{m}\n" for m in MODULES) + "print(calls)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]", done.stdout


def test_the_student_process_says_in_its_handshake_whether_cuda_starts(monkeypatch):
    """On a machine with GPU nodes the student process starts CUDA before any student code runs and says in its
    handshake whether it could; here (no GPU nodes) it says nothing, and with CUDA refused on purpose
    (MHA_REFUSE=cuda, as device nodes that the student's uid may not open would) it says why."""
    with Sandbox(SOLUTIONS) as sandbox:
        assert sandbox.cuda_problem() is None
    monkeypatch.setenv("MHA_REFUSE", "cuda")
    with Sandbox(SOLUTIONS) as sandbox:
        why = sandbox.cuda_problem()
        assert why and "cuda" in why and "refused on purpose" in why, why
        got = sandbox.call("masks", "causal_mask", 2)[0]  # (value, ...): the rest runs as before
        assert got.tolist() == [[True, False], [True, True]], got


def test_a_cuda_check_is_skipped_not_failed_where_the_student_process_cannot_start_cuda():
    """CUDA that runs for the grader and not in the student process is the machine's failure: the CUDA check is
    skipped with the reason, and its points count as the other checks of its module (the scoring's CUDA note)."""
    from types import SimpleNamespace

    from autograder.graders.checks import needs_student_cuda
    from autograder.scoring import figures

    needs_student_cuda(SimpleNamespace(cuda_problem=lambda: None))  # CUDA starts there: the check runs
    with pytest.raises(pytest.skip.Exception) as skipped:
        needs_student_cuda(SimpleNamespace(cuda_problem=lambda: "RuntimeError: no CUDA GPUs are available"))
    reason = skipped.value.msg
    assert reason.startswith("needs CUDA in the student process") and "no CUDA GPUs" in reason, reason
    check = SimpleNamespace(module="masks", status="skipped", message=reason, points=1, aspect="device")
    passed = SimpleNamespace(module="masks", status="passed", message="", points=7, aspect="values")
    assert figures([check, passed]).skipped_note().startswith("1 CUDA point not graded on this machine")


def test_the_student_process_keeps_no_cuda_cache(tmp_path):
    """CUDA's kernel cache would go to the student's temporary home, of a bounded size, gone with the grading:
    the student process runs with CUDA_CACHE_DISABLE=1."""
    (tmp_path / "masks.py").write_text("import os\ndef causal_mask(seq_len, device=None):\n"
                                       "    return os.environ.get('CUDA_CACHE_DISABLE', 'unset')\n")
    with Sandbox(tmp_path) as sandbox:
        assert sandbox.call("masks", "causal_mask", 2)[0] == "1"


@pytest.mark.skipif(torch.cuda.is_available(), reason="with CUDA it grades for real: run it by hand")
def test_the_gpu_machine_check_says_so_where_there_is_no_cuda():
    """benchmarks/cuda_check.py, the checks that need a GPU, runs (imports, argument parsing) and exits 2 here."""
    import subprocess
    import sys

    from tests.conftest import ROOT

    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "cuda_check.py")], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 2 and "no CUDA here" in done.stderr, (done.returncode, done.stderr[-2000:])
