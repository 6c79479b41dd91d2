"""autograder/sandbox/landlock.py, checked on real processes.

Every test starts a fresh ``python -I -c`` process that loads landlock.py by
file path, restricts itself and then tries things, printing a JSON object of
what happened; the test asserts on that.  The test process itself is never
restricted.
"""
import importlib.util
import json
import os
import socket
import subprocess
import sys
import textwrap

import pytest

from tests.conftest import ROOT, as_uid, readable_copy, with_spare_uid_and_system_python

MODULE = ROOT / "autograder" / "sandbox" / "landlock.py"

_spec = importlib.util.spec_from_file_location("_landlock_under_test", MODULE)
landlock = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(landlock)
ABI = landlock.abi_version()

pytestmark = pytest.mark.skipif(
    ABI == 0, reason="Landlock is not available on this kernel (abi_version() == 0)")

# Loads the module by path and gives the snippet `ll`, `P` (its parameters)
# and `attempt(fn)`: "ok" or the name of the OSError fn raised.
PRELUDE = """\
import importlib.util, json, os, sys
spec = importlib.util.spec_from_file_location("landlock", sys.argv[1])
ll = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ll)
P = json.loads(sys.argv[2])

def attempt(fn):
    try:
        fn()
        return "ok"
    except OSError as exc:
        return type(exc).__name__

def read(path):
    with open(path, "rb") as f:
        f.read()

def write(path):
    with open(path, "w") as f:
        f.write("x")

"""


def run_snippet(code, interpreter=sys.executable, prefix=(), module=MODULE, cwd=None,
                **params):
    """Run PRELUDE + code in a fresh isolated interpreter; its last stdout line as JSON."""
    argv = [*prefix, interpreter, "-I", "-c", PRELUDE + textwrap.dedent(code),
            str(module), json.dumps(params)]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=30, cwd=cwd)
    assert proc.returncode == 0, f"snippet failed ({proc.returncode}):\n{proc.stderr}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture
def tree(tmp_path):
    """tmp_path with allowed/{a,b}.txt, rw/, secret.txt (outside both folders)."""
    (tmp_path / "allowed").mkdir()
    (tmp_path / "allowed" / "a.txt").write_text("A")
    (tmp_path / "allowed" / "b.txt").write_text("B")
    (tmp_path / "rw").mkdir()
    (tmp_path / "rw" / "old.txt").write_text("old")
    (tmp_path / "secret.txt").write_text("secret")
    return tmp_path


def python_folders():
    """The folders this interpreter needs to import: prefixes and sys.path."""
    return [sys.prefix, sys.base_prefix, *[p for p in sys.path if p]]


def test_abi_version_is_a_positive_int_here():
    assert isinstance(ABI, int) and ABI >= 1


def test_a_restricted_process_reads_an_allowed_folder_but_not_a_file_outside_it(tree):
    out = run_snippet("""
        abi = ll.restrict(read=[P["allowed"]])
        print(json.dumps({
            "abi": abi,
            "inside": open(os.path.join(P["allowed"], "a.txt")).read(),
            "listdir_inside": sorted(os.listdir(P["allowed"])),
            "outside": attempt(lambda: read(P["secret"])),
            "listdir_outside": attempt(lambda: os.listdir(P["root"])),
        }))
    """, allowed=str(tree / "allowed"), secret=str(tree / "secret.txt"), root=str(tree))
    assert out == {"abi": ABI, "inside": "A", "listdir_inside": ["a.txt", "b.txt"],
                   "outside": "PermissionError", "listdir_outside": "PermissionError"}


def test_it_writes_only_in_its_write_folders(tree):
    out = run_snippet("""
        ll.restrict(read=[P["ro"]], write=[P["rw"]])
        ro, rw = P["ro"], P["rw"]
        print(json.dumps({
            "create_in_read_folder": attempt(lambda: write(os.path.join(ro, "new.txt"))),
            "append_in_read_folder": attempt(lambda: open(os.path.join(ro, "a.txt"), "a")),
            "remove_in_read_folder": attempt(lambda: os.remove(os.path.join(ro, "b.txt"))),
            "create_in_write_folder": attempt(lambda: write(os.path.join(rw, "new.txt"))),
            "mkdir_in_write_folder": attempt(lambda: os.mkdir(os.path.join(rw, "sub"))),
            "remove_in_write_folder": attempt(lambda: os.remove(os.path.join(rw, "old.txt"))),
            "create_outside": attempt(lambda: write(os.path.join(P["root"], "new.txt"))),
        }))
    """, ro=str(tree / "allowed"), rw=str(tree / "rw"), root=str(tree))
    assert out == {
        "create_in_read_folder": "PermissionError",
        "append_in_read_folder": "PermissionError",
        "remove_in_read_folder": "PermissionError",
        "create_in_write_folder": "ok",
        "mkdir_in_write_folder": "ok",
        "remove_in_write_folder": "ok",
        "create_outside": "PermissionError",
    }
    assert (tree / "rw" / "new.txt").read_text() == "x"
    assert not (tree / "new.txt").exists() and (tree / "allowed" / "b.txt").exists()


