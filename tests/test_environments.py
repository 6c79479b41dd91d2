"""A grade never depends on where the kit runs: real CLI gradings across users, levels, paths and loads.

Every environment grades the same small class, the reference solution and
the buggy example, with `grader_cli.py grade-all` run as a real process from
a copy of the kit under the system temp folder, at a path with spaces and
accents, through a symlinked venv (an interpreter any uid can run). Each must
give the reference 100 and the buggy submission the score it gets here by
default, and name its isolation level in the gradebook.

The confinement steps are refused on purpose (MHA_REFUSE, read by the
trusted side only): a refusal in the probe gives a lower level, a refusal
in the real student process gives exit 2 and no score, never a 0.

When the tests run as root, the unprivileged environments run as uid 65534
(`setpriv`); as a normal user they run as that user and the root ones are
skipped, saying why.

The adversarial corpus runs as that unprivileged user too, whole, at the
namespaces and at the landlock level: tests/test_attacks.py in a pytest of
its own as uid 65534, narrowed to one level by MHA_ATTACKS_ISOLATION, on its
warm servers (one grading at a time). No case may be skipped there: the run
must report exactly as many passes (and strict xfails, for a case marked as
a known vulnerability) as the corpus has cases, counted from attacks.toml.
"""
from __future__ import annotations

import csv
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from autograder import LEVELS
from autograder.grade.engine import grade
from autograder.sandbox.errors import GraderUnavailable
from autograder.sandbox.isolation import choose_isolation
from tests.conftest import ROOT, SOLUTIONS, SPARE_UID, readable_mirror, as_uid

pytestmark = pytest.mark.grading  # every test here grades or starts student processes

BUGGY = ROOT / "examples" / "buggy-student"
ROOT_USER = os.geteuid() == 0
HAS_SETPRIV = shutil.which("setpriv") is not None


@dataclass
class Place:
    top: Path  # under the system temp folder
    kit: Path  # the copy of the kit: spaces and accents in its path
    python: Path  # the venv's interpreter, reached through a symlink
    klass: Path  # the class: reference/ and buggy/


@pytest.fixture(scope="module")
def place(student_python):
    top = Path(tempfile.mkdtemp(prefix="mha-kit-"))
    top.chmod(0o755)
    kit = top / "the kit, with spaces é ü"
    shutil.copytree(ROOT, kit, ignore=shutil.ignore_patterns(".venv", ".git", "__pycache__", ".pytest_cache"))
    venv = Path(student_python).parent.parent
    (top / "venv-link").symlink_to(venv, target_is_directory=True)
    klass = top / "class"
    shutil.copytree(SOLUTIONS, klass / "reference")
    shutil.copytree(BUGGY, klass / "buggy")
    for folder, _, files in os.walk(top):  # readable by the unprivileged uid, as a clone in /tmp is
        os.chmod(folder, 0o755)
        for name in files:
            os.chmod(os.path.join(folder, name), os.stat(os.path.join(folder, name)).st_mode | 0o644)
    yield Place(top, kit, top / "venv-link" / "bin" / "python", klass)
    shutil.rmtree(top, ignore_errors=True)


@pytest.mark.skipif(not (ROOT_USER and HAS_SETPRIV), reason="needs root and setpriv to read as another uid")
def test_the_readable_mirror_lets_the_unprivileged_uid_read_a_private_tree(world_readable_tmp):
    """The unprivileged tier's interpreter reads the venv's packages through this mirror where the clone's
    folder is closed to other users (tests/conftest.py, readable_python): files of every mode, links kept."""
    private = world_readable_tmp / "private"
    (private / "pkg" / "sub").mkdir(parents=True)
    (private / "pkg" / "open.py").write_text("open")
    (private / "pkg" / "sub" / "closed.py").write_text("closed")
    (private / "pkg" / "sub" / "closed.py").chmod(0o600)
    (private / "pkg" / "link.py").symlink_to("open.py")
    private.chmod(0o700)
    mirror = readable_mirror(private / "pkg", world_readable_tmp / "mirror")
    read = ("import sys; print(open(sys.argv[1]).read() + open(sys.argv[2]).read() + open(sys.argv[3]).read())")
    proc = subprocess.run(as_uid(["/usr/bin/python3", "-c", read, str(mirror / "open.py"),
                                  str(mirror / "sub" / "closed.py"), str(mirror / "link.py")]),
                          capture_output=True, text=True, timeout=60)
    assert proc.stdout.strip() == "openclosedopen", f"expected uid {SPARE_UID} to read the mirror, got {proc.stderr}"


