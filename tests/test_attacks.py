"""The adversarial corpus (tests/corpus/attacks.toml), graded by the real engine at every isolation level.

Every attack case is a hostile submission shaped so that it would earn points
if its attack worked. For each, at each isolation level the machine offers
(namespaces, landlock, none), the grading must

* complete, within the case's max_seconds, listing exactly the hidden
  graders' checks (a forged results file would add, drop or change some);
* give the attacked module exactly the points it deserves (its `passes` /
  `fails`), and every other module full marks;
* leak nothing: no student-visible output (the report in every format, each
  check's message, the student's own output) holds the canary token of the
  test's environment, a line of the reference solution that the submission
  does not hold itself, or a line of the hidden graders;
* leave nothing behind: no results.json of the attack's outside the
  sandbox's private folders, no connection to the test's TCP server, no
  student process still alive;
* and show that the attack really ran (its probe is in the student's output).

A case with `refused` (a zip bomb, say) must instead be refused whole: grade
raises SubmissionError, its message holding that text, within max_seconds,
leaking nothing either. A case's submission is whatever `materialize`
returns, a folder (symbolic links included) or a zip; what the submission
"holds itself" (the lines it may see) is read from its regular files and
from links that stay inside it, never through a link to the kit.

`test_another_students_code_stays_private` grades a correct submission and
an attacking one side by side: the attacker must neither earn with nor see
the other student's code. `test_a_class_run_goes_on_and_no_neighbour_moves`
grades the class-scenario cases with `grade-all` (autograder.classrun.run) next to
a correct neighbour: the run lists both, the neighbour keeps 100 with clean
speed measurements.

**Levels.** Every case is a test at every level (`[namespaces-<case>]`,
`[landlock-<case>]`, `[none-<case>]`), except those the trusted side alone
decides (the intake, the answers' frames, the report's text, the speed
checks' clocks, its own comparisons: TRUSTED_SIDE_KINDS), graded at the
weakest level under test only, each with a test that shows why the level
cannot change its outcome
(`test_a_case_graded_at_one_level_reaches_nothing_a_level_confines`). Which levels the machine offers is
found by probing (`autograder.sandbox.isolation.choose_isolation(level)`); a level it
does not offer skips its tests, saying why. As root, student code below
namespaces runs as a uid of its own, which must read Python and torch: those
levels use the `student_python` interpreter (tests/conftest.py). Cases that
need what a level does not provide (isolation: the namespaces or landlock
level; a process limit, a memory limit) are skipped there with the reason.

**Warm servers, one grading at a time.** Each level has its own
`autograder.grade.servers.WarmServers` (a grader fork server that has imported
pytest, torch and the graders; a student zygote that has imported torch),
started at the level's first test and stopped after its last (tests are
grouped by level, so one pair runs at a time): a grading costs a fork, not
two `import torch`. Gradings still run one at a time, as a cold run did:
the corpus holds timing attacks and CPU burners, fork bombs and infinite
loops, and every case also grades the honest reference fused module's
speedup checks, which a neighbouring grading would disturb. A student
process forked from the zygote has the zygote's command line, so the check
for survivors recognises both forms (see `surviving_student_processes`).

**Cold on purpose.** The single-submission route (`grader_cli.py grade`)
starts a fresh grader and a fresh student process; the cases in `COLD` are
graded that way too, at every level (ids ending in `-cold`), because what
they attack differs between the two routes (see `COLD`).

The canary token is put in this process's environment before any server
starts (they copy the environment they are started with), and a process
started with it in its environment runs while the module's gradings do.

The harness checks itself: every case of attacks.toml is a test at every
level (nothing dropped), and the check for survivors counts stand-in
processes of both forms and real student processes, forked warm and started
cold, at every level.

To see that a case can fail, run it where its protection is missing:

    MHA_ATTACKS_FORCE=1            run the cases whose needs are not met
    MHA_ATTACKS_ISOLATION=none     grade at these levels only (comma-separated; default: all)

e.g. `MHA_ATTACKS_FORCE=1 MHA_ATTACKS_ISOLATION=none pytest tests/test_attacks.py -k kit-files`.
tests/test_environments.py runs the corpus as an unprivileged user through
MHA_ATTACKS_ISOLATION.
"""
from __future__ import annotations

import ast
import base64
import functools
import html
import json
import os
import re
import secrets
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import autograder
from autograder.classrun import gradebook, run
from autograder.grade.engine import grade
from autograder.grade.servers import WarmServers
from autograder.submission.take import SubmissionError, taken
from autograder.report.formats import render
from autograder.sandbox import client, isolation, limits as limits_module
from autograder.sandbox.errors import GraderUnavailable
from tests.conftest import ATTACK_FIGURES, ROOT, SOLUTIONS, TEMPLATE, unpaused_since
from tests.corpus import ATTACK_KINDS, MODULES, NEEDS, CorpusError, PatchError, load_attacks, materialize

pytestmark = pytest.mark.grading  # every test here grades or starts student processes

ATTACKS = load_attacks()
GRADERS = ROOT / "autograder" / "graders"  # the graders' library; each part's graders are in its folder
GRADER_FILES = [ROOT / "parts" / m / f"test_{m}.py" for m in MODULES]
CANARY_NAME = "MHA_CANARY_TOKEN"
FORMATS = ("text", "json", "gradescope", "markdown", "html", "junit", "classroom")
FORCE = os.environ.get("MHA_ATTACKS_FORCE") == "1"
CALL_TIMEOUT = 5.0
#: What one grading may cost the trusted side, whatever the submission sends it (issue: answers, messages and
#: pictures of a bounded cost): the grader process's peak resident memory above its own baseline, what a grader
#: holds before it grades (`grader_baseline_mib`: 236 MiB with torch's CPU build, about 520 with the CUDA build,
#: whose `import torch` alone takes 501 MiB; the DEFLATE bomb of the corpus would add 512 MiB), and the size of
#: the JSON report (a message bomb sends 4 MB per failed check).
GRADER_ALLOWANCE_MIB = 288
MAX_REPORT_BYTES = 512 << 10


@functools.cache
def grader_baseline_mib() -> float:
    """What a grader process holds before it grades, in MiB: the resident memory of a fresh interpreter, in the
    graders' environment, once it has imported pytest and what the warm grader server imports (torch, the
    plugin, the graders, the reference). A warm grader is a fork of that server and starts at the same figure;
    the build of torch decides most of it."""
    code = ("import importlib, pytest\nfrom autograder.grade.servers import GRADER_PRELOAD\n"
            "for name in GRADER_PRELOAD:\n    importlib.import_module(name)\n"
            "print(next(line.split()[1] for line in open('/proc/self/status') if line.startswith('VmHWM:')))\n")
    out = subprocess.run([sys.executable, "-c", code], env=limits_module.grader_env(), cwd=ROOT,
                         capture_output=True, text=True, timeout=300, check=True).stdout
    return int(out.split()[-1]) / 1024


