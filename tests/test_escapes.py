"""The escape corpus: student code tries to reach the grader, its neighbours and the machine, at every level.

Issue 32: at the landlock level as a normal user, student code found the grader's fork server in
/proc/self/net/unix, connected to it, had a file of its own run unconfined, and left a daemon that rewrote the
gradebook after the run. Here one submission of a small class, graded by a real `grade-all` (warm servers, two
jobs), tries at every level this machine offers, as root and as uid 65534:

- to connect to every unix socket it can name: listed in /proc/self/net/unix and /proc/net/unix, guessed
  (/tmp/*/socket), a named socket and an abstract one that the test listens on;
- to signal every pid up to 65536 (signal 0: the permission check of any signal), to ptrace and
  process_vm_readv its parents and every process of the grader it can find, and to read
  /proc/<pid>/{environ,mem,maps,fd,cwd,root} of the grader's (its parents up to grade-all, the servers);
- to open TCP and UDP to listeners of the test's on 127.0.0.1;
- to read the scheduling of the grader's processes (getpriority, sched_getaffinity: any pid's, the host's listed)
  and of every process of its uid (PRIO_USER), to change that of an unrelated process of the user who runs
  grade-all (nice, its process group's nice, SCHED_IDLE, affinity, I/O class), and to make System V IPC objects
  (shared memory, message queue, semaphores), which outlive a grading;
- to leave a daemon that writes into the output folder once the run is over.

Nothing in the student process decides the outcome: each success is printed (`ESCAPED ...`), so it would
reach the submission's report, and the test looks from outside: its listeners heard nothing, no report or file
of the output folder holds a trace, the gradebook does not change after the run, the neighbour keeps 100, and
the attempts did run (their last line is in the attacker's report), the unrelated process keeps its scheduling,
and the refused shmget is named in the attacker's output (by its keeper, outside the filter).
"""
from __future__ import annotations

import csv
import json
import os
import secrets
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import pytest

from tests.conftest import SOLUTIONS, as_uid
from tests.test_seccomp import scheduling, seccomp
from tests.test_environments import ROOT_USER, SPARE_UID, place, run_cli  # noqa: F401  (place: a fixture)

pytestmark = [pytest.mark.grading, pytest.mark.long]

