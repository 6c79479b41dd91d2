"""A submission's zip, checked before it is unpacked: at most MAX_ENTRIES entries and MAX_UNZIPPED bytes
(autograder.submission.intake), as its directory declares them, and a directory of at most MAX_ZIP_DIRECTORY
bytes, refused before it is parsed. While it is unpacked the bytes that really come out are counted; entries
that would land outside the folder, links and special files are never written, and each is named with the
reason. Only .py files and notebooks are unpacked. Stdlib only.
"""
from __future__ import annotations

import os
import re
import stat
import zipfile
from pathlib import Path

from autograder.submission import intake  # intake.MAX_ENTRIES read when used: one cap, wherever it is set
from autograder.submission.intake import (LINK_HINT, MAX_FILE, READ_FLAGS, Refused, SubmissionError, hidden, kind_of,
                                          shown, size_text, write_new)

#: A zip's central directory over this is refused before it is parsed (1000 entries take ~200 KiB).
MAX_ZIP_DIRECTORY = 4 << 20


def _check_zip_directory(fh, label):
    """Refuse a zip whose directory declares too many entries, before the directory is parsed at all."""
    end = getattr(zipfile, "_EndRecData", None)
    if end is None:  # a future Python without it: the checks after parsing still hold
        return
    record = end(fh)
    if not record:
        raise SubmissionError(f"cannot read the zip {label}: no end of central directory")
    entries, size = record[getattr(zipfile, "_ECD_ENTRIES_TOTAL", 4)], record[getattr(zipfile, "_ECD_SIZE", 5)]
    if entries > intake.MAX_ENTRIES or size > MAX_ZIP_DIRECTORY:
        raise SubmissionError(f"the zip {label} holds {entries} entries ({size_text(size)} of directory); a "
                              f"submission zip may hold at most {intake.MAX_ENTRIES}: zip only your modules")


def _entry_parts(filename):
    """The safe folder parts of a zip entry's name, or None when it would land outside the folder."""
    if filename.startswith(("/", "\\")) or re.match(r"^[A-Za-z]:", filename) or "\0" in filename:
        return None
    parts = [p for p in filename.split("/") if p not in ("", ".")]
    if not parts or ".." in parts:
        return None
    return parts


def unzip(path, dest, max_unzipped=intake.MAX_UNZIPPED) -> dict[str, str]:
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
        fd = os.open(path, READ_FLAGS & ~getattr(os, "O_NOFOLLOW", 0))  # the path the caller named
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
            if len(infos) > intake.MAX_ENTRIES:
                raise SubmissionError(f"the zip {label} holds {len(infos)} entries; a submission zip may hold at "
                                      f"most {intake.MAX_ENTRIES}: zip only your modules")
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
        if suffix not in MAX_FILE or any(hidden(p) for p in parts):
            continue  # only modules and notebooks are ever graded
        limit = min(MAX_FILE[suffix], budget)
        if info.file_size > limit:
            notes[name] = (f"{name} unpacks to {size_text(info.file_size)}, over the {size_text(limit)} limit: "
                           "not graded")
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