def max_grader_mib() -> float:
    return grader_baseline_mib() + GRADER_ALLOWANCE_MIB


def _levels_under_test() -> tuple[str, ...]:
    """The isolation levels the corpus is graded at: MHA_ATTACKS_ISOLATION (comma-separated), else all."""
    asked = [x.strip() for x in os.environ.get("MHA_ATTACKS_ISOLATION", "").split(",") if x.strip()]
    unknown = [x for x in asked if x not in autograder.LEVELS]
    if unknown:
        raise ValueError(f"MHA_ATTACKS_ISOLATION: expected levels among {autograder.LEVELS}, got {unknown}")
    return tuple(asked) or autograder.LEVELS


LEVELS = _levels_under_test()

#: The attacks that the trusted side alone decides, whatever confines the student process: the intake (before any
#: student process starts: what it hands over, or its refusal), the answers' frames (autograder/sandbox/wire.py),
#: the reports (the grader's own text), the speed checks' figures (the grader's clocks, its secret inputs), and
#: what the trusted side does with a process that ends or answers with patched or lying objects (its own
#: comparisons of plain tensors; no expected value is ever sent to a student process).
#: Their cases are graded at one level, the weakest under test (ONE_LEVEL):
#: the levels differ only in what student code reaches outside itself, and what these cases hand over reaches
#: nothing (test_a_case_graded_at_one_level_reaches_nothing_a_level_confines shows it, case by case). A case of
#: these kinds that does reach outside (a link the student code opens by name, an import of a folder the intake
#: left out) stays at every level: LEVEL_BOUND.
TRUSTED_SIDE_KINDS = {
    "symlinks": "the intake: links are never followed", "zip-traversal": "the intake", "zip-bomb": "the intake",
    "huge-file": "the intake", "intake-scale": "the intake", "notebook-bombs": "the intake's notebook reader",
    "notebook-conversions": "the intake's notebook reader", "answer-bombs": "the answers' frames alone",
    "forged-report": "the report's own text", "csv-formula": "the report's own text",
    "hidden-loop": "the trusted side's clocks", "timing-replay": "the trusted side's clocks and secret inputs",
    "patched-timers": "the trusted side's clocks",
    "exit": "the trusted side: a student process that ends is its module's fault, whatever ended it",
    "patched-comparisons": "the trusted side's own comparisons", "lying-objects": "the answers' frames alone",
    "gc-search": "the trusted side: no expected value ever enters a student process",
}
LEVEL_BOUND = {
    "symlink-outside-shadow": "its code opens zz.py, a link the intake leaves out, by name",
    "symlink-outside-proc-self": "its code opens zz.py and yy.py, links the intake leaves out, by name",
    "symlinked-folder-to-kit": "its code imports lib.mha, from a linked folder the intake leaves out",
    "hidden-loop-reads-ahead": "its code looks at its own request pipe (fcntl, termios)",
    "os-exit-at-import": "its code imports os (os._exit), which reaches files and processes",
    "os-exit-in-call": "its code imports os (os._exit), which reaches files and processes",
    "tensor-subclass-always-equal": "its code calls getattr, which can reach any builtin",
}
ONE_LEVEL = LEVELS[-1]


def graded_at_one_level(case) -> bool:
    """(Another student's or a class run's cases stay at every level: what they check is the boundary.)"""
    return case.scenario == "single" and case.attack in TRUSTED_SIDE_KINDS and case.id not in LEVEL_BOUND

#: Cases also graded on the cold route (a fresh grader process, a student process started from student_process.py,
#: as `grader_cli.py grade` does), at every level: case id -> why the cold route differs for that attack.
COLD = {
    "kit-files": "the cold student process's command line, `python -I <kit>/autograder/sandbox/student_process.py "
                 "CONFIG`, names the kit's folder and carries the sandbox's config; a warm one shows the zygote's",
    "env-own-environ": "the cold student process's environment is the one Popen gives it; a warm one's "
                       "/proc/self/environ is the zygote's, from the zygote's start",
    "results-json-daemon": "a daemon of a cold student process is ended by that process's keeper and recognised "
                           "by the cold form of the command line (surviving_student_processes)",
    "other-student-code": "the cold command line names the attacker's own submission, next to the other "
                          "student's in the class folder: the clue this attack follows",
}


# -- what the hidden graders check ---------------------------------------------------
def _grader_checks() -> dict[tuple[str, str], float]:
    """(module, check id) -> points, read from the graders' @points(points, aspect) decorators."""
    checks = {}
    for path in sorted(GRADER_FILES):
        module = path.stem.removeprefix("test_")
        for node in ast.parse(path.read_text()).body:
            if not isinstance(node, ast.FunctionDef) or not node.name.startswith("test_"):
                continue
            for deco in node.decorator_list:
                if isinstance(deco, ast.Call) and getattr(deco.func, "id", None) == "points":
                    checks[(module, node.name)] = float(ast.literal_eval(deco.args[0]))
    return checks


GRADER_CHECKS = _grader_checks()


def submission_sources(path: Path) -> dict[str, str]:
    """{name: text} of the .py files a submission (a folder or a zip) holds itself.

    A symbolic link counts only when it points inside the submission (a link entry of a zip never): one that
    points at the reference or a grader must not make their lines the submission's own, or the leak checks
    would let them through.
    """
    path = Path(path)
    out = {}
    if path.is_dir():
        top = path.resolve()
        found = [Path(d) / n for d, _, names in os.walk(path) for n in names if n.endswith(".py")]  # no linked dirs
        for f in sorted(found):
            try:
                real = f.resolve()
                if real.is_file() and (real == top or top in real.parents):
                    out[str(f.relative_to(path))] = real.read_text(encoding="utf-8", errors="replace")
            except OSError:
                continue
    elif zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as zf:
            for info in zf.infolist():
                if info.filename.endswith(".py") and not info.is_dir() \
                        and not stat.S_ISLNK(info.external_attr >> 16):  # a link entry's data is its target
                    out[info.filename] = zf.read(info).decode("utf-8", errors="replace")
    return out


def _lines(folder: Path) -> set[str]:
    return {ln.strip() for text in submission_sources(folder).values() for ln in text.splitlines()}


def _code_lines(path: Path, min_len=30) -> set[str]:
    """The code lines of a Python file over `min_len` characters, stripped, without its docstrings and comments
    (with and without a trailing comment)."""
    source = path.read_text(encoding="utf-8")
    docs = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            docs.update(range(node.lineno, node.end_lineno + 1))
    out = set()
    for number, line in enumerate(source.splitlines(), 1):
        s = line.strip()
        if number in docs or s.startswith("#"):
            continue
        for variant in (s, s.split("  # ")[0].rstrip()):
            if len(variant) > min_len:
                out.add(variant)
    return out


