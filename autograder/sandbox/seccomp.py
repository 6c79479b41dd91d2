"""Allow the system calls student code and torch need, refuse every other (a seccomp-BPF filter, standard library only).

seccomp lets an unprivileged process (after PR_SET_NO_NEW_PRIVS) attach a
classic BPF program that the kernel runs on each of its system calls; the
program decides from the call's number and register arguments whether it
goes ahead.  The filter is inherited by every thread (TSYNC), fork and exec
and can never be removed, only tightened by more filters.

``restrict`` installs one filter that is an allowlist: a call goes ahead
only when it is named in ALLOWED (whatever its arguments) or in CONDITIONS
(with the arguments said there); every other call fails with EPERM, and
its number is never executed.  The list was found by tracing the kit's
corpora (every correct variant, bug and hostile case of
tests/corpus/submissions.toml, at every isolation level, with this filter
in a logging mode: SECCOMP_RET_LOG instead of EPERM, the calls it logged
read from the kernel's log) and reading what Python, glibc and torch call
for files, memory, threads, time and subprocesses.  What it refuses,
and the tables that name each number: seccomp_rules.py.  What it
does not cover: files (use landlock.py or a mount namespace for that),
descriptors already open or received later, CPU time, memory and process
counts (rlimits).  The pid allowed in the calls that name a process is fixed
when the filter is installed: a process forked later cannot name itself (its
raise() fails; abort() still ends it) nor its own children, and the
restricted process cannot signal the children it starts (Popen.kill, a
timeout in subprocess.run) -- leave that to a keeper outside the filter.  Any
process under the filter may still signal the restricted process itself.

This module imports nothing from the ``autograder`` package, so it can be
loaded by file path in a ``python -I`` process before anything else.
"""
import ctypes
import errno
import importlib.util
import os
import struct

__all__ = ["ALLOWED", "CONDITIONS", "REFUSED", "SeccompError", "allowed_names", "available", "build_filter",
           "refused_names", "restrict", "answer", "syscall_name"]


