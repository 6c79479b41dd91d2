"""The student side of the sandbox: runs student code, nothing else.

It runs either as `python -I student_process.py CONFIG` or as a fork of the warm
student zygote (autograder/sandbox/forkserver.py), with the protocol pipes on fds 0
and 1. It is self-contained on purpose (stdlib and torch only, and the
stdlib-only autograder/sandbox/landlock.py, seccomp.py, wire.py, lazy_dynamo.py and seeding.py, loaded by path): the trusted grader never
imports student code, it sends requests here and compares what comes back
itself.

Before any student code is imported, the process confines itself (`_enter`)
at the level the trusted side chose (autograder/sandbox/isolation.py probed it in a
throwaway process first, so that no refusal leaves this process half
confined):

* `namespaces`: new PID, mount, network, IPC and UTS namespaces (a user
  namespace too when not root): no network, no other process in sight,
  everything it forks dies with it, and a filesystem of its own: the system
  and Python's folders read-only, the submission copy at /submission, an
  empty /tmp, a fresh /proc, and nothing else: no kit, no reference, no
  graders, no other submission;
* `landlock`: where namespaces are refused, Linux's Landlock: it may read
  only the system and Python folders and its own copy, write only that copy
  and a private temp folder, and (ABI 4+) make no TCP connection; (ABI 6+)
  it cannot signal processes outside its domain;
* `none`: resource limits only.

At every level: a seccomp filter, installed once confined and before any
student code (`_second_wall`: no socket, no signal, ptrace or
process_vm_* towards another process, no new namespace or mount), and the
process is then non-dumpable; stdout and stderr go to a log file that the trusted side
reads; the protocol uses private copies of the pipes; the student code never
runs as root (root drops to a uid of its own); resource limits (CPU time,
memory, processes, output size) bound it; and this process forks a
*keeper* that stays outside: a child subreaper that, when the student
process ends or the trusted side sends SIGTERM, kills every process the
student code started, daemons included.

Protocol: frames of an 8-byte big-endian length and a payload. The first
frame is the handshake, JSON, sent once confinement, limits and imports are
done and before any submission file is touched: {"ready": true, ...} or
{"ready": false, "error": why}; a process that dies before it is the
grader's failure, not the student's. On a machine with GPU nodes the process
starts CUDA before it, and says in it whether it could ("cuda_problem"):
where it could not, the CUDA checks are skipped, never failed. Requests and
answers travel in autograder/sandbox/wire.py's frames (JSON and raw tensor
bytes, no pickle): a request as the grader wrote it (views, shared storages,
dtypes: `decode_request`), an answer in the answers' format, which the
parent checks against the frame's size, so only plain tensors and plain
containers can come back, at a cost bounded by what was sent.
"""
import ctypes
import errno
import importlib
import importlib.util
import json
import os
import resource
import shutil
import signal
import struct
import sys
import threading
import time
import traceback

# I/O functions are captured before any student code is imported.
_write = os.write
_read = os.read
_IN = _OUT = None
_SUBMISSION = None
LEVELS = ("namespaces", "landlock", "none")  # strongest first
OPEN_FILES = 256  # open file descriptors of a student process (torch needs a few dozen)


def _redirect(log):
    """Keep private copies of the protocol pipes; fd 0 becomes /dev/null, fds 1 and 2 the log."""
    global _IN, _OUT
    _IN, _OUT = os.dup(0), os.dup(1)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    out = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(out, 1)
    os.dup2(out, 2)
    os.close(devnull)
    os.close(out)
    os.set_inheritable(_IN, False)
    os.set_inheritable(_OUT, False)
    for stream in (sys.stdout, sys.stderr):
        stream.reconfigure(line_buffering=True)  # what was printed is in the log even if the process dies


def _frame(payload):
    view = memoryview(struct.pack(">Q", len(payload)) + payload)
    while view:
        view = view[_write(_OUT, view):]


