"""The Slurm route run for real (issue 36): a one-node Slurm started for this module (munged, slurmctld, slurmd:
state, spool, sockets and logs in a temporary folder, proctrack/linuxproc, task/none, no cgroups, no systemd),
and templates/slurm/submit.sh run as the documentation writes it (docs/instructor/cluster.md, "Slurm").

1. `submit.sh CLASS RESULTS 3` (the documentation's line, its paths and N replaced): the merge job's gradebook equals
   one plain `grade-all` of the class in every column but the times.
2. A second run, one array task cancelled (scancel) once it has begun: the merge job refuses (exit 1), naming
   the shard and its ids, and prints the line that runs the rest; the documentation's `submit.sh --resume` line, run as
   written, grades only that shard again and merges, and the gradebook then equals the plain run's.
3. A third run, one array task requeued once it has begun (scontrol requeue, as a preemption does): its log
   keeps the run that was stopped and appends the one that finished, which resumed; the merge equals the plain
   run.

The class is tests/test_shards_class.py's: 20 entries, 3 graded for real, the others "empty" at once. It skips,
saying why, where Slurm or munge is not installed (.ci/run installs them with apt where it can) or the user is
not root (slurmd runs jobs as their submitter). Daemons are stopped by the pids this module started.
"""
from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from autograder.classrun import gradebook, shards
from tests.conftest import ROOT
from tests.test_shards_class import COMPARED, compared, folders, make_class

pytestmark = [pytest.mark.grading, pytest.mark.long]

DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("sbatch", "squeue", "scancel", "scontrol", "sinfo")
HANG_GUARD = 900  # seconds: a guard against a hang, never a bound on speed
SHARDS = 3


def _why_not() -> str | None:
    if sys.platform != "linux":
        return "a one-node Slurm is started on Linux only"
    if os.geteuid() != 0:
        return "a one-node Slurm needs root here (slurmd runs each job as the user who submitted it)"
    missing = [name for name in DAEMONS + CLIENTS
               if shutil.which(name) is None and not Path("/usr/sbin", name).exists()]
    if missing:
        return (f"Slurm or munge is not installed ({', '.join(missing)} not found): apt-get install slurm-wlm munge "
                "(.ci/run does where it can)")
    if not os.access(ROOT / ".venv" / "bin" / "python", os.X_OK):
        return "templates/slurm/submit.sh runs the kit's .venv, which is not set up here (make setup)"
    return None


def _binary(name: str) -> str:
    return shutil.which(name) or str(Path("/usr/sbin", name))


def _free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