def _grader_lines() -> set[str]:
    """Distinctive lines of the hidden graders (tests and their helpers): code, not docstrings (a check's
    docstring is its public name) nor what the student template holds."""
    lines = set().union(*(_code_lines(p) for p in [*GRADERS.glob("*.py"), *GRADER_FILES]))
    return lines - _lines(TEMPLATE)


GRADER_LINES = _grader_lines()


def reference_lines(submission: Path) -> set[str]:
    """Solution lines of the reference (between the nbgrader markers, over 25 characters) that neither the
    student template nor the submission itself holds: a student may see its own code, never these."""
    public = _lines(TEMPLATE) | _lines(submission)
    out = set()
    for path in SOLUTIONS.glob("*.py"):
        inside = False
        for line in path.read_text(encoding="utf-8").splitlines():
            s = line.strip()
            if s.startswith("### BEGIN SOLUTION"):
                inside = True
            elif s.startswith("### END SOLUTION"):
                inside = False
            elif inside and len(s) > 25 and s not in public:
                out.add(s)
    return out


# -- what the sandbox provides ---------------------------------------------------------
def unmet_needs(needs, level) -> list[str]:
    """Why each of `needs` is not met by the sandbox at `level` ([] when all are)."""
    reasons = []
    for need in needs:
        if need == "isolation":
            if level not in ("namespaces", "landlock"):
                reasons.append(f"isolation: student code runs at the {level} level, which keeps no files, "
                               "processes or network from it")
        elif need in ("process-limit", "memory-limit"):
            limits = getattr(limits_module, "Limits", None)
            field = {"process-limit": "processes", "memory-limit": "memory_bytes"}[need]
            if limits is None:
                reasons.append(f"{need}: autograder.sandbox.limits has no Limits (no {field} limit yet)")
            elif not getattr(limits(), field, None):
                reasons.append(f"{need}: autograder.sandbox.limits.Limits().{field} is not set")
        else:
            reasons.append(f"{need}: unknown need")
    return reasons


def skip_unless_met(case, at):
    """Skip unless the level `at` (a Level) is offered here and provides what `case` needs."""
    if at.why_not:
        pytest.skip(f"the {at.name} level is not offered here: {at.why_not}")
    reasons = unmet_needs(case.needs, at.name)
    if reasons and not FORCE:
        pytest.skip(f"{case.id} needs {', '.join(case.needs)}: " + "; ".join(reasons)
                    + " (MHA_ATTACKS_FORCE=1 runs it anyway)")


class Level:
    """An isolation level under test: its student interpreter, whether it is offered here (probed), and its
    warm servers (started on first use; started again if a grading ended them, which the test reports)."""

    def __init__(self, name, python):
        self.name, self.python = name, python
        try:
            isolation.choose_isolation(name, python=python)
            self.why_not = None
        except GraderUnavailable as exc:
            self.why_not = str(exc)
        self._servers = None
        self._lock = threading.Lock()

    def servers(self) -> WarmServers:
        with self._lock:  # two gradings at once (test_another_students_code_stays_private) start one pair
            if self._servers is not None and self.dead_servers():
                self.close()
            if self._servers is None:
                self._servers = WarmServers(python=self.python)
            return self._servers

    def dead_servers(self) -> list[str]:
        """The warm servers of this level that are no longer running."""
        if self._servers is None:
            return []
        procs = {"grader": self._servers.grader._proc, "zygote": self._servers.zygote._proc}
        return [name for name, proc in procs.items() if proc is None or proc.poll() is not None]

    def zygotes(self) -> dict[str, int]:
        """{label: pid} of this level's student zygote, for surviving_student_processes."""
        if self._servers is None or self._servers.zygote._proc is None:
            return {}
        return {self._servers.zygote.label: self._servers.zygote._proc.pid}

    def close(self):
        if self._servers is not None:
            self._servers.close()
            self._servers = None

    def grade(self, folder, route="warm", case=None):
        """Grade `folder` at this level: through the warm servers, or cold; (report, seconds)."""
        timeout = case.call_timeout if case is not None and case.call_timeout else CALL_TIMEOUT
        options = {"call_timeout": timeout, "isolation": self.name, "python": self.python}
        if route == "warm":
            options["servers"] = self.servers()
        start = time.monotonic()
        report = grade(folder, **options)
        return report, unpaused_since(start)


# -- fixtures ----------------------------------------------------------------------------
class Server:
    """A TCP server on 127.0.0.1 in the test process: any connection to it is a student process on the network."""

    def __init__(self):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.connections = []
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self):
        while True:
            try:
                conn, peer = self.sock.accept()
            except OSError:
                return
            self.connections.append(peer)
            try:
                conn.sendall(b"mha-attack-server\n")
            except OSError:
                pass
            conn.close()

    def close(self):
        self.sock.close()


@pytest.fixture(scope="module")
def server():
    srv = Server()
    yield srv
    srv.close()


@pytest.fixture(scope="module")
def marker():
    return f"mha-attack-{secrets.token_hex(8)}"


@pytest.fixture(scope="module")
def canary():
    """A secret as a CI token would be, that no student may ever see: in this process's environment (which
    the engine may hand down, and which the warm servers would copy when they start: this fixture comes
    first) and in the environment of another process, running while the module's gradings do (which
    /proc/<pid>/environ shows to whoever may read it)."""
    token = f"canary-{secrets.token_hex(12)}"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(CANARY_NAME, token)
        holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"], env=dict(os.environ),
                                  stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            yield token
        finally:
            holder.kill()
            holder.wait()


@pytest.fixture(scope="module")
def at(level, canary, request):
    """The Level under test (the `level` parameter, module-scoped: its servers serve all its tests)."""
    if level == "namespaces":  # root's student processes keep root's interpreter at this level
        python = sys.executable
    else:  # below it root's run as a uid of their own: an interpreter that uid can read (skips if none)
        python = request.getfixturevalue("student_python")
    lvl = Level(level, python)
    yield lvl
    lvl.close()


# -- what a student sees -------------------------------------------------------------------
def _strings(obj):
    if isinstance(obj, str):
        yield obj
    elif isinstance(obj, dict):
        for k, v in obj.items():
            yield str(k)
            yield from _strings(v)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            yield from _strings(v)


def visible_outputs(report) -> dict[str, str]:
    """Everything of a grading a student may see, decoded (unescaped HTML/XML, parsed JSON, decoded base64)."""
    out = {"student output": report.student_output, "report error": report.error,
           "report as dict": "\n".join(_strings(report.to_dict()))}
    for t in report.tests:
        out[f"message of {t.module}/{t.id}"] = t.message
    for fmt in FORMATS:
        try:
            text = render(report, fmt)
        except ValueError:  # a format this engine does not have
            continue
        if fmt in ("json", "gradescope"):
            text = "\n".join(_strings(json.loads(text)))
        elif fmt in ("html", "junit"):
            text = html.unescape(text)
        elif fmt == "classroom":
            text = "\n".join(_strings(json.loads(base64.b64decode(text))))
        out[f"{fmt} format"] = text
    return out


