"""Limits and isolation of the student process, and the warm fork servers of grade-all.

Real processes throughout: a real confined child (namespaces where this
machine allows them), real rlimits, a real zygote and grader fork server.
The adversarial corpus (tests/test_attacks.py) grades whole hostile
submissions; here each limit and each wall of the sandbox has its own test.
"""
import json
import os
import subprocess
import sys
import tempfile
import time

import pytest

from autograder.grade.engine import grade
from autograder.grade.servers import WarmServers
from autograder.sandbox.client import Sandbox
from autograder.sandbox.errors import StudentError
from autograder.sandbox.forkclient import Server, Worker
from autograder.sandbox.isolation import probe
from autograder.sandbox import landlock
from autograder.sandbox.limits import Limits
from tests.conftest import SOLUTIONS, unpaused_since

pytestmark = pytest.mark.grading  # every test here grades or starts student processes

WHY_NOT = probe("namespaces")
needs_namespaces = pytest.mark.skipif(WHY_NOT is not None, reason=f"Linux namespaces are not available here: {WHY_NOT}")

PROBE = '''import json, os, socket, torch
def causal_mask(seq_len, device=None):
    seen = {"root": sorted(os.listdir("/")), "cwd": os.getcwd(), "uid": os.getuid(), "pid": os.getpid(),
            "procs": sorted(p for p in os.listdir("/proc") if p.isdigit()) if os.path.isdir("/proc") else [],
            "env": dict(os.environ),
            "no_new_privs": [ln.split()[1] for ln in open("/proc/self/status") if ln.startswith("NoNewPrivs")]}
    for path in ("/work", "/root", "/home", "/tmp", "/submission"):
        try:
            seen[path] = sorted(os.listdir(path))
        except OSError as exc:
            seen[path] = type(exc).__name__
    try:
        socket.create_connection(("127.0.0.1", {port}), timeout=2).close()
        seen["network"] = "connected"
    except OSError as exc:
        seen["network"] = type(exc).__name__
    try:
        os.makedirs("/usr/local/mha-probe")
        seen["write_usr"] = "written"
    except OSError as exc:
        seen["write_usr"] = type(exc).__name__
    print("PROBE" + json.dumps(seen))
    return torch.ones(seq_len, seq_len, dtype=torch.bool).tril()
'''


def _probe(tmp_path, port=9, **sandbox):
    (tmp_path / "masks.py").write_text(PROBE.replace("{port}", str(port)))
    with Sandbox(tmp_path, call_timeout=20.0, **sandbox) as sb:
        sb.call("masks", "causal_mask", 2)
        line = [ln for ln in sb.output_tail(20000).splitlines() if ln.startswith("PROBE")][-1]
        return json.loads(line[5:]), sb.isolation


def _python_under_tmp():
    """The first folders under /tmp on the way to Python's own folders (a kit cloned under /tmp has its venv
    there: the private root binds it, so the private /tmp holds that path and nothing else)."""
    import site
    import sysconfig

    tmp = "/tmp"  # the student process's private /tmp is always there
    paths = [sys.prefix, sys.base_prefix, sys.executable, *site.getsitepackages(), sysconfig.get_paths()["stdlib"]]
    firsts = set()
    for path in paths:  # as named and as resolved: a venv reached through a link is bound by both ways
        for form in (os.path.abspath(path), os.path.realpath(path)):
            if form.startswith(tmp + os.sep):
                firsts.add(form[len(tmp) + 1:].split(os.sep)[0])
    return sorted(firsts)


@needs_namespaces
def test_the_student_process_sees_only_system_folders_its_copy_and_an_empty_tmp(tmp_path):
    (tmp_path / "marker-of-this-submission.txt").write_text("x")
    seen, how = _probe(tmp_path)
    assert how == "namespaces"
    assert seen["cwd"] == "/submission" and "masks.py" in seen["/submission"]
    # on a GPU machine, CUDA's cache folder too: the process starts CUDA before any student code runs
    cuda_cache = [".nv"] if ".nv" in seen["/tmp"] and any(d.startswith("nvidia") for d in os.listdir("/dev")) else []
    assert seen["/tmp"] == sorted(_python_under_tmp() + cuda_cache), (
        f"expected a private /tmp holding nothing but the way to Python's own folders "
        f"({_python_under_tmp()}), saw {seen['/tmp']}")
    visible = json.dumps({k: v for k, v in seen.items() if k != "env"})
    for name in ("autograder", "solutions", "assignments", "grader_cli.py"):
        assert name not in visible, f"the student process can see {name!r}: {visible}"
    assert '"parts"' not in visible, f"the student process can see the part folders (parts/): {visible}"  # an entry
    assert "marker-of-this-submission.txt" not in json.dumps(seen), "only the .py files are copied"


@needs_namespaces
def test_the_student_process_has_no_network(tmp_path):
    import socket

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    try:
        seen, _ = _probe(tmp_path, port=server.getsockname()[1])
    finally:
        server.close()
    assert seen["network"] != "connected", "a connection to the grader's machine succeeded"