class Slurm:
    """A one-node Slurm in `root`: `env` reaches it (SLURM_CONF), `run` calls its clients."""

    def __init__(self, root: Path):
        self.root = root
        self.conf = root / "slurm.conf"
        self.env = {**os.environ, "SLURM_CONF": str(self.conf), "TMPDIR": str(root / "tmp")}
        self.daemons: list[subprocess.Popen] = []

    def run(self, *command, check=True) -> str:
        proc = subprocess.run(command, capture_output=True, text=True, env=self.env, timeout=HANG_GUARD)
        if check and proc.returncode:
            raise AssertionError(f"{shlex.join(command)}: exit {proc.returncode}\n{proc.stdout}{proc.stderr}")
        return proc.stdout

    def ok(self, *command) -> bool:
        return subprocess.run(command, capture_output=True, env=self.env, timeout=HANG_GUARD).returncode == 0

    def start(self):
        root = self.root
        for folder in ("munge", "state", "spool", "log", "tmp"):
            (root / folder).mkdir(mode=0o700)
        key = root / "munge" / "munge.key"
        key.write_bytes(os.urandom(128))
        key.chmod(0o400)
        socket_path = root / "munge" / "munge.socket"
        self._daemon("munged", _binary("munged"), "--foreground", "--force", f"--socket={socket_path}",
                     f"--key-file={key}", f"--pid-file={root / 'munge' / 'munged.pid'}",
                     f"--log-file={root / 'log' / 'munged.log'}", f"--seed-file={root / 'munge' / 'munged.seed'}")
        self._wait(lambda: socket_path.exists(), "munged's socket")
        node = subprocess.run([_binary("slurmd"), "-C"], capture_output=True, text=True, timeout=60).stdout
        node = next(line for line in node.splitlines() if line.startswith("NodeName="))
        self.name = node.split()[0].split("=", 1)[1]
        node = " ".join(word for word in node.split() if not word.startswith("UpTime="))
        controller_port, node_port = _free_ports(2)
        self.conf.write_text("\n".join([
            "ClusterName=mhatest", f"SlurmctldHost={self.name}(127.0.0.1)",
            f"SlurmctldPort={controller_port}", f"SlurmdPort={node_port}", "SlurmUser=root", "SlurmdUser=root",
            "AuthType=auth/munge", f"AuthInfo=socket={socket_path}", "CredType=cred/munge",
            f"StateSaveLocation={root / 'state'}", f"SlurmdSpoolDir={root / 'spool'}",
            f"SlurmctldPidFile={root / 'slurmctld.pid'}", f"SlurmdPidFile={root / 'slurmd.pid'}",
            f"SlurmctldLogFile={root / 'log' / 'slurmctld.log'}", f"SlurmdLogFile={root / 'log' / 'slurmd.log'}",
            "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none", "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core_Memory", "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none", "JobCompType=jobcomp/none", "MpiDefault=none",
            "MailProg=/bin/true", "ReturnToService=2", "KillWait=10", "MinJobAge=600",
            "SchedulerParameters=batch_sched_delay=0",  # a job starts when submitted, not up to 3 s later
            f"{node} NodeAddr=127.0.0.1 State=UNKNOWN",
            f"PartitionName=debug Nodes={self.name} Default=YES MaxTime=INFINITE State=UP", ""]))
        self._daemon("slurmctld", _binary("slurmctld"), "-D", "-f", str(self.conf))
        self._daemon("slurmd", _binary("slurmd"), "-D", "-f", str(self.conf))
        self._wait(lambda: self.run("sinfo", "-h", "-o", "%T", check=False).strip() == "idle", "an idle node")

    def _daemon(self, name, *command):
        log = open(self.root / "log" / f"{name}.out", "wb")
        self.daemons.append(subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=self.env,
                                             start_new_session=True))
        log.close()

    def _wait(self, ready, what, guard=120):
        deadline = time.monotonic() + guard
        while not ready():
            dead = [d.args[0] for d in self.daemons if d.poll() is not None]
            if dead or time.monotonic() > deadline:
                raise AssertionError(f"expected {what} within {guard} s; daemons ended: {dead}\n{self.logs()}")
            time.sleep(0.2)

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-3000:]}"
                         for p in sorted((self.root / "log").iterdir()))

    def queue(self) -> list[str]:
        return self.run("squeue", "-h", "-o", "%i %T").splitlines()

    def wait_idle(self):
        self._wait(lambda: not self.queue(), "every job to end", guard=HANG_GUARD)

    def stop(self):
        """Cancel what is left, then end each daemon this fixture started, by its pid (SIGTERM, then SIGKILL)."""
        if any(d.poll() is None for d in self.daemons[1:]):
            self.run("scancel", "--user=root", check=False)
            try:
                self.wait_idle()
            except AssertionError:
                pass
        for daemon in reversed(self.daemons):
            if daemon.poll() is None:
                os.kill(daemon.pid, signal.SIGTERM)
                try:
                    daemon.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    os.kill(daemon.pid, signal.SIGKILL)
                    daemon.wait()


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    why = _why_not()
    if why:
        pytest.skip(why)
    cluster = Slurm(tmp_path_factory.mktemp("slurm"))
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


#: Where the documentation shows the Slurm route: its "Slurm" section's first code block.
CLUSTER_PAGE = ROOT / "docs" / "instructor" / "cluster.md"


def documented_command(flag: str = "") -> list[str]:
    """The documentation's line that runs templates/slurm/submit.sh (with `flag`, or the first plain one), as words."""
    page = CLUSTER_PAGE.read_text(encoding="utf-8")
    section = page[page.index("\n## Slurm\n"):]
    block = section[section.index("```bash"):section.index("```", section.index("```bash") + 7)]
    for line in block.splitlines():
        words = shlex.split(line, comments=True)
        if words[:1] == ["templates/slurm/submit.sh"] and (flag in words if flag else words[1].startswith("/")):
            return words
    raise AssertionError(f"expected a `templates/slurm/submit.sh {flag}` line in the Slurm block of "
                         f"{CLUSTER_PAGE.relative_to(ROOT)}:\n{block}")


