"""Submission intake: the only way the trusted side reads a submission's files.

The grader runs as root or as the instructor, before any confinement, and
whatever it reads on a submission's behalf can end up in the student's
feedback. A folder holding `zz.py -> /etc/shadow` (or `/proc/self/environ`,
or the kit's own `solutions/mha.py`) must not hand the student the shadow
file, the grader's environment or the reference; a FIFO named `attention.py`
must not hang grading; a 10 GiB sparse `positional.py` or a zip bomb must not
fill the disk. So every byte of a submission is read here, as hostile input:

* a file is taken only if it is a regular file inside the submission: opened
  with O_NOFOLLOW and O_NONBLOCK (a FIFO cannot block the open), checked with
  fstat (S_ISREG), never through a symbolic link, relative to the folder's own
  descriptor (a folder on the way cannot be swapped for a link either);
* a folder is walked without following links, its work bounded whatever
  it holds, and a submission over the caps refused with a message that says
  which cap and what to hand in (autograder.submission.folder);
* sizes are bounded: a file over its MAX_FILE limit is refused by its size,
  before a byte is read, and reading stops at the limit anyway;
* a zip is checked before it is unpacked (at most MAX_ENTRIES entries and
  MAX_UNZIPPED bytes, as its directory declares them); while it is unpacked
  the bytes that really come out are counted; entries that would land outside
  the folder, links and special files are never written
  (autograder.submission.zips).

Each file left out is named, with the reason, in a sentence a student can act
on ("zz.py is a symbolic link: not graded"): the report carries it, and a
module left out costs exactly its own checks; past a few notes, the rest
are counted in one (autograder.submission.folder.capped_notes). Every name
is the file's path inside the submission, never a path of the grading
machine. Only `.py` files and notebooks are taken: nothing else of a
submission is ever graded.

A file stands for a module by its name, as students name their uploads
(the name rule, autograder.submission.notebooks.modules_named, the same for
notebooks and .py files): the module's name (`masks.py`) or its notebook's
name (`03_masks.ipynb`), with any words before the number (`bea_03_masks`,
`Copy of 03_masks`), in any case, with `-` or spaces for `_`, and with the
copy suffixes browsers and Jupyter add (`03_masks (1)`, `masks(2).py`,
`03_masks-Copy1`); never with words after the name (`03_masks_old`,
`04_mha_notes`), nor a bare name after other words (`bea_masks`,
`test_masks.py`). A name that holds two modules' names
(`03_masks_and_04_mha.ipynb`) is refused, and named.

One file of each module is graded: a submission that holds a module twice,
as `attention.py` and as `01_attention.ipynb`, is graded on the file that
holds the student's work, and the file left out is named
(autograder.submission.forms.one_form).

This file holds what the others share: the caps, the names, and the reading
of one regular file (`read_regular`). autograder.submission.take drives them
in order (the folder, or the zip and then its folder), before any student
process starts.

Stdlib only.
"""
from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from autograder import MODULES, PARTS
from autograder.submission.notebooks import handed_out, modules_named as stem_modules

#: The largest file taken, by suffix: a module, a notebook (its embedded plots included).
MAX_FILE = {".py": 8 << 20, ".ipynb": 32 << 20}
#: The most a zip may unpack to, and the most entries it may hold (a million tiny files is refused unread).
MAX_UNZIPPED = 50 << 20
MAX_ENTRIES = 1000


def expected(modules=None) -> str:
    """What a submission is, as a message says it: its modules and their notebooks, of the parts handed out
    (`modules`, default autograder.submission.notebooks.handed_out: autograder.MODULES with no course file)."""
    modules = handed_out() if modules is None else modules
    return (f"your modules ({', '.join(f'{m}.py' for m in modules)}, or the notebooks "
            f"{PARTS.index(modules[0]) + 1:02d}_{modules[0]}.ipynb ... "
            f"{PARTS.index(modules[-1]) + 1:02d}_{modules[-1]}.ipynb)")


#: What a submission is, as a message says it, with no course file (`expected`).
EXPECTED = expected(MODULES)
#: What a link's note adds: a link is never followed, wherever it points (into the submission or not).
LINK_HINT = " (submit the file itself, not a link to it)"
#: The same for a link whose name is no module's: it may stand for a folder (never entered) as well as a file.
OTHER_LINK_HINT = " (links are never followed: submit the file or folder itself, not a link to it)"
READ_FLAGS = (os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
               | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0))


class SubmissionError(Exception):
    """The grader cannot run at all: a bad path or an unreadable zip."""


class Refused(Exception):
    """One file of a submission not taken; the message names it and says why."""


def shown(name) -> str:
    """A submission's file name as a message shows it: long names shortened (the renderers escape the rest)."""
    name = str(name)
    return name if len(name) <= 120 else f"{name[:80]}...{name[-30:]}"


