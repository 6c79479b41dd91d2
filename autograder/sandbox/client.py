"""The trusted side of the sandbox: a client for the student process.

The grading process never imports student code. A `Sandbox` starts
`student_process.py` in a child process whose working directory is a private copy of
the submission, sends it requests (call this function, build this module,
run its forward pass) and reads back plain tensors and containers in
autograder/sandbox/wire.py's format, checked against the frame's size and against
the most bytes an answer to the request may take (no pickle: what an answer
costs here is bounded by what was sent). Every request has a timeout. A child that
hangs is killed, one that dies is restarted, and a module that crashes the
child twice is not run again: its remaining checks fail at once.

How the child is confined (`namespaces`, `landlock` or `none`, strongest
first) is decided once per grader run by `choose_isolation` (isolation.py), which
probes each level in a throwaway process. A child that cannot start (before its
handshake, no student code has run) raises `GraderUnavailable` (errors.py): the
grader's failure, never the student's 0.
"""
from __future__ import annotations

import functools
import itertools
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from autograder import MODULES
from autograder.sandbox import batchlock, freeze, wire
from autograder.sandbox.diskguard import DiskGuard
from autograder.sandbox.errors import GraderUnavailable, StudentError
from autograder.sandbox.forkserver import Worker
from autograder.sandbox.isolation import CHILD, _read_exactly, _read_handshake, choose_isolation, refusals
from autograder.sandbox.limits import WRITABLE, Limits, forbidden_paths, student_env
from autograder.scoring import NOT_HANDED_IN
from autograder.submission import intake as _intake

MAX_STRIKES = 2  # crashes or timeouts of one module before its checks stop running
LOG_TAIL = 1500
MAX_ANSWER = 64 << 20  # bytes of one answer; requests whose answers are bounded tighter pass their own limit


def remove_tree(path):
    """Remove `path` and everything under it, also folders that student code made unreadable (chmod 000)."""
    def unlock(func, name, _exc):
        try:
            os.chmod(os.path.dirname(name), 0o700)
            if os.path.isdir(name) and not os.path.islink(name):
                os.chmod(name, 0o700)
            func(name)
        except OSError:
            pass

    if os.path.lexists(path):
        shutil.rmtree(path, onerror=unlock)


class _Forked(Worker):
    """A student process forked by the warm zygote, with the protocol pipes of a Popen."""

    def __init__(self, address, config):
        to_child, self_in = os.pipe()
        self_out, from_child = os.pipe()
        try:
            super().__init__(address, config, fds=(to_child, from_child))
        except BaseException:
            os.close(self_in)
            os.close(self_out)
            raise
        finally:
            os.close(to_child)
            os.close(from_child)
        self.stdin = os.fdopen(self_in, "wb")
        self.stdout = os.fdopen(self_out, "rb")


