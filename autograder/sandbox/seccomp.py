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
for files, memory, threads, time and subprocesses.  What it refuses, among
others:

* System V IPC and POSIX message queues (``shmget``, ``shmat``, ``msgget``,
  ``semget``, ``mq_open``...): their objects outlive the student process
  (only the namespaces level has an IPC namespace of its own); torch's
  shared memory on the CPU is files under /dev/shm, which stay allowed;
* sockets: ``socket`` (every family), ``connect``, ``bind``, ``listen``,
  ``accept`` and io_uring; ``socketpair`` and the calls on sockets it
  already holds (``sendmsg``, ``recvmsg``...) stay allowed;
* other processes: ``ptrace``, ``process_vm_readv``/``writev``,
  ``pidfd_getfd``, ``pidfd_send_signal`` (a /proc/<pid> folder opened by
  name is a pidfd too), ``process_madvise``, ``move_pages``,
  ``get_robust_list``; the calls that name a process (scheduling,
  priorities, affinity, I/O class, resource limits, ``kcmp``, ``pidfd_open``,
  signals) go ahead only for the process that called ``restrict`` (pid 0,
  "the caller", or its own pid, fixed when the filter is installed: the
  arguments are checked in the filter, CONDITIONS); ``getpriority`` and
  ``setpriority`` only for PRIO_PROCESS (never PRIO_USER, every process of
  a uid, nor PRIO_PGRP), ``ioprio_*`` only for IOPRIO_WHO_PROCESS;
* namespaces, mounts, ``chroot``, the user and group ids, capabilities,
  keyrings, ``bpf``, ``userfaultfd``, ``perf_event_open``, kernel modules,
  kexec, ``open_by_handle_at``, ``swapon``, ``reboot``, ``syslog``, clocks'
  settings, ``ioctl`` TIOCSTI and TIOCLINUX (typing into a terminal);
* the architecture: a call made with another ABI than the process's own
  (``int 0x80`` i386 calls on x86_64, 32-bit ARM) kills the process (its
  numbers are another table's); on x86_64, x32 calls (number with bit 30
  set) are refused; ``clone3`` fails with ENOSYS (its flags are behind a
  pointer a filter cannot read; glibc then falls back to ``clone``, whose
  namespace flags are refused).

The tables (_TABLE: every call of Linux 6.1's uapi headers, x86_64 from
<asm/unistd_64.h>, aarch64 from <asm-generic/unistd.h> as arm64 includes it)
name each number, so a refusal can be reported by name (``syscall_name``);
calls added to Linux later are refused until they are listed here.  What it
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
import os
import struct
import sys

__all__ = ["ALLOWED", "CONDITIONS", "REFUSED", "SeccompError", "allowed_names", "available", "build_filter",
           "refused_names", "restrict", "answer", "syscall_name"]