@pytest.fixture(scope="module")
def buggy_score():
    """The buggy example's score at the default level, graded in this process: every environment must agree."""
    report = grade(BUGGY)
    assert 0 < report.score < 100, report.to_text()
    return report.score


#: As root, the uid of the test that holds 200 threads of the grading user: not SPARE_UID, under which the corpus
#: runs at the same time on the other worker. RLIMIT_NPROC counts a uid's tasks machine-wide: a student process sets
#: its limit at what its uid runs plus its allowance, and 200 threads started by another test right after that
#: (while a cold student process imports torch) left it none: "can't start new thread", once, in a full run.
HOLDER_UID = 65533


def as_user(user, cmd, uid=SPARE_UID):
    if user == "root":
        if not ROOT_USER:
            pytest.skip("the tests run as a normal user: no root environment to try")
        return cmd
    if ROOT_USER:
        if not HAS_SETPRIV:
            pytest.skip("running as root without setpriv: cannot drop to an unprivileged uid")
        return as_uid(cmd, uid)
    return cmd  # already an unprivileged user


def run_cli(place, user, args, env=None, home=None, uid=SPARE_UID):
    home = home or Path(tempfile.mkdtemp(prefix="mha-home-", dir=place.top))
    home.chmod(0o777)
    base = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "LANG": "C.UTF-8"}
    cmd = as_user(user, [str(place.python), "grader_cli.py", *args], uid)
    return subprocess.run(cmd, cwd=place.kit, env={**base, **(env or {})}, capture_output=True, text=True,
                          timeout=900)  # a guard against a hang, never a measure


def grade_class(place, user, level, env=None, uid=SPARE_UID):
    out = Path(tempfile.mkdtemp(prefix="mha-out-", dir=place.top))
    out.chmod(0o777)
    proc = run_cli(place, user, ["grade-all", str(place.klass), "-o", str(out), "--jobs", "2", "--isolation", level],
                   env=env, uid=uid)
    book = out / "gradebook.csv"
    rows = {r["id"]: r for r in csv.DictReader(book.open(encoding="utf-8"))} if book.exists() else {}
    return proc, rows


ENVIRONMENTS = [
    pytest.param("root", "auto", {}, "namespaces", id="root-auto"),
    pytest.param("root", "landlock", {}, "landlock", id="root-landlock"),
    pytest.param("root", "none", {}, "none", id="root-none"),
    pytest.param("root", "auto", {"MHA_REFUSE": "mount"}, "landlock", id="root-mounts-refused"),
    pytest.param("user", "auto", {}, "namespaces", id="user-auto"),
    pytest.param("user", "landlock", {}, "landlock", id="user-landlock"),
    pytest.param("user", "none", {}, "none", id="user-none"),
    # Ubuntu 23.10+ and GitHub's runners: unshare succeeds, then writing uid_map (and every mount) is refused
    pytest.param("user", "auto", {"MHA_REFUSE": "uid-map,mount"}, "landlock", id="user-ubuntu-24.04"),
    # explicitly: auto refuses to come down to none as a normal user (below)
    pytest.param("user", "none", {"MHA_REFUSE": "unshare,landlock"}, "none", id="user-no-namespaces-no-landlock"),
]


