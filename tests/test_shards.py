"""A class graded in shards (issue 17): the split, the manifest, and what `merge` refuses and reports.

No grading here: the shards' outputs are made by hand (a manifest written by the kit's own `prepare`, rows
written with the kit's gradebook writer), so that every refusal is cheap to show. tests/test_shards_class.py
grades a real class in shards and compares the merge with a single run.
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from autograder.classrun import fingerprints, gradebook, outlock, shards
from grader_cli import cli
from tests.conftest import MODULES

#: ids chosen to be hostile to paths, spreadsheets and terminals, besides plain ones
IDS = ["alice", "bob.zip", "gradebook.csv", "shard.json", "a~", "José Ñ", "=cmd()", "-rf", "new\nline",
       "tab\there", "carol.ipynb", "dave", "erin", "frank", "gina", "hal", "ivy", "jo", "kim", "lee"]


def run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


# ---- the split -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("text, expected", [("0/1", (0, 1)), ("3/7", (3, 7)), (" 0/16 ", (0, 16))])
def test_k_of_n_counts_from_0(text, expected):
    assert shards.parse(text) == expected


@pytest.mark.parametrize("text, says", [("3/3", "below N"), ("7/3", "below N"), ("0/0", "at least 1"),
                                        ("1", "not K/N"), ("a/b", "not K/N"), ("-1/3", "not K/N"), ("/3", "not K/N"),
                                        ("1/3/4", "not K/N"), ("", "not K/N")])
def test_a_bad_shard_is_a_clear_usage_error(text, says, tmp_path):
    with pytest.raises(ValueError, match=says):
        shards.parse(text)
    result = run("grade-all", tmp_path, "-o", tmp_path / "out", "--shard", text)
    assert result.exit_code == 2 and "Invalid value for '--shard'" in result.output and says in result.output, \
        result.output
    assert not (tmp_path / "out").exists(), "expected nothing graded or written"


def test_the_shard_of_an_id_is_a_hash_of_the_id_alone():
    """int(sha256(id)[:8 hex digits]) mod N: fixed values, so that a change of the split is seen (shards of an
    earlier run would no longer merge with those of a new one)."""
    assert [shards.shard_of(i, 7) for i in ("alice", "bob.zip", "gradebook.csv", "José")] == [0, 3, 6, 5]
    for sub_id in IDS:
        expected = int(hashlib.sha256(sub_id.encode()).hexdigest()[:8], 16)
        assert all(shards.shard_of(sub_id, n) == expected % n for n in (1, 2, 3, 7, 1000))


def test_a_shards_list_does_not_depend_on_the_listing():
    entries = [(i, Path(i)) for i in IDS]
    for n in (1, 3, 7):
        parts = [shards.assigned(entries, k, n) for k in range(n)]
        assert sorted(i for part in parts for i, _ in part) == sorted(IDS), "every id in exactly one shard"
        fewer = [e for e in entries if e[0] not in ("alice", "dave")]  # others removed, or listed otherwise
        for k in range(n):
            kept = {i for i, _ in shards.assigned(list(reversed(fewer)), k, n)}
            assert kept == {i for i, _ in parts[k]} - {"alice", "dave"}, (n, k)


def test_the_split_is_balanced_over_a_large_class():
    counts = [0] * 16
    for number in range(4000):
        counts[shards.shard_of(f"student-{number:05d}", 16)] += 1
    assert min(counts) > 4000 / 16 * 0.8 and max(counts) < 4000 / 16 * 1.2, counts


# ---- shards made by hand --------------------------------------------------------------------------------------

def make_class(root: Path, ids=IDS) -> Path:
    folder = root / "class"
    folder.mkdir()
    for sub_id in ids:
        (folder / sub_id).write_text(f"work of {sub_id}\n")
    return folder


def make_shard(folder: Path, out: Path, k: int, n: int, *, rows=True, **options) -> dict:
    """Shard K of N as `grade-all --shard` leaves it, without grading: the kit's manifest, a row and a folder per
    assigned id (a score derived from the id). `rows`: False for none (a shard killed before its first row)."""
    entries, _, todo, _, prints = shards.prepare(folder, out, k, n, **options)
    book = {}
    for sub_id, _ in todo if rows else ():
        score = float(len(sub_id))
        book[gradebook.row_key(sub_id)] = gradebook.Row(sub_id, score, {m: score / 5 for m in MODULES}, "graded", 1.0,
                                                        "", "namespaces", prints[sub_id])
        where = gradebook.output_folder(out, sub_id)
        where.mkdir(parents=True)
        (where / "results.json").write_text(json.dumps({"score": score}))
    gradebook.write_gradebook(out, book)
    return book


def make_shards(root: Path, n: int, **options) -> list[Path]:
    folder = root / "class" if (root / "class").exists() else make_class(root)
    outs = [root / f"shard-{k}" for k in range(n)]
    for k, out in enumerate(outs):
        make_shard(folder, out, k, n, **options)
    return outs


def gradebook_lines(out: Path) -> list[str]:
    return (out / gradebook.GRADEBOOK).read_text(encoding="utf-8").splitlines()


def test_the_manifest_says_what_the_shard_was_given_and_what_graded_it(tmp_path):
    folder = make_class(tmp_path)
    entries, _, _, _, prints = shards.prepare(folder, tmp_path / "out", 2, 3, timeout=120, call_timeout=5)
    manifest = json.loads((tmp_path / "out" / "shard.json").read_text())
    assert manifest["shard"] == 2 and manifest["shards"] == 3 and manifest["format"] == shards.FORMAT
    assert [i for i, _ in manifest["submissions"]] == [i for i, _ in entries]
    assert [i for i, _ in entries] == sorted(i for i in IDS if shards.shard_of(i, 3) == 2)
    assert all(fp == prints[i] and len(fp) == 16 for i, fp in manifest["submissions"])
    versions = fingerprints.versions()
    assert {k: manifest[k] for k in versions} == versions
    assert manifest["settings"] == fingerprints.grading_settings(120, 5, {}), "the settings the fingerprints use"
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["shard.json"], "written atomically, nothing else"


def test_a_shards_folder_is_its_own(tmp_path):
    folder = make_class(tmp_path)
    shards.prepare(folder, tmp_path / "out", 0, 3)
    shards.prepare(folder, tmp_path / "out", 0, 3)  # the same shard again: resumed
    for k, n in ((1, 3), (0, 4)):
        with pytest.raises(shards.ShardError, match="holds the results of shard 0/3"):
            shards.prepare(folder, tmp_path / "out", k, n)
    with pytest.raises(shards.ShardError, match="grade the whole class into another folder"):
        shards.check_whole_run(tmp_path / "out")
    (tmp_path / "whole").mkdir()
    gradebook.write_gradebook(tmp_path / "whole", {})
    with pytest.raises(shards.ShardError, match="no shard's"):
        shards.prepare(folder, tmp_path / "whole", 0, 3)


def test_shards_merge_into_one_gradebook_laid_out_as_a_single_run(tmp_path):
    outs = make_shards(tmp_path, 3)
    merged = tmp_path / "merged"
    result = run("merge", *outs, "-o", merged)
    assert result.exit_code == 0, result.output
    assert f"{len(IDS)} rows in {merged / 'gradebook.csv'} (merged from 3 shards)" in result.output
    everyone = {}
    for out in outs:
        everyone.update(gradebook.read_gradebook(out))
    single = tmp_path / "single"
    single.mkdir()
    gradebook.write_gradebook(single, everyone)  # what one run writes for the same rows: grade-all's order
    assert gradebook_lines(merged) == gradebook_lines(single)
    assert gradebook_lines(merged)[0] == ",".join(gradebook.COLUMNS)
    folders = sorted(p.name for p in merged.iterdir())
    assert folders == sorted([gradebook.output_folder(merged, i).name for i in IDS]
                             + ["gradebook.csv", "class.html", "class.csv"])
    assert "gradebook.csv~" in folders and "shard.json~" in folders and "new\nline" in folders
    assert not (merged / "shard.json").exists()
    for sub_id in IDS:
        copied = json.loads((gradebook.output_folder(merged, sub_id) / "results.json").read_text())
        assert copied == {"score": float(len(sub_id))}
    again = run("merge", *outs, "-o", merged)  # into a previous merge: replaced, the same
    assert again.exit_code == 0 and gradebook_lines(merged) == gradebook_lines(single), again.output


def test_a_shard_or_merge_run_again_after_a_kill_leaves_nothing_of_the_killed_writes(tmp_path):
    """A shard killed while writing its manifest leaves `.shard.json.<random>` in its folder, a merge killed
    halfway its fresh folder beside OUT (`.<name>.merging-<random>`, or the earlier merge it was swapping out,
    `.<name>.replaced-<pid>`); run again, each removes them, so that its folder holds what one run would have
    written, and nothing of them stays beside it."""
    folder = make_class(tmp_path)
    shard = tmp_path / "shard-0"
    shard.mkdir()
    (shard / ".shard.json.k1ll3d").write_text("half of a manifest")
    outs = [shard] + [tmp_path / f"shard-{k}" for k in (1, 2)]
    for k, out in enumerate(outs):
        make_shard(folder, out, k, 3)
    assert ".shard.json.k1ll3d" not in os.listdir(shard), "the killed manifest's beginning is still there"
    merged = tmp_path / "merged"
    (tmp_path / ".merged.merging-k1ll3d" / "ann").mkdir(parents=True)
    (tmp_path / ".merged.merging-k1ll3d" / "ann" / "results.json").write_text("half a copy")
    (tmp_path / ".merged.replaced-12345").mkdir()
    result = run("merge", *outs, "-o", merged)
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in merged.iterdir()) == sorted(
        [gradebook.output_folder(merged, i).name for i in IDS] + ["gradebook.csv", "class.html", "class.csv"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["class", "merged", "shard-0", "shard-1", "shard-2"]


def test_merge_refuses_shards_graded_differently_saying_what_and_where(tmp_path):
    outs = make_shards(tmp_path, 3)
    manifest = json.loads((outs[2] / "shard.json").read_text())
    manifest["graders_sha256"] = "0" * 64
    (outs[2] / "shard.json").write_text(json.dumps(manifest))
    result = run("merge", *outs, "-o", tmp_path / "merged")
    assert result.exit_code == 2, result.output
    assert "graders_sha256" in result.output and f"shard 2 ({outs[2]}) has \"{'0' * 64}\"" in result.output
    assert not (tmp_path / "merged").exists(), "expected nothing written"


def test_merge_refuses_other_settings_and_other_kits(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    folder = make_class(tmp_path)
    make_shard(folder, tmp_path / "a" / "0", 0, 2, call_timeout=10.0)
    make_shard(folder, tmp_path / "a" / "1", 1, 2, call_timeout=20.0)
    result = run("merge", tmp_path / "a" / "0", tmp_path / "a" / "1", "-o", tmp_path / "m")
    assert result.exit_code == 2 and "settings" in result.output and '"call_timeout": 20.0' in result.output, \
        result.output
    make_shard(folder, tmp_path / "b" / "0", 0, 2)
    manifest = json.loads((tmp_path / "b" / "0" / "shard.json").read_text())
    manifest["kit"] = "0.9.0"
    (tmp_path / "b" / "0" / "shard.json").write_text(json.dumps(manifest))
    result = run("merge", tmp_path / "b" / "0", tmp_path / "a" / "0", "-o", tmp_path / "m")
    assert result.exit_code == 2 and "kit: " in result.output and '"0.9.0"' in result.output, result.output


def test_merge_refuses_shards_of_another_n(tmp_path):
    folder = make_class(tmp_path)
    make_shard(folder, tmp_path / "s0", 0, 2)
    make_shard(folder, tmp_path / "s1", 1, 3)
    result = run("merge", tmp_path / "s0", tmp_path / "s1", "-o", tmp_path / "m")
    assert result.exit_code == 2 and "shards: " in result.output, result.output


def test_merge_refuses_what_is_no_shard_and_an_output_that_overlaps_one(tmp_path):
    outs = make_shards(tmp_path, 2)
    (tmp_path / "whole").mkdir()
    gradebook.write_gradebook(tmp_path / "whole", {})
    result = run("merge", outs[0], tmp_path / "whole", "-o", tmp_path / "m")
    assert result.exit_code == 2 and "no shard's output" in result.output, result.output
    for target in (outs[1], outs[1] / "merged", tmp_path):
        result = run("merge", *outs, "-o", target)
        assert result.exit_code == 2 and "overlap" in result.output, (target, result.output)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["class", "shard-0", "shard-1", "whole"]


def test_merge_lists_missing_shards_and_shards_given_twice(tmp_path):
    outs = make_shards(tmp_path, 3)
    result = run("merge", outs[0], outs[2], outs[2], "-o", tmp_path / "merged")
    assert result.exit_code == 1, result.output
    assert "shards not given (of 3, counting from 0): 1" in result.output
    assert f"shards given more than once: shard 2 in {outs[2]}, {outs[2]}" in result.output
    assert not (tmp_path / "merged").exists()


def test_merge_lists_the_ids_of_an_unfinished_shard(tmp_path):
    """A shard killed (or still running): its manifest is there, some rows are not. Nothing is guessed."""
    folder = make_class(tmp_path)
    outs = [tmp_path / f"s{k}" for k in range(3)]
    for k, out in enumerate(outs):
        make_shard(folder, out, k, 3, rows=k != 1)
    assigned = [i for i in sorted(IDS) if shards.shard_of(i, 3) == 1]
    result = run("merge", *outs, "-o", tmp_path / "merged")
    assert result.exit_code == 1, result.output
    from autograder.report.model import safe_line

    assert f"shard 1 ({outs[1]}): assigned, no row" in result.output
    assert ", ".join(safe_line(i) for i in assigned) in result.output, "every id, each on one line"
    assert not (tmp_path / "merged").exists()


def test_merge_lists_stale_rows_and_rows_of_other_shards(tmp_path):
    outs = make_shards(tmp_path, 2)
    book = gradebook.read_gradebook(outs[0])
    victim = next(iter(book))
    book[victim].fingerprint = "0123456789abcdef"  # graded before the kit or the settings changed
    stranger = next(i for i in IDS if shards.shard_of(i, 2) == 1)
    book[gradebook.row_key(stranger)] = gradebook.Row(stranger, 1.0, {m: 0.2 for m in MODULES}, "graded", 1.0)
    gradebook.write_gradebook(outs[0], book)
    result = run("merge", *outs, "-o", tmp_path / "merged")
    assert result.exit_code == 1, result.output
    assert "rows graded from another kit, other settings or another content" in result.output
    assert "rows of submissions it was not assigned" in result.output and stranger in result.output


def test_merge_refuses_a_manifest_whose_ids_are_paths(tmp_path):
    outs = make_shards(tmp_path, 1)
    manifest = json.loads((outs[0] / "shard.json").read_text())
    for bad in ("../escape", "a/b", "..", "", ".hidden"):
        manifest["submissions"] = [[bad, "0123456789abcdef"]]
        (outs[0] / "shard.json").write_text(json.dumps(manifest))
        result = run("merge", outs[0], "-o", tmp_path / "merged")
        assert result.exit_code == 2 and "not a whole manifest" in result.output, (bad, result.output)
    assert not (tmp_path / "merged").exists() and not (tmp_path / "escape").exists()


def test_merge_never_follows_a_link_in_a_shards_output(tmp_path):
    outs = make_shards(tmp_path, 1)
    (tmp_path / "secret").mkdir()
    (tmp_path / "secret" / "key").write_text("private")
    victim = gradebook.output_folder(outs[0], "alice")
    for name in os.listdir(victim):
        os.unlink(victim / name)
    victim.rmdir()
    victim.symlink_to(tmp_path / "secret")
    result = run("merge", outs[0], "-o", tmp_path / "merged")
    assert result.exit_code == 0, result.output
    assert not (tmp_path / "merged" / "alice").exists(), "a link where a folder was expected is not copied"


# ---- a merge never leaves an earlier gradebook that passes for the current one (issue 36) -----------------------

def test_a_refused_merge_moves_the_earlier_merge_aside_and_says_where(tmp_path):
    outs = make_shards(tmp_path, 3)
    merged = tmp_path / "merged"
    assert run("merge", *outs, "-o", merged).exit_code == 0
    book = gradebook.read_gradebook(outs[1])
    del book[next(iter(book))]  # shard 1 run again and stopped before its end: a row missing
    gradebook.write_gradebook(outs[1], book)
    result = run("merge", *outs, "-o", merged)
    assert result.exit_code == 1, result.output
    (stale,) = [p for p in tmp_path.iterdir() if p.name.startswith("merged.stale-")]
    assert not merged.exists(), f"expected no {merged} after a refused merge, got {sorted(os.listdir(merged))}"
    assert f"The earlier merge that was in {merged} is now in {stale}" in result.output, result.output
    assert (stale / "gradebook.csv").is_file(), "the earlier merge kept whole, under its new name"


def test_a_merge_refused_with_no_earlier_merge_moves_nothing(tmp_path):
    outs = make_shards(tmp_path, 2)
    result = run("merge", outs[0], "-o", tmp_path / "merged")
    assert result.exit_code == 1 and "is now in" not in result.output, result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["class", "shard-0", "shard-1"]


def test_a_merge_replaces_an_earlier_merge_whole(tmp_path):
    outs = make_shards(tmp_path, 2)
    merged = tmp_path / "merged"
    merged.mkdir()
    gradebook.write_gradebook(merged, {})
    (merged / "someone-gone").mkdir()  # a submission of the earlier run, no longer in the class
    result = run("merge", *outs, "-o", merged)
    assert result.exit_code == 0, result.output
    assert not (merged / "someone-gone").exists(), "expected the earlier merge replaced whole, not mixed in"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["class", "merged", "shard-0", "shard-1"]


def test_a_merge_never_replaces_a_folder_that_is_no_merge(tmp_path):
    outs = make_shards(tmp_path, 2)
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("mine")
    result = run("merge", *outs, "-o", tmp_path / "mine")
    assert result.exit_code == 2 and "holds no earlier merge" in result.output, result.output
    assert os.listdir(tmp_path / "mine") == ["notes.txt"]


def test_a_shard_never_started_is_unfinished_not_a_refusal(tmp_path):
    """The merge of a cluster run gets every shard's folder, those of tasks that never ran too: a folder not
    there, or with nothing but the lock of a run stopped before its manifest, is a shard to run again (exit 1)."""
    folder = make_class(tmp_path)
    outs = [tmp_path / f"shard-{k}" for k in range(4)]
    for k in (0, 1):
        make_shard(folder, outs[k], k, 4)
    outs[2].mkdir()
    (outs[2] / outlock.LOCK).write_text("")  # shard 2: stopped before its manifest; shard 3: never started
    result = run("merge", *outs, "-o", tmp_path / "merged")
    assert result.exit_code == 1, result.output
    assert "nothing in them yet (the shard never started" in result.output
    assert f"{outs[2]}, {outs[3]}" in result.output and "shards not given (of 4, counting from 0): 2, 3" in \
        result.output, result.output


def test_unfinished_lists_the_shards_to_run_again_and_nothing_once_all_are_done(tmp_path):
    folder = make_class(tmp_path)
    results = tmp_path / "shards"
    make_shard(folder, results / "0", 0, 4)
    make_shard(folder, results / "1", 1, 4, rows=False)  # stopped before its first row
    make_shard(folder, results / "3", 3, 4)  # shard 2: never started
    result = run("unfinished", results, 4)
    assert (result.exit_code, result.output.split()) == (0, ["1", "2"]), result.output
    make_shard(folder, results / "1", 1, 4)
    make_shard(folder, results / "2", 2, 4)
    result = run("unfinished", results, 4)
    assert (result.exit_code, result.output) == (0, ""), result.output
    result = run("unfinished", results, 5)
    assert result.exit_code == 2 and "holds shard 0/4, not 0/5" in result.output, result.output
