"""The adversarial corpus (tests/corpus/attacks.toml), graded by the real engine.

Every attack case is a hostile submission shaped so that it would earn points
if its attack worked. For each, the grading must

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

`test_another_students_code_stays_private` grades a correct submission and
an attacking one side by side: the attacker must neither earn with nor see
the other student's code.

Cases that need what the sandbox does not provide (isolation: the
namespaces or landlock level; a process limit, a memory limit) are skipped
with the reason. The corpus is graded at the strongest level available
(`auto`), or at the one MHA_ATTACKS_ISOLATION names; tests/test_environments.py
runs it at the other levels, also as an unprivileged user. To see that a case
can fail, run it where its protection is missing:

    MHA_ATTACKS_FORCE=1            run the cases whose needs are not met
    MHA_ATTACKS_ISOLATION=none     grade at the none level (resource limits only)

e.g. `MHA_ATTACKS_FORCE=1 MHA_ATTACKS_ISOLATION=none pytest tests/test_attacks.py -k kit-files`.
"""
from __future__ import annotations

import ast
import base64
import html
import json
import os
import re
import secrets
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from autograder import sandbox as sandbox_module
from autograder.engine import grade
from tests.conftest import ROOT, SOLUTIONS, TEMPLATE
from tests.corpus import ATTACK_KINDS, MODULES, NEEDS, CorpusError, PatchError, load_attacks, materialize

ATTACKS = load_attacks()
GRADERS = ROOT / "autograder" / "graders"
CANARY_NAME = "MHA_CANARY_TOKEN"
FORMATS = ("text", "json", "gradescope", "markdown", "html", "junit", "classroom")
FORCE = os.environ.get("MHA_ATTACKS_FORCE") == "1"
LEVEL = os.environ.get("MHA_ATTACKS_ISOLATION", "auto")  # the isolation level the corpus is graded at
CALL_TIMEOUT = 5.0


# -- what the hidden graders check ---------------------------------------------------
def _grader_checks() -> dict[tuple[str, str], float]:
    """(module, check id) -> points, read from the graders' @grade(points, aspect) decorators."""
    checks = {}
    for path in sorted(GRADERS.glob("test_*.py")):
        module = path.stem.removeprefix("test_")
        for node in ast.parse(path.read_text()).body:
            if not isinstance(node, ast.FunctionDef) or not node.name.startswith("test_"):
                continue
            for deco in node.decorator_list:
                if isinstance(deco, ast.Call) and getattr(deco.func, "id", None) == "grade":
                    checks[(module, node.name)] = float(ast.literal_eval(deco.args[0]))
    return checks


GRADER_CHECKS = _grader_checks()


def _lines(folder: Path) -> set[str]:
    return {ln.strip() for f in folder.glob("*.py") for ln in f.read_text(encoding="utf-8").splitlines()}


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
    lines = set().union(*(_code_lines(p) for p in GRADERS.glob("*.py")))
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
def unmet_needs(needs) -> list[str]:
    """Why each of `needs` is not met by the sandbox under test ([] when all are)."""
    reasons = []
    for need in needs:
        if need == "isolation":
            try:
                level = sandbox_module.choose_isolation(LEVEL)
            except sandbox_module.GraderUnavailable as exc:
                level = f"unavailable: {exc}"
            if level not in ("namespaces", "landlock"):
                reasons.append(f"isolation: student code would run at the {level} level, which keeps no files, "
                               "processes or network from it")
        elif need in ("process-limit", "memory-limit"):
            limits = getattr(sandbox_module, "Limits", None)
            field = {"process-limit": "processes", "memory-limit": "memory_bytes"}[need]
            if limits is None:
                reasons.append(f"{need}: autograder.sandbox has no Limits (no {field} limit yet)")
            elif not getattr(limits(), field, None):
                reasons.append(f"{need}: autograder.sandbox.Limits().{field} is not set")
        else:
            reasons.append(f"{need}: unknown need")
    return reasons


def skip_unless_met(case):
    reasons = unmet_needs(case.needs)
    if reasons and not FORCE:
        pytest.skip(f"{case.id} needs {', '.join(case.needs)}: " + "; ".join(reasons)
                    + " (MHA_ATTACKS_FORCE=1 runs it anyway)")


def grade_options(case=None) -> dict:
    timeout = case.call_timeout if case is not None and case.call_timeout else CALL_TIMEOUT
    return {"call_timeout": timeout, "isolation": LEVEL}


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


@pytest.fixture
def canary(monkeypatch):
    """A secret as a CI token would be, that no student may ever see: in this process's environment (which
    the engine may hand down) and in the environment another process was started with (which
    /proc/<pid>/environ shows to whoever may read it)."""
    token = f"canary-{secrets.token_hex(12)}"
    monkeypatch.setenv(CANARY_NAME, token)
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], env=dict(os.environ),
                              stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield token
    finally:
        holder.kill()
        holder.wait()


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
            text = report.render(fmt)
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
    """Where a student-visible output holds one of `forbidden` (what kind -> strings); [] when none does."""
    found = []
    for where, text in visible_outputs(report).items():
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


def surviving_student_processes(submissions, timeout=5.0) -> list[str]:
    """Student processes of these submissions' gradings still alive after them.

    A student process is recognised by its command line, which names its
    sandbox and the submission it grades: processes of other gradings on the
    same machine (another test run) are never counted, nor touched.
    """
    names = [str(Path(s).resolve()) for s in submissions]
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
            if "mha-sandbox-" in cmdline and any(f'"{n}"' in cmdline for n in names) and state != "Z":
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
    if case.probe and case.probe not in report.student_output:
        problems.append(f"expected the attack's probe {case.probe!r} in the student's output (proof that the attack "
                        f"ran), got: {report.student_output[-600:]!r}")
    return problems


