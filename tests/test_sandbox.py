"""The sandbox: student code runs in a child process and cannot reach the grader.

Each test writes a small hostile module, runs it through the real Sandbox
(a real child process, real timeouts) and checks what the trusted side sees.
"""
import json
import time

import pytest
import torch

from autograder.graders import checks
from autograder.sandbox.client import MAX_STRIKES, Sandbox
from autograder.sandbox.errors import StudentError
from tests.conftest import unpaused_since

pytestmark = pytest.mark.grading  # every test here grades or starts student processes

GOOD_MASKS = "import torch\ndef causal_mask(seq_len, device=None):\n" \
             "    return torch.ones(seq_len, seq_len, dtype=torch.bool, device=device).tril()\n"


@pytest.fixture
def submission(tmp_path):
    def make(**modules):
        for name, code in modules.items():
            (tmp_path / f"{name}.py").write_text(code)
        return Sandbox(tmp_path, call_timeout=2.0)
    return make


def test_answers_are_plain_tensors_compared_here(submission):
    with submission(masks=GOOD_MASKS) as sb:
        value, _ = sb.call("masks", "causal_mask", 3)
    assert type(value) is torch.Tensor
    assert torch.equal(value, torch.ones(3, 3, dtype=torch.bool).tril())


def test_sys_exit_at_import_is_an_error_not_a_pass(submission):
    with submission(masks="import sys\nsys.exit(0)\n") as sb:
        with pytest.raises(StudentError) as err:
            sb.call("masks", "causal_mask", 3)
    assert err.value.kind == "import" and err.value.exc_type == "SystemExit"
    assert str(err.value) == "importing masks.py raised SystemExit: sys.exit(0)"


def test_syntax_error_is_reported_with_its_line(submission):
    with submission(masks="def causal_mask(seq_len, device=None):\n    return (\n") as sb:
        with pytest.raises(StudentError) as err:
            sb.call("masks", "causal_mask", 3)
    assert err.value.kind == "import" and err.value.exc_type == "SyntaxError"
    assert "importing masks.py raised SyntaxError" in str(err.value) and "line 2" in str(err.value)
    assert "frozen" not in err.value.traceback


def test_os_exit_at_import_costs_bounded_retries(submission):
    with submission(masks="import os\nos._exit(0)\n", heads="def split_heads(x, h):\n    return x\n") as sb:
        kinds = []
        for _ in range(MAX_STRIKES + 2):
            with pytest.raises(StudentError) as err:
                sb.call("masks", "causal_mask", 3)
            kinds.append(err.value.kind)
        assert kinds == ["crashed"] * MAX_STRIKES + ["gave-up"] * 2
        assert "exit code 0" in str(err.value)
        value, _ = sb.call("heads", "split_heads", torch.ones(2), 1)  # other modules still run
        assert torch.equal(value, torch.ones(2))


def test_infinite_loop_times_out(submission):
    with submission(masks="def causal_mask(seq_len, device=None):\n    while True:\n        pass\n",
                    heads="def split_heads(x, h):\n    return x\n") as sb:
        sb.call("heads", "split_heads", torch.ones(2), 1)  # the process started (torch imported) before the clock
        start = time.monotonic()
        with pytest.raises(StudentError) as err:
            sb.call("masks", "causal_mask", 3)
        assert err.value.kind == "timeout" and "did not finish within 2 s" in str(err.value)
        assert unpaused_since(start) < 10


def test_the_first_timeout_ends_the_modules_later_calls_at_once_and_no_other_modules(submission):
    """A call that met the call timeout ends its module's later calls with that cause, at once, instead of each
    check meeting the timeout (and a restart) again; the other modules still run."""
    with submission(masks="def causal_mask(seq_len, device=None):\n    while True:\n        pass\n",
                    heads="def split_heads(x, h):\n    return x\n") as sb:
        with pytest.raises(StudentError) as first:
            sb.call("masks", "causal_mask", 3)
        start = time.monotonic()
        with pytest.raises(StudentError) as later:
            sb.call("masks", "causal_mask", 4)
        assert time.monotonic() - start < 0.5, "expected the later call refused at once, not run to its timeout"
        value, _ = sb.call("heads", "split_heads", torch.ones(2), 1)
    assert first.value.kind == "timeout" and later.value.kind == "gave-up"
    assert str(later.value) == ("not run: masks.py did not finish causal_mask(3) within 2 s in an earlier check "
                                "(an infinite loop, or far too slow?)"), str(later.value)
    assert torch.equal(value, torch.ones(2))


MEMORY_BOMB_IN_ATTENTION = """import torch
def scaled_dot_product_attention(q, k, v, mask=None, dropout=None):
    return torch.empty(1 << 40)
"""


def test_the_first_call_that_meets_the_memory_limit_ends_the_checks_of_the_module_at_fault(submission):
    """A call that met the memory limit ends the later calls of the module whose code met it, with that cause:
    a bomb in attention.py met through the student's mha.py is attention's (mha's checks stand it in), and
    every other module still runs."""
    mha = ("from attention import scaled_dot_product_attention\n"
           "def forward(x):\n    return scaled_dot_product_attention(x, x, x)\n")
    with submission(attention=MEMORY_BOMB_IN_ATTENTION, mha=mha, heads="def split_heads(x, h):\n    return x\n") as sb:
        with pytest.raises(StudentError) as first:
            sb.call("mha", "forward", torch.ones(2))
        with pytest.raises(StudentError) as later:
            sb.call("attention", "scaled_dot_product_attention", torch.ones(2), torch.ones(2), torch.ones(2))
        value, _ = sb.call("heads", "split_heads", torch.ones(2), 1)
        assert "mha" not in sb.given_up, "expected the student's mha, which only called the bomb, still run"
    assert first.value.kind == "raised" and "exceeded the memory limit" in str(first.value)
    assert later.value.kind == "gave-up" and str(later.value).startswith(
        "not run: attention.py exceeded the memory limit (2 GiB for a student process) in an earlier check"), \
        str(later.value)
    assert torch.equal(value, torch.ones(2))