def _sibling(name, **given):
    """<name>.py, beside this file, loaded by path (this module imports nothing of the kit as a package); `given`
    become its globals before it runs."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), f"{name}.py")
    spec = importlib.util.spec_from_file_location(f"_mha_{name}", path)
    module = importlib.util.module_from_spec(spec)
    module.__dict__.update(given)
    spec.loader.exec_module(module)
    return module


_rules = _sibling("seccomp_rules")  # the calls allowed, and the tables that name them
_bpf = _sibling("seccomp_bpf", _rules=_rules)  # the filter's program (build_filter), from those rules
ALLOWED, CONDITIONS, REFUSED = _rules.ALLOWED, _rules.CONDITIONS, _rules.REFUSED
_NUMBERS, _ARCHES, _CONDITIONAL = _rules._NUMBERS, _rules._ARCHES, _rules._CONDITIONAL
_machine, _column, allowed_names, refused_names, syscall_name = (
    _rules._machine, _rules._column, _rules.allowed_names, _rules.refused_names, _rules.syscall_name)
build_filter = _bpf.build_filter
RET_KILL_PROCESS, RET_ERRNO, RET_USER_NOTIF, RET_LOG, RET_ALLOW = (
    _bpf.RET_KILL_PROCESS, _bpf.RET_ERRNO, _bpf.RET_USER_NOTIF, _bpf.RET_LOG, _bpf.RET_ALLOW)

_PR_SET_NO_NEW_PRIVS = 38
_PR_SET_SECCOMP = 22
_SECCOMP_MODE_FILTER = 2
_SECCOMP_SET_MODE_FILTER = 1
_SECCOMP_FILTER_FLAG_TSYNC = 1
_SECCOMP_FILTER_FLAG_NEW_LISTENER = 1 << 3
_SECCOMP_FILTER_FLAG_TSYNC_ESRCH = 1 << 4
# SECCOMP_IOCTL_NOTIF_RECV and _SEND: _IOWR('!', 0 and 1, struct seccomp_notif (80 bytes), _notif_resp (24))
_NOTIF_RECV, _NOTIF_SEND = 0xC0502100, 0xC0182101


class SeccompError(OSError):
    """seccomp could not be used or set up; the message names the failing step."""

    def __init__(self, err, message):
        super().__init__(err, message)

    def __str__(self):
        return self.strerror


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


def restrict(own_pid=None, log=False, notify=False):
    """Install the filter on this process (all its threads) and all it will start, irreversibly.

    ``own_pid`` (default: this process's pid) is the only pid that the calls
    of CONDITIONS may name (with 0, "the caller", where the call takes it).
    ``log``: allow the calls outside the lists, and have the kernel log them
    (SECCOMP_RET_LOG): to find what a program needs, never to confine one.
    ``notify``: the calls outside the lists wait for a supervisor instead
    (SECCOMP_RET_USER_NOTIF), another process that was given the listener
    returned and runs ``answer`` on it: it refuses each with EPERM and
    learns its name.  Where the kernel has no listener (before Linux 5.7),
    the filter refuses them itself and None is returned; where the listener
    is closed with no supervisor, they fail with ENOSYS.
    Returns the names of the calls refused whatever their arguments on this
    architecture, or with ``notify`` the listener's descriptor (or None).
    Raises SeccompError naming the failing step, ValueError for an own_pid
    that is not a positive pid (before anything is changed).
    """
    arch, err = _probe()
    if arch is None:
        raise SeccompError(err, f"seccomp filters are not available: {os.strerror(err)}")
    own_pid = os.getpid() if own_pid is None else own_pid
    build_filter(arch, own_pid)  # a bad own_pid raises before anything is changed
    libc = _libc()

    def fail(step, e=None):
        e = e or ctypes.get_errno()
        raise SeccompError(e, f"{step}: {os.strerror(e)}")

    if libc.prctl(ctypes.c_int(_PR_SET_NO_NEW_PRIVS), ctypes.c_ulong(1),
                  ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0)) != 0:
        fail("prctl(PR_SET_NO_NEW_PRIVS)")

    def install(default, flags):
        program = build_filter(arch, own_pid, default)
        buf = ctypes.create_string_buffer(program, len(program))
        fprog = _SockFprog(len(program) // 8, ctypes.addressof(buf))
        rc = libc.syscall(ctypes.c_long(_NUMBERS["seccomp"][_ARCHES[arch][0]]),
                          ctypes.c_long(_SECCOMP_SET_MODE_FILTER), ctypes.c_long(flags), ctypes.byref(fprog))
        return rc, ctypes.get_errno(), fprog

    if notify:
        listener, err, _ = install(RET_USER_NOTIF, _SECCOMP_FILTER_FLAG_TSYNC | _SECCOMP_FILTER_FLAG_NEW_LISTENER
                                   | _SECCOMP_FILTER_FLAG_TSYNC_ESRCH)
        if listener >= 0:
            return listener
        if err not in (errno.EINVAL, errno.ENOSYS):
            fail("seccomp(SECCOMP_SET_MODE_FILTER, NEW_LISTENER)", err)
        # no listener here (before Linux 5.7): the filter refuses the calls itself, below
    rc, err, fprog = install(RET_LOG if log else RET_ERRNO | errno.EPERM, _SECCOMP_FILTER_FLAG_TSYNC)
    if rc > 0:  # TSYNC: the id of a thread that could not take the filter
        fail(f"seccomp(SECCOMP_SET_MODE_FILTER, TSYNC): thread {rc} could not be synchronized",
             errno.EBUSY)
    if rc < 0:
        if err != errno.ENOSYS:
            fail("seccomp(SECCOMP_SET_MODE_FILTER)", err)
        # Before Linux 3.17: prctl, which filters the calling thread only.
        if libc.prctl(ctypes.c_int(_PR_SET_SECCOMP), ctypes.c_ulong(_SECCOMP_MODE_FILTER),
                      ctypes.byref(fprog), ctypes.c_ulong(0), ctypes.c_ulong(0)) != 0:
            fail("prctl(PR_SET_SECCOMP)")
    return None if notify else refused_names(arch)


def answer(listener, seen, report):
    """Answer one call that the filter of ``restrict(notify=True)`` passed to ``listener`` (one outside the lists:
    those refused by an argument check get EPERM from the filter itself) with EPERM, as the filter itself would, and call ``report(name)`` the first time
    its number is seen (``seen``: a set, kept between calls). Returns False once the listener fails (closed, or no
    process under the filter is left), True otherwise (a call answered, or gone before it could be).

    Runs outside the filter, in the process that was given the listener (the student process's keeper, keeper.py):
    what it reports is measured there, not told by the filtered process."""
    libc = _libc()
    notification = ctypes.create_string_buffer(80)  # struct seccomp_notif, zeroed as the kernel wants it
    if libc.ioctl(ctypes.c_int(listener), ctypes.c_ulong(_NOTIF_RECV), notification) != 0:
        return ctypes.get_errno() in (errno.EINTR, errno.ENOENT)  # a signal; the caller gone before we looked
    ident, _pid, _flags, nr = struct.unpack_from("=QIIi", notification.raw)
    reply = ctypes.create_string_buffer(struct.pack("=QqiI", ident, 0, -errno.EPERM, 0), 24)
    libc.ioctl(ctypes.c_int(listener), ctypes.c_ulong(_NOTIF_SEND), reply)  # ENOENT: the caller is gone
    if nr not in seen:
        seen.add(nr)
        report(syscall_name(nr))
    return True
