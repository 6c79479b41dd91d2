"""The student side of the sandbox: runs student code, nothing else.

It runs either as `python -I student_process.py CONFIG` or as a fork of the warm
student zygote (autograder/sandbox/forkserver.py), with the protocol pipes on fds 0
and 1. It is self-contained on purpose (stdlib and torch only): the trusted grader never
imports student code, it sends requests here and compares what comes back itself.
This file is the orchestrator: it takes the steps in order; each subsystem is a file
of this folder (stdlib only, but request_server.py) that it loads by path (`_sibling`)
before it confines itself, as the kit may be out of sight once it is confined.

Before any student code is imported, the process confines itself (`_enter`)
at the level the trusted side chose (autograder/sandbox/isolation.py probed it in a
throwaway process first, so that no refusal leaves this process half
confined):

* `namespaces`: new PID, mount, network, IPC and UTS namespaces (a user namespace
  too when not root) and a filesystem of its own (namespaces.py), with a minimal
  /dev (devices.py): no network, no other process in sight, no kit, no reference,
  no graders, no other submission;
* `landlock`: where namespaces are refused, Linux's Landlock (landlock.py, with the
  rules of landlock_rules.py): it may read only the system and Python folders and
  its own copy, write only that copy and a private temp folder, and (ABI 4+) make no
  TCP connection; (ABI 6+) it cannot signal processes outside its domain;
* `none`: resource limits only.

At every level: the student code never runs as root (privileges.py: root drops to a
uid of its own); resource limits (rlimits.py: CPU time, memory, processes, output
size) bound it; this process forks a *keeper* that stays outside (keeper.py: a child
subreaper that, when the student process ends or the trusted side sends SIGTERM,
kills every process the student code started, daemons included); a seccomp filter
(seccomp.py), installed once confined and before any student code (`_second_wall`);
the process is then non-dumpable; stdout and stderr go to a log file that the
trusted side reads; the protocol uses private copies of the pipes (channel.py). The
calls into Linux, and the steps the kit's tests can refuse on purpose, are libc.py's.

Protocol: frames of an 8-byte big-endian length and a payload. The first
frame is the handshake, JSON, sent once confinement, limits and imports are
done and before any submission file is touched: {"ready": true, ...} or
{"ready": false, "error": why}; a process that dies before it is the
grader's failure, not the student's. On a machine with GPU nodes the process
starts CUDA before it, and says in it whether it could ("cuda_problem"):
where it could not, the CUDA checks are skipped, never failed. Then it answers
requests in autograder/sandbox/wire.py's frames (request_server.py).
"""
import importlib.util
import json
import os
import socket
import sys

_SUBMISSION = None
#: (the keeper's end, this process's end) of the socketpair over which the filter's listener goes to the keeper
_REFUSALS = None
LEVELS = ("namespaces", "landlock", "none")  # strongest first


def _handshake(**fields):
    """The first frame: JSON, so that it needs no torch (a process that cannot import torch says so too)."""
    _channel.send(json.dumps(fields).encode())


def _fail(message):
    """Tell the trusted side why this process cannot run student code, and end it."""
    try:
        _handshake(ready=False, error=message[:2000])
    finally:
        os._exit(0)


