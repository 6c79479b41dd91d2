"""The warm servers of a class run: torch and the graders imported once, not per grading.

`WarmServers` starts two fork servers (autograder.sandbox.forkserver): one that forks a warm graders' process per
grading (it has imported `GRADER_PRELOAD`), and a zygote that forks each student process from a warm process that
holds torch and nothing of the kit. `LazyServers` starts them at the first grading that needs them. The engine
(autograder.grade.engine.grade) takes either as `servers=`; without, a grading starts its processes cold (slower,
the same report).
"""
from __future__ import annotations

import shutil
import sys
import tempfile
import threading

from autograder import registry
from autograder.sandbox.limits import grader_env, student_env


class WarmServers:
    """The two fork servers of a batch run (autograder.sandbox.forkserver): torch is imported once, not per grading.

    `grader` forks a warm trusted process per submission to run the hidden
    graders; `zygote` forks each student process from a warm process that
    holds torch and nothing of the kit. Use as a context manager and pass it
    to `grade(..., servers=...)`.
    """

    def __init__(self, python=None):
        from autograder.sandbox.forkclient import Server
        self._home = tempfile.mkdtemp(prefix="mha-zygote-home-")  # the student processes' HOME: removed at close
        started = []
        try:
            # side by side: each imports torch, so on two cores the pair is ready in the time of one import. The
            # zygote first: the grader server inherits its channel, for its gradings to fork student processes
            started.append(Server("student", env=student_env(self._home), isolated=True,
                                  python=python or sys.executable, wait=False))
            started.append(Server("grader", env=grader_env(), preload=GRADER_PRELOAD, wait=False,
                                  share=[started[0]]))
            for server in started:
                server.wait_ready()
        except BaseException:
            for server in started:
                server.close()
            shutil.rmtree(self._home, ignore_errors=True)
            raise
        self.zygote, self.grader = started

    def close(self):
        self.grader.close()
        self.zygote.close()
        shutil.rmtree(self._home, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class LazyServers:
    """WarmServers started by the first grading that runs graders, from whichever thread it runs in: a class
    run (or a shard of one) whose submissions are all refused at intake starts no server at all.

    Passed as `grade(..., servers=...)`: its truth value starts the servers when they are not running yet and
    says whether they run; False (the gradings go cold, slower, same results) where they cannot start, or
    once closed. `grader` and `zygote` are those of the running servers.
    """

    def __init__(self, python=None):
        self._python = python
        self._servers = None
        self._state = "waiting"  # "running", "unavailable" (they could not start) or "closed"
        self._lock = threading.Lock()

    def __bool__(self):
        with self._lock:
            if self._state == "waiting":
                try:
                    self._servers = WarmServers(python=self._python)
                    self._state = "running"
                except (OSError, RuntimeError):
                    self._state = "unavailable"
            return self._state == "running"

    @property
    def grader(self):
        return self._servers.grader

    @property
    def zygote(self):
        return self._servers.zygote

    def close(self):
        with self._lock:
            self._state = "closed"
            servers, self._servers = self._servers, None
        if servers is not None:
            servers.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


#: What the warm grader server imports once, so that no grading pays for it: torch, the pytest plugin, the
#: checks and diagnoses, the graders' helpers, the timing, the reference solution, and the graders themselves
#: (pytest's importlib mode takes a test module already in sys.modules as it is: each fork collects the server's
#: copy instead of compiling and running the five files again, ~20 ms of CPU a grading). And the prepared session's
#: module, whose loop the server runs (autograder/grade/prepared.py: pytest configured and the graders collected once).
GRADER_PRELOAD = ("torch", "autograder.grade.plugin", "autograder.graders.checks", "autograder.grade.diagnose",
                  "autograder.graders.common", "autograder.graders.timing", "solutions", *registry.grader_modules(),
                  "autograder.grade.prepared")
