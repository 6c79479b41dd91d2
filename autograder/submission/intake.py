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
* a folder is walked with os.scandir without following links: a linked folder
  is never entered (the link is named in the report like any other); the
  work is bounded whatever the submission holds: a folder is listed only up
  to MAX_FOLDER entries (one that holds more is refused if its files would be
  graded, skipped by the search otherwise), the search for the modules' folder
  looks at MAX_SCAN entries in all, and a submission over these caps is
  refused with a message that says which cap and what to hand in (never a
  traceback, never minutes of listing before the grading's timeout starts);
* a folder named like a module or a notebook (`01_attention.ipynb/`) is a
  folder: searched like any other, never taken for the file it is named after;
* sizes are bounded: a file over its MAX_FILE limit is refused by its size,
  before a byte is read, and reading stops at the limit anyway;
* a zip is checked before it is unpacked (at most MAX_ENTRIES entries and
  MAX_UNZIPPED bytes, as its directory declares them); while it is unpacked
  the bytes that really come out are counted; entries that would land outside
  the folder, links and special files are never written.

Each file left out is named, with the reason, in a sentence a student can act
on ("zz.py is a symbolic link: not graded"): the report carries it, and a
module left out costs exactly its own checks. At most MAX_NOTES files are
named one by one (each module's own file always is); the rest are counted in
one note (`capped_notes`). Every name is the file's path inside the
submission, never a path of the grading machine. Only `.py` files and notebooks
are taken: nothing else of a submission is ever graded.

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

One file of each module is graded. A submission that holds a module twice,
as `attention.py` and as `01_attention.ipynb`, is graded on the file that
holds the student's work (`one_form`): a file whose code is still the
released template's (its `code_digest` is the one the release step stored in
autograder/submission/released.py) holds none; when a .py file and a
notebook both hold work, the `.py` file is graded. The file left out is
named in the notes, with the reason. When two files of one form both hold
work (`03_masks.ipynb` and `bea_03_masks.ipynb`, `masks.py` and
`masks (1).py`), which one to grade is not clear: that module is not graded,
one note names both files, and the other modules are graded as usual.

Stdlib only (a notebook's code is read with autograder.submission.notebooks, which
imports nbformat only when a notebook is read: when a module has two files or
more, or when a notebook is converted).
"""
from __future__ import annotations

import ast
import collections
import errno
import hashlib
import io
import itertools
import os
import re
import stat
import tokenize
import zipfile
from pathlib import Path

from autograder import MODULES
from autograder.submission.notebooks import modules_named as stem_modules, notebook_name, notebook_source

#: The largest file taken, by suffix: a module, a notebook (its embedded plots included).
MAX_FILE = {".py": 8 << 20, ".ipynb": 32 << 20}
#: The most a zip may unpack to, and the most entries it may hold (a million tiny files is refused unread).
MAX_UNZIPPED = 50 << 20
MAX_ENTRIES = 1000
#: A zip's central directory over this is refused before it is parsed (1000 entries take ~200 KiB).
MAX_ZIP_DIRECTORY = 4 << 20
#: The most entries a folder may hold to be listed: one that holds more is refused when its files would be graded
#: (a submission's top folder, the modules' folder) and skipped by the search otherwise; it costs MAX_FOLDER + 1
#: entries read, never a listing of all of them.
MAX_FOLDER = 10_000
#: How much the search for the modules' folder looks at in all (entries listed, and folders opened on the way),
#: and how deep: the search stops there, and a submission whose modules it has not found by then is refused.
MAX_SCAN = 50_000
MAX_DEPTH = 8
#: How many files left out a report names one by one (each module's own file always is); the rest in one note.
MAX_NOTES = 20
#: What a submission is, as a message says it.
EXPECTED = (f"your modules ({', '.join(f'{m}.py' for m in MODULES)}, or the notebooks 01_{MODULES[0]}.ipynb ... "
            f"{len(MODULES):02d}_{MODULES[-1]}.ipynb)")
#: What a link's note adds: a link is never followed, wherever it points (into the submission or not).
LINK_HINT = " (submit the file itself, not a link to it)"
#: The same for a link whose name is no module's: it may stand for a folder (never entered) as well as a file.
OTHER_LINK_HINT = " (links are never followed: submit the file or folder itself, not a link to it)"
_READ_FLAGS = (os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
               | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0))
_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


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
        fd = os.open(path, _READ_FLAGS & ~(getattr(os, "O_NOFOLLOW", 0) if follow else 0), dir_fd=dir_fd)
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


# -- folders ----------------------------------------------------------------------------------
def _open_dir(path, dir_fd=None) -> int:
    """A descriptor of the folder `path` (relative to `dir_fd`), never through a link (ELOOP, ENOTDIR)."""
    return os.open(path, _DIR_FLAGS, dir_fd=dir_fd)


def _entries(fd, limit=None):
    """The entries of the open folder `fd`, sorted by name; [] when it cannot be listed; None when it holds
    more than `limit` (default MAX_FOLDER) entries, told after reading `limit` + 1 of them: a folder of a
    million entries costs no more than that."""
    limit = MAX_FOLDER if limit is None else limit
    try:
        with os.scandir(fd) as it:  # scandir works on its own duplicate of fd
            entries = list(itertools.islice(it, limit + 1))
    except OSError:
        return []
    return None if len(entries) > limit else sorted(entries, key=lambda e: e.name)


def _hidden(name) -> bool:
    return name.startswith(".") or name == "__MACOSX"


def _may_be_module(name) -> bool:
    """A cheap first look at a file name (no Path made, for the thousands of names a search may meet): could
    `name` be a module's .py file or notebook (`modules_named`)? It must end with .py or .ipynb and hold a
    module's name."""
    low = name.lower()
    return low.endswith((".py", ".ipynb")) and any(module in low for module in MODULES)


def _holds_modules(entries) -> bool:
    """True when a folder's entries name a module (a .py file or notebook whose name stands for a module by the
    name rule, `modules_named`, whatever its kind but a folder, so that a module left out is named rather than
    looked for elsewhere; a folder named `01_attention.ipynb` is a folder, searched like any other)."""
    return any(_may_be_module(e.name) and modules_named(e.name) and not e.is_dir(follow_symlinks=False)
               for e in entries)


def _too_many(where) -> SubmissionError:
    return SubmissionError(f"{where} holds more than {MAX_FOLDER:,} files and folders, more than a submission "
                           f"ever needs: hand in {EXPECTED}, with their helper files only")


def open_path(root_fd, parts) -> int:
    """A descriptor of the folder `parts` below `root_fd`, each step without following a link (the caller
    closes it; `root_fd` itself when `parts` is empty)."""
    fd = root_fd
    try:
        for part in parts:
            sub = _open_dir(part, dir_fd=fd)
            if fd != root_fd:
                os.close(fd)
            fd = sub
    except BaseException:
        if fd != root_fd:
            os.close(fd)
        raise
    return fd


def find_module_dir(root_fd) -> tuple[str, ...]:
    """The path (folder names) from `root_fd` to the folder that holds the modules.

    The root when it names a module; else its only subfolder that does (a
    zip of one folder, a `submission/` inside); else the root. The search
    goes breadth first (the folders nearest the top first); hidden folders
    and `__MACOSX` are skipped, links are never entered, and a folder named
    like a module (`01_attention.ipynb/`) is a folder like any other.

    Its work is bounded, never quadratic: each folder is opened once (through
    at most MAX_DEPTH parents) and listed once, up to MAX_FOLDER entries; the
    entries listed and the folders opened count against MAX_SCAN in all. A
    folder over MAX_FOLDER is skipped (the top folder: SubmissionError); when
    the search ends without a folder that holds modules, having skipped one
    or stopped at MAX_SCAN, the submission is refused (SubmissionError,
    saying why), rather than graded as empty.
    """
    queue, found, budget, skipped, stopped = collections.deque([()]), [], MAX_SCAN, [], False
    while queue:
        parts = queue.popleft()
        budget -= len(parts)  # the folders opened on the way
        if budget < 0:
            stopped = True
            break
        try:
            fd = open_path(root_fd, parts)
        except OSError:
            continue  # a link put in a folder's place: never entered
        try:
            entries = _entries(fd, min(MAX_FOLDER, budget))
        finally:
            if fd != root_fd:
                os.close(fd)
        if entries is None:
            if not parts:
                raise _too_many("the submission's top folder")
            if budget < MAX_FOLDER:  # cut by the search's own budget, not by the folder's size
                stopped = True
                break
            budget -= MAX_FOLDER + 1
            skipped.append("/".join(parts) + "/")
            continue
        budget -= len(entries)
        if _holds_modules(entries):
            if not parts:
                return ()
            found.append(parts)
        if len(parts) < MAX_DEPTH:
            queue.extend(parts + (e.name,) for e in entries
                         if not _hidden(e.name) and e.is_dir(follow_symlinks=False))
    if found:
        return found[0] if len(found) == 1 else ()
    if skipped:
        raise SubmissionError(f"no folder holding your modules was found, and {shown(skipped[0])}"
                              f"{f' (and {len(skipped) - 1} more)' if len(skipped) > 1 else ''} holds more than "
                              f"{MAX_FOLDER:,} files and folders, too many to look through: hand in {EXPECTED}, "
                              f"with their helper files only")
    if stopped:
        raise SubmissionError(f"no folder holding your modules was found among the first {MAX_SCAN:,} files and "
                              f"folders of the submission, where the search stops: hand in {EXPECTED}, with their "
                              f"helper files only")
    return ()


def take_folder(path, max_unzipped=MAX_UNZIPPED) -> tuple[dict[str, bytes], dict[str, str]]:
    """The .py files and notebooks of the folder submission `path`, from the folder that holds its modules
    (`find_module_dir`): as `take_files`, with names relative to `path`, one form of each module
    (`one_form`)."""
    root_fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        parts = find_module_dir(root_fd)
        fd = open_path(root_fd, parts)
        try:
            prefix = "".join(f"{p}/" for p in parts)
            files, notes = take_files(fd, prefix=prefix, max_unzipped=max_unzipped)
        finally:
            if fd != root_fd:
                os.close(fd)
    finally:
        os.close(root_fd)
    files, left_out = one_form(files, prefix)
    return files, {**notes, **left_out}


def take_files(folder_fd, prefix="", max_unzipped=MAX_UNZIPPED) -> tuple[dict[str, bytes], dict[str, str]]:
    """The .py files and notebooks of the open folder `folder_fd`: ({name: bytes}, {shown name: why not taken}).

    `prefix` is the folder's path in the submission, for the messages.
    Everything is read with `read_regular`; at most MAX_ENTRIES files and
    `max_unzipped` bytes in all are taken, the modules' own files first (a
    crowd of helpers never pushes a module out); the files past MAX_ENTRIES
    are counted in one note. A folder (`01_attention.ipynb/` too) is not a
    file and is passed over; a link of any name is never followed and is
    named. SubmissionError when the folder holds more than MAX_FOLDER
    entries.
    """
    entries = _entries(folder_fd)
    if entries is None:
        raise _too_many(f"the folder {shown(prefix)}" if prefix else "the submission's top folder")
    wanted, notes = [], {}
    for entry in entries:
        if _hidden(entry.name):
            continue
        if Path(entry.name).suffix.lower() in MAX_FILE:
            if not entry.is_dir(follow_symlinks=False):
                wanted.append(entry)
        elif entry.is_symlink():  # a link to a folder (`lib -> ../alice`) or to any other file: never followed
            name = shown(prefix + entry.name)
            notes[name] = f"{name} is a symbolic link: not graded" + OTHER_LINK_HINT
    wanted.sort(key=lambda e: (not (_may_be_module(e.name) and modules_named(e.name)), e.name))  # modules first
    files, total, over = {}, 0, []
    for entry in wanted:
        name = shown(prefix + entry.name)
        if len(files) >= MAX_ENTRIES:
            over.append(name)
            continue
        suffix = Path(entry.name).suffix.lower()
        try:
            data = read_regular(entry.name, min(MAX_FILE[suffix], max_unzipped - total), name, dir_fd=folder_fd)
        except Refused as exc:
            notes[name] = str(exc)
            continue
        files[entry.name] = data
        total += len(data)
    if over:  # first: the cap is what the student must hear about
        notes = {over[0]: (f"{over[0]}{f' and {len(over) - 1:,} more files' if len(over) > 1 else ''}: not graded: "
                           f"a submission may hold at most {MAX_ENTRIES:,} .py files and notebooks, and "
                           f"{prefix or 'its folder'} holds {len(wanted):,}"), **notes}
    return files, notes


def capped_notes(notes: dict) -> dict:
    """`notes` ({shown name: why not graded}) as a report shows them: at most MAX_NOTES named one by one, in
    their order (the order the files were looked at), each module's first note always among them (its checks
    give the reason); the rest are counted in one more note, so that thousands of refused files make a short
    report."""
    if len(notes) <= MAX_NOTES:
        return notes
    first = {}
    for name in notes:
        base = name.rsplit("/", 1)[-1]
        module = module_of_file(base) if _may_be_module(base) else None
        if module and module not in first:
            first[module] = name
    kept = set(first.values())
    for name in notes:
        if len(kept) >= MAX_NOTES:
            break
        kept.add(name)
    rest = [name for name in notes if name not in kept]
    out = {name: why for name, why in notes.items() if name in kept}
    out[f"({len(rest)} more)"] = (f"{len(rest):,} more files not graded, from {rest[0]} to {rest[-1]} (links, "
                                  f"special files, files over their limits or past the {MAX_ENTRIES:,} files a "
                                  f"submission may hold)")
    return out


# -- one form of each module --------------------------------------------------------------------
def code_digest(source) -> str | None:
    """A digest of a module's code that only the code changes: docstrings, comments, blank lines and
    trailing spaces do not count (nor CRLF line ends). None when `source` is not valid Python.

    Made of the source text itself (never of a syntax-tree dump, which differs between Python
    versions), so that a digest stored at release time holds on any Python that grades.
    """
    if isinstance(source, bytes):
        source = source.decode("utf-8", "replace")
    source = source.replace("\r\n", "\n").replace("\r", "\n")
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return None
    lines = source.split("\n")
    for node in ast.walk(tree):  # docstrings: the first statement of a module, class or function, if a str
        body = getattr(node, "body", None)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and body:
            first = body[0]
            if (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
                    and isinstance(first.value.value, str)):
                for row in range(first.lineno - 1, first.end_lineno):
                    lines[row] = ""
    try:
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            if token.type == tokenize.COMMENT:  # always the end of its line
                row, col = token.start
                lines[row - 1] = lines[row - 1][:col]
    except (tokenize.TokenError, SyntaxError):
        pass  # parsed, but not tokenized: compare with the comments in
    code = "\n".join(line.rstrip() for line in lines if line.strip())
    return hashlib.sha256(code.encode("utf-8")).hexdigest()


def _template_digests() -> dict:
    """{module: {"py": digest, "ipynb": digest}} of the released template (autograder/submission/released.py)."""
    try:
        from autograder.submission.released import TEMPLATE_DIGESTS
    except ImportError:  # a kit never released: no form counts as the template
        return {}
    return TEMPLATE_DIGESTS


def form_digest(name, data: bytes) -> str | None:
    """The code digest of one form of a module: a .py file's code, or the code a notebook is graded on
    (autograder.submission.notebooks: its imports, functions, classes and constants). None when it cannot be read."""
    if str(name).lower().endswith(".ipynb"):
        try:
            return code_digest(notebook_source(data, Path(str(name)).name))
        except ValueError:
            return None
    return code_digest(data)


def is_template(module, name, data: bytes) -> bool:
    """True when the file `name` (`attention.py`, `01_attention.ipynb`) holds no student work: its code is
    the released template's."""
    kind = "ipynb" if str(name).lower().endswith(".ipynb") else "py"
    stored = _template_digests().get(module, {}).get(kind)
    return stored is not None and form_digest(name, data) == stored


#: The most files of one module that are read to choose the one to grade (`one_form`): past it, the module's
#: files are refused unread.
MAX_CANDIDATES = 8


def _listed(names, cap=4) -> str:
    """"a", "a and b", "a, b and c", "a, b, c, d and 3 more files"."""
    names = list(names)
    if len(names) > cap:
        names = names[:cap] + [f"{len(names) - cap:,} more files"]
    return " and ".join(", ".join(names).rsplit(", ", 1)) if len(names) > 1 else "".join(names)


def _why_left_out(dropped, kept, blank, same) -> str:
    """Why the file `dropped` of a module is not graded, `kept` being graded ("(... )" of one_form's note);
    `same`: the two hold the same code."""
    is_py = {n: n.lower().endswith(".py") for n in (dropped, kept)}

    def called(name, other):  # the form's word when the two are of two forms (as notes said before), else its name
        return "the notebook" if is_py[other] and not is_py[name] else shown(name)

    if blank[dropped] and blank[kept]:
        return "both are the untouched template"
    if blank[dropped]:
        return f"{called(dropped, kept)} is the untouched template and {called(kept, dropped)} holds your work"
    if is_py[dropped] == is_py[kept] and same:
        return "both hold the same code"
    return "both hold work, and then the .py file is graded: hand in one form of each module, not both"


def one_form(files: dict, prefix="") -> tuple[dict, dict]:
    """Keep at most one file of each module of `files` ({name: bytes}); a module's files are those whose names
    stand for it by the name rule (`modules_named`: `masks.py`, `masks (1).py`, `03_masks.ipynb`,
    `bea_03_masks.ipynb`).

    Of a module's files, those that hold work count: a file identical to the released template's form
    (`is_template`) holds none. One file with work (or several files of one form with the same code, as
    `code_digest` reads it: an upload made twice): it is graded. Several: when the .py files among them hold
    one code, a .py file is graded (a module handed in as a .py file and as a notebook); otherwise the module
    is not graded at all, and one note names its files with work (`03_masks.ipynb and bea_03_masks.ipynb: not graded:
    ...`), so that a student never has the wrong one graded silently. No file with work: one is kept (a .py
    file first, then the released name), its module's checks say it is the template. Of files that tie, the
    .py file is kept first, then the file of the released name, then the first by name.

    A file whose name holds several modules' names (`03_masks_and_04_mha.ipynb`) is not graded, and named.
    A module with more than MAX_CANDIDATES files is refused without reading them. Returns (files kept,
    {shown name: why it is not graded}): one note for a module refused, and one note for each reason a file was
    left out for another, naming the files left out and those graded instead (the five notebooks beside the
    graded .py files: one line, not five). A file left out that is the untouched template, beside a graded .py
    file or another untouched one, gets none: that the .py file is graded is the rule, and the checks of a
    module never started say so.
    """
    kept, notes, by_module = dict(files), {}, {}
    instead = {}  # kind of reason -> [(file not graded, file graded instead, why)], for one note a kind
    for name in sorted(files):
        found = modules_named(name) if _may_be_module(name) else ()
        if len(found) > 1:
            del kept[name]
            shown_name = shown(prefix + name)
            notes[shown_name] = (f"{shown_name}: not graded: its name holds the names of {len(found)} modules "
                                 f"({_listed(sorted(found, key=MODULES.index))}), and a file stands for one module: "
                                 f"hand in each module in a file of its own, named after it "
                                 f"({_listed(notebook_name(m) for m in sorted(found, key=MODULES.index))})")
        elif found:
            by_module.setdefault(found[0], []).append(name)
    for module in MODULES:
        released = (f"{module}.py", notebook_name(module))
        names = sorted(by_module.get(module, ()), key=lambda n: (not n.lower().endswith(".py"), n not in released, n))
        if len(names) < 2:
            continue
        about = (f"a file whose name is {module}.py or ends with {notebook_name(module)[:-6]} (as "
                 f"{notebook_name(module)} or bea_{notebook_name(module)}) stands for {module}")
        if len(names) > MAX_CANDIDATES:
            for name in names:
                del kept[name]
            shown_names = [shown(prefix + n) for n in names]
            notes[shown_names[0]] = (f"{_listed(shown_names)}: not graded: {len(names):,} files stand for the module "
                                     f"{module}, more than the {MAX_CANDIDATES} compared: hand in one file of "
                                     f"{module} ({about})")
            continue
        stored = _template_digests().get(module, {})
        digest = {n: form_digest(n, files[n]) for n in names}
        blank = {n: digest[n] is not None and digest[n] == stored.get("py" if n.lower().endswith(".py") else "ipynb")
                 for n in names}
        work = [n for n in names if not blank[n]]
        py_work = [n for n in work if n.lower().endswith(".py")]
        codes = {(n.lower().endswith(".py"), digest[n] or n) for n in work}  # unreadable: a code of its own
        py_codes = {code for code in codes if code[0]}
        if len(codes) > 1 and len(py_codes) != 1:  # which one to grade is not clear: none is
            for name in names:
                del kept[name]
            shown_work = [shown(prefix + n) for n in work]
            untouched = [shown(prefix + n) for n in names if blank[n]]
            every = "both" if len(work) == 2 else "all"
            notes[shown_work[0]] = (
                f"{_listed(shown_work)}: not graded: {every} are files of the module {module} and {every} hold "
                f"work, and only one file of a module is graded: hand in one of them, and remove or rename the "
                f"others ({about})"
                + (f"; {_listed(untouched)} {'is' if len(untouched) == 1 else 'are'} the untouched template"
                   if untouched else ""))
            continue
        keep = (py_work or work or names)[0]
        for name in names:
            if name != keep:
                del kept[name]
                same = digest[name] is not None and digest[name] == digest[keep]
                if blank[name] and (blank[keep] or keep.lower().endswith(".py")):
                    continue  # an untouched template beside the graded file: nothing to say (its checks say the rest)
                instead.setdefault(_left_out_kind(name, keep, blank, same), []).append(
                    (shown(prefix + name), shown(prefix + keep), _why_left_out(name, keep, blank, same)))
    for kind, pairs in instead.items():  # one note for each reason, however many modules it holds for
        if len(pairs) == 1:
            (name, keep, why), = pairs
            notes[name] = f"{name}: not graded: {keep} was graded instead ({why})"
        else:
            names, keeps = [n for n, _, _ in pairs], [k for _, k, _ in pairs]
            notes[names[0]] = (f"{_listed(names, len(MODULES))}: not graded: {_listed(keeps, len(MODULES))} were "
                               f"graded instead ({_LEFT_OUT_MANY.get(kind, pairs[0][2])})")
    return kept, notes


#: Why the files of several modules are not graded, one file graded instead of each (`one_form`), by the
#: kind of the reason (`_left_out_kind`): the plural of `_why_left_out` (where it names the two files' forms).
_LEFT_OUT_MANY = {
    ("template", True, False): "the .py files are the untouched template and the notebooks hold your work",
    ("template", False, True): "the notebooks are the untouched template and the .py files hold your work",
    ("template", True, True): "those not graded are the untouched template and those graded hold your work",
    ("template", False, False): "those not graded are the untouched template and those graded hold your work",
    ("same", True, True): "each holds the same code as the one graded",
    ("same", False, False): "each holds the same code as the one graded",
}  # ("work", False, True): "both hold work, and then the .py file is graded: ...", the same words for several


def _left_out_kind(dropped, kept, blank, same) -> tuple:
    """The kind of `_why_left_out`'s reason, and the forms of the two files (is each a .py file): the notes of
    one kind are said in one (`one_form`)."""
    forms = (dropped.lower().endswith(".py"), kept.lower().endswith(".py"))
    if blank[dropped]:
        return ("template", *forms)
    if forms[0] == forms[1] and same:
        return ("same", *forms)
    return ("work", *forms)


# -- zips --------------------------------------------------------------------------------------
def _check_zip_directory(fh, label):
    """Refuse a zip whose directory declares too many entries, before the directory is parsed at all."""
    end = getattr(zipfile, "_EndRecData", None)
    if end is None:  # a future Python without it: the checks after parsing still hold
        return
    record = end(fh)
    if not record:
        raise SubmissionError(f"cannot read the zip {label}: no end of central directory")
    entries, size = record[getattr(zipfile, "_ECD_ENTRIES_TOTAL", 4)], record[getattr(zipfile, "_ECD_SIZE", 5)]
    if entries > MAX_ENTRIES or size > MAX_ZIP_DIRECTORY:
        raise SubmissionError(f"the zip {label} holds {entries} entries ({size_text(size)} of directory); a "
                              f"submission zip may hold at most {MAX_ENTRIES}: zip only your modules")


def _entry_parts(filename):
    """The safe folder parts of a zip entry's name, or None when it would land outside the folder."""
    if filename.startswith(("/", "\\")) or re.match(r"^[A-Za-z]:", filename) or "\0" in filename:
        return None
    parts = [p for p in filename.split("/") if p not in ("", ".")]
    if not parts or ".." in parts:
        return None
    return parts


def unzip(path, dest, max_unzipped=MAX_UNZIPPED) -> dict[str, str]:
    """Unpack the .py files and notebooks of the submission zip `path` into the empty folder `dest`.

    Returns {entry name: why it was left out}. Raises SubmissionError when
    the zip cannot be read at all, holds more than MAX_ENTRIES entries, or
    declares more than `max_unzipped` bytes: a bomb is refused before a byte is
    unpacked. Entries that would land outside `dest` (absolute, `..`), links,
    special files and files over their limit are left out and named; bytes
    are counted as they come out, so a header that lies about a size gains
    nothing.
    """
    label = shown(path)
    try:
        fd = os.open(path, _READ_FLAGS & ~getattr(os, "O_NOFOLLOW", 0))  # the path the caller named
    except OSError as exc:
        raise SubmissionError(f"cannot read {label}: {exc.strerror or exc}") from None
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise SubmissionError(f"{label} is neither a folder, a notebook nor a zip file")
        try:
            if not zipfile.is_zipfile(fh):
                raise SubmissionError(f"{label} is neither a folder, a notebook nor a zip file")
            _check_zip_directory(fh, label)
            zf = zipfile.ZipFile(fh)
            infos = zf.infolist()
        except (zipfile.BadZipFile, OSError, ValueError, EOFError, NotImplementedError, RuntimeError) as exc:
            raise SubmissionError(f"cannot read the zip {label}: {exc}") from None
        with zf:
            if len(infos) > MAX_ENTRIES:
                raise SubmissionError(f"the zip {label} holds {len(infos)} entries; a submission zip may hold at "
                                      f"most {MAX_ENTRIES}: zip only your modules")
            declared = sum(i.file_size for i in infos)
            if declared > max_unzipped:
                raise SubmissionError(f"the zip {label} unpacks to {size_text(declared)}, over the "
                                      f"{size_text(max_unzipped)} limit of a submission: zip only your modules")
            return _unpack(zf, infos, Path(dest), max_unzipped)


def _unpack(zf, infos, dest, budget) -> dict[str, str]:
    notes, real_dest = {}, os.path.realpath(dest)
    for info in infos:
        name = shown(info.filename)
        mode = info.external_attr >> 16
        if info.is_dir() or stat.S_ISDIR(mode):
            continue
        parts = _entry_parts(info.filename)
        suffix = Path(info.filename).suffix.lower()
        if parts is None:
            if suffix in MAX_FILE or stat.S_ISLNK(mode):
                notes[name] = f"{name} is an absolute path or climbs with '..': not graded (it could land outside " \
                              "the submission's folder)"
            continue
        if stat.S_IFMT(mode) and not stat.S_ISREG(mode):
            notes[name] = f"{name} is {kind_of(mode)}: not graded" + (LINK_HINT if stat.S_ISLNK(mode) else "")
            continue
        if suffix not in MAX_FILE or any(_hidden(p) for p in parts):
            continue  # only modules and notebooks are ever graded
        limit = min(MAX_FILE[suffix], budget)
        if info.file_size > limit:
            notes[name] = f"{name} unpacks to {size_text(info.file_size)}, over the {size_text(limit)} limit: not graded"
            continue
        target = os.path.join(real_dest, *parts)
        if os.path.commonpath([real_dest, os.path.realpath(target)]) != real_dest:
            notes[name] = f"{name} would land outside the submission's folder: not graded"
            continue
        try:
            data = _read_entry(zf, info, limit)
        except Refused:
            notes[name] = f"{name} unpacks to more than its header says, over the {size_text(limit)} limit: not graded"
            continue
        except (zipfile.BadZipFile, OSError, ValueError, EOFError, NotImplementedError, RuntimeError) as exc:
            notes[name] = f"{name} cannot be unpacked ({exc}): not graded"
            continue
        try:
            os.makedirs(os.path.dirname(target), exist_ok=True)
            write_new(target, data)
        except FileExistsError:
            notes[name] = f"{name} is in the zip twice: only the first one is graded"
            continue
        except OSError as exc:
            notes[name] = f"{name} cannot be unpacked ({exc.strerror or exc}): not graded"
            continue
        budget -= len(data)
    return notes


def _read_entry(zf, info, limit) -> bytes:
    """An entry's bytes, decompressed in chunks: Refused as soon as more than `limit` come out."""
    parts, total = [], 0
    with zf.open(info) as src:
        while True:
            chunk = src.read(min(1 << 20, limit + 1 - total))
            if not chunk:
                return b"".join(parts)
            parts.append(chunk)
            total += len(chunk)
            if total > limit:
                raise Refused(info.filename)
