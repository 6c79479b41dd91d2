"""The student process's calls into Linux through libc (ctypes; standard library only), and its confinement steps,
each a name that the kit's tests can refuse on purpose.

The student process (student_process.py) loads this file by path before it confines itself, and gives its own
instance to the files that confine it (namespaces.py, devices.py, privileges.py, keeper.py, rlimits.py), so that
one set of refused steps (`refused`, from MHA_REFUSE on the trusted side) holds for all of them.
"""
import ctypes
import errno
import os

CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC = 0x00020000, 0x04000000, 0x08000000
CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x10000000, 0x20000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = (
    1, 2, 4, 8, 32, 4096, 16384, 1 << 18)
MNT_DETACH, PR_SET_PDEATHSIG, PR_SET_NO_NEW_PRIVS, PR_SET_CHILD_SUBREAPER, PR_SET_DUMPABLE = 2, 1, 38, 36, 4
_cdll = None
#: Steps refused on purpose (the kit's tests: MHA_REFUSE on the trusted side), set by the student process
refused = frozenset()


class SetupFailed(Exception):
    """A step of confinement, limits or imports failed: the grader's failure, reported in the handshake."""


def step(name):
    """Mark a confinement step; a step named in `refused` fails as the OS would refuse it."""
    if name in refused:
        raise OSError(errno.EPERM, f"{name}: {os.strerror(errno.EPERM)} (refused on purpose: MHA_REFUSE)")


def call(name, *args):
    global _cdll
    try:
        if _cdll is None:
            _cdll = ctypes.CDLL(None, use_errno=True)
        function = getattr(_cdll, name)
    except (OSError, AttributeError):
        raise OSError(f"{name}: not available on this system") from None  # macOS, Windows
    if function(*args) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{name}: {os.strerror(err)}")


def prctl(option, value):
    call("prctl", ctypes.c_int(option), ctypes.c_ulong(value), ctypes.c_ulong(0), ctypes.c_ulong(0),
         ctypes.c_ulong(0))


def mount(source, target, fstype=None, flags=0, data=None):
    step("mount")
    enc = (lambda s: None if s is None else os.fsencode(s))
    call("mount", enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data))


def listdir(path):
    try:
        return sorted(os.listdir(path))
    except OSError:
        return []
