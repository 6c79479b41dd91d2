"""The seccomp filter's program (seccomp.py installs it): a classic BPF program, as bytes, that lets through the calls
of seccomp_rules.py's ALLOWED, checks the arguments of those of CONDITIONS, and answers every other call with the
default action. Standard library only; loaded by seccomp.py by file path, beside it.
"""
import errno
import struct

#: seccomp_rules.py's module, given by seccomp.py as it loads this file (seccomp._sibling), before this code runs
_rules = globals()["_rules"]
_NUMBERS, _ARCHES, _CONDITIONAL = _rules._NUMBERS, _rules._ARCHES, _rules._CONDITIONAL
_SIGNALS, _OWN_PROCESS = _rules._SIGNALS, _rules._OWN_PROCESS
_column, allowed_names = _rules._column, _rules.allowed_names

_LD_W_ABS = 0x20             # BPF_LD | BPF_W | BPF_ABS
_JA, _JEQ, _JGE, _JSET = 0x05, 0x15, 0x35, 0x45   # BPF_JMP | BPF_JA, BPF_J* | BPF_K
_RET = 0x06                  # BPF_RET | BPF_K
_OFF_NR, _OFF_ARCH = 0, 4    # struct seccomp_data
_OFF_ARG = (16, 24, 32, 40, 48, 56)  # args[i]'s low half (little-endian)
RET_KILL_PROCESS = 0x80000000
RET_ERRNO = 0x00050000
RET_USER_NOTIF = 0x7FC00000
RET_LOG = 0x7FFC0000
RET_ALLOW = 0x7FFF0000
_X32_BIT = 0x40000000
_CLONE_NAMESPACES = (0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000
                     | 0x20000000 | 0x40000000)
_PERSONALITY_OK = (0, 0xFFFFFFFF)
_PRIO_PROCESS, _IOPRIO_WHO_PROCESS = 0, 1
_TIOCSTI, _TIOCLINUX = 0x5412, 0x541C
_LEAF = 4  # numbers compared one by one at the bottom of the filter's search tree