def _handshake(**fields):
    """The first frame: JSON, so that it needs no torch (a process that cannot import torch says so too)."""
    _frame(json.dumps(fields).encode())


class SetupFailed(Exception):
    """A step of confinement, limits or imports failed: the grader's failure, reported in the handshake."""


def _fail(message):
    """Tell the trusted side why this process cannot run student code, and end it."""
    try:
        _handshake(ready=False, error=message[:2000])
    finally:
        os._exit(0)


# -- confinement (Linux through libc; stdlib only) ----------------------------
CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC = 0x00020000, 0x04000000, 0x08000000
CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x10000000, 0x20000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = (
    1, 2, 4, 8, 32, 4096, 16384, 1 << 18)
MNT_DETACH, PR_SET_PDEATHSIG, PR_SET_NO_NEW_PRIVS, PR_SET_CHILD_SUBREAPER, PR_SET_DUMPABLE = 2, 1, 38, 36, 4
SANDBOX_UID_BASE = 1_500_000  # root runs each student process as a uid of its own, above the usual ranges
_libc = None
_REFUSE = frozenset()  # steps refused on purpose (the kit's tests: MHA_REFUSE on the trusted side)


def _step(name):
    """Mark a confinement step; a step named in _REFUSE fails as the OS would refuse it."""
    if name in _REFUSE:
        raise OSError(errno.EPERM, f"{name}: {os.strerror(errno.EPERM)} (refused on purpose: MHA_REFUSE)")


def _call(name, *args):
    global _libc
    try:
        if _libc is None:
            _libc = ctypes.CDLL(None, use_errno=True)
        function = getattr(_libc, name)
    except (OSError, AttributeError):
        raise OSError(f"{name}: not available on this system") from None  # macOS, Windows
    if function(*args) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{name}: {os.strerror(err)}")


def _prctl(option, value):
    _call("prctl", ctypes.c_int(option), ctypes.c_ulong(value), ctypes.c_ulong(0), ctypes.c_ulong(0),
          ctypes.c_ulong(0))


def _mount(source, target, fstype=None, flags=0, data=None):
    _step("mount")
    enc = (lambda s: None if s is None else os.fsencode(s))
    _call("mount", enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data))


def _needed_paths(forbidden):
    """The real paths of the system and Python folders the student process needs, and the symlinks that lead
    to them ({link: target text}); none that shows the kit (`forbidden`)."""
    wanted = ["/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/sys",
              sys.base_prefix, sys.prefix, *(p for p in sys.path if p)]
    forbidden = [os.path.realpath(f) for f in forbidden]
    folders, links = [], {}
    for path in wanted:
        path = os.path.abspath(path)
        while path != "/" and not os.path.exists(path):  # python311.zip: the folder that would hold it
            path = os.path.dirname(path)
        # every symlink on the way, as the student process will meet it (merged /usr: /lib -> usr/lib)
        walked = "/"
        for part in path.strip("/").split("/"):
            here = os.path.join(walked, part)
            if os.path.islink(here):
                links[os.path.join(os.path.realpath(walked), part)] = os.readlink(here)
                walked = os.path.realpath(here)
            else:
                walked = here
        real = os.path.realpath(path)
        if real == "/" or real in folders:
            continue
        if any(f == real or f.startswith(real.rstrip("/") + "/") for f in forbidden):
            continue  # a folder that contains instructor files is never shown
        folders.append(real)
    folders.sort(key=len)
    top = [p for i, p in enumerate(folders) if not any(p.startswith(q + "/") for q in folders[:i])]
    inside = (lambda path: any(path == q or path.startswith(q + "/") for q in top))
    return top, {k: v for k, v in links.items() if not inside(k)}


def _bind(root, path):
    """Make the real folder `path` appear at the same place under `root`, read-only."""
    target = root + path
    os.makedirs(target, exist_ok=True)
    _mount(path, target, None, MS_BIND | MS_REC)
    st = os.statvfs(path)  # a remount must keep the flags the mount is locked with
    kept = st.f_flag & (MS_NOSUID | MS_NODEV | MS_NOEXEC)
    _mount(None, target, None, MS_REMOUNT | MS_BIND | MS_RDONLY | kept)


PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "riscv64": 41}.get(os.uname().machine)


def _confine_namespaces(config):
    """Enter new namespaces; the caller stays behind as the keeper of PID 1 of the new PID namespace."""
    uid, gid = os.getuid(), os.getgid()  # read before unsharing: an unmapped namespace shows 65534
    root_user = os.geteuid() == 0
    student_uid = _sandbox_uid()  # from this pid: inside, the student process is PID 1
    _step("unshare")
    _call("unshare", ctypes.c_int(CLONE_NEWPID | (0 if root_user else CLONE_NEWUSER)))
    if not root_user:  # map ourselves in the new user namespace
        _step("uid-map")
        # a non-dumpable process (a zygote's fork) may not write its own uid_map: dumpable inside its new user
        # namespace, where no other student process sees it, until _second_wall
        _prctl(PR_SET_DUMPABLE, 1)
        for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
            with open(f"/proc/self/{name}", "w") as fh:
                fh.write(text)
    _keep()  # the child is PID 1 of the new PID namespace; it goes on
    _step("unshare-mount")
    _call("unshare", ctypes.c_int(CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS))
    if PIVOT_ROOT is None:
        raise OSError(f"pivot_root: unknown on {os.uname().machine}")
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    root = os.path.realpath(config["root"])
    _mount("tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=1m")
    os.makedirs(root + "/tmp")  # first: Python's folders may live under /tmp; their binds go inside it
    writable = config["writable"]  # the caps of the writable areas (autograder.sandbox.limits.WRITABLE)
    _mount("tmpfs", root + "/tmp", "tmpfs", MS_NOSUID | MS_NODEV,
           f"mode=1777,size={writable['tmp_bytes']},nr_inodes={writable['files']}")
    folders, links = _needed_paths(config.get("forbidden", []))
    for path in folders:
        _bind(root, path)
    for link, target in sorted(links.items()):
        os.makedirs(os.path.dirname(root + link), exist_ok=True)
        if not os.path.lexists(root + link):
            os.symlink(target, root + link)
    _minimal_dev(root)
    os.makedirs(root + "/submission")  # a copy in memory, of a bounded size: nothing written reaches the disk
    work = os.path.realpath(config["cwd"])
    size = sum(os.lstat(os.path.join(d, f)).st_size for d, _, files in os.walk(work) for f in files)
    _mount("tmpfs", root + "/submission", "tmpfs", MS_NOSUID | MS_NODEV,
           f"mode=0755,size={max(writable['copy_bytes'], 2 * size)},nr_inodes={writable['files']}")
    shutil.copytree(work, root + "/submission", symlinks=True, dirs_exist_ok=True)
    os.makedirs(root + "/proc")
    try:  # a fresh /proc shows only this PID namespace; some containers forbid it: then no /proc at all
        _mount("proc", root + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    except OSError:
        pass
    os.makedirs(root + "/.old")
    os.chdir(root)
    _step("pivot-root")
    _call("syscall", ctypes.c_long(PIVOT_ROOT), b".", b".old")
    os.chdir("/")
    _call("umount2", b"/.old", ctypes.c_int(MNT_DETACH))
    os.rmdir("/.old")
    _mount(None, "/", None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)
    os.chdir("/submission")
    if root_user:
        _drop_root(["/submission"], student_uid)
    else:  # drop the capabilities that the new user namespace gave
        _step("capset")
        header = (ctypes.c_uint32 * 2)(0x20080522, 0)
        _call("capset", header, (ctypes.c_uint32 * 6)())
    os.environ["HOME"] = os.environ["TMPDIR"] = "/tmp"


#: Device nodes the student process sees at the namespaces level: no terminals (pseudo-terminals are a host-wide
#: resource), no disks; a GPU's nodes where there are some.
DEVICES = ("null", "zero", "full", "random", "urandom")


def _minimal_dev(root):
    """A /dev of its own: a few harmless device nodes bound one by one, GPU nodes, private shm and mqueue."""
    dev = root + "/dev"
    os.makedirs(dev)
    _mount("tmpfs", dev, "tmpfs", MS_NOSUID, "mode=0755,size=64k,nr_inodes=256")
    for name in (*DEVICES, *(d for d in _listdir("/dev") if d.startswith("nvidia"))):
        if os.path.exists("/dev/" + name) and not os.path.isdir("/dev/" + name):
            open(f"{dev}/{name}", "w").close()  # the mount point
            _mount("/dev/" + name, f"{dev}/{name}", None, MS_BIND)
    if os.path.isdir("/dev/dri"):
        os.makedirs(dev + "/dri")
        _mount("/dev/dri", dev + "/dri", None, MS_BIND | MS_REC)
    for private in ("shm", "mqueue"):  # not the host's: no channel to other processes
        os.makedirs(f"{dev}/{private}")
        _mount("tmpfs", f"{dev}/{private}", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777,size=64m,nr_inodes=1024")
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1"),
                         ("stderr", "/proc/self/fd/2")):
        os.symlink(target, f"{dev}/{name}")
    _mount(None, dev, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID)


def _sandbox_uid():
    return SANDBOX_UID_BASE + os.getpid() % 100_000


def _drop_root(writable, uid):
    """From root to `uid`, a uid of its own that owns the `writable` folders (the sandbox's fresh copy and
    temp folder, and what they hold): every capability goes, and the process limit counts only this
    student's processes."""
    _step("setuid")
    for folder in writable:
        if os.path.realpath(folder) == "/":
            raise SetupFailed("refusing to hand / to the student uid")
        for name in [folder, *(os.path.join(folder, n) for n in os.listdir(folder))]:
            os.chown(name, uid, uid, follow_symlinks=False)
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)


