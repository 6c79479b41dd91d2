"""The student side of the sandbox: runs student code, nothing else.

This file runs as `python -I _child.py LOG` in a child process whose working
directory holds a copy of the submission. It is self-contained on purpose
(stdlib and torch only): the trusted grader never imports student code, it
sends requests here and compares what comes back itself.

Protocol: frames of an 8-byte big-endian length and a payload written with
torch.save. The parent reads answers with torch.load(weights_only=True), so
only plain tensors and plain containers can come back.
"""
import importlib
import io
import os
import struct
import sys
import threading
import traceback

# I/O functions are captured before any student code is imported.
_write = os.write
_read = os.read

# Private copies of the protocol pipes; fd 0 becomes /dev/null and fds 1, 2
# go to the log, so that prints of student code never reach the protocol.
_IN = os.dup(0)
_OUT = os.dup(1)
_devnull = os.open(os.devnull, os.O_RDONLY)
os.dup2(_devnull, 0)
_log = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
os.dup2(_log, 1)
os.dup2(_log, 2)
os.close(_devnull)
os.close(_log)
os.set_inheritable(_IN, False)
os.set_inheritable(_OUT, False)

import torch  # noqa: E402
from torch import nn  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

torch.set_num_threads(1)
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
_save = torch.save
_load = torch.load
_Tensor = torch.Tensor
_Parameter = nn.Parameter
_SUBMISSION = os.path.realpath(os.getcwd())


class _LazyDynamo(type(sys)):
    """Stands in for torch._dynamo until something really needs it.

    The first meta-device op runs Python meta functions wrapped in
    `torch._compile._disable_dynamo`, whose first call imports torch._dynamo
    (about 2 s of CPU) only to mark them "not traced by torch.compile". Here
    that mark is a no-op; any other use of torch._dynamo (torch.compile, for
    one) imports the real module on first access.
    """

    @staticmethod
    def disable(fn=None, recursive=True, wrapping=True, reason=None):
        return fn

    def __getattr__(self, name):
        sys.modules.pop("torch._dynamo", None)
        torch.__dict__.pop("_dynamo", None)
        return getattr(importlib.import_module("torch._dynamo"), name)


if "torch._dynamo" not in sys.modules:
    torch._dynamo = sys.modules["torch._dynamo"] = _LazyDynamo("torch._dynamo")


def _warm_up():
    """The first meta-device op loads the meta registrations (~0.6 s): do it while the grader starts up."""
    try:
        torch.ones(1, device="meta") + 1
    except Exception:
        pass


_warming = threading.Thread(target=_warm_up, daemon=True)
_warming.start()
sys.path.insert(0, _SUBMISSION)


def _recv():
    head = b""
    while len(head) < 8:
        chunk = _read(_IN, 8 - len(head))
        if not chunk:
            sys.exit(0)
        head += chunk
    (size,) = struct.unpack(">Q", head)
    parts, left = [], size
    while left:
        chunk = _read(_IN, min(left, 1 << 20))
        if not chunk:
            sys.exit(0)
        parts.append(chunk)
        left -= len(chunk)
    return _load(io.BytesIO(b"".join(parts)), weights_only=True)


def _send(obj):
    buf = io.BytesIO()
    _save(obj, buf, _use_new_zipfile_serialization=False)  # the legacy format is faster for small messages
    data = buf.getvalue()
    view = memoryview(struct.pack(">Q", len(data)) + data)
    while view:
        view = view[_write(_OUT, view):]


class PatternDropout(nn.Module):
    """A deterministic stand-in for dropout: multiplies by a fixed pattern."""

    def __init__(self, pattern):
        super().__init__()
        self.pattern = pattern

    def forward(self, x):
        return x * self.pattern.to(x.device, x.dtype)