def test_patched_comparisons_do_not_reach_the_grader(submission):
    cheat = ("import torch, numpy\n"
             "torch.allclose = lambda *a, **k: True\ntorch.equal = lambda *a, **k: True\n"
             "numpy.allclose = lambda *a, **k: True\n"
             "def causal_mask(seq_len, device=None):\n    return torch.zeros(seq_len, seq_len, dtype=torch.bool)\n")
    with submission(masks=cheat) as sb:
        value, _ = sb.call("masks", "causal_mask", 3)
    assert torch.allclose is not None and not torch.equal(value, torch.ones(3, 3, dtype=torch.bool).tril())
    with pytest.raises(AssertionError):
        checks.close(value, torch.ones(3, 3, dtype=torch.bool).tril(), "causal_mask(3)")


def test_tensor_subclass_with_true_eq_is_rejected(submission):
    cheat = ("import torch\nclass Liar(torch.Tensor):\n    def __eq__(self, other):\n        return True\n"
             "def causal_mask(seq_len, device=None):\n    return torch.zeros(2).as_subclass(Liar)\n")
    with submission(masks=cheat) as sb:
        value, _ = sb.call("masks", "causal_mask", 3)
    with pytest.raises(AssertionError, match="expected a torch.Tensor, got an object of type masks.Liar"):
        checks.tensor(value, "causal_mask(3)")


def test_prints_do_not_reach_the_protocol(submission):
    noisy = GOOD_MASKS.replace("    return", "    print('PASSED 100/100', flush=True)\n"
                               "    import sys; sys.stderr.write('{\"score\": 100}')\n    return")
    with submission(masks=noisy) as sb:
        value, _ = sb.call("masks", "causal_mask", 2)
        assert value.shape == (2, 2)
        assert "PASSED 100/100" in sb.output_tail()


def test_missing_module_is_reported_without_running_anything(submission):
    with submission(masks=GOOD_MASKS) as sb:
        with pytest.raises(StudentError, match="^not handed in$"):
            sb.call("attention", "scaled_dot_product_attention", torch.ones(1, 1), torch.ones(1, 1), torch.ones(1, 1))


def test_exception_reports_type_message_and_student_frames_only(submission):
    code = "def causal_mask(seq_len, device=None):\n    return helper()\n\ndef helper():\n    raise KeyError('oops')\n"
    with submission(masks=code) as sb:
        with pytest.raises(StudentError) as err:
            sb.call("masks", "causal_mask", 3)
    assert str(err.value) == "causal_mask(3) raised KeyError: 'oops'"
    assert 'File "masks.py", line 5, in helper' in err.value.traceback
    assert "student_process.py" not in err.value.traceback


def test_memory_bomb_fails_inside_its_process(submission):
    bomb = "import torch\ndef causal_mask(seq_len, device=None):\n    return torch.ones(1 << 36)\n"
    with submission(masks=bomb) as sb:
        with pytest.raises(StudentError) as err:
            sb.call("masks", "causal_mask", 3)
        assert err.value.kind in ("raised", "crashed")
        assert "allocate" in str(err.value) or err.value.kind == "crashed"


def test_limits_cross_a_process_boundary_as_they_are():
    """The grading's --spec and the student's config carry Limits.to_dict(); from_dict gives them back, and a
    name the dataclass does not have is refused rather than dropped."""
    from autograder.sandbox.limits import Limits

    limits = Limits(cpu_seconds=7.5, memory_bytes=1 << 30, processes=None, output_bytes=123)
    assert Limits.from_dict(json.loads(json.dumps(limits.to_dict()))) == limits
    with pytest.raises(TypeError):
        Limits.from_dict({**limits.to_dict(), "cpu_second": 1})


def test_a_grading_crosses_to_the_graders_process_as_one_spec():
    """The engine gives the graders' process the grading as one JSON argument (autograder/grade/spec.py):
    read back, it is the same grading, its limits a Limits again; a field this kit does not know is refused,
    never dropped (an engine and a plugin of two versions of the kit)."""
    from autograder.grade.spec import GradingSpec
    from autograder.sandbox.limits import Limits

    spec = GradingSpec(submission="/tmp/sub", results_file="/tmp/r.json", call_timeout=2.5,
                       limits=Limits(cpu_seconds=7.5, memory_bytes=1 << 30), isolation="landlock",
                       student_python="/usr/bin/python3", zygote="fd:7", batch_dir=None,
                       missing={"mha": "mha.py is a symbolic link: not graded"}, source="/home/ta/class/bea")
    again = GradingSpec.from_json(spec.to_json())
    assert again == spec and isinstance(again.limits, Limits), again
    assert again.intake() == {"missing": spec.missing, "source": "/home/ta/class/bea"}
    with pytest.raises(ValueError, match="does not know: \\['cpu'\\]"):
        GradingSpec.from_json(json.dumps({**json.loads(spec.to_json()), "cpu": 1}))
