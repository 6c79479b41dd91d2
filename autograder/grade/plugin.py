"""pytest plugin that turns the hidden graders into a scored report.

Loaded with `-p autograder.grade.plugin` by the engine's runner, which gives the
grading as `--spec` (autograder/grade/spec.py). It starts the
student sandbox as soon as pytest is configured (so that the child imports
torch while the graders are collected: nothing this module imports at its top
imports torch), gives the graders the `student`
fixture, records every test with its points, module and aspect, and writes
the results as JSON for the engine.
"""
from __future__ import annotations

import gc
import os
import resource
import sys
import time
from dataclasses import asdict
from pathlib import Path

import pytest

from autograder import MODULES
from autograder.files import write_signed
from autograder.grade.spec import GradingSpec
from autograder.report.model import TestResult
from autograder.sandbox import batchlock, lazy_dynamo
from autograder.sandbox.client import Sandbox
from autograder.sandbox.forkserver import undumpable
from autograder.sandbox.errors import GraderUnavailable, StudentError

_SANDBOX = pytest.StashKey[Sandbox]()
_RESULTS = pytest.StashKey[list]()
GRADER_ERROR = "internal grader error (not your fault: please tell your instructor)"


def pytest_addoption(parser):
    group = parser.getgroup("mha-autograder")
    group.addoption("--spec", default=None,
                    help="the grading, as JSON (autograder.grade.spec.GradingSpec): the submission's folder, where "
                         "the results go, the student process's limits, level and interpreter, ...")
    group.addoption("--key-fd", type=int, default=None,
                    help="a file descriptor to read the key that signs the results from (HMAC-SHA256)")


_SPEC = pytest.StashKey[GradingSpec]()
_TIMES = pytest.StashKey[dict]()
_KEY = pytest.StashKey[bytes]()
_FAILURE = pytest.StashKey[str]()  # why the grader could not run student code (GraderUnavailable)


def pytest_configure(config):
    config.addinivalue_line("markers", "points(points, aspect): what a grader test is worth, and the aspect it checks")
    begin(config)
    lazy_dynamo.install()  # before the graders' first meta-device op (autograder/sandbox/lazy_dynamo.py)


def begin(config):
    """Set up the grading its --spec and --key-fd give (none: nothing of a grading), as the session is configured;
    or, in a fork of the warm grader server, in the session the server prepared (autograder/grade/prepared.py),
    with those two options set."""
    # a cold grading (exec made it dumpable again), first: no process of its uid ptraces it or reads its key
    # (here, not at import: the kit's own tests import this module, and their processes stay as they are)
    undumpable()
    config.stash[_RESULTS] = []
    config.stash[_TIMES] = {"configured": time.time()}
    fd = config.getoption("key_fd")
    if fd is not None:  # read and closed before any student process starts
        config.stash[_KEY] = os.read(fd, 256)
        os.close(fd)
    if config.getoption("spec"):  # a grading, given by the engine
        spec = config.stash[_SPEC] = GradingSpec.from_json(config.getoption("spec"))
        if spec.batch_dir:  # a warm server forked before the run began has no env
            os.environ[batchlock.ENV] = spec.batch_dir
        batchlock.register(os.getpid(), "processes")  # the batch's measurements stop its trusted work too
        sandbox = Sandbox(spec.submission, call_timeout=spec.call_timeout, limits=spec.limits,
                          isolation=spec.isolation, zygote=spec.zygote, python=spec.student_python,
                          intake=spec.intake(), parts=tuple(spec.course.get("parts") or MODULES))
        sandbox.start()
        config.stash[_SANDBOX] = sandbox
        if spec.course.get("speed"):  # the course file's thresholds, read by the speed checks as they run
            _course_speed(spec.course["speed"], spec.course.get("parts") or MODULES)


def _course_speed(speed: dict, parts):
    """Set a course file's [speed] thresholds (autograder.course) where the speed checks read them as they run: the
    MHA checks' in the graders' library (autograder/graders/timing.py), a part's own in its graders' module
    (PART_SPEED: kvcache's MIN_SPEEDUP), imported here as pytest imports it (its importlib mode then collects this
    copy, as it does the warm server's preloaded one)."""
    import importlib

    from autograder import registry
    from autograder.course import PART_SPEED, SPEED
    from autograder.graders import timing

    for key, value in speed.items():
        if key in SPEED:
            setattr(timing, SPEED[key], float(value))
        elif PART_SPEED[key][0] in parts:  # a part not handed out: nothing of it is graded
            part, name = PART_SPEED[key]
            setattr(importlib.import_module(registry.part(part).grader_module), name, float(value))