@needs_namespaces
def test_the_student_process_sees_no_other_process_and_cannot_write_system_folders(tmp_path):
    seen, _ = _probe(tmp_path)
    assert seen["pid"] == 1 and seen["procs"] == ["1"], f"expected to see only itself, saw processes {seen['procs']}"
    assert seen["uid"] != 0, "student code runs without root's powers"
    assert seen["no_new_privs"] == ["1"], "a setuid program could give student code privileges"
    assert seen["write_usr"] != "written"


@pytest.mark.parametrize("level", ["namespaces", "none"])
def test_the_environment_holds_no_secret(tmp_path, monkeypatch, level, student_python):
    monkeypatch.setenv("GITHUB_TOKEN", "ghp_secret_canary_123")
    monkeypatch.setenv("MHA_SECRET", "canary-456")
    if level == "namespaces" and WHY_NOT:
        pytest.skip(WHY_NOT)
    seen, _ = _probe(tmp_path, isolation=level, python=student_python)
    assert "canary" not in json.dumps(seen["env"]), seen["env"]


@pytest.mark.skipif(os.geteuid() != 0, reason="only root's student process drops to a uid of its own")
def test_a_kit_in_a_folder_closed_to_other_users_still_has_the_landlock_level(tmp_path, monkeypatch, student_python):
    """As root, the student process drops to a uid of its own before it confines itself with Landlock: every
    file of the kit it needs is read before, so a kit in a private folder (a clone in a 0700 home) keeps the
    level."""
    import shutil

    from autograder.sandbox import isolation

    if probe("landlock", python=student_python):
        pytest.skip(f"no landlock level here: {probe('landlock', python=student_python)}")
    private = tmp_path / "private"
    shutil.copytree(isolation.CHILD.parent, private / "sandbox", ignore=shutil.ignore_patterns("__pycache__"))
    private.chmod(0o700)
    monkeypatch.setattr(isolation, "CHILD", private / "sandbox" / "student_process.py")
    assert isolation.probe("landlock", student_python, cached=False) is None


def test_at_the_none_level_the_report_says_so(tmp_path, student_python):
    seen, how = _probe(tmp_path, isolation="none", python=student_python)
    assert how == "none"
    assert seen["uid"] != 0, "student code never runs as root"
    assert seen["no_new_privs"] == ["1"], "a setuid program could give student code privileges"
    report = grade(SOLUTIONS, isolation="none", select="test_masks", python=student_python)
    assert report.isolation == "none" and report.score == 100, report.to_text()
    assert "Isolation: none (WARNING: resource limits and a seccomp filter only" in report.to_text()
    assert "not in Linux namespaces" in report.isolation_note()
    assert "sysctl -w kernel.apparmor_restrict_unprivileged_userns=0" in report.isolation_note(), \
        f"expected the note to name the remedy, got {report.isolation_note()!r}"


def _limited(tmp_path, code, **limits):
    (tmp_path / "masks.py").write_text("import os, torch\ndef causal_mask(seq_len, device=None):\n" + code)
    sb = Sandbox(tmp_path, call_timeout=300.0, limits=Limits(**limits))  # a limit ends the call, however busy
    start = time.monotonic()
    with sb, pytest.raises(StudentError) as err:
        sb.call("masks", "causal_mask", 3)
    return str(err.value), unpaused_since(start)


WALLS = '''import errno, json, os, torch
def causal_mask(seq_len, device=None):
    seen = {"dev": sorted(os.listdir("/dev"))}
    try:
        os.open("/dev/ptmx", os.O_RDWR)
        seen["ptmx"] = "opened"
    except OSError as exc:
        seen["ptmx"] = errno.errorcode[exc.errno]
    fds = []
    try:
        for _ in range(10_000):
            fds.append(os.open("/dev/null", os.O_RDONLY))
    except OSError as exc:
        seen["open_files"] = [len(fds), errno.errorcode[exc.errno]]
    for fd in fds:
        os.close(fd)
    written = 0
    try:
        for i in range(1000):  # 1000 files of 1 MiB, under the output limit (per file) each
            with open(f"junk-{i}.bin", "wb") as fh:
                fh.write(b"x" * (1 << 20))
            written += 1
    except OSError as exc:
        seen["writes"] = [written, errno.errorcode[exc.errno]]
    print("WALLS" + json.dumps(seen))
    return torch.ones(seq_len, seq_len, dtype=torch.bool).tril()
'''


