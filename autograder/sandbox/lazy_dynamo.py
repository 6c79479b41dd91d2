"""torch._dynamo imported only if something really uses it: in the student process and in the grader.

torch's first meta-device op runs Python meta functions wrapped in
`torch._compile._disable_dynamo`, whose first call imports torch._dynamo
(about 1.3 s of CPU, 70 MiB) only to mark them "not traced by
torch.compile". Both sides run meta-device ops: the student process for the
device checks, the grader for its diagnoses (autograder/grade/diagnose.py
runs the reference there when a student's code raised on it). Neither
compiles, so here that mark is a no-op; any other use of torch._dynamo
(torch.compile, for one) imports the real module on first access.

Stdlib only at import (torch is imported by `install`, after the caller's
own import of it): the student process loads this file by path, before it
confines itself, as it does wire.py and landlock.py.
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
