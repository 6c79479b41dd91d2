"""The folder of a submission: where its modules are, and its .py files and notebooks read from there.

A folder is walked with os.scandir without following links: a linked folder
is never entered (the link is named in the report like any other). The work
is bounded whatever the submission holds: a folder is listed only up to
MAX_FOLDER entries (one that holds more is refused if its files would be
graded, skipped by the search otherwise), the search for the modules' folder
looks at MAX_SCAN entries in all, and a submission over these caps is refused
with a message that says which cap and what to hand in (never a traceback,
never minutes of listing before the grading's timeout starts). A folder named
like a module or a notebook (`01_attention.ipynb/`) is a folder: searched like
any other, never taken for the file it is named after. Each file is read with
autograder.submission.intake.read_regular, relative to its folder's own
descriptor (a folder on the way cannot be swapped for a link either). At most
MAX_NOTES files left out are named one by one (each module's own file always
is); the rest are counted in one note (`capped_notes`). Stdlib only.
"""
from __future__ import annotations

import collections
import itertools
import os
from pathlib import Path

from autograder.submission import intake  # intake.MAX_ENTRIES read when used: one cap, wherever it is set
from autograder.submission.forms import one_form
from autograder.submission.intake import (MAX_FILE, OTHER_LINK_HINT, Refused, SubmissionError, expected, hidden,
                                          may_be_module, module_of_file, modules_named, read_regular, shown)

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
_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


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


def _holds_modules(entries) -> bool:
    """True when a folder's entries name a module (a .py file or notebook whose name stands for a module by the
    name rule, `modules_named`, whatever its kind but a folder, so that a module left out is named rather than
    looked for elsewhere; a folder named `01_attention.ipynb` is a folder, searched like any other)."""
    return any(may_be_module(e.name) and modules_named(e.name) and not e.is_dir(follow_symlinks=False)
               for e in entries)


def _too_many(where) -> SubmissionError:
    return SubmissionError(f"{where} holds more than {MAX_FOLDER:,} files and folders, more than a submission "
                           f"ever needs: hand in {expected()}, with their helper files only")


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
                         if not hidden(e.name) and e.is_dir(follow_symlinks=False))
    if found:
        return found[0] if len(found) == 1 else ()
    if skipped:
        raise SubmissionError(f"no folder holding your modules was found, and {shown(skipped[0])}"
                              f"{f' (and {len(skipped) - 1} more)' if len(skipped) > 1 else ''} holds more than "
                              f"{MAX_FOLDER:,} files and folders, too many to look through: hand in {expected()}, "
                              f"with their helper files only")
    if stopped:
        raise SubmissionError(f"no folder holding your modules was found among the first {MAX_SCAN:,} files and "
                              f"folders of the submission, where the search stops: hand in {expected()}, with their "
                              f"helper files only")
    return ()


def take_folder(path, max_unzipped=intake.MAX_UNZIPPED) -> tuple[dict[str, bytes], dict[str, str]]:
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


def take_files(folder_fd, prefix="", max_unzipped=intake.MAX_UNZIPPED) -> tuple[dict[str, bytes], dict[str, str]]:
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
        if hidden(entry.name):
            continue
        if Path(entry.name).suffix.lower() in MAX_FILE:
            if not entry.is_dir(follow_symlinks=False):
                wanted.append(entry)
        elif entry.is_symlink():  # a link to a folder (`lib -> ../alice`) or to any other file: never followed
            name = shown(prefix + entry.name)
            notes[name] = f"{name} is a symbolic link: not graded" + OTHER_LINK_HINT
    wanted.sort(key=lambda e: (not (may_be_module(e.name) and modules_named(e.name)), e.name))  # modules first
    files, total, over = {}, 0, []
    for entry in wanted:
        name = shown(prefix + entry.name)
        if len(files) >= intake.MAX_ENTRIES:
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
                           f"a submission may hold at most {intake.MAX_ENTRIES:,} .py files and notebooks, and "
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
        module = module_of_file(base) if may_be_module(base) else None
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
                                  f"special files, files over their limits or past the {intake.MAX_ENTRIES:,} files a "
                                  f"submission may hold)")
    return out