@pytest.mark.parametrize("user, level, env, expected", ENVIRONMENTS)
def test_the_reference_scores_100_and_the_buggy_submission_its_score_everywhere(place, buggy_score, user, level,
                                                                                  env, expected):
    proc, rows = grade_class(place, user, level, env)
    where = f"{user}, --isolation {level}, {env or 'no refusal'}"
    assert proc.returncode == 0, f"{where}: grade-all exited {proc.returncode}:\n{proc.stderr[-3000:]}"
    assert set(rows) == {"reference", "buggy"}, f"{where}: gradebook rows {sorted(rows)}"
    for sub, want in (("reference", 100.0), ("buggy", buggy_score)):
        row = rows[sub]
        assert row["status"] == "graded" and float(row["total"]) == want, (
            f"{where}: expected {sub} to score {want:g}, got {row['total']} ({row['status']}: {row['error']})")
        assert row["isolation"] == expected, f"{where}: expected isolation {expected}, got {row['isolation']}"


@pytest.mark.parametrize("command", ["grade-all", "nbgrader-sync"])
def test_a_class_run_as_a_normal_user_never_comes_down_to_none_silently(place, command):
    """Issue 32: as a normal user, auto with namespaces and Landlock refused would run student code as the
    grader's own uid: grade-all and nbgrader-sync exit 2, name the cause and the remedies, grade nothing."""
    out = Path(tempfile.mkdtemp(prefix="mha-out-", dir=place.top))
    out.chmod(0o777)
    args = ["grade-all", str(place.klass), "-o", str(out)] if command == "grade-all" else ["nbgrader-sync", str(out)]
    proc = run_cli(place, "user", args, env={"MHA_REFUSE": "unshare,landlock"})
    assert proc.returncode == 2, f"{command}: expected exit 2, got {proc.returncode}:\n{proc.stderr[-2000:]}"
    for words in ("the strongest level that works here is none", "your own uid", "Remedy:", "--isolation none"):
        assert words in proc.stderr, f"{command}: expected {words!r} in the message, got:\n{proc.stderr[-2000:]}"
    assert not (out / "gradebook.csv").exists(), f"{command}: expected nothing graded"