def test_it_can_still_import_a_new_stdlib_module_when_the_python_folders_are_readable():
    out = run_snippet("""
        fresh = "fractions" not in sys.modules and "json.tool" not in sys.modules
        ll.restrict(read=P["python"])
        import fractions, json.tool
        print(json.dumps({"fresh": fresh,
                          "sum": str(fractions.Fraction(1, 3) + fractions.Fraction(1, 6))}))
    """, python=python_folders())
    assert out == {"fresh": True, "sum": "1/2"}


def test_without_the_python_folders_a_new_import_fails_with_permission_error():
    # The path finders cached the stdlib listing at startup, so the module is
    # found and opening it fails: PermissionError, not ImportError.
    out = run_snippet("""
        ll.restrict()
        try:
            import fractions
            result = "imported"
        except (ImportError, OSError) as exc:
            result = type(exc).__name__
        print(json.dumps({"import": result}))
    """)
    assert out == {"import": "PermissionError"}


def test_a_file_rule_grants_that_file_only_and_write_on_a_file_is_not_an_error(tree):
    out = run_snippet("""
        ll.restrict(read=[os.path.join(P["allowed"], "a.txt")],
                    write=[os.path.join(P["rw"], "old.txt")])
        print(json.dumps({
            "granted_file": attempt(lambda: read(os.path.join(P["allowed"], "a.txt"))),
            "its_sibling": attempt(lambda: read(os.path.join(P["allowed"], "b.txt"))),
            "write_granted_file": attempt(lambda: write(os.path.join(P["rw"], "old.txt"))),
            "create_beside_it": attempt(lambda: write(os.path.join(P["rw"], "new.txt"))),
        }))
    """, allowed=str(tree / "allowed"), rw=str(tree / "rw"))
    assert out == {"granted_file": "ok", "its_sibling": "PermissionError",
                   "write_granted_file": "ok", "create_beside_it": "PermissionError"}


@pytest.mark.skipif(ABI < 4, reason="TCP rules need Landlock ABI 4 (Linux 6.7)")
def test_tcp_connect_to_a_listening_local_socket_is_refused_but_udp_is_not_covered():
    with socket.socket() as tcp, socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
        tcp.bind(("127.0.0.1", 0))
        tcp.listen(8)
        udp.bind(("127.0.0.1", 0))
        out = run_snippet("""
            import socket
            def connect():
                with socket.socket() as s:  # not create_connection: its getaddrinfo
                    s.settimeout(5)        # lazily imports the idna codec
                    s.connect(("127.0.0.1", P["tcp"]))
            def bind():
                with socket.socket() as s:
                    s.bind(("127.0.0.1", 0))
            def udp():
                with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                    s.sendto(b"hi", ("127.0.0.1", P["udp"]))
            before = attempt(connect)
            ll.restrict()
            print(json.dumps({"before": before, "connect": attempt(connect),
                              "bind": attempt(bind), "udp": attempt(udp)}))
        """, tcp=tcp.getsockname()[1], udp=udp.getsockname()[1])
        udp.settimeout(5)
        assert udp.recv(16) == b"hi"
    assert out == {"before": "ok", "connect": "PermissionError", "bind": "PermissionError",
                   "udp": "ok"}


@pytest.mark.skipif(ABI < 4, reason="TCP rules need Landlock ABI 4 (Linux 6.7)")
def test_deny_tcp_false_leaves_tcp_alone():
    with socket.socket() as tcp:
        tcp.bind(("127.0.0.1", 0))
        tcp.listen(8)
        out = run_snippet("""
            import socket
            ll.restrict(deny_tcp=False)
            def connect():
                with socket.socket() as s:  # not create_connection: its getaddrinfo
                    s.settimeout(5)        # lazily imports the idna codec
                    s.connect(("127.0.0.1", P["tcp"]))
            print(json.dumps({"connect": attempt(connect)}))
        """, tcp=tcp.getsockname()[1])
    assert out == {"connect": "ok"}


@pytest.mark.skipif(ABI < 6, reason="scoping needs Landlock ABI 6 (Linux 6.12)")
def test_signals_and_abstract_sockets_outside_the_domain_are_refused():
    name = f"\0landlock-test-{os.getpid()}"
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(name)
        server.listen(8)
        out = run_snippet("""
            import signal, socket
            def unix():
                with socket.socket(socket.AF_UNIX) as s:
                    s.connect(P["name"])
            parent = os.getppid()
            before = [attempt(lambda: os.kill(parent, 0)), attempt(unix)]
            ll.restrict()
            after = [attempt(lambda: os.kill(parent, 0)), attempt(unix)]
            child = os.fork()
            if child == 0:
                signal.pause()
                os._exit(0)
            own_child = attempt(lambda: os.kill(child, signal.SIGKILL))
            os.waitpid(child, 0)
            print(json.dumps({"before": before, "after": after, "own_child": own_child}))
        """, name=name)
    assert out == {"before": ["ok", "ok"], "after": ["PermissionError", "PermissionError"],
                   "own_child": "ok"}


