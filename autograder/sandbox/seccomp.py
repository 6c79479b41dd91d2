"""Refuse dangerous system calls with a seccomp-BPF filter (standard library only).

seccomp lets an unprivileged process (after PR_SET_NO_NEW_PRIVS) attach a
classic BPF program that the kernel runs on each of its system calls; the
program decides from the call's number and register arguments whether it
goes ahead.  The filter is inherited by every thread (TSYNC), fork and exec
and can never be removed, only tightened by more filters.

``restrict`` installs one small filter (about 75 instructions, a linear list
of comparisons; allow by default) that refuses, with EPERM unless said:

* the architecture: a call made with another ABI than the process's own
  (``int 0x80`` i386 calls on x86_64, 32-bit ARM) kills the process; on
  x86_64, x32 calls (number with bit 30 set) are refused;
* sockets: ``socket`` (every family: inet, unix, netlink...), ``connect``,
  ``bind``, ``listen``, ``accept``, ``accept4``, and io_uring (it can connect
  and open without those calls); ``socketpair`` stays allowed, as do
  sockets and pipes inherited or received over one;
* other processes: ``ptrace``, ``process_vm_readv``/``writev``, ``kcmp``,
  ``pidfd_open``, ``pidfd_getfd``, ``pidfd_send_signal``; ``kill``,
  ``tkill``, ``tgkill``, ``rt_sigqueueinfo`` and ``rt_tgsigqueueinfo`` are
  allowed only when their first argument is the pid of the process that
  called ``restrict`` (signals to itself, as raise(), abort() and
  pthread_kill() send them); kill(0, ...) and negative pids (process
  groups) are refused;
* namespaces and mounts: ``unshare``, ``setns``, ``clone`` with a namespace
  flag, ``mount``, ``umount2``, ``pivot_root``, ``chroot``, the new mount API
  (``open_tree``, ``move_mount``, ``fsopen``, ``fsconfig``, ``fsmount``,
  ``fspick``, ``mount_setattr``); ``clone3`` fails with ENOSYS (its flags
  are behind a pointer a filter cannot read; glibc then falls back to
  ``clone``);
* kernel surfaces: keyrings (``keyctl``, ``add_key``, ``request_key``),
  ``bpf``, ``userfaultfd``, ``perf_event_open``, kernel modules and kexec,
  ``open_by_handle_at``/``name_to_handle_at``, ``swapon``/``swapoff``,
  ``reboot``, ``acct``, ``quotactl``, ``syslog``, ``lookup_dcookie``,
  ``ioperm``/``iopl`` (x86_64), and ``personality`` other than a query
  (0xffffffff) or PER_LINUX (0).

What it does not cover: files (use landlock.py or a mount namespace for
that), descriptors already open or received later, CPU time, memory and
process counts (rlimits), and every call not named above.  The pid allowed to
be signalled is fixed when the filter is installed: a process forked later
cannot signal itself (its raise() fails; abort() still ends it) nor its own
children, and the restricted process cannot signal the children it starts
(Popen.kill, a timeout in subprocess.run) -- leave that to a keeper outside
the filter.  Any process under the filter may still signal the restricted
process itself.  Known syscall numbers are those of Linux 6.1's uapi headers;
calls added later (``open_tree_attr``, ``listmount``...) are allowed.

This module imports nothing from the ``autograder`` package, so it can be
loaded by file path in a ``python -I`` process before anything else.
"""
import ctypes
import errno
import os
import struct
import sys

__all__ = ["CONDITIONS", "REFUSED", "SeccompError", "available", "build_filter",
           "refused_names", "restrict"]

