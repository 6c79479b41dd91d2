"""The Gradescope autograder zip: `build_zip(output)`, behind `grader_cli.py gradescope-zip`.

The zip holds, at its root, the two scripts Gradescope runs (`setup.sh` once,
as root, when it builds the image; `run_autograder` for every submission) and
the kit files that grading needs: `grader_cli.py`, `requirements.txt` (and `requirements.lock`),
`autograder/` and the reference `solutions/` (the zip is instructor-side, so
students never see them). Two builds of the same tree are byte-identical. With a course file
(`build_zip(course=...)`), the zip holds it too, as `course.toml`, and run_autograder grades under it
(`--course course.toml`); without one, the zip is what it was.

Both scripts take their paths from `AUTOGRADER_ROOT` (default `/autograder`),
so they can be run on a temporary folder laid out as Gradescope lays it out:
`source/` (the unzipped autograder), `submission/`, `results/`.
"""
from __future__ import annotations

import shlex
import zipfile
from pathlib import Path

from autograder.paths import KIT, TORCH_VERSION

# Gradescope's images have no GPU unless the instructor asks for one, and pip's default index gives Linux the
# CUDA build of torch (several GB): setup.sh installs the CPU build unless told otherwise (TORCH_CUDA=1, or
# `gradescope-zip --torch-cuda`, installs pip's default build).
CPU_INDEX_URL = "https://download.pytorch.org/whl/cpu"
FIXED_TIME = (1980, 1, 1, 0, 0, 0)  # the zip format's earliest date: no build time in the zip
EXECUTABLE, REGULAR = 0o100755, 0o100644

SETUP_SH = r"""#!/usr/bin/env bash
# Gradescope runs this once, as root, when it builds the autograder image:
# a virtual environment at $ROOT/venv with torch and the kit's pinned dependencies.
# torch: the CPU build by default (the images have no GPU unless you ask for one;
# the CUDA build is several GB). TORCH_CUDA=1: pip's default build, with CUDA.
# TORCH_INDEX_URL: another pip index for torch; TORCH_VERSION: another version.
set -euo pipefail
ROOT="${AUTOGRADER_ROOT:-/autograder}"
DEFAULT_TORCH_VERSION=@TORCH_VERSION@
DEFAULT_TORCH_INDEX_URL=@TORCH_INDEX_URL@
DEFAULT_TORCH_CUDA=@TORCH_CUDA@
TORCH_VERSION="${TORCH_VERSION:-$DEFAULT_TORCH_VERSION}"
TORCH_CUDA="${TORCH_CUDA:-$DEFAULT_TORCH_CUDA}"
if [ "$TORCH_CUDA" = 1 ]; then DEFAULT_TORCH_INDEX_URL=""; fi
TORCH_INDEX_URL="${TORCH_INDEX_URL:-$DEFAULT_TORCH_INDEX_URL}"  # empty: pip's default index (CUDA on Linux)

apt_install() { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y "$@"; }

# The lock holds for Python 3.10 to 3.13 (pyproject.toml): Ubuntu 22.04's python3 (3.10) and 24.04's (3.12)
# serve as they are; an older one gets python3.11.
command -v python3 >/dev/null || apt_install python3 python3-pip python3-venv
BASE=python3
python3 -c 'import sys; sys.exit(sys.version_info < (3, 10))' || BASE=python3.11
# Ubuntu's Python can make a venv only with its -venv package (ensurepip).
"$BASE" -c 'import ensurepip, venv' 2>/dev/null || apt_install python3 python3-pip python3-venv "$BASE" "$BASE-venv"

"$BASE" -m venv "$ROOT/venv"
PIP=("$ROOT/venv/bin/python" -m pip install --no-cache-dir --disable-pip-version-check)
# torch alone first (--no-deps), from where its build is; its dependencies come with the rest, under the lock
if [ -n "$TORCH_INDEX_URL" ]; then
  "${PIP[@]}" --no-deps "torch==$TORCH_VERSION" --index-url "$TORCH_INDEX_URL"
else
  "${PIP[@]}" --no-deps "torch==$TORCH_VERSION"
fi
"${PIP[@]}" "torch==$TORCH_VERSION" -r "$ROOT/source/requirements.txt" -c "$ROOT/source/requirements.lock"  # every package pinned
"""