def _sibling(name, run=True, **given):
    """autograder/sandbox/<name>.py, loaded by path (this process imports nothing of the kit as a package); once
    it has run, `given` (this process's own instances of the siblings it uses) become its globals. With run=False
    the file is read now and runs when the function returned is called."""
    spec = importlib.util.spec_from_file_location(
        f"_mha_{name}", os.path.join(os.path.dirname(os.path.abspath(__file__)), f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    code = spec.loader.get_code(module.__name__)

    def execute():
        exec(code, vars(module))
        vars(module).update(given)
        return module

    return execute() if run else execute


# Every sibling is loaded now, stdlib only: once confined, the kit may be out of sight.
_channel = _sibling("channel")  # the protocol's pipes, captured before any student code is imported
_libc = _sibling("libc")  # the calls into Linux and the confinement steps, one instance for all the others
_namespaces = _sibling("namespaces", libc=_libc)
_devices = _sibling("devices", libc=_libc)
_privileges = _sibling("privileges", libc=_libc)
_rlimits = _sibling("rlimits", libc=_libc)
_landlock_rules = _sibling("landlock_rules", libc=_libc)
_landlock = _sibling("landlock")  # Landlock's calls, used at the landlock level
_seccomp = _sibling("seccomp")  # the second wall at every level, installed before student code
_keeper = _sibling("keeper", libc=_libc, seccomp=_seccomp)  # it also learns which calls the filter refused
_wire = _sibling("wire")  # the requests' and answers' format
_lazy_dynamo = _sibling("lazy_dynamo")  # torch._dynamo imported only if student code really uses it
_seeding = _sibling("seeding")  # torch seeded as the grader seeds it
_standin = _sibling("standin")  # stand-ins for a part that crashes (autograder/graders/blame.py)
_student_code = _sibling("student_code")  # the student's files and modules, what its code raises
# the requests' answers: read now, run once torch is imported (below)
_run_request_server = _sibling("request_server", run=False, channel=_channel, wire=_wire, seeding=_seeding,
                               standin=_standin, student_code=_student_code)
SetupFailed = _libc.SetupFailed
#: The GPU device nodes of this machine: read once, when this file is loaded, before any confinement.
_GPU_NODES = _devices.gpu_nodes()
_vm_size = _rlimits.vm_size


def _confine_namespaces(config):
    """Enter new namespaces; the caller stays behind as the keeper of PID 1 of the new PID namespace."""
    uid, gid = os.getuid(), os.getgid()  # read before unsharing: an unmapped namespace shows 65534
    root_user = os.geteuid() == 0
    student_uid = _privileges.sandbox_uid(config) if root_user else None  # leased by the trusted side
    _namespaces.unshare_pid(root_user, uid, gid)
    _keeper.keep((_channel.IN, _channel.OUT), _REFUSALS)  # the child is PID 1 of the new PID namespace
    _namespaces.unshare_the_rest()
    root = _namespaces.new_root(config)
    _devices.minimal_dev(root)
    _namespaces.copy_submission(root, config)
    _namespaces.pivot_root(root)
    if root_user:
        _privileges.drop_root(["/submission"], student_uid)
    else:  # drop the capabilities that the new user namespace gave
        _privileges.drop_capabilities()
    os.environ["HOME"] = os.environ["TMPDIR"] = "/tmp"


def _confine_landlock(config):
    """Landlock: read the system and Python folders and its copy, write its copy and its private temp folder."""
    _libc.step("landlock")
    folders, _ = _namespaces.needed_paths(config.get("forbidden", []))
    _landlock.restrict(**_landlock_rules.rules(config, folders, _GPU_NODES))


def _apply_limits(limits):
    """Resource limits of this process and everything it starts (rlimits.apply); memory for good, and the process
    limit, come later."""
    _rlimits.apply(limits)


def _bound_memory(limits):
    """Once torch has loaded and CUDA has started, the memory limit for good: student code gets it above what this
    process holds (rlimits.bound_memory)."""
    try:
        _rlimits.bound_memory(limits)
    except (OSError, ValueError) as exc:
        _fail(f"the memory limit could not be set: {exc}")


def _apply_process_limit(limits):
    """RLIMIT_NPROC, set just before the handshake (rlimits.apply_process_limit)."""
    try:
        _rlimits.apply_process_limit(limits)
    except (OSError, ValueError) as exc:
        _fail(f"the process limit could not be set (as uid {os.getuid()}): {exc}")


def _enter(config):
    """Confine this process at the chosen level before any student code runs (see the module's docstring).

    Returns the level. Any refusal ends the process with a handshake that says why (`_fail`)."""
    global _SUBMISSION, _REFUSALS
    _channel.redirect(config["log"])
    _REFUSALS = socket.socketpair()
    _libc.refused = frozenset(config.get("refuse", ()))
    level = config.get("isolation", "none")
    step = "confinement"
    try:
        if level not in LEVELS:
            raise SetupFailed(f"unknown isolation level {level!r}")
        if level == "namespaces":
            _confine_namespaces(config)
        else:
            _keeper.keep((_channel.IN, _channel.OUT), _REFUSALS)
            if os.geteuid() == 0:  # never root: a uid of its own, that owns its copy and its temp folder
                _privileges.drop_root([config["cwd"], config["home"]], _privileges.sandbox_uid(config))
        step = "limits"
        _apply_limits(config.get("limits", {}))
        _libc.prctl(_libc.PR_SET_NO_NEW_PRIVS, 1)  # no setuid program gives student code privileges back
        if level == "landlock":
            step = "landlock"
            _confine_landlock(config)
        step = "reading Python"
        _privileges.check_python_readable()
    except (OSError, SetupFailed, ImportError, ValueError) as exc:
        _fail(f"{level} isolation failed at {step} (as uid {os.getuid()}): {exc}")
    _SUBMISSION = os.path.realpath(os.getcwd())  # on sys.path only once the handshake is sent
    return level


def _second_wall(level):
    """The seccomp filter (autograder/sandbox/seccomp.py), at every level, once confinement is done and before any
    student code: an allowlist of the calls student code and torch need; the calls that name a process only for
    this one; no IPC object, socket, ptrace, mount or new namespace. Installed for every thread (TSYNC), after CUDA
    has started (its driver opens what it needs first). The calls outside its lists go to its listener, which the
    keeper gets (`_send_listener`): it refuses them and names them in the student's output. The process also becomes non-dumpable: another student's
    code of the same uid (the none level) may not read its memory through /proc/<pid>/mem. A refusal ends the
    process with a handshake that says why: the grader's failure, never the student's."""
    if not sys.platform.startswith("linux"):  # macOS: resource limits only (README, "Where the kit runs")
        return
    try:
        _libc.step("seccomp")
        listener = _seccomp.restrict(notify=True)
        _libc.prctl(_libc.PR_SET_DUMPABLE, 0)
    except (OSError, ValueError) as exc:
        _fail(f"{level} isolation failed at seccomp (as uid {os.getuid()}): {exc}")
    _send_listener(listener)


def _send_listener(listener):
    """Give the filter's listener to the keeper, which refuses the calls outside the filter's lists and names them in
    the student's output (keeper.py). Whatever happens, this process keeps no copy: with none left open the calls
    fail (ENOSYS) instead of waiting."""
    keeper_end, own_end = _REFUSALS
    try:
        if listener is not None:
            socket.send_fds(own_end, [b"L"], [listener])
    except OSError:
        pass
    finally:
        if listener is not None:
            os.close(listener)
        own_end.close()


def _import_failed(exc):
    limits = _CONFIG.get("limits", {}) if "_CONFIG" in globals() else {}
    hint = ""
    # the limit shows as a MemoryError, or as a shared library that cannot be mapped ("failed to map segment")
    if (isinstance(exc, MemoryError) or "failed to map" in str(exc)) and limits.get("memory_bytes"):
        hint = f" (the memory limit, {limits['memory_bytes'] / (1 << 20):g} MiB, is too small for Python and torch)"
    _fail(f"importing torch failed: {type(exc).__name__}: {exc}{hint}")


if __name__ == "__main__":  # confined before torch is imported: unsharing needs a single thread
    _CONFIG = json.loads(sys.argv[1])
    _ISOLATION = _enter(_CONFIG)
    if _CONFIG.get("probe"):  # autograder.sandbox.isolation.probe(): how far confinement goes here
        _second_wall(_ISOLATION)
        _handshake(ready=True, isolation=_ISOLATION, pid=os.getpid())
        os._exit(0)

try:
    import torch  # noqa: E402
    _request_server = _run_request_server()  # it imports torch.nn and torch's dispatch modes too
except BaseException as _exc:  # MemoryError under a small memory limit, a broken install
    if __name__ == "__main__":
        _import_failed(_exc)
    raise

torch.set_num_threads(1)
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False


_lazy_dynamo.install()  # the first meta-device op imports no torch._dynamo (autograder/sandbox/lazy_dynamo.py)
_warm_up = _request_server.warm_up  # the zygote warms up once (forkserver.py), a cold process as it starts


def forked(request, fds):
    """The zygote's handler (autograder/sandbox/forkserver.py): become one student process."""
    os.dup2(fds[0], 0)
    os.dup2(fds[1], 1)
    for fd in fds:
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    main(_enter(request), request.get("limits", {}), warm=False)


def _cuda_problem():
    """Where the machine has GPU nodes: why CUDA cannot start in this confined process, or None where it can
    (and where there are none). Asked before any student code runs and sent in the handshake, so that nothing a
    student writes can turn the grader's CUDA checks into skips, and no failure of the machine's (device nodes
    this uid may not open, a limit CUDA cannot start under) costs a student points (autograder/graders/checks.py)."""
    if not _GPU_NODES and "cuda" not in _libc.refused:
        return None
    try:
        _libc.step("cuda")
        torch.zeros(1, device="cuda")  # starts CUDA: its threads come before the process limit is counted
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"[:1000]
    return None


def main(isolation, limits, warm=True, settle=False):
    """Serve the grader, once the steps before student code are taken. A cold process warms up (`_warm_up`) in a
    thread beside the handshake, while the grader imports torch itself; with `settle` (a process started again
    after a crash or a timeout, which the grader only waits for), before the handshake: under load the warm-up
    took seconds, and the first call that met it timed out (each call of a module that meets the call timeout
    ends its checks: autograder/sandbox/client.py)."""
    # before the submission is on sys.path: a student file named like a module that starting CUDA imports must
    # not run then, and make the CUDA checks skip
    cuda_problem = _cuda_problem()
    _bound_memory(limits)
    _second_wall(isolation)
    if warm and settle:  # a restart: the grader waits for it anyway, and no call's timeout pays for the warm-up
        _warm_up()  # (before the submission is on sys.path: no student file is imported by it)
    sys.path.insert(0, _SUBMISSION)  # from here on, imports may find student files
    if warm and not settle:
        _request_server.warming.start()
    _apply_process_limit(limits)
    _handshake(ready=True, pid=os.getpid(), isolation=isolation, cuda_problem=cuda_problem)
    _request_server.serve(_SUBMISSION)


if __name__ == "__main__":
    main(_ISOLATION, _CONFIG.get("limits", {}), settle=bool(_CONFIG.get("restart")))