def warm():
    """Import what every grading's pytest session would import again (the warm grader server calls this once,
    before it forks: forkserver.py): pytest's built-in plugins, which `pytest.main` imports at each session's
    start (`_pytest.config.default_plugins`), and the debugger, XML, readline and faulthandler modules they import
    when configured. Each grading imported these ~30 modules anew, ~25 ms of CPU.

    And the meta device's first batched product, which the graders' diagnoses run when a student's code raised on
    the meta device (autograder/grade/diagnose.py: the untouched template, every device bug): its meta function
    imports torch.fx.experimental.symbolic_shapes and sympy, ~0.4 s of CPU in each such grading, once here instead
    (torch._dynamo stays out: lazy_dynamo)."""
    import importlib

    from _pytest.config import default_plugins

    for name in (*(f"_pytest.{plugin}" for plugin in default_plugins), "pdb", "xml.etree.ElementTree", "readline",
                 "faulthandler", "_pytest._argcomplete"):
        try:
            importlib.import_module(name)
        except ImportError:  # a plugin of another pytest's list: the session imports it, or not, as before
            pass
    import torch

    lazy_dynamo.install()
    meta = torch.empty(1, 2, 2, device="meta")
    meta @ meta  # (1, 2, 2)


def pytest_collection_finish(session):
    collected(session.config)
    # torch, pytest and the graders are imported: keep their objects out of the garbage collections to come
    # (pytest's at the session's end walked them all, ~80 ms a grading; a warm fork inherits its server's freeze)
    gc.freeze()


def collected(config, prepared=False):
    """The grading's checks are collected (`prepared`: chosen from those the warm server's session collected), at
    this time: for the report's timings."""
    config.stash[_TIMES]["collected"] = time.time()
    if prepared:
        config.stash[_TIMES]["prepared"] = True


def pytest_collection_modifyitems(session, config, items):
    """Device checks run late and the speedup check last.

    The student process warms up the meta device in the background (its
    first meta op imports torch._dynamo); the other checks run meanwhile,
    and the timing runs once the process is quiet.
    """
    def late(item):
        marker = item.get_closest_marker("points")
        aspect = marker.kwargs.get("aspect") if marker else None
        return (aspect == "speedup", aspect == "device")

    items.sort(key=late)
    course_items(config, items)


def course_items(config, items):
    """Keep in `items` the checks of what the grading's course file hands out (all of them without one), and set
    its parts' worth: the collection's last step for a grading (in a prepared session's fork, run on the checks
    the server collected: autograder/grade/prepared.py)."""
    course = config.stash[_SPEC].course if _SPEC in config.stash else {}
    if course:  # a course file's: only the parts handed out, and the CUDA checks only where they count
        from fractions import Fraction

        kit = {}  # part -> what the kit makes it worth: the sum of its checks' markers, CUDA checks included
        for item in items:
            marker = item.get_closest_marker("points")
            part = Path(str(item.fspath)).stem.removeprefix("test_")
            if marker is not None:
                kit[part] = kit.get(part, Fraction(0)) + Fraction(str(marker.kwargs["points"]))
        config.stash[_SCALE] = {part: Fraction(str(worth)) / kit[part] for part, worth in course["parts"].items()
                                if kit.get(part)}
        keep, drop = [], []
        for item in items:
            part = Path(str(item.fspath)).stem.removeprefix("test_")
            needs_cuda = any("cuda" in str(m.args) for m in item.iter_markers("skipif"))
            (drop if part not in course["parts"] or (needs_cuda and not course["cuda_counts"]) else keep).append(item)
        if drop:
            config.hook.pytest_deselected(items=drop)
            items[:] = keep


@pytest.fixture(scope="session")
def student(request):
    """The student's submission, running in its own process."""
    try:
        return request.config.stash[_SANDBOX]
    except KeyError:
        pytest.fail("the graders run under the kit's engine (autograder/grade/engine.py), which gives the "
                    "grading as --spec")


