"""How student code is confined: the levels (autograder.LEVELS, strongest first), each probed once per process
in a throwaway student process (probe), the level a grading runs at (choose_isolation) or why none works and
what to do about it (GraderUnavailable, remedy), the steps refused on purpose by the kit's tests (refusals), and
the student process's handshake, which confirms the level it reached."""
from __future__ import annotations

import json
import os
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from autograder import LEVELS, NAMESPACES_REMEDY
from autograder.sandbox import channel, uids
from autograder.sandbox.errors import GraderUnavailable
from autograder.sandbox.limits import WRITABLE, Limits, forbidden_paths, student_env

REMEDY = {
    "namespaces": NAMESPACES_REMEDY,
    "landlock": "use Linux 5.13 or later with Landlock enabled (lsm=...,landlock on the kernel command line)",
    "seccomp": ("use a Linux kernel with seccomp filters (CONFIG_SECCOMP_FILTER, Linux 3.17 or later, as every "
                "distribution's); in a container, allow the seccomp() and prctl() calls (Docker's default profile "
                "does)"),
    "readable": ("student code never runs as root, and the uid it runs as must read Python and torch: run the "
                 "grader with a Python that other users can read (e.g. a venv made from /usr/bin/python3), or "
                 "as a normal user"),
}


def remedy(level, why):
    """What to do about `level` failing for the reason `why`."""
    if "at seccomp" in why:
        return REMEDY["seccomp"]
    return REMEDY["readable" if "reading Python" in why or level == "none" else level]

CHILD = Path(__file__).with_name("student_process.py")


def refusals(probe):
    """Confinement steps to refuse on purpose, from MHA_REFUSE (the kit's tests): "mount,landlock" refuses
    them everywhere, "mount@student" only in real student processes (not in the probes), so that the engine's
    handling of a student process that cannot start can be seen."""
    out = []
    for item in filter(None, (x.strip() for x in os.environ.get("MHA_REFUSE", "").split(","))):
        step, _, where = item.partition("@")
        if not where or (where == "student" and not probe):
            out.append(step)
    return out


def read_handshake(fd, deadline):
    """The student process's first frame (JSON, at most 64 KiB); EOFError or TimeoutError when it ends or hangs
    first, ValueError (channel.TooLong among them) when it is not an object of at most 64 KiB."""
    answer = json.loads(channel.read_frame(fd, deadline, 1 << 16, "a handshake"))
    if not isinstance(answer, dict):
        raise ValueError("a handshake that is not an object")
    return answer


_PROBED = {}
_PROBE_LOCK = threading.Lock()


def probe(level, python=sys.executable, cached=True):
    """Why a student process cannot be confined at `level` here, or None when it can.

    Starts one throwaway process that confines itself at that level, applies the limits, checks it can
    still read Python and torch, and exits before importing torch (about 0.1 s); cached per process, unless
    `cached` is False (a new probe, not recorded).
    """
    if not cached:
        return _probe(level, python)
    key = (python, level, tuple(refusals(True)))
    with _PROBE_LOCK:
        if key not in _PROBED:
            _PROBED[key] = _probe(level, python)
        return _PROBED[key]


def _probe(level, python):
    with tempfile.TemporaryDirectory(prefix="mha-probe-") as tmp:
        tmp = Path(tmp)
        os.chmod(tmp, 0o711)
        for name in ("work", "home", "root"):
            (tmp / name).mkdir(mode=0o700)
        config = {"probe": True, "isolation": level, "log": str(tmp / "log"), "cwd": str(tmp / "work"),
                  "home": str(tmp / "home"), "root": str(tmp / "root"), "limits": Limits().to_dict(),
                  "writable": WRITABLE, "forbidden": forbidden_paths(), "refuse": refusals(True)}
        lease = None
        if os.geteuid() == 0:  # the probe drops root as a student process does: to a uid of its own
            try:
                lease = uids.allocate()
            except OSError as exc:
                return f"no uid for the student process: {exc}"
            config["uid"] = lease.uid
        try:
            proc = subprocess.Popen([python, "-I", str(CHILD), json.dumps(config)], stdin=subprocess.DEVNULL,
                                    stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=tmp / "work",
                                    env=student_env(tmp / "home"), start_new_session=True)
        except OSError as exc:
            if lease is not None:
                lease.release()
            return f"cannot start {python}: {exc}"
        try:
            answer = read_handshake(proc.stdout.fileno(), time.monotonic() + 60)
        except (EOFError, TimeoutError, ValueError, struct.error) as exc:
            log = (tmp / "log").read_text(errors="replace").strip().splitlines()[-1:] if (tmp / "log").exists() else []
            answer = {"ready": False, "error": f"the probe process ended without a word ({type(exc).__name__}"
                                               f"{': ' + log[0][:300] if log else ''})"}
        finally:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except OSError:
                pass
            proc.wait()
            proc.stdout.close()
            if lease is not None:
                lease.release()
    if answer.get("ready") and answer.get("isolation") == level:
        return None
    return str(answer.get("error") or "the probe did not confirm the level")


def choose_isolation(requested="auto", require=None, python=sys.executable, class_run=False):
    """The level student code will run at: `requested`, or with "auto" the strongest that works here.

    Raises GraderUnavailable, naming the cause and the remedy, when the requested level does not work or
    the level is below `require`; and, for a `class_run` (grade-all, its shards, nbgrader-sync) as a normal
    user, when "auto" comes down to "none": student code would run as the grader's own uid, and could read and
    write all it can (the other students' work, the gradebook). An explicit "none" is never refused.
    """
    if requested not in ("auto", *LEVELS):
        raise ValueError(f"unknown isolation level {requested!r}")
    tried = {}
    for level in LEVELS if requested == "auto" else (requested,):
        tried[level] = probe(level, python)
        if tried[level] is None:
            break
    else:
        raise GraderUnavailable(f"cannot confine student code at {' or '.join(tried)} isolation here "
                                f"{_why_and_remedy(tried)}")
    if require is not None and LEVELS.index(level) > LEVELS.index(require):
        raise GraderUnavailable(f"--require-isolation {require}, but the strongest level that works here is "
                                f"{level} {_why_and_remedy(tried)}")
    if class_run and requested == "auto" and level == "none" and os.geteuid() != 0:
        raise GraderUnavailable(
            f"the strongest level that works here is none, and as a normal user (uid {os.getuid()}) student code "
            "would then run as your own uid: it could read and write whatever you can, the other students' "
            f"submissions and the gradebook included {_why_and_remedy(tried)} To grade at that level "
            "all the same, knowingly, pass --isolation none.")
    return level


def _why_and_remedy(tried):
    """"(level: why; ...). Remedy: ..." for the levels of `tried` (level -> why not, or None) that failed."""
    refused = {lvl: why for lvl, why in tried.items() if why}
    causes = "; ".join(f"{lvl}: {why}" for lvl, why in refused.items())
    remedies = " ".join(sorted({f"{remedy(lvl, why).capitalize()}." for lvl, why in refused.items()}))
    return f"({causes}). Remedy: {remedies}"

