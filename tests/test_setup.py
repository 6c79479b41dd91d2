"""The set-up (issue 33): one lock for every Python the kit claims, and the right build of torch by default.

- requirements.lock pins one release of each package for every supported Python (pyproject.toml's
  requires-python), Debian 12's 3.11.2 among them: pip, asked to resolve for another Python (--python-version,
  --only-binary), reads environment markers off the Python it runs on, so a pin that differs by Python fails
  there (numpy 2.4.6 for 3.10, soupsieve 4.1.3 for 3.11.2, as instructors saw).
- It resolves with exactly that check, pip's own, for each supported Python, and pins everything the set-up
  installs there. These runs need the package index: where it cannot be reached they skip, saying so, never
  fail. They download every wheel they consider (the index serves no metadata files here): tens of seconds
  each, so the slow tier.
- `make setup` chooses the build of torch (the CPU one without an NVIDIA GPU, the CUDA one with) and its source,
  read off `make -n` with a stand-in nvidia-smi: nothing is installed.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

from autograder.integrations.gradescope import CPU_INDEX_URL
from autograder.paths import TORCH
from tests.conftest import ROOT

LOCK = ROOT / "requirements.lock"
REQUIREMENTS = ROOT / "requirements.txt"


def requires_python() -> SpecifierSet:
    text = (ROOT / "pyproject.toml").read_text()
    return SpecifierSet(re.search(r'^requires-python = "([^"]*)"', text, re.M).group(1))


def supported_minors() -> list[str]:
    """3.10, 3.11, ... as far as requires-python goes (up to 3.19: an open range is checked that far)."""
    return [f"3.{minor}" for minor in range(6, 20) if f"3.{minor}.0" in requires_python()]


def lock_entries(path: Path = LOCK) -> list[tuple[Requirement, set[str]]]:
    """(requirement, the packages it is there for: uv's `# via` annotations) for each pin of the lock."""
    entries, via = [], None
    for line in path.read_text().splitlines():
        text = line.strip()
        if text and not text.startswith("#"):
            via = set()
            entries.append((Requirement(text), via))
        elif via is not None and (text.startswith("# via") or text.startswith("#   ")):
            names = text.removeprefix("# via").lstrip("#").split()
            via.update(canonicalize_name(name) for name in names if "-r" not in names)  # not `-r requirements.txt`
    return entries


def target_environment(version: str) -> dict[str, str]:
    """The marker environment of CPython `version` on Linux x86_64."""
    full = version if version.count(".") == 2 else f"{version}.0"
    return {"python_version": ".".join(full.split(".")[:2]), "python_full_version": full,
            "implementation_version": full, "implementation_name": "cpython",
            "platform_python_implementation": "CPython", "sys_platform": "linux", "platform_system": "Linux",
            "platform_machine": "x86_64", "os_name": "posix"}


def pinned(version: str, path: Path = LOCK) -> dict[str, str]:
    """{package: version} that the lock pins on CPython `version`, Linux x86_64."""
    env = target_environment(version)
    return {canonicalize_name(req.name): str(req.specifier).removeprefix("==")
            for req, _ in lock_entries(path) if req.marker is None or req.marker.evaluate(env)}


def test_the_lock_pins_one_release_of_each_package_for_every_supported_python():
    versions = {}  # package -> {version pinned: the Pythons it is pinned for}
    for python in checked_versions():
        for name, version in pinned(python).items():
            versions.setdefault(name, {}).setdefault(version, []).append(python)
    differ = {name: found for name, found in versions.items() if len(found) > 1}
    assert not differ, ("expected one release of each package for every supported Python (pip checks a lock for "
                        f"another Python with the markers of its own), the lock pins these by Python: {differ}")


def checked_versions() -> list[str]:
    """Each supported minor at .0, Debian 12's 3.11.2, and every patch release the lock's markers part at."""
    versions = {f"{minor}.0" for minor in supported_minors()} | {"3.11.2"}
    for req, _ in lock_entries():
        for bound in re.findall(r"python_full_version [<>=!]+ [\"'](\d+\.\d+\.\d+)[\"']", str(req.marker or "")):
            if bound in requires_python():
                versions.add(bound)
    return sorted(versions, key=lambda v: tuple(map(int, v.split("."))))


# `make` with a stand-in nvidia-smi: the machine's GPU, as the Makefile sees it
FAKE_NVIDIA_SMI = '#!/bin/sh\n[ "$1" = -L ] && [ -n "$FAKE_GPU" ] && echo "GPU 0: NVIDIA H100 (UUID: GPU-0)" && exit 0\nexit 9\n'


def make(*args, tmp, gpu=False, expect_ok=True, **env_extra):
    """`make ARGS` in the checkout with a stand-in nvidia-smi first on PATH (it answers -L only when `gpu`)."""
    bin_dir = Path(tmp) / "fake-bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "nvidia-smi").write_text(FAKE_NVIDIA_SMI)
    (bin_dir / "nvidia-smi").chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCH", "MAKE", "MFLAGS"))}
    env.update(PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}", FAKE_GPU="1" if gpu else "", **env_extra)
    proc = subprocess.run(["make", "--no-print-directory", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=60)
    if expect_ok:
        assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout + proc.stderr


needs_make = pytest.mark.skipif(not shutil.which("make"), reason="no make here")
real_gpu = Path("/dev/nvidia0").exists()


#: what pip says when it cannot reach an index or a file: the run is skipped, not failed
NETWORK_TROUBLE = ("Could not fetch URL", "NewConnectionError", "Max retries exceeded", "ConnectTimeout",
                   "ReadTimeout", "Temporary failure in name resolution", "Name or service not known",
                   "Network is unreachable", "ProxyError", "Connection reset", "connection broken")

#: torch's CUDA build's own packages: pinned in the lock as torch pins them, GBs to download; left out here
GPU_STACK = re.compile(r"^(nvidia-|cuda-|triton$)")

# every manylinux tag up to glibc 2.28 (torch's own floor): pip does not widen a --platform by itself
PLATFORMS = [f"manylinux_2_{minor}_x86_64" for minor in range(28, 4, -1)] + [
    "manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64"]


def resolution_args(version, folder: Path) -> list[str]:
    """pip's arguments for resolving, in `folder`, what make setup installs besides torch (requirements.txt under the
    lock, and torch's own dependencies as the lock pins them) for CPython `version` on Linux x86_64."""
    torch_deps = folder / "torch-dependencies.txt"
    torch_deps.write_text("".join(f"{req}\n" for req, via in lock_entries()
                                  if "torch" in via and not GPU_STACK.match(canonicalize_name(req.name))))
    return ["install", "--dry-run", "--ignore-installed", "--disable-pip-version-check", "--no-input",
            "--timeout", "15", "--retries", "2", "--target", str(folder / "target"),
            "--python-version", version, "--implementation", "cp", "--only-binary", ":all:",
            *[arg for platform in PLATFORMS for arg in ("--platform", platform)],
            "-r", str(REQUIREMENTS), "-r", str(torch_deps), "-c", str(LOCK), "--report", str(folder / "report.json")]


@pytest.fixture(scope="module")
def resolutions(tmp_path_factory):
    """{version: (pip's exit status, what it said, its report or None)} for every checked Python.

    The resolutions wait on the package index most of their time, so they run at once, each its own pip, and
    once in a session: the first xdist worker to need them runs them all, under a lock in the session's folder,
    and the others read what it wrote (one after another, the five took 46-97 s each)."""
    from importlib.metadata import version as installed

    from filelock import FileLock

    pip = tuple(int(part) for part in installed("pip").split(".")[:2] if part.isdigit())
    if pip < (23, 2):  # Debian 12's venvs come with pip 23.0.1
        pytest.skip(f"pip {installed('pip')} checks a package's Requires-Python against the Python it runs on, not "
                    "--python-version: it cannot resolve for another Python (pip 23.2 and later can)")
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base  # the session's, for every worker
    done = shared / "lock-resolutions.json"
    with FileLock(str(shared / "lock-resolutions.lock")):
        if not done.exists():
            running = {}
            for version in checked_versions():
                folder = shared / f"lock-resolution-{version}"
                folder.mkdir(exist_ok=True)
                running[version] = (folder, subprocess.Popen(
                    [sys.executable, "-m", "pip", *resolution_args(version, folder)], cwd=folder,
                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
            results = {}
            deadline = time.monotonic() + 600
            for version, (folder, proc) in running.items():
                try:
                    said, _ = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    proc.kill()
                    said = proc.communicate()[0] + "\n(stopped after 600 s)"
                report = folder / "report.json"
                results[version] = (proc.returncode, said, report.read_text() if report.exists() else None)
            done.write_text(json.dumps(results))
    return {version: tuple(result) for version, result in json.loads(done.read_text()).items()}


@pytest.mark.grading  # the slow tier: the resolutions download the wheels they consider (tens of seconds)
@pytest.mark.parametrize("version", checked_versions())
def test_the_lock_resolves_for_each_supported_python(version, resolutions):
    """What make setup installs besides torch (requirements.txt under the lock, and torch's own dependencies as
    the lock pins them), resolved by pip for CPython `version` on Linux x86_64: it resolves, and every package it
    takes is pinned in the lock."""
    returncode, said, report = resolutions[version]
    if returncode and any(sign in said for sign in NETWORK_TROUBLE):
        pytest.skip(f"the package index cannot be reached from here: {next(l for l in said.splitlines() if any(s in l for s in NETWORK_TROUBLE))[:300]}")
    said = "\n".join(l for l in said.splitlines() if not l.startswith("WARNING: Location"))  # a local index's gaps
    assert returncode == 0, f"expected requirements.lock to resolve on Python {version}, pip said:\n{said[-4000:]}"
    taken = {canonicalize_name(i["metadata"]["name"]): i["metadata"]["version"]
             for i in json.loads(report)["install"]}
    assert ("numpy" in taken and "nbgrader" in taken), f"expected a whole set-up resolved, got {sorted(taken)}"
    # pip read the markers off this Python, not `version`'s: a package is pinned if a line of the lock names it
    lock = {}
    for req, _ in lock_entries():
        lock.setdefault(canonicalize_name(req.name), set()).add(str(req.specifier).removeprefix("=="))
    unpinned = sorted(f"{name}=={v}" for name, v in taken.items() if name not in lock)
    assert not unpinned, (f"expected every package the set-up installs on Python {version} to be pinned in "
                          f"requirements.lock (make lock), these are not: {unpinned}")
    assert {name: v for name, v in taken.items() if v not in lock[name]} == {}


@needs_make
def test_the_supported_pythons_are_stated_once_and_agree(tmp_path):
    """pyproject.toml's requires-python is 3.10 to 3.13, the Makefile reads it there (its venv check and `make
    lock`'s lowest Python), and the lock's header says the same."""
    assert supported_minors() == ["3.10", "3.11", "3.12", "3.13"]
    shown = make("-n", "setup", "lock", f"VENV={tmp_path}/venv", "TORCH_BUILD=cpu", "UV=/bin/true", tmp=tmp_path)
    assert "sys.exit(not lo <= sys.version_info[:2] < hi)' 3.10 3.14" in shown  # the venv's Python is checked
    assert "uv\" pip compile --quiet --universal --fork-strategy fewest \\\n  --python-version 3.10 " in shown
    assert "requires-python: 3.10 to 3.13" in LOCK.read_text()


@pytest.mark.parametrize("version", checked_versions())
def test_requirements_pins_are_the_locks(version):
    """Each pin of requirements.txt that applies on `version` is the lock's version there (a pin changed without
    `make lock` shows here, offline)."""
    env = target_environment(version)
    lock = pinned(version)
    for line in REQUIREMENTS.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            req = Requirement(line)
            if req.marker is None or req.marker.evaluate(env):
                assert lock.get(canonicalize_name(req.name)) == str(req.specifier).removeprefix("=="), (
                    f"expected requirements.txt's {line!r} to be requirements.lock's on Python {version}: make lock")


# -- make setup: which torch, from where (make -n: nothing runs but the Makefile's own probes) ----------------

def setup_plan(tmp_path, *args, gpu=False):
    """The commands `make setup` would run for a venv that does not exist yet, up to its stamp: the kit's bytecode,
    compiled after it at every make, is left off."""
    plan = make("-n", "setup", f"VENV={tmp_path}/venv", *args, gpu=gpu, tmp=tmp_path)
    head, _, last = plan.rstrip().rpartition("\n")
    assert "-m compileall -q autograder parts grader_cli.py" in last, f"expected the kit compiled last, got {last!r}"
    return head


def torch_version():
    return TORCH.split("==")[1]


@needs_make
@pytest.mark.skipif(real_gpu, reason="this machine has /dev/nvidia0: make setup takes the CUDA build here")
def test_setup_takes_the_cpu_build_where_there_is_no_gpu(tmp_path):
    plan = setup_plan(tmp_path)
    assert '"$TORCH_SAYS" cpu "this machine has no NVIDIA GPU (TORCH_BUILD=auto; TORCH_BUILD=cuda for the other)"' \
        in plan
    # first pip's configured sources, offline (a local wheel store), only for a +cpu wheel ...
    assert f'install --no-deps --no-index "{TORCH}+cpu"' in plan
    # ... then PyTorch's CPU index, after one short request shows it can be reached (no wait on pip's retries)
    assert f"urlopen(sys.argv[1], timeout=5)' \"{CPU_INDEX_URL}/torch/\"" in plan
    assert f'install --no-deps "{TORCH}" --index-url "{CPU_INDEX_URL}"' in plan
    assert f'install "{TORCH}" -r requirements.txt -c requirements.lock' in plan
    assert plan.rstrip().endswith(f"touch {tmp_path}/venv/.installed-torch--{torch_version()}-cpu")


@needs_make
def test_setup_takes_the_cuda_build_from_pip_where_nvidia_smi_finds_a_gpu(tmp_path):
    plan = setup_plan(tmp_path, gpu=True)
    assert '"$TORCH_SAYS" cuda "this machine has an NVIDIA GPU (TORCH_BUILD=auto; TORCH_BUILD=cpu for the other)"' \
        in plan
    assert "download.pytorch.org" not in plan and "+cpu" not in plan and "--index-url" not in plan
    assert f'install "{TORCH}" -r requirements.txt -c requirements.lock' in plan  # pip's own sources: PyPI's CUDA build
    assert plan.rstrip().endswith("-cuda")


@needs_make
@pytest.mark.parametrize("build, gpu", [("cpu", True), ("cuda", False)])
def test_torch_build_overrides_the_choice(tmp_path, build, gpu):
    plan = setup_plan(tmp_path, f"TORCH_BUILD={build}", gpu=gpu)
    assert f'"$TORCH_SAYS" {build} "TORCH_BUILD={build} was asked for"' in plan
    assert (CPU_INDEX_URL in plan) == (build == "cpu")


@needs_make
def test_a_build_asked_for_is_kept_for_the_next_make_until_auto_chooses_again(tmp_path):
    """`make setup TORCH_BUILD=cuda` then `make test`, as typed: the second make keeps the CUDA build asked for
    (it took the machine's own choice, and replaced 3 GB of CUDA torch by the CPU build, on a machine with no GPU)."""
    asked = setup_plan(tmp_path, "TORCH_BUILD=cuda")
    assert f"echo cuda > {tmp_path}/venv/.torch-build" in asked, asked[-600:]
    (tmp_path / "venv").mkdir()
    (tmp_path / "venv" / ".torch-build").write_text("cuda\n")
    later = setup_plan(tmp_path)  # no TORCH_BUILD given
    assert ('"$TORCH_SAYS" cuda "TORCH_BUILD=cuda was asked for by an earlier make setup (kept in '
            f'{tmp_path}/venv/.torch-build; TORCH_BUILD=auto chooses again)"') in later, later[-600:]
    assert later.rstrip().endswith("-cuda")
    again = setup_plan(tmp_path, "TORCH_BUILD=auto")
    assert f"rm -f {tmp_path}/venv/.torch-build" in again and not again.rstrip().endswith("-cuda")


@needs_make
@pytest.mark.parametrize("build", ["cpu", "cuda"])
def test_torch_index_names_another_source(tmp_path, build):
    plan = setup_plan(tmp_path, f"TORCH_BUILD={build}", "TORCH_INDEX=https://mirror.example/whl/cu130")
    assert f'install --no-deps "{TORCH}" --index-url "https://mirror.example/whl/cu130"' in plan
    assert "download.pytorch.org" not in plan
    empty = setup_plan(tmp_path, f"TORCH_BUILD={build}", "TORCH_INDEX=")  # pip's own sources only
    assert "--index-url" not in empty and "urlopen" not in empty


@needs_make
def test_an_unknown_torch_build_is_refused(tmp_path):
    said = make("-n", "setup", "TORCH_BUILD=rocm", f"VENV={tmp_path}/venv", expect_ok=False, tmp=tmp_path)
    assert "TORCH_BUILD=rocm: cpu, cuda or auto" in said


@needs_make
def test_another_torch_and_its_stamp(tmp_path):
    plan = setup_plan(tmp_path, "TORCH=torch==2.14.1", "TORCH_BUILD=cpu")
    assert '"torch==2.14.1+cpu"' in plan and plan.rstrip().endswith(".installed-torch--2.14.1-cpu")


def test_gradescope_defaults_to_the_same_cpu_index():
    """Gradescope's images have no GPU: its setup.sh takes torch from the CPU index the Makefile uses there."""
    from autograder.integrations.gradescope import setup_sh

    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^CPU_INDEX\s*:?=\s*(\S+)$", makefile, re.M).group(1) == CPU_INDEX_URL
    assert f"DEFAULT_TORCH_INDEX_URL={CPU_INDEX_URL}" in setup_sh()


# -- make setup, run for real against stand-ins: what it says -------------------------------------------------

FAKE_VENV_PYTHON = """#!/bin/sh
# Stand-in for a venv's python: pip finds no torch offline; the probe of the index is the real one; the install of
# the requirements fails as pip does when a pin needs a newer Python.
case "$*" in
  *--no-index*) exit 1 ;;
  *urlopen*) exec "$REAL_PYTHON" "$@" ;;
  *"-r requirements.txt"*)
    i=0; while [ $i -lt 200 ]; do echo "Collecting something-$i"; i=$((i+1)); done
    echo "INFO: pip is looking at multiple versions of nbconvert to determine which version is compatible."
    echo "ERROR: Ignored the following versions that require a different python version: 4.1.3 Requires-Python >=3.11.5"
    echo "ERROR: Could not find a version that satisfies the requirement soupsieve==4.1.3 (from versions: 2.10)" >&2
    echo "ERROR: No matching distribution found for soupsieve==4.1.3" >&2
    exit 1 ;;
esac
exit 0
"""


@needs_make
def test_a_failed_install_shows_pips_own_error_and_an_unreachable_index_costs_seconds(tmp_path):
    """pip's own error, not a summary; and an index that does not answer (a blackholed address here, or one that
    refuses) is given up after one 5-second request, not pip's retries (here minutes: PIP_DEFAULT_TIMEOUT)."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text(FAKE_VENV_PYTHON)
    (venv / "bin" / "python").chmod(0o755)
    start = time.monotonic()
    said = make("setup", f"VENV={venv}", "TORCH_BUILD=cpu", "TORCH_INDEX=http://10.255.255.1/whl/cpu",
                expect_ok=False, tmp=tmp_path, REAL_PYTHON=sys.executable)
    assert time.monotonic() - start < 20
    assert "http://10.255.255.1/whl/cpu cannot be reached from here" in said and "TORCH_INDEX=URL" in said
    assert "make setup: pip failed (exit status 1)" in said and f"all of it: {venv}/setup.log" in said
    assert "ERROR: No matching distribution found for soupsieve==4.1.3" in said
    assert "Requires-Python >=3.11.5" in said
    assert "Collecting something-0\n" not in said  # the end of pip's output, not all of it
    assert not list(venv.glob(".installed-*"))  # a failed set-up is not taken as done


#: Stand-in for a venv's python that holds the CUDA build of torch (the set-up's build probe, TORCH_BUILT, says so),
#: logs each pip command, and stops at the install of the requirements as a Ctrl-C would (exit status 130)
HALF_DONE_VENV_PYTHON = """#!/bin/sh
echo "$*" | head -c 120 >> "$(dirname "$0")/../calls.log"; echo >> "$(dirname "$0")/../calls.log"
case "$*" in
  *'print("cuda" if'*) echo cuda ;;
  *"-r requirements.txt"*) exit 130 ;;
esac
exit 0
"""


@needs_make
def test_a_setup_stopped_half_way_is_not_taken_as_done_and_the_other_build_is_read_from_torch_itself(tmp_path):
    """A set-up stopped half-way (here after it removed the CUDA build for the CPU one) left the old stamp, so the next
    `make test` took a venv with no torch as set up. The stamps go first, and the build in the venv is read from the
    installed torch's version.py, so a second set-up after any stop still replaces the other build."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text(HALF_DONE_VENV_PYTHON)
    (venv / "bin" / "python").chmod(0o755)
    stamp = venv / f".installed-torch--{torch_version()}-cuda"
    stamp.touch()
    said = make("setup", f"VENV={venv}", "TORCH_BUILD=cpu", "TORCH_INDEX=", expect_ok=False, tmp=tmp_path)
    assert "make setup: replacing the cuda build of torch (TORCH_BUILD=cpu)" in said, said
    assert "make setup: pip failed (exit status 130)" in said, said
    assert not list(venv.glob(".installed-*")), "expected no stamp after a set-up that stopped half-way"
    calls = (venv / "calls.log").read_text()
    assert "uninstall -y torch" in calls, calls


@needs_make
def test_setup_refuses_a_python_outside_the_supported_range(tmp_path):
    old = tmp_path / "python3.9"
    old.write_text('#!/bin/sh\ncase "$1" in -V) echo "Python 3.9.18" ;; *) exit 1 ;; esac\n')
    old.chmod(0o755)
    said = make("setup", f"VENV={tmp_path}/venv", f"PYTHON={old}", expect_ok=False, tmp=tmp_path)
    assert "the kit supports Python >= 3.10, < 3.14" in said and "is Python 3.9.18" in said
    assert not (tmp_path / "venv").exists()


@needs_make
def test_setup_upgrades_the_venvs_pip_to_the_pinned_release_before_anything_else(tmp_path):
    """Debian 12's venvs come with pip 23.0.1, for which the five lock checks above skipped: the set-up's first
    pip command installs the pinned pip."""
    plan = setup_plan(tmp_path)
    pinned = re.search(r"^PIP_VERSION \?= (\S+)$", (ROOT / "Makefile").read_text(), re.M).group(1)
    installs = [line for line in plan.splitlines() if "-m pip" in line]
    assert installs and f'install "pip=={pinned}"' in installs[0], installs[:2]
    assert tuple(int(x) for x in pinned.split(".")[:2]) >= (23, 2)


TORCH_VERSION_PY = "__version__ = '{version}'\ncuda = {cuda!r}\n"


@pytest.mark.parametrize("chosen, cuda, says", [
    ("cpu", None, "installed torch 2.13.0+cpu, the CPU build, from https://download.pytorch.org/whl/cpu: the CPU "
                  "build because this machine has no NVIDIA GPU"),
    ("cpu", "13.0", "installed torch 2.13.0, the build with CUDA 13.0, from pip's own sources, "
                    "https://download.pytorch.org/whl/cpu not reached: not the CPU build chosen"),
    ("cuda", "13.0", "installed torch 2.13.0, the build with CUDA 13.0, from pip's own sources: the CUDA build "
                     "because this machine has an NVIDIA GPU"),
    ("cuda", None, "not the CUDA build chosen"),
])
def test_setup_says_once_which_torch_it_installed_from_where_and_why(tmp_path, chosen, cuda, says):
    """The set-up's last line, and its only statement of the build: it printed "cpu build", then "built with CUDA
    13.0" where the CPU index could not be reached."""
    makefile = (ROOT / "Makefile").read_text()
    program = re.search(r"^define TORCH_SAYS\n(.*?)^endef", makefile, re.M | re.S).group(1)
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text("")
    version = "2.13.0" if cuda else "2.13.0+cpu"
    (tmp_path / "torch" / "version.py").write_text(TORCH_VERSION_PY.format(version=version, cuda=cuda))
    why = {"cpu": "this machine has no NVIDIA GPU (TORCH_BUILD=auto)", "cuda": "this machine has an NVIDIA GPU"}
    source = {("cpu", None): CPU_INDEX_URL, ("cpu", "13.0"): f"pip's own sources, {CPU_INDEX_URL} not reached"}
    said = subprocess.run([sys.executable, "-c", program, chosen, why[chosen], source.get((chosen, cuda), "")],
                          env={**os.environ, "PYTHONPATH": str(tmp_path)}, capture_output=True, text=True, check=True)
    lines = said.stdout.splitlines()
    assert len(lines) == 1 and says in lines[0], said.stdout