# Syscall numbers: (x86_64, aarch64), None where the architecture has no such
# call.  x86_64 from <asm/unistd_64.h>, aarch64 from <asm-generic/unistd.h>
# (arm64 uses the generic table), both Linux 6.1 uapi headers.
_NUMBERS = {
    "socket": (41, 198), "connect": (42, 203), "bind": (49, 200), "listen": (50, 201),
    "accept": (43, 202), "accept4": (288, 242),
    "io_uring_setup": (425, 425), "io_uring_enter": (426, 426),
    "io_uring_register": (427, 427),
    "ptrace": (101, 117), "process_vm_readv": (310, 270), "process_vm_writev": (311, 271),
    "kcmp": (312, 272), "pidfd_open": (434, 434), "pidfd_getfd": (438, 438),
    "pidfd_send_signal": (424, 424),
    "kill": (62, 129), "tkill": (200, 130), "tgkill": (234, 131),
    "rt_sigqueueinfo": (129, 138), "rt_tgsigqueueinfo": (297, 240),
    "unshare": (272, 97), "setns": (308, 268), "clone": (56, 220), "clone3": (435, 435),
    "mount": (165, 40), "umount2": (166, 39), "pivot_root": (155, 41), "chroot": (161, 51),
    "open_tree": (428, 428), "move_mount": (429, 429), "fsopen": (430, 430),
    "fsconfig": (431, 431), "fsmount": (432, 432), "fspick": (433, 433),
    "mount_setattr": (442, 442),
    "keyctl": (250, 219), "add_key": (248, 217), "request_key": (249, 218),
    "bpf": (321, 280), "userfaultfd": (323, 282), "perf_event_open": (298, 241),
    "kexec_load": (246, 104), "kexec_file_load": (320, 294),
    "init_module": (175, 105), "finit_module": (313, 273), "delete_module": (176, 106),
    "open_by_handle_at": (304, 265), "name_to_handle_at": (303, 264),
    "swapon": (167, 224), "swapoff": (168, 225), "reboot": (169, 142), "acct": (163, 89),
    "quotactl": (179, 60), "quotactl_fd": (443, 443), "syslog": (103, 116),
    "lookup_dcookie": (212, 18), "ioperm": (173, None), "iopl": (172, None),
    "personality": (135, 92), "prlimit64": (302, 261),
    "seccomp": (317, 277),  # used to install the filter, never refused
}
_ARCHES = {
    # machine: (index in _NUMBERS, AUDIT_ARCH_*)
    "x86_64": (0, 0xC000003E),
    "aarch64": (1, 0xC00000B7),
}

# What the filter refuses, by subject (a README table); CONDITIONS says which
# are refused only in some cases, and what happens instead of EPERM.
REFUSED = {
    "sockets": ("socket", "connect", "bind", "listen", "accept", "accept4",
                "io_uring_setup", "io_uring_enter", "io_uring_register"),
    "processes": ("ptrace", "process_vm_readv", "process_vm_writev", "kcmp",
                  "pidfd_open", "pidfd_getfd", "pidfd_send_signal", "prlimit64"),
    "signals": ("kill", "tkill", "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo"),
    "namespaces and mounts": ("unshare", "setns", "clone", "clone3", "mount", "umount2",
                              "pivot_root", "chroot", "open_tree", "move_mount", "fsopen",
                              "fsconfig", "fsmount", "fspick", "mount_setattr"),
    "kernel": ("keyctl", "add_key", "request_key", "bpf", "userfaultfd", "perf_event_open",
               "kexec_load", "kexec_file_load", "init_module", "finit_module",
               "delete_module", "open_by_handle_at", "name_to_handle_at", "swapon",
               "swapoff", "reboot", "acct", "quotactl", "quotactl_fd", "syslog",
               "lookup_dcookie", "ioperm", "iopl", "personality"),
}
_SIGNALS = REFUSED["signals"]
CONDITIONS = {
    **{name: "unless its first argument is the restricted process's own pid"
       for name in _SIGNALS},
    "clone": "only with a namespace flag (CLONE_NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, "
             "NEWPID, NEWNET)",
    "clone3": "always, with ENOSYS (glibc falls back to clone)",
    "personality": "unless a query (0xffffffff) or PER_LINUX (0)",
    "prlimit64": "unless its first argument is 0 or the restricted process's own pid (another process's "
                 "limits: the grader's, of the same uid at the landlock level)",
    "x32 calls": "x86_64 only: any number with bit 30 (0x40000000) set",
    "other ABIs": "the process is killed (SECCOMP_RET_KILL_PROCESS)",
}

# Classic BPF and seccomp constants.
_LD_W_ABS = 0x20             # BPF_LD | BPF_W | BPF_ABS
_JEQ, _JGE, _JSET = 0x15, 0x35, 0x45   # BPF_JMP | BPF_J* | BPF_K
_RET = 0x06                  # BPF_RET | BPF_K
_OFF_NR, _OFF_ARCH, _OFF_ARG0 = 0, 4, 16  # struct seccomp_data; args[0]'s low half (LE)
RET_KILL_PROCESS = 0x80000000
RET_ERRNO = 0x00050000
RET_ALLOW = 0x7FFF0000
_X32_BIT = 0x40000000
_CLONE_NAMESPACES = (0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000
                     | 0x20000000 | 0x40000000)
