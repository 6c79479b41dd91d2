"""grader_cli.py: formats, output files, exit codes, zips and partial submissions."""
import base64
import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import zipfile

import pytest
from click.testing import CliRunner

from autograder.submission.notebooks import not_handed_in
from grader_cli import cli
from tests.conftest import ROOT, SOLUTIONS, TEMPLATE


def run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


def test_help_explains_every_command():
    out = subprocess.run([sys.executable, "grader_cli.py", "--help"], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0
    for command in ("grade", "release"):
        assert command in out.stdout
    grade_help = run("grade", "--help").output
    for option in ("--format", "--output", "--min-score", "Exit status"):
        assert option in grade_help


def test_command_summaries_are_whole_and_grade_names_notebooks():
    """Issue 14: summaries in --help were cut with "..."; `grade --help` did not say it takes notebooks."""
    for width in ("80", "60"):
        out = subprocess.run([sys.executable, "grader_cli.py", "--help"], cwd=ROOT, capture_output=True, text=True,
                             env={**os.environ, "COLUMNS": width})
        commands = out.stdout.split("Commands:")[1]
        assert "..." not in commands, commands  # wrapped on a narrow terminal, never cut
        if width == "80":
            assert len(commands.strip().splitlines()) == len(cli.commands), commands  # one line each
    grade_help = " ".join(run("grade", "--help").output.split())
    assert "notebook" in grade_help and "01_attention.ipynb" in grade_help


def test_version_names_the_kit_torch_and_the_graders_checksum():
    import autograder
    from autograder.classrun import fingerprints

    result = run("--version")
    assert result.exit_code == 0, result.output
    torch_version = importlib.metadata.version("torch")
    assert f"mha-kit {autograder.__version__}" in result.output and f"torch {torch_version}" in result.output
    assert f"graders sha256 {fingerprints.kit_digest()}" in result.output


def test_timeouts_have_one_meaning_each():
    """Issue 14: --timeout was per call on `grade` and per submission on `grade-all`."""
    for command in ("grade", "grade-all"):
        text = " ".join(run(command, "--help").output.split())
        assert "--call-timeout" in text and "one call into the student's code" in text
        assert "--submission-timeout" in text and "whole grading of one submission" in text
        assert "--timeout " not in text  # the old name: accepted, with a warning, but no longer offered
    result = CliRunner().invoke(cli, ["grade", "nope", "--timeout", "5"])
    assert "--timeout is deprecated" in result.output and "--call-timeout" in result.output


def test_the_unzip_limit_is_an_option_with_its_reason(tmp_path):
    """Issue 14: the 50 MiB cap on what a zip unpacks to was in no --help and could not be changed."""
    text = " ".join(run("grade", "--help").output.split())
    assert "--max-unzipped" in text and "zip bomb" in text and "50MiB" in text
    archive = tmp_path / "big.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("notes.txt", b"\0" * (2 << 20))  # 2 MiB unpacked, a few KB packed
    out = tmp_path / "report.json"
    from autograder.submission import intake

    cap = intake.MAX_UNZIPPED
    result = run("grade", archive, "--max-unzipped", "1MiB", "--format", "json", "--output", out)
    assert result.exit_code == 2 and "1 MiB limit" in result.output, result.output
    data = json.loads(out.read_text())
    assert data["status"] == "empty" and "1 MiB limit" in data["error"]
    assert intake.MAX_UNZIPPED == cap, "the cap of one grading leaks into the next"


def test_missing_path_exits_2(tmp_path):
    result = run("grade", tmp_path / "nope")
    assert result.exit_code == 2
    assert "no such file or folder" in result.output


def test_unreadable_zip_exits_2(tmp_path):
    bad = tmp_path / "submission.zip"
    bad.write_bytes(b"PK\x03\x04 this is not really a zip")
    result = run("grade", bad)
    assert result.exit_code == 2
    assert "zip" in result.output


@pytest.mark.parametrize("fmt", ["gradescope", "json", "junit", "classroom"])
def test_unreadable_zip_report_is_empty_names_the_id_and_never_the_path(tmp_path, fmt):
    """Issue 14 item 7: a corrupt zip's report says there was nothing to grade, consistently, and names the
    submission by its id: no path of the instructor's machine reaches a student."""
    bad = tmp_path / "deep" / "folder" / "erin.zip"
    bad.parent.mkdir(parents=True)
    bad.write_bytes(b"PK\x03\x04 this is not really a zip")
    out = tmp_path / "report"
    result = run("grade", bad, "--format", fmt, "--output", out)
    assert result.exit_code == 2
    text = out.read_text()
    if fmt == "classroom":
        text = base64.b64decode(text).decode()
    assert str(tmp_path) not in text and str(bad.parent) not in result.output, text
    assert "erin.zip" in text and "Every check passed" not in text
    if fmt in ("gradescope", "json"):
        data = json.loads(text)
        assert data["score"] == 0
        assert (data["extra_data"]["status"] if fmt == "gradescope" else data["status"]) == "empty"


@pytest.mark.grading
def test_min_score_exit_1_and_gradescope_file(tmp_path):
    out = tmp_path / "results" / "results.json"
    result = run("grade", TEMPLATE, "--format", "gradescope", "--output", out, "--min-score", 50)
    assert result.exit_code == 1
    data = json.loads(out.read_text())
    assert data["score"] == 0 and data["extra_data"] == {"status": "empty"}  # the untouched template
    assert data["output"].startswith("Nothing to grade: no student work found: every function still raises")
    assert all(t["status"] == "failed" for t in data["tests"] if t["max_score"] > 0)
    assert all(t["score"] == 0 for t in data["tests"])


@pytest.mark.grading
def test_zip_of_a_folder_is_graded_like_the_folder(tmp_path):
    archive = tmp_path / "submission.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for path in SOLUTIONS.glob("*.py"):
            zf.write(path, f"my-submission/{path.name}")  # nested one level, as zips often are
        zf.writestr("__MACOSX/my-submission/._attention.py", "junk")
    result = run("grade", archive, "--format", "json", "--min-score", 100)
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["score"] == 100


@pytest.mark.grading
def test_partial_submission_loses_only_the_missing_modules(tmp_path):
    shutil.copy(SOLUTIONS / "masks.py", tmp_path / "masks.py")
    shutil.copy(SOLUTIONS / "heads.py", tmp_path / "heads.py")
    result = run("grade", tmp_path, "--format", "json")
    assert result.exit_code == 0
    data = json.loads(result.output)
    for module in ("masks", "heads"):
        assert data["modules"][module]["score"] == data["modules"][module]["max_score"] > 0
    for module in ("attention", "mha", "positional"):
        assert data["modules"][module]["score"] == 0
    messages = {t["message"] for t in data["tests"] if t["module"] == "attention" and t["status"] == "failed"}
    assert messages == {"not handed in"}, messages
    assert data["missing"] == {m: not_handed_in(m, notebook=False) for m in ("attention", "mha", "positional")}, \
        data["missing"]


def test_gradescope_zip_command_writes_the_zip(tmp_path):
    out = tmp_path / "ag.zip"
    result = run("gradescope-zip", "--output", out)
    assert result.exit_code == 0, result.output
    with zipfile.ZipFile(out) as zf:
        names = zf.namelist()
        setup = zf.read("setup.sh").decode()
    assert names[:2] == ["setup.sh", "run_autograder"] and "solutions/mha.py" in names
    assert "setup.sh, run_autograder" in result.output
    assert "DEFAULT_TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu" in setup  # the CPU build by default
    assert run("gradescope-zip", "--output", out, "--torch-cuda").exit_code == 0
    with zipfile.ZipFile(out) as zf:
        setup = zf.read("setup.sh").decode()
    assert "DEFAULT_TORCH_INDEX_URL=''" in setup and "DEFAULT_TORCH_CUDA=1" in setup