RUN_AUTOGRADER = r"""#!/usr/bin/env bash
# Gradescope runs this for every submission. It grades $ROOT/submission with the
# kit, which writes $ROOT/results/results.json whatever the submission holds: a
# score, or 0 with what was looked for when there is nothing to grade (an empty
# or unreadable upload). When the grader itself cannot run (it cannot start
# student code here, or it did not write the results at all), the results say
# "Autograder failure, not a grade" (never blaming the submission), the cause
# goes to the log that only instructors see, and this exits non-zero, so that
# Gradescope shows an autograder failure rather than a grade.
set -u
ROOT="${AUTOGRADER_ROOT:-/autograder}"
PY="${PYTHON:-$ROOT/venv/bin/python}"
# Relative paths are taken from where this was started, before the cd below.
case "$ROOT" in /*) ;; *) ROOT="$PWD/$ROOT" ;; esac
case "$PY" in /*) ;; */*) PY="$PWD/$PY" ;; esac
RESULTS="$ROOT/results/results.json"
LOG="$(mktemp)"
mkdir -p "$ROOT/results"
rm -f "$RESULTS"

status=1
if cd "$ROOT/source"; then
  "$PY" grader_cli.py grade "$ROOT/submission" --format gradescope --output "$RESULTS" 2>"$LOG"
  status=$?
fi
cat "$LOG"  # stdout goes to Gradescope's log, which only instructors see

# The status the kit wrote (its results.json is indented JSON: these two lines can only be its own
# top-level extra_data, never a string a submission controls).
rm -f "$LOG"
kit_status="$(grep -A1 -x '  "extra_data": {' "$RESULTS" 2>/dev/null | sed -n 's/^    "status": "\([a-z]*\)",*$/\1/p')"
case "$kit_status" in
  graded|empty) exit 0 ;;  # a score, or nothing to grade (0, with what was looked for)
  timeout|error) exit 2 ;;  # the grading did not complete: "Autograder failure" / no score, never a grade
esac

# The grader wrote nothing: it could not run at all (a broken image, a missing
# interpreter). Not the student's doing: say so, and leave the cause to the log.
echo "run_autograder: the grader did not write $RESULTS (exit status $status); its output is above"
printf '%s\n' '{"score": 0, "execution_time": 0, "tests": [], "visibility": "visible", "stdout_visibility": "hidden", "extra_data": {"status": "error"}, "output": "Autograder failure, not a grade: the autograder could not run. This is not a problem with the submission: the instructor sees the cause in the autograder log."}' >"$RESULTS"
exit 1
"""


def kit_files(kit: Path = KIT) -> list[tuple[str, Path]]:
    """(name in the zip, path) of the kit files the grader needs at run time, sorted by name."""
    paths = [kit / "grader_cli.py", kit / "requirements.txt", kit / "requirements.lock",
             kit / "autograder" / "graders" / "pytest.ini"]
    paths += [p for p in (kit / "autograder").rglob("*.py") if "__pycache__" not in p.parts]
    paths += list((kit / "solutions").glob("*.py"))
    paths += [p for p in (kit / "parts").rglob("*")  # each part's graders, diagnoses and part.toml
              if (p.suffix == ".py" or p.name == "part.toml") and "__pycache__" not in p.parts]
    return sorted((p.relative_to(kit).as_posix(), p) for p in paths)


def setup_sh(torch_version: str = TORCH_VERSION, torch_index_url: str = CPU_INDEX_URL, cuda: bool = False) -> str:
    """setup.sh, with defaults for TORCH_VERSION, TORCH_INDEX_URL and TORCH_CUDA (the environment still wins).

    By default torch comes from PyTorch's CPU-only index; `cuda` makes pip's default build (with CUDA) the
    default, unless `torch_index_url` names another index."""
    index = "" if cuda and torch_index_url == CPU_INDEX_URL else torch_index_url
    return (SETUP_SH.replace("@TORCH_VERSION@", shlex.quote(torch_version))
            .replace("@TORCH_INDEX_URL@", shlex.quote(index))
            .replace("@TORCH_CUDA@", "1" if cuda else "0"))


def _add(zf: zipfile.ZipFile, name: str, data: bytes, mode: int) -> None:
    info = zipfile.ZipInfo(name, date_time=FIXED_TIME)
    info.create_system = 3  # Unix, so that unzip applies the mode below
    info.external_attr = mode << 16
    info.compress_type = zipfile.ZIP_DEFLATED
    zf.writestr(info, data)


COURSE_FILE = "course.toml"  # the course file's name in the zip, beside grader_cli.py


def run_autograder(course=None) -> str:
    """run_autograder: with a course file (autograder.course.Course), it grades under the zip's copy of it."""
    if course is None:
        return RUN_AUTOGRADER
    graded = 'grader_cli.py grade "$ROOT/submission" '
    if RUN_AUTOGRADER.count(graded) != 1:
        raise ValueError("run_autograder: expected one line that grades $ROOT/submission, to add --course to")
    return RUN_AUTOGRADER.replace(graded, f"{graded}--course {COURSE_FILE} ")


def build_zip(output: Path, *, torch_version: str = TORCH_VERSION, torch_index_url: str = CPU_INDEX_URL,
              cuda: bool = False, kit: Path = KIT, course=None) -> list[str]:
    """Write the Gradescope autograder zip to `output`; return its member names, in order.

    `torch_version`, `torch_index_url` and `cuda` become setup.sh's defaults
    (Gradescope sets no environment variables at build time; `setup_sh`);
    `kit` is the kit's folder. `course` (autograder.course.Course): embedded as COURSE_FILE, and every
    submission is graded under it.
    """
    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    names = []
    with zipfile.ZipFile(output, "w") as zf:
        for name, text in (("setup.sh", setup_sh(torch_version, torch_index_url, cuda)),
                           ("run_autograder", run_autograder(course))):
            _add(zf, name, text.encode(), EXECUTABLE)
            names.append(name)
        if course is not None:
            _add(zf, COURSE_FILE, course.text, REGULAR)
            names.append(COURSE_FILE)
        for name, path in kit_files(kit):
            _add(zf, name, path.read_bytes(), REGULAR)
            names.append(name)
    return names
