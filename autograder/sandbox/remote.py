"""A module built in the student process, as the graders hold it (RemoteModule), and how calls and tensors read
in messages (signature, describe_tensor).

A RemoteModule is a handle: its forward passes, weights, state and timing are requests to the Sandbox that built
it (client.py), valid until that student process is restarted.
"""
from __future__ import annotations

from autograder.sandbox.errors import StudentError


def timed_pass(handle, x, discard=False, stand_ins=None):
    """The request of one timed forward pass of the module `handle` on `x`: a copy of `x` in a storage of its
    own, so that the student process sees no other pass's input through it (RemoteModule.time). `stand_ins`:
    public stand-ins for the student's parts in place during the pass (autograder/sandbox/standin.py, PUBLIC)."""
    request = {"op": "time", "handle": handle, "discard": discard, "x": x.contiguous().clone()}
    if stand_ins:
        request["stand_ins"] = list(stand_ins)
    return request



def describe_tensor(t):
    """How a tensor reads in a message: "float32 tensor (2, 3)", "... on meta"."""
    dev = "" if t.device.type == "cpu" else f" on {t.device}"
    return f"{str(t.dtype).replace('torch.', '')} tensor {tuple(t.shape)}{dev}"


def _short(value):
    import torch

    if isinstance(value, torch.Tensor):
        return describe_tensor(value)
    if isinstance(value, dict) and "__pattern_dropout__" in value:
        return "a dropout module"
    return repr(value)


def signature(name, args, kwargs):
    """How a call reads in a message: "split_heads(float32 tensor (2, 3, 8), 2)"."""
    parts = [_short(a) for a in args] + [f"{k}={_short(v)}" for k, v in kwargs.items()]
    return f"{name}({', '.join(parts)})"


class RemoteModule:
    """A handle on an nn.Module that lives in the student process."""

    def __init__(self, sandbox, module, name, handle, generation):
        self.sandbox = sandbox
        self.module = module
        self.name = name
        self.handle = handle
        self.generation = generation

    def _alive(self):
        if self.generation != self.sandbox._generation:
            raise StudentError(f"{self.name} was lost when an earlier check crashed the process", "gave-up")

    def _request(self, op, context, timeout=None, **fields):
        self._alive()
        return self.sandbox.request(self.module, op, timeout, context, handle=self.handle, **fields)

    def __call__(self, *args, train=False, seed=None, capture_args=False, timeout=None, stand_ins=None):
        """Run forward (in eval mode unless train=True); return (value, args_after). `stand_ins`: the student's
        functions replaced during this forward (autograder/sandbox/standin.py)."""
        mode = "train" if train else "eval"
        answer = self._request("call", signature(f"{self.name}.forward", args, {}) + f" in {mode} mode",
                               timeout, args=list(args), kwargs={}, train=train, seed=seed,
                               capture_args=capture_args, stand_ins=stand_ins or [])
        return answer.get("value"), answer.get("args_after")

    def load(self, params):
        """Copy trusted parameter values into the student's module by name."""
        self._request("load", f"loading weights into {self.name}", params=dict(params))

    def state(self):
        """Named parameters (deduplicated), all parameter names, buffers and submodule names, and `aliases`:
        each name of a submodule or parameter that is the same object as one named before it -> that name."""
        return self._request("state", f"reading the parameters of {self.name}")

    def to(self, device=None, dtype=None):
        target = ", ".join(str(x) for x in (device, dtype) if x is not None)
        self._request("to", f"{self.name}.to({target})", device=device, dtype=dtype)
        return self

    def count_ops(self, *args):
        """aten operator name -> number of calls during one forward pass."""
        return self._request("count_ops", signature(f"{self.name}.forward", args, {}), args=list(args))["counts"]

    def time(self, inputs, discard=False, timeout=None, stand_ins=None):
        """Run one forward pass per input (`inputs` stacked on dim 0); return (outputs, seconds, seconds waited).

        For the caller to time (autograder.graders.timing): each pass is a request of its own, sent only once
        the pass before it has answered, with a copy of its input in a storage of its own, so a pass sees
        its own input alone, and only when it runs. `seconds`: from sending the first pass to reading the
        last answer; `seconds waited`: of them, this thread's run delay (`Sandbox.exchange`). `discard`:
        send no outputs back. `stand_ins`: public stand-ins for the student's parts, in place during every pass
        (autograder/sandbox/standin.py, PUBLIC; never the sealed ones, which answer only the grader's inputs).
        """
        context = signature(f"{self.name}.forward", [inputs[0]], {}) + f" x {len(inputs)}"
        # An output is the size of an input, give or take a dtype and a last dimension: an answer far larger
        # than that is refused before it is read.
        limit = (1 << 20) + 16 * inputs[0].numel() * inputs.element_size()
        self._alive()
        if any(not spec.get("public") for spec in stand_ins or ()):
            raise ValueError("a timed pass takes public stand-ins only")
        requests = [timed_pass(self.handle, x, discard, stand_ins) for x in inputs]
        answers, seconds, waited = self.sandbox.exchange(self.module, requests, timeout, context, limit)
        outputs = [a.get("output") for a in answers]
        if discard:
            return [], seconds, waited
        if any(o is None for o in outputs):
            self.sandbox._strike(self.module, "answered out of protocol")  # its answers and passes may be out of step
            raise StudentError(f"{context} answered without its outputs (a request handler replaced by "
                               "student code?)", "bad-return")
        return outputs, seconds, waited
