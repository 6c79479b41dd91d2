"""Submissions that reach outside themselves: the grader's intake (autograder/intake.py).

The trusted grader reads a submission before anything is confined, as root or
as the instructor. Whatever it reads through a symbolic link, a FIFO, a huge
file or a hostile zip would be read on the student's behalf. Each test plants
one such file and checks that the intake takes only the regular files inside
the submission, names what it left out, and ends in bounded time; the
corpus cases in tests/corpus/attacks.toml (section "the grader's intake")
grade the same attacks end to end.
"""
from __future__ import annotations

import os
import re
import shutil
import stat
import threading
import time
import zipfile
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from autograder import intake
from autograder.engine import SubmissionError, grade, taken
from autograder.results import GradeReport
from autograder.sandbox import Sandbox, StudentError
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
    from autograder.notebooks import notebook_file_to_source

    with pytest.raises(ValueError, match="symbolic link"):
        notebook_file_to_source(folder / "04_mha.ipynb")


def test_a_regular_notebook_is_still_converted(tmp_path):
    folder = _reference(tmp_path / "sub")
    (folder / "mha.py").unlink()
    nbformat.write(new_notebook(cells=[new_code_cell((SOLUTIONS / "mha.py").read_text())]), folder / "04_mha.ipynb")
    files, notes, missing = _taken(folder)
    assert "mha.py" in files and not notes and not missing, (files, notes, missing)


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
    files, notes, missing = _taken(_zip(tmp_path / "s.zip", [
        ("sub/mha.py", str(SOLUTIONS / "mha.py"), stat.S_IFLNK | 0o777),
        ("sub/lib", str(SOLUTIONS), stat.S_IFLNK | 0o777)]))
    assert "mha.py" not in files, f"expected the link entry mha.py left out, got {files}"
    assert notes.get("sub/mha.py", "").startswith("sub/mha.py is a symbolic link: not graded"), notes
    assert notes.get("sub/lib", "").startswith("sub/lib is a symbolic link"), notes
    assert "mha" in missing


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
                "zip-many-entries", "module-over-size-limit"}
    assert expected <= set(cases), f"missing intake cases: {sorted(expected - set(cases))}"
    assert cases["zip-bomb"].refused and cases["zip-many-entries"].refused


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


def test_solved_notebooks_beside_untouched_stubs_are_graded_and_the_report_says_so(tmp_path):
    """The notebook trap: a copy of the template with the notebooks solved and the .py stubs left alone."""
    from autograder.release import ASSIGNMENT_DIR, NOTEBOOKS

    folder = _template_copy(tmp_path / "student", notebooks_from=ASSIGNMENT_DIR)
    report = grade(folder)
    assert report.score == 100, [f"{t.id}: {t.message}" for t in report.failed()]
    for module, name in NOTEBOOKS.items():
        assert (f"{module}.py: not graded: {name} was graded instead ({module}.py is the untouched template and "
                f"the notebook holds your work)") in report.notes, report.notes
    assert len(report.notes) == len(NOTEBOOKS), report.notes
    assert "Files not graded (5):" in report.to_text()


def test_solved_stubs_beside_untouched_notebooks_grade_the_py_files(tmp_path):
    from autograder.release import NOTEBOOKS

    files, notes, missing = _taken(_template_copy(tmp_path / "student", py_from=SOLUTIONS))
    assert not missing
    with taken(tmp_path / "student") as got:
        for module in MODULES:
            assert (got.folder / f"{module}.py").read_bytes() == (SOLUTIONS / f"{module}.py").read_bytes(), module
    assert notes == {name: f"{name}: not graded: {module}.py was graded instead (the notebook is the untouched "
                           f"template and {module}.py holds your work)" for module, name in NOTEBOOKS.items()}


def test_when_both_forms_hold_work_the_py_file_is_graded(tmp_path):
    from autograder.release import ASSIGNMENT_DIR

    folder = _template_copy(tmp_path / "student", py_from=SOLUTIONS, notebooks_from=ASSIGNMENT_DIR)
    with taken(folder) as got:
        assert (got.folder / "mha.py").read_bytes() == (SOLUTIONS / "mha.py").read_bytes()
        assert got.notes["04_mha.ipynb"] == ("04_mha.ipynb: not graded: mha.py was graded instead (both hold work, "
                                             "and then the .py file is graded: hand in one form of each module, "
                                             "not both)")


def test_the_untouched_template_grades_its_py_files_and_says_both_are_the_template(tmp_path):
    files, notes, missing = _taken(_template_copy(tmp_path / "student"))
    assert notes["01_attention.ipynb"].endswith("attention.py was graded instead (both are the untouched template)")
    assert len(notes) == 5 and not missing


def test_a_zip_of_the_notebook_trap_grades_the_notebooks(tmp_path):
    from autograder.release import ASSIGNMENT_DIR

    folder = _template_copy(tmp_path / "student", notebooks_from=ASSIGNMENT_DIR)
    archive = tmp_path / "student.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for path in sorted(folder.iterdir()):
            zf.write(path, f"student/{path.name}")
    with taken(archive) as got:
        assert (got.folder / "heads.py").read_text().startswith('"""heads.py, taken from 02_heads.ipynb')
        assert "student/heads.py" in got.notes and got.notes["student/heads.py"].startswith(
            "student/heads.py: not graded: student/02_heads.ipynb was graded instead"), got.notes


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
    assert intake.is_template("masks", "03_masks.ipynb", ran)
    stub = (TEMPLATE_DIR / "masks.py").read_text()
    assert intake.is_template("masks", "masks.py", (stub.replace("\n", "\r\n") + "# started\n").encode())
    started = stub.replace("raise NotImplementedError()", "return None")
    assert not intake.is_template("masks", "masks.py", started.encode())
    for cell in nb.cells:
        if cell.metadata.get("nbgrader", {}).get("grade_id") == "masks-code":
            cell.source = cell.source.replace("raise NotImplementedError()", "return None")
    assert not intake.is_template("masks", "03_masks.ipynb", nbformat.writes(nb).encode())