@needs_namespaces
def test_the_student_process_has_a_minimal_dev_few_files_and_a_bounded_writable_copy(tmp_path):
    """No pseudo-terminals (a host-wide resource), at most 256 open files, and a copy of the submission in
    memory, of a bounded size: 1000 files of 1 MiB neither fit nor reach the disk."""
    (tmp_path / "masks.py").write_text(WALLS)
    with Sandbox(tmp_path, call_timeout=120.0, isolation="namespaces") as sb:
        sb.call("masks", "causal_mask", 2)
        line = [ln for ln in sb.output_tail(20000).splitlines() if ln.startswith("WALLS")][-1]
        seen = json.loads(line[5:])
        on_disk = [p.name for p in sb._work.iterdir()]
    assert not {"ptmx", "pts", "tty", "console", "mem", "kmsg"} & set(seen["dev"]), seen["dev"]
    assert {"null", "zero", "random", "urandom"} <= set(seen["dev"]), seen["dev"]
    assert seen["ptmx"] == "ENOENT", seen
    assert seen["open_files"][1] == "EMFILE" and seen["open_files"][0] < 256, seen
    assert seen["writes"][1] == "ENOSPC" and 60 <= seen["writes"][0] < 200, seen
    assert not [n for n in on_disk if n.startswith("junk-")], on_disk[:5]


def test_too_much_output_fails_the_call_with_the_output_limit_in_the_message(tmp_path):
    message, _ = _limited(tmp_path, "    while True:\n        print('x' * 1000)\n", output_bytes=64 << 10)
    assert "exceeded the output limit" in message and "64 KiB" in message, message


def test_cpu_time_limit_ends_a_busy_process(tmp_path):
    message, seconds = _limited(tmp_path, "    while True:\n        pass\n", cpu_seconds=2)
    assert "used up its CPU time (2 s" in message, message  # the limit, not the 300 s call timeout, ended it


def test_memory_limit_names_itself(tmp_path):
    # 2 GiB above what Python and torch hold: under the 3.1 GiB that the CUDA build of torch maps as it is imported
    message, _ = _limited(tmp_path, "    return torch.empty(1 << 34)\n", memory_bytes=2 << 30)  # 64 GiB, over it
    assert "exceeded the memory limit: a student process may use 2 GiB" in message, message


MEMORY_LIMITS = """import importlib.util, mmap, resource, sys
spec = importlib.util.spec_from_file_location("student_process", sys.argv[1])
student_process = importlib.util.module_from_spec(spec)
spec.loader.exec_module(student_process)
student_process._apply_limits({"memory_bytes": 2 << 30})
torch = student_process.torch
seen = {name: "unbounded" if resource.getrlimit(which)[0] == resource.RLIM_INFINITY else "bounded"
        for name, which in (("AS", resource.RLIMIT_AS), ("DATA", resource.RLIMIT_DATA))}
# what CUDA does when it starts: reserve far more address space than the limit, with no access
reserved = mmap.mmap(-1, 64 << 30, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | 0x4000, prot=0)  # NORESERVE
seen["reserved GiB"] = len(reserved) >> 30
student_process._bound_memory({"memory_bytes": 2 << 30})  # then, before any student code
for name, which, field in (("AS", resource.RLIMIT_AS, "VmSize"), ("DATA", resource.RLIMIT_DATA, "VmData")):
    soft, hard = resource.getrlimit(which)
    # to 0.1 GiB: an arena mapped since moves it a little
    seen[f"{name} above {field} GiB"] = round((soft - student_process._vm_size(field)) / (1 << 30), 1)
    seen[f"{name} hard"] = "= soft" if hard == soft else hard
try:
    bomb = torch.ones(1 << 30)  # (2**30,) float32: 4 GiB of private memory, over the 2 GiB limit
    seen["bomb"] = "allocated"
except (RuntimeError, MemoryError) as exc:
    seen["bomb"] = type(exc).__name__
try:
    shared = mmap.mmap(-1, 3 << 30)  # 3 GiB shared: RLIMIT_DATA does not count it, the address space does
    seen["shared bomb"] = "mapped"
except OSError as exc:
    seen["shared bomb"] = type(exc).__name__
small = torch.ones(1 << 20)  # 4 MiB: what grading needs still fits
print(seen)
"""