ATTACK = r'''

# -- the escape attempts (tests/test_escapes.py) -------------------------------------------------------------
import ctypes as _ct, glob as _glob, os as _os, socket as _socket, time as _time

_TRIED = []


def _escaped(what):
    print("ESCAPED " + what, flush=True)


def _try(what, action):
    try:
        action()
    except OSError:
        return
    except Exception as exc:  # noqa: BLE001
        print("ODD " + what + " " + type(exc).__name__, flush=True)
        return
    _escaped(what)


def _stat_parent(pid):
    try:
        with open("/proc/%d/stat" % pid, "rb") as fh:
            return int(fh.read().rsplit(b")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return 0


def _cmdline(pid):
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as fh:
            return fh.read()
    except OSError:
        return b""


def _targets():
    """(its parents and every process of the grader's it can find, the grader's alone). Its parents above the
    grader (the shell or test run that started grade-all) are the user's: at the none level as that user,
    nothing can keep student code from their /proc files (docs/security/isolation.md), so only the grader's are read."""
    me, found, grader = _os.getpid(), [], []
    pid, above = _os.getppid(), False
    while pid > 1 and pid not in found:
        found.append(pid)
        if not above:
            grader.append(pid)
        above = above or b"grader_cli" in _cmdline(pid)
        pid = _stat_parent(pid)
    try:
        pids = [int(p) for p in _os.listdir("/proc") if p.isdigit()]
    except OSError:
        pids = []
    for pid in pids:
        line = _cmdline(pid)
        if pid != me and pid not in found and (b"grader_cli" in line or b"forkserver" in line or b"pytest" in line):
            found.append(pid)
            if b"pytest" not in line:
                grader.append(pid)
    return found, grader


def _unix_names():
    names = {NAMED, "\0" + ABSTRACT}
    for table in ("/proc/self/net/unix", "/proc/net/unix"):
        try:
            with open(table) as fh:
                rows = fh.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            parts = row.split()
            if len(parts) > 7:
                names.add("\0" + parts[7][1:] if parts[7].startswith("@") else parts[7])
                if parts[7] == NAMED:
                    print("SAW-HOST-SOCKETS " + table, flush=True)
    return names | set(_glob.glob("/tmp/*/socket")) | set(_glob.glob("/tmp/mha-*/*"))


def _connect(name, kind):
    s = _socket.socket(_socket.AF_UNIX, kind)
    try:
        s.settimeout(2)
        s.connect(name)
    finally:
        s.close()


def _udp():
    s = _socket.socket(_socket.AF_INET, _socket.SOCK_DGRAM)
    try:
        s.sendto(b"escaped", ("127.0.0.1", UDP))
    finally:
        s.close()


def _read(path):
    """Read what the file holds; nothing read is no escape. A process that is exiting (a grading fork that just
    ended, not yet reaped) has no memory left: the kernel then opens its maps for anyone, and it reads empty."""
    with open(path, "rb") as fh:
        if not fh.read(64):
            raise OSError("empty")


def _vm_read(libc, pid):
    class IoVec(_ct.Structure):
        _fields_ = [("base", _ct.c_void_p), ("len", _ct.c_size_t)]
    buf = _ct.create_string_buffer(64)
    local, remote = IoVec(_ct.cast(buf, _ct.c_void_p), 64), IoVec(0x400000, 64)
    libc.process_vm_readv.restype = _ct.c_ssize_t
    got = libc.process_vm_readv(pid, _ct.byref(local), 1, _ct.byref(remote), 1, 0)
    err = _ct.get_errno()
    if got < 0 and err in (1, 3, 13, 38):  # EPERM, ESRCH, EACCES, ENOSYS: refused
        raise OSError(err, "refused")


def _ptrace(libc, pid):
    libc.ptrace.restype = _ct.c_long
    if libc.ptrace(0x4206, pid, 0, 0) != 0:  # PTRACE_SEIZE: does not stop the target
        raise OSError(_ct.get_errno(), "refused")
    libc.ptrace(17, pid, 0, 0)  # PTRACE_DETACH


def _scheduling(libc, everyone):
    """Other processes' scheduling: the grader's and its parents' read (getpriority and sched_getaffinity answer for
    any pid, and list the host's), every process of its uid read (PRIO_USER), and CANARY's (an unrelated process
    of the user who runs grade-all, in a process group of its own) changed: nice, group's nice, SCHED_IDLE,
    affinity, I/O class. Then System V IPC objects, which would outlive the grading."""
    libc.syscall.restype = _ct.c_long

    def call(*args):
        if libc.syscall(*[_ct.c_long(a) for a in args]) < 0:
            raise OSError(_ct.get_errno(), "refused")

    for pid in everyone:
        _try("getpriority of pid %d" % pid, lambda: _os.getpriority(_os.PRIO_PROCESS, pid))
        _try("sched_getaffinity of pid %d" % pid, lambda: _os.sched_getaffinity(pid))
    _try("getpriority of every process of uid %d" % _os.getuid(), lambda: _os.getpriority(_os.PRIO_USER, _os.getuid()))
    _try("setpriority of pid %d" % CANARY, lambda: _os.setpriority(_os.PRIO_PROCESS, CANARY, 19))
    _try("setpriority of process group %d" % CANARY, lambda: _os.setpriority(_os.PRIO_PGRP, CANARY, 19))
    _try("SCHED_IDLE for pid %d" % CANARY,
         lambda: _os.sched_setscheduler(CANARY, _os.SCHED_IDLE, _os.sched_param(0)))
    _try("sched_setaffinity of pid %d" % CANARY, lambda: _os.sched_setaffinity(CANARY, {min(_os.sched_getaffinity(0))}))
    _try("ioprio_set of pid %d" % CANARY, lambda: call(NR["ioprio_set"], 1, CANARY, 3 << 13))  # WHO_PROCESS, IDLE
    _try("a System V shared memory segment", lambda: call(NR["shmget"], 0, 1 << 20, 0o1600))  # IPC_PRIVATE
    _try("a System V message queue", lambda: call(NR["msgget"], 0, 0o1600))
    _try("a System V semaphore set", lambda: call(NR["semget"], 0, 1, 0o1600))


def _daemon():
    """A daemon that waits for its student process to end (the run is over for it), then writes into OUT."""
    student = _os.getpid()
    if _os.fork():
        return
    try:
        _os.setsid()
        if _os.fork():
            _os._exit(0)
        book = _os.path.join(OUT, "gradebook.csv")
        end = _time.time() + 120
        while _time.time() < end:
            try:
                _os.kill(student, 0)  # the one pid the filter lets it signal
                _time.sleep(0.01)
                continue
            except PermissionError:
                pass  # it cannot tell: write all the time
            except ProcessLookupError:
                pass  # gone: write now
            for target in (_os.path.join(OUT, "ESCAPED-by-a-daemon"), book):
                try:
                    with open(target, "a") as fh:
                        fh.write("neighbour,0,ESCAPED by a daemon\n")
                except OSError:
                    pass
            _time.sleep(0.2)
    finally:
        _os._exit(0)


def _escape():
    libc = _ct.CDLL(None, use_errno=True)
    me = _os.getpid()
    for name in sorted(_unix_names()):
        for kind in (_socket.SOCK_STREAM, _socket.SOCK_SEQPACKET, _socket.SOCK_DGRAM):
            _try("connect to unix socket %r" % name, lambda: _connect(name, kind))
    _try("tcp", lambda: _socket.create_connection(("127.0.0.1", TCP), timeout=2).close())
    _try("udp", _udp)
    for pid in range(1, 1 << 16):
        if pid != me:
            _try("signal to pid %d" % pid, lambda: _os.kill(pid, 0))
    everyone, grader = _targets()
    for pid in everyone:
        _try("ptrace of pid %d" % pid, lambda: _ptrace(libc, pid))
        _try("process_vm_readv of pid %d" % pid, lambda: _vm_read(libc, pid))
    for pid in grader:
        _try("read /proc/%d/mem" % pid, lambda: open("/proc/%d/mem" % pid, "rb").close())
        for entry in ("environ", "maps"):
            _try("read /proc/%d/%s" % (pid, entry), lambda: _read("/proc/%d/%s" % (pid, entry)))
        for entry in ("fd", "cwd", "root"):
            _try("list /proc/%d/%s" % (pid, entry), lambda: _os.listdir("/proc/%d/%s" % (pid, entry)))
    _scheduling(libc, everyone)
    _daemon()
    print("ESCAPE ATTEMPTS DONE", flush=True)


_causal_mask = causal_mask


def causal_mask(*args, **kwargs):
    if not _TRIED:
        _TRIED.append(1)
        try:
            _escape()
        except BaseException as exc:  # noqa: BLE001
            print("ESCAPE ATTEMPTS BROKE " + type(exc).__name__ + " " + str(exc)[:200], flush=True)
    return _causal_mask(*args, **kwargs)
'''