def test_200_threads_of_the_grading_user_leave_the_process_limit_to_the_student(place, buggy_score):
    """RLIMIT_NPROC counts every thread of the uid: the limit is set on top of what the user already runs."""
    holder = subprocess.Popen(as_user("user", [sys.executable if not ROOT_USER else "/usr/bin/python3", "-c",
                                               "import threading, time\n"
                                               "for _ in range(200):\n"
                                               "    threading.Thread(target=time.sleep, args=(900,), daemon=True).start()\n"
                                               "print('ready', flush=True)\ntime.sleep(900)"], HOLDER_UID),
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "ready"
        for level in ("none", "auto"):
            proc, rows = grade_class(place, "user", level, uid=HOLDER_UID)
            assert proc.returncode == 0, proc.stderr[-3000:]
            got = {sub: (r["status"], r["total"], r["error"]) for sub, r in rows.items()}
            assert got["reference"][:2] == ("graded", "100") and float(got["buggy"][1]) == buggy_score, (
                f"with 200 threads of the grading user running, --isolation {level}: {got}")
    finally:
        holder.kill()
        holder.wait()


# -- refusals: a lower level, or exit 2; never a 0 -----------------------------------------------------
def _steps(level):
    """The confinement steps a level goes through here (autograder/sandbox/student_process.py marks each with _step)."""
    common = ["fork", "setrlimit", "read-python", "seccomp"]
    if level == "namespaces":
        own = ["unshare", "unshare-mount", "mount", "pivot-root"] + (["setuid"] if ROOT_USER else ["uid-map", "capset"])
        return own + common
    return common + (["setuid"] if ROOT_USER else []) + (["landlock"] if level == "landlock" else [])


ALL_STEPS = sorted({s for level in LEVELS for s in _steps(level)} | {"uid-map", "capset", "setuid"})


@pytest.mark.parametrize("step", ALL_STEPS)
def test_a_refused_step_gives_a_lower_level_or_no_grading(step, monkeypatch, student_python):
    monkeypatch.setenv("MHA_REFUSE", step)
    try:
        level = choose_isolation("auto", python=student_python)
    except GraderUnavailable as exc:
        assert all(step in _steps(lvl) for lvl in LEVELS), f"refusing {step} stopped every level: {exc}"
        assert "refused on purpose" in str(exc) and "Remedy:" in str(exc), str(exc)
        return
    uses = [lvl for lvl in LEVELS if step in _steps(lvl)]
    first_free = next(lvl for lvl in LEVELS if lvl not in uses)
    assert level == first_free, f"with {step} refused, expected the {first_free} level, got {level}"


def test_a_student_process_that_cannot_start_gives_exit_2_and_no_score(place, tmp_path):
    """Refused only in the real student process (after a successful probe): the grader's failure, said so."""
    out = tmp_path / "results.json"
    proc = run_cli(place, "root" if ROOT_USER else "user",
                   ["grade", str(place.klass / "reference"), "--format", "gradescope", "-o", str(out)],
                   env={"MHA_REFUSE": "setrlimit@student"})
    assert proc.returncode == 2, f"expected exit 2, got {proc.returncode}: {proc.stderr[-2000:]}"
    assert "cannot run student code here" in proc.stderr and "setrlimit" in proc.stderr, proc.stderr
    results = json.loads(out.read_text())
    assert results["output"].startswith("Autograder failure, not a grade"), results
    assert results["tests"] == []


def test_a_memory_limit_under_64_mib_is_refused_as_the_graders_failure(place):
    """The memory limit is what student code gets above what Python and torch hold (autograder/sandbox/rlimits.py);
    one under 64 MiB (30 MiB here) is refused before any student code runs: exit 2, no score, and the message says
    the limit and the least it may be, the grader's failure, not the student's."""
    proc = run_cli(place, "root" if ROOT_USER else "user",
                   ["grade", str(place.klass / "reference"), "--memory-limit", "30MiB"])
    assert proc.returncode == 2, f"expected exit 2, got {proc.returncode}: {proc.stdout[-1500:]}{proc.stderr[-1500:]}"
    assert "memory limit (30 MiB) is too small" in proc.stderr and "at least 64 MiB" in proc.stderr, proc.stderr
    assert "Total:" not in proc.stdout, proc.stdout


def test_grade_all_records_an_error_row_without_a_score_and_grades_it_again(place):
    out = Path(tempfile.mkdtemp(prefix="mha-out-", dir=place.top))
    out.chmod(0o777)
    user = "root" if ROOT_USER else "user"
    args = ["grade-all", str(place.klass), "-o", str(out), "--memory-limit", "30MiB"]
    proc = run_cli(place, user, args)
    assert proc.returncode == 2, f"expected exit 2, got {proc.returncode}: {proc.stderr[-2000:]}"
    rows = list(csv.DictReader((out / "gradebook.csv").open(encoding="utf-8")))
    assert [(r["id"], r["status"], r["total"]) for r in sorted(rows, key=lambda r: r["id"])] == [
        ("buggy", "error", ""), ("reference", "error", "")], rows
    assert all("memory limit" in r["error"] for r in rows), rows
    again = run_cli(place, user, args[:4])  # the cause fixed: the error rows are graded
    rows = {r["id"]: r for r in csv.DictReader((out / "gradebook.csv").open(encoding="utf-8"))}
    assert again.returncode == 0 and rows["reference"]["total"] == "100", again.stderr[-2000:]


def test_require_isolation_refuses_to_grade_below_it(place):
    proc = run_cli(place, "root" if ROOT_USER else "user",
                   ["grade", str(place.klass / "reference"), "--require-isolation", "namespaces"],
                   env={"MHA_REFUSE": "unshare"})
    assert proc.returncode == 2 and "--require-isolation namespaces" in proc.stderr, proc.stderr
    assert "Remedy:" in proc.stderr and "Total:" not in proc.stdout


# -- the adversarial corpus as an unprivileged user ---------------------------------------------------------
#: What the unprivileged run selects of tests/test_attacks.py: every test that grades a corpus case (each case on
#: the warm route, the COLD ones on the cold route too: found by their `case` parameter, so a new scenario's test
#: is never left out), and the harness's checks that need the level: the survivor check on real student
#: processes (warm and cold) and "every case at every level under test".
HARNESS = ("test_a_live_student_process_is_seen_by_the_survivor_check", "test_every_corpus_case_is_graded_at_every_level")
HARNESS_TESTS = 3  # the survivor check on two routes, and the count of cases per level


def _corpus_tests() -> str:
    """The -k expression of the unprivileged run: the corpus's tests and the harness's. Not the cases that the
    trusted side alone decides (test_attacks.TRUSTED_SIDE_KINDS): graded once, by the suite itself, as they do
    not depend on the level or on the user (test_attacks.test_a_case_graded_at_one_level_reaches_nothing_a_level_
    confines)."""
    import inspect

    from tests import test_attacks

    graders = sorted(name for name, f in vars(test_attacks).items() if name.startswith("test_") and callable(f)
                     and "case" in inspect.signature(f).parameters and "level" in inspect.signature(f).parameters
                     and f is not test_attacks.test_attack_decided_by_the_trusted_side_earns_nothing_undeserved)
    return " or ".join(graders + list(HARNESS))


def _failures(stdout: str, limit: int = 12000) -> str:
    """What a pytest run printed of its failures (the FAILURES section and the short summary), else its tail."""
    start = stdout.find("= FAILURES =")
    if start < 0:
        return stdout[-6000:]
    start = stdout.rfind("\n", 0, start) + 1
    end = stdout.find("= attack corpus:", start)
    section = stdout[start:end if end > 0 else None]
    summary = stdout[stdout.find("short test summary info"):] if "short test summary info" in stdout else ""
    return section[:limit] + ("\n[...]\n" if len(section) > limit else "\n") + summary[-3000:]


def _expected_corpus_outcomes():
    """(passed, xfailed): what the unprivileged run must report at one level, counted from the corpus."""
    from tests.corpus import load_attacks
    from tests.test_attacks import COLD, graded_at_one_level

    cases = [c for c in load_attacks() if not graded_at_one_level(c)]
    graded = cases + [c for c in cases if c.id in COLD]
    xfailed = sum(1 for c in graded if c.known_vulnerability)
    return len(graded) - xfailed + HARNESS_TESTS, xfailed


@pytest.mark.long
@pytest.mark.parametrize("level", ["landlock", "namespaces"])
def test_the_attack_corpus_earns_nothing_and_leaks_nothing_as_an_unprivileged_user(place, level):
    """The whole corpus, graded at `level` as uid 65534 (tests/test_attacks.py, on its warm servers): no case
    skipped, none failed."""
    home = Path(tempfile.mkdtemp(prefix="mha-home-", dir=place.top))
    home.chmod(0o777)
    cmd = as_user("user", [str(place.python), "-m", "pytest", "tests/test_attacks.py", "-q", "-p", "no:cacheprovider",
                           "--basetemp", str(home / "pytest"), "-k", _corpus_tests()])
    proc = subprocess.run(cmd, cwd=place.kit, capture_output=True, text=True,
                          timeout=3600,  # a guard against a hang, never a measure
                          env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home),
                               "LANG": "C.UTF-8", "MHA_ATTACKS_ISOLATION": level})
    summary = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else proc.stderr[-500:]
    assert proc.returncode == 0, f"at {level} as uid {SPARE_UID}: {summary}\n{_failures(proc.stdout)}"
    passed, xfailed = _expected_corpus_outcomes()
    got = {kind: int(n) for n, kind in re.findall(r"(\d+) (passed|failed|skipped|xfailed|xpassed|errors?)\b", summary)}
    expected = {"passed": passed, **({"xfailed": xfailed} if xfailed else {})}
    assert got == expected, (f"at {level} as uid {SPARE_UID}: expected {expected} (no case skipped), got {got}: "
                             f"{summary}\n{proc.stdout[-3000:]}")
