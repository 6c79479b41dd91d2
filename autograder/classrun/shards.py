"""A class graded in shards: the library behind `grade-all --shard K/N`.

A course that regrades thousands of submissions runs `grade-all` as N jobs of
the engine it already has (a Slurm job array, a Kubernetes Indexed Job, a
GitHub Actions matrix; templates/), each grading one shard into a results
folder of its own, then merges the N folders into one.

The split. A submission belongs to shard `shard_of(id, N)`: the first 8 hex
digits of the SHA-256 of its id (its name in the class folder, as UTF-8),
as an integer, modulo N. It depends on the id and N alone, never on a
listing's order or on the other submissions: a shard's list is the same when
the run is repeated, when another shard fails, and when submissions are
added (each keeps its shard). K counts from 0 (0 <= K < N), as Slurm's
SLURM_ARRAY_TASK_ID and Kubernetes' JOB_COMPLETION_INDEX do.

The manifest. Before it grades, a shard writes OUT/shard.json (atomically):
K and N, every submission assigned to it with the fingerprint its row must
carry (autograder.classrun.fingerprints.fingerprint: content, kit code, settings), and
what grades (`WHAT_GRADES`): the kit's version, the checksum of the code that
decides a grade (kit_digest: engine, graders, reference), torch's and
Python's versions, and the settings that the fingerprint uses (timeouts,
limits, --max-unzipped). A shard is resumable as grade-all is: run the same
command again and it grades what its gradebook lacks.

The merge of the N shards' outputs into one is autograder.classrun.merge (`grader_cli.py merge`).
"""
from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path

from autograder.files import SHARED, remove_interrupted_writes, write_atomic
from autograder.classrun import fingerprints, gradebook, outlock, run

MANIFEST = gradebook.MANIFEST  # OUT/shard.json: one of the kit's own files in OUT (gradebook.RESERVED)
FORMAT = 1  # the manifest's format
#: what a manifest says graded its rows; shards that differ in any of these are never merged
WHAT_GRADES = ("shards", "kit", "graders_sha256", "torch", "python", "settings")


class ShardError(ValueError):
    """A shard cannot be graded into, or merged from, this folder: the message says why (exit 2)."""


class Refused(ShardError):
    """merge: the shards cannot make one gradebook (graded differently, or not shards at all)."""


class Incomplete(Exception):
    """merge: the shards are alike but not whole, or overlap; `problems` lists each, ids included."""

    def __init__(self, problems: list[str]):
        super().__init__("; ".join(problems))
        self.problems = problems


def parse(text: str) -> tuple[int, int]:
    """'K/N' -> (K, N), K counting from 0: 0 <= K < N. A ValueError that says what is wrong otherwise."""
    k, sep, n = str(text).strip().partition("/")
    if not sep or not k.strip().isdecimal() or not n.strip().isdecimal():
        raise ValueError(f"{text!r} is not K/N: shard K of N shards, two whole numbers, e.g. 0/4")
    k, n = int(k), int(n)
    if n < 1:
        raise ValueError(f"{text!r}: N, the number of shards, must be at least 1")
    if k >= n:
        raise ValueError(f"{text!r}: K counts from 0, so it must be below N (0 to {n - 1})")
    return k, n


def shard_of(sub_id: str, shards: int) -> int:
    """The shard of submission `sub_id` among `shards`: int(sha256(id)[:8 hex digits]) mod N (see above)."""
    digest = hashlib.sha256(sub_id.encode("utf-8", "surrogateescape")).hexdigest()
    return int(digest[:8], 16) % shards


def assigned(entries, k: int, n: int) -> list:
    """The (id, path) of `entries` that shard K of N grades, in the order given."""
    return [(i, p) for i, p in entries if shard_of(i, n) == k]


def read_manifest(out: Path) -> dict | None:
    """OUT/shard.json, or None where there is none; a ShardError when it cannot be read as one."""
    path = Path(out) / MANIFEST
    try:
        if not stat.S_ISREG(os.lstat(path).st_mode):
            raise ShardError(f"{path} is not a regular file")
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise ShardError(f"{path} cannot be read as a shard's manifest: {exc}") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ShardError(f"{path} is not a manifest of this kit (format {FORMAT})")
    return data


def check_whole_run(out: Path):
    """A grade-all of the whole class must not write into a shard's OUT (its rows would be merged as the
    shard's): a ShardError where OUT holds a manifest."""
    manifest = read_manifest(out)
    if manifest is not None:
        raise ShardError(f"{out} holds the results of shard {manifest.get('shard')}/{manifest.get('shards')} "
                         f"({MANIFEST}); grade the whole class into another folder, or this shard with --shard")


def prepare(folder: Path, out: Path, k: int, n: int, *, force: bool = False, timeout: float = 300.0,
            call_timeout: float = 10.0, **options):
    """Plan shard K of N of the class in `folder` into `out` and write its manifest; run.plan's answer for the
    shard's submissions alone, to give to run.grade_all (`planned`).

    A ShardError where `out` holds another shard's results (another K or N) or a whole run's (a gradebook
    without a manifest): each shard writes a folder of its own."""
    out = Path(out)
    manifest = read_manifest(out)
    if manifest is not None and (manifest.get("shard"), manifest.get("shards")) != (k, n):
        raise ShardError(f"{out} holds the results of shard {manifest.get('shard')}/{manifest.get('shards')}, "
                         f"not {k}/{n}: give each shard a folder of its own")
    if manifest is None and (out / gradebook.GRADEBOOK).exists():
        raise ShardError(f"{out} holds a gradebook that is no shard's (no {MANIFEST}): give each shard a new "
                         "folder of its own")
    entries = assigned(gradebook.discover(folder), k, n)
    planned = run.plan(folder, out, force=force, timeout=timeout, call_timeout=call_timeout, entries=entries,
                       **options)
    prints = planned.prints
    out.mkdir(parents=True, exist_ok=True)
    remove_interrupted_writes(out / MANIFEST)  # a shard killed while writing its manifest left its beginning here
    write_atomic(out / MANIFEST, json.dumps({
        "format": FORMAT, "shard": k, "shards": n, **fingerprints.versions(options.get("course")),
        "settings": fingerprints.grading_settings(timeout, call_timeout, options),
        "submissions": [[i, prints[i]] for i, _ in entries]}, indent=1) + "\n", mode=SHARED)
    return planned


def grade_shard(folder: Path, out: Path, k: int, n: int, **kwargs) -> dict:
    """Grade shard K of N of `folder` into `out` (its manifest first), as run.grade_all grades a class;
    `kwargs` go to run.grade_all. The rows of the shard, by row key. OUT is locked from before its manifest
    (outlock.output_lock: outlock.Busy where another run holds it)."""
    with outlock.output_lock(out):
        planned = prepare(folder, out, k, n, **{key: value for key, value in kwargs.items()
                                                if key not in ("jobs", "progress", "warm", "on_interrupt", "planned")})
        return run.grade_all(folder, out, planned=planned, **kwargs)
