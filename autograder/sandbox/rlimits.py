"""The student process's resource limits: CPU time, memory, open files, output size and processes (standard library
only). Hitting one ends only student code.

What the limits are is decided on the trusted side (limits.py: Limits); this file sets them from inside the
student process, each at its moment: most once it is confined (`apply`), the memory limit for good once torch has
loaded and CUDA has started (`bound_memory`: the limit is what student code gets above that), the process limit just
before the handshake (`apply_process_limit`).

Loaded by path by the student process, which gives it its own instance of libc.py (`libc` below).
"""
import ctypes
import os
import resource
import signal

#: this process's libc.py, given by the student process as it loads this file (student_process._sibling)
libc = None

OPEN_FILES = 256  # open file descriptors of a student process (torch needs a few dozen)
#: The least memory limit: what grading itself takes above Python and torch (the requests' inputs and answers, the
#: modules built, the request server's thread) fits in it; the reference scores 100 under it
MIN_MEMORY = 64 << 20


def tasks_of(uid):
    """Processes and threads of real uid `uid` that this process can see (what RLIMIT_NPROC counts)."""
    count = 0
    for pid in libc.listdir("/proc"):
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


def vm_size(field="VmSize"):
    """This process's address space (VmSize) or private writable memory (VmData), in bytes."""
    try:
        with open("/proc/self/status") as fh:
            return next(int(line.split()[1]) << 10 for line in fh if line.startswith(field + ":"))
    except (OSError, StopIteration, ValueError):
        return 0


def apply(limits):
    """Resource limits of this process and everything it starts; hitting one ends only student code. Set once this
    process is confined, before torch is imported in a cold process (after, in a zygote's fork).

    The memory limit is what student code gets above what Python and torch hold, whichever build of torch, on any
    machine: `bound_memory` sets it once they have loaded, and nothing bounds what still loads before (no student
    code runs then; under RLIMIT_DATA alone, a limit too small for numpy's OpenBLAS made its start retry a failed
    32 MiB allocation forever). The process limit is set later, just before the handshake (`apply_process_limit`).
    """
    libc.step("setrlimit")
    one_malloc_arena()
    memory = limits.get("memory_bytes")
    if memory is not None and memory < MIN_MEMORY:
        raise libc.SetupFailed(
            f"the memory limit ({memory / (1 << 20):g} MiB) is too small: grading needs at least "
            f"{MIN_MEMORY >> 20} MiB above what Python and torch hold")
    pairs = {
        resource.RLIMIT_CPU: limits.get("cpu_seconds"),
        resource.RLIMIT_FSIZE: limits.get("output_bytes"),
        resource.RLIMIT_CORE: 0,
        resource.RLIMIT_NOFILE: min(OPEN_FILES, resource.getrlimit(resource.RLIMIT_NOFILE)[1]),
    }
    for which, value in pairs.items():
        if value is not None:
            resource.setrlimit(which, (int(value), int(value) + (5 if which == resource.RLIMIT_CPU else 0)))
    if memory is not None and not vm_size():  # no /proc to read what this process holds in (macOS): the whole
        _lower(resource.RLIMIT_AS, int(memory))  # address space, as the kit always bounded it there
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # too much output: the write fails with EFBIG instead


def one_malloc_arena():
    """glibc's malloc, one arena for every thread of this process: by default each thread that allocates reserves
    an arena of its own, 64 MiB of address space (the request server's warm-up thread, one started after
    `bound_memory`, took 64 MiB of the student's limit). Nothing where it cannot be set (not glibc)."""
    try:
        ctypes.CDLL(None).mallopt(ctypes.c_int(-8), ctypes.c_int(1))  # M_ARENA_MAX: 1
    except (OSError, AttributeError):
        pass


def _lower(which, value):
    """Set limit `which` at `value` (never above its hard limit: one inherited lower stays), soft and hard: then
    nothing this process runs may raise it again (that needs CAP_SYS_RESOURCE, which it has not)."""
    ceiling = resource.getrlimit(which)[1]
    value = value if ceiling == resource.RLIM_INFINITY else min(value, ceiling)
    resource.setrlimit(which, (value, value))


def bound_memory(limits):
    """The memory limit, for good: once torch has loaded (and CUDA has started, or failed to), before any student
    code, in every process at every level, cold or forked, CPU or CUDA build, GPU or not. Student code gets the
    limit above what this process holds now, and no more:

    * RLIMIT_DATA, private writable memory (what tensors, arrays and Python objects take): at what is held now
      (VmData: 0.2 GiB with torch's CPU build, 0.7 GiB with its CUDA build) plus the limit;
    * RLIMIT_AS, the address space (every mapping, shared ones too: mmap(-1, n) in Python, which RLIMIT_DATA does
      not count): at what is held now (VmSize: 0.6 GiB with the CPU build, 3 GiB with the CUDA build, whose
      libraries are mapped even where no GPU is, and 17 GiB once CUDA has started on an H200, mostly reservations
      with no access) plus the limit.

    Both soft and hard: a limit may always be lowered, never raised without CAP_SYS_RESOURCE. Raises OSError or
    ValueError where they cannot be set."""
    memory, data, size = limits.get("memory_bytes"), vm_size("VmData"), vm_size()
    if memory is None or not data or not size:  # no /proc to read them in: the address space was bounded in `apply`
        return
    _lower(resource.RLIMIT_DATA, data + int(memory))
    _lower(resource.RLIMIT_AS, size + int(memory))


def apply_process_limit(limits):
    """RLIMIT_NPROC, set just before the handshake, after this process's own imports and threads.

    It counts every process and thread of the real uid (in its user namespace), so the limit is set at what
    that uid runs now plus the student's allowance: however many threads the grading user has, student code
    may start `processes` more, and no other. Set as late as it can be (still before any student code), so that
    what the same uid starts meanwhile (another grading, another program of the user's) cannot use up the
    allowance first: set before a cold process imported torch, it once left that process no thread to start.
    Raises OSError or ValueError where it cannot be set.
    """
    processes = limits.get("processes")
    if processes is None:
        return
    value = tasks_of(os.getuid()) + int(processes)
    resource.setrlimit(resource.RLIMIT_NPROC, (value, value))