def size_text(size: int) -> str:
    """10737418240 -> "10 GiB"."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale:
            return f"{size / scale:.3g} {unit}"
    return f"{size} bytes"


def modules_named(name) -> tuple[str, ...]:
    """The modules a .py file's or a notebook's name stands for, by the name rule
    (autograder.submission.notebooks.modules_named, on the name without its suffix): ("masks",) for masks.py,
    masks (1).py, 03_masks.ipynb, bea_03_masks.ipynb; () for any other file; two or more modules for a name
    that holds several modules' names (03_masks_and_04_mha.ipynb), which is refused."""
    path = Path(str(name))
    return stem_modules(path.stem) if path.suffix.lower() in MAX_FILE else ()


def module_of_file(name) -> str | None:
    """The contract module a file name stands for (`modules_named`): "mha.py", "mha (1).py", "04_mha.ipynb",
    "bea_04_mha.ipynb" -> "mha"; None for a name that stands for no module, or for several."""
    found = modules_named(name)
    return found[0] if len(found) == 1 else None


def hidden(name) -> bool:
    """A name the intake passes over: hidden files and folders, and the `__MACOSX` folder of a Mac's zip."""
    return name.startswith(".") or name == "__MACOSX"


def may_be_module(name) -> bool:
    """A cheap first look at a file name (no Path made, for the thousands of names a search may meet): could
    `name` be a module's .py file or notebook (`modules_named`)? It must end with .py or .ipynb and hold a
    module's name (of the parts handed out, autograder.submission.notebooks.handed_out)."""
    low = name.lower()
    return low.endswith((".py", ".ipynb")) and any(module in low for module in handed_out())


def kind_of(mode) -> str:
    """What a file that is not a regular file is, in words."""
    for test, words in ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISDIR, "a folder"),
                        (stat.S_ISFIFO, "a named pipe (FIFO), not a regular file"),
                        (stat.S_ISSOCK, "a socket, not a regular file"),
                        (stat.S_ISCHR, "a device, not a regular file"), (stat.S_ISBLK, "a device, not a regular file")):
        if test(mode):
            return words
    return "not a regular file"


def _check(st, name, limit):
    if not stat.S_ISREG(st.st_mode):
        raise Refused(f"{name} is {kind_of(st.st_mode)}: not graded" + (LINK_HINT if stat.S_ISLNK(st.st_mode) else ""))
    if st.st_size > limit:
        raise Refused(f"{name} is {size_text(st.st_size)}, over the {size_text(limit)} limit: not graded")


def read_regular(path, limit: int, name=None, *, dir_fd=None, follow=False) -> bytes:
    """The bytes of the regular file `path` (relative to `dir_fd` if given), at most `limit` of them.

    Refused (naming the file as `name`) when it is a symbolic link, a FIFO, a
    device, a socket or a folder, when it is larger than `limit` (told by its
    size before anything is read: a 10 GiB sparse file costs nothing), or when
    it cannot be read. The link is never followed, the FIFO never waited on.
    `follow`: a link is followed, for the one path an instructor names (a
    single notebook given to `grade`), never for a file inside a submission.
    """
    name = shown(name if name is not None else os.path.basename(os.fspath(path)))
    try:
        before = os.stat(path, dir_fd=dir_fd, follow_symlinks=follow)
    except OSError as exc:
        raise Refused(f"{name} cannot be read ({exc.strerror or exc}): not graded") from None
    _check(before, name, limit)  # no open at all for a link, a FIFO or a device
    try:
        fd = os.open(path, READ_FLAGS & ~(getattr(os, "O_NOFOLLOW", 0) if follow else 0), dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # swapped for a link since the stat
            raise Refused(f"{name} is a symbolic link: not graded") from None
        raise Refused(f"{name} cannot be read ({exc.strerror or exc}): not graded") from None
    try:
        st = os.fstat(fd)
        _check(st, name, limit)
        if (st.st_dev, st.st_ino) != (before.st_dev, before.st_ino):
            raise Refused(f"{name} changed while it was read: not graded")
        parts, total = [], 0
        while True:
            chunk = os.read(fd, min(1 << 20, limit + 1 - total))
            if not chunk:
                break
            parts.append(chunk)
            total += len(chunk)
            if total > limit:  # grew while read, or a file whose size lies (procfs-like)
                raise Refused(f"{name} is over the {size_text(limit)} limit: not graded")
        return b"".join(parts)
    except OSError as exc:
        raise Refused(f"{name} cannot be read ({exc.strerror or exc}): not graded") from None
    finally:
        os.close(fd)


def is_regular(path) -> bool:
    """True when `path` itself (never a link's target) is a regular file."""
    try:
        return stat.S_ISREG(os.stat(path, follow_symlinks=False).st_mode)
    except (OSError, ValueError):
        return False


def write_new(path, data: bytes):
    """Write `data` to `path`, a new file (never through a link, never over a file already there)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
                 | getattr(os, "O_CLOEXEC", 0), 0o644)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
