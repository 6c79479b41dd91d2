"""grader_cli.py: formats, output files, exit codes, zips and partial submissions."""
import json
import shutil
import subprocess
import sys
import zipfile

from click.testing import CliRunner

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


def test_min_score_exit_1_and_gradescope_file(tmp_path):
    out = tmp_path / "results" / "results.json"
    result = run("grade", TEMPLATE, "--format", "gradescope", "--output", out, "--min-score", 50)
    assert result.exit_code == 1
    data = json.loads(out.read_text())
    assert data["score"] == 0
    assert all(t["status"] == "failed" for t in data["tests"] if t["max_score"] > 0)
    assert all(t["score"] == 0 for t in data["tests"])


def test_zip_of_a_folder_is_graded_like_the_folder(tmp_path):
    archive = tmp_path / "submission.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for path in SOLUTIONS.glob("*.py"):
            zf.write(path, f"my-submission/{path.name}")  # nested one level, as zips often are
        zf.writestr("__MACOSX/my-submission/._attention.py", "junk")
    result = run("grade", archive, "--format", "json", "--min-score", 100)
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["score"] == 100


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
    assert messages == {"attention.py is missing from the submission"}


def test_gradescope_zip_command_writes_the_zip(tmp_path):
    out = tmp_path / "ag.zip"
    result = run("gradescope-zip", "--output", out)
    assert result.exit_code == 0, result.output
    with zipfile.ZipFile(out) as zf:
        names = zf.namelist()
    assert names[:2] == ["setup.sh", "run_autograder"] and "solutions/mha.py" in names
    assert "setup.sh, run_autograder" in result.output