def _decode(obj):
    if isinstance(obj, dict):
        if "__pattern_dropout__" in obj:
            return PatternDropout(obj["__pattern_dropout__"])
        return {k: _decode(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_decode(v) for v in obj]
    return obj


def _encode(obj, depth=0):
    """Turn a student's return value into plain tensors and containers."""
    if type(obj) is _Tensor or type(obj) is _Parameter:
        return _Tensor.detach(obj)
    if obj is None or type(obj) in (bool, int, float, str):
        return obj
    if type(obj) in (tuple, list) and depth < 4:
        return [_encode(v, depth + 1) for v in obj]
    return {"__unsupported__": f"{type(obj).__module__}.{type(obj).__qualname__}"}


_objects = {}


class _ImportFailed(Exception):
    """Importing a student module raised: reported as such, with the original exception."""

    def __init__(self, module, exc):
        super().__init__(module)
        self.module = module
        self.exc = exc


def _module(name):
    try:
        return importlib.import_module(name)
    except BaseException as exc:  # SyntaxError, SystemExit, anything raised at import
        raise _ImportFailed(name, exc) from None


def _target(req):
    if "handle" in req:
        return _objects[req["handle"]]
    return getattr(_module(req["module"]), req["name"])


def _forward_input(req):
    return _decode(req.get("args", [])), _decode(req.get("kwargs", {}))


def _op_call(req):
    fn = _target(req)
    args, kwargs = _forward_input(req)
    if req.get("train") is not None:
        fn.train(req["train"])
    if req.get("seed") is not None:
        torch.manual_seed(req["seed"])
    with torch.no_grad():
        value = fn(*args, **kwargs)
    answer = {"value": _encode(value)}
    if req.get("capture_args"):
        answer["args_after"] = [_encode(a) for a in args]
    return answer


def _op_new(req):
    cls = getattr(_module(req["module"]), req["name"])
    args, kwargs = _forward_input(req)
    if req.get("seed") is not None:
        torch.manual_seed(req["seed"])
    obj = cls(*args, **kwargs)
    if not isinstance(obj, nn.Module):
        raise TypeError(f"{req['name']}(...) is not a torch.nn.Module")
    _objects[req["new_handle"]] = obj
    return {}


def _op_load(req):
    model = _objects[req["handle"]]
    with torch.no_grad():
        for name, value in req["params"].items():
            try:
                param = model.get_parameter(name)
            except AttributeError:
                raise AttributeError(f"the module has no parameter named {name!r}") from None
            if tuple(param.shape) != tuple(value.shape):
                raise ValueError(f"parameter {name!r} has shape {tuple(param.shape)}, expected {tuple(value.shape)}")
            param.copy_(value)
    return {}


def _op_state(req):
    model = _objects[req["handle"]]
    return {
        "parameters": {n: _Tensor.detach(p) for n, p in model.named_parameters()},
        "parameter_names": [n for n, _ in model.named_parameters(remove_duplicate=False)],
        "buffers": {n: _Tensor.detach(b) for n, b in model.named_buffers()},
        "modules": [n for n, _ in model.named_modules() if n],
    }


def _op_to(req):
    model = _objects[req["handle"]]
    model.to(**{k: req[k] for k in ("device", "dtype") if req.get(k) is not None})
    return {}


class _OpCounter(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.counts = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        self.counts[name] = self.counts.get(name, 0) + 1
        return func(*args, **(kwargs or {}))


def _op_count_ops(req):
    model = _objects[req["handle"]]
    args, kwargs = _forward_input(req)
    model.eval()
    counter = _OpCounter()
    with torch.no_grad(), counter:
        model(*args, **kwargs)
    return {"counts": counter.counts}


def _op_time(req):
    """Run a block of forward passes; the grader times the request with its own clock."""
    _warming.join()  # nothing else runs in this process while it is timed
    model = _objects[req["handle"]]
    args, kwargs = _forward_input(req)
    model.eval()
    cuda = any(isinstance(a, _Tensor) and a.is_cuda for a in args)
    with torch.no_grad():
        if cuda:
            torch.cuda.synchronize()
        for _ in range(req.get("reps", 10)):
            model(*args, **kwargs)
        if cuda:
            torch.cuda.synchronize()
    return {}


_OPS = {
    "call": _op_call,
    "new": _op_new,
    "load": _op_load,
    "state": _op_state,
    "to": _op_to,
    "count_ops": _op_count_ops,
    "time": _op_time,
}


def _is_student_file(filename):
    return os.path.isabs(filename) and os.path.realpath(filename).startswith(_SUBMISSION + os.sep)


def _student_traceback(exc):
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if _is_student_file(f.filename)]
    lines = [f'  File "{os.path.basename(f.filename)}", line {f.lineno}, in {f.name}\n    {f.line or ""}'
             for f in frames[-5:]]
    return "\n".join(lines)


def _error(exc):
    during_import = None
    if isinstance(exc, _ImportFailed):
        during_import, exc = exc.module, exc.exc
    if isinstance(exc, SystemExit):
        message = f"sys.exit({exc.code!r})"
    elif isinstance(exc, SyntaxError):
        message = f"{exc.msg} ({os.path.basename(exc.filename or '?')}, line {exc.lineno})"
    else:
        message = str(exc)
    return {
        "type": type(exc).__name__,
        "mro": [c.__name__ for c in type(exc).__mro__],
        "message": message[:2000],
        "traceback": _student_traceback(exc)[:4000],
        "during_import": during_import,
    }


def main():
    _send({"ok": True, "ready": True, "pid": os.getpid()})
    while True:
        req = _recv()
        try:
            answer = _OPS[req["op"]](req)
            reply = {"ok": True, **answer}
        except BaseException as exc:  # SystemExit and KeyboardInterrupt from student code too
            reply = {"ok": False, "error": _error(exc)}
        try:
            _send(reply)
        except Exception as exc:
            _send({"ok": False, "error": _error(exc)})


if __name__ == "__main__":
    main()
