"""torch._dynamo in the trusted grader process: imported only if something really uses it.

The graders run the reference on the meta device when a student's code
raised there (autograder/grade/diagnose.py names the mistake that raises the
same error). torch's first meta-device op runs Python meta functions wrapped
in `torch._compile._disable_dynamo`, whose first call imports torch._dynamo
(about 1.3 s of CPU, 70 MiB) only to mark them "not traced by
torch.compile". Nothing in the grader compiles, so here that mark is a
no-op; any other use of torch._dynamo imports the real module on first
access.

The student process has its own copy of this stand-in
(autograder/sandbox/student_process.py, which loads nothing of the kit).
"""
from __future__ import annotations

import importlib
import sys


class LazyDynamo(type(sys)):
    """Stands in for torch._dynamo until something other than `disable` is asked of it."""

    @staticmethod
    def disable(fn=None, recursive=True, wrapping=True, reason=None):
        return fn

    def __getattr__(self, name):
        import torch

        sys.modules.pop("torch._dynamo", None)
        torch.__dict__.pop("_dynamo", None)
        return getattr(importlib.import_module("torch._dynamo"), name)


def install():
    """Put the stand-in in place, unless torch._dynamo is imported already (then nothing is left to save)."""
    import torch  # here: the grader starts its student process before it imports torch

    if "torch._dynamo" not in sys.modules:
        torch._dynamo = sys.modules["torch._dynamo"] = LazyDynamo("torch._dynamo")
