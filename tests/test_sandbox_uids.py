"""Root's sandbox uids are leased (autograder/sandbox/uids.py), never derived from a pid: no two live gradings of a
machine share one, whatever their pids, and the lease of a grading that died is free again."""
import os
import signal
import subprocess
import sys
import time

import pytest

from autograder.sandbox import freeze, uids
from tests.conftest import SOLUTIONS


def test_two_gradings_whose_pids_collide_get_two_uids(tmp_path):
    """1,500,000 + pid % 100,000 gave pids 1234 and 101234 (both below systemd's pid_max, 4,194,304) one uid:
    the allocator, asked twice with the same pid, leases two."""
    folder = str(tmp_path / "uids")
    first = uids.allocate(hint=1234, folder=folder)
    second = uids.allocate(hint=101234, folder=folder)
    try:
        assert first.uid != second.uid, f"expected two uids for two live gradings, got {first.uid} twice"
        assert uids.BASE <= first.uid < uids.BASE + uids.COUNT and uids.BASE <= second.uid < uids.BASE + uids.COUNT
    finally:
        first.release()
        second.release()
    again = uids.allocate(hint=1234, folder=folder)
    assert again.uid == first.uid, "expected a released uid leased again"
    again.release()


HOLDER = """import sys, time
sys.path.insert(0, sys.argv[1])
from autograder.sandbox import uids
lease = uids.allocate(hint=int(sys.argv[2]), folder=sys.argv[3])
print(lease.uid, flush=True)
time.sleep(600)
"""


def test_the_uid_of_a_grading_that_died_is_reclaimed(tmp_path):
    """A lease is a lock held by an open file: killed with SIGKILL, its holder leaves the lock file behind but no
    lock, and the next allocation takes the uid; while it lives, nobody else does."""
    folder = str(tmp_path / "uids")
    root = str(SOLUTIONS.parent)
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, root, "777", folder], stdout=subprocess.PIPE, text=True)
    try:
        held = int(holder.stdout.readline())
        other = uids.allocate(hint=777, folder=folder)
        assert other.uid != held, "expected the uid of a live holder passed over"
        other.release()
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
        holder.stdout.close()
    assert os.path.exists(os.path.join(folder, str(held - uids.BASE))), "expected the dead holder's file left behind"
    reclaimed = uids.allocate(hint=777, folder=folder)
    reclaimed.release()
    assert reclaimed.uid == held, f"expected the dead holder's uid {held} reclaimed, got {reclaimed.uid}"


def test_a_folder_of_locks_that_others_may_write_is_refused(tmp_path):
    """A folder someone else could have made first (or may write) could hand out its locks: no uid from it."""
    folder = tmp_path / "uids"
    folder.mkdir()
    folder.chmod(0o777)
    with pytest.raises(uids.NoUid, match="not a folder of uid"):
        uids.allocate(folder=str(folder))


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can start a process as another uid")
def test_a_uid_some_process_still_runs_as_is_passed_over_and_its_stragglers_end_with_the_lease(tmp_path):
    """A free uid that a process still runs as (a straggler of a grading that died) is not leased; a lease's
    release ends every process of its uid."""
    folder = str(tmp_path / "uids")
    straggler = subprocess.Popen(["sleep", "600"], user=uids.BASE + 99_998, group=uids.BASE + 99_998)
    try:
        time.sleep(0.2)
        lease = uids.allocate(hint=99_998, folder=folder)
        assert lease.uid == uids.BASE + 99_999, f"expected the straggler's uid passed over, got {lease.uid}"
        mine = subprocess.Popen(["sleep", "600"], user=lease.uid, group=lease.uid)
        time.sleep(0.2)
        lease.release()
        assert mine.wait(timeout=10) == -signal.SIGKILL, "expected the lease's stragglers ended with it"
    finally:
        straggler.kill()
        straggler.wait()


@pytest.mark.skipif(os.geteuid() != 0, reason="only root's student processes drop to a uid of their own")
def test_two_live_sandboxes_of_one_grader_process_run_as_two_uids(student_python):
    """Two gradings started from one process (one pid: the old uid's only input) run their student code as
    two uids, each its lease's, and give them back when they close."""
    from autograder.sandbox.client import Sandbox

    def student_uids(sandbox):
        sandbox._ensure_ready()
        found = set()
        for pid in freeze.tree(sandbox.process_tree_root()):
            with open(f"/proc/{pid}/status") as fh:
                found |= {int(v) for line in fh if line.startswith("Uid:") for v in line.split()[1:4]}
        return found - {0}  # the keeper stays root, outside

    with Sandbox(SOLUTIONS, isolation="none", python=student_python) as one, \
            Sandbox(SOLUTIONS, isolation="none", python=student_python) as two:
        seen = student_uids(one), student_uids(two)
        leased = one._lease.uid, two._lease.uid
    assert seen == ({leased[0]}, {leased[1]}) and leased[0] != leased[1], (seen, leased)
    for uid in leased:
        assert not uids.processes_of(uid), f"expected no process left as uid {uid} once its grading closed"
