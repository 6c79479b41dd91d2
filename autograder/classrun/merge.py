"""The merge of a class graded in shards: the library behind `grader_cli.py merge` and `grader_cli.py unfinished`.

The N shards' outputs (autograder.classrun.shards: each an OUT with its manifest, OUT/shard.json, and its
gradebook) become one OUT, laid out as one grade-all run's.

The merge refuses (`Refused`, exit 2), saying what differs and in which
shard, folders that are no shard's output, shards of different N or graded
with a different kit, graders, torch, Python or settings, and an output
folder that is (or holds, or lies in) a shard's. It reports (`Incomplete`,
exit 1), listing ids, the shards not given, a shard given twice, submissions
assigned but with no row (a shard killed or still running), an output with
nothing in it yet (a shard never started), rows that are not the manifest's
(graded before the kit, the settings or the submission changed: the shard
was not run again to the end), rows the shard was not assigned, and ids in
two shards. It never guesses: either every shard is
there, whole and alike, and OUT gets one gradebook (gradebook.COLUMNS, rows in
grade-all's order) and a copy of every submission's folder, laid out as one
grade-all run's OUT, or nothing is written, and an earlier merge in OUT is moved aside (OUT.stale-<time>),
so that its gradebook never passes for this run's. A merge is written into a fresh folder and swapped in whole.
A shard or a merge killed halfway and run again removes what the killed run had begun to write
(autograder.files.remove_interrupted_writes; a merge's fresh folder beside OUT).
"""
from __future__ import annotations

import json
import os
import shutil
import stat
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from autograder.classrun import gradebook, outlock
from autograder.classrun.shards import (MANIFEST, WHAT_GRADES, Incomplete, Refused, ShardError, read_manifest,
                                       shard_of)
from autograder.files import current_umask
from autograder.report.model import safe_line


def _plain_id(sub_id) -> bool:
    """An id a folder name can be made from: one path component, as the class folder's listing gives."""
    return (isinstance(sub_id, str) and sub_id not in ("", ".", "..") and "/" not in sub_id and "\0" not in sub_id
            and not sub_id.startswith("."))


@dataclass
class Shard:
    out: Path
    manifest: dict
    rows: dict = field(default_factory=dict)  # row key -> gradebook.Row

    @property
    def name(self):
        return f"shard {self.manifest['shard']} ({self.out})"


def _load(out: Path) -> Shard:
    out = Path(out)
    if not out.is_dir():
        raise Refused(f"{out} is not a folder")
    manifest = read_manifest(out)
    if manifest is None:
        raise Refused(f"{out} is no shard's output: it has no {MANIFEST} (grade-all --shard K/N writes it)")
    k, n, subs = manifest.get("shard"), manifest.get("shards"), manifest.get("submissions")
    if not (isinstance(n, int) and isinstance(k, int) and 0 <= k < n and isinstance(subs, list)
            and all(isinstance(s, list) and len(s) == 2 and _plain_id(s[0]) and isinstance(s[1], str)
                    for s in subs)):
        raise Refused(f"{out / MANIFEST} is not a whole manifest (shard, shards, submissions)")
    return Shard(out, manifest, gradebook.read_gradebook(out))


def _differences(shards: list[Shard]) -> list[str]:
    first = shards[0]
    found = []
    for shard in shards[1:]:
        for key in WHAT_GRADES:
            if shard.manifest.get(key) != first.manifest.get(key):
                found.append(f"{key}: {shard.name} has {_show(shard.manifest.get(key))}, {first.name} has "
                             f"{_show(first.manifest.get(key))}")
    return found


def _show(value):
    return json.dumps(value, sort_keys=True, default=str)


def _inside(a: Path, b: Path) -> bool:
    """Whether a is b or lies inside it."""
    return a == b or b in a.parents


@dataclass
class Merged:
    rows: dict  # row key -> gradebook.Row, every submission of the class
    shards: int  # N
    copied: int  # submission folders copied into OUT


def not_started(out: Path) -> bool:
    """Whether a shard's OUT holds nothing of it yet: not there, or a folder with nothing but the lock of the run
    that made it (outlock.LOCK) and the beginning of a manifest (a shard stopped before its manifest was written)."""
    out = Path(out)
    if not os.path.lexists(out):
        return True
    if not stat.S_ISDIR(os.lstat(out).st_mode):
        return False
    return all(name == outlock.LOCK or name.startswith(f".{MANIFEST}.") for name in os.listdir(out))