def leak_problems(report, forbidden: dict[str, set[str]]) -> list[str]:
    """Where a student-visible output (of a report, or {where: text}) holds one of `forbidden` (what kind ->
    strings); [] when none does."""
    found = []
    outputs = report if isinstance(report, dict) else visible_outputs(report)
    for where, text in outputs.items():
        if not text:
            continue
        for kind, strings in forbidden.items():
            for s in sorted(strings):
                if s and s in text:
                    at = text.index(s)
                    found.append(f"{where} holds {kind}: {s!r} (...{text[max(0, at - 80):at + len(s) + 40]!r}...)")
    if not found:
        return []
    return [f"expected no canary token, reference solution, hidden grader or other student's code in what a "
            f"student sees; found {len(found)}:\n    " + "\n    ".join(found[:8])]


# -- what a grading leaves behind ----------------------------------------------------------
def _scan(folder, depth, marker, hits, seen):
    try:
        folder = os.path.realpath(folder)
    except (OSError, ValueError):
        return
    if folder in seen or folder.startswith(("/proc", "/sys")) or folder == str(ROOT / ".git") \
            or (folder.startswith("/dev") and not (folder == "/dev/shm" or folder.startswith("/dev/shm/"))):
        return
    seen.add(folder)
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return
    for entry in entries:
        try:
            if entry.is_dir(follow_symlinks=False):
                if depth > 0:
                    _scan(entry.path, depth - 1, marker, hits, seen)
            elif entry.name.startswith("results.json") and entry.is_file(follow_symlinks=False):
                with open(entry.path, "rb") as fh:
                    if marker.encode() in fh.read(1 << 20):
                        hits.append(entry.path)
        except OSError:
            continue


def files_with_marker(marker, extra_roots=()) -> list[str]:
    """results.json files holding the attacks' marker, wherever an attack could have written them."""
    roots = [("/", 2), ("/tmp", 3), ("/var/tmp", 2), ("/dev/shm", 2), (Path.home(), 3), (ROOT, 6),
             *((p, 3) for p in sys.path if p),
             *((r, 12) for r in extra_roots)]
    hits, seen = [], set()
    for root, depth in roots:
        _scan(root, depth, marker, hits, seen)
    return sorted(set(hits))


def _is_student_process(cmdline, names, zygotes, pid) -> bool:
    """Whether a process with this command line is a student process of the gradings described.

    Cold: `python -I .../student_process.py CONFIG`, whose config names its sandbox (`mha-sandbox-...`) and the
    submission it grades (JSON-quoted), one of `names`. Warm: a fork of a student zygote keeps the zygote's
    command line, `python -I .../forkserver.py student fd:N LABEL`, whose label is unique to that zygote:
    any process holding one of `zygotes`' labels, other than that zygote itself.
    """
    if "mha-sandbox-" in cmdline and any(f'"{n}"' in cmdline or json.dumps(n) in cmdline for n in names):
        return True
    return any(address in cmdline and pid != zygote for address, zygote in zygotes.items())


def surviving_student_processes(submissions=(), zygotes=None, timeout=5.0) -> list[str]:
    """Student processes of these submissions' gradings still alive after them (waiting up to `timeout` s
    for them to go).

    A student process is recognised by its command line (`_is_student_process`): the sandbox and the
    submission, for one started cold; the address of its zygote (`zygotes`: {address: zygote pid}), for one
    forked warm. Processes of other gradings on the same machine (another test run, another zygote) are
    never counted, nor touched.
    """
    names = [str(Path(s).resolve()) for s in submissions]
    zygotes = zygotes or {}
    deadline = time.monotonic() + timeout
    while True:
        alive = []
        for pid in os.listdir("/proc"):
            if not pid.isdigit() or int(pid) == os.getpid():
                continue
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as fh:
                    cmdline = fh.read().replace(b"\0", b" ").decode(errors="replace")
                with open(f"/proc/{pid}/stat") as fh:
                    state, ppid, pgrp = fh.read().rsplit(")", 1)[1].split()[:3]
            except OSError:
                continue
            if state != "Z" and _is_student_process(cmdline, names, zygotes, int(pid)):
                alive.append(f"pid {pid} (state {state}, parent {ppid}, group {pgrp}): {cmdline[:130]}")
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.2)


# -- the expectations of a case ---------------------------------------------------------------
def expectation_problems(case, report, seconds) -> list[str]:
    """How the grading of `case` differs from what it deserves; [] when it does not."""
    if report.status != "graded":
        return [f"expected a completed grading, got status {report.status!r}: {report.error[:500]}"]
    problems = []
    got = {(t.module, t.id): t.points for t in report.tests}
    extra = sorted(set(got) - set(GRADER_CHECKS))
    missing = sorted(set(GRADER_CHECKS) - set(got))
    changed = sorted(k for k in set(got) & set(GRADER_CHECKS) if got[k] != GRADER_CHECKS[k])
    if extra or missing or changed:
        problems.append(f"expected the report to list exactly the hidden graders' {len(GRADER_CHECKS)} checks; it "
                        f"has {len(extra)} unknown {extra[:5]}, lacks {len(missing)} {missing[:5]}, and changes "
                        f"the points of {changed[:5]}")
    errors = [f"{t.module}/{t.id}: {t.message[:200]}" for t in report.tests if t.grader_error]
    if errors:
        problems.append("expected no grader errors, got:\n    " + "\n    ".join(errors[:5]))

    graded = [t for t in report.tests if t.module == case.module and t.status != "skipped"]
    passed = {t.id for t in graded if t.status == "passed"}
    expected = {t.id for t in graded} - set(case.fails) if case.fails is not None else set(case.passes)
    expected &= {t.id for t in graded}
    if passed != expected:
        earned, available = report.modules()[case.module]
        deserved = sum(t.points for t in graded if t.id in expected)
        undeserved = [f"{t.id} (+{t.points:g})" for t in graded if t.status == "passed" and t.id not in expected]
        lost = [f"{t.id} (-{t.points:g}): {t.message[:300]}" for t in graded
                if t.status != "passed" and t.id in expected]
        problems.append(f"expected {deserved:g}/{available:g} in {case.module}, got {earned:g}/{available:g}.\n"
                        f"    passed without deserving it: {undeserved or 'none'}\n    failed although deserved: "
                        + ("\n      ".join(lost) if lost else "none"))

    others = {m: f"{e:g}/{a:g}" for m, (e, a) in report.modules().items() if m != case.module and e != a}
    if others:
        details = [f"{t.module}/{t.id}: {t.message[:200]}" for t in report.failed() if t.module != case.module]
        problems.append(f"expected full marks outside {case.module}, got {others}:\n    " + "\n    ".join(details[:8]))
    if seconds > case.max_seconds:
        problems.append(f"expected the grading to end within {case.max_seconds:g} s, it took {seconds:.1f} s")
    if report.grader_peak_mib > max_grader_mib():
        problems.append(f"expected the grader process to stay under {max_grader_mib():.0f} MiB of memory (its "
                        f"baseline, {grader_baseline_mib():.0f} MiB, and {GRADER_ALLOWANCE_MIB} MiB), its peak "
                        f"was {report.grader_peak_mib:g} MiB")
    size = len(json.dumps(report.to_dict()))
    if size > MAX_REPORT_BYTES:
        problems.append(f"expected a JSON report of at most {MAX_REPORT_BYTES >> 10} KiB, got {size >> 10} KiB")
    if case.probe and case.probe not in report.student_output:
        problems.append(f"expected the attack's probe {case.probe!r} in the student's output (proof that the attack "
                        f"ran), got: {report.student_output[-600:]!r}")
    return problems