# Every system call: "name x86_64 aarch64" ("-" where the architecture has no such call), in x86_64's order.
# x86_64 from <asm/unistd_64.h>; aarch64 from <asm-generic/unistd.h> as arm64's <asm/unistd.h> includes it (64-bit,
# with __ARCH_WANT_RENAMEAT, _NEW_STAT, _SET_GET_RLIMIT, _SYS_CLONE3, _MEMFD_SECRET); both Linux 6.1 uapi headers.
# tests/test_seccomp.py checks both columns against the headers where they are installed.
_TABLE = """
read 0 63, write 1 64, open 2 -, close 3 57, stat 4 -, fstat 5 80, lstat 6 -, poll 7 -, lseek 8 62, mmap 9 222,
mprotect 10 226, munmap 11 215, brk 12 214, rt_sigaction 13 134, rt_sigprocmask 14 135, rt_sigreturn 15 139,
ioctl 16 29, pread64 17 67, pwrite64 18 68, readv 19 65, writev 20 66, access 21 -, pipe 22 -, select 23 -,
sched_yield 24 124, mremap 25 216, msync 26 227, mincore 27 232, madvise 28 233, shmget 29 194, shmat 30 196,
shmctl 31 195, dup 32 23, dup2 33 -, pause 34 -, nanosleep 35 101, getitimer 36 102, alarm 37 -, setitimer 38 103,
getpid 39 172, sendfile 40 71, socket 41 198, connect 42 203, accept 43 202, sendto 44 206, recvfrom 45 207,
sendmsg 46 211, recvmsg 47 212, shutdown 48 210, bind 49 200, listen 50 201, getsockname 51 204,
getpeername 52 205, socketpair 53 199, setsockopt 54 208, getsockopt 55 209, clone 56 220, fork 57 -, vfork 58 -,
execve 59 221, exit 60 93, wait4 61 260, kill 62 129, uname 63 160, semget 64 190, semop 65 193, semctl 66 191,
shmdt 67 197, msgget 68 186, msgsnd 69 189, msgrcv 70 188, msgctl 71 187, fcntl 72 25, flock 73 32, fsync 74 82,
fdatasync 75 83, truncate 76 45, ftruncate 77 46, getdents 78 -, getcwd 79 17, chdir 80 49, fchdir 81 50,
rename 82 -, mkdir 83 -, rmdir 84 -, creat 85 -, link 86 -, unlink 87 -, symlink 88 -, readlink 89 -, chmod 90 -,
fchmod 91 52, chown 92 -, fchown 93 55, lchown 94 -, umask 95 166, gettimeofday 96 169, getrlimit 97 163,
getrusage 98 165, sysinfo 99 179, times 100 153, ptrace 101 117, getuid 102 174, syslog 103 116, getgid 104 176,
setuid 105 146, setgid 106 144, geteuid 107 175, getegid 108 177, setpgid 109 154, getppid 110 173, getpgrp 111 -,
setsid 112 157, setreuid 113 145, setregid 114 143, getgroups 115 158, setgroups 116 159, setresuid 117 147,
getresuid 118 148, setresgid 119 149, getresgid 120 150, getpgid 121 155, setfsuid 122 151, setfsgid 123 152,
getsid 124 156, capget 125 90, capset 126 91, rt_sigpending 127 136, rt_sigtimedwait 128 137,
rt_sigqueueinfo 129 138, rt_sigsuspend 130 133, sigaltstack 131 132, utime 132 -, mknod 133 -, uselib 134 -,
personality 135 92, ustat 136 -, statfs 137 43, fstatfs 138 44, sysfs 139 -, getpriority 140 141,
setpriority 141 140, sched_setparam 142 118, sched_getparam 143 121, sched_setscheduler 144 119,
sched_getscheduler 145 120, sched_get_priority_max 146 125, sched_get_priority_min 147 126,
sched_rr_get_interval 148 127, mlock 149 228, munlock 150 229, mlockall 151 230, munlockall 152 231,
vhangup 153 58, modify_ldt 154 -, pivot_root 155 41, _sysctl 156 -, prctl 157 167, arch_prctl 158 -,
adjtimex 159 171, setrlimit 160 164, chroot 161 51, sync 162 81, acct 163 89, settimeofday 164 170, mount 165 40,
umount2 166 39, swapon 167 224, swapoff 168 225, reboot 169 142, sethostname 170 161, setdomainname 171 162,
iopl 172 -, ioperm 173 -, create_module 174 -, init_module 175 105, delete_module 176 106, get_kernel_syms 177 -,
query_module 178 -, quotactl 179 60, nfsservctl 180 42, getpmsg 181 -, putpmsg 182 -, afs_syscall 183 -,
tuxcall 184 -, security 185 -, gettid 186 178, readahead 187 213, setxattr 188 5, lsetxattr 189 6,
fsetxattr 190 7, getxattr 191 8, lgetxattr 192 9, fgetxattr 193 10, listxattr 194 11, llistxattr 195 12,
flistxattr 196 13, removexattr 197 14, lremovexattr 198 15, fremovexattr 199 16, tkill 200 130, time 201 -,
futex 202 98, sched_setaffinity 203 122, sched_getaffinity 204 123, set_thread_area 205 -, io_setup 206 0,
io_destroy 207 1, io_getevents 208 4, io_submit 209 2, io_cancel 210 3, get_thread_area 211 -,
lookup_dcookie 212 18, epoll_create 213 -, epoll_ctl_old 214 -, epoll_wait_old 215 -, remap_file_pages 216 234,
getdents64 217 61, set_tid_address 218 96, restart_syscall 219 128, semtimedop 220 192, fadvise64 221 223,
timer_create 222 107, timer_settime 223 110, timer_gettime 224 108, timer_getoverrun 225 109,
timer_delete 226 111, clock_settime 227 112, clock_gettime 228 113, clock_getres 229 114, clock_nanosleep 230 115,
exit_group 231 94, epoll_wait 232 -, epoll_ctl 233 21, tgkill 234 131, utimes 235 -, vserver 236 -, mbind 237 235,
set_mempolicy 238 237, get_mempolicy 239 236, mq_open 240 180, mq_unlink 241 181, mq_timedsend 242 182,
mq_timedreceive 243 183, mq_notify 244 184, mq_getsetattr 245 185, kexec_load 246 104, waitid 247 95,
add_key 248 217, request_key 249 218, keyctl 250 219, ioprio_set 251 30, ioprio_get 252 31, inotify_init 253 -,
inotify_add_watch 254 27, inotify_rm_watch 255 28, migrate_pages 256 238, openat 257 56, mkdirat 258 34,
mknodat 259 33, fchownat 260 54, futimesat 261 -, newfstatat 262 79, unlinkat 263 35, renameat 264 38,
linkat 265 37, symlinkat 266 36, readlinkat 267 78, fchmodat 268 53, faccessat 269 48, pselect6 270 72,
ppoll 271 73, unshare 272 97, set_robust_list 273 99, get_robust_list 274 100, splice 275 76, tee 276 77,
sync_file_range 277 84, vmsplice 278 75, move_pages 279 239, utimensat 280 88, epoll_pwait 281 22, signalfd 282 -,
timerfd_create 283 85, eventfd 284 -, fallocate 285 47, timerfd_settime 286 86, timerfd_gettime 287 87,
accept4 288 242, signalfd4 289 74, eventfd2 290 19, epoll_create1 291 20, dup3 292 24, pipe2 293 59,
inotify_init1 294 26, preadv 295 69, pwritev 296 70, rt_tgsigqueueinfo 297 240, perf_event_open 298 241,
recvmmsg 299 243, fanotify_init 300 262, fanotify_mark 301 263, prlimit64 302 261, name_to_handle_at 303 264,
open_by_handle_at 304 265, clock_adjtime 305 266, syncfs 306 267, sendmmsg 307 269, setns 308 268, getcpu 309 168,
process_vm_readv 310 270, process_vm_writev 311 271, kcmp 312 272, finit_module 313 273, sched_setattr 314 274,
sched_getattr 315 275, renameat2 316 276, seccomp 317 277, getrandom 318 278, memfd_create 319 279,
kexec_file_load 320 294, bpf 321 280, execveat 322 281, userfaultfd 323 282, membarrier 324 283, mlock2 325 284,
copy_file_range 326 285, preadv2 327 286, pwritev2 328 287, pkey_mprotect 329 288, pkey_alloc 330 289,
pkey_free 331 290, statx 332 291, io_pgetevents 333 292, rseq 334 293, pidfd_send_signal 424 424,
io_uring_setup 425 425, io_uring_enter 426 426, io_uring_register 427 427, open_tree 428 428, move_mount 429 429,
fsopen 430 430, fsconfig 431 431, fsmount 432 432, fspick 433 433, pidfd_open 434 434, clone3 435 435,
close_range 436 436, openat2 437 437, pidfd_getfd 438 438, faccessat2 439 439, process_madvise 440 440,
epoll_pwait2 441 441, mount_setattr 442 442, quotactl_fd 443 443, landlock_create_ruleset 444 444,
landlock_add_rule 445 445, landlock_restrict_self 446 446, memfd_secret 447 447, process_mrelease 448 448,
futex_waitv 449 449, set_mempolicy_home_node 450 450
"""
_NUMBERS = {name: tuple(None if v == "-" else int(v) for v in numbers)
            for name, *numbers in (item.split() for item in _TABLE.replace("\n", " ").split(",") if item.strip())}