class Sandbox:
    """One student process serving the requests of a whole grading run."""

    def __init__(self, submission, *, call_timeout=10.0, start_timeout=60.0, python=sys.executable,
                 limits=Limits(), isolation="auto", zygote=None, intake=None):
        self.submission = Path(submission)
        self.call_timeout = call_timeout
        self.start_timeout = start_timeout
        self.python = python
        self.limits = limits
        self.level = isolation  # "auto" until the first start decides (choose_isolation)
        self.zygote = zygote  # address of a warm student zygote (autograder.sandbox.forkserver), or None
        self.isolation = None  # how the last student process was confined, as it reported
        self._cuda_problem = None  # why CUDA cannot run in the student process, as it reported (cuda_problem)
        # what the engine's intake left out ({"missing": {module: why}, "source": the original submission})
        self.intake = intake or {}
        self.refused = {}  # file -> why the copy below left it out (a link, a FIFO, too large)
        self.available = {m for m in MODULES if _intake.is_regular(self.submission / f"{m}.py")}
        self._tmp = Path(tempfile.mkdtemp(prefix="mha-sandbox-"))
        os.chmod(self._tmp, 0o711)  # a student uid of its own may pass through to its copy, never list
        self._work = self._tmp / "work"
        self._home = self._tmp / "home"
        self._log = self._tmp / "student-output.log"
        self._proc = None
        self._kill_lock = threading.Lock()  # _kill: one thread ends a process
        self._guard = None  # the disk guard of the student process (autograder/sandbox/diskguard.py), at some levels
        self._ready = False
        self._handles = itertools.count(1)
        self._objects = {}  # handle -> (generation, module)
        self._generation = 0
        self.strikes = {}  # module -> [messages]
        self.restarts = 0
        self.started_at = self.ready_at = None  # wall-clock times of the last start, for the benchmark

    # -- process management -------------------------------------------------
    def start(self):
        """Start the child now (it imports torch while the caller does other work)."""
        if self._proc is not None:
            return
        if self.level == "auto":
            self.level = choose_isolation("auto", python=self.python)
        for folder in (self._work, self._home):  # each student process starts with an empty home and a fresh copy
            remove_tree(folder)
            folder.mkdir(mode=0o700)
        for name in os.listdir(self.submission):  # regular files only, never through a link (submission.intake)
            if name.endswith(".py"):
                try:
                    data = _intake.read_regular(self.submission / name, _intake.MAX_FILE[".py"], name)
                except _intake.Refused as exc:
                    self.refused[name] = str(exc)
                    self.available.discard(name[:-3])
                    continue
                _intake.write_new(self._work / name, data)
        self._generation += 1
        self._ready = False
        self.started_at = time.time()
        root = self._tmp / f"root-{self._generation}"
        root.mkdir()
        self._log_mark = self._log.stat().st_size if self._log.exists() else 0
        config = {"log": str(self._log), "cwd": str(self._work), "home": str(self._home), "root": str(root),
                  "isolation": self.level, "limits": self.limits.to_dict(), "writable": WRITABLE,
                  "env": student_env(self._home),
                  "forbidden": forbidden_paths(self.submission, *filter(None, [self.intake.get("source")])),
                  "refuse": refusals(False)}
        self._proc = None
        with batchlock.spawning():  # in a class run, a measurement stops this process from its first instant
            self._spawn(config)
        self._guard_disk()

    def _spawn(self, config):
        if self.zygote:
            try:
                self._proc = _Forked(self.zygote, config)
            except OSError:
                self.zygote = None  # the zygote is gone: start cold processes from now on
        if self._proc is None:
            self._proc = subprocess.Popen(
                [self.python, "-I", str(CHILD), json.dumps(config)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                cwd=self._work, env=config["env"], start_new_session=True,
            )
        batchlock.register(self._proc.pid)  # in a class run, other gradings' speed checks stop this tree

    def _guard_disk(self):
        if self.level != "namespaces":  # folders on the disk, not size-capped mounts: a guard holds them to it
            copy = sum(f.stat().st_size for f in self._work.iterdir())
            self._guard = DiskGuard([self._work, self._home],
                                    WRITABLE["tmp_bytes"] + max(WRITABLE["copy_bytes"], 2 * copy),
                                    2 * WRITABLE["files"], functools.partial(self._disk_full, self._proc)).start()

    def _disk_full(self, proc, why):
        """The disk guard's call (from its thread): end the student's tree; its keeper ends all of it."""
        try:
            os.kill(proc.pid, signal.SIGTERM)
            os.kill(proc.pid, signal.SIGCONT)  # a keeper stopped by a freeze acts on it
        except OSError:
            pass

    def _kill(self):
        """End the student process and everything it started: its keeper (see keeper.py) ends them all on
        SIGTERM; the process group is killed outright if the keeper does not finish in time.

        Safe from two threads at once (a caller closing the sandbox while a call in another thread fails
        because of it): the process is taken under a lock, and only the thread that took it ends it."""
        with self._kill_lock:
            proc, self._proc = self._proc, None
        if proc is None:
            return
        if self._guard is not None:
            self._guard.stop()
        batchlock.unregister(proc.pid)
        try:
            os.kill(proc.pid, signal.SIGTERM)
            os.kill(proc.pid, signal.SIGCONT)  # a keeper stopped by a freeze (autograder/sandbox/freeze.py) acts on it
            proc.wait(timeout=3)
        except (OSError, subprocess.TimeoutExpired):  # no keeper yet, or one that does not finish
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        for stream in (proc.stdin, proc.stdout):
            try:
                stream.close()
            except OSError:
                pass
        if isinstance(proc, _Forked):
            proc.close()

    def close(self):
        self._kill()
        remove_tree(self._tmp)

    def process_tree_root(self):
        """The pid whose descendants are every process of the student side (its keeper), or None.

        The keeper is a child subreaper: every process student code starts, daemons included, stays under
        it, so stopping this tree stops all student code (autograder/sandbox/freeze.py)."""
        return None if self._proc is None else self._proc.pid

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.close()

    def output_tail(self, limit=LOG_TAIL):
        """The last `limit` characters the student's code printed."""
        try:
            text = self._log.read_bytes()[-limit:].decode("utf-8", "replace")
        except OSError:
            return ""
        return text

    # -- framing ------------------------------------------------------------
    @staticmethod
    def _frame(obj):
        data = wire.encode_request(obj)  # views, shared storages, dtypes and devices as sent (wire.py)
        return struct.pack(">Q", len(data)) + data

    def _read_raw(self, deadline, limit=MAX_ANSWER):
        """One answer's frame, unread (autograder/sandbox/wire.py); wire.Malformed for a frame over `limit` bytes."""
        fd = self._proc.stdout.fileno()
        (size,) = struct.unpack(">Q", _read_exactly(fd, 8, deadline))
        if size > limit:
            raise wire.Malformed(f"an answer of {size / (1 << 20):.1f} MiB (no answer to this request needs more "
                                 f"than {limit / (1 << 20):g} MiB)")
        return _read_exactly(fd, size, deadline)

    def _ensure_ready(self):
        """Start the student process if needed and wait for its handshake; GraderUnavailable if it fails.

        No student code runs before the handshake, so a process that fails before it is the grader's failure.
        """
        if self._proc is None:
            self.start()
            self.restarts += self._generation > 1
        if self._ready:
            return
        try:
            answer = _read_handshake(self._proc.stdout.fileno(), batchlock.Deadline(self.start_timeout))
            why = None if answer.get("ready") else str(answer.get("error", "no reason given"))
        except TimeoutError:
            why = f"no handshake within {self.start_timeout:g} s"
        except (EOFError, OSError, ValueError, struct.error) as exc:
            code = self._exit_code()
            why = f"it ended before its handshake (exit code {code}; {type(exc).__name__})"
            tail = self._log_since_start(400)
            if tail:
                why += f"; its last output: {tail!r}"
        if why is not None:
            self._kill()
            raise GraderUnavailable(f"the process for student code could not start at {self.level} isolation: "
                                    f"{why}")
        self.isolation = answer.get("isolation")
        self._cuda_problem = answer.get("cuda_problem")
        self._ready = True
        self.ready_at = time.time()

    def cuda_problem(self):
        """Why CUDA cannot run in the student process on this machine, as the process found before any student
        code ran (its handshake); None where it can, or where the machine has no GPU nodes."""
        self._ensure_ready()
        return self._cuda_problem

    def _exit_code(self):
        """How the student process ended (negative: the signal), waiting briefly; None if it still runs."""
        if self._proc is None:
            return None
        try:
            return self._proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            return None

    def _log_since_start(self, limit):
        """What the current student process printed before its handshake (no student code: only ours)."""
        try:
            with open(self._log, "rb") as fh:
                fh.seek(self._log_mark)
                return fh.read()[-limit:].decode("utf-8", "replace").strip()
        except OSError:
            return ""

    # -- requests -----------------------------------------------------------
    def request(self, owner, op, timeout=None, context="your code", answer_limit=MAX_ANSWER, **fields):
        """Send one request that runs code of the module `owner`; return the answer dict.

        `context` names the call in messages, e.g. "split_heads(float32 tensor (2, 3, 8), 2)";
        `answer_limit`: the most bytes an answer to it may take.
        """
        return self.exchange(owner, [{"op": op, **fields}], timeout, context, answer_limit)[0][0]

    def exchange(self, owner, requests, timeout=None, context="your code", answer_limit=MAX_ANSWER):
        """Send `requests`, each only once the answer to the one before it has been read back whole; return
        (the answer dicts, seconds from sending the first to reading the last answer by this process's clock,
        seconds of them this thread waited for a CPU while runnable: its run delay, the machine's load).

        So the student process holds a request's data only from the moment it is sent on: a timed block's
        passes arrive one at a time (autograder/grade/timing.py). Every request is encoded before the first
        is sent and every answer decoded after the last is read, so the seconds hold the student process's
        work and the pipes' alone. `timeout` and `answer_limit` hold for all of them together and for each.
        """
        module = owner
        if module not in self.available:
            why = self.intake.get("missing", {}).get(module) or self.refused.get(f"{module}.py")
            raise StudentError(why or NOT_HANDED_IN, "missing")
        if len(self.strikes.get(module, ())) >= MAX_STRIKES:
            raise StudentError(
                f"not run: {module}.py already crashed or timed out {MAX_STRIKES} times "
                f"({self.strikes[module][-1]})", "gave-up")
        timeout = self.call_timeout if timeout is None else timeout
        batchlock.student_call()  # in a class run, none starts while another grading measures speed
        self._ensure_ready()
        frames = [self._frame(r) for r in requests]
        try:
            # a measurement of a neighbour may stop this call's process: that time is not counted
            deadline = batchlock.Deadline(timeout)
            stdin, raw = self._proc.stdin, []
            waited, begin = freeze.own_run_delay(), time.perf_counter()  # read next to each other: a wait counts
            for frame in frames:  # in the run delay when it ends, so one outside the span must not fall between
                stdin.write(frame)
                stdin.flush()
                raw.append(self._read_raw(deadline, answer_limit))
            seconds = time.perf_counter() - begin
            waited = (freeze.own_run_delay() - waited) / 1e9
            answers = _decoded(raw, deadline)
        except TimeoutError:
            self._strike(module, f"no answer within {timeout:g} s")
            raise StudentError(f"{context} did not finish within {timeout:g} s "
                               "(an infinite loop, or far too slow?)", "timeout") from None
        except (EOFError, OSError, struct.error):
            code = self._exit_code()
            disk = self._guard.why if self._guard is not None else None
            self._strike(module, f"exit code {code}" if disk is None else "wrote too much to disk")
            tail = self.output_tail(300).strip()
            hint = f" Its last output: {tail!r}" if tail else ""
            if disk is not None:
                cap = f"{self._guard.max_bytes >> 20} MiB in {self._guard.max_files} files and folders"
                raise StudentError(f"the process running your code was stopped during {context}: its folders held "
                                   f"{disk}, more than student code may write ({cap}).{hint}", "crashed") from None
            if code is not None and code < 0:
                raise StudentError(f"the process running your code {self._killed(-code)} during {context}.{hint}",
                                   "crashed") from None
            raise StudentError(f"the process running your code exited (exit code {code}) during {context}: "
                               f"sys.exit, os._exit or a crash in {module}.py?{hint}", "crashed") from None
        except wire.Refused as exc:  # a sparse or quantized tensor: the student's answer, which cannot be checked
            raise StudentError(f"{context} returned {exc}: only dense tensors (on the CPU, a GPU or the meta "
                               "device) can be checked", "bad-return") from None
        except Exception as exc:  # an answer out of format (wire.Malformed), or too large
            self._strike(module, "unreadable answer")
            detail = str(exc) if isinstance(exc, wire.Malformed) else type(exc).__name__
            raise StudentError(f"{context} returned something that is not a plain tensor ({detail})",
                               "bad-return") from None
        for answer in answers:
            self._check_answer(answer, module, context)
        return answers, seconds, waited

    def _check_answer(self, answer, module, context):
        """Raise StudentError for an answer out of protocol or one that reports an exception."""
        if not isinstance(answer, dict):
            self._strike(module, "unreadable answer")
            raise StudentError(f"{context} answered out of protocol (a request handler replaced by student "
                               "code?)", "bad-return")
        if not answer.get("ok"):
            err = _error_fields(answer.get("error"))
            detail = (f": {err['message']}" if err["message"] else "") + self._limit_hint(err)
            if err.get("during_import"):
                raise StudentError(f"importing {err['during_import']}.py raised {err['type']}{detail}",
                                   "import", err["type"], err["mro"], err.get("traceback", ""))
            raise StudentError(f"{context} raised {err['type']}{detail}", "raised", err["type"],
                               err["mro"], err.get("traceback", ""), err["message"])

    def _killed(self, sig):
        """How a student process that died of signal `sig` reads in a message."""
        if sig == signal.SIGXCPU or (sig == signal.SIGKILL and self.limits.cpu_seconds):
            cpu = f"used up its CPU time ({self.limits.describe('cpu_seconds')}, the limit for one grading)"
            return cpu if sig == signal.SIGXCPU else f"was killed (SIGKILL: {cpu}, or it ran out of memory)"
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = f"signal {sig}"
        return f"was killed by {name}" + (" (a crash in native code)" if sig == signal.SIGSEGV else "")

    def _limit_hint(self, err):
        """Point at the limit behind an exception that comes from one."""
        text = f"{err['type']} {err['message']}"
        if self.limits.memory_bytes and ("MemoryError" in err["mro"] or "allocate memory" in text):
            return f" (exceeded the memory limit: a student process may use {self.limits.describe('memory_bytes')})"
        if self.limits.output_bytes and "File too large" in text:
            return f" (exceeded the output limit: student code may print or write {self.limits.describe('output_bytes')})"
        if self.limits.processes and "Resource temporarily unavailable" in text and "fork" in text.lower():
            return f" (exceeded the process limit: {self.limits.processes} processes and threads)"
        return ""

    def _strike(self, module, message):
        self.strikes.setdefault(module, []).append(message)
        self._kill()

    # -- convenience --------------------------------------------------------
    def call(self, module, name, *args, seed=None, capture_args=False, timeout=None, **kwargs):
        """Call `module.name(*args, **kwargs)` in the child; return (value, args_after)."""
        answer = self.request(module, "call", timeout, signature(name, args, kwargs), module=module,
                              name=name, args=list(args), kwargs=kwargs, seed=seed, capture_args=capture_args)
        return answer.get("value"), answer.get("args_after")

    def new(self, module, name, *args, seed=None, timeout=None, stand_ins=None, **kwargs):
        """Build `module.name(*args, **kwargs)` in the child; return a RemoteModule. `stand_ins`: the student's
        functions replaced while it is built (autograder/sandbox/standin.py)."""
        handle = next(self._handles)
        self.request(module, "new", timeout, signature(name, args, kwargs), module=module, name=name,
                     args=list(args), kwargs=kwargs, seed=seed, new_handle=handle, stand_ins=stand_ins or [])
        remote = RemoteModule(self, module, name, handle, self._generation)
        remote.args, remote.kwargs = tuple(args), dict(kwargs)  # how it was built (autograder/graders/blame.py)
        return remote


def _decoded(frames, deadline):
    """The answers in `frames` (wire.decode); TimeoutError when decoding them ends past `deadline` (a
    batchlock.Deadline, or a time.monotonic() figure): decoding is part of the call, and an answer that
    arrived in time but took past the deadline to read back is a timeout too."""
    answers = [wire.decode(frame) for frame in frames]
    if (deadline.left() if isinstance(deadline, batchlock.Deadline) else deadline - time.monotonic()) <= 0:
        raise TimeoutError
    return answers


def timed_pass(handle, x, discard=False):
    """The request of one timed forward pass of the module `handle` on `x`: a copy of `x` in a storage of its
    own, so that the student process sees no other pass's input through it (RemoteModule.time)."""
    return {"op": "time", "handle": handle, "discard": discard, "x": x.contiguous().clone()}


def _error_fields(err):
    """The error of a failed answer, as the fields that messages use, whatever the student process sent."""
    err = err if isinstance(err, dict) else {}
    text = lambda v: v if isinstance(v, str) else ""  # noqa: E731
    mro = err.get("mro")
    return {"type": text(err.get("type")) or "an unnamed error", "message": text(err.get("message")),
            "mro": [m for m in mro if isinstance(m, str)] if isinstance(mro, list) else [],
            "traceback": text(err.get("traceback")), "during_import": text(err.get("during_import")) or None}


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

    def time(self, inputs, discard=False, timeout=None):
        """Run one forward pass per input (`inputs` stacked on dim 0); return (outputs, seconds, seconds waited).

        For the caller to time (autograder.grade.timing): each pass is a request of its own, sent only once
        the pass before it has answered, with a copy of its input in a storage of its own, so a pass sees
        its own input alone, and only when it runs. `seconds`: from sending the first pass to reading the
        last answer; `seconds waited`: of them, this thread's run delay (`Sandbox.exchange`). `discard`:
        send no outputs back.
        """
        context = signature(f"{self.name}.forward", [inputs[0]], {}) + f" x {len(inputs)}"
        # An output is the size of an input, give or take a dtype and a last dimension: an answer far larger
        # than that is refused before it is read.
        limit = (1 << 20) + 16 * inputs[0].numel() * inputs.element_size()
        self._alive()
        requests = [timed_pass(self.handle, x, discard) for x in inputs]
        answers, seconds, waited = self.sandbox.exchange(self.module, requests, timeout, context, limit)
        outputs = [a.get("output") for a in answers]
        if discard:
            return [], seconds, waited
        if any(o is None for o in outputs):
            self.sandbox._strike(self.module, "answered out of protocol")  # its answers and passes may be out of step
            raise StudentError(f"{context} answered without its outputs (a request handler replaced by "
                               "student code?)", "bad-return")
        return outputs, seconds, waited
