"""The Gradescope autograder zip: `build_zip(output)`, behind `grader_cli.py gradescope-zip`.

The zip holds, at its root, the two scripts Gradescope runs (`setup.sh` once,
as root, when it builds the image; `run_autograder` for every submission) and
the kit files that grading needs: `grader_cli.py`, `requirements.txt`,
`autograder/` and the reference `solutions/` (the zip is instructor-side, so
students never see them). Two builds of the same tree are byte-identical.

Both scripts take their paths from `AUTOGRADER_ROOT` (default `/autograder`),
so they can be run on a temporary folder laid out as Gradescope lays it out:
`source/` (the unzipped autograder), `submission/`, `results/`.
"""
from __future__ import annotations

import shlex
import zipfile
from pathlib import Path

KIT = Path(__file__).resolve().parent.parent
TORCH_VERSION = "2.13.0"  # the Makefile's pin (TORCH ?= torch==2.13.0)
FIXED_TIME = (1980, 1, 1, 0, 0, 0)  # the zip format's earliest date: no build time in the zip
EXECUTABLE, REGULAR = 0o100755, 0o100644

SETUP_SH = r"""#!/usr/bin/env bash
# Gradescope runs this once, as root, when it builds the autograder image:
# a virtual environment at $ROOT/venv with torch and the kit's pinned dependencies.
set -euo pipefail
ROOT="${AUTOGRADER_ROOT:-/autograder}"
DEFAULT_TORCH_VERSION=@TORCH_VERSION@
DEFAULT_TORCH_INDEX_URL=@TORCH_INDEX_URL@
TORCH_VERSION="${TORCH_VERSION:-$DEFAULT_TORCH_VERSION}"
TORCH_INDEX_URL="${TORCH_INDEX_URL:-$DEFAULT_TORCH_INDEX_URL}"  # empty: torch from the default index

apt_install() { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y "$@"; }

# The pinned numpy, matplotlib and nbgrader need Python >= 3.11; Ubuntu 22.04's python3 is 3.10.
command -v python3 >/dev/null || apt_install python3 python3-pip python3-venv
BASE=python3
python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))' || BASE=python3.11
# Ubuntu's Python can make a venv only with its -venv package (ensurepip).
"$BASE" -c 'import ensurepip, venv' 2>/dev/null || apt_install python3 python3-pip python3-venv "$BASE" "$BASE-venv"

"$BASE" -m venv "$ROOT/venv"
PIP=("$ROOT/venv/bin/python" -m pip install --no-cache-dir --disable-pip-version-check)
if [ -n "$TORCH_INDEX_URL" ]; then
  "${PIP[@]}" "torch==$TORCH_VERSION" --index-url "$TORCH_INDEX_URL"
else
  "${PIP[@]}" "torch==$TORCH_VERSION"
fi
"${PIP[@]}" -r "$ROOT/source/requirements.txt"
"""

RUN_AUTOGRADER = r"""#!/usr/bin/env bash
# Gradescope runs this for every submission. It grades $ROOT/submission with the
# kit and writes $ROOT/results/results.json. When the grader cannot run student
# code here (exit 2 with "Autograder failure, not a grade" in the results), it
# exits 2, so that Gradescope shows an autograder failure, never a 0. When the
# submission cannot be read, it writes a results.json of its own (score 0, with
# the reason), and it exits 0.
set -u
ROOT="${AUTOGRADER_ROOT:-/autograder}"
PY="${PYTHON:-$ROOT/venv/bin/python}"
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

if [ "$status" -eq 2 ] && grep -q '"Autograder failure, not a grade' "$RESULTS" 2>/dev/null; then
  rm -f "$LOG"
  exit 2
fi

if [ "$status" -ne 0 ] || [ ! -s "$RESULTS" ]; then
  # The reason is the grader's last line of output, made safe for a JSON string.
  reason="$(tail -n 1 "$LOG" | tr '\t' ' ' | LC_ALL=C tr -cd ' -~' | sed 's/\\/\\\\/g; s/"/\\"/g')"
  printf '{"score": 0, "execution_time": 0, "tests": [], "visibility": "visible", "stdout_visibility": "hidden", "output": "%s\\n%s"}\n' \
    "The autograder could not grade this submission (exit status $status). Upload attention.py, heads.py, masks.py, mha.py and positional.py (or the five notebooks)." \
    "$reason" >"$RESULTS"
fi
rm -f "$LOG"
exit 0
"""


def kit_files(kit: Path = KIT) -> list[tuple[str, Path]]:
    """(name in the zip, path) of the kit files the grader needs at run time, sorted by name."""
    paths = [kit / "grader_cli.py", kit / "requirements.txt", kit / "autograder" / "graders" / "pytest.ini"]
    paths += [p for p in (kit / "autograder").rglob("*.py") if "__pycache__" not in p.parts]
    paths += list((kit / "solutions").glob("*.py"))
    return sorted((p.relative_to(kit).as_posix(), p) for p in paths)


def setup_sh(torch_version: str = TORCH_VERSION, torch_index_url: str = "") -> str:
    """setup.sh, with defaults for TORCH_VERSION and TORCH_INDEX_URL (the environment still wins)."""
    return (SETUP_SH.replace("@TORCH_VERSION@", shlex.quote(torch_version))
            .replace("@TORCH_INDEX_URL@", shlex.quote(torch_index_url)))


def _add(zf: zipfile.ZipFile, name: str, data: bytes, mode: int) -> None:
    info = zipfile.ZipInfo(name, date_time=FIXED_TIME)
    info.create_system = 3  # Unix, so that unzip applies the mode below
    info.external_attr = mode << 16
    info.compress_type = zipfile.ZIP_DEFLATED
    zf.writestr(info, data)


def build_zip(output: Path, *, torch_version: str = TORCH_VERSION, torch_index_url: str = "",
              kit: Path = KIT) -> list[str]:
    """Write the Gradescope autograder zip to `output`; return its member names, in order.

    `torch_version` and `torch_index_url` become setup.sh's defaults (Gradescope
    sets no environment variables at build time); `kit` is the kit's folder.
    """
    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    names = []
    with zipfile.ZipFile(output, "w") as zf:
        for name, text in (("setup.sh", setup_sh(torch_version, torch_index_url)), ("run_autograder", RUN_AUTOGRADER)):
            _add(zf, name, text.encode(), EXECUTABLE)
            names.append(name)
        for name, path in kit_files(kit):
            _add(zf, name, path.read_bytes(), REGULAR)
            names.append(name)
    return names