def _title(item):
    doc = getattr(item.function, "__doc__", None) or item.name
    return " ".join(doc.strip().split("\n\n")[0].split())


def _message(excinfo):
    exc = excinfo.value
    if isinstance(exc, StudentError):
        return str(exc) + (f"\n{exc.traceback}" if exc.traceback else ""), False
    if isinstance(exc, AssertionError):
        return str(exc).strip() or "check failed", False
    if isinstance(exc, pytest.fail.Exception):
        return str(exc), False
    return f"{GRADER_ERROR}: {type(exc).__name__}: {exc}", True


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    marker = item.get_closest_marker("points")
    if marker is None:
        return
    if call.excinfo is not None and isinstance(call.excinfo.value, GraderUnavailable):
        # the grader's failure, not the student's: no check is recorded, and the grading stops here
        item.config.stash[_FAILURE] = str(call.excinfo.value)
        item.session.shouldstop = "the grader cannot run student code"
        return
    if report.when == "call" or (report.when == "setup" and not report.passed):
        result = TestResult(  # the report model's own record (autograder/report/model.py), sent back as its fields
            id=item.nodeid.split("::")[-1],
            name=_title(item),
            module=Path(str(item.fspath)).stem.removeprefix("test_"),
            aspect=marker.kwargs["aspect"],
            points=_points(item, marker.kwargs["points"]),
            status="passed" if report.passed else "skipped" if report.skipped else "failed",
            duration=round(report.duration, 4),
            data={k: v for k, v in report.user_properties},
        )
        from autograder.graders import checks  # here, not at the top: see the module's docstring

        notes = checks.take_notes()
        if report.passed:
            result.message = notes  # e.g. "right given its parts" (autograder/graders/blame.py)
        if report.skipped:
            result.message = call.excinfo.value.msg if call.excinfo else "skipped"
        elif report.failed and call.excinfo is not None:
            result.message, result.grader_error = _message(call.excinfo)
        item.config.stash[_RESULTS].append(asdict(result))


_SCALE = pytest.StashKey[dict]()  # part -> the factor of its checks' points, under a course file


def _points(item, points):
    """A check's points: its marker's, scaled by its part's factor where a course file sets the part's worth
    (worth / the sum of the part's markers: masks = 16 doubles each masks check)."""
    factor = item.config.stash.get(_SCALE, {}).get(Path(str(item.fspath)).stem.removeprefix("test_"))
    if factor is None:
        return points
    from fractions import Fraction

    return float(Fraction(str(points)) * factor)


_EXIT = pytest.StashKey[int]()


def peak_mib() -> float:
    """This process's peak resident memory, in MiB: VmHWM, which starts again at exec (ru_maxrss keeps the
    peak of the process that forked it, e.g. a large batch run); ru_maxrss where /proc has no VmHWM."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return round(int(line.split()[1]) / 1024, 1)
    except (OSError, ValueError, IndexError):
        pass
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def pytest_sessionfinish(session, exitstatus):
    config = session.config
    config.stash[_EXIT] = int(exitstatus)
    sandbox = config.stash.get(_SANDBOX, None)
    times = config.stash[_TIMES]
    extra = {"times": times}
    if sandbox is not None:
        extra.update(student_output=sandbox.output_tail(), restarts=sandbox.restarts, isolation=sandbox.isolation)
        times.update(child_started=sandbox.started_at, child_ready=sandbox.ready_at)
        sandbox.close()
    times["finished"] = time.time()
    # What answers, messages and pictures cost this trusted process: a bound the adversarial corpus checks.
    extra["peak_mib"] = peak_mib()
    spec = config.stash.get(_SPEC, None)
    if spec is not None:
        failure = config.stash.get(_FAILURE, None)
        if failure is not None:
            extra["grader_failure"] = failure
        write_signed(spec.results_file, config.stash.get(_KEY, b""), {"tests": config.stash[_RESULTS], **extra})


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):
    """Under the engine, leave at once: the results are written, and tearing torch down takes ~0.5 s."""
    if _SPEC not in config.stash:
        return
    batchlock.unregister(os.getpid(), "processes")
    if _EXIT in config.stash:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(config.stash[_EXIT])
