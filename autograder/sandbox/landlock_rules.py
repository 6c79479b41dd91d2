"""What the student process may reach at the `landlock` level (standard library only): it may read only the system
and Python folders and its own copy, write only that copy and a private temp folder, open a few harmless device
nodes and the GPU's, and read its own /proc entries one by one. landlock.py does the restricting (and, ABI 4+,
refuses TCP; ABI 6+, signals to processes outside its domain).

Loaded by path by the student process, which gives it its own instance of libc.py (`libc` below).
"""
import os

#: this process's libc.py, given by the student process as it loads this file (student_process._sibling)
libc = None

#: What of its own /proc folder the student process may not read at the landlock level: `net` lists the
#: network namespace's sockets, the host's (/proc/self/net/unix named the grader's sockets), and `task` holds each
#: thread's `net` again; the links (cwd, exe, root, ns/) are never granted, as a rule on one would grant its target.
PROC_HIDDEN = ("net", "task")


def rules(config, folders, gpu_nodes):
    """landlock.restrict's arguments: read `folders` (the system and Python folders: namespaces.needed_paths) and
    the student's copy, write its copy and its private temp folder; `gpu_nodes`: the machine's GPU device nodes
    (devices.gpu_nodes)."""
    writable = [os.path.realpath(config["cwd"]), os.path.realpath(config["home"])]
    proc = ["/proc/cpuinfo", "/proc/meminfo", "/proc/stat", *own_proc_entries()]
    devices = ["/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty",
               *(os.path.join("/dev", d) for d in libc.listdir("/dev") if d.startswith(("nvidia", "dri")))]
    if any(d.startswith("nvidia") for d in gpu_nodes):
        # What NVIDIA's driver does as CUDA starts, refused under Landlock with "Error 304: OS call failed" (on an
        # H200, driver 580): it reads /proc/driver/nvidia and /proc/driver/nvidia-uvm, and it names its threads
        # by writing /proc/<pid>/task/<tid>/comm. Its own threads' folder is given file rights (read, write), no
        # more (which shows task/<tid>/net too: on a GPU machine, this level lets student code list sockets).
        proc += ["/proc/driver/nvidia", "/proc/driver/nvidia-uvm"]
        devices.append(f"/proc/{os.getpid()}/task")
    return {"read": folders + proc, "write": writable, "devices": devices}


def own_proc_entries():
    """The entries of this process's /proc folder that student code may read: every one but the links and
    PROC_HIDDEN (a Landlock rule on /proc/<pid> would grant all that is beneath it)."""
    folder = f"/proc/{os.getpid()}"
    return [f"{folder}/{name}" for name in libc.listdir(folder)
            if name not in PROC_HIDDEN and not os.path.islink(f"{folder}/{name}")]
