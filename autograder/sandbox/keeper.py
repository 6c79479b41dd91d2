"""The keeper: the process the student process is forked from, which stays outside and ends everything the student
code started (standard library only).

A child subreaper, it inherits every orphan of the student code (daemons that double-fork and setsid included)
and, when the student process ends or the trusted side sends SIGTERM, kills them all (`end_descendants`).

Loaded by path by the student process, which gives it its own instance of libc.py (`libc` below).
"""
import os
import resource
import signal
import select
import socket
import time

#: this process's libc.py and seccomp.py, given by the student process as it loads this file (student_process._sibling)
libc = None
seccomp = None
#: what the keeper writes to the student's output for each call the filter refused that is outside its lists
REFUSED_LINE = ("[sandbox] the system call {name} was refused (EPERM): graded code may not make it, or not with these "
                "arguments\n")


def keep(protocol, refusals=None):
    """Fork. The child returns and goes on to run student code; this process stays behind as its keeper and
    never returns: a child subreaper, it inherits every orphan of the student code (daemons that double-fork
    and setsid included) and ends them all when the student process ends or SIGTERM arrives. `protocol`: the
    student process's private copies of the protocol pipes, which the keeper closes. `refusals`: (the keeper's
    end, the student process's end) of a socketpair over which the student process sends its seccomp filter's
    listener (seccomp.restrict(notify=True)); the keeper answers the calls outside the filter's lists with EPERM
    and writes each one's name, once, to the student's output (`_supervise_until_ended`)."""
    libc.step("fork")
    try:
        libc.prctl(libc.PR_SET_CHILD_SUBREAPER, 1)
    except OSError:
        pass  # in a new PID namespace the kernel ends everything with its PID 1 anyway
    keeper = os.getpid()
    pid = os.fork()
    if pid == 0:
        libc.prctl(libc.PR_SET_PDEATHSIG, signal.SIGKILL)  # the keeper gone (killed): the student process goes too
        if os.getppid() not in (keeper, 0):  # it went before the line above (0: PID 1 of a new PID namespace)
            os._exit(1)
        if refusals is not None:
            refusals[0].close()
        return
    for fd in (0, 1, *protocol):  # the protocol belongs to the student process
        os.close(fd)
    if refusals is not None:
        refusals[1].close()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:  # student code of the same uid (the landlock and none levels) may not read its /proc files
        libc.prctl(libc.PR_SET_DUMPABLE, 0)
    except OSError:
        pass

    def stop(*_):
        end_descendants(pid)
        os._exit(128 + signal.SIGTERM)

    signal.signal(signal.SIGTERM, stop)
    if not _supervise_until_ended(pid, None if refusals is None else refusals[0]):
        try:  # ended, not reaped: its pid stays taken until every process it left is gone (end_descendants)
            os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
        except ChildProcessError:
            pass
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    status = end_descendants(pid)
    code = 0 if status is None else os.waitstatus_to_exitcode(status)
    if code < 0:  # mirror a death by signal, for the trusted side's message
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if -code not in (signal.SIGKILL, signal.SIGSTOP):
            signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    os._exit(code & 0xFF)


def _supervise_until_ended(pid, end):
    """Until the student process `pid` has ended (not reaped: its pidfd becomes readable), answer the calls its
    seccomp filter passes on, once the student process has sent the filter's listener over `end`: each is refused
    with EPERM and its name written once to the student's output (fd 2, the log; seccomp.answer), so that a call a
    real submission needed shows in its feedback. Measured here, outside the filter: nothing the student process
    says decides what is written (its own output may say anything, and only costs itself). One thread (in a new
    PID namespace the keeper may start none), a select() on the pidfd, `end` and the listener. Returns False,
    having closed `end` (the calls then fail with ENOSYS instead of waiting), where the kernel has no pidfd or
    there is nothing to supervise."""
    try:
        pidfd = os.pidfd_open(pid) if end is not None else None
    except (OSError, AttributeError):  # before Linux 5.3
        pidfd = None
    if pidfd is None:
        if end is not None:
            end.close()
        return False
    seen, listener = set(), None

    def report(name):
        try:
            os.write(2, REFUSED_LINE.format(name=name).encode())
        except OSError:
            pass

    while True:
        watched = [pidfd] + [fd for fd in (end, listener) if fd is not None]
        ready = select.select(watched, [], [])[0]
        if pidfd in ready:
            break
        if end is not None and end in ready:
            try:
                _, fds, _, _ = socket.recv_fds(end, 1, 1)
            except OSError:
                fds = []
            end.close()
            end = None
            listener = fds[0] if fds else None
        if listener is not None and listener in ready and not seccomp.answer(listener, seen, report):
            os.close(listener)
            listener = None
    for fd in (pidfd, listener):
        if fd is not None:
            os.close(fd)
    if end is not None:
        end.close()
    return True


def children(me):
    kids = []
    for pid in libc.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/stat", "rb") as fh:
                    if int(fh.read().rsplit(b")", 1)[1].split()[1]) == me:
                        kids.append(int(pid))
            except (OSError, ValueError, IndexError):
                continue
    return kids


def end_descendants(first):
    """Kill `first` and every process that ends up a child of this subreaper, until none is left; return `first`'s
    wait status (None when it is not ours to reap).

    `first` is reaped last: until every other process of the student's is gone its pid stays taken (a zombie), so
    none of them can see the student process end and act then (a daemon that waits for the run to be over to
    write where the grader's uid may write, at the none level)."""
    me = os.getpid()
    try:
        os.kill(first, signal.SIGKILL)
        os.waitid(os.P_PID, first, os.WEXITED | os.WNOWAIT)  # ended: its children are ours now, not yet reaped
    except OSError:
        pass
    for _ in range(500):  # each round ends one generation; orphans of the killed come to us
        others = [kid for kid in children(me) if kid != first]
        if not others:
            break
        for kid in others:
            try:
                os.kill(kid, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.002)
        for kid in others:
            try:
                os.waitpid(kid, os.WNOHANG)
            except ChildProcessError:
                pass
    try:
        return os.waitpid(first, 0)[1]
    except ChildProcessError:
        return None
