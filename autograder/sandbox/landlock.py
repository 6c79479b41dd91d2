"""Confine the calling process with Linux Landlock (standard library only).

Landlock is an unprivileged Linux security module: a process builds a ruleset
that *handles* some access rights, grants some of them beneath chosen files
and folders, and then restricts itself.  From then on every handled right not
granted by a rule is refused (EACCES/EPERM) to that process and to everything
it starts (fork, exec); the restriction can never be lifted, only tightened.

What ``restrict`` covers, according to the kernel's ABI version:

* ABI 1+: opening, executing, listing, creating, removing, renaming and
  linking files, folders, device nodes, fifos, sockets and symlinks
  (the check is made when a path is *opened*: descriptors opened before
  ``restrict`` keep working);
* ABI 2+: renaming/linking across folders (REFER); ABI 3+: truncate;
  ABI 5+: ioctl on device files;
* ABI 4+: TCP bind and connect (``deny_tcp``);
* ABI 6+: connecting to abstract unix sockets and sending signals to
  processes outside the restricted domain (``scope``).

What it does not cover: UDP and other non-TCP sockets; connecting to named
(path) unix sockets (only *creating* one needs MAKE_SOCK); stat(2),
access(2), chdir(2), readlink(2) and walking through folders; chmod, chown,
utimes and xattr changes on files it can reach; descriptors opened before the
restriction or passed in later; memory, CPU time and process limits.  (Any
process under Landlock may not ptrace a process outside its domain.)  It is a
filesystem/network fence, not a full sandbox: combine it with rlimits,
namespaces or seccomp as needed.

This module imports nothing from the ``autograder`` package, so it can be
loaded by file path in a ``python -I`` process before anything else.
"""
import ctypes
import errno
import os
import stat
import struct
import sys

__all__ = ["LandlockError", "abi_version", "restrict"]

# Syscall numbers (the same on every architecture) and flags.
_SYS_CREATE_RULESET = 444
_SYS_ADD_RULE = 445
_SYS_RESTRICT_SELF = 446
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1
_PR_SET_NO_NEW_PRIVS = 38

# Filesystem rights.
FS_EXECUTE = 1 << 0
FS_WRITE_FILE = 1 << 1
FS_READ_FILE = 1 << 2
FS_READ_DIR = 1 << 3
FS_REMOVE_DIR = 1 << 4
FS_REMOVE_FILE = 1 << 5
FS_MAKE_CHAR = 1 << 6
FS_MAKE_DIR = 1 << 7
FS_MAKE_REG = 1 << 8
FS_MAKE_SOCK = 1 << 9
FS_MAKE_FIFO = 1 << 10
FS_MAKE_BLOCK = 1 << 11
FS_MAKE_SYM = 1 << 12
FS_REFER = 1 << 13        # ABI 2
FS_TRUNCATE = 1 << 14     # ABI 3
FS_IOCTL_DEV = 1 << 15    # ABI 5

# Network rights (ABI 4) and scopes (ABI 6).
NET_BIND_TCP = 1 << 0
NET_CONNECT_TCP = 1 << 1
SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0
SCOPE_SIGNAL = 1 << 1

# Rights that a rule on a non-directory may carry.
_FILE_RIGHTS = FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | FS_TRUNCATE | FS_IOCTL_DEV


class LandlockError(OSError):
    """Landlock could not be used or set up; the message names the failing step."""

    def __init__(self, err, message):
        super().__init__(err, message)

    def __str__(self):
        return self.strerror


def _syscall():
    """libc's syscall(2) returning a C long, or None when there is none."""
    libc = ctypes.CDLL(None, use_errno=True)
    fn = libc.syscall
    fn.restype = ctypes.c_long
    return libc, fn


def _probe():
    """(abi, errno): the ABI, or 0 with the errno explaining why not."""
    if not sys.platform.startswith("linux"):
        return 0, errno.ENOSYS
    try:
        _, syscall = _syscall()
        abi = syscall(ctypes.c_long(_SYS_CREATE_RULESET), ctypes.c_void_p(None),
                      ctypes.c_long(0), ctypes.c_long(_CREATE_RULESET_VERSION))
    except (OSError, AttributeError, TypeError):
        return 0, errno.ENOSYS
    if abi < 0:
        return 0, ctypes.get_errno() or errno.ENOSYS
    return int(abi), 0


