"""Namespaces and mounts: the student process's own view of the machine at the `namespaces` level (standard library
only).

New PID, mount, network, IPC and UTS namespaces (a user namespace too when not root): no network, no other process
in sight, everything it forks dies with it, and a filesystem of its own: the system and Python folders read-only,
the submission copy at /submission, an empty /tmp, a fresh /proc, a minimal /dev (devices.py), and nothing else:
no kit, no reference, no graders, no other submission. The student process (student_process.py) takes these steps
in order; `needed_paths` also says what it may read at the landlock level (landlock_rules.py).

Loaded by path by the student process, which gives it its own instance of libc.py (`libc` below).
"""
import ctypes
import os
import shutil
import sys

#: this process's libc.py, given by the student process as it loads this file (student_process._sibling)
libc = None

PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "riscv64": 41}.get(os.uname().machine)


def unshare_pid(root_user, uid, gid):
    """A new PID namespace, and where this process is not root a user namespace in which it maps its own `uid`
    and `gid` (read before unsharing: an unmapped namespace shows 65534). The next process forked is its PID 1."""
    libc.step("unshare")
    libc.call("unshare", ctypes.c_int(libc.CLONE_NEWPID | (0 if root_user else libc.CLONE_NEWUSER)))
    if not root_user:  # map ourselves in the new user namespace
        libc.step("uid-map")
        # a non-dumpable process (a zygote's fork) may not write its own uid_map: dumpable inside its new user
        # namespace, where no other student process sees it, until student_process._second_wall
        libc.prctl(libc.PR_SET_DUMPABLE, 1)
        for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
            with open(f"/proc/self/{name}", "w") as fh:
                fh.write(text)


def unshare_the_rest():
    """New mount, network, IPC and UTS namespaces (in the PID namespace's first process)."""
    libc.step("unshare-mount")
    libc.call("unshare",
              ctypes.c_int(libc.CLONE_NEWNS | libc.CLONE_NEWNET | libc.CLONE_NEWIPC | libc.CLONE_NEWUTS))


def needed_paths(forbidden):
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


def bind(root, path):
    """Make the real folder `path` appear at the same place under `root`, read-only."""
    target = root + path
    os.makedirs(target, exist_ok=True)
    libc.mount(path, target, None, libc.MS_BIND | libc.MS_REC)
    st = os.statvfs(path)  # a remount must keep the flags the mount is locked with
    kept = st.f_flag & (libc.MS_NOSUID | libc.MS_NODEV | libc.MS_NOEXEC)
    libc.mount(None, target, None, libc.MS_REMOUNT | libc.MS_BIND | libc.MS_RDONLY | kept)


def new_root(config):
    """The new root, at config["root"] (its real path, returned): a small tmpfs holding the system and Python
    folders read-only and the symlinks that lead to them, and an empty /tmp of its own."""
    if PIVOT_ROOT is None:
        raise OSError(f"pivot_root: unknown on {os.uname().machine}")
    libc.mount(None, "/", None, libc.MS_REC | libc.MS_PRIVATE)
    root = os.path.realpath(config["root"])
    libc.mount("tmpfs", root, "tmpfs", libc.MS_NOSUID | libc.MS_NODEV, "mode=0755,size=1m")
    os.makedirs(root + "/tmp")  # first: Python's folders may live under /tmp; their binds go inside it
    writable = config["writable"]  # the caps of the writable areas (autograder.sandbox.limits.WRITABLE)
    libc.mount("tmpfs", root + "/tmp", "tmpfs", libc.MS_NOSUID | libc.MS_NODEV,
               f"mode=1777,size={writable['tmp_bytes']},nr_inodes={writable['files']}")
    folders, links = needed_paths(config.get("forbidden", []))
    for path in folders:
        bind(root, path)
    for link, target in sorted(links.items()):
        os.makedirs(os.path.dirname(root + link), exist_ok=True)
        if not os.path.lexists(root + link):
            os.symlink(target, root + link)
    return root


def copy_submission(root, config):
    """The submission at /submission: a copy in memory, of a bounded size, so that nothing written reaches the
    disk; and a fresh /proc that shows only this PID namespace."""
    writable = config["writable"]
    os.makedirs(root + "/submission")
    work = os.path.realpath(config["cwd"])
    size = sum(os.lstat(os.path.join(d, f)).st_size for d, _, files in os.walk(work) for f in files)
    libc.mount("tmpfs", root + "/submission", "tmpfs", libc.MS_NOSUID | libc.MS_NODEV,
               f"mode=0755,size={max(writable['copy_bytes'], 2 * size)},nr_inodes={writable['files']}")
    shutil.copytree(work, root + "/submission", symlinks=True, dirs_exist_ok=True)
    os.makedirs(root + "/proc")
    try:  # a fresh /proc shows only this PID namespace; some containers forbid it: then no /proc at all
        libc.mount("proc", root + "/proc", "proc", libc.MS_NOSUID | libc.MS_NODEV | libc.MS_NOEXEC)
    except OSError:
        pass


def pivot_root(root):
    """Make `root` the root, the old one gone, read-only, and /submission the working folder."""
    os.makedirs(root + "/.old")
    os.chdir(root)
    libc.step("pivot-root")
    libc.call("syscall", ctypes.c_long(PIVOT_ROOT), b".", b".old")
    os.chdir("/")
    libc.call("umount2", b"/.old", ctypes.c_int(libc.MNT_DETACH))
    os.rmdir("/.old")
    libc.mount(None, "/", None,
               libc.MS_REMOUNT | libc.MS_BIND | libc.MS_RDONLY | libc.MS_NOSUID | libc.MS_NODEV)
    os.chdir("/submission")
