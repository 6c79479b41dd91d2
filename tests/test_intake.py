"""Submissions that reach outside themselves: the grader's intake (autograder/submission/intake.py).

The trusted grader reads a submission before anything is confined, as root or
as the instructor. Whatever it reads through a symbolic link, a FIFO, a huge
file or a hostile zip would be read on the student's behalf. Each test plants
one such file and checks that the intake takes only the regular files inside
the submission, names what it left out, and ends in bounded time; the
corpus cases in tests/corpus/attacks.toml (section "the grader's intake")
grade the same attacks end to end. A crowd of files is bounded by the work
the intake does (the folder entries it lists, counted), never by the clock.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import stat
import tempfile
import threading
import time
import zipfile
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from autograder.grade.engine import grade
from autograder.submission.take import SubmissionError, taken
from autograder.report.model import GradeReport
from autograder.sandbox.client import Sandbox
from autograder.sandbox.errors import StudentError
from autograder.submission import folder as folders, forms, intake, zips
from tests.conftest import MODULES, SOLUTIONS
from tests.corpus import CorpusError, ZIP_FOLDER, load_attacks, materialize


def _reference(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for module in MODULES:
        shutil.copyfile(SOLUTIONS / f"{module}.py", folder / f"{module}.py")
    return folder


def _taken(path):
    """(sorted file names of the private copy, notes, missing) of `path` as the engine takes it in."""
    with taken(path) as got:
        return sorted(os.listdir(got.folder)), got.notes, got.missing


def _zip(path: Path, entries, folder="sub") -> Path:
    """A zip of the reference modules under `folder`/, then `entries`: (name, data, mode or None)."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for module in MODULES:
            if not any(name == f"{folder}/{module}.py" for name, _, _ in entries):
                zf.write(SOLUTIONS / f"{module}.py", f"{folder}/{module}.py")
        for name, data, mode in entries:
            info = zipfile.ZipInfo(name, (2024, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            if mode is not None:
                info.external_attr = mode << 16
            zf.writestr(info, data)
    return path


# -- folders ------------------------------------------------------------------------------------
def test_a_symlinked_module_is_not_taken_and_is_named(tmp_path):
    folder = _reference(tmp_path / "sub")
    (folder / "mha.py").unlink()
    (folder / "mha.py").symlink_to(SOLUTIONS / "mha.py")
    (folder / "zz.py").symlink_to("/etc/passwd")
    files, notes, missing = _taken(folder)
    assert "mha.py" not in files and "zz.py" not in files, (
        f"expected the links mha.py (-> the reference) and zz.py (-> /etc/passwd) left out of the private copy, "
        f"got {files}")
    assert {"attention.py", "heads.py", "masks.py", "positional.py"} <= set(files), f"expected the others, got {files}"
    assert notes.get("zz.py", "").startswith("zz.py is a symbolic link: not graded"), (
        f"expected a note 'zz.py is a symbolic link: not graded', got {notes}")
    assert missing.get("mha", "").startswith("mha.py is a symbolic link: not graded"), (
        f"expected mha missing because it is a link, got {missing}")


def test_a_symlinked_folder_is_never_entered(tmp_path):
    """The modules' folder is searched below the root; a linked folder (here to a complete submission outside)
    is never entered, nor a link standing for the folder holding the modules."""
    outside = _reference(tmp_path / "outside")
    root = tmp_path / "submission"
    root.mkdir()
    (root / "work").symlink_to(outside, target_is_directory=True)
    files, notes, missing = _taken(root)
    assert files == [], f"expected nothing taken through the linked folder work -> {outside}, got {files}"
    assert notes == {"work": "work is a symbolic link: not graded (links are never followed: submit the file or "
                             "folder itself, not a link to it)"}, f"expected the link named, got {notes}"
    nested = tmp_path / "nested"
    _reference(nested / "inner")
    (nested / "inner" / "lib").symlink_to(outside, target_is_directory=True)
    files, _, _ = _taken(nested)
    assert files == sorted(f"{m}.py" for m in MODULES), f"expected the five modules of inner/ only, got {files}"


def test_a_fifo_named_like_a_module_or_notebook_neither_hangs_nor_is_taken(tmp_path):
    folder = _reference(tmp_path / "sub")
    (folder / "attention.py").unlink()
    os.mkfifo(folder / "attention.py")
    (folder / "mha.py").unlink()
    os.mkfifo(folder / "04_mha.ipynb")  # a notebook is read only when its .py is missing: it would be read
    result = {}
    worker = threading.Thread(target=lambda: result.update(got=_taken(folder)), daemon=True)
    start = time.monotonic()
    worker.start()
    worker.join(20)
    if worker.is_alive():  # release the reader we are stuck on, then fail
        for name in ("attention.py", "04_mha.ipynb"):
            try:
                os.close(os.open(folder / name, os.O_WRONLY | os.O_NONBLOCK))
            except OSError:
                pass
        pytest.fail("expected the intake to leave FIFOs alone, it blocked reading one for 20 s")
    files, notes, missing = result["got"]
    assert time.monotonic() - start < 10
    assert "attention.py" not in files and "mha.py" not in files, f"expected no FIFO taken, got {files}"
    assert "named pipe" in notes.get("attention.py", "") and "named pipe" in notes.get("04_mha.ipynb", ""), (
        f"expected both FIFOs named as named pipes, got {notes}")
    assert "04_mha.ipynb" in missing.get("mha", ""), f"expected mha missing because of its notebook, got {missing}"


def test_a_huge_sparse_module_is_refused_by_its_size_without_reading_it(tmp_path):
    folder = _reference(tmp_path / "sub")
    with open(folder / "positional.py", "r+b") as fh:
        fh.truncate(10 << 30)  # 10 GiB, sparse: nothing on disk
    start = time.monotonic()
    files, notes, missing = _taken(folder)
    seconds = time.monotonic() - start
    assert "positional.py" not in files, f"expected the 10 GiB positional.py left out, got {files}"
    assert notes.get("positional.py") == "positional.py is 10 GiB, over the 8 MiB limit: not graded", (
        f"expected the size and the limit in the note, got {notes}")
    assert "positional" in missing
    assert seconds < 5, f"expected the refusal at once (by its size), it took {seconds:.1f} s"


def test_reading_stops_at_the_limit_whatever_the_size_says(tmp_path):
    """/proc files say they hold 0 bytes: the limit is enforced on the bytes read, not on st_size."""
    with pytest.raises(intake.Refused, match="over the 100 bytes limit"):
        intake.read_regular("/proc/self/maps", 100, "maps.py")
    assert intake.read_regular("/proc/self/maps", 1 << 20, "maps.py"), "expected a regular /proc file to be read"


@pytest.mark.parametrize("make, kind", [
    (lambda p: p.symlink_to("/etc/hostname"), "a symbolic link"),
    (lambda p: os.mkfifo(p), "a named pipe"),
    (lambda p: p.mkdir(), "a folder"),
])
def test_read_regular_refuses_what_is_not_a_regular_file(tmp_path, make, kind):
    path = tmp_path / "attention.py"
    make(path)
    with pytest.raises(intake.Refused) as info:
        intake.read_regular(path, 1 << 20)
    assert str(info.value).startswith(f"attention.py is {kind}"), f"expected '... is {kind}', got {info.value}"


def test_a_symlinked_notebook_is_not_read(tmp_path):
    """A notebook (here one that holds the reference's mha) linked from outside the submission is never read."""
    outside = tmp_path / "outside.ipynb"
    nbformat.write(new_notebook(cells=[new_code_cell((SOLUTIONS / "mha.py").read_text())]), outside)
    folder = _reference(tmp_path / "sub")
    (folder / "mha.py").unlink()
    (folder / "04_mha.ipynb").symlink_to(outside)
    files, notes, missing = _taken(folder)
    assert "mha.py" not in files, f"expected no mha.py made from the linked notebook, got {files}"
    assert notes.get("04_mha.ipynb", "").startswith("04_mha.ipynb is a symbolic link"), notes
    assert missing.get("mha", "").startswith("04_mha.ipynb is a symbolic link"), missing
    from autograder.submission.intake import MAX_FILE, Refused, read_regular

    with pytest.raises(Refused, match="symbolic link"):  # the one reader of a submission's files refuses it
        read_regular(folder / "04_mha.ipynb", MAX_FILE[".ipynb"], "04_mha.ipynb")


def test_a_regular_notebook_is_still_converted(tmp_path):
    folder = _reference(tmp_path / "sub")
    (folder / "mha.py").unlink()
    nbformat.write(new_notebook(cells=[new_code_cell((SOLUTIONS / "mha.py").read_text())]), folder / "04_mha.ipynb")
    files, notes, missing = _taken(folder)
    assert "mha.py" in files and not notes and not missing, (files, notes, missing)


@pytest.mark.grading  # starts a student process
def test_the_sandbox_copies_only_regular_files(tmp_path):
    """The sandbox's own copy into the student's folder (used directly, without the engine) takes regular
    files only, and a module it leaves out fails its checks with the reason."""
    folder = _reference(tmp_path / "sub")
    (folder / "zz.py").symlink_to("/etc/passwd")
    (folder / "mha.py").unlink()
    (folder / "mha.py").symlink_to(SOLUTIONS / "mha.py")
    os.mkfifo(folder / "yy.py")
    with open(folder / "huge.py", "wb") as fh:
        fh.truncate(10 << 30)
    box = Sandbox(folder, isolation="none")
    try:
        box.start()
        copied = sorted(os.listdir(box._work))
        with pytest.raises(StudentError) as info:
            box.request("mha", "call")
    finally:
        box.close()
    assert copied == ["attention.py", "heads.py", "masks.py", "positional.py"], (
        f"expected only the regular modules copied for the student, got {copied}")
    assert set(box.refused) == {"zz.py", "yy.py", "huge.py", "mha.py"}, box.refused
    assert info.value.kind == "missing" and "mha.py is a symbolic link" in str(info.value), (
        f"expected mha missing as a link, got {info.value.kind}: {info.value}")


# -- zips -------------------------------------------------------------------------------------------
def test_zip_entries_that_climb_out_are_not_written(tmp_path):
    marker = tmp_path / "escaped"
    entries = [("sub/../sub/masks.py", "x = 1\n", None),
               (f"../../../../../../..{marker}/masks.py", "x = 1\n", None),
               (f"{marker}-absolute/masks.py", "x = 1\n", None)]
    files, notes, _ = _taken(_zip(tmp_path / "s.zip", entries))
    assert files == sorted(f"{m}.py" for m in MODULES), f"expected the five modules of sub/, got {files}"
    assert not marker.exists() and not Path(f"{marker}-absolute").exists(), "expected nothing written outside"
    assert set(notes) == {name for name, _, _ in entries}, f"expected each climbing entry named, got {notes}"
    assert all("absolute path or climbs with '..'" in n for n in notes.values()), notes


def test_a_zip_symlink_entry_is_not_made_nor_read(tmp_path):
    from autograder.release import ASSIGNMENT_DIR

    files, notes, missing = _taken(_zip(tmp_path / "s.zip", [
        ("sub/mha.py", str(SOLUTIONS / "mha.py"), stat.S_IFLNK | 0o777),
        ("sub/lib", str(SOLUTIONS), stat.S_IFLNK | 0o777),
        ("sub/02_heads.ipynb", str(ASSIGNMENT_DIR / "02_heads.ipynb"), stat.S_IFLNK | 0o777),
        ("sub/03_masks.ipynb", "../../../../../../../.." + str(ASSIGNMENT_DIR / "03_masks.ipynb"),
         stat.S_IFLNK | 0o777)]))
    assert "mha.py" not in files, f"expected the link entry mha.py left out, got {files}"
    assert notes.get("sub/mha.py", "").startswith("sub/mha.py is a symbolic link: not graded"), notes
    assert notes.get("sub/lib", "").startswith("sub/lib is a symbolic link"), notes
    for name in ("sub/02_heads.ipynb", "sub/03_masks.ipynb"):  # beside the reference heads.py, masks.py
        assert notes.get(name, "").startswith(f"{name} is a symbolic link: not graded"), notes
    assert "mha" in missing and "heads" not in missing and "masks" not in missing, missing


def test_a_zip_bomb_is_refused_before_it_is_unpacked(tmp_path):
    path = tmp_path / "bomb.zip"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        with zf.open("sub/weights.bin", "w") as fh:
            for _ in range(64):
                fh.write(bytes(1 << 20))
    start = time.monotonic()
    with pytest.raises(SubmissionError, match=r"unpacks to 64 MiB, over the 50 MiB limit"):
        _taken(path)
    assert time.monotonic() - start < 2


def test_a_zip_module_over_its_own_limit_is_left_out(tmp_path):
    files, notes, missing = _taken(_zip(tmp_path / "s.zip", [("sub/positional.py", "#" * (9 << 20), None)]))
    assert "positional.py" not in files
    assert notes == {"sub/positional.py": "sub/positional.py unpacks to 9 MiB, over the 8 MiB limit: not graded"}, notes


def test_a_zip_entry_that_lies_about_its_size_gains_nothing(tmp_path):
    """An entry whose header says 100 bytes and whose data inflates to 9 MiB: at most what the header says
    comes out, the checksum fails, the module is left out and named."""
    path = _zip(tmp_path / "s.zip", [("sub/masks.py", "#" * (9 << 20), None)])
    data = bytearray(path.read_bytes())
    small = (100).to_bytes(4, "little")
    with zipfile.ZipFile(path) as zf:
        local = zf.getinfo("sub/masks.py").header_offset
    data[local + 22:local + 26] = small  # the local header's uncompressed size
    at = data.find(b"PK\x01\x02")
    while at >= 0:  # the central directory's
        if data[at + 46:at + 46 + len("sub/masks.py")] == b"sub/masks.py":
            data[at + 24:at + 28] = small
        at = data.find(b"PK\x01\x02", at + 4)
    path.write_bytes(bytes(data))
    files, notes, missing = _taken(path)
    assert "masks.py" not in files, f"expected the lying masks.py left out, got {files}"
    assert "cannot be unpacked" in notes.get("sub/masks.py", ""), notes
    assert "masks" in missing


def test_a_zip_of_too_many_entries_is_refused_unparsed(tmp_path):
    path = _zip(tmp_path / "many.zip", [(f"sub/junk/{i}.txt", "", None) for i in range(3000)])
    start = time.monotonic()
    with pytest.raises(SubmissionError, match="holds 3005 entries.*at most 1000"):
        _taken(path)
    assert time.monotonic() - start < 2


def test_an_unreadable_zip_is_still_a_submission_error(tmp_path):
    (tmp_path / "x.zip").write_bytes(b"PK\x03\x04 not a zip at all")
    with pytest.raises(SubmissionError, match="neither a folder, a notebook nor a zip"):
        _taken(tmp_path / "x.zip")


def test_a_plain_zip_and_a_plain_folder_are_taken_whole(tmp_path):
    files, notes, missing = _taken(_zip(tmp_path / "s.zip", [], folder="student"))
    assert files == sorted(f"{m}.py" for m in MODULES) and not notes and not missing
    files, notes, missing = _taken(SOLUTIONS)
    assert set(f"{m}.py" for m in MODULES) <= set(files) and not notes and not missing


# -- the report ---------------------------------------------------------------------------------
@pytest.mark.grading
def test_a_linked_module_costs_its_own_checks_and_the_report_says_why(tmp_path):
    folder = _reference(tmp_path / "sub")
    (folder / "mha.py").unlink()
    (folder / "mha.py").symlink_to(SOLUTIONS / "mha.py")
    (folder / "zz.py").symlink_to("/proc/self/environ")
    report = grade(folder, select="mha or masks", call_timeout=30)
    modules = report.modules()
    assert modules["mha"][0] == 0 and modules["masks"][0] == modules["masks"][1] > 0, (
        f"expected mha (a link to the reference) to earn nothing and masks full marks, got {modules}")
    reasons = {t.message for t in report.tests if t.module == "mha" and t.status == "failed"}
    assert any("mha.py is a symbolic link: not graded" in r for r in reasons), reasons
    text = report.to_text()
    assert "Files not graded (2):" in text and "zz.py is a symbolic link: not graded" in text, text
    assert report.to_dict()["notes"] == report.notes
    assert "zz.py is a symbolic link" in report.to_gradescope()["output"]


def test_hostile_file_names_in_notes_are_shown_escaped():
    report = GradeReport(submission="s", notes=["\x1b[2J\nTotal: 100/100.py is a symbolic link: not graded"])
    text = report.to_text()
    assert "\x1b" not in text and "\nTotal: 100/100.py" not in text, text
    assert "\\x1b[2J\\nTotal: 100/100.py is a symbolic link" in text


# -- the corpus keys for intake attacks (tests/corpus/__init__.py) ---------------------------------------
@pytest.mark.parametrize("entry, error", [
    ('[[attack.link]]\nname = "../mha.py"\ntarget = "/etc/passwd"', "a path inside the submission"),
    ('[[attack.link]]\nname = "mha.py"\ntarget = "/x"\nmode = 1', "exactly the non-empty string keys name, target"),
    ('form = "tar"\n[[attack.link]]\nname = "mha.py"\ntarget = "/x"', "form 'tar' is not one of"),
    ('form = "zip"\n[[attack.link]]\nname = "mha.py"\ntarget = "/x"', "[[attack.link]] is for a folder"),
    ('[[attack.zip_entry]]\nname = "a.py"\ncontent = "x"', 'needs form = "zip"'),
    ('form = "zip"\n[[attack.zip_entry]]\nname = "a.py"\ncontent = "x"\nlink = "/y"', "exactly one of content"),
    ('form = "zip"\n[[attack.zip_entry]]\nname = "a.py"\nzeros = -1', "zeros must be"),
    ('form = "zip"\n[[attack.zip_entry]]\nname = "a.py"\ncontent = ""\nrepeat = 3', "needs ${index}"),
    ('pad_to = 1073741824', "pad_to must be"),
    ('refused = "x"\npasses = ["test_x"]\npad_to = 10', "a refused submission earns nothing"),
    ('form = "zip"', "needs an [[attack.file]]"),
])
def test_loader_rejects_malformed_intake_cases(tmp_path, entry, error):
    path = tmp_path / "attacks.toml"
    path.write_text(f'[[attack]]\nid = "x"\nattack = "symlinks"\nmodule = "mha"\ndescription = "d"\n{entry}\n')
    with pytest.raises(CorpusError, match=re.escape(error)):
        load_attacks(path)


def _case(tmp_path, body):
    path = tmp_path / "attacks.toml"
    path.write_text(f'[[attack]]\nid = "x"\nattack = "symlinks"\nmodule = "mha"\ndescription = "d"\n{body}\n')
    return load_attacks(path)[0]


def test_materialize_makes_links_and_never_writes_through_them(tmp_path):
    case = _case(tmp_path, '[[attack.link]]\nname = "mha.py"\ntarget = "${solutions}/mha.py"\n'
                           '[[attack.link]]\nname = "lib"\ntarget = "${kit}"')
    before = (SOLUTIONS / "mha.py").read_bytes()
    for _ in range(2):  # the second run meets the first run's links
        folder = materialize(case, tmp_path / "case", SOLUTIONS, params={})
    assert os.readlink(folder / "mha.py") == str(SOLUTIONS.resolve() / "mha.py")
    assert os.readlink(folder / "lib") == str(SOLUTIONS.resolve().parent)
    assert (SOLUTIONS / "mha.py").read_bytes() == before, "materialize wrote through a link into the reference"


def test_materialize_zip_form_and_padding(tmp_path):
    case = _case(tmp_path, 'form = "zip"\npad_to = 1000000\n'
                           '[[attack.zip_entry]]\nname = "../${marker}.py"\ncontent = "x = 1"\n'
                           '[[attack.zip_entry]]\nname = "submission/zz.py"\nlink = "${solutions}/mha.py"\n'
                           '[[attack.zip_entry]]\nname = "junk/${index}"\ncontent = ""\nrepeat = 3\n'
                           '[[attack.zip_entry]]\nname = "bomb.bin"\nzeros = 3000000')
    path = materialize(case, tmp_path / "case", SOLUTIONS, params={"marker": "m"})
    assert path == tmp_path / "case.zip"
    with zipfile.ZipFile(path) as zf:
        infos = {i.filename: i for i in zf.infolist()}
        assert {f"{ZIP_FOLDER}/{m}.py" for m in MODULES} | {"../m.py", "junk/0", "junk/1", "junk/2", "bomb.bin"} \
            <= set(infos), sorted(infos)
        assert infos[f"{ZIP_FOLDER}/mha.py"].file_size >= 1_000_000, "expected mha.py padded to pad_to bytes"
        links = [i for i in zf.infolist() if stat.S_ISLNK(i.external_attr >> 16)]
        assert [zf.read(i).decode() for i in links] == [str(SOLUTIONS.resolve() / "mha.py")]
        assert infos["bomb.bin"].file_size == 3_000_000 and infos["bomb.bin"].compress_size < 30_000


def test_the_corpus_has_a_case_per_intake_attack():
    cases = {c.id: c for c in load_attacks()}
    expected = {"symlink-module-to-reference", "symlink-outside-shadow", "symlink-outside-proc-self",
                "symlinked-folder-to-kit", "zip-traversal-entries", "zip-symlink-entry", "zip-bomb",
                "zip-many-entries", "module-over-size-limit", "symlink-notebook-to-instructor",
                "symlink-notebook-relative-to-instructor", "zip-symlink-notebook-entry",
                "symlink-module-to-other-student", "intake-many-small-files", "zip-top-folder-named-like-a-notebook",
                "classroom-links-through-the-kit-checkout", "class-id-names-the-gradebook"}
    assert expected <= set(cases), f"missing intake cases: {sorted(expected - set(cases))}"
    assert cases["zip-bomb"].refused and cases["zip-many-entries"].refused
    assert cases["symlink-module-to-other-student"].scenario == "other-student"


# -- one form of each module: the one with the student's work --------------------------------------------
def _template_copy(folder: Path, py_from: Path | None = None, notebooks_from: Path | None = None) -> Path:
    """A copy of student_template/ (a student's working folder), its .py modules and notebooks replaced by
    those of `py_from` and `notebooks_from` where given."""
    from autograder.release import NOTEBOOKS, TEMPLATE_DIR

    shutil.copytree(TEMPLATE_DIR, folder)
    for module, name in NOTEBOOKS.items():
        if py_from:
            shutil.copyfile(py_from / f"{module}.py", folder / f"{module}.py")
        if notebooks_from:
            shutil.copyfile(notebooks_from / name, folder / name)
    return folder


@pytest.mark.grading
def test_solved_notebooks_beside_untouched_stubs_are_graded_and_the_report_says_so(tmp_path):
    """The notebook trap: a copy of the template with the notebooks solved and the .py stubs left alone."""
    from autograder.release import ASSIGNMENT_DIR

    folder = _template_copy(tmp_path / "student", notebooks_from=ASSIGNMENT_DIR)
    report = grade(folder)
    assert report.score == 100, [f"{t.id}: {t.message}" for t in report.failed()]
    assert report.notes == ["attention.py, heads.py, masks.py, mha.py and positional.py: not graded: "
                            "01_attention.ipynb, 02_heads.ipynb, 03_masks.ipynb, 04_mha.ipynb and 05_positional.ipynb "
                            "were graded instead (the .py files are the untouched template and the notebooks hold "
                            "your work)"], report.notes  # said once, not once a module
    assert "Files not graded (1):" in report.to_text()


@pytest.mark.grading
def test_a_py_folder_beside_the_untouched_notebooks_says_nothing_of_them(tmp_path, warm_servers):
    """Issue 35: every report of a student who worked in the .py files of the released folder said five times
    "01_attention.ipynb: not graded: attention.py was graded instead (...)". The .py file is graded first, and
    the notebooks are the untouched template: nothing needs saying."""
    folder = _template_copy(tmp_path / "student", py_from=SOLUTIONS)
    report = grade(folder, servers=warm_servers)
    text = report.to_text()
    assert report.score == 100, [f"{t.id}: {t.message}" for t in report.failed()]
    assert "graded instead" not in text and not report.notes, f"expected no note of the notebooks, got:\n{text}"


def test_solved_stubs_beside_untouched_notebooks_grade_the_py_files(tmp_path):
    files, notes, missing = _taken(_template_copy(tmp_path / "student", py_from=SOLUTIONS))
    assert not missing
    with taken(tmp_path / "student") as got:
        for module in MODULES:
            assert (got.folder / f"{module}.py").read_bytes() == (SOLUTIONS / f"{module}.py").read_bytes(), module
    assert notes == {}, notes  # the .py files are graded first, the notebooks are the template: nothing to say


def test_when_both_forms_hold_work_the_py_file_is_graded(tmp_path):
    from autograder.release import ASSIGNMENT_DIR

    folder = _template_copy(tmp_path / "student", py_from=SOLUTIONS, notebooks_from=ASSIGNMENT_DIR)
    with taken(folder) as got:
        assert (got.folder / "mha.py").read_bytes() == (SOLUTIONS / "mha.py").read_bytes()
        assert got.notes == {"01_attention.ipynb": (
            "01_attention.ipynb, 02_heads.ipynb, 03_masks.ipynb, 04_mha.ipynb and 05_positional.ipynb: not graded: "
            "attention.py, heads.py, masks.py, mha.py and positional.py were graded instead (both hold work, and then "
            "the .py file is graded: hand in one form of each module, not both)")}, got.notes  # once, not five times


def test_the_untouched_template_grades_its_py_files_and_says_nothing_of_the_notebooks(tmp_path):
    """Both forms of each module are the template: its checks say the module is not started, nothing more."""
    files, notes, missing = _taken(_template_copy(tmp_path / "student"))
    assert {f"{m}.py" for m in MODULES} <= set(files), files
    assert not notes and not missing, (notes, missing)


def test_a_zip_of_the_notebook_trap_grades_the_notebooks(tmp_path):
    from autograder.release import ASSIGNMENT_DIR

    folder = _template_copy(tmp_path / "student", notebooks_from=ASSIGNMENT_DIR)
    archive = tmp_path / "student.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for path in sorted(folder.iterdir()):
            zf.write(path, f"student/{path.name}")
    with taken(archive) as got:
        assert (got.folder / "heads.py").read_text().startswith('"""heads.py, taken from 02_heads.ipynb')
        assert list(got.notes) == ["student/attention.py"] and got.notes["student/attention.py"].startswith(
            "student/attention.py, student/heads.py, student/masks.py, student/mha.py and student/positional.py: not "
            "graded: student/01_attention.ipynb, student/02_heads.ipynb"), got.notes


def test_a_form_counts_as_untouched_whatever_its_layout_outputs_and_comments(tmp_path):
    """Running the template notebook (outputs, execution counts), editing its text cells, saving a stub
    with CRLF line ends or a new comment: still no work; a changed line of code is work."""
    from autograder.release import NOTEBOOKS, TEMPLATE_DIR

    nb = nbformat.read(TEMPLATE_DIR / NOTEBOOKS["masks"], as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.execution_count = 3
            cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text="ran\n")]
        else:
            cell.source += "\n\nMy notes."
    ran = nbformat.writes(nb).encode()
    assert forms.is_template("masks", "03_masks.ipynb", ran)
    stub = (TEMPLATE_DIR / "masks.py").read_text()
    assert forms.is_template("masks", "masks.py", (stub.replace("\n", "\r\n") + "# started\n").encode())
    started = stub.replace("raise NotImplementedError()", "return None")
    assert not forms.is_template("masks", "masks.py", started.encode())
    for cell in nb.cells:
        if cell.metadata.get("nbgrader", {}).get("grade_id") == "masks-code":
            cell.source = cell.source.replace("raise NotImplementedError()", "return None")
    assert not forms.is_template("masks", "03_masks.ipynb", nbformat.writes(nb).encode())


# -- links to the instructor's notebooks and to another student's files ---------------------------------
@pytest.mark.parametrize("relative", [False, True], ids=["absolute", "relative"])
def test_notebooks_linked_to_the_instructors_are_not_read(tmp_path, relative):
    """Five links 0N_x.ipynb -> the instructor's solved assignments/mha/0N_x.ipynb and no code: nothing is
    taken, each link is named, and each module is missing because of its link."""
    from autograder.release import ASSIGNMENT_DIR, NOTEBOOKS

    folder = tmp_path / "sub"
    folder.mkdir()
    for name in NOTEBOOKS.values():
        target = ASSIGNMENT_DIR / name
        (folder / name).symlink_to(os.path.relpath(target, folder) if relative else target)
    files, notes, missing = _taken(folder)
    assert files == [], f"expected nothing made from the linked notebooks, got {files}"
    for module, name in NOTEBOOKS.items():
        assert notes.get(name, "").startswith(f"{name} is a symbolic link: not graded"), notes
        assert missing.get(module, "").startswith(f"{name} is a symbolic link: not graded"), missing


def test_links_to_a_sibling_submission_are_not_followed(tmp_path):
    """A class folder (grade-all): bob's modules are links ../alice/<module>.py, carol's notebooks links to
    dave's notebooks, erin's folder a link to alice's: none of them takes a byte of the other's work."""
    from autograder.release import ASSIGNMENT_DIR, NOTEBOOKS

    klass = tmp_path / "class"
    _reference(klass / "alice")
    dave = klass / "dave"
    dave.mkdir(parents=True)
    for name in NOTEBOOKS.values():
        shutil.copyfile(ASSIGNMENT_DIR / name, dave / name)
    for student, links in {"bob": {f"{m}.py": f"../alice/{m}.py" for m in MODULES},
                           "carol": {name: f"../dave/{name}" for name in NOTEBOOKS.values()},
                           "erin": {"work": "../alice"}}.items():
        (klass / student).mkdir()
        for name, target in links.items():
            (klass / student / name).symlink_to(target)
        files, notes, missing = _taken(klass / student)
        assert files == [], f"{student}: expected nothing taken through links to a sibling, got {files}"
        assert set(notes) == set(links) and all("is a symbolic link: not graded" in n for n in notes.values()), (
            f"{student}: expected each link named, got {notes}")
        assert not any(str(tmp_path) in n for n in notes.values()), notes


# -- a folder named like a module or a notebook is a folder ------------------------------------------------
@pytest.mark.grading
def test_a_zip_of_one_folder_named_like_a_notebook_is_graded(tmp_path):
    """A zip whose only top folder is `01_attention.ipynb/`, holding a correct submission: graded in full, and
    no message names a path of the grading machine."""
    archive = tmp_path / "student.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for module in MODULES:
            zf.write(SOLUTIONS / f"{module}.py", f"01_attention.ipynb/{module}.py")
    report = grade(archive)
    assert report.status == "graded" and report.score == 100, (
        report.status, report.score, report.error, [f"{t.id}: {t.message}" for t in report.failed()])
    assert report.notes == [], report.notes
    shown = report.to_text() + str(report.to_dict())
    for path in (str(tmp_path), tempfile.gettempdir() + "/mha-", str(SOLUTIONS.parent)):
        assert path not in shown, f"expected no path of the grading machine in the report, found {path!r}"


def test_a_folder_named_like_a_notebook_is_searched_and_never_taken_as_one(tmp_path):
    """A submission folder holding only `01_attention.ipynb/` (the modules inside it) is graded from there;
    folders named `04_mha.ipynb/` and `attention.py/` beside the modules are neither taken nor noted."""
    only = tmp_path / "only"
    _reference(only / "01_attention.ipynb")
    files, notes, missing = _taken(only)
    assert files == sorted(f"{m}.py" for m in MODULES) and not notes and not missing, (files, notes, missing)
    beside = _reference(tmp_path / "beside")
    _reference(beside / "04_mha.ipynb")
    (beside / "mha.py").unlink()
    (beside / "attention.py").unlink()
    (beside / "attention.py").mkdir()
    files, notes, _ = _taken(beside)
    assert files == ["heads.py", "masks.py", "positional.py"], (
        f"expected the folders 04_mha.ipynb/ and attention.py/ beside the modules taken for no module, got {files}")
    assert not notes, f"expected no note about a folder (a folder is not a file of the submission), got {notes}"


# -- bounded intake: a crowd of files costs a bounded, linear amount of work ----------------------------------
class _Counted:
    """os.scandir, counting the listings and the entries they hand out: the work the intake does."""

    def __init__(self, monkeypatch):
        self.entries = self.listings = 0
        real = os.scandir

        def scandir(*args):
            self.listings += 1
            it = real(*args)

            class Counting:
                def __enter__(inner):
                    return inner

                def __exit__(inner, *exc):
                    it.close()

                def __iter__(inner):
                    return inner

                def __next__(inner):
                    entry = next(it)
                    self.entries += 1
                    return entry

            return Counting()

        monkeypatch.setattr(folders.os, "scandir", scandir)


def _crowd(root: Path, folders: int, files: int, module_dir=None) -> int:
    """`folders` folders of `files` small .py files each under `root` (and the reference in `module_dir`, if
    given); returns the number of entries of the tree."""
    for i in range(folders):
        sub = root / f"d{i:04d}"
        sub.mkdir(parents=True)
        for j in range(files):
            (sub / f"f{j}.py").write_bytes(b"x = 1\n")
    root.mkdir(parents=True, exist_ok=True)
    if module_dir:
        _reference(root / module_dir)
    return folders * (files + 1) + (len(MODULES) + 1 if module_dir else 0)


def test_a_crowd_of_files_costs_linear_work_and_the_modules_are_found(tmp_path, monkeypatch):
    """No module at the top, a crowd of small .py files in folders, and the modules in one folder: each
    entry is listed once by the search (the modules' folder once more when it is taken), never once per
    folder on the way: the work grows with the files, not with their square."""
    size = _crowd(tmp_path / "sub", folders=60, files=30, module_dir="zz-work")
    counted = _Counted(monkeypatch)
    files, notes = folders.take_folder(tmp_path / "sub")
    assert sorted(files) == sorted(f"{m}.py" for m in MODULES) and not notes, (sorted(files), notes)
    assert counted.entries <= size + len(MODULES), (
        f"expected each of the {size} entries listed once (and the modules' folder twice), {counted.entries} "
        f"were listed in {counted.listings} listings")


@pytest.mark.parametrize("layout", ["top", "folders", "big-folder"])
def test_a_crowd_over_the_caps_is_refused_after_bounded_work(tmp_path, monkeypatch, layout):
    """Over the caps (made small here: 100 entries a folder, 400 in all), whatever the crowd's size: the
    submission is refused with a message that says why and what to hand in, having listed a bounded number
    of entries (not all of them, nor any of them twice)."""
    monkeypatch.setattr(folders, "MAX_FOLDER", 100)
    monkeypatch.setattr(folders, "MAX_SCAN", 400)
    root = tmp_path / "sub"
    if layout == "top":  # 2,000 files beside each other, no module among them
        root.mkdir()
        for j in range(2000):
            (root / f"f{j}.py").write_bytes(b"x = 1\n")
        expected = "the submission's top folder holds more than 100 files and folders"
    elif layout == "folders":  # 2,000 files in 50 folders
        _crowd(root, folders=50, files=40)
        expected = "no folder holding your modules was found among the first 400 files and folders"
    else:  # one folder of 300 files beside a few small ones
        _crowd(root, folders=3, files=5)
        _crowd(root / "d9999-data", folders=1, files=300)
        expected = "no folder holding your modules was found, and d9999-data/d0000/ holds more than 100 files"
    counted = _Counted(monkeypatch)
    with pytest.raises(SubmissionError) as info:
        folders.take_folder(root)
    message = str(info.value)
    assert expected in message and "hand in your modules (attention.py" in message, message
    assert str(tmp_path) not in message, message
    assert counted.entries <= 400 + 101, (
        f"expected at most the search's 400 entries and one folder's 101 listed, got {counted.entries}")
    with pytest.raises(SubmissionError) as info:  # through the engine: the message names the submission only
        _taken(root)
    assert expected in str(info.value) and str(tmp_path) not in str(info.value), info.value


def test_a_big_folder_beside_the_modules_is_skipped(tmp_path, monkeypatch):
    """A data folder over MAX_FOLDER (made 100 here) beside the modules' folder: read up to the cap, skipped,
    and the modules graded."""
    monkeypatch.setattr(folders, "MAX_FOLDER", 100)
    root = tmp_path / "sub"
    _crowd(root / "aa-data", folders=1, files=300)
    _reference(root / "work")
    counted = _Counted(monkeypatch)
    files, notes = folders.take_folder(root)
    assert sorted(files) == sorted(f"{m}.py" for m in MODULES), sorted(files)
    assert counted.entries <= 2 + 1 + 101 + 2 * len(MODULES), counted.entries


def test_a_zip_crowd_is_bounded_by_its_entries(tmp_path, monkeypatch):
    """A zip of 990 small .py files in 99 folders beside the modules' folder: under the 1,000 entries of a zip,
    each unpacked entry listed once; over them, refused from the zip's directory alone (see
    test_a_zip_of_too_many_entries_is_refused_unparsed)."""
    archive = _zip(tmp_path / "crowd.zip", [(f"junk{i // 10:02d}/f{i}.py", "x = 1\n", None) for i in range(990)],
                   folder="work")
    unpacked = tmp_path / "unpacked"
    unpacked.mkdir()
    assert zips.unzip(archive, unpacked) == {}
    counted = _Counted(monkeypatch)
    files, notes = folders.take_folder(unpacked)
    assert sorted(files) == sorted(f"{m}.py" for m in MODULES) and not notes, (sorted(files), notes)
    assert counted.entries <= 990 + 100 + 2 * len(MODULES) + 1, counted.entries


def test_past_the_file_cap_the_modules_come_first_and_one_note_counts_the_rest(tmp_path, monkeypatch):
    """More .py files than a submission may hold (made 50 here), all named to sort before the modules, and
    40 links: the modules are taken first, the files past the cap are counted in one note, and the report
    names MAX_NOTES files at most (the linked module's among them), counting the rest."""
    monkeypatch.setattr(intake, "MAX_ENTRIES", 50)
    folder = _reference(tmp_path / "sub")
    for j in range(40):  # links, each a note of its own
        (folder / f"a{j:03d}.py").symlink_to("/etc/passwd")
    for j in range(200):
        (folder / f"aa{j:03d}.py").write_bytes(b"x = 1\n")
    (folder / "mha.py").unlink()
    (folder / "mha.py").symlink_to(SOLUTIONS / "mha.py")
    files, notes, missing = _taken(folder)
    assert {f"{m}.py" for m in MODULES if m != "mha"} <= set(files) and len(files) == 50, (len(files), files)
    assert len(notes) == folders.MAX_NOTES + 1, f"expected {folders.MAX_NOTES} notes and a count, got {notes}"
    assert notes["mha.py"].startswith("mha.py is a symbolic link: not graded"), notes
    assert missing["mha"].startswith("mha.py is a symbolic link: not graded"), missing
    assert notes["aa046.py"] == ("aa046.py and 153 more files: not graded: a submission may hold at most 50 .py "
                                 "files and notebooks, and its folder holds 245"), notes
    last = list(notes.values())[-1]
    assert last.startswith("22 more files not graded, from a018.py to a039.py"), last


# -- uploads as students name them (issue 33): the name rule, one file a module -------------------------------
def _solved_notebook(module: str, folder: Path, name: str, edit=None) -> Path:
    """The reference notebook of `module` (the solved assignment) saved as `folder`/`name`; `edit` (old, new)
    changes a line of its module cell's code."""
    from autograder.release import ASSIGNMENT_DIR, NOTEBOOKS

    text = (ASSIGNMENT_DIR / NOTEBOOKS[module]).read_text()
    if edit:
        old, new = edit
        assert json.dumps(old)[1:-1] in text, f"{old!r} is not in {NOTEBOOKS[module]}"
        text = text.replace(json.dumps(old)[1:-1], json.dumps(new)[1:-1])
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(text)
    return folder / name


#: A change of masks' code that still compiles (so that both files hold work, and differ).
MASKS_EDIT = ("def causal_mask(seq_len, device=None):", "def causal_mask(seq_len, device=None):  # edited\n    pass")


def test_uploads_named_as_students_name_them_are_taken_as_their_modules(tmp_path):
    """A flat upload (as Gradescope keeps it) of renamed notebooks and .py files: each is its module, the
    module's .py file is written under the module's name, the notebook's module names the notebook."""
    folder = tmp_path / "submission"
    _solved_notebook("attention", folder, "Copy of 01_attention.ipynb")
    _solved_notebook("heads", folder, "02_heads (1).ipynb")
    _solved_notebook("masks", folder, "bea_03_masks.ipynb")
    shutil.copyfile(SOLUTIONS / "mha.py", folder / "mha (1).py")
    shutil.copyfile(SOLUTIONS / "positional.py", folder / "Positional.py")
    (folder / "masks_old.py").write_text("raise RuntimeError('an old attempt, never graded')\n")
    (folder / "04_mha_notes.ipynb").write_text("{}")
    with taken(folder) as got:
        written = sorted(os.listdir(got.folder))
        assert written == sorted(["masks_old.py", *(f"{m}.py" for m in MODULES)]), written
        assert not got.notes and not got.missing, (got.notes, got.missing)
        assert (got.folder / "mha.py").read_bytes() == (SOLUTIONS / "mha.py").read_bytes()
        assert (got.folder / "positional.py").read_bytes() == (SOLUTIONS / "positional.py").read_bytes()
        first = (got.folder / "masks.py").read_text().splitlines()[0]
        assert first.startswith('"""masks.py, taken from bea_03_masks.ipynb: '), first
        assert (got.folder / "attention.py").read_text().startswith('"""attention.py, taken from Copy of 01_att')


def test_a_renamed_notebook_in_a_zip_folder_is_found_and_taken(tmp_path):
    """A zip of a folder that holds only a renamed notebook (and a helper): the search finds that folder."""
    notebook = _solved_notebook("masks", tmp_path / "nb", "03-masks(2).ipynb")
    archive = tmp_path / "bea.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("bea/03-masks(2).ipynb", notebook.read_bytes())
        zf.writestr("bea/helpers.py", "X = 1\n")
    with taken(archive) as got:
        assert sorted(os.listdir(got.folder)) == ["helpers.py", "masks.py"]
        assert (got.folder / "masks.py").read_text().startswith('"""masks.py, taken from 03-masks(2).ipynb: ')
        assert not got.notes and set(got.missing) == set(MODULES) - {"masks"}


@pytest.mark.parametrize("form", ["ipynb", "py"])
def test_two_files_of_one_module_that_differ_cost_that_module_only_with_one_message_naming_both(tmp_path, form):
    """03_masks.ipynb and bea_03_masks.ipynb (masks.py and masks (1).py), both with work that differs: which
    to grade is not clear, so neither is: masks is missing with one note naming both files, the other modules
    are taken as they are."""
    folder = _reference(tmp_path / "submission")
    if form == "ipynb":
        (folder / "masks.py").unlink()
        _solved_notebook("masks", folder, "03_masks.ipynb")
        _solved_notebook("masks", folder, "bea_03_masks.ipynb", edit=MASKS_EDIT)
        first, second = "03_masks.ipynb", "bea_03_masks.ipynb"
    else:
        old, new = MASKS_EDIT
        (folder / "masks (1).py").write_text((SOLUTIONS / "masks.py").read_text().replace(old, new))
        first, second = "masks.py", "masks (1).py"
    files, notes, missing = _taken(folder)
    assert files == sorted(f"{m}.py" for m in MODULES if m != "masks"), files
    message = (f"{first} and {second}: not graded: both are files of the module masks and both hold work, and "
               f"only one file of a module is graded: hand in one of them, and remove or rename the others (a file "
               f"whose name is masks.py or ends with 03_masks (as 03_masks.ipynb or bea_03_masks.ipynb) stands "
               f"for masks)")
    assert notes == {first: message} and missing == {"masks": message}, (notes, missing)


def test_two_files_of_one_module_with_the_same_code_or_one_untouched_grade_the_work(tmp_path):
    """An upload made twice (masks.py and masks (1).py, the same code) is no ambiguity, nor is a re-download
    with work beside the untouched template notebook: the work is graded, the other file named."""
    folder = _reference(tmp_path / "twice")
    shutil.copyfile(SOLUTIONS / "masks.py", folder / "masks (1).py")
    files, notes, missing = _taken(folder)
    assert files == sorted(f"{m}.py" for m in MODULES) and not missing, files
    assert notes == {"masks (1).py": "masks (1).py: not graded: masks.py was graded instead (both hold the same "
                                     "code)"}, notes
    _solved_notebook("masks", folder, "bea_03_masks.ipynb", edit=MASKS_EDIT)  # other work, in the other form
    with taken(folder) as got:
        assert (got.folder / "masks.py").read_bytes() == (SOLUTIONS / "masks.py").read_bytes()
        assert got.notes["bea_03_masks.ipynb"] == ("bea_03_masks.ipynb: not graded: masks.py was graded instead "
                                                   "(both hold work, and then the .py file is graded: hand in one "
                                                   "form of each module, not both)"), got.notes
    from autograder.release import TEMPLATE_DIR

    folder = _reference(tmp_path / "redownload")
    (folder / "masks.py").unlink()
    shutil.copyfile(TEMPLATE_DIR / "03_masks.ipynb", folder / "03_masks.ipynb")
    _solved_notebook("masks", folder, "03_masks (1).ipynb")
    with taken(folder) as got:
        assert (got.folder / "masks.py").read_text().startswith('"""masks.py, taken from 03_masks (1).ipynb: ')
        assert got.notes == {"03_masks.ipynb": "03_masks.ipynb: not graded: 03_masks (1).ipynb was graded instead "
                                               "(03_masks.ipynb is the untouched template and 03_masks (1).ipynb "
                                               "holds your work)"}, got.notes
        assert not got.missing


def test_a_file_whose_name_holds_two_modules_names_is_named_for_both(tmp_path):
    folder = _reference(tmp_path / "submission")
    for module in ("masks", "mha"):
        (folder / f"{module}.py").unlink()
    _solved_notebook("mha", folder, "03_masks_and_04_mha.ipynb")
    files, notes, missing = _taken(folder)
    message = ("03_masks_and_04_mha.ipynb: not graded: its name holds the names of 2 modules (masks and mha), and a "
               "file stands for one module: hand in each module in a file of its own, named after it "
               "(03_masks.ipynb and 04_mha.ipynb)")
    assert notes == {"03_masks_and_04_mha.ipynb": message}, notes
    assert missing == {"masks": message, "mha": message}, missing


def test_a_crowd_of_files_for_one_module_is_refused_unread(tmp_path, monkeypatch):
    """More files of one module than MAX_CANDIDATES: refused without reading one of them as code, in one note
    that names a few and counts the rest; the other modules are taken."""
    read = []
    monkeypatch.setattr(forms, "form_digest", lambda name, data: read.append(name))
    folder = _reference(tmp_path / "submission")
    for i in range(30):
        (folder / f"masks ({i}).py").write_bytes(b"x = 1\n")
    files, notes, missing = _taken(folder)
    assert files == sorted(f"{m}.py" for m in MODULES if m != "masks") and not read, (files, read)
    assert list(notes) == ["masks.py"] and notes["masks.py"] == missing["masks"], notes
    assert notes["masks.py"] == ("masks.py, masks (0).py, masks (1).py, masks (10).py and 27 more files: not "
                                 "graded: 31 files stand for the module masks, more than the 8 compared: hand in "
                                 "one file of masks (a file whose name is masks.py or ends with 03_masks (as "
                                 "03_masks.ipynb or bea_03_masks.ipynb) stands for masks)"), notes


def test_hostile_names_of_two_files_of_one_module_are_named_shortened_and_escaped(tmp_path):
    folder = _reference(tmp_path / "submission")
    (folder / "masks.py").unlink()
    long_name = "\x1b[2J\nTotal: 100 " + "x" * 150 + " 03_masks.ipynb"
    _solved_notebook("masks", folder, long_name)
    _solved_notebook("masks", folder, "bea_03_masks.ipynb", edit=MASKS_EDIT)
    files, notes, missing = _taken(folder)
    key = intake.shown(long_name)
    assert len(key) < 120 and list(notes) == [key], notes
    assert notes[key].startswith(f"{key} and bea_03_masks.ipynb: not graded: "), notes
    text = GradeReport(submission="s", notes=list(notes.values())).to_text()
    assert "\x1b" not in text and "\\x1b[2J\\nTotal: 100 " in text, text


@pytest.mark.grading
def test_two_files_of_one_module_cost_its_checks_alone_in_a_real_grading(tmp_path, warm_servers):
    """One fault, one charge, one message: masks earns nothing and each of its checks says why, naming both
    files; the other modules earn everything; the report names the fault once."""
    folder = _reference(tmp_path / "submission")
    (folder / "masks.py").unlink()
    _solved_notebook("masks", folder, "03_masks.ipynb")
    _solved_notebook("masks", folder, "bea_03_masks.ipynb", edit=MASKS_EDIT)
    report = grade(folder, servers=warm_servers)
    modules = report.modules()
    assert modules["masks"][0] == 0, modules
    assert all(modules[m][0] == modules[m][1] > 0 for m in MODULES if m != "masks"), modules
    assert len(report.notes) == 1 and report.notes[0].startswith(
        "03_masks.ipynb and bea_03_masks.ipynb: not graded: both are files of the module masks"), report.notes
    masks = [t for t in report.tests if t.module == "masks" and t.status != "skipped"]
    assert masks and all(t.status == "failed" and report.notes[0] in t.message for t in masks), masks
    assert report.status == "graded" and report.to_text().count("Files not graded (1):") == 1


# -- an optional part, handed out by a course file ---------------------------------------------------------------
#: The parts a course file hands out when it lists the optional part kvcache beside the five (docs/instructor/
#: kvcache.md): `taken(..., parts=...)` is what the engine passes for it, autograder.MODULES with no course file.
COURSE_PARTS = (*MODULES, "kvcache")
KVCACHE_NOTEBOOK = "06_kvcache.ipynb"  # its place in autograder.PARTS


def _with_kvcache(folder: Path, name="kvcache.py") -> Path:
    """The reference submission of the five parts, and the reference kvcache as `name` (a .py file or a notebook,
    the part's source notebook with its solution)."""
    _reference(folder)
    if name.endswith(".ipynb"):
        shutil.copyfile(SOLUTIONS.parent / "parts" / "kvcache" / "notebook.ipynb", folder / name)
    else:
        shutil.copyfile(SOLUTIONS / "kvcache.py", folder / name)
    return folder


def test_an_optional_parts_module_is_taken_where_a_course_hands_it_out(tmp_path):
    folder = _with_kvcache(tmp_path / "sub", "kvcache (1).py")  # by the name rule, as any module's upload
    with taken(folder, parts=COURSE_PARTS) as got:
        files, notes, missing = sorted(os.listdir(got.folder)), got.notes, got.missing
    assert files == sorted(f"{m}.py" for m in COURSE_PARTS) and not notes and not missing, (files, notes, missing)


def test_an_optional_parts_notebook_is_converted_where_a_course_hands_it_out(tmp_path):
    folder = _with_kvcache(tmp_path / "sub", KVCACHE_NOTEBOOK)
    with taken(folder, parts=COURSE_PARTS) as got:
        files, missing, notebooks = sorted(os.listdir(got.folder)), got.missing, got.notebooks
    assert "kvcache.py" in files and not missing, (files, missing)
    assert notebooks["kvcache"][0] == KVCACHE_NOTEBOOK, notebooks


def test_a_single_notebook_of_an_optional_part_is_a_submission_where_a_course_hands_it_out(tmp_path):
    notebook = _with_kvcache(tmp_path / "sub", KVCACHE_NOTEBOOK) / KVCACHE_NOTEBOOK
    with taken(notebook, parts=COURSE_PARTS) as got:
        files, absent = sorted(os.listdir(got.folder)), got.absent
    assert files == ["kvcache.py"] and set(absent) == set(MODULES), (files, absent)
    with pytest.raises(SubmissionError, match="a notebook is named after its module"):  # no course file: no part
        with taken(notebook):
            pass


def test_an_optional_part_not_handed_in_is_missing_under_its_course_and_named_once(tmp_path):
    folder = _reference(tmp_path / "sub")
    with taken(folder, parts=COURSE_PARTS) as got:
        missing, absent = got.missing, got.absent
    assert missing == {"kvcache": "not handed in"}, missing
    assert absent["kvcache"].startswith("kvcache.py: "), absent


def test_with_no_course_file_an_optional_parts_files_are_taken_as_before(tmp_path):
    """No course file: nothing changes. kvcache is no module of the submission: its .py file is a helper file
    like any other, under its own name (so `kvcache (1).py` stays so), its notebook is no module's, and its
    absence is nobody's."""
    folder = _with_kvcache(tmp_path / "sub", "kvcache (1).py")
    _with_kvcache(folder, KVCACHE_NOTEBOOK)
    files, notes, missing = _taken(folder)
    assert files == sorted([*(f"{m}.py" for m in MODULES), "kvcache (1).py"]) and not notes and not missing, (
        files, notes, missing)


@pytest.mark.grading  # starts a student process
def test_the_sandbox_serves_an_optional_parts_module_where_a_course_hands_it_out(tmp_path):
    folder = _with_kvcache(tmp_path / "sub")
    (folder / "kvcache.py").write_text("def twice(n):\n    return 2 * n\n")
    box = Sandbox(folder)  # no course file: kvcache is no module the graders may call
    box.close()
    assert "kvcache" not in box.available, box.available
    box = Sandbox(folder, call_timeout=5.0, parts=COURSE_PARTS)
    try:
        value, _ = box.call("kvcache", "twice", 21)
    finally:
        box.close()
    assert value == 42


@pytest.mark.grading  # starts a student process
def test_a_fault_met_in_an_optional_parts_code_is_charged_to_it(tmp_path):
    """The memory limit met in kvcache.py, called from the student's mha.py, ends kvcache's checks (the file of
    the last frame that is a module of the parts handed out), not mha's."""
    folder = tmp_path / "sub"
    folder.mkdir()
    (folder / "kvcache.py").write_text("import torch\ndef step(n):\n    return torch.empty(1 << 40)\n")
    (folder / "mha.py").write_text("from kvcache import step\ndef forward(n):\n    return step(n)\n")
    box = Sandbox(folder, call_timeout=5.0, parts=COURSE_PARTS)
    try:
        with pytest.raises(StudentError, match="exceeded the memory limit"):
            box.call("mha", "forward", 1)
    finally:
        box.close()
    assert list(box.given_up) == ["kvcache"], box.given_up