_ARCHES = {
    # machine: (index in _NUMBERS, AUDIT_ARCH_*)
    "x86_64": (0, 0xC000003E),
    "aarch64": (1, 0xC00000B7),
}

# What student code may call whatever the arguments, by subject; a name an architecture lacks is skipped there.
ALLOWED = {
    "files": ("read", "write", "open", "openat", "openat2", "creat", "close", "close_range", "lseek",
              "pread64", "pwrite64", "readv", "writev", "preadv", "pwritev", "preadv2", "pwritev2",
              "stat", "fstat", "lstat", "newfstatat", "statx", "statfs", "fstatfs", "access", "faccessat",
              "faccessat2", "readlink", "readlinkat", "getdents", "getdents64", "getcwd", "chdir", "fchdir",
              "mkdir", "mkdirat", "rmdir", "unlink", "unlinkat", "rename", "renameat", "renameat2", "link",
              "linkat", "symlink", "symlinkat", "chmod", "fchmod", "fchmodat", "chown", "fchown", "lchown",
              "fchownat", "umask", "utime", "utimes", "futimesat", "utimensat", "mknod", "mknodat",
              "truncate", "ftruncate", "fallocate", "fsync", "fdatasync", "flock", "fcntl", "dup", "dup2",
              "dup3", "pipe", "pipe2", "sendfile", "copy_file_range", "splice", "tee", "fadvise64",
              "readahead", "memfd_create", "getxattr", "lgetxattr", "fgetxattr", "listxattr", "llistxattr",
              "flistxattr", "setxattr", "lsetxattr", "fsetxattr", "removexattr", "lremovexattr",
              "fremovexattr"),
    "waiting on descriptors": ("poll", "ppoll", "select", "pselect6", "epoll_create", "epoll_create1",
                               "epoll_ctl", "epoll_wait", "epoll_pwait", "epoll_pwait2", "eventfd", "eventfd2",
                               "signalfd", "signalfd4", "timerfd_create", "timerfd_settime", "timerfd_gettime"),
    "sockets it holds": ("socketpair", "sendto", "recvfrom", "sendmsg", "recvmsg", "sendmmsg", "recvmmsg",
                         "shutdown", "getsockname", "getpeername", "getsockopt", "setsockopt"),
    "memory": ("mmap", "munmap", "mprotect", "mremap", "brk", "madvise", "msync", "mincore", "membarrier",
               "get_mempolicy"),
    "threads and processes": ("fork", "vfork", "execve", "execveat", "exit", "exit_group", "wait4", "waitid",
                              "set_tid_address", "set_robust_list", "futex", "futex_waitv", "rseq",
                              "arch_prctl", "prctl", "sched_yield", "sched_get_priority_max",
                              "sched_get_priority_min", "getcpu", "getpid", "getppid", "gettid", "getuid",
                              "geteuid", "getgid", "getegid", "getresuid", "getresgid", "getgroups", "getpgrp",
                              "getpgid", "setpgid", "getsid", "setsid", "uname", "sysinfo", "getrusage",
                              "times", "getrlimit", "setrlimit", "seccomp"),
    "signals": ("rt_sigaction", "rt_sigprocmask", "rt_sigreturn", "rt_sigpending", "rt_sigsuspend",
                "rt_sigtimedwait", "sigaltstack", "pause", "restart_syscall"),
    "time": ("nanosleep", "clock_nanosleep", "clock_gettime", "clock_getres", "gettimeofday", "time", "alarm",
             "getitimer", "setitimer", "timer_create", "timer_settime", "timer_gettime", "timer_getoverrun",
             "timer_delete"),
    "randomness": ("getrandom",),
}
_SIGNALS = ("kill", "tkill", "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo")
_OWN_PROCESS = ("sched_setaffinity", "sched_getaffinity", "sched_setscheduler", "sched_getscheduler",
                "sched_setparam", "sched_getparam", "sched_setattr", "sched_getattr", "sched_rr_get_interval",
                "prlimit64")
