"""The student process's device nodes: the minimal /dev of the `namespaces` level, and the machine's GPU nodes
(standard library only).

Loaded by path by the student process, which gives it its own instance of libc.py (`libc` below).
"""
import os

#: this process's libc.py, given by the student process as it loads this file (student_process._sibling)
libc = None

#: Device nodes the student process sees at the namespaces level: no terminals (pseudo-terminals are a host-wide
#: resource), no disks; a GPU's nodes where there are some.
DEVICES = ("null", "zero", "full", "random", "urandom")


def gpu_nodes():
    """The GPU device nodes of this machine (NVIDIA's, AMD's kfd): where there are some, torch may use CUDA. Read
    before any confinement: under Landlock /dev cannot be listed."""
    return [d for d in libc.listdir("/dev") if d.startswith("nvidia") or d == "kfd"]


def minimal_dev(root):
    """A /dev of its own: a few harmless device nodes bound one by one, GPU nodes, private shm and mqueue."""
    dev = root + "/dev"
    os.makedirs(dev)
    libc.mount("tmpfs", dev, "tmpfs", libc.MS_NOSUID, "mode=0755,size=64k,nr_inodes=256")
    for name in (*DEVICES, *(d for d in libc.listdir("/dev") if d.startswith("nvidia"))):
        if os.path.exists("/dev/" + name) and not os.path.isdir("/dev/" + name):
            open(f"{dev}/{name}", "w").close()  # the mount point
            libc.mount("/dev/" + name, f"{dev}/{name}", None, libc.MS_BIND)
    if os.path.isdir("/dev/dri"):
        os.makedirs(dev + "/dri")
        libc.mount("/dev/dri", dev + "/dri", None, libc.MS_BIND | libc.MS_REC)
    for private in ("shm", "mqueue"):  # not the host's: no channel to other processes
        os.makedirs(f"{dev}/{private}")
        libc.mount("tmpfs", f"{dev}/{private}", "tmpfs", libc.MS_NOSUID | libc.MS_NODEV,
                   "mode=1777,size=64m,nr_inodes=1024")
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1"),
                         ("stderr", "/proc/self/fd/2")):
        os.symlink(target, f"{dev}/{name}")
    libc.mount(None, dev, None, libc.MS_REMOUNT | libc.MS_RDONLY | libc.MS_NOSUID)
