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
from pathlib import Path


def write_atomic(path, data: str | bytes) -> None:
    """Write `data` to `path` through a new file beside it, renamed over it: a reader sees the old file or the
    new one, never half of one (an interrupted grade-all leaves a whole gradebook)."""
    path = Path(path)
    data = data.encode("utf-8") if isinstance(data, str) else data  # text as it is: no newline translation
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")  # O_EXCL: a new file, never a link
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


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