def as_written(words, class_folder: Path, results: Path) -> list[str]:
    """The documentation's words with its paths and its N replaced by this test's (nothing else changed)."""
    swap = {"/shared/class": str(class_folder), "/shared/results": str(results), "32": str(SHARDS)}
    assert {"/shared/class", "/shared/results", "32"} <= set(words), words
    return [swap.get(word, word) for word in words]


def submit(slurm, words) -> tuple[str, str]:
    """Run submit.sh from the kit's checkout as the documentation does; (its output, the job array's id or "")."""
    proc = subprocess.run(words, cwd=ROOT, capture_output=True, text=True, env=slurm.env, timeout=HANG_GUARD)
    assert proc.returncode == 0, f"{shlex.join(words)}: exit {proc.returncode}\n{proc.stdout}{proc.stderr}"
    found = re.search(r"^grading: job array (\d+)", proc.stdout, re.M)
    return proc.stdout, found.group(1) if found else ""


def rows_equal(got: Path, expected: Path):
    mine, theirs = compared(got), compared(expected)
    assert [r["id"] for r in mine] == [r["id"] for r in theirs], "the same rows, in grade-all's order"
    for a, b in zip(mine, theirs):
        assert a == b, f"expected every column but grading_time_s ({', '.join(COMPARED)}) equal"
    assert folders(got) == folders(expected), "laid out as the plain run's OUT"


@pytest.fixture(scope="module")
def course(slurm, tmp_path_factory):
    root = tmp_path_factory.mktemp("slurm-course")
    root.chmod(0o755)
    make_class(root / "class")
    plain = subprocess.run([sys.executable, str(ROOT / "grader_cli.py"), "grade-all", str(root / "class"),
                            "--output", str(root / "plain"), "--jobs", "2"], capture_output=True, text=True,
                           env=slurm.env, timeout=HANG_GUARD)
    assert plain.returncode == 0, plain.stdout + plain.stderr
    return root


def test_the_documented_submit_line_grades_the_class_as_one_plain_run(slurm, course):
    results = course / "run-1"
    output, array = submit(slurm, as_written(documented_command(), course / "class", results))
    assert array and f"shards 0-{SHARDS - 1} of {SHARDS}" in output, output
    slurm.wait_idle()
    log = (results / "logs" / "merge.out").read_text()
    assert f"20 rows in {results / 'merged' / 'gradebook.csv'} (merged from {SHARDS} shards)" in log, \
        f"expected the merge to succeed; its log:\n{log}\n{slurm.logs()}"
    rows_equal(results / "merged", course / "plain")
    logs = sorted(p.name for p in (results / "logs").iterdir())
    assert logs == ["merge.out"] + [f"shard-{k}.out" for k in range(SHARDS)], logs


def test_a_cancelled_task_is_named_by_the_merge_and_the_documented_resume_line_completes_the_run(slurm, course):
    results = course / "run-2"
    output, array = submit(slurm, as_written(documented_command(), course / "class", results))
    k = shards.shard_of("reference", SHARDS)  # a shard with a real grading: seconds between its manifest and its end
    began(slurm, results, k)
    slurm.run("scancel", f"{array}_{k}")
    slurm.wait_idle()
    assigned = [i for i, _ in shards.read_manifest(results / "shards" / str(k))["submissions"]]
    graded = gradebook.read_gradebook(results / "shards" / str(k))
    left = [i for i in assigned if gradebook.row_key(i) not in graded]
    assert "reference" in left, f"expected shard {k} cancelled before it graded reference; it has {sorted(graded)}"
    log = (results / "logs" / "merge.out").read_text()
    assert f"shard {k} ({results / 'shards' / str(k)}): assigned, no row" in log and "reference" in log, log
    assert not (results / "merged").exists(), "expected no gradebook from a refused merge"
    resume = as_written(documented_command("--resume"), course / "class", results)
    assert shlex.join(resume[1:]) in log, f"expected the merge's log to give the documentation's rerun line:\n{log}"
    output, array = submit(slurm, resume)
    assert array and f"shards {k} of {SHARDS}" in output, f"expected only shard {k} run again:\n{output}"
    slurm.wait_idle()
    log = (results / "logs" / "merge.out").read_text()
    last = log.split("== merge of")[-1]
    assert log.count("== merge of") == 2 and (
        f"20 rows in {results / 'merged' / 'gradebook.csv'} (merged from {SHARDS} shards)\n" in last
        and last.rstrip().endswith(f"Class page: {results / 'merged' / 'class.html'} (every figure with its ids: "
                                   "class.csv)")), log
    rows_equal(results / "merged", course / "plain")
    shard_log = (results / "logs" / f"shard-{k}.out").read_text()
    assert shard_log.count(f"== shard {k}/{SHARDS}:") == 2 and "CANCELLED" in shard_log, \
        f"expected both runs of shard {k} in its log, the cancelled one first:\n{shard_log}"