# The calls allowed only with some arguments (the filter reads them), and what happens otherwise (EPERM unless
# said). A pid is compared on its low 32 bits, which is all the kernel reads of a pid_t.
CONDITIONS = {
    **{name: "only when its first argument (a pid or a thread group) is the restricted process's own pid"
       for name in _SIGNALS},
    **{name: "only when its first argument (a pid) is 0 (the caller) or the restricted process's own pid"
       for name in _OWN_PROCESS},
    "getpriority": "only for PRIO_PROCESS (0) and a pid of 0 or the restricted process's own",
    "setpriority": "only for PRIO_PROCESS (0) and a pid of 0 or the restricted process's own",
    "ioprio_get": "only for IOPRIO_WHO_PROCESS (1) and a pid of 0 or the restricted process's own",
    "ioprio_set": "only for IOPRIO_WHO_PROCESS (1) and a pid of 0 or the restricted process's own",
    "kcmp": "only when both pids are the restricted process's own",
    "pidfd_open": "only for the restricted process's own pid",
    "clone": "only without a namespace flag (CLONE_NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET)",
    "clone3": "never: ENOSYS (glibc falls back to clone)",
    "personality": "only a query (0xffffffff) or PER_LINUX (0)",
    "ioctl": "except TIOCSTI and TIOCLINUX (typing into a terminal)",
    "x32 calls": "never (x86_64 only: any number with bit 30, 0x40000000, set)",
    "other ABIs": "never: the process is killed (SECCOMP_RET_KILL_PROCESS)",
}
# Families refused whatever the arguments, by subject (a README table, and what the tests try): not an exhaustive
# list, since every call neither in ALLOWED nor in CONDITIONS is refused (refused_names).
REFUSED = {
    "IPC objects": ("shmget", "shmat", "shmctl", "shmdt", "msgget", "msgsnd", "msgrcv", "msgctl", "semget",
                    "semop", "semtimedop", "semctl", "mq_open", "mq_unlink", "mq_timedsend", "mq_timedreceive",
                    "mq_notify", "mq_getsetattr"),
    "sockets": ("socket", "connect", "bind", "listen", "accept", "accept4",
                "io_uring_setup", "io_uring_enter", "io_uring_register"),
    "processes": ("ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd", "pidfd_send_signal",
                  "process_madvise", "process_mrelease", "move_pages", "migrate_pages", "get_robust_list"),
    "namespaces and mounts": ("unshare", "setns", "mount", "umount2", "pivot_root", "chroot", "open_tree",
                              "move_mount", "fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr"),
    "ids and capabilities": ("setuid", "setgid", "setreuid", "setregid", "setresuid", "setresgid", "setfsuid",
                             "setfsgid", "setgroups", "capset"),
    "kernel": ("keyctl", "add_key", "request_key", "bpf", "userfaultfd", "perf_event_open",
               "kexec_load", "kexec_file_load", "init_module", "finit_module",
               "delete_module", "open_by_handle_at", "name_to_handle_at", "swapon",
               "swapoff", "reboot", "acct", "quotactl", "quotactl_fd", "syslog",
               "lookup_dcookie", "ioperm", "iopl", "modify_ldt", "settimeofday", "clock_settime",
               "clock_adjtime", "adjtimex", "sethostname", "setdomainname", "fanotify_init", "vhangup"),
}
_CONDITIONAL = {name for name in CONDITIONS if name in _NUMBERS}

