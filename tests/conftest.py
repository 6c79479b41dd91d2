"""Shared fixtures of the kit's own tests."""
import os
import shutil
import sys
import tempfile
from pathlib import Path

from autograder.sandbox.limits import ONE_THREAD  # imports no torch

# One thread per library in every process of the suite too, as in a grading's (set before torch is imported):
# the two xdist workers, their gradings and the nbgrader kernels they start no longer slow each other down.
for _name, _value in ONE_THREAD.items():
    os.environ.setdefault(_name, _value)

import pytest  # noqa: E402

from autograder.grade.engine import grade  # noqa: E402
from autograder.submission.notebooks import load_nbformat  # noqa: E402

# The tests import nbformat as the kit does, without the grammar it does not use (~0.9 s a process; the
# unprivileged corpus runs and the xdist workers are processes of their own): before any test module imports it.
load_nbformat()

ROOT = Path(__file__).resolve().parent.parent
SOLUTIONS = ROOT / "solutions"
TEMPLATE = ROOT / "student_template"
from autograder import MODULES  # noqa: E402  (the kit's own list of parts: a new part is in the tests at once)


#: The fixtures that grade, start student processes or open pages in a headless browser (`browser`: ~1 s each;
#: `axe`: its audits, tens of seconds): a test that uses one is marked `grading` (below), as pytest.ini says.
GRADING_FIXTURES = {"reference_report", "template_report", "warm_servers", "readable_python", "student_python",
                    "browser", "axe"}


def pytest_collection_modifyitems(config, items):
    """The tiers: `make test-fast` runs what starts no grading, no student process and no browser
    (pytest -m "not grading"), `make test` everything. A test is in the grading tier when its file or itself says
    so (`pytest.mark.grading`) or when it uses a fixture of GRADING_FIXTURES."""
    for item in items:
        if GRADING_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.grading)
    # the tests of minutes first (marked `long`): pytest-xdist's workers share the rest as they go, so neither
    # is left running one of them alone at the end
    items.sort(key=lambda item: item.get_closest_marker("long") is None)


@pytest.fixture(autouse=True)
def _the_fast_tier_starts_no_student_process(request, monkeypatch):
    """The tiers' rule, kept: a test outside the grading tier that starts a student process fails, saying why."""
    if request.node.get_closest_marker("grading") is None:
        from autograder.sandbox.process import StudentProcess

        def refused(self, config):
            raise AssertionError(f"{request.node.nodeid} starts a student process: mark it `grading` "
                                 "(tests/conftest.py: the tiers)")
        monkeypatch.setattr(StudentProcess, "_spawn", refused)