class Listeners:
    """A named unix socket (in a folder any uid may enter), an abstract one, TCP and UDP on 127.0.0.1: each
    records whatever reaches it."""

    def __init__(self):
        self.heard = []
        self.folder = Path(tempfile.mkdtemp(prefix="mha-escape-"))
        self.folder.chmod(0o777)
        self.named = str(self.folder / "socket")
        self.abstract = f"mha-escape-{secrets.token_hex(6)}"
        self.sockets = []
        for family, kind, address in ((socket.AF_UNIX, socket.SOCK_STREAM, self.named),
                                      (socket.AF_UNIX, socket.SOCK_STREAM, "\0" + self.abstract),
                                      (socket.AF_INET, socket.SOCK_STREAM, ("127.0.0.1", 0)),
                                      (socket.AF_INET, socket.SOCK_DGRAM, ("127.0.0.1", 0))):
            s = socket.socket(family, kind)
            s.bind(address)
            if kind == socket.SOCK_STREAM:
                s.listen(16)
            s.settimeout(0.2)
            self.sockets.append(s)
        os.chmod(self.named, 0o777)
        self.tcp, self.udp = self.sockets[2].getsockname()[1], self.sockets[3].getsockname()[1]
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._watch, args=(s,), daemon=True) for s in self.sockets]
        for t in self._threads:
            t.start()

    def _watch(self, s):
        while not self._stop.is_set():
            try:
                if s.type == socket.SOCK_DGRAM:
                    data, peer = s.recvfrom(64)
                    self.heard.append(f"udp from {peer}: {data!r}")
                else:
                    conn, _ = s.accept()
                    self.heard.append(f"a connection to {s.getsockname()!r}")
                    conn.close()
            except (socket.timeout, OSError):
                continue

    def close(self):
        self._stop.set()
        for t in self._threads:
            t.join()
        for s in self.sockets:
            s.close()
        shutil.rmtree(self.folder, ignore_errors=True)


def _traces(out: Path) -> list[str]:
    """Every file of the output folder that names an escape (or is one)."""
    found = []
    for folder, _, files in os.walk(out):
        for name in files:
            path = Path(folder) / name
            if "ESCAPED" in name or "ESCAPED" in path.read_text(errors="replace"):
                found.append(str(path.relative_to(out)))
    return sorted(found)


LEVEL_USERS = [(level, user) for user in ("root", "user") for level in ("namespaces", "landlock", "none")]