# Classic BPF and seccomp constants.
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


def _machine():
    """The running architecture's name in _ARCHES, or None (also for 32-bit Pythons)."""
    if not sys.platform.startswith("linux") or struct.calcsize("P") != 8:
        return None
    machine = os.uname().machine
    return machine if machine in _ARCHES else None


def _column(arch):
    arch = arch or _machine()
    if arch not in _ARCHES:
        raise ValueError(f"no syscall table for architecture {arch!r}")
    return _ARCHES[arch][0]


def allowed_names(arch=None):
    """The calls allowed whatever their arguments (ALLOWED) that exist on ``arch`` (default: this machine's)."""
    column = _column(arch)
    return [name for names in ALLOWED.values() for name in names if _NUMBERS[name][column] is not None]


def refused_names(arch=None):
    """Every call of ``arch``'s table that the filter refuses whatever its arguments, in number order (the calls of
    CONDITIONS, allowed in some cases only, are in neither list)."""
    column = _column(arch)
    allowed = set(allowed_names(arch)) | _CONDITIONAL
    return sorted((name for name, numbers in _NUMBERS.items()
                   if numbers[column] is not None and name not in allowed), key=lambda n: _NUMBERS[n][column])


def syscall_name(number, arch=None):
    """The name of system call ``number`` on ``arch`` (default: this machine's), or "#<number>" for one not in the
    table (added to Linux after 6.1, or an x32 number)."""
    column = _column(arch)
    for name, numbers in _NUMBERS.items():
        if numbers[column] == number:
            return name
    return f"#{number}"


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
