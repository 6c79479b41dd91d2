"""The request server: what the student process does once it is confined, its limits set and its handshake sent,
until the grader closes the pipe (standard library and torch).

Requests and answers travel in wire.py's frames (JSON and raw tensor bytes, no pickle): a request as the grader
wrote it (views, shared storages, dtypes: `decode_request`), an answer in the answers' format, which the parent
checks against the frame's size, so only plain tensors and plain containers can come back (`_encode`), at a cost
bounded by what was sent. A request calls a student's function, builds a student's module and keeps it under a
handle, loads weights, reads its state, moves it, counts its operators or times one forward pass (`_OPS`); what
student code raises comes back with the student's own frames only (`_error`: student_code.py).

The student process (student_process.py) reads this file by path before it confines itself and runs it once torch
is imported, with its own instances of the siblings this file uses (below).
"""
import sys
import threading
import types

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

#: this process's channel.py, wire.py, seeding.py, standin.py and student_code.py, given by the student process as
#: it runs this file (student_process._sibling)
channel = wire = seeding = standin = student_code = None
_Tensor = torch.Tensor
_Parameter = nn.Parameter


def warm_up():
    """The first meta-device op loads the meta registrations (~0.6 s): do it while the grader starts up."""
    try:
        torch.ones(1, device="meta") + 1
    except Exception:
        pass


warming = threading.Thread(target=warm_up, daemon=True)


def _recv():
    return wire.decode_request(channel.receive())


def _frame(payload):
    channel.send(payload)


def _send(obj):
    _frame(wire.encode(obj))


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


def _target(req):
    if "handle" in req:
        return _objects[req["handle"]]
    return getattr(student_code.student_module(req["module"]), req["name"])


def _forward_input(req):
    return _decode(req.get("args", [])), _decode(req.get("kwargs", {}))


class _StandIn:
    """A student's function replaced for one request by the grader's stand-in (autograder/sandbox/standin.py):
    the reference's answers for the inputs the reference wiring gives it, sealed with those inputs."""

    def __init__(self, function, answers):
        self.function, self.answers = function, answers
        self.__name__ = function[1]

    def __call__(self, *args, **kwargs):
        try:
            return standin.answer(self.function, self.answers, args, kwargs)
        except standin.NoAnswer as exc:
            raise RuntimeError(f"the grader's stand-in for your {self.function[1]}: {exc}") from None


#: (module, name) of a public stand-in -> the (student module, name, original) places that hold the student's
#: function: found once, so that a timed pass does not pay for a search of every module (milliseconds)
_public_places = {}

#: every module of sys.modules looked at so far: its name -> (the module, whether it is one of the student's), so
#: that a module is judged once, when first seen (a name bound to another module since is judged again)
_judged = {}


def _student_modules():
    """The student's modules now in sys.modules: those whose file is in the student's copy.

    Each module is judged once: what a stand-in looks for is searched for in these few modules only, not in the
    thousand and more of torch at every request (a fifth of a class run's CPU went there). A module's file is read
    from its own namespace, never with getattr: a lazy module's __getattr__ (torch._dynamo's stand-in,
    lazy_dynamo.py) would import what it stands in for."""
    found = []
    for name, mod in list(sys.modules.items()):
        judged = _judged.get(name)
        if judged is None or judged[0] is not mod:
            file = vars(mod).get("__file__") if isinstance(mod, types.ModuleType) else None
            judged = _judged[name] = (mod, isinstance(file, str) and student_code.is_student_file(file))
        if judged[1]:
            found.append(mod)
    return found


class _standing_in:
    """For one request: the functions `specs` names replaced by stand-ins, wherever a student module holds them
    (its own module, and any student module that imported it by name), then put back. A spec with "public"
    names a public stand-in (standin.PUBLIC: the operation itself, no answers); one with "answers", the
    grader's sealed answers."""

    def __init__(self, specs):
        self.specs, self.saved = specs or [], []

    def __enter__(self):
        for spec in self.specs:
            function = (spec["module"], spec["name"])
            if function not in standin.SIGNATURES:
                raise ValueError(f"no stand-in for {function}")
            if spec.get("public"):
                fake = standin.PUBLIC[function]
                places = _public_places.get(function)
                if places is None:
                    places = _public_places[function] = self._places(function)
            else:
                fake = _StandIn(function, spec["answers"])
                places = self._places(function)
            for mod, name, original in places:
                if vars(mod).get(name) is original:
                    self.saved.append((mod, name, original))
                    setattr(mod, name, fake)
        return self

    @staticmethod
    def _places(function):
        """Where student modules hold the student's `function`: (module, name, the function)."""
        original = getattr(student_code.student_module(function[0]), function[1], None)
        if original is None:
            return []
        return [(mod, name, original) for mod in _student_modules()
                for name, value in list(vars(mod).items()) if value is original]

    def __exit__(self, *exc):
        for mod, name, value in reversed(self.saved):
            setattr(mod, name, value)
        return False


def _op_call(req):
    fn = _target(req)
    args, kwargs = _forward_input(req)
    if req.get("train") is not None:
        fn.train(req["train"])
    if req.get("seed") is not None:
        seeding.manual_seed(req["seed"])
    with torch.no_grad(), _standing_in(req.get("stand_ins")):
        value = fn(*args, **kwargs)
    answer = {"value": _encode(value)}
    if req.get("capture_args"):
        answer["args_after"] = [_encode(a) for a in args]
    return answer


def _op_new(req):
    cls = getattr(student_code.student_module(req["module"]), req["name"])
    args, kwargs = _forward_input(req)
    if req.get("seed") is not None:
        seeding.manual_seed(req["seed"])
    with _standing_in(req.get("stand_ins")):
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
    first, aliases = {}, {}  # id -> the first name of a submodule or parameter; a later name -> that first one
    for n, obj in [*model.named_modules(remove_duplicate=False), *model.named_parameters(remove_duplicate=False)]:
        if first.setdefault(id(obj), n) != n:
            aliases[n] = first[id(obj)]
    return {
        "parameters": {n: _Tensor.detach(p) for n, p in model.named_parameters()},
        "parameter_names": [n for n, _ in model.named_parameters(remove_duplicate=False)],
        "buffers": {n: _Tensor.detach(b) for n, b in model.named_buffers()},
        "modules": [n for n, _ in model.named_modules() if n],
        "aliases": aliases,
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
    """One timed forward pass, for the grader to time with its own clock (autograder/graders/timing.py).

    The grader sends each pass of a block as a request of its own, and only once the answer to the pass
    before it has been read back whole: a pass's input is in this process only from its own request on,
    in a storage of its own (decode_request clones every storage), so no pass can read a later one's
    input, or work on several at once. The grader checks every output, so a pass that skips its work is
    caught.
    """
    if warming.is_alive():
        warming.join()  # nothing else runs in this process while it is timed
    model = _objects[req["handle"]]
    x = req["x"]
    if model.training:
        model.eval()
    with torch.no_grad(), _standing_in(req.get("stand_ins")):
        output = model(x)
        if x.is_cuda:
            torch.cuda.synchronize()
    return {} if req.get("discard") else {"output": _encode(output)}


_OPS = {
    "call": _op_call,
    "new": _op_new,
    "load": _op_load,
    "state": _op_state,
    "to": _op_to,
    "count_ops": _op_count_ops,
    "time": _op_time,
}


def _error(exc):
    return student_code.error(exc)


def serve(folder):
    """Answer requests until the grader closes the pipe (`_recv` ends the process then); `folder`: the real path
    of the student's copy."""
    student_code.submission = folder
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
