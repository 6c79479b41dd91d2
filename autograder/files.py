"""Files the kit writes: all at once or not at all, and the graders' signed results. Stdlib only.

The hidden graders (autograder/grade/plugin.py, in the grader process) write their results signed with a key that
only the engine and they know; the engine (autograder/grade/engine.py) reads them back and uses nothing of a file
whose signature does not match: a student process that writes a results file of its own gains nothing.
"""
from __future__ import annotations

import hashlib
import hmac
import json
import os
import stat
import tempfile
import threading
from pathlib import Path

SHARED = 0o666  # write_atomic(..., mode=SHARED): a file as `open` makes one, under the user's umask (0644 with 022)


def write_atomic(path, data: str | bytes, mode: int | None = None) -> None:
    """Write `data` to `path` through a new file beside it, renamed over it: a reader sees the old file or the
    new one, never half of one (an interrupted grade-all leaves a whole gradebook).

    The file is the writer's alone (0600) unless `mode` is given: then `mode` less the process's umask, as
    `open` would make it (SHARED: what the user's umask allows, for gradebooks and reports that TAs read)."""
    path = Path(path)
    data = data.encode("utf-8") if isinstance(data, str) else data  # text as it is: no newline translation
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")  # O_EXCL: a new file, never a link
    try:
        if mode is not None:
            os.fchmod(fd, mode & ~current_umask())
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


_UMASK_LOCK = threading.Lock()


def current_umask() -> int:
    """The process's umask, read without changing it where Linux says it (/proc/self/status, Linux 4.7+); else
    set and restored under a lock (os.umask has no read-only form: two threads doing so at once could leave 0)."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    with _UMASK_LOCK:
        mask = os.umask(0o077)
        os.umask(mask)
    return mask


def remove_interrupted_writes(path) -> None:
    """Remove what write_atomic(path, ...) leaves behind when its process is killed between writing and renaming:
    the files `.<name>.*` beside `path` (a grade-all killed halfway, then run again, rewrites every file it had
    not finished; what the killed run began must not stay beside them)."""
    path = Path(path)
    prefix = f".{path.name}."
    try:
        names = os.listdir(path.parent)
    except OSError:
        return
    for name in names:
        if name.startswith(prefix):
            try:
                os.unlink(path.parent / name)  # a link itself, never what it points to
            except OSError:
                pass


def _signature(key: bytes, payload: bytes) -> bytes:
    return hmac.new(key, payload, hashlib.sha256).hexdigest().encode()


def write_signed(path, key: bytes, data: dict) -> None:
    """The signed results format: the HMAC-SHA256 of the JSON payload (hex), a newline, the payload."""
    payload = json.dumps(data).encode()
    write_atomic(path, _signature(key, payload) + b"\n" + payload)


def read_signed(path, key: bytes):
    """What write_signed wrote with `key`: None when there is no such file, False when it is not a regular file
    signed with `key` (a link or a FIFO planted to hang or feed the reader is never followed or read)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        return None
    except OSError:
        return False
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return False
        signature, _, payload = fh.read().partition(b"\n")
    if not hmac.compare_digest(signature, _signature(key, payload)):
        return False
    return json.loads(payload)