def check(outs, course=None) -> tuple[list[Shard], dict]:
    """Read the shards' outputs and check them as `merge` does (without writing): (the shards, every row by row
    key). Refused when they cannot be merged, Incomplete when they are alike but not whole or overlap (an output
    with nothing in it yet, `not_started`, included). `course` (autograder.course.Course): the course file every
    shard must have been graded under (Refused, naming the file and the shard, where one was not)."""
    if not outs:
        raise Refused("no shard output given")
    empty = [Path(out) for out in outs if not_started(out)]
    nothing = (f"shard outputs with nothing in them yet (the shard never started, or was stopped before it wrote "
               f"its {MANIFEST}: run it again): {', '.join(safe_line(str(out)) for out in empty)}")
    shards = [_load(out) for out in outs if Path(out) not in empty]
    if not shards:
        raise Incomplete([nothing])
    differences = _differences(shards)
    if differences:
        raise Refused("the shards were not graded alike, so their rows cannot make one gradebook: "
                      + "; ".join(differences) + ". Grade every shard again with the same kit and options")
    if course is not None:
        graded_under = (shards[0].manifest.get("settings") or {}).get("course_sha256")
        if graded_under != course.sha256:
            under = f"the course file with sha256 {graded_under}" if graded_under else "no course file"
            raise Refused(f"the shards were graded under {under}, not under {course.file} (sha256 {course.sha256}): "
                          f"merge them without --course, or grade them again with --course {course.file}")
    n = shards[0].manifest["shards"]
    problems = []
    given = {}
    for shard in shards:
        given.setdefault(shard.manifest["shard"], []).append(shard)
    if empty:
        problems.append(nothing)
    missing = [k for k in range(n) if k not in given]
    if missing:
        problems.append(f"shards not given (of {n}, counting from 0): {', '.join(map(str, missing))}")
    twice = [f"shard {k} in {', '.join(str(s.out) for s in same)}" for k, same in sorted(given.items())
             if len(same) > 1]
    if twice:
        problems.append(f"shards given more than once: {'; '.join(twice)}")
    owner = {}  # row key -> the shard it was assigned to
    rows, twice_ids = {}, []
    for shard in shards:
        expected = {gradebook.row_key(i): (i, fp) for i, fp in shard.manifest["submissions"]}
        wrong_shard = [i for i, _ in expected.values() if shard_of(i, n) != shard.manifest["shard"]]
        if wrong_shard:
            problems.append(f"{shard.name} was assigned submissions of other shards: {_ids(wrong_shard)}")
        no_row = [i for key, (i, _) in expected.items() if key not in shard.rows]
        if no_row:
            problems.append(f"{shard.name}: assigned, no row (the shard did not finish: run it again): "
                            f"{_ids(no_row)}")
        stale = [i for key, (i, fp) in expected.items() if key in shard.rows and shard.rows[key].fingerprint != fp]
        if stale:
            problems.append(f"{shard.name}: rows graded from another kit, other settings or another content than "
                            f"its last run was given (it did not finish: run it again): {_ids(stale)}")
        extra = [row.id for key, row in shard.rows.items() if key not in expected]
        if extra:
            problems.append(f"{shard.name}: rows of submissions it was not assigned (no longer in the class folder? "
                            f"grade the shard again with --force): {_ids(extra)}")
        for key, (i, _) in expected.items():
            if key in owner:
                twice_ids.append(f"{safe_line(i)} ({owner[key].name} and {shard.name})")
            else:
                owner[key] = shard
                if key in shard.rows:
                    rows[key] = shard.rows[key]
    if twice_ids:
        problems.append(f"submissions in two shards: {_ids(twice_ids, escape=False)}")
    if problems:
        raise Incomplete(problems)
    return shards, rows


def _ids(ids, escape=True) -> str:
    """At most 50 ids, each on one safe line (a student's name for a file never passes for the kit's text)."""
    shown = [safe_line(i) if escape else i for i in ids[:50]]
    return ", ".join(shown) + (f" and {len(ids) - 50} more" if len(ids) > 50 else "")


def unfinished(folder: Path, n: int) -> list[int]:
    """The K of every shard K of N in `folder`/K (the templates' layout: RESULTS/shards/K) that has not finished,
    so that only those are run again: nothing there yet (`not_started`), submissions assigned with no row or with
    a row from an earlier run (a shard stopped or still running), or rows the grader could not grade (status
    error: run again once the cause is fixed). A ShardError when `folder`/K holds a shard of another K or N."""
    left = []
    for k in range(n):
        out = Path(folder) / str(k)
        if not_started(out):
            left.append(k)
            continue
        shard = _load(out)
        if (shard.manifest["shard"], shard.manifest["shards"]) != (k, n):
            raise ShardError(f"{out} holds shard {shard.manifest['shard']}/{shard.manifest['shards']}, not {k}/{n}")
        expected = {gradebook.row_key(i): fp for i, fp in shard.manifest["submissions"]}
        if any(key not in shard.rows or shard.rows[key].fingerprint != fp for key, fp in expected.items()) \
                or gradebook.grader_failures({key: row for key, row in shard.rows.items() if key in expected}):
            left.append(k)
    return left


def _leftovers(out: Path) -> list[Path]:
    """What merges killed halfway left beside `out`: their folders `.<name>.merging-*` and `.<name>.replaced-*`."""
    prefixes = (f".{out.name}.merging-", f".{out.name}.replaced-")
    try:
        return [out.parent / name for name in os.listdir(out.parent) if name.startswith(prefixes)]
    except FileNotFoundError:
        return []


def _remove(path: Path):
    """Remove a folder, never following a link in or to it."""
    if stat.S_ISDIR(os.lstat(path).st_mode):
        shutil.rmtree(path)
    else:
        path.unlink()


