"""The student process's privileges: student code never runs as root, nor with capabilities (standard library only).

Root drops to a uid of its own, that owns the student's copy and temp folder (`drop_root`); a user that is not root
drops the capabilities its new user namespace gave it (`drop_capabilities`). Either way the uid it ends up with must
still read Python and torch (`check_python_readable`).

Loaded by path by the student process, which gives it its own instance of libc.py (`libc` below).
"""
import ctypes
import importlib.util
import os
import sys

#: this process's libc.py, given by the student process as it loads this file (student_process._sibling)
libc = None

def sandbox_uid(config):
    """The uid root drops to: the one the trusted side leased for this grading (autograder/sandbox/uids.py: no
    other live grading of the machine holds it), given in the config."""
    uid = config.get("uid")
    if not isinstance(uid, int) or isinstance(uid, bool) or uid <= 0:
        raise libc.SetupFailed("no sandbox uid was leased for this process (the trusted side runs as root and gives "
                               "one: autograder/sandbox/uids.py)")
    return uid


def drop_root(writable, uid):
    """From root to `uid`, a uid of its own that owns the `writable` folders (the sandbox's fresh copy and
    temp folder, and what they hold): every capability goes, and the process limit counts only this
    student's processes."""
    libc.step("setuid")
    for folder in writable:
        if os.path.realpath(folder) == "/":
            raise libc.SetupFailed("refusing to hand / to the student uid")
        for name in [folder, *(os.path.join(folder, n) for n in os.listdir(folder))]:
            os.chown(name, uid, uid, follow_symlinks=False)
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)


def drop_capabilities():
    """Drop the capabilities that a new user namespace gave."""
    libc.step("capset")
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)
    libc.call("capset", header, (ctypes.c_uint32 * 6)())


def check_python_readable():
    """The confined process must still read Python and torch (a uid that cannot read them fails here)."""
    libc.step("read-python")
    for path in {sys.base_prefix, sys.prefix, *(p for p in sys.path if os.path.isdir(p))}:
        os.listdir(path)
    with open(os.__file__, "rb") as fh:
        fh.read(1)
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.origin:
        raise OSError("torch cannot be found from the confined process")
    with open(spec.origin, "rb") as fh:
        fh.read(1)