def refusal_problems(case, report, message, seconds) -> list[str]:
    """How the refusal of a `refused` case (SubmissionError: `message`; or a `report` if it was graded) differs
    from what it deserves; [] when it does not."""
    if message is None:
        return [f"expected the submission refused (SubmissionError holding {case.refused!r}), it was graded: "
                f"status {report.status!r}, score {report.score:g}"]
    problems = []
    if case.refused not in message:
        problems.append(f"expected the submission refused with a message holding {case.refused!r}, got {message!r}")
    if seconds > case.max_seconds:
        problems.append(f"expected the refusal within {case.max_seconds:g} s, it took {seconds:.1f} s")
    return problems


def assert_no_problems(case, problems):
    assert not problems, (f"{case.id} ({case.description}): {len(problems)} problem(s):\n  - "
                          + "\n  - ".join(problems))


def _kill(survivors):
    """End the student processes this test's grading left behind (by pid), so that they cannot disturb the next."""
    for line in survivors:
        try:
            os.kill(int(line.split()[1]), signal.SIGKILL)
        except (OSError, ValueError):
            pass


def server_problems(at) -> list[str]:
    """A grading must not end the warm servers that a whole class's gradings share ([] when it did not)."""
    dead = at.dead_servers()
    if not dead or (at.name == "none" and os.geteuid() != 0):
        # at the none level a non-root user's student code runs as that user, who owns the servers
        # (docs/security/isolation.md)
        return []
    return [f"expected the warm servers to outlive the grading, but the {' and the '.join(dead)} server(s) "
            "ended (they are started again for the next test)"]


def _params(case, server, marker):
    return {"port": server.port, "marker": marker}


def _case_params(cases):
    """Each case on the warm route, and the COLD ones on the cold route too (id `<case>-cold`)."""
    params = []
    for route in ("warm", "cold"):
        for case in cases:
            if route == "cold" and case.id not in COLD:
                continue
            marks = []
            if case.known_vulnerability:
                marks.append(pytest.mark.xfail(strict=True, reason=f"known vulnerability: {case.known_vulnerability}"))
            params.append(pytest.param(case, route, id=case.id if route == "warm" else f"{case.id}-cold",
                                       marks=marks))
    return params


SINGLE = [c for c in ATTACKS if c.scenario == "single" and not graded_at_one_level(c)]
SINGLE_ONE_LEVEL = [c for c in ATTACKS if graded_at_one_level(c)]


@pytest.mark.parametrize("case, route", _case_params(SINGLE))
@pytest.mark.parametrize("level", LEVELS, scope="module")
def test_attack_earns_nothing_undeserved_and_leaks_nothing(level, case, route, at, tmp_path, server, marker, canary):
    check_single(level, case, route, at, tmp_path, server, marker, canary)


@pytest.mark.parametrize("case, route", _case_params(SINGLE_ONE_LEVEL))
@pytest.mark.parametrize("level", [ONE_LEVEL], scope="module")
def test_attack_decided_by_the_trusted_side_earns_nothing_undeserved(level, case, route, at, tmp_path, server,
                                                                      marker, canary):
    """The same checks, at one level: TRUSTED_SIDE_KINDS."""
    check_single(level, case, route, at, tmp_path, server, marker, canary)


#: What the code handed over by a case graded at one level may use: the process's own memory, clocks and threads,
#: nothing a level confines (files, the network, processes, the environment).
SELF_CONTAINED_IMPORTS = {"math", "torch", "numpy", "sys", "io", "struct", "zipfile", "time", "timeit", "random",
                          "threading", "gc"}
REACHING_CALLS = {"open", "exec", "eval", "compile", "__import__", "breakpoint", "input", "getattr"}