def _is_merge(out: Path) -> bool:
    """Whether `out` is a folder that a merge (or grade-all) wrote: a gradebook and no shard's manifest."""
    return (stat.S_ISDIR(os.lstat(out).st_mode) and (out / gradebook.GRADEBOOK).is_file()
            and not os.path.lexists(out / MANIFEST))


def set_aside(out: Path) -> Path | None:
    """Move an earlier merge out of the way of a merge that refuses: `out` becomes `out`.stale-<date>-<time>, so
    that no gradebook in `out` passes for this run's. The new name, or None where `out` holds no merge."""
    out = Path(out).absolute()
    if not os.path.lexists(out) or not _is_merge(out):
        return None
    stamp = time.strftime("%Y%m%d-%H%M%S")
    target = out.with_name(f"{out.name}.stale-{stamp}")
    counter = 1
    while os.path.lexists(target):
        counter += 1
        target = out.with_name(f"{out.name}.stale-{stamp}-{counter}")
    os.rename(out, target)
    return target


def _exchange(new: Path, out: Path):
    """Put the folder `new` in the place of the folder `out` at once (renameat2 RENAME_EXCHANGE, Linux 3.15+) and
    remove the old one; where that cannot be done, by two renames (a moment with no `out`, never a mix)."""
    import ctypes

    old = out.with_name(f".{out.name}.replaced-{os.getpid()}")
    if os.path.lexists(old):
        _remove(old)
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        renameat2 = None
    AT_FDCWD, RENAME_EXCHANGE = -100, 2
    if renameat2 is not None and renameat2(AT_FDCWD, os.fsencode(new), AT_FDCWD, os.fsencode(out),
                                           RENAME_EXCHANGE) == 0:
        os.rename(new, old)  # `new` is now the old merge
    else:
        os.rename(out, old)
        os.rename(new, out)
    _remove(old)


def merge(outs, out: Path, course=None) -> Merged:
    """Merge the outputs of the N shards of one run into `out`: one gradebook (gradebook.COLUMNS, the rows in the
    order grade-all writes them) and a copy of every submission's folder, so that `out` is laid out as the OUT
    of one grade-all run of the whole class (a later `grade-all DIR -o OUT` resumes from it).

    The merge is written into a fresh folder beside `out` (`.<name>.merging-*`) and put in its place at once
    when it is whole (`_exchange`): `out` holds the earlier merge or this one, never a mix, and what a merge
    killed halfway left is removed by the next. An `out` that exists must be empty or an earlier merge's (a
    gradebook, no shard's manifest): it is replaced whole.

    Refused (nothing written) when the shards cannot be merged or `out` is a shard's folder, or a folder that is
    no merge's; Incomplete (nothing written) when a shard is missing or unfinished, given twice, or rows overlap
    (`check`). Refused or Incomplete by the shards, an earlier merge in `out` is first moved aside (`set_aside`;
    the exception's `set_aside` says where), so that its gradebook never passes for this run's. `course`: the
    course file the shards must have been graded under (`check`)."""
    out = Path(out).absolute()
    for given in outs:
        given = Path(given).absolute()
        if _inside(out, given) or _inside(given, out):
            raise Refused(f"the merged output {out} and the shard output {given} overlap: merge into a folder of "
                          "its own")
    if os.path.lexists(out):
        if read_manifest(out) is not None:
            raise Refused(f"{out} holds a shard's manifest: merge into a folder of its own")
        if not stat.S_ISDIR(os.lstat(out).st_mode) or (os.listdir(out) and not _is_merge(out)):
            raise Refused(f"{out} is not empty and holds no earlier merge (no {gradebook.GRADEBOOK}): merge into a "
                          "new folder")
    try:
        shards, rows = check(outs, course)
    except (Refused, Incomplete) as exc:
        exc.set_aside = set_aside(out)
        raise
    out.parent.mkdir(parents=True, exist_ok=True)
    for leftover in _leftovers(out):
        _remove(leftover)
    staging = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.merging-"))
    try:
        os.chmod(staging, 0o777 & ~current_umask())  # a folder as mkdir makes one (mkdtemp's is 0700)
        copied = 0
        for shard in shards:
            for sub_id, _ in shard.manifest["submissions"]:
                source = gradebook.output_folder(shard.out, sub_id)  # the ids are checked: one path component each
                try:
                    is_folder = stat.S_ISDIR(os.lstat(source).st_mode)  # never a link followed
                except FileNotFoundError:
                    is_folder = False  # a row of a grading whose files could not be written: the row says why
                if not is_folder:
                    continue
                shutil.copytree(source, gradebook.output_folder(staging, sub_id), symlinks=True)
                copied += 1
        gradebook.write_gradebook(staging, rows)
        if os.path.lexists(out) and not os.listdir(out):
            out.rmdir()  # an empty folder given as OUT: nothing to keep
        if os.path.lexists(out):
            _exchange(staging, out)
        else:
            os.rename(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return Merged(rows, shards[0].manifest["shards"], copied)
