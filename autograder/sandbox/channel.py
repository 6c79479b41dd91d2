"""The student process's channel to the trusted side (standard library only): private copies of the protocol
pipes, and frames of an 8-byte big-endian length and a payload over them.

The payloads are the handshake's JSON and wire.py's requests and answers (student_process.py). The student
process loads this file by path before it confines itself, and before any student code is imported.
"""
import os
import struct
import sys

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
    view = memoryview(struct.pack(">Q", len(payload)) + payload)
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
