"""The pipes between a student process and the trusted side (standard library only): frames of an 8-byte
big-endian length and a payload, said here once for both ends.

The student's end: private copies of the protocol pipes (`redirect`), `send` and `receive`; the student
process loads this file by path before it confines itself, and before any student code is imported. The
trusted end (client.py, isolation.py): `frame` and `read_frame`, with a deadline and a bound on the length.
The payloads are the handshake's JSON and wire.py's requests and answers.
"""
import os
import select
import struct
import sys
import time

# I/O functions are captured before any student code is imported.
_write = os.write
_read = os.read
#: The private copies of the protocol pipes (`redirect`): requests come in on IN, answers go out on OUT.
IN = OUT = None


def redirect(log):
    """Keep private copies of the protocol pipes; fd 0 becomes /dev/null, fds 1 and 2 the log."""
    global IN, OUT
    IN, OUT = os.dup(0), os.dup(1)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    out = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(out, 1)
    os.dup2(out, 2)
    os.close(devnull)
    os.close(out)
    os.set_inheritable(IN, False)
    os.set_inheritable(OUT, False)
    for stream in (sys.stdout, sys.stderr):
        stream.reconfigure(line_buffering=True)  # what was printed is in the log even if the process dies


def send(payload):
    """One frame out."""
    view = memoryview(frame(payload))
    while view:
        view = view[_write(OUT, view):]


def receive():
    """One frame's payload in; the trusted side gone (the pipe closed), this process ends."""
    head = b""
    while len(head) < 8:
        chunk = _read(IN, 8 - len(head))
        if not chunk:
            sys.exit(0)
        head += chunk
    (size,) = struct.unpack(">Q", head)
    parts, left = [], size
    while left:
        chunk = _read(IN, min(left, 1 << 20))
        if not chunk:
            sys.exit(0)
        parts.append(chunk)
        left -= len(chunk)
    return b"".join(parts)


class TooLong(ValueError):
    """A frame whose length is over what the reader allows."""


# -- the trusted side's end of the same frames -------------------------------------------------------------------
def frame(payload: bytes) -> bytes:
    """`payload` as one frame (`send` writes the same)."""
    return struct.pack(">Q", len(payload)) + payload


def read_exactly(fd, n, deadline) -> bytes:
    """`n` bytes from `fd`; TimeoutError past `deadline` (a time.monotonic() figure, or an object whose `left()`
    gives the seconds left, as batchlock.Deadline's, which may move), EOFError when the writer is gone first."""
    parts, left = [], n
    while left:
        wait = deadline.left() if hasattr(deadline, "left") else deadline - time.monotonic()
        if wait <= 0:
            raise TimeoutError
        if not select.select([fd], [], [], wait)[0]:
            continue  # the deadline again: it may have moved
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            raise EOFError
        parts.append(chunk)
        left -= len(chunk)
    return b"".join(parts)


def read_frame(fd, deadline, limit: int, what: str = "a frame") -> bytes:
    """One frame's bytes from `fd` (read_exactly's deadline and errors); TooLong, before any of them is read,
    when its length says more than `limit` bytes (the student side writes the length: `what` names it)."""
    (size,) = struct.unpack(">Q", read_exactly(fd, 8, deadline))
    if size > limit:
        raise TooLong(f"{what} of {size / (1 << 20):.1f} MiB")
    return read_exactly(fd, size, deadline)
