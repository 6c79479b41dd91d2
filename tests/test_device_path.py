"""The CUDA checks' logic, run on the CPU.

The graders' CUDA tests are skipped here (no GPU), so each calls a small
`check_device(student, device)` that this test runs with device="cpu": the
same code path that moves inputs and modules, runs them in the student
process and compares with the CPU reference.
"""
import importlib

import pytest

from autograder.sandbox.client import Sandbox
from autograder.sandbox.errors import StudentError
from tests.conftest import MODULES, SOLUTIONS, TEMPLATE

pytestmark = pytest.mark.grading  # every test here grades or starts student processes

GRADERS = {m: importlib.import_module(f"autograder.graders.test_{m}") for m in MODULES}


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
    """The grader server imports the graders, whose `needs_cuda` asks torch.cuda.is_available(), then forks a
    process per grading, which may run the CUDA checks. Asked through the CUDA runtime (torch's default), the
    question initialises CUDA in the server and the forks cannot use it; through NVML it does not. A CPU-only
    machine cannot show the difference, so the environment that selects NVML is what is checked."""
    from autograder.sandbox.limits import grader_env

    assert grader_env().get("PYTORCH_NVML_BASED_CUDA_CHECK") == "1", grader_env()