def reaches_outside(source: str) -> list[str]:
    """What `source` uses beyond SELF_CONTAINED_IMPORTS, and the calls of REACHING_CALLS it makes ([]: none)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, RecursionError, MemoryError, ValueError):
        return []  # it cannot run at all: the student process fails to compile it at every level
    found = []
    for node in ast.walk(tree):
        names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                 else [node.module or "."] if isinstance(node, ast.ImportFrom) else [])
        found += [f"import {n}" for n in names if n.split(".")[0] not in SELF_CONTAINED_IMPORTS]
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in REACHING_CALLS:
            found.append(f"{node.func.id}()")
    return sorted(set(found))


@pytest.mark.parametrize("case", [pytest.param(c, id=c.id) for c in SINGLE_ONE_LEVEL])
def test_a_case_graded_at_one_level_reaches_nothing_a_level_confines(case, tmp_path):
    """Why ONE_LEVEL is enough for these cases. The levels differ only in what student code reaches outside
    itself. The intake decides first, before any student process starts (it has no level to depend on): it
    refuses the submission, or hands over a folder of regular files. The code in that folder uses nothing but
    torch, math, bytes in memory and its own clocks and threads, so it sends the same frames at every level, and
    the trusted side decides on those frames and on its own clocks alone."""
    folder = materialize(case, tmp_path / case.id, SOLUTIONS, params={"port": 1, "marker": "m"})
    reaching = {}
    try:
        with taken(folder) as got:
            for path in sorted(got.folder.rglob("*")):
                assert not path.is_symlink() and (path.is_dir() or path.is_file()), \
                    f"expected the intake to hand over regular files and folders only, got {path.name}"
                if path.suffix == ".py":
                    reaching[path.name] = reaches_outside(path.read_text(encoding="utf-8", errors="replace"))
    except SubmissionError as exc:
        assert case.refused and case.refused in str(exc), f"expected the intake to take {case.id}, it refused: {exc}"
        return
    assert not case.refused, f"expected the intake to refuse {case.id} ({case.refused!r}), it took it"
    reaching = {name: found for name, found in reaching.items() if found}
    assert not reaching, (f"{case.id}: expected code that reaches nothing outside its process (imports among "
                          f"{sorted(SELF_CONTAINED_IMPORTS)}, no call of {sorted(REACHING_CALLS)}), got {reaching}: "
                          f"grade it at every level (LEVEL_BOUND)")


def check_single(level, case, route, at, tmp_path, server, marker, canary):
    skip_unless_met(case, at)
    folder = materialize(case, tmp_path / case.id, SOLUTIONS, params=_params(case, server, marker))
    connections_before = len(server.connections)
    forbidden = {"the canary token": {canary}, "a line of the reference solution": reference_lines(folder),
                 "a line of the hidden graders": GRADER_LINES - _lines(folder)}
    if case.refused:  # the whole submission refused before grading: the error is all the student sees
        start = time.monotonic()
        try:
            report, message = at.grade(folder, route, case)[0], None
        except SubmissionError as exc:
            report, message = None, str(exc)
        seconds = unpaused_since(start)
        print(f"{case.id} at {level}, {route}: in {seconds:.1f} s, refused: {message!r}")
        ATTACK_FIGURES.append((case.id, level, route, seconds, None, "refused"))
        problems = refusal_problems(case, report, message, seconds)
        problems += leak_problems({"the refusal's message": message or ""}, forbidden)
    else:
        report, seconds = at.grade(folder, route, case)
        print(f"{case.id} at {level}, {route}: graded in {seconds:.1f} s, {case.module} "
              f"{report.modules()[case.module][0]:g}/{report.modules()[case.module][1]:g}, score {report.score:g}, "
              f"isolation {getattr(report, 'isolation', '?')!r}, grader peak {report.grader_peak_mib:g} MiB")
        earned, available = report.modules()[case.module]
        ATTACK_FIGURES.append((case.id, level, route, seconds, report.grader_peak_mib,
                               f"{case.module} {earned:g}/{available:g}"))
        problems = expectation_problems(case, report, seconds) + leak_problems(report, forbidden)
    leftovers = files_with_marker(marker, extra_roots=[tmp_path]) if case.attack == "results-json" else []
    for path in leftovers:  # never leave the attack's files behind, whatever the outcome
        try:
            os.remove(path)
        except OSError:
            pass
    alive = surviving_student_processes([folder], at.zygotes())
    _kill(alive)
    if leftovers:
        problems.append(f"expected no results.json of the attack outside the sandbox's private folders, found "
                        f"{len(leftovers)} (now removed): {leftovers[:10]}")
    new = server.connections[connections_before:]
    if new:
        problems.append(f"expected no connection to the test's server on 127.0.0.1, got {len(new)} from {new[:5]}")
    if alive:
        problems.append(f"expected no student process left after grading, found (now killed): {alive[:5]}")
    problems += server_problems(at)
    assert_no_problems(case, problems)


def _student_a(folder: Path, secret: str) -> Path:
    """A correct submission that carries a secret in each module, as another student's work would."""
    folder.mkdir(parents=True)
    for module in MODULES:
        text = (SOLUTIONS / f"{module}.py").read_text(encoding="utf-8")
        text = text.replace("import torch\n", f"import torch\n\nSTUDENT_A_SECRET = {secret!r}\n", 1)
        text += f"\n# {secret}: written by student A, for student A's eyes only\n"
        (folder / f"{module}.py").write_text(text, encoding="utf-8")
    return folder


OTHER_STUDENT = [c for c in ATTACKS if c.scenario == "other-student"]


@pytest.mark.parametrize("case, route", _case_params(OTHER_STUDENT))
@pytest.mark.parametrize("level", LEVELS, scope="module")
def test_another_students_code_stays_private(level, case, route, at, tmp_path, server, marker, canary):
    """Two students graded at the same time, in one class folder: B looks for A's code, earns nothing, sees nothing.

    The only test that grades two submissions at once (on the warm route, through the same servers): the
    other student is a correct submission, and B's attack is on attention.py, not on the timed module."""
    skip_unless_met(case, at)
    secret = f"student-a-secret-{secrets.token_hex(8)}"
    klass = tmp_path / "class"
    a = _student_a(klass / "student-a", secret)
    b = materialize(case, klass / "student-b", SOLUTIONS, params=_params(case, server, marker))
    with ThreadPoolExecutor(max_workers=2) as pool:
        first = pool.submit(at.grade, a, route)
        second = pool.submit(at.grade, b, route, case)
        report_a, _ = first.result()
        report_b, seconds = second.result()
    print(f"{case.id} at {level}, {route}: graded in {seconds:.1f} s, {case.module} "
          f"{report_b.modules()[case.module][0]:g}/{report_b.modules()[case.module][1]:g}; "
          f"the other student: {report_a.score:g}")
    alive = surviving_student_processes([a, b], at.zygotes())
    _kill(alive)
    assert report_a.status == "graded" and report_a.score == 100, (
        f"the other student (a correct submission): expected 100, got {report_a.score} ({report_a.status}): "
        + "; ".join(f"{t.module}/{t.id}: {t.message[:150]}" for t in report_a.failed()[:5]))
    problems = expectation_problems(case, report_b, seconds)
    problems += leak_problems(report_b, {"the other student's code": {secret},
                                         "the canary token": {canary},
                                         "a line of the reference solution": reference_lines(b),
                                         "a line of the hidden graders": GRADER_LINES - _lines(b)})
    if alive:
        problems.append(f"expected no student process left after grading, found (now killed): {alive[:5]}")
    problems += server_problems(at)
    assert_no_problems(case, problems)


CLASS = [c for c in ATTACKS if c.scenario == "class"]


def _neighbour_measurements(report) -> list[dict]:
    """What the neighbour's speed checks recorded of their measurements (TestResult.data["timing"])."""
    return [t.data["timing"] for t in report.tests if isinstance(t.data.get("timing"), dict)]