def test_a_requeued_task_appends_to_its_log_and_resumes(slurm, course):
    results = course / "run-3"
    _, array = submit(slurm, as_written(documented_command(), course / "class", results))
    k = shards.shard_of("reference", SHARDS)
    began(slurm, results, k)
    task = f"{array}_{k}"
    slurm.run("scontrol", "requeue", task)
    # Slurm holds a requeued job for 2 minutes (BeginTime); release it now: the test is of the log, not the wait
    deadline = time.monotonic() + HANG_GUARD
    while slurm.run("squeue", "-h", "-j", task, "-o", "%T", check=False).strip() != "PENDING" or \
            not slurm.ok("scontrol", "update", f"jobid={task}", "starttime=now"):
        assert time.monotonic() < deadline, f"expected {task} pending again after its requeue\n{slurm.queue()}"
        time.sleep(0.2)
    slurm.wait_idle()
    shard_log = (results / "logs" / f"shard-{k}.out").read_text()
    runs = re.findall(rf"^== shard {k}/{SHARDS}: job \d+ \(array {array}, task {k}\), run (\d+),", shard_log, re.M)
    assert runs == ["1", "2"] and "DUE TO JOB REQUEUE" in shard_log, \
        f"expected run 1 (requeued) then run 2 in shard {k}'s log, appended:\n{shard_log}"
    assert re.search(r"already graded, \d+ to grade", shard_log.split("run 2,")[1]), "expected run 2 to resume"
    rows_equal(results / "merged", course / "plain")


def began(slurm, results: Path, k: int):
    """Wait until shard K has written its manifest: it has begun, and its real grading is seconds away."""
    manifest = results / "shards" / str(k) / gradebook.MANIFEST
    deadline = time.monotonic() + HANG_GUARD
    while not manifest.exists():
        assert time.monotonic() < deadline, f"expected shard {k} to start\n{slurm.queue()}\n{slurm.logs()}"
        time.sleep(0.05)


@pytest.mark.parametrize("env, says", [
    ({"MHA_GPU": "1"}, "MHA_GPU=1, but partition 'debug' has no GPUs"),
    ({"MHA_CPUS": "4096"}, "MHA_CPUS=4096, but the nodes of partition 'debug' have"),
    ({"MHA_MEM": "100T"}, "Slurm would not run the shards as asked"),
    ({"MHA_PARTITION": "nosuch"}, "no partition 'nosuch' here (partitions: debug*)"),
], ids=["gpu", "cpus", "memory", "partition"])
def test_a_request_the_cluster_cannot_meet_stops_before_anything_is_submitted(slurm, course, env, says):
    """Never a job that pends for ever (PartitionConfig) or a bare sbatch error: submit.sh says what is wrong."""
    results = course / "never"
    words = as_written(documented_command(), course / "class", results)
    before = slurm.queue()
    proc = subprocess.run(words, cwd=ROOT, capture_output=True, text=True, env={**slurm.env, **env},
                          timeout=HANG_GUARD)
    assert proc.returncode == 2 and says in proc.stderr, f"expected exit 2 and {says!r}, got {proc.returncode}:\n" \
        f"{proc.stdout}{proc.stderr}"
    assert slurm.queue() == before and not results.exists(), "expected nothing submitted and nothing written"


def test_resume_is_refused_while_jobs_of_the_same_results_are_in_the_queue(slurm, course):
    """--resume while the first run is queued would grade its shards twice at once: it names the jobs instead."""
    results = course / "run-busy"
    _, array = submit(slurm, as_written(documented_command(), course / "class", results))
    try:
        words = as_written(documented_command("--resume"), course / "class", results)
        proc = subprocess.run(words, cwd=ROOT, capture_output=True, text=True, env=slurm.env, timeout=HANG_GUARD)
        assert proc.returncode == 2 and f"jobs of {results} are still queued or running ({array} " in proc.stderr, \
            f"expected exit 2 naming job {array}, got {proc.returncode}:\n{proc.stdout}{proc.stderr}"
    finally:
        slurm.run("scancel", "--user=root")
        slurm.wait_idle()
