"""One pytest session for every grading of a warm grader server: configured, started and collected once, before
the server forks.

A grading forked from the warm grader server (autograder/sandbox/forkserver.py) ran `pytest.main` afresh: parse
its arguments and the graders' ini file, register and configure pytest's ~30 plugins, start a session and
collect the graders: ~0.09 s of CPU in every grading, of ~0.6 s for the reference's (2026-11-28: configuration
~0.045 s, the session's start ~0.02 s, collection ~0.025 s). None of it depends on the grading but for two
options (`--spec`, `--key-fd`) and the parts it grades. So the grader server runs `pytest.main` once, with the
engine's arguments for every part (`engine.grader_args`) and no grading, and serves from inside that session:
this module's `pytest_runtestloop`, tried first, is the server loop (forkserver.serve). Each fork comes back out
of the loop into the session with its own grading set up (`Prepared.resume`): its spec and key (the plugin's
`begin`, what its pytest_configure does for a grading), the checks of its parts alone (and of what its course
file hands out: the plugin's `course_items`, what its collection hook does). From there it is any session:
pytest's own run loop, then its session finish (the results, signed) and unconfigure (which ends the process).

The results are the same either way: the same checks, in the same order, run by the same code on modules the
server imported once (it always did: GRADER_PRELOAD). A request whose arguments differ from the prepared
session's in anything else (a `-k` selection, another option, a part it did not collect) runs `pytest.main`
afresh in its fork, as every grading did before. The cold path (no server) is unchanged.

pytest is called as usual (`pytest.main`, with this plugin); a fork sets the session's `items` and
`testscollected` as its collection does, and a grading whose setup raises ends as pytest ends a session whose
configuration raised (`Config._ensure_unconfigure`, its one private name here): pytest is pinned in
requirements.lock, and tests/test_prepared.py checks prepared gradings against fresh ones.
"""
from __future__ import annotations

import faulthandler
import os
import sys

import pytest

from autograder.sandbox.forkserver import RESUME

SPEC, KEY_FD = "--spec", "--key-fd"


def split(args) -> tuple[list[str], list[str], str | None]:
    """(the grader files, every other argument but `--spec` and `--key-fd` with their values, the spec's JSON or
    None) of a grading's pytest arguments (`engine.grader_args`: the files first)."""
    args = [str(a) for a in args]
    files = []
    while args and not args[0].startswith("-"):
        files.append(args.pop(0))
    rest, spec = [], None
    while args:
        arg = args.pop(0)
        if arg in (SPEC, KEY_FD) and args:
            value = args.pop(0)
            spec = value if arg == SPEC else spec
        else:
            rest.append(arg)
    return files, rest, spec


class Prepared:
    """The pytest plugin that holds the prepared session in the grader server and resumes it in each fork.

    `serve(handler)`: forkserver.serve, with the server's address and options bound."""

    def __init__(self, args, serve):
        files, self.rest, _ = split(args)
        self.collected = {os.path.realpath(f) for f in files}  # the grader files, by their real paths
        self.serve = serve
        self.request = None  # in a fork that resumes the session: (its grader files' real paths, spec, key fd)
        self.served = False  # the session reached its run loop, which serves

    def fits(self, args) -> bool:
        """Whether a grading with pytest arguments `args` can run in this session: the same options, a spec,
        and only grader files the session collected."""
        return self._fitting(args) is not None

    def _fitting(self, args) -> tuple[set[str], str] | None:
        """(the real paths of the grader files, the spec) of a grading that fits (`fits`), else None."""
        files, rest, spec = split(args)
        real = {os.path.realpath(f) for f in files}
        return (real, spec) if spec is not None and rest == self.rest and real <= self.collected else None

    def _handle(self, request, fds):
        """In a fork: a request that fits comes back out of the server loop into the session (see `resume`);
        any other runs pytest afresh, as before."""
        fitting = self._fitting(request["args"])
        if fitting is None:
            return fresh(request, fds)
        _into_log(request)
        self.request = (*fitting, fds[0] if fds else None)
        return RESUME

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtestloop(self, session):
        if session.testsfailed:  # the graders could not all be collected: no session to serve from (serve_graders)
            return None
        sys.stdout.flush()
        sys.stderr.flush()
        _restore_stdout()
        self.served = True
        self.serve(self._handle)  # the server serves until its owner closes its stdin, and never comes back from
        self.resume(session)  # it; a fork whose grading fits the session does, here
        return None  # pytest's own run loop runs the checks

    def resume(self, session):
        """Set this fork's grading up in the session, as a fresh session would have: its spec and key, its
        checks (pytest_configure and the collection's modifyitems of the plugin, for one grading)."""
        from autograder.grade import plugin

        files, spec, key_fd = self.request
        config = session.config
        config.option.spec, config.option.key_fd = spec, key_fd
        faulthandler.enable(file=sys.stderr)  # this grading's log, as a fresh session's is (pytest's points at
        # the server's standard error)
        try:
            plugin.begin(config)
        except BaseException:  # as a fresh session's pytest_configure that raises: said in the log, no results
            config.notify_exception(pytest.ExceptionInfo.from_current(), config.option)
            config._ensure_unconfigure()
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(int(pytest.ExitCode.INTERNAL_ERROR))
        real = {path: os.path.realpath(path) for path in {str(item.path) for item in session.items}}
        items, others = [], []
        for item in session.items:
            (items if real[str(item.path)] in files else others).append(item)
        if others:
            config.hook.pytest_deselected(items=others)
        plugin.course_items(config, items)
        session.items = items
        session.testscollected = len(items)
        plugin.collected(config, prepared=True)


_saved_stdout: list[int] = []


def _quiet_stdout():
    """Standard output to /dev/null while the session is prepared: the server's is the pipe on which its owner
    waits for "ready" (forkserver.serve), and nothing of pytest's may come before."""
    sys.stdout.flush()
    _saved_stdout.append(os.dup(1))
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    os.close(null)


def _restore_stdout():
    if _saved_stdout:
        fd = _saved_stdout.pop()
        os.dup2(fd, 1)
        os.close(fd)


def _into_log(request):
    """In a fork: work in the grading's folder, and write standard output and error to its log."""
    os.chdir(request["cwd"])
    log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)


def fresh(request, fds) -> int:
    """A grading that does not fit the prepared session, in its fork: `pytest.main` afresh, with its arguments."""
    _into_log(request)
    return pytest.main([*request["args"], *([KEY_FD, str(fds[0])] if fds else [])])


def serve_graders(address, serve) -> int:
    """The grader server's loop (autograder/sandbox/forkserver.py runs it, GRADER_PRELOAD naming this module): run
    `pytest.main` once with every part's graders and no grading, and serve from inside that session (`Prepared`,
    `serve`: forkserver.serve). In a fork it returns pytest's exit code, once its grading's session is over (the
    plugin's unconfigure normally ends the process first)."""
    from autograder import registry
    from autograder.grade.engine import grader_args

    args = grader_args(registry.grader_files(registry.PARTS))
    prepared = Prepared(args, lambda handle: serve(address, handle, freeze_imports=True))
    _quiet_stdout()
    try:
        code = pytest.main(args, plugins=[prepared])
    finally:
        _restore_stdout()
    if not prepared.served:  # a session that never reached its run loop (the graders not collected): every grading
        serve(address, fresh, freeze_imports=True)  # runs pytest afresh, as before, and says why in its log
    return code