def abi_version():
    """The kernel's Landlock ABI version, 0 when Landlock cannot be used. Never raises."""
    try:
        return _probe()[0]
    except Exception:  # noqa: BLE001 - documented as never raising
        return 0


def _fs_rights(abi):
    """Every filesystem right the given ABI knows."""
    rights = (1 << 13) - 1
    if abi >= 2:
        rights |= FS_REFER
    if abi >= 3:
        rights |= FS_TRUNCATE
    if abi >= 5:
        rights |= FS_IOCTL_DEV
    return rights


def restrict(read=(), write=(), devices=(), *, deny_tcp=True, scope=True):
    """Restrict this process and all it will start, irreversibly; return the ABI used.

    Every filesystem right the ABI knows is handled, so whatever is not granted
    here is denied.  ``read`` paths get execute/read-file/list rights, ``write``
    paths get every right, ``devices`` get read/write/truncate/ioctl (file
    rights only, for rules on non-directories).  Paths that do not exist are
    skipped.  ``deny_tcp`` (ABI 4+) refuses all TCP bind/connect; ``scope``
    (ABI 6+) refuses abstract unix sockets and signals outside the domain.
    Rights added after ABI 7 are not handled.  Raises LandlockError naming the
    failing step, TypeError when a path list is a single str/bytes/path.
    """
    for paths in (read, write, devices):
        if isinstance(paths, (str, bytes, os.PathLike)):
            raise TypeError(f"restrict() wants lists of paths, not {paths!r}")
    abi, err = _probe()
    if abi <= 0:
        raise LandlockError(err, f"Landlock is not available: {os.strerror(err)}")
    libc, syscall = _syscall()

    handled_fs = _fs_rights(abi)
    handled_net = NET_BIND_TCP | NET_CONNECT_TCP if abi >= 4 and deny_tcp else 0
    scoped = SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL if abi >= 6 and scope else 0
    if abi >= 6:
        attr = struct.pack("=QQQ", handled_fs, handled_net, scoped)
    elif abi >= 4:
        attr = struct.pack("=QQ", handled_fs, handled_net)
    else:
        attr = struct.pack("=Q", handled_fs)
    attr_buf = ctypes.create_string_buffer(attr, len(attr))

    def fail(step):
        e = ctypes.get_errno()
        raise LandlockError(e, f"{step}: {os.strerror(e)}")

    ruleset_fd = syscall(ctypes.c_long(_SYS_CREATE_RULESET), attr_buf,
                         ctypes.c_long(len(attr)), ctypes.c_long(0))
    if ruleset_fd < 0:
        fail("landlock_create_ruleset")
    try:
        read_rights = FS_EXECUTE | FS_READ_FILE | FS_READ_DIR
        device_rights = FS_READ_FILE | FS_WRITE_FILE | FS_TRUNCATE | FS_IOCTL_DEV
        for paths, rights in ((read, read_rights), (write, handled_fs),
                              (devices, device_rights)):
            for path in paths:
                _add_path_rule(syscall, ruleset_fd, os.fsdecode(path),
                               rights & handled_fs, fail)
        if libc.prctl(ctypes.c_int(_PR_SET_NO_NEW_PRIVS), ctypes.c_ulong(1),
                      ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0)) != 0:
            fail("prctl(PR_SET_NO_NEW_PRIVS)")
        if syscall(ctypes.c_long(_SYS_RESTRICT_SELF), ctypes.c_long(ruleset_fd),
                   ctypes.c_long(0)) < 0:
            fail("landlock_restrict_self")
    finally:
        os.close(ruleset_fd)
    return abi


def _add_path_rule(syscall, ruleset_fd, path, rights, fail):
    """Grant ``rights`` beneath ``path`` (file rights only for non-folders)."""
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except (FileNotFoundError, NotADirectoryError):
        return
    except OSError as exc:
        raise LandlockError(exc.errno, f"open({path}): {os.strerror(exc.errno)}") from None
    try:
        if not stat.S_ISDIR(os.fstat(fd).st_mode):
            rights &= _FILE_RIGHTS
        if not rights:
            return
        rule = ctypes.create_string_buffer(struct.pack("=Qi", rights, fd), 12)
        if syscall(ctypes.c_long(_SYS_ADD_RULE), ctypes.c_long(ruleset_fd),
                   ctypes.c_long(_RULE_PATH_BENEATH), rule, ctypes.c_long(0)) < 0:
            fail(f"landlock_add_rule({path})")
    finally:
        os.close(fd)
