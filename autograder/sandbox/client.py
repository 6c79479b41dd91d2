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

The process underneath (its copy, its start, its handshake, its end) is
process.py's StudentProcess; a module built in it is a RemoteModule (remote.py).
"""
from __future__ import annotations

import itertools
import re
import signal
import struct
import sys
import time

from autograder.sandbox import batchlock, channel, freeze, wire
from autograder.sandbox.errors import StudentError
from autograder.sandbox.limits import Limits
from autograder.sandbox.process import StudentProcess
from autograder.sandbox.remote import RemoteModule, signature
from autograder import MODULES
from autograder.scoring import NOT_HANDED_IN

MAX_STRIKES = 2  # crashes or timeouts of one module before its checks stop running
MAX_ANSWER = 64 << 20  # bytes of one answer; requests whose answers are bounded tighter pass their own limit


class Sandbox(StudentProcess):
    """One student process serving the requests of a whole grading run."""

    def __init__(self, submission, *, call_timeout=10.0, start_timeout=60.0, python=sys.executable,
                 limits=Limits(), isolation="auto", zygote=None, intake=None, parts=MODULES):
        super().__init__(submission, start_timeout=start_timeout, python=python, limits=limits,
                         isolation=isolation, zygote=zygote, intake=intake, parts=parts)
        self.call_timeout = call_timeout
        self._handles = itertools.count(1)
        self._objects = {}  # handle -> (generation, module)
        self.strikes = {}  # module -> [messages]
        self.given_up = {}  # module -> why its calls are no longer run: the first call timeout or memory limit it met
        self.relay_cpu = 0.0  # seconds of CPU this thread used in the span of the last exchange (`exchange`)

    # -- framing ------------------------------------------------------------
    @staticmethod
    def _frame(obj):
        return channel.frame(wire.encode_request(obj))  # views, shared storages, dtypes and devices as sent (wire.py)

    def _read_raw(self, deadline, limit=MAX_ANSWER):
        """One answer's frame, unread (autograder/sandbox/wire.py); wire.Malformed for a frame over `limit` bytes."""
        try:
            return channel.read_frame(self._proc.stdout.fileno(), deadline, limit, "an answer")
        except channel.TooLong as exc:
            raise wire.Malformed(f"{exc} (no answer to this request needs more than {limit / (1 << 20):g} MiB)") \
                from None

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
        seconds of them this thread waited for a CPU while runnable: its run delay, the machine's load). The
        seconds of them this thread ran on a CPU (writing requests, reading answers) are left in `relay_cpu`.

        So the student process holds a request's data only from the moment it is sent on: a timed block's
        passes arrive one at a time (autograder/graders/timing.py). Every request is encoded before the first
        is sent and every answer decoded after the last is read, so the seconds hold the student process's
        work and the pipes' alone. `timeout` and `answer_limit` hold for all of them together and for each.
        """
        module = owner
        if module not in self.available:
            why = self.intake.get("missing", {}).get(module) or self.refused.get(f"{module}.py")
            raise StudentError(why or NOT_HANDED_IN, "missing")
        if module in self.given_up:  # it met the call timeout or the memory limit once: no check meets it again
            raise StudentError(f"not run: {self.given_up[module]}", "gave-up")
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
            (ran, waited), begin = freeze.own_schedstat(), time.perf_counter()  # read next to each other: a
            for frame in frames:  # wait counts in the run delay when it ends, so one outside the span must not
                stdin.write(frame)  # fall between
                stdin.flush()
                raw.append(self._read_raw(deadline, answer_limit))
            seconds = time.perf_counter() - begin
            ran_after, waited_after = freeze.own_schedstat()
            waited = (waited_after - waited) / 1e9
            self.relay_cpu = (ran_after - ran) / 1e9  # this thread's own CPU in the span: its side of the relay
            answers = _decoded(raw, deadline)
        except TimeoutError:
            self._strike(module, f"no answer within {timeout:g} s")
            self.given_up[module] = (f"{module}.py did not finish {context} within {timeout:g} s in an earlier check "
                                     "(an infinite loop, or far too slow?)")
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
            if self._out_of_memory(err):
                self._memory_limit_met(module, context, err)
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

    def _out_of_memory(self, err):
        """Whether the exception `err` (`_error_fields`) comes from the memory limit."""
        return bool(self.limits.memory_bytes) and ("MemoryError" in err["mro"]
                                                   or "allocate memory" in f"{err['type']} {err['message']}")

    def _memory_limit_met(self, module, context, err):
        """The first call that met the memory limit ends the checks of the module whose code met it (the file of
        the last frame of its traceback that is a student module's: a bomb in attention.py that the student's
        mha.py calls is attention's fault, and the MHA checks stand it in, graders/blame.py), instead of each
        check writing memory up to the limit again. Where the student's processes still hold over half the limit
        (a bomb that keeps what it got), the process starts afresh, so that no other module's calls meet that
        memory; one that let it go keeps running (a restart costs a start, and the modules built in it)."""
        files = re.findall(r'File "([^"/]+)\.py", line \d+', err.get("traceback", ""))
        at_fault = next((f for f in reversed(files) if f in self.parts), module)
        if at_fault not in self.given_up:
            limit = self.limits.describe("memory_bytes")
            self.given_up[at_fault] = (f"{at_fault}.py exceeded the memory limit ({limit} for a student process) "
                                       f"in an earlier check, during {context}")
            if self._resident_bytes() > self.limits.memory_bytes / 2:
                self._kill()

    def _resident_bytes(self):
        """The resident memory of the student's processes (VmRSS, from /proc), in bytes; 0 where it cannot be read."""
        root, total = self.process_tree_root(), 0
        try:
            pids = freeze.tree(root) if root is not None else []
        except OSError:  # no /proc (macOS)
            pids = []
        for pid in pids:
            try:
                with open(f"/proc/{pid}/status", "rb") as fh:
                    total += next((int(line.split()[1]) << 10 for line in fh if line.startswith(b"VmRSS:")), 0)
            except (OSError, ValueError, IndexError):
                continue
        return total

    def _limit_hint(self, err):
        """Point at the limit behind an exception that comes from one."""
        text = f"{err['type']} {err['message']}"
        if self._out_of_memory(err):
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


def _error_fields(err):
    """The error of a failed answer, as the fields that messages use, whatever the student process sent."""
    err = err if isinstance(err, dict) else {}
    text = lambda v: v if isinstance(v, str) else ""  # noqa: E731
    mro = err.get("mro")
    return {"type": text(err.get("type")) or "an unnamed error", "message": text(err.get("message")),
            "mro": [m for m in mro if isinstance(m, str)] if isinstance(mro, list) else [],
            "traceback": text(err.get("traceback")), "during_import": text(err.get("during_import")) or None}