def build_filter(arch, own_pid, default=RET_ERRNO | errno.EPERM):
    """The filter for ``arch`` as bytes: struct sock_filter {u16 code; u8 jt, jf; u32 k}[].

    ``default`` is what a call outside the lists gets: EPERM; RET_LOG to find what a program needs (the calls are
    then allowed, and logged by the kernel: its log, or the audit log, as "type=1326 ... syscall=N").

    Layout: the architecture check; on x86_64 the x32 check; then a binary search over the listed numbers (a
    ``JGE`` per level, then at most _LEAF ``JEQ``s), each number's action inline (allow) or a jump to its
    argument check; the argument checks last. Only loads of the number and the architecture lie on the way to
    an unconditional ALLOW or to the default, so the kernel's constant-action cache (Linux 5.11+) decides those
    calls without running the filter."""
    column = _column(arch)
    audit_arch = _ARCHES[arch][1]
    if not isinstance(own_pid, int) or isinstance(own_pid, bool) or not 0 < own_pid < 1 << 31:
        raise ValueError(f"own_pid must be a positive pid, not {own_pid!r}")
    special = {**{name: "own" for name in _SIGNALS}, "pidfd_open": "own", "kcmp": "kcmp",
               **{name: "self" for name in _OWN_PROCESS}, "getpriority": "prio", "setpriority": "prio",
               "ioprio_get": "ioprio", "ioprio_set": "ioprio", "clone": "clone", "clone3": "enosys",
               "personality": "personality", "ioctl": "ioctl"}
    actions = {_NUMBERS[name][column]: "allow" for name in allowed_names(arch)}
    actions.update({_NUMBERS[name][column]: kind for name, kind in special.items()
                    if _NUMBERS[name][column] is not None})
    entries = sorted(actions.items())

    # Instructions as [code, jt, jf, k]; jt/jf (and a JA's k) are labels (str) or numbers, resolved below.
    prog, labels, counter = [], {}, [0]

    def emit(code, k=0, jt=0, jf=0):
        prog.append([code, jt, jf, k])

    def label(name):
        labels[name] = len(prog)

    def fresh(stem):
        counter[0] += 1
        return f"{stem}.{counter[0]}"

    def tree(entries):
        if len(entries) <= _LEAF:
            targets = {}
            for nr, kind in entries:
                targets.setdefault(kind, fresh(kind))
                emit(_JEQ, nr, jt=targets[kind])
            emit(_RET, default)
            for kind, local in targets.items():
                label(local)
                if kind == "allow":
                    emit(_RET, RET_ALLOW)
                else:
                    emit(_JA, kind)  # to the argument check, far below: a JA's offset has 32 bits
            return
        middle = len(entries) // 2
        right = fresh("right")
        emit(_JGE, entries[middle][0], jt=0, jf=1)  # >= the middle number: the next instruction, a jump right
        emit(_JA, right)
        tree(entries[:middle])
        label(right)
        tree(entries[middle:])

    emit(_LD_W_ABS, _OFF_ARCH)
    emit(_JEQ, audit_arch, jt=1)
    emit(_RET, RET_KILL_PROCESS)
    emit(_LD_W_ABS, _OFF_NR)
    if arch == "x86_64":
        emit(_JGE, _X32_BIT, jt=0, jf=1)
        emit(_RET, RET_ERRNO | errno.EPERM)
    tree(entries)

    # The argument checks' refusals: EPERM in the kernel (a loop over every pid costs nothing outside), or logged
    # and allowed in the logging mode. Only the calls outside the lists go to a listener.
    eperm = RET_LOG if default == RET_LOG else RET_ERRNO | errno.EPERM
    label("own")          # signals, pidfd_open: args[0] is a pid_t, compared on its low half
    emit(_LD_W_ABS, _OFF_ARG[0])
    emit(_JEQ, own_pid, jf=1)
    emit(_RET, RET_ALLOW)
    emit(_RET, eperm)
    label("self")         # sched_*(pid, ...), prlimit64(pid, ...): 0 or its own pid
    emit(_LD_W_ABS, _OFF_ARG[0])
    emit(_JEQ, 0, jt=1)
    emit(_JEQ, own_pid, jf=1)
    emit(_RET, RET_ALLOW)
    emit(_RET, eperm)
    for name, which in (("prio", _PRIO_PROCESS), ("ioprio", _IOPRIO_WHO_PROCESS)):
        label(name)       # (get|set)priority(which, who, ...), ioprio_(get|set)(which, who, ...)
        emit(_LD_W_ABS, _OFF_ARG[0])
        emit(_JEQ, which, jf=4)
        emit(_LD_W_ABS, _OFF_ARG[1])
        emit(_JEQ, 0, jt=1)
        emit(_JEQ, own_pid, jf=1)
        emit(_RET, RET_ALLOW)
        emit(_RET, eperm)
    label("kcmp")         # kcmp(pid1, pid2, ...): both its own
    emit(_LD_W_ABS, _OFF_ARG[0])
    emit(_JEQ, own_pid, jf=3)
    emit(_LD_W_ABS, _OFF_ARG[1])
    emit(_JEQ, own_pid, jf=1)
    emit(_RET, RET_ALLOW)
    emit(_RET, eperm)
    label("clone")        # clone's flags are args[0]; the kernel reads only their low half
    emit(_LD_W_ABS, _OFF_ARG[0])
    emit(_JSET, _CLONE_NAMESPACES, jf=1)
    emit(_RET, eperm)
    emit(_RET, RET_ALLOW)
    label("personality")  # personality(unsigned int)
    emit(_LD_W_ABS, _OFF_ARG[0])
    emit(_JEQ, _PERSONALITY_OK[0], jt=1)
    emit(_JEQ, _PERSONALITY_OK[1], jf=1)
    emit(_RET, RET_ALLOW)
    emit(_RET, eperm)
    label("ioctl")        # ioctl(fd, unsigned int request, ...)
    emit(_LD_W_ABS, _OFF_ARG[1])
    emit(_JEQ, _TIOCSTI, jt=1)
    emit(_JEQ, _TIOCLINUX, jf=1)
    emit(_RET, eperm)
    emit(_RET, RET_ALLOW)
    label("enosys")
    emit(_RET, RET_ERRNO | errno.ENOSYS)

    out = bytearray()
    for index, (code, jt, jf, k) in enumerate(prog):
        if code == _JA:
            k = labels[k] - index - 1
        jt, jf = (labels[j] - index - 1 if isinstance(j, str) else j for j in (jt, jf))
        if not (0 <= jt <= 255 and 0 <= jf <= 255 and 0 <= k < 1 << 32):
            raise AssertionError(f"jump out of range at instruction {index}")
        out += struct.pack("=HBBI", code, jt, jf, k)
    if len(out) // 8 > 4096:  # BPF_MAXINSNS
        raise AssertionError(f"the filter has {len(out) // 8} instructions, more than the kernel takes")
    return bytes(out)