def _sibling(name):
    """autograder/<name>.py, loaded by path (this process imports nothing of the kit as a package)."""
    spec = importlib.util.spec_from_file_location(
        f"_mha_{name}", os.path.join(os.path.dirname(os.path.abspath(__file__)), f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_landlock = None
_seccomp = _sibling("seccomp")  # the second wall at every level, loaded now (stdlib only), installed before student code
_wire = _sibling("wire")  # the answers' format, loaded now: once confined, the kit may be out of sight
_lazy_dynamo = _sibling("lazy_dynamo")  # the same: torch._dynamo imported only if student code really uses it
_seeding = _sibling("seeding")  # the same: torch seeded as the grader seeds it
_standin = _sibling("standin")  # the same: stand-ins for a part that crashes (autograder/graders/blame.py)


def _confine_landlock(config):
    """Landlock: read the system and Python folders and its copy, write its copy and its private temp folder."""
    global _landlock
    _step("landlock")
    _landlock = _landlock or _sibling("landlock")
    folders, _ = _needed_paths(config.get("forbidden", []))
    writable = [os.path.realpath(config["cwd"]), os.path.realpath(config["home"])]
    proc = ["/proc/cpuinfo", "/proc/meminfo", "/proc/stat", *_own_proc_entries()]
    devices = ["/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty",
               *(os.path.join("/dev", d) for d in _listdir("/dev") if d.startswith(("nvidia", "dri")))]
    if any(d.startswith("nvidia") for d in _GPU_NODES):
        # What NVIDIA's driver does as CUDA starts, refused under Landlock with "Error 304: OS call failed" (on an
        # H200, driver 580): it reads /proc/driver/nvidia and /proc/driver/nvidia-uvm, and it names its threads
        # by writing /proc/<pid>/task/<tid>/comm. Its own threads' folder is given file rights (read, write), no
        # more (which shows task/<tid>/net too: on a GPU machine, this level lets student code list sockets).
        proc += ["/proc/driver/nvidia", "/proc/driver/nvidia-uvm"]
        devices.append(f"/proc/{os.getpid()}/task")
    _landlock.restrict(read=folders + proc, write=writable, devices=devices)


#: What of its own /proc folder the student process may not read at the landlock level: `net` lists the
#: network namespace's sockets, the host's (/proc/self/net/unix named the grader's sockets), and `task` holds each
#: thread's `net` again; the links (cwd, exe, root, ns/) are never granted, as a rule on one would grant its target.
PROC_HIDDEN = ("net", "task")


def _own_proc_entries():
    """The entries of this process's /proc folder that student code may read: every one but the links and
    PROC_HIDDEN (a Landlock rule on /proc/<pid> would grant all that is beneath it)."""
    folder = f"/proc/{os.getpid()}"
    return [f"{folder}/{name}" for name in _listdir(folder)
            if name not in PROC_HIDDEN and not os.path.islink(f"{folder}/{name}")]


def _listdir(path):
    try:
        return sorted(os.listdir(path))
    except OSError:
        return []


# -- the keeper ------------------------------------------------------------------
def _keep():
    """Fork. The child returns and goes on to run student code; this process stays behind as its keeper and
    never returns: a child subreaper, it inherits every orphan of the student code (daemons that double-fork
    and setsid included) and ends them all when the student process ends or SIGTERM arrives."""
    _step("fork")
    try:
        _prctl(PR_SET_CHILD_SUBREAPER, 1)
    except OSError:
        pass  # in a new PID namespace the kernel ends everything with its PID 1 anyway
    keeper = os.getpid()
    pid = os.fork()
    if pid == 0:
        _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # the keeper gone (killed): the student process goes too
        if os.getppid() not in (keeper, 0):  # it went before the line above (0: PID 1 of a new PID namespace)
            os._exit(1)
        return
    for fd in (0, 1, _IN, _OUT):  # the protocol belongs to the student process
        os.close(fd)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:  # student code of the same uid (the landlock and none levels) may not read its /proc files
        _prctl(PR_SET_DUMPABLE, 0)
    except OSError:
        pass

    def stop(*_):
        _end_descendants(pid)
        os._exit(128 + signal.SIGTERM)

    signal.signal(signal.SIGTERM, stop)
    try:  # ended, not reaped: its pid stays taken until every process it left is gone (_end_descendants)
        os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
    except ChildProcessError:
        pass
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    status = _end_descendants(pid)
    code = 0 if status is None else os.waitstatus_to_exitcode(status)
    if code < 0:  # mirror a death by signal, for the trusted side's message
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if -code not in (signal.SIGKILL, signal.SIGSTOP):
            signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    os._exit(code & 0xFF)


def _children(me):
    kids = []
    for pid in _listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/stat", "rb") as fh:
                    if int(fh.read().rsplit(b")", 1)[1].split()[1]) == me:
                        kids.append(int(pid))
            except (OSError, ValueError, IndexError):
                continue
    return kids


def _end_descendants(first):
    """Kill `first` and every process that ends up a child of this subreaper, until none is left; return `first`'s
    wait status (None when it is not ours to reap).

    `first` is reaped last: until every other process of the student's is gone its pid stays taken (a zombie), so
    none of them can see the student process end and act then (a daemon that waits for the run to be over to
    write where the grader's uid may write, at the none level)."""
    me = os.getpid()
    try:
        os.kill(first, signal.SIGKILL)
        os.waitid(os.P_PID, first, os.WEXITED | os.WNOWAIT)  # ended: its children are ours now, not yet reaped
    except OSError:
        pass
    for _ in range(500):  # each round ends one generation; orphans of the killed come to us
        others = [kid for kid in _children(me) if kid != first]
        if not others:
            break
        for kid in others:
            try:
                os.kill(kid, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.002)
        for kid in others:
            try:
                os.waitpid(kid, os.WNOHANG)
            except ChildProcessError:
                pass
    try:
        return os.waitpid(first, 0)[1]
    except ChildProcessError:
        return None


# -- limits ------------------------------------------------------------------------
def _tasks_of(uid):
    """Processes and threads of real uid `uid` that this process can see (what RLIMIT_NPROC counts)."""
    count = 0
    for pid in _listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/status") as fh:
                fields = dict(line.split(":", 1) for line in fh if ":" in line)
            if int(fields["Uid"].split()[0]) == uid:
                count += int(fields["Threads"])
        except (OSError, ValueError, KeyError):
            continue
    return max(count, 1)


def _vm_size(field="VmSize"):
    """This process's address space (VmSize) or private writable memory (VmData), in bytes."""
    try:
        with open("/proc/self/status") as fh:
            return next(int(line.split()[1]) << 10 for line in fh if line.startswith(field + ":"))
    except (OSError, StopIteration, ValueError):
        return 0


#: The GPU device nodes of this machine (NVIDIA's, AMD's kfd): where there are some, torch may use CUDA. Read
#: once, when this file is loaded, before any confinement: under Landlock /dev cannot be listed.
_GPU_NODES = [d for d in _listdir("/dev") if d.startswith("nvidia") or d == "kfd"]


def _apply_limits(limits):
    """Resource limits of this process and everything it starts; hitting one ends only student code.

    The process limit is set later, just before the handshake (`_apply_process_limit`).
    """
    _step("setrlimit")
    memory = limits.get("memory_bytes")
    # The memory limit bounds the address space (RLIMIT_AS): every mapping counts, private or shared. On a GPU
    # machine it cannot, not yet: CUDA reserves address space as it starts (17 GiB on an H200, where a 4 GiB
    # RLIMIT_AS failed cudaGetDeviceCount with "out of memory"), so there it bounds the private writable memory
    # (RLIMIT_DATA: what tensors, arrays and Python objects take; a reservation with no access does not count),
    # and the address space once CUDA has started (_bound_address_space).
    rule, field = ((resource.RLIMIT_DATA, "VmData") if _GPU_NODES else (resource.RLIMIT_AS, "VmSize"))
    if memory is not None and memory < _vm_size(field) + (64 << 20):  # Python (and torch, in a zygote), room
        raise SetupFailed(f"the memory limit ({memory / (1 << 20):g} MiB) is too small: this process already "
                          f"uses {_vm_size(field) / (1 << 20):.0f} MiB of "
                          f"{'private memory' if field == 'VmData' else 'address space'} before any student code")
    pairs = {
        resource.RLIMIT_CPU: limits.get("cpu_seconds"),
        rule: memory,
        resource.RLIMIT_FSIZE: limits.get("output_bytes"),
        resource.RLIMIT_CORE: 0,
        resource.RLIMIT_NOFILE: min(OPEN_FILES, resource.getrlimit(resource.RLIMIT_NOFILE)[1]),
    }
    for which, value in pairs.items():
        if value is not None:
            resource.setrlimit(which, (int(value), int(value) + (5 if which == resource.RLIMIT_CPU else 0)))
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # too much output: the write fails with EFBIG instead


def _bound_address_space(limits):
    """On a GPU machine, once CUDA has started (or failed to), before any student code: the address space too,
    at what this process holds now (Python, torch, CUDA's reservation) plus the memory limit. RLIMIT_DATA does
    not count shared mappings (mmap(-1, n) in Python): this bounds them. A limit may always be lowered; on the
    H200, CUDA's matrix products, a 1 GiB tensor on the GPU and pinned memory fitted in 4 GiB above it."""
    memory, held = limits.get("memory_bytes"), _vm_size()
    if memory is None or not _GPU_NODES or not held:  # held 0: no /proc to read it in; RLIMIT_DATA alone
        return
    try:
        value = held + int(memory)
        resource.setrlimit(resource.RLIMIT_AS, (value, value))
    except (OSError, ValueError) as exc:
        _fail(f"the address-space limit could not be set: {exc}")


def _apply_process_limit(limits):
    """RLIMIT_NPROC, set just before the handshake, after this process's own imports and threads.

    It counts every process and thread of the real uid (in its user namespace), so the limit is set at what
    that uid runs now plus the student's allowance: however many threads the grading user has, student code
    may start `processes` more, and no other. Set as late as it can be (still before any student code), so that
    what the same uid starts meanwhile (another grading, another program of the user's) cannot use up the
    allowance first: set before a cold process imported torch, it once left that process no thread to start.
    """
    processes = limits.get("processes")
    if processes is None:
        return
    try:
        value = _tasks_of(os.getuid()) + int(processes)
        resource.setrlimit(resource.RLIMIT_NPROC, (value, value))
    except (OSError, ValueError) as exc:
        _fail(f"the process limit could not be set (as uid {os.getuid()}): {exc}")


def _check_python_readable():
    """The confined process must still read Python and torch (a uid that cannot read them fails here)."""
    _step("read-python")
    for path in {sys.base_prefix, sys.prefix, *(p for p in sys.path if os.path.isdir(p))}:
        os.listdir(path)
    with open(os.__file__, "rb") as fh:
        fh.read(1)
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.origin:
        raise OSError("torch cannot be found from the confined process")
    with open(spec.origin, "rb") as fh:
        fh.read(1)


def _enter(config):
    """Confine this process at the chosen level before any student code runs (see the module's docstring).

    Returns the level. Any refusal ends the process with a handshake that says why (`_fail`)."""
    global _REFUSE, _SUBMISSION
    _redirect(config["log"])
    _REFUSE = frozenset(config.get("refuse", ()))
    level = config.get("isolation", "none")
    step = "confinement"
    try:
        if level not in LEVELS:
            raise SetupFailed(f"unknown isolation level {level!r}")
        if level == "namespaces":
            _confine_namespaces(config)
        else:
            _keep()
            if os.geteuid() == 0:  # never root: a uid of its own, that owns its copy and its temp folder
                _drop_root([config["cwd"], config["home"]], _sandbox_uid())
        step = "limits"
        _apply_limits(config.get("limits", {}))
        _prctl(PR_SET_NO_NEW_PRIVS, 1)  # no setuid program gives student code privileges back
        if level == "landlock":
            step = "landlock"
            _confine_landlock(config)
        step = "reading Python"
        _check_python_readable()
    except (OSError, SetupFailed, ImportError, ValueError) as exc:
        _fail(f"{level} isolation failed at {step} (as uid {os.getuid()}): {exc}")
    _SUBMISSION = os.path.realpath(os.getcwd())  # on sys.path only once the handshake is sent
    return level


def _second_wall(level):
    """The seccomp filter (autograder/sandbox/seccomp.py), at every level, once confinement is done and before any
    student code: no socket, no connect, no ptrace or process_vm_*, no signal to another process, no keyctl, bpf,
    userfaultfd, perf_event_open, io_uring, mount or new namespace. Installed for every thread (TSYNC), after CUDA
    has started (its driver opens what it needs first). The process also becomes non-dumpable: another student's
    code of the same uid (the none level) may not read its memory through /proc/<pid>/mem. A refusal ends the
    process with a handshake that says why: the grader's failure, never the student's."""
    if not sys.platform.startswith("linux"):  # macOS: resource limits only (README, "Where the kit runs")
        return
    try:
        _step("seccomp")
        _seccomp.restrict()
        _prctl(PR_SET_DUMPABLE, 0)
    except (OSError, ValueError) as exc:
        _fail(f"{level} isolation failed at seccomp (as uid {os.getuid()}): {exc}")


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
    from torch import nn  # noqa: E402
    from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402
except BaseException as _exc:  # MemoryError under a small memory limit, a broken install
    if __name__ == "__main__":
        _import_failed(_exc)
    raise

torch.set_num_threads(1)
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
_Tensor = torch.Tensor
_Parameter = nn.Parameter


_lazy_dynamo.install()  # the first meta-device op imports no torch._dynamo (autograder/sandbox/lazy_dynamo.py)


def _warm_up():
    """The first meta-device op loads the meta registrations (~0.6 s): do it while the grader starts up."""
    try:
        torch.ones(1, device="meta") + 1
    except Exception:
        pass


_warming = threading.Thread(target=_warm_up, daemon=True)


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
    return _wire.decode_request(b"".join(parts))


def _send(obj):
    _frame(_wire.encode(obj))


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


class _StandIn:
    """A student's function replaced for one request by the grader's stand-in (autograder/sandbox/standin.py):
    the reference's answers for the inputs the reference wiring gives it, sealed with those inputs."""

    def __init__(self, function, answers):
        self.function, self.answers = function, answers
        self.__name__ = function[1]

    def __call__(self, *args, **kwargs):
        try:
            return _standin.answer(self.function, self.answers, args, kwargs)
        except _standin.NoAnswer as exc:
            raise RuntimeError(f"the grader's stand-in for your {self.function[1]}: {exc}") from None


class _standing_in:
    """For one request: the functions `specs` names replaced by stand-ins, wherever a student module holds them
    (its own module, and any student module that imported it by name), then put back."""

    def __init__(self, specs):
        self.specs, self.saved = specs or [], []

    def __enter__(self):
        for spec in self.specs:
            function = (spec["module"], spec["name"])
            if function not in _standin.SIGNATURES:
                raise ValueError(f"no stand-in for {function}")
            original = getattr(_module(spec["module"]), spec["name"], None)
            fake = _StandIn(function, spec["answers"])
            for mod in list(sys.modules.values()):
                if not _is_student_file(getattr(mod, "__file__", None) or ""):
                    continue
                for name, value in list(vars(mod).items()):
                    if value is original and original is not None:
                        self.saved.append((mod, name, value))
                        setattr(mod, name, fake)
        return self

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
        _seeding.manual_seed(req["seed"])
    with torch.no_grad(), _standing_in(req.get("stand_ins")):
        value = fn(*args, **kwargs)
    answer = {"value": _encode(value)}
    if req.get("capture_args"):
        answer["args_after"] = [_encode(a) for a in args]
    return answer


def _op_new(req):
    cls = getattr(_module(req["module"]), req["name"])
    args, kwargs = _forward_input(req)
    if req.get("seed") is not None:
        _seeding.manual_seed(req["seed"])
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
    """One timed forward pass, for the grader to time with its own clock (autograder/grade/timing.py).

    The grader sends each pass of a block as a request of its own, and only once the answer to the pass
    before it has been read back whole: a pass's input is in this process only from its own request on,
    in a storage of its own (decode_request clones every storage), so no pass can read a later one's
    input, or work on several at once. The grader checks every output, so a pass that skips its work is
    caught.
    """
    if _warming.is_alive():
        _warming.join()  # nothing else runs in this process while it is timed
    model = _objects[req["handle"]]
    x = req["x"]
    if model.training:
        model.eval()
    with torch.no_grad():
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
    this uid may not open, a limit CUDA cannot start under) costs a student points (autograder/grade/checks.py)."""
    if not _GPU_NODES and "cuda" not in _REFUSE:
        return None
    try:
        _step("cuda")
        torch.zeros(1, device="cuda")  # starts CUDA: its threads come before the process limit is counted
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"[:1000]
    return None


def main(isolation, limits, warm=True):
    # before the submission is on sys.path: a student file named like a module that starting CUDA imports must
    # not run then, and make the CUDA checks skip
    cuda_problem = _cuda_problem()
    _bound_address_space(limits)
    _second_wall(isolation)
    sys.path.insert(0, _SUBMISSION)  # from here on, imports may find student files
    if warm:
        _warming.start()
    _apply_process_limit(limits)
    _handshake(ready=True, pid=os.getpid(), isolation=isolation, cuda_problem=cuda_problem)
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
    main(_ISOLATION, _CONFIG.get("limits", {}))
