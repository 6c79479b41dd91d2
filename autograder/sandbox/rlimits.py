"""The student process's resource limits: CPU time, memory, open files, output size and processes (standard library
only). Hitting one ends only student code.

What the limits are is decided on the trusted side (limits.py: Limits); this file sets them from inside the
student process, each at its moment: most once it is confined (`apply`), the address space on a GPU machine once
CUDA has started (`bound_address_space`), the process limit just before the handshake (`apply_process_limit`).

Loaded by path by the student process, which gives it its own instance of libc.py (`libc` below).
"""
import os
import resource
import signal

#: this process's libc.py, given by the student process as it loads this file (student_process._sibling)
libc = None

OPEN_FILES = 256  # open file descriptors of a student process (torch needs a few dozen)


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


def apply(limits, gpu_nodes):
    """Resource limits of this process and everything it starts; hitting one ends only student code. `gpu_nodes`:
    the machine's GPU device nodes (devices.gpu_nodes).

    The process limit is set later, just before the handshake (`apply_process_limit`).
    """
    libc.step("setrlimit")
    memory = limits.get("memory_bytes")
    # The memory limit bounds the address space (RLIMIT_AS): every mapping counts, private or shared. On a GPU
    # machine it cannot, not yet: CUDA reserves address space as it starts (17 GiB on an H200, where a 4 GiB
    # RLIMIT_AS failed cudaGetDeviceCount with "out of memory"), so there it bounds the private writable memory
    # (RLIMIT_DATA: what tensors, arrays and Python objects take; a reservation with no access does not count),
    # and the address space once CUDA has started (bound_address_space).
    rule, field = ((resource.RLIMIT_DATA, "VmData") if gpu_nodes else (resource.RLIMIT_AS, "VmSize"))
    if memory is not None and memory < vm_size(field) + (64 << 20):  # Python (and torch, in a zygote), room
        raise libc.SetupFailed(
            f"the memory limit ({memory / (1 << 20):g} MiB) is too small: this process already uses "
            f"{vm_size(field) / (1 << 20):.0f} MiB of {'private memory' if field == 'VmData' else 'address space'} "
            f"before any student code")
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


def bound_address_space(limits, gpu_nodes):
    """On a GPU machine, once CUDA has started (or failed to), before any student code: the address space too,
    at what this process holds now (Python, torch, CUDA's reservation) plus the memory limit. RLIMIT_DATA does
    not count shared mappings (mmap(-1, n) in Python): this bounds them. A limit may always be lowered; on the
    H200, CUDA's matrix products, a 1 GiB tensor on the GPU and pinned memory fitted in 4 GiB above it.
    Raises OSError or ValueError where it cannot be set."""
    memory, held = limits.get("memory_bytes"), vm_size()
    if memory is None or not gpu_nodes or not held:  # held 0: no /proc to read it in; RLIMIT_DATA alone
        return
    value = held + int(memory)
    resource.setrlimit(resource.RLIMIT_AS, (value, value))


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
