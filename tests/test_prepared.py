"""The warm grader server's prepared pytest session (autograder/grade/prepared.py): configured and collected once,
each grading forked from it gives the report a fresh session gives.

A grading with a `-k` selection does not fit the prepared session and runs pytest afresh in its fork, so one
server grades the same submission both ways. The report says which way it went (its timings)."""
import pytest

from autograder import MODULES
from autograder.grade.engine import grade, grader_args
from autograder.grade.prepared import Prepared, split
from tests.conftest import SOLUTIONS
from tests.corpus import course_of, load_corpus, materialize

CORPUS = {case.id: case for kind in load_corpus().values() for case in kind}
PREPARED = "grader fork start (session prepared by the server)"
FRESH = "grader process start (python, pytest)"
EVERY_CHECK = "test_"  # a -k expression every grader test matches: the fresh session's way, the same checks


def checks(report):
    """What a grading decided, check by check (the speed checks' messages hold measured times: their outcome)."""
    return [(t.module, t.id, t.status, t.points, t.message if t.aspect != "speedup" else "")
            for t in report.tests]


@pytest.mark.grading
@pytest.mark.parametrize("case", ["reference", "attention-mask-inverted", "mha-os-exit-in-forward",
                                  "heads-import-error"])
def test_a_grading_in_the_prepared_session_reports_what_a_fresh_session_does(case, tmp_path, warm_servers):
    if warm_servers is None:
        pytest.skip("no warm servers here (the suite's warm_servers fixture grades cold)")
    folder = (tmp_path / "reference" if case == "reference" else
              materialize(CORPUS[case], tmp_path / case, SOLUTIONS))
    if case == "reference":
        folder.mkdir()
        for path in SOLUTIONS.glob("*.py"):
            (folder / path.name).write_text(path.read_text())
    prepared = grade(folder, servers=warm_servers, call_timeout=5.0)
    fresh = grade(folder, servers=warm_servers, call_timeout=5.0, select=EVERY_CHECK)
    assert PREPARED in prepared.timings, f"expected a grading in the prepared session, got {prepared.timings}"
    assert FRESH in fresh.timings, f"expected a fresh session for a -k selection, got {fresh.timings}"
    assert (prepared.status, prepared.score) == (fresh.status, fresh.score)
    assert checks(prepared) == checks(fresh)


@pytest.mark.grading
def test_a_course_file_keeps_its_parts_checks_alone_in_the_prepared_session(tmp_path, warm_servers):
    """kvcache, an optional part, beside the five: the prepared session collected every part's graders, and a
    grading under a course file runs those of the parts it hands out, each at its worth, as a fresh one does."""
    if warm_servers is None:
        pytest.skip("no warm servers here (the suite's warm_servers fixture grades cold)")
    from autograder.course import parse

    case = next(c for c in CORPUS.values() if course_of(c) is not None)
    folder = materialize(case, tmp_path / case.id, SOLUTIONS)
    worths = {part: worth * (2 if part == "masks" else 1) for part, worth in course_of(case).parts.items()}
    course = parse(("[parts]\n" + "".join(f"{part} = {worth:g}\n" for part, worth in worths.items())
                    + "[cuda]\ncounts = false\n").encode(), "course.toml")  # masks doubled, no CUDA checks
    prepared = grade(folder, servers=warm_servers, call_timeout=5.0, course=course)
    fresh = grade(folder, servers=warm_servers, call_timeout=5.0, course=course, select=EVERY_CHECK)
    assert PREPARED in prepared.timings and FRESH in fresh.timings
    assert checks(prepared) == checks(fresh)
    assert not any("cuda" in t.id for t in prepared.tests), [t.id for t in prepared.tests]
    without = grade(folder, servers=warm_servers, call_timeout=5.0)  # no course file: the five parts alone
    assert PREPARED in without.timings
    assert prepared.modules()["masks"][1] == 2 * without.modules()["masks"][1]
    optional = set(course.parts) - set(MODULES)  # (kvcache)
    assert optional and optional <= {t.module for t in prepared.tests}, "expected the course's optional part checked"
    assert not optional & {t.module for t in without.tests}, "expected no optional part checked without a course"


def test_a_grading_fits_the_prepared_session_only_with_its_options_and_parts():
    """Only the spec, the key and fewer parts may differ; a -k selection, another option or a grader file the
    session did not collect runs pytest afresh."""
    every = grader_args(["/p/a/test_a.py", "/p/b/test_b.py"])
    session = Prepared(every, serve=None)
    spec = '{"submission": "x"}'
    assert session.fits(grader_args(["/p/a/test_a.py", "/p/b/test_b.py"], spec))
    assert session.fits(grader_args(["/p/b/test_b.py"], spec))
    assert session.fits([*grader_args(["/p/a/test_a.py"], spec), "--key-fd", "7"])
    assert not session.fits(grader_args(["/p/a/test_a.py"], spec, select="attention"))
    assert not session.fits(grader_args(["/p/c/test_c.py"], spec))
    assert not session.fits(grader_args(["/p/a/test_a.py"]))  # no spec: no grading
    assert not session.fits([*grader_args(["/p/a/test_a.py"], spec), "-x"])
    files, rest, got = split([*grader_args(["/p/a/test_a.py"], spec), "--key-fd", "7"])
    assert (files, got) == (["/p/a/test_a.py"], spec) and "--spec" not in rest and "--key-fd" not in rest