def assert_no_problems(case, problems):
    assert not problems, (f"{case.id} ({case.description}): {len(problems)} problem(s):\n  - "
                          + "\n  - ".join(problems))


def _kill(survivors):
    """End the student processes this test's grading left behind (by pid), so that they cannot disturb the next."""
    import signal

    for line in survivors:
        try:
            os.kill(int(line.split()[1]), signal.SIGKILL)
        except (OSError, ValueError):
            pass


def grade_attack(case, folder):
    start = time.monotonic()
    report = grade(folder, **grade_options(case))
    return report, time.monotonic() - start


def _params(case, server, marker):
    return {"port": server.port, "marker": marker}


def _case_param(case):
    marks = []
    if case.known_vulnerability:
        marks.append(pytest.mark.xfail(strict=True, reason=f"known vulnerability: {case.known_vulnerability}"))
    return pytest.param(case, id=case.id, marks=marks)


SINGLE = [c for c in ATTACKS if c.scenario == "single"]


@pytest.mark.parametrize("case", [_case_param(c) for c in SINGLE])
def test_attack_earns_nothing_undeserved_and_leaks_nothing(case, tmp_path, server, marker, canary):
    skip_unless_met(case)
    folder = materialize(case, tmp_path / case.id, SOLUTIONS, params=_params(case, server, marker))
    connections_before = len(server.connections)
    report, seconds = grade_attack(case, folder)
    print(f"{case.id}: graded in {seconds:.1f} s, {case.module} "
          f"{report.modules()[case.module][0]:g}/{report.modules()[case.module][1]:g}, score {report.score:g}, "
          f"isolation {getattr(report, 'isolation', '?')!r}")
    leftovers = files_with_marker(marker, extra_roots=[tmp_path]) if case.attack == "results-json" else []
    for path in leftovers:  # never leave the attack's files behind, whatever the outcome
        try:
            os.remove(path)
        except OSError:
            pass
    alive = surviving_student_processes([folder])
    _kill(alive)

    problems = expectation_problems(case, report, seconds)
    problems += leak_problems(report, {"the canary token": {canary},
                                       "a line of the reference solution": reference_lines(folder),
                                       "a line of the hidden graders": GRADER_LINES - _lines(folder)})
    if leftovers:
        problems.append(f"expected no results.json of the attack outside the sandbox's private folders, found "
                        f"{len(leftovers)} (now removed): {leftovers[:10]}")
    new = server.connections[connections_before:]
    if new:
        problems.append(f"expected no connection to the test's server on 127.0.0.1, got {len(new)} from {new[:5]}")
    if alive:
        problems.append(f"expected no student process left after grading, found (now killed): {alive[:5]}")
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


@pytest.mark.parametrize("case", [_case_param(c) for c in OTHER_STUDENT])
def test_another_students_code_stays_private(case, tmp_path, server, marker, canary):
    """Two students graded at the same time, in one class folder: B looks for A's code, earns nothing, sees nothing."""
    skip_unless_met(case)
    secret = f"student-a-secret-{secrets.token_hex(8)}"
    klass = tmp_path / "class"
    a = _student_a(klass / "student-a", secret)
    b = materialize(case, klass / "student-b", SOLUTIONS, params=_params(case, server, marker))
    with ThreadPoolExecutor(max_workers=2) as pool:
        first = pool.submit(grade, a, **grade_options())
        second = pool.submit(grade_attack, case, b)
        report_a = first.result()
        report_b, seconds = second.result()
    print(f"{case.id}: graded in {seconds:.1f} s, {case.module} {report_b.modules()[case.module][0]:g}/"
          f"{report_b.modules()[case.module][1]:g}; the other student: {report_a.score:g}")
    assert report_a.status == "graded" and report_a.score == 100, (
        f"the other student (a correct submission): expected 100, got {report_a.score} ({report_a.status}): "
        + "; ".join(f"{t.module}/{t.id}: {t.message[:150]}" for t in report_a.failed()[:5]))
    alive = surviving_student_processes([a, b])
    _kill(alive)
    problems = expectation_problems(case, report_b, seconds)
    problems += leak_problems(report_b, {"the other student's code": {secret},
                                         "the canary token": {canary},
                                         "a line of the reference solution": reference_lines(b),
                                         "a line of the hidden graders": GRADER_LINES - _lines(b)})
    if alive:
        problems.append(f"expected no student process left after grading, found (now killed): {alive[:5]}")
    assert_no_problems(case, problems)


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
        for path in folder.glob("*.py"):
            compile(path.read_text(encoding="utf-8"), str(path), "exec")
        assert re.search(r"\$\{[a-z_]+\}", (folder / f"{case.module}.py").read_text()) is None, case.id


@pytest.mark.parametrize("entry, error", [
    ('module = "heads"\n[[attack.patch]]\nfile = "masks.py"\nfind = "a"\nreplace = "b"', "the case's module is"),
    ('module = "heads"\nneeds = ["root"]\n[[attack.patch]]\nfile = "heads.py"\nfind = "a"\nreplace = "b"', "needs"),
    ('module = "heads"', "needs an [[attack.file]]"),
    ('module = "heads"\npasses = ["x"]\nfails = ["y"]\n[[attack.file]]\nname = "heads.py"\nsource = "template"',
     "not both"),
    ('module = "heads"\ncall_timeout = 90\n[[attack.patch]]\nfile = "heads.py"\nfind = "a"\nreplace = "b"',
     "call_timeout must be"),
    ('module = "heads"\nsurprise = 1\n[[attack.file]]\nname = "heads.py"\nsource = "template"', "unknown keys"),
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