def test_the_memory_limit_is_set_once_torch_has_loaded_at_what_the_process_holds_plus_the_limit(tmp_path):
    """The memory limit is what student code gets above what Python and torch hold, whichever build of torch, on any
    machine. Nothing bounds the process as it loads (torch, and CUDA on a GPU machine, which reserves far more
    address space than any limit as it starts: on an H200 a 4 GiB address-space limit made cudaGetDeviceCount fail
    with "out of memory"). Then, before any student code, private writable memory (RLIMIT_DATA) and the address
    space (RLIMIT_AS) both, at what the process holds plus the limit, hard limits too: a memory bomb fails, and so
    does one of shared memory (which RLIMIT_DATA does not count)."""
    from autograder.sandbox.isolation import CHILD

    script = tmp_path / "memory_limits.py"
    script.write_text(MEMORY_LIMITS)
    out = subprocess.run([sys.executable, str(script), str(CHILD)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    seen = eval(out.stdout.strip().splitlines()[-1])  # a dict printed by the script above
    assert seen == {"AS": "unbounded", "DATA": "unbounded", "reserved GiB": 64, "AS above VmSize GiB": 2.0,
                    "AS hard": "= soft", "DATA above VmData GiB": 2.0, "DATA hard": "= soft", "bomb": "RuntimeError",
                    "shared bomb": "OSError"}, seen


MEMORY_EDGE = """import mmap, resource, torch
MiB = 1 << 20


def private(mib):  # written, page by page
    return torch.ones(mib * MiB // 4).sum()


def shared(mib):  # the address space counts it when it is mapped
    mapping = mmap.mmap(-1, mib * MiB)
    mapping.close()
    return torch.ones(1).sum()


def raise_limits():  # what student code gets back when it tries to lift the limits that bound it
    answers = []
    for which in (resource.RLIMIT_AS, resource.RLIMIT_DATA):
        soft, hard = resource.getrlimit(which)
        for wanted in ((hard + MiB, hard + MiB), (resource.RLIM_INFINITY, resource.RLIM_INFINITY)):
            try:
                resource.setrlimit(which, wanted)
                answers.append(1)
            except (ValueError, OSError):
                answers.append(0)
    return torch.tensor(answers)
"""


@pytest.mark.parametrize("level", ["namespaces", "landlock", "none"])
def test_student_code_gets_the_whole_memory_limit_above_python_and_torch_and_no_more(tmp_path, level,
                                                                                      student_python):
    """At every level, with either build of torch: 64 MiB under the limit, of written private memory or of shared
    memory, fits beside what Python and torch hold (the CUDA build maps 3.1 GiB of libraries, the CPU build 0.6
    GiB); 64 MiB over it fails with the memory limit's message; and student code cannot raise the limits."""
    if (why := probe(level, python=student_python)) is not None:
        pytest.skip(f"no {level} level here: {why}")
    limit = 1 << 30
    (tmp_path / "masks.py").write_text(MEMORY_EDGE)
    (tmp_path / "heads.py").write_text(MEMORY_EDGE)
    with Sandbox(tmp_path, call_timeout=300.0, limits=Limits(memory_bytes=limit), isolation=level,
                 python=student_python) as sb:
        fits = {kind: sb.call("masks", kind, (limit >> 20) - 64)[0].item() for kind in ("private", "shared")}
        raised, _ = sb.call("masks", "raise_limits")
        over = {}
        for module, kind in (("masks", "private"), ("heads", "shared")):  # a module meets the limit once
            with pytest.raises(StudentError) as err:
                sb.call(module, kind, (limit >> 20) + 64)
            over[kind] = str(err.value)
    assert fits == {"private": (limit >> 20) - 64 << 18, "shared": 1}, fits
    assert raised.tolist() == [0, 0, 0, 0], f"expected no limit raised (AS, DATA), got {raised.tolist()}"
    for kind, message in over.items():
        assert "exceeded the memory limit: a student process may use 1 GiB" in message, (kind, message)


LANDLOCKED = """import importlib.util, json, os, sys, threading
spec = importlib.util.spec_from_file_location("student_process", sys.argv[1])
student_process = importlib.util.module_from_spec(spec)
spec.loader.exec_module(student_process)
if sys.argv[2] == "gpu":
    student_process._GPU_NODES = ["nvidia0", "nvidiactl", "nvidia-uvm"]  # a GPU machine, pretended
student_process._confine_landlock({"cwd": sys.argv[3], "home": sys.argv[3], "forbidden": []})
seen = {}
for name, path in (("own comm", f"/proc/self/task/{threading.get_native_id()}/comm"),
                   ("pid 1 comm", "/proc/1/comm")):
    try:
        with open(path, "w") as fh:
            fh.write("named")
        seen[name] = "written"
    except OSError as exc:
        seen[name] = type(exc).__name__
print(json.dumps(seen))
"""


@pytest.mark.skipif(landlock.abi_version() < 1, reason="Landlock is not available here")
@pytest.mark.parametrize("machine, own_comm", [("gpu", "written"), ("cpu", "PermissionError")])
def test_under_landlock_a_gpu_machine_lets_the_student_process_name_its_own_threads(tmp_path, machine, own_comm):
    """NVIDIA's driver names its threads as CUDA starts (it writes /proc/<pid>/task/<tid>/comm) and fails with
    "Error 304" where it cannot: at the landlock level on a GPU machine the student process may write the files
    of its own /proc folder, and no other process's; elsewhere not even its own. The GPU nodes are pretended."""
    from autograder.sandbox.isolation import CHILD

    script = tmp_path / "landlocked.py"
    script.write_text(LANDLOCKED)
    out = subprocess.run([sys.executable, str(script), str(CHILD), machine, str(tmp_path)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {"own comm": own_comm, "pid 1 comm": "PermissionError"}


def test_a_memory_limit_too_small_for_grading_says_so(tmp_path):
    """The memory limit is what student code gets above Python and torch; grading itself takes some of it (the
    requests' inputs and answers): under 64 MiB (rlimits.MIN_MEMORY) it is the grader's failure, and the message
    names the limit; at 64 MiB the reference still scores 100."""
    from autograder.sandbox.errors import GraderUnavailable

    with pytest.raises(GraderUnavailable) as failed:
        grade(SOLUTIONS, limits=Limits(memory_bytes=63 << 20))
    assert "the memory limit (63 MiB) is too small: grading needs at least 64 MiB above what Python and torch hold" \
        in str(failed.value), str(failed.value)
    report = grade(SOLUTIONS, limits=Limits(memory_bytes=64 << 20))
    assert report.score == 100, report.to_text()


def test_process_limit_stops_a_fork_bomb(tmp_path):
    code = ("    n = 0\n    try:\n        for _ in range(500):\n"
            "            if os.fork() == 0:\n                import time; time.sleep(30); os._exit(0)\n"
            "            n += 1\n    finally:\n        print('forked', n)\n")
    message, seconds = _limited(tmp_path, code, processes=24)
    assert "exceeded the process limit" in message or "BlockingIOError" in message, message
    assert seconds < 20


def test_limits_are_configurable_from_the_command_line():
    from click.testing import CliRunner

    import grader_cli

    result = CliRunner().invoke(grader_cli.cli, ["grade", "--help"])
    for option in ("--memory-limit", "--cpu-limit", "--max-processes", "--max-output", "--no-isolation"):
        assert option in result.output
    bad = CliRunner().invoke(grader_cli.cli, ["grade", str(SOLUTIONS), "--memory-limit", "lots"])
    assert bad.exit_code == 2 and "is not a size" in bad.output


# -- the fork servers --------------------------------------------------------
def test_a_worker_whose_client_goes_away_is_killed(tmp_path, student_python):
    for name in ("work", "home"):
        (tmp_path / name).mkdir()
    with Server("student", isolated=True, python=student_python) as server:
        worker = Worker(server.address, {"cwd": str(tmp_path / "work"), "home": str(tmp_path / "home"),
                                         "log": os.devnull, "env": {}, "isolation": "none", "limits": {},
                                         "root": "/nonexistent"}, fds=_idle_pipes())
        assert worker.poll() is None  # it waits for requests on its pipe
        worker.close()
        for _ in range(100):
            try:
                os.kill(worker.pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.05)
        else:
            pytest.fail(f"worker {worker.pid} still runs after its client left")


def _idle_pipes():
    to_child, keep = os.pipe()
    back, from_child = os.pipe()
    _idle_pipes.keep = (keep, back)  # held open: the worker blocks reading its next request
    return to_child, from_child


def _unix_sockets_of(pid):
    """{inode: path} of the unix sockets that process `pid` holds ("" for an unnamed one, "@..." abstract)."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    with open("/proc/net/unix") as fh:
        rows = [line.split() for line in fh.readlines()[1:]]
    return {row[6]: (row[7] if len(row) > 7 else "") for row in rows if row[6] in inodes}


@pytest.mark.skipif(os.geteuid() != 0, reason="the servers are not dumpable: only root lists their descriptors")
def test_the_fork_servers_listen_on_no_named_or_abstract_socket():
    """Issue 32: student code found /tmp/mha-grader-server-*/socket in /proc/self/net/unix and connected to it
    (Landlock does not govern connect() on named sockets). A server's only way in is its inherited channel."""
    with WarmServers() as servers:
        for server in (servers.grader, servers.zygote):
            sockets = _unix_sockets_of(server._proc.pid)
            assert sockets, f"expected the {server._kind} server to hold its channel, got no unix socket"
            named = sorted(path for path in sockets.values() if path)
            assert not named, f"expected only unnamed sockets in the {server._kind} server, got {named}"


ASK = """import json, os, sys
from autograder.sandbox.forkclient import Worker
def ask():
    try:
        worker = Worker(sys.argv[1], json.loads(sys.argv[2]), timeout=20)
    except OSError as exc:
        return f"refused: {type(exc).__name__}"
    worker.close()
    return "served"
if sys.argv[3] == "daemon" and os.fork():  # the client leaves the owner's line of processes (as a daemon would)
    os._exit(0)
if sys.argv[3] == "daemon":
    os.setsid()
    if os.fork():
        os._exit(0)
    while os.getppid() == int(sys.argv[4]):
        pass
with open(sys.argv[5], "w") as fh:
    fh.write(ask())
"""


@pytest.mark.parametrize("client, expected", [("child", "served"), ("daemon", "refused: ConnectionRefusedError")])
def test_a_fork_server_serves_only_its_owners_line_of_processes(tmp_path, student_python, client, expected):
    """The peer check (SO_PEERCRED): a process that holds a server's channel but is not a descendant of its owner
    (a daemon, reparented away) is dropped unanswered; the owner's own child is served (the control)."""
    for name in ("work", "home"):
        (tmp_path / name).mkdir()
    config = {"cwd": str(tmp_path / "work"), "home": str(tmp_path / "home"), "log": os.devnull, "env": {},
              "isolation": "none", "limits": {}, "root": "/nonexistent"}
    out = tmp_path / "answer"
    with Server("student", isolated=True, python=student_python) as server:
        fd = int(server.address[3:])
        proc = subprocess.run([sys.executable, "-c", ASK, server.address, json.dumps(config), client,
                               str(os.getpid()), str(out)], pass_fds=[fd], cwd=SOLUTIONS.parent, timeout=60)
        assert proc.returncode == 0
        for _ in range(600):  # the daemon writes its answer after its parent has gone
            if out.exists() and out.read_text():
                break
            time.sleep(0.05)
        assert out.read_text() == expected, f"expected a {client} client to be {expected}, got {out.read_text()!r}"


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to make a socket as another uid")
def test_the_peer_check_refuses_another_uid_and_the_servers_own_forks():
    import socket

    from autograder.sandbox.forkserver import peer_allowed

    def made_by(setup, check):
        """check(connection, client pid): the connection made by a child of this process, alive meanwhile."""
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        pid = os.fork()
        if pid == 0:  # makes a connection (a socketpair) and hands one end back, as a client does
            setup()
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            socket.send_fds(child, [b"x"], [theirs.fileno()])
            child.recv(1)  # alive until the check is done
            os._exit(0)
        _, fds, _, _ = socket.recv_fds(parent, 16, 1)
        try:
            return check(socket.socket(fileno=fds[0]), pid)
        finally:
            parent.send(b"x")
            os.waitpid(pid, 0)

    me, nobody = os.getpid(), -1  # as owner, and as a server that is nobody's parent
    assert made_by(lambda: None, lambda conn, _: peer_allowed(conn, owner=me, server=nobody)), \
        "expected a child of the owner served"
    assert not made_by(lambda: None, lambda conn, _: peer_allowed(conn, owner=os.getppid(), server=me)), \
        "expected a fork of the server refused"
    other_uid = (lambda: (os.setresgid(65534, 65534, 65534), os.setresuid(65534, 65534, 65534)))
    assert not made_by(other_uid, lambda conn, _: peer_allowed(conn, owner=me, server=nobody)), \
        "expected a client of another uid refused"


def test_warm_batch_grading_gives_the_scores_of_cold_grading(tmp_path):
    buggy = SOLUTIONS.parent / "examples" / "buggy-student"
    cold = grade(buggy)
    with WarmServers() as servers:
        warm = grade(buggy, servers=servers)
        again = grade(SOLUTIONS, servers=servers)
    assert [(t.id, t.status) for t in warm.tests] == [(t.id, t.status) for t in cold.tests]
    assert warm.score == cold.score and again.score == 100
    assert warm.isolation == cold.isolation


def test_stopping_the_servers_stops_their_workers():
    servers = WarmServers()
    pids = [servers.grader._proc.pid, servers.zygote._proc.pid]
    servers.close()
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


FORGER = '''import glob, json, os, signal, time, torch
FAKE = json.dumps({"tests": [{"id": "forged", "name": "forged", "module": "masks", "aspect": "values",
                              "points": 100, "status": "passed"}]})
def causal_mask(seq_len, device=None):
    if os.fork() == 0:  # a daemon that outlives the student process (unconfined, it escapes its group)
        os.setsid()
        if os.fork() == 0:
            fifo = f"ENGINE_TMP/forger-{os.getpid()}"
            signal.signal(signal.SIGALRM, lambda *_: (os.unlink(fifo), os._exit(0)))
            signal.alarm(30)
            os.mkfifo(fifo)
            for folder in glob.glob("ENGINE_TMP/mha-grade-*"):  # where the graders will write their results
                try:
                    os.symlink(fifo, os.path.join(folder, "results.json.tmp"))
                except OSError:
                    pass
            with open(fifo, "rb") as fh:  # the graders' results, written through the link, end here
                fh.read()
            with open(fifo, "wb") as fh:  # the engine, reading results.json (now the link), gets ours
                fh.write(FAKE.encode())
        os._exit(0)
    return torch.zeros(seq_len, seq_len, dtype=torch.bool)
'''


def test_forged_results_files_are_never_believed(tmp_path, monkeypatch, student_python):
    """Without namespaces a student process can reach the grader's temporary folder; a forged file is rejected."""
    engine_tmp = tmp_path / "engine-tmp"  # the engine's folders go here, so that the forger touches no other grading
    engine_tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(engine_tmp))
    submission = tmp_path / "submission"
    submission.mkdir()
    (submission / "masks.py").write_text(FORGER.replace("ENGINE_TMP", str(engine_tmp)))
    report = grade(submission, isolation="none", select="test_masks", timeout=60, python=student_python)
    assert not any(t.id == "forged" for t in report.tests), "a forged results file was believed"
    assert report.earned < report.available, report.to_text()
    if report.status == "error":
        assert "not written by the graders" in report.error


def test_results_are_signed_with_a_key_that_only_the_engine_has(tmp_path):
    from autograder.files import read_signed

    path = tmp_path / "results.json"
    path.write_text('{"tests": []}')
    assert read_signed(path, b"k" * 32) is False
    assert read_signed(tmp_path / "missing.json", b"k" * 32) is None


DAEMON = '''import os, time, torch
def causal_mask(seq_len, device=None):
    if os.fork() == 0:  # fork, setsid, fork: a daemon outside the student process's group and session
        os.setsid()
        if os.fork() == 0:
            print("DAEMON", os.getpid(), flush=True)
            time.sleep(120)
        os._exit(0)
    time.sleep(0.5)
    return torch.ones(seq_len, seq_len, dtype=torch.bool).tril()
'''


@pytest.mark.parametrize("level", ["namespaces", "landlock", "none"])
def test_a_daemon_started_by_student_code_is_gone_when_its_grading_ends(tmp_path, level, student_python):
    if level == "namespaces" and WHY_NOT:
        pytest.skip(WHY_NOT)
    (tmp_path / "masks.py").write_text(DAEMON)
    with Sandbox(tmp_path, call_timeout=20.0, isolation=level, python=student_python) as sb:
        sb.call("masks", "causal_mask", 2)
        assert "DAEMON" in sb.output_tail(5000), "the daemon did not start"
        marker = str(sb._tmp)  # on the command line of every process forked from the student process
        assert _alive(marker), "the daemon cannot be seen from here"
    for _ in range(100):
        if not _alive(marker):
            return
        time.sleep(0.05)
    pytest.fail(f"processes started by student code still run after its grading ended: {_alive(marker)}")


@pytest.mark.parametrize("level", ["namespaces", "landlock", "none"])
def test_a_daemon_is_gone_when_its_keeper_does_not_end_the_tree_in_time(tmp_path, level, student_python, monkeypatch):
    """A keeper that does not end the tree within its time (a neighbour's speed check may hold it stopped, as a
    make test beside two busy loops found at the none level): the trusted side kills everything under it, then
    the keeper. Killed first, the keeper handed the daemon to init, which wrote into the output folder once the
    student process was gone."""
    from autograder.sandbox import process

    if level == "namespaces" and WHY_NOT:
        pytest.skip(WHY_NOT)
    monkeypatch.setattr(process, "KEEPER_SECONDS", 0.0)  # no time at all: the trusted side always takes over
    (tmp_path / "masks.py").write_text(DAEMON)
    with Sandbox(tmp_path, call_timeout=20.0, isolation=level, python=student_python) as sb:
        sb.call("masks", "causal_mask", 2)
        marker = str(sb._tmp)
        assert _alive(marker), "the daemon cannot be seen from here"
    assert _gone(marker), f"at {level}: processes started by student code outlive their grading: {_alive(marker)}"


def test_the_zygote_ends_the_whole_tree_of_a_student_process_whose_grading_is_gone(tmp_path, student_python):
    """The trusted process that asked for a student process dies without ending it (a grading killed at its
    timeout): the zygote ends all of it, the daemon that left the keeper's group and session included."""
    (tmp_path / "masks.py").write_text(DAEMON)
    with WarmServers(python=student_python) as servers, \
            Sandbox(tmp_path, call_timeout=20.0, isolation="none", python=student_python,
                    zygote=servers.zygote.address) as sb:
        sb.call("masks", "causal_mask", 2)
        marker, zygote = servers.zygote.label, servers.zygote._proc.pid  # on the command line of all its forks
        assert _alive(marker, but=zygote), "the daemon cannot be seen from here"
        worker, sb._proc = sb._proc, None  # forgotten without a word: only the zygote can end it now
        worker.close()
        gone = _gone(marker, but=zygote)
        left = _alive(marker, but=zygote)
        for stream in (worker.stdin, worker.stdout):
            stream.close()
    assert gone, f"processes started by student code outlive their grading: {left}"


def _gone(marker, seconds=5.0, but=None):
    """Whether no live process but `but` holds `marker` on its command line within `seconds`."""
    deadline = time.monotonic() + seconds
    while _alive(marker, but):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _alive(marker, but=None):
    """Pids of live (not zombie) processes whose command line holds `marker`, `but` aside."""
    found = []
    for pid in os.listdir("/proc"):
        if pid == str(but):
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                if marker.encode() not in fh.read():
                    continue
            with open(f"/proc/{pid}/stat") as fh:
                if fh.read().rsplit(")", 1)[1].split()[0] != "Z":
                    found.append(int(pid))
        except (OSError, ValueError):
            continue
    return found


FILLER = '''import os, torch
def causal_mask(seq_len, device=None):
    for i in range(100_000):  # small files, each far under the output limit, until something stops it
        for folder in (".", os.environ["HOME"]):
            with open(os.path.join(folder, f"junk-{i}.bin"), "wb") as fh:
                fh.write(b"x" * (64 << 10))
    return torch.ones(seq_len, seq_len, dtype=torch.bool).tril()
def keep(seq_len):
    return torch.tensor([sum(n.startswith("junk-") for n in os.listdir(f)) for f in (".", os.environ["HOME"])])
'''


@pytest.mark.parametrize("level", ["landlock", "none"])
def test_without_namespaces_a_guard_stops_student_code_that_fills_the_disk(tmp_path, level, student_python,
                                                                           monkeypatch):
    """No size-capped mount holds its folders there: the disk guard (autograder/sandbox/diskguard.py) ends the process
    tree once its copy and home hold more than the namespaces level's totals (here made small), the message
    says why, and the next student process starts with a fresh copy and an empty home."""
    monkeypatch.setattr("autograder.sandbox.process.WRITABLE",  # what the Sandbox gives its disk guard
                        {"tmp_bytes": 4 << 20, "copy_bytes": 1 << 20, "files": 1000})
    (tmp_path / "masks.py").write_text(FILLER)
    with Sandbox(tmp_path, call_timeout=300.0, isolation=level, python=student_python) as sb:
        with pytest.raises(StudentError) as err:
            sb.call("masks", "causal_mask", 3)
        message = str(err.value)
        assert "was stopped during" in message and "more than student code may write (5 MiB in 2000 files" in message
        files, _ = sb.call("masks", "keep", 3)
    assert files.tolist() == [0, 0], "the next student process did not start with a fresh copy and an empty home"


def test_space_freed_by_others_does_not_hide_what_the_student_wrote(tmp_path):
    """Another writer deletes 64 MiB while the student writes 5 MiB over its 4 MiB cap, between two looks: the
    filesystem has more free space than before, and the guard still counts its folders and ends the student.
    (A guard that counted only after a drop in free space missed it for as long as nobody took more, and once
    made test_the_disk_guard_counts_only_its_own_folders below fail while other tests freed space.)"""
    from autograder.sandbox.diskguard import DiskGuard

    inside, outside = tmp_path / "student", tmp_path / "others"
    inside.mkdir()
    outside.mkdir()
    _write_synced(outside / "big.bin", 64)
    fired = []
    guard = DiskGuard([inside], 4 << 20, 100, fired.append, poll=1.0).start()
    try:
        time.sleep(0.1)  # the guard has its base: the 64 MiB are taken
        (outside / "big.bin").unlink()
        _write_synced(inside / "much.bin", 5)
        os.sync()
        _wait_until(lambda: fired, seconds=5)
        assert fired and fired[0] == "5 MiB", f"expected the guard to end the student at 5 MiB, got {fired}"
    finally:
        guard.stop()


def _write_synced(path, mib):
    """`mib` MiB of random bytes at `path`, on the disk (statvfs sees them) when this returns."""
    with open(path, "wb") as fh:
        fh.write(os.urandom(mib << 20))
        fh.flush()
        os.fsync(fh.fileno())


def _wait_until(done, seconds):
    """Poll `done()` every 50 ms until it is true or `seconds` have passed (a guard against a hang)."""
    for _ in range(int(seconds / 0.05)):
        if done():
            return
        time.sleep(0.05)


def test_the_disk_guard_counts_only_its_own_folders(tmp_path):
    """Space others take on the same filesystem wakes the guard (statvfs) but is not charged to the student:
    only what its folders hold is."""
    from autograder.sandbox.diskguard import DiskGuard

    inside, outside = tmp_path / "student", tmp_path / "others"
    inside.mkdir()
    outside.mkdir()
    fired = []
    guard = DiskGuard([inside], 4 << 20, 100, fired.append, poll=0.01).start()
    try:
        _write_synced(outside / "big.bin", 16)
        time.sleep(0.5)
        assert not fired, f"the guard charged another writer's files to the student: {fired}"
        _write_synced(inside / "small.bin", 2)
        time.sleep(0.2)
        assert not fired, f"2 MiB of a 4 MiB cap: {fired}"
        _write_synced(inside / "more.bin", 3)
        _wait_until(lambda: fired, seconds=30)
        assert fired and fired[0] == "5 MiB", fired
    finally:
        guard.stop()


@pytest.mark.parametrize("env", ["grader", "student"])
def test_grading_processes_run_torch_on_one_thread(env, tmp_path):
    """Two gradings side by side (grade-all --jobs 2, the suite's workers) each ran 4x slower while the grader
    processes kept torch's thread per core spinning between operators: every process of a grading has one."""
    from autograder.sandbox.limits import grader_env, student_env

    environ = grader_env() if env == "grader" else student_env(tmp_path)
    shown = subprocess.run([sys.executable, "-c", "import torch; print(torch.get_num_threads())"], env=environ,
                           capture_output=True, text=True, timeout=300)
    assert shown.stdout.strip() == "1", f"expected 1 torch thread in a {env} process, got {shown.stdout!r} {shown.stderr}"