def once_per_run(tmp_path_factory, name: str, produce):
    """What `produce()` returns (JSON-able), computed once for the whole test run and shared by pytest-xdist's
    workers: the first worker to ask computes it under a lock and leaves it in the run's shared temporary folder,
    the others read it there (a fresh process of seconds, once instead of once per worker)."""
    import fcntl
    import json

    base = tmp_path_factory.getbasetemp()
    folder = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base  # the workers' folders share a parent
    path = folder / f"once-{name}.json"
    with open(folder / f"once-{name}.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        if path.exists():
            return json.loads(path.read_text(encoding="utf-8"))
        value = produce()
        path.write_text(json.dumps(value), encoding="utf-8")
        return value


@pytest.fixture(scope="session")
def reference_report():
    """The reference solution, graded once for the session."""
    return grade(SOLUTIONS)


@pytest.fixture
def server_starts(monkeypatch):
    """Every start of a pair of warm servers (autograder.grade.servers.WarmServers) in this process during the
    test: a list of their keyword arguments, one item a start."""
    from autograder.grade import servers

    started = []

    class Counted(servers.WarmServers):
        def __init__(self, *args, **kwargs):
            started.append(kwargs)
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(servers, "WarmServers", Counted)
    return started


@pytest.fixture(scope="session")
def warm_servers():
    """The two fork servers of a class run (autograder.grade.servers.WarmServers), shared by the session.

    For the tests whose subject is what a grading finds (the corpus, blame), not how its processes start:
    a grading through them takes ~1.5 s instead of ~8 s cold, and gives the same report
    (tests/test_isolation.py compares both routes). The cold route keeps its own tests: reference_report
    and template_report are graded cold, as `grader_cli.py grade` does, and tests/test_attacks.py grades
    every case that could behave differently cold on both routes. None (cold gradings) where the servers
    cannot start here."""
    from autograder.grade.servers import WarmServers

    try:
        servers = WarmServers()
    except (OSError, RuntimeError):
        yield None
        return
    with servers:
        yield servers


@pytest.fixture(scope="session")
def template_report():
    """The untouched student template, graded once for the session."""
    return grade(TEMPLATE)


def _readable_python(folder: Path):
    """(interpreter, None) that any uid can run, with this interpreter's packages, made in `folder` (world-
    readable), or (None, why not).

    Root never runs student code as root: below the namespaces level it drops to a uid of its own, which
    must read Python and torch. A venv made from /usr/bin/python3 whose site-packages reach this
    interpreter's through a .pth file gives such a uid an interpreter (as on a CI runner or in Docker). Where
    that uid cannot read them (a clone inside a private folder: mktemp -d, a home of mode 0700), the venv gets
    a readable mirror of them of its own instead (hard links where the files are readable and on the same
    file system, copies elsewhere), so that the unprivileged tier runs wherever the kit is cloned.
    """
    import site
    import subprocess
    import sys

    base = Path("/usr/bin/python3")
    if not base.exists():
        return None, "no /usr/bin/python3 to make a venv that other users can run"
    version = subprocess.run([str(base), "-c", "import sys; print(sys.version_info[:2])"], capture_output=True,
                             text=True).stdout.strip()
    if version != str(tuple(sys.version_info[:2])):
        return None, f"/usr/bin/python3 is {version}, the kit's venv {tuple(sys.version_info[:2])}"
    subprocess.run([str(base), "-m", "venv", "--without-pip", str(folder / "venv")], check=True)
    packages = next((folder / "venv" / "lib").glob("python3*/site-packages"))
    python = folder / "venv" / "bin" / "python"

    def readable():
        check = [str(python), "-c", "import importlib.util as u; open(u.find_spec('torch').origin).close()"]
        proc = subprocess.run(as_uid(check) if os.geteuid() == 0 else check, capture_output=True, text=True)
        return proc.returncode == 0, proc.stderr.strip()[-200:]

    (packages / "kit.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    ok, why = readable()
    if not ok and os.geteuid() == 0:
        (packages / "kit.pth").write_text("\n".join(str(readable_mirror(Path(p), folder / f"packages-{i}"))
                                                    for i, p in enumerate(site.getsitepackages())) + "\n")
        ok, why = readable()
    if not ok:
        return None, f"uid {SPARE_UID} cannot read the kit's packages ({why})"
    return str(python), None


def readable_mirror(source: Path, mirror: Path) -> Path:
    """`source`'s tree again at `mirror`, every folder 0755 and every file readable by any uid: a hard link to
    a file that is readable already (same file system), else a copy of mode 0644 (0755 if executable)."""
    for top, folders, files in os.walk(source):
        here = mirror / Path(top).relative_to(source)
        here.mkdir(mode=0o755, exist_ok=True)
        here.chmod(0o755)
        for name in [f for f in folders if os.path.islink(os.path.join(top, f))]:
            os.symlink(os.readlink(os.path.join(top, name)), here / name)  # os.walk does not enter these
        for name in files:
            src, dst = os.path.join(top, name), here / name
            if os.path.islink(src):
                os.symlink(os.readlink(src), dst)
                continue
            mode = os.stat(src).st_mode
            if mode & 0o004:
                try:
                    os.link(src, dst)
                    continue
                except OSError:
                    pass  # another file system: a copy
            shutil.copyfile(src, dst)
            dst.chmod(0o755 if mode & 0o100 else 0o644)
    return mirror


SPARE_UID = 65534  # nobody: the unprivileged user the kit's tests grade as


def as_uid(cmd, uid=SPARE_UID):
    """`cmd` run as `uid` (by root, through setpriv): no groups, real and effective ids both."""
    return ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", *cmd]


def with_spare_uid_and_system_python(test):
    """Mark `test`, which runs a stdlib-only module of the kit as SPARE_UID with /usr/bin/python3 (as_uid), to
    skip, saying why, where that cannot be done."""
    for mark in (pytest.mark.skipif(os.geteuid() != 0, reason=f"switching to uid {SPARE_UID} needs root"),
                 pytest.mark.skipif(shutil.which("setpriv") is None, reason="setpriv is not installed"),
                 pytest.mark.skipif(not os.access("/usr/bin/python3", os.X_OK),
                                    reason=f"/usr/bin/python3 (readable by uid {SPARE_UID}) is missing")):
        test = mark(test)
    return test


@pytest.fixture
def world_readable_tmp():
    """A tmp folder under /tmp that SPARE_UID can enter and read."""
    path = Path(tempfile.mkdtemp(prefix="mha-readable-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def readable_copy(module, folder) -> Path:
    """A copy of the file `module` in `folder` that any uid can read, with the files beside it that it loads by path
    (seccomp.py's seccomp_bpf.py and seccomp_rules.py), where there are such."""
    copy = Path(folder) / Path(module).name
    for source in [Path(module), *sorted(Path(module).parent.glob(f"{Path(module).stem}_*.py"))]:
        shutil.copy(source, Path(folder) / source.name)
        (Path(folder) / source.name).chmod(0o644)
    return copy


@pytest.fixture(scope="session")
def readable_python():
    """An interpreter with the kit's packages that an unprivileged uid can run (skips, saying why, if none),
    removed at the end of the session."""
    folder = Path(tempfile.mkdtemp(prefix="mha-readable-python-"))
    folder.chmod(0o755)
    try:
        python, why = _readable_python(folder)
        if python is None:
            pytest.skip(why)
        yield python
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="session")
def student_python(request):
    """The interpreter for student processes at the landlock and none levels: this one, except as root, where
    the student uid must be able to read it (readable_python)."""
    import sys

    if os.geteuid() != 0:
        return sys.executable
    return request.getfixturevalue("readable_python")


#: (case, level, route, seconds, grader peak MiB, outcome) of every attack case graded by this process's tests
#: (test_attacks appends); each test's figures travel in its report (user_properties), so that the summary also
#: has them when pytest-xdist's workers ran the tests
ATTACK_FIGURES = []
_FIGURES_SEEN = []  # every figure reported in this run, from this process or from a worker


def _figures():
    # the list test_attacks filled: its `from tests.conftest import` may be another copy of this module
    return getattr(sys.modules.get("tests.conftest"), "ATTACK_FIGURES", None) or ATTACK_FIGURES


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    figures = _figures()
    if figures:
        report = outcome.get_result()
        report.user_properties += [("attack_figure", tuple(f)) for f in figures]
        figures.clear()


def pytest_runtest_logreport(report):
    _FIGURES_SEEN.extend(tuple(v) for k, v in report.user_properties if k == "attack_figure")


def pytest_terminal_summary(terminalreporter):
    """The cost of each attack case, printed at the end of the run: what each hostile submission cost the
    trusted side (the bounds themselves are asserted by tests/test_attacks.py)."""
    if not _FIGURES_SEEN:
        return
    tr = terminalreporter
    tr.section("attack corpus: grading time and the grader's peak memory, per case and level")
    tr.write_line(f"{'case':42} {'level':10} {'route':6} {'seconds':>7} {'peak MiB':>8}  outcome")
    for case, level, route, seconds, peak, outcome in sorted(_FIGURES_SEEN, key=lambda f: f[:3]):
        peak = f"{peak:8.0f}" if peak is not None else f"{'-':>8}"
        tr.write_line(f"{case:42} {level:10} {route:6} {seconds:7.1f} {peak}  {outcome}")


def unpaused_since(start: float) -> float:
    """Seconds since `start` (time.monotonic()) less those a speed measurement of another grading kept this
    one's processes stopped (autograder/sandbox/batchlock.py): the suite's workers share the user's machine-wide
    folder, and a stopped call's deadline does not count that time either."""
    import time

    from autograder.sandbox import batchlock

    return time.monotonic() - start - batchlock.paused_since(start)