def test_a_device_in_devices_can_be_written_and_other_devices_cannot():
    out = run_snippet("""
        ll.restrict(devices=["/dev/null"])
        print(json.dumps({"null": attempt(lambda: write("/dev/null")),
                          "zero": attempt(lambda: read("/dev/zero"))}))
    """)
    assert out == {"null": "ok", "zero": "PermissionError"}


def test_restrict_skips_a_missing_path_instead_of_failing(tree):
    out = run_snippet("""
        abi = ll.restrict(read=[P["missing"], P["under_a_file"], P["allowed"]],
                          write=[P["missing"]], devices=["/dev/no-such-device"])
        print(json.dumps({"abi": abi,
                          "inside": attempt(lambda: read(os.path.join(P["allowed"], "a.txt"))),
                          "outside": attempt(lambda: read(P["secret"]))}))
    """, missing=str(tree / "missing" / "deeper"), allowed=str(tree / "allowed"),
        under_a_file=str(tree / "secret.txt" / "x"), secret=str(tree / "secret.txt"))
    assert out == {"abi": ABI, "inside": "ok", "outside": "PermissionError"}


def test_the_restriction_is_inherited_by_forked_and_executed_children(tree):
    out = run_snippet("""
        import subprocess
        ll.restrict(read=P["python"] + [P["allowed"]])
        child = os.fork()
        if child == 0:
            os._exit(0 if attempt(lambda: read(P["secret"])) == "PermissionError" else 1)
        _, status = os.waitpid(child, 0)
        probe = "open(%r).read()" % P["secret"]
        proc = subprocess.run([sys.executable, "-I", "-c", probe],
                              capture_output=True, text=True)
        print(json.dumps({"forked_child_refused": os.waitstatus_to_exitcode(status) == 0,
                          "exec_child_rc": proc.returncode,
                          "exec_child_error": proc.stderr.strip().splitlines()[-1]}))
    """, python=python_folders() + ["/lib", "/lib64", "/usr/lib", "/usr/lib64",
                                    "/etc/ld.so.cache"],
        allowed=str(tree / "allowed"), secret=str(tree / "secret.txt"))
    assert out["forked_child_refused"] is True
    assert out["exec_child_rc"] == 1
    assert out["exec_child_error"].startswith("PermissionError")


def test_a_failing_step_raises_landlock_error_naming_it_and_leaves_the_process_free(tree):
    out = run_snippet("""
        import ctypes, errno
        real = ll._syscall
        def failing_add_rule():
            libc, syscall = real()
            def fake(nr, *args):
                if nr.value == 445:
                    ctypes.set_errno(errno.EINVAL)
                    return -1
                return syscall(nr, *args)
            return libc, fake
        ll._syscall = failing_add_rule
        try:
            ll.restrict(read=["/usr"])
            raised = None
        except ll.LandlockError as exc:
            raised = [str(exc), exc.errno, isinstance(exc, OSError)]
        print(json.dumps({"raised": raised, "still_free": attempt(lambda: read(P["secret"]))}))
    """, secret=str(tree / "secret.txt"))
    assert out == {"raised": ["landlock_add_rule(/usr): Invalid argument", 22, True],
                   "still_free": "ok"}


def test_restrict_raises_when_landlock_is_not_available(monkeypatch):
    monkeypatch.setattr(landlock, "_probe", lambda: (0, 38))
    with pytest.raises(landlock.LandlockError, match="^Landlock is not available: "):
        landlock.restrict()


def test_a_single_path_instead_of_a_list_is_a_type_error():
    # Iterating "/usr" would grant "/", "u", "s", "r": refuse before anything happens.
    with pytest.raises(TypeError):
        landlock.restrict(read="/usr")


@with_spare_uid_and_system_python
def test_the_restriction_works_for_an_unprivileged_user(world_readable_tmp):
    tmp = world_readable_tmp
    module = readable_copy(MODULE, tmp)
    (tmp / "allowed").mkdir(mode=0o755)
    (tmp / "allowed").chmod(0o755)
    for path, text in ((tmp / "allowed" / "a.txt", "A"), (tmp / "secret.txt", "S")):
        path.write_text(text)
        path.chmod(0o644)
    out = run_snippet("""
        import ctypes
        prctl = ctypes.CDLL(None).prctl
        no_new_privs_before = prctl(39, 0, 0, 0, 0)
        abi = ll.restrict(read=[P["allowed"]])
        print(json.dumps({
            "uid": os.getuid(), "abi": abi,
            "no_new_privs": [no_new_privs_before, prctl(39, 0, 0, 0, 0)],
            "inside": attempt(lambda: read(os.path.join(P["allowed"], "a.txt"))),
            "outside": attempt(lambda: read(P["secret"])),
        }))
    """, interpreter="/usr/bin/python3", module=module, cwd=tmp,
        prefix=as_uid([]),
        allowed=str(tmp / "allowed"), secret=str(tmp / "secret.txt"))
    assert out == {"uid": 65534, "abi": ABI, "no_new_privs": [0, 1],
                   "inside": "ok", "outside": "PermissionError"}