@pytest.mark.parametrize("case", [pytest.param(c, id=c.id) for c in CLASS])
@pytest.mark.parametrize("level", LEVELS, scope="module")
def test_a_class_run_goes_on_and_no_neighbour_moves(level, case, at, tmp_path, server, marker, canary, monkeypatch):
    """grade-all over a class folder: the case's submission (named `submission_id`) and a correct neighbour.

    The run lists both, writes each one's files in its own folder and the gradebook as the gradebook; the
    neighbour scores 100 with every speed measurement clean (with `neighbour_frozen`: at least one of them
    stopped the attacker's processes, which were alive then); the attacker earns what it deserves, leaks
    nothing, leaves nothing running. Both gradings run at once, through this level's warm servers."""
    skip_unless_met(case, at)
    secret = f"student-a-secret-{secrets.token_hex(8)}"
    klass = tmp_path / "class"
    a = _student_a(klass / "student-a", secret)
    b = materialize(case, klass / case.submission_id, SOLUTIONS, params=_params(case, server, marker))
    reports = {}
    real_grade = run.grade

    def recording_grade(path, **options):  # the real grading; the test keeps each report to look into
        report = real_grade(path, **options)
        reports[Path(path).name] = report
        return report

    monkeypatch.setattr(run, "grade", recording_grade)
    out = tmp_path / "out"
    start = time.monotonic()
    rows = run.grade_all(klass, out, jobs=2, warm=False, timeout=600, call_timeout=CALL_TIMEOUT,
                         isolation=at.name, python=at.python, servers=at.servers())
    seconds = unpaused_since(start)
    alive = surviving_student_processes([a, b], at.zygotes())
    _kill(alive)
    problems = []
    names = {"student-a", case.submission_id}
    if {gradebook.row_key(n) for n in names} != set(rows) or set(reports) != names:
        problems.append(f"expected a row and a grading for each of {sorted(names)}, got rows {sorted(rows)} and "
                        f"gradings of {sorted(reports)}")
    book = gradebook.read_gradebook(out)
    if set(book) != set(rows):
        problems.append(f"expected OUT/gradebook.csv to be the gradebook of both, it lists {sorted(book)}")
    for name in names:
        if not (gradebook.output_folder(out, name) / "results.json").is_file():
            problems.append(f"expected {name}'s results.json in {gradebook.output_folder(out, name)}")
    neighbour, report = reports.get("student-a"), reports.get(case.submission_id)
    if neighbour is None or report is None:
        assert_no_problems(case, problems)
    if neighbour.status != "graded" or neighbour.score != 100:
        problems.append(f"the neighbour (a correct submission): expected 100, got {neighbour.score:g} "
                        f"({neighbour.status}): " + "; ".join(f"{t.module}/{t.id}: {t.message[:150]}"
                                                              for t in neighbour.failed()[:5]))
    measured = _neighbour_measurements(neighbour)
    unclean = [m for m in measured if m.get("discarded")]
    if not measured or unclean:
        problems.append(f"expected the neighbour's speed measurements recorded, none discarded; got {len(measured)}"
                        f", {len(unclean)} with rounds discarded: {[m.get('discarded_why') for m in unclean][:3]}")
    if case.neighbour_frozen and not any(m.get("neighbours_stopped") for m in measured):
        problems.append("expected a measurement of the neighbour to stop this submission's processes (alive "
                        f"then): neighbours_stopped is {[m.get('neighbours_stopped') for m in measured]}")
    print(f"{case.id} at {level}: class run in {seconds:.1f} s, {case.module} "
          f"{report.modules()[case.module][0]:g}/{report.modules()[case.module][1]:g}, the neighbour "
          f"{neighbour.score:g} (neighbours stopped {[m.get('neighbours_stopped') for m in measured]}), grader "
          f"peaks {report.grader_peak_mib:g} and {neighbour.grader_peak_mib:g} MiB")
    ATTACK_FIGURES.append((case.id, level, "class", seconds, max(report.grader_peak_mib, neighbour.grader_peak_mib),
                           f"{case.module} {report.modules()[case.module][0]:g}/{report.modules()[case.module][1]:g}"
                           f", neighbour {neighbour.score:g}"))
    problems += expectation_problems(case, report, seconds)
    problems += leak_problems(report, {"the other student's code": {secret}, "the canary token": {canary},
                                       "a line of the reference solution": reference_lines(b),
                                       "a line of the hidden graders": GRADER_LINES - _lines(b)})
    if alive:
        problems.append(f"expected no student process left after the run, found (now killed): {alive[:5]}")
    problems += server_problems(at)
    assert_no_problems(case, problems)


# -- the harness's own checks ---------------------------------------------------------------------------
def test_every_corpus_case_is_graded_at_every_level(request):
    """Nothing dropped: each case of attacks.toml (read again here) is a test at each level under test (a case
    that the trusted side alone decides, at ONE_LEVEL), on the warm route, and each COLD case on the cold route
    too; and every level is under test unless MHA_ATTACKS_ISOLATION narrows them."""
    items = [i for i in request.node.parent.collect() if isinstance(i, pytest.Function)
             and i.originalname in ("test_attack_earns_nothing_undeserved_and_leaks_nothing",
                                    "test_attack_decided_by_the_trusted_side_earns_nothing_undeserved",
                                    "test_another_students_code_stays_private",
                                    "test_a_class_run_goes_on_and_no_neighbour_moves")]
    graded = {}
    for item in items:
        params = item.callspec.params
        graded.setdefault((params["level"], params.get("route", "warm")), []).append(params["case"].id)
    cases = load_attacks()
    problems = []
    for level in LEVELS:
        ids = [c.id for c in cases if level == ONE_LEVEL or not graded_at_one_level(c)]
        for route, want in (("warm", ids), ("cold", [i for i in ids if i in COLD])):
            got = graded.get((level, route), [])
            if sorted(got) != sorted(want):
                problems.append(f"at {level}, {route}: expected each of {len(want)} cases once; missing "
                                f"{sorted(set(want) - set(got))}, extra or repeated "
                                f"{sorted({i for i in got if i not in want or got.count(i) > 1})}")
    unknown_cold = sorted(set(COLD) - {c.id for c in cases})
    if unknown_cold:
        problems.append(f"expected COLD to name corpus cases, it names {unknown_cold}")
    if "MHA_ATTACKS_ISOLATION" not in os.environ and LEVELS != autograder.LEVELS:
        problems.append(f"expected every level {autograder.LEVELS} under test, got {LEVELS}")
    assert not problems, "\n".join(problems)