_PERSONALITY_OK = (0, 0xFFFFFFFF)

_PR_SET_NO_NEW_PRIVS = 38
_PR_SET_SECCOMP = 22
_SECCOMP_MODE_FILTER = 2
_SECCOMP_SET_MODE_FILTER = 1
_SECCOMP_FILTER_FLAG_TSYNC = 1


class SeccompError(OSError):
    """seccomp could not be used or set up; the message names the failing step."""

    def __init__(self, err, message):
        super().__init__(err, message)

    def __str__(self):
        return self.strerror


def _machine():
    """The running architecture's name in _ARCHES, or None (also for 32-bit Pythons)."""
    if not sys.platform.startswith("linux") or struct.calcsize("P") != 8:
        return None
    machine = os.uname().machine
    return machine if machine in _ARCHES else None


def refused_names(arch=None):
    """The calls the filter refuses (some only in cases: CONDITIONS) that exist on ``arch``."""
    arch = arch or _machine()
    if arch not in _ARCHES:
        raise ValueError(f"no syscall table for architecture {arch!r}")
    column = _ARCHES[arch][0]
    return [name for names in REFUSED.values() for name in names
            if _NUMBERS[name][column] is not None]


def build_filter(arch, own_pid):
    """The filter for ``arch`` as bytes: struct sock_filter {u16 code; u8 jt, jf; u32 k}[]."""
    if arch not in _ARCHES:
        raise ValueError(f"no syscall table for architecture {arch!r}")
    if not isinstance(own_pid, int) or isinstance(own_pid, bool) or not 0 < own_pid < 1 << 31:
        raise ValueError(f"own_pid must be a positive pid, not {own_pid!r}")
    column, audit_arch = _ARCHES[arch]
    nr = {name: numbers[column] for name, numbers in _NUMBERS.items()
          if numbers[column] is not None}
    special = {**{name: "signal" for name in _SIGNALS}, "clone": "clone",
               "clone3": "enosys", "personality": "personality", "prlimit64": "self"}

    # Instructions as [code, jt, jf, k]; jt/jf are labels (str) or 0, resolved below.
    prog, labels = [], {}

    def emit(code, k, jt=0, jf=0):
        prog.append([code, jt, jf, k])

    def label(name):
        labels[name] = len(prog)

    emit(_LD_W_ABS, _OFF_ARCH)
    emit(_JEQ, audit_arch, jt=1)
    emit(_RET, RET_KILL_PROCESS)
    emit(_LD_W_ABS, _OFF_NR)
    if arch == "x86_64":
        emit(_JGE, _X32_BIT, jt="eperm")
    for name in refused_names(arch):
        emit(_JEQ, nr[name], jt=special.get(name, "eperm"))
    emit(_RET, RET_ALLOW)
    label("signal")       # allowed only to its own pid: args[0] is an int, compare its low half
    emit(_LD_W_ABS, _OFF_ARG0)
    emit(_JEQ, own_pid, jt="allow", jf="eperm")
    label("self")         # prlimit64(pid, ...): 0 or its own pid
    emit(_LD_W_ABS, _OFF_ARG0)
    emit(_JEQ, 0, jt="allow")
    emit(_JEQ, own_pid, jt="allow", jf="eperm")
    label("clone")        # clone's flags are args[0]; the kernel reads only their low half
    emit(_LD_W_ABS, _OFF_ARG0)
    emit(_JSET, _CLONE_NAMESPACES, jt="eperm", jf="allow")
    label("personality")  # personality(unsigned int)
    emit(_LD_W_ABS, _OFF_ARG0)
    for value in _PERSONALITY_OK:
        emit(_JEQ, value, jt="allow")
    label("eperm")
    emit(_RET, RET_ERRNO | errno.EPERM)
    label("enosys")
    emit(_RET, RET_ERRNO | errno.ENOSYS)
    label("allow")
    emit(_RET, RET_ALLOW)

    out = bytearray()
    for index, (code, jt, jf, k) in enumerate(prog):
        jt, jf = (labels[j] - index - 1 if isinstance(j, str) else j for j in (jt, jf))
        if not (0 <= jt <= 255 and 0 <= jf <= 255):
            raise AssertionError(f"jump out of range at instruction {index}")
        out += struct.pack("=HBBI", code, jt, jf, k)
    return bytes(out)


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def _libc():
    """libc with errno, and its syscall(2) returning a C long."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return libc


def _probe():
    """(arch, errno): the architecture when a filter can be installed, else None and why."""
    arch = _machine()
    if arch is None:
        return None, errno.ENOSYS
    try:
        libc = _libc()
        # A NULL program: EFAULT means filters are supported (the copy is the first
        # thing to fail); ENOSYS, no seccomp(2): ask prctl the same way.
        rc = libc.syscall(ctypes.c_long(_NUMBERS["seccomp"][_ARCHES[arch][0]]),
                          ctypes.c_long(_SECCOMP_SET_MODE_FILTER), ctypes.c_long(0),
                          ctypes.c_void_p(None))
        err = ctypes.get_errno() if rc < 0 else errno.EINVAL
        if err == errno.ENOSYS:
            rc = libc.prctl(ctypes.c_int(_PR_SET_SECCOMP), ctypes.c_ulong(_SECCOMP_MODE_FILTER),
                            ctypes.c_void_p(None), ctypes.c_ulong(0), ctypes.c_ulong(0))
            err = ctypes.get_errno() if rc < 0 else errno.EINVAL
    except (OSError, AttributeError, TypeError):
        return None, errno.ENOSYS
    if err != errno.EFAULT:
        return None, err
    return arch, 0


def available():
    """Whether ``restrict`` can install its filter here. Never raises."""
    try:
        return _probe()[0] is not None
    except Exception:  # noqa: BLE001 - documented as never raising
        return False


def restrict(own_pid=None):
    """Install the filter on this process (all its threads) and all it will start, irreversibly.

    ``own_pid`` (default: this process's pid) is the only pid that kill,
    tkill, tgkill, rt_sigqueueinfo and rt_tgsigqueueinfo may name.  Returns
    the names of the calls refused (some only in cases: CONDITIONS) on this
    architecture.  Raises SeccompError naming the failing step, ValueError for
    an own_pid that is not a positive pid (before anything is changed).
    """
    arch, err = _probe()
    if arch is None:
        raise SeccompError(err, f"seccomp filters are not available: {os.strerror(err)}")
    program = build_filter(arch, os.getpid() if own_pid is None else own_pid)
    libc = _libc()

    def fail(step, e=None):
        e = e or ctypes.get_errno()
        raise SeccompError(e, f"{step}: {os.strerror(e)}")

    if libc.prctl(ctypes.c_int(_PR_SET_NO_NEW_PRIVS), ctypes.c_ulong(1),
                  ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0)) != 0:
        fail("prctl(PR_SET_NO_NEW_PRIVS)")
    buf = ctypes.create_string_buffer(program, len(program))
    fprog = _SockFprog(len(program) // 8, ctypes.addressof(buf))
    rc = libc.syscall(ctypes.c_long(_NUMBERS["seccomp"][_ARCHES[arch][0]]),
                      ctypes.c_long(_SECCOMP_SET_MODE_FILTER),
                      ctypes.c_long(_SECCOMP_FILTER_FLAG_TSYNC), ctypes.byref(fprog))
    if rc > 0:  # TSYNC: the id of a thread that could not take the filter
        fail(f"seccomp(SECCOMP_SET_MODE_FILTER, TSYNC): thread {rc} could not be synchronized",
             errno.EBUSY)
    if rc < 0:
        if ctypes.get_errno() != errno.ENOSYS:
            fail("seccomp(SECCOMP_SET_MODE_FILTER)")
        # Before Linux 3.17: prctl, which filters the calling thread only.
        if libc.prctl(ctypes.c_int(_PR_SET_SECCOMP), ctypes.c_ulong(_SECCOMP_MODE_FILTER),
                      ctypes.byref(fprog), ctypes.c_ulong(0), ctypes.c_ulong(0)) != 0:
            fail("prctl(PR_SET_SECCOMP)")
    return refused_names(arch)