@pytest.mark.parametrize("level, user", LEVEL_USERS, ids=[f"{u}-{lvl}" for lvl, u in LEVEL_USERS])
def test_every_escape_is_refused_and_the_neighbour_keeps_100(place, level, user, tmp_path):  # noqa: F811
    if user == "root" and not ROOT_USER:
        pytest.skip("the tests run as a normal user: no root environment to try")
    listeners = Listeners()
    top = Path(tempfile.mkdtemp(prefix="mha-escapes-", dir=place.top))
    top.chmod(0o755)
    out = top / "out"
    out.mkdir(mode=0o755)  # as a grader makes it: no other uid may write there
    klass = top / "class"
    shutil.copytree(SOLUTIONS, klass / "neighbour")
    shutil.copytree(SOLUTIONS, klass / "attacker")
    # an unrelated process of the user who runs grade-all: its scheduling must not change
    canary = subprocess.Popen([*(as_uid([]) if user == "user" and ROOT_USER else []), "sleep", "600"],
                              start_new_session=True)
    column = seccomp._ARCHES[seccomp._machine()][0]
    numbers = {name: seccomp._NUMBERS[name][column] for name in ("ioprio_set", "shmget", "msgget", "semget")}
    constants = (f"\nOUT = {str(out)!r}\nNAMED = {listeners.named!r}\nABSTRACT = {listeners.abstract!r}\n"
                 f"TCP = {listeners.tcp}\nUDP = {listeners.udp}\nCANARY = {canary.pid}\nNR = {numbers!r}\n")
    masks = klass / "attacker" / "masks.py"
    masks.write_text(masks.read_text() + constants + ATTACK)
    for folder, _, files in os.walk(top):
        os.chmod(folder, 0o755)
        for name in files:
            os.chmod(os.path.join(folder, name), 0o644)
    if user == "user" and ROOT_USER:
        for folder, dirs, files in os.walk(top):
            for name in [folder, *(os.path.join(folder, n) for n in dirs + files)]:
                os.chown(name, SPARE_UID, SPARE_UID)
        out.chmod(0o700)
    try:
        time.sleep(0.2)  # setpriv has become sleep: the canary's own scheduling is the one to keep
        canary_before = scheduling(canary.pid)
        proc = run_cli(place, user, ["grade-all", str(klass), "-o", str(out), "--jobs", "2", "--isolation", level])
        where = f"at {level} as {'root' if user == 'root' and ROOT_USER else f'uid {os.getuid() or SPARE_UID}'}"
        assert proc.returncode == 0, f"{where}: grade-all exited {proc.returncode}:\n{proc.stderr[-3000:]}"
        book = (out / "gradebook.csv").read_text()
        time.sleep(3)  # a daemon's window: the run is over
        rows = {r["id"]: r for r in csv.DictReader((out / "gradebook.csv").open(encoding="utf-8"))}
        assert rows["neighbour"]["status"] == "graded" and float(rows["neighbour"]["total"]) == 100, \
            f"{where}: expected the neighbour to keep 100, got {rows['neighbour']}"
        assert rows["attacker"]["isolation"] == level, f"{where}: graded at {rows['attacker']['isolation']}"
        printed = json.loads((out / "attacker" / "results.json").read_text()).get("output", "")
        printed += json.dumps(json.loads((out / "attacker" / "results.json").read_text()))
        assert "ESCAPE ATTEMPTS DONE" in printed, f"{where}: the attempts did not all run: {printed[-2000:]}"
        assert not listeners.heard, f"{where}: expected no connection to the test's listeners, got {listeners.heard}"
        traces = _traces(out)
        said = sorted({line.strip()[:160] for line in printed.replace("\\n", "\n").splitlines() if "ESCAPED" in line})
        assert not traces, (f"{where}: expected no trace of an escape in the output folder, found it in {traces}: "
                            f"{said[:10]}")
        assert (out / "gradebook.csv").read_text() == book, f"{where}: the gradebook changed after the run"
        assert scheduling(canary.pid) == canary_before, (
            f"{where}: an unrelated process of the user's changed scheduling: {canary_before} -> "
            f"{scheduling(canary.pid)}")
        assert "[sandbox] the system call shmget was refused" in printed, (
            f"{where}: expected the refused shmget named in the attacker's output: {printed[-2000:]}")
        # the none level has no view of its own: it reads the host's /proc/net (docs/security/isolation.md)
        if level != "none":
            assert "SAW-HOST-SOCKETS" not in printed, f"{where}: student code listed the host's unix sockets"
    finally:
        listeners.close()
        canary.kill()
        canary.wait()