def _sleeper(*args):
    """A process with `args` on its command line (as a student process's would be), until killed.

    Returned once /proc shows that command line: Popen returns when the exec has begun, and for a moment
    after it the new command line reads empty (the kernel sets it up later in the exec)."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", *args],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    want = args[-1].encode() if args else b"time.sleep"
    for _ in range(500):  # at most ~5 s: a guard, never a measure
        try:
            with open(f"/proc/{proc.pid}/cmdline", "rb") as fh:
                if want in fh.read():
                    break
        except OSError:
            break
        time.sleep(0.01)
    return proc


def test_a_process_left_by_a_warm_or_cold_grading_is_a_survivor(tmp_path):
    """The survivor check on stand-ins: a fork of our zygote (its command line) and a cold student process of
    our submission are counted; the zygote itself, another zygote's fork and another submission's are not."""
    address = "mha-student-server-0123456789ab"  # the label on a zygote's command line (forkclient.Server.label)
    other = "mha-student-server-ba9876543210"
    submission = tmp_path / "sub"

    def config(sub):  # the cold student process's argument: its sandbox's files and what it may not see
        return json.dumps({"log": str(tmp_path / "mha-sandbox-x" / "log"), "forbidden": [str(sub)]})

    procs = {"zygote": _sleeper("student", address), "fork": _sleeper("student", address),
             "other zygote's fork": _sleeper("student", other), "cold": _sleeper(config(submission.resolve())),
             "cold, another submission": _sleeper(config(tmp_path / "another"))}
    try:
        alive = surviving_student_processes([submission], {address: procs["zygote"].pid}, timeout=0)
        pids = {int(line.split()[1]) for line in alive}
        counted = sorted(name for name, proc in procs.items() if proc.pid in pids)
        assert counted == ["cold", "fork"], f"expected the fork and the cold process counted, got {counted}: {alive}"
    finally:
        for proc in procs.values():
            proc.kill()
            proc.wait()
    assert surviving_student_processes([submission], {address: 0}, timeout=0) == [], "killed processes counted"


@pytest.mark.parametrize("route", ["warm", "cold"])
@pytest.mark.parametrize("level", LEVELS, scope="module")
def test_a_live_student_process_is_seen_by_the_survivor_check(level, route, at, tmp_path):
    """The survivor check on real student processes, at each level and on each route: while one runs it is
    counted (keeper and student code, forked from the zygote or started cold); once closed, none is."""
    if at.why_not:
        pytest.skip(f"the {at.name} level is not offered here: {at.why_not}")
    submission = tmp_path / "sub"
    submission.mkdir()
    (submission / "masks.py").write_text((SOLUTIONS / "masks.py").read_text())
    zygote = at.servers().zygote.address if route == "warm" else None
    # each form on its own: the warm one by the zygote's label only, the cold one by the submission only
    names, zygotes = ([], at.zygotes()) if route == "warm" else ([submission], {})
    with client.Sandbox(submission, isolation=level, python=at.python, zygote=zygote) as sb:
        sb.call("masks", "causal_mask", 2)
        alive = surviving_student_processes(names, zygotes, timeout=0)
        assert alive, f"at {level}, {route}: expected the running student process counted, got none"
    gone = surviving_student_processes(names, zygotes)
    assert not gone, f"at {level}, {route}: expected no student process once closed, got {gone}"


# -- the corpus itself --------------------------------------------------------------------------------
def test_corpus_covers_every_attack_kind():
    kinds = {c.attack for c in ATTACKS}
    missing = [k for k in ATTACK_KINDS if k not in kinds]
    assert not missing, f"expected at least one case of every attack kind {ATTACK_KINDS}; none for {missing}"
    ids = {c.id for c in ATTACKS}
    exits = {"sys-exit-at-import", "os-exit-at-import", "sys-exit-in-call", "os-exit-in-call"}
    assert exits <= ids, f"expected sys.exit and os._exit, at import and in a call: missing {sorted(exits - ids)}"
    per_module = {c.module for c in ATTACKS}
    assert per_module == set(MODULES), f"expected attacks on every module, got only {sorted(per_module)}"
    assert any(c.scenario == "other-student" for c in ATTACKS), "expected a case graded next to another student"
    assert any(c.scenario == "class" and c.neighbour_frozen for c in ATTACKS), \
        "expected a class-run case whose processes the neighbour's measurement must stop"


def test_bombs_are_marked_with_the_limit_that_bounds_them():
    """Safety: a fork bomb runs only where a process limit exists, a memory bomb only where a memory limit does."""
    for case in ATTACKS:
        need = {"fork-bomb": "process-limit", "memory-bomb": "memory-limit"}.get(case.attack)
        assert need is None or need in case.needs, f"{case.id}: expected needs to include {need!r}, got {case.needs}"
        assert set(case.needs) <= set(NEEDS), f"{case.id}: unknown needs {case.needs}"


def test_expectations_name_real_checks():
    """A typo in passes or fails would make a case unpassable (or pass vacuously)."""
    for case in ATTACKS:
        known = {cid for (m, cid) in GRADER_CHECKS if m == case.module}
        named = set(case.passes) | set(case.fails or ())
        assert named <= known, (f"{case.id}: expected passes/fails to name checks of {case.module}, unknown: "
                                f"{sorted(named - known)}")


def test_every_case_materializes_as_valid_python(tmp_path):
    for case in ATTACKS:
        folder = materialize(case, tmp_path / case.id, SOLUTIONS, params={"port": 1, "marker": "m"})
        sources = submission_sources(folder)  # a folder or a zip, whatever materialize returns
        assert sources, f"{case.id}: expected .py files in {folder}, found none"
        for name, text in sources.items():
            compile(text, f"{folder}/{name}", "exec")
            assert re.search(r"\$\{[a-z_]+\}", text) is None, f"{case.id}: a placeholder left in {name}"


@pytest.mark.parametrize("entry, error", [
    ('module = "heads"\n[[attack.patch]]\nfile = "masks.py"\nfind = "a"\nreplace = "b"', "the case's module is"),
    ('module = "heads"\nneeds = ["root"]\n[[attack.patch]]\nfile = "heads.py"\nfind = "a"\nreplace = "b"', "needs"),
    ('module = "heads"', "needs an [[attack.file]]"),
    ('module = "heads"\npasses = ["x"]\nfails = ["y"]\n[[attack.file]]\nname = "heads.py"\nsource = "template"',
     "not both"),
    ('module = "heads"\ncall_timeout = 90\n[[attack.patch]]\nfile = "heads.py"\nfind = "a"\nreplace = "b"',
     "call_timeout must be"),
    ('module = "heads"\nsurprise = 1\n[[attack.file]]\nname = "heads.py"\nsource = "template"', "unknown keys"),
    ('module = "heads"\n[[attack.notebook]]\ncell = "x"\njson = "1"', "needs cell (and maybe repeat, end), or json"),
    ('module = "heads"\n[[attack.notebook]]\njson = "{not json"', "json is not a JSON value"),
    ('module = "heads"\n[[attack.notebook]]\ncell = "x"\n[[attack.notebook]]\ncell = "y"', "at most one"),
    ('module = "heads"\n[[attack.notebook]]\ncell = "x"\nrepeat = 0', "repeat must be"),
    ('module = "heads"\nfiles_under = "../up"', "files_under must be a relative path"),
    ('module = "heads"\n[[attack.extra_file]]\nname = "a.py"\nrepeat = 3', "needs ${index}"),
    ('module = "heads"\nform = "zip"\n[[attack.extra_file]]\nname = "a.py"', "is for a folder"),
    ('module = "heads"\nsubmission_id = "x"\n[[attack.file]]\nname = "heads.py"\nsource = "template"',
     'are for scenario = "class"'),
    ('module = "heads"\nscenario = "class"\nsubmission_id = "student-a"', "other than student-a"),
    ('module = "heads"\nscenario = "class"\nform = "zip"', "is a folder in the class folder"),
])
def test_loader_rejects_malformed_cases(tmp_path, entry, error):
    path = tmp_path / "attacks.toml"
    path.write_text(f'[[attack]]\nid = "x"\nattack = "exit"\ndescription = "d"\n{entry}\n')
    with pytest.raises(CorpusError, match=re.escape(error)):
        load_attacks(path)


def test_placeholders_without_a_value_are_an_error(tmp_path):
    case = next(c for c in ATTACKS if c.id == "network-connection")
    with pytest.raises(PatchError, match="port"):
        materialize(case, tmp_path / "x", SOLUTIONS, params={"marker": "m"})
