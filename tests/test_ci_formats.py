"""CI formats (JUnit XML, GitHub Classroom) and the GitHub Classroom workflow template.

Reports are built in memory from TestResult objects: no grading, fast.
"""
import base64
import json
import random
import re
import shlex
import subprocess
import sys
import xml.etree.ElementTree as ET
from decimal import ROUND_HALF_UP, Decimal
from fractions import Fraction
from functools import lru_cache

import pytest
import yaml

from autograder.paths import TORCH
from autograder.report.ci import (CLASSROOM_MAX_CHARS, classroom_scores, to_classroom,
                                   to_junit)
from autograder.report.formats import render
from autograder.report.model import GradeReport
from autograder.report.model import TestResult as Result
from tests.conftest import MODULES, ROOT

WORKFLOW = ROOT / "templates" / "github-classroom" / "autograding.yml"
TRICKY = 'expected <0.5> & got "0.6" \'x\' — é ü 日本 ✓\nsecond line: a < b && c > d'


def result(id, module="attention", points=2, status="passed", message="", aspect="values", duration=0.25,
           **kw):
    return Result(id=id, name=f"checks {id}", module=module, aspect=aspect, points=points, status=status,
                      message=message, duration=duration, **kw)


def sample_report():
    """Six checks worth 100 points in three modules: 4 passed, 1 failed, 1 skipped (CUDA).

    attention is worth 60; 50 of them ran here and 20 were earned: 20 / 50 x 60 = 24 (each check of the
    module counts for 60/50 of its points: 24 and 36). heads 20/20, masks 20/20: the total is 64.
    """
    return GradeReport(submission="sub", execution_time=3.5, tests=[
        result("test_shape", points=20),
        result("test_values", points=30, status="failed", message=TRICKY),
        result("test_cuda", points=10, status="skipped", message="CUDA is not available", aspect="device"),
        result("test_split", module="heads", points=20),
        result("test_causal", module="masks", points=12, duration=1.5),
        result("test_dtype", module="masks", points=8),
    ])


# -- JUnit ----------------------------------------------------------------------
def parse_junit(report):
    text = to_junit(report)
    assert text.startswith('<?xml version="1.0" encoding="UTF-8"?>')
    return ET.fromstring(text.encode("utf-8"))


def test_junit_has_one_suite_per_module_with_counts():
    root = parse_junit(sample_report())
    assert root.tag == "testsuites"
    assert (root.get("tests"), root.get("failures"), root.get("skipped"), root.get("errors")) == ("6", "1", "1", "0")
    suites = {s.get("name"): s for s in root.findall("testsuite")}
    assert list(suites) == ["attention", "heads", "masks"]
    att = suites["attention"]
    assert (att.get("tests"), att.get("failures"), att.get("skipped")) == ("3", "1", "1")
    assert float(suites["masks"].get("time")) == pytest.approx(1.75)
    cases = att.findall("testcase")
    assert [c.get("name") for c in cases] == ["test_shape", "test_values", "test_cuda"]
    assert {c.get("classname") for c in cases} == {"mha.attention"}
    assert cases[0].find("failure") is None and cases[0].find("skipped") is None
    assert cases[2].find("skipped").get("message") == "CUDA is not available"
    assert len(root.findall(".//failure")) == 1


def test_junit_failure_keeps_the_message_and_special_characters():
    failure = parse_junit(sample_report()).find(".//testcase[@name='test_values']/failure")
    assert failure.get("message") == TRICKY.splitlines()[0]
    assert failure.text == TRICKY
    assert failure.get("type") == "check-failed"


def test_junit_replaces_characters_xml_cannot_carry():
    report = GradeReport(submission="s", tests=[result("test_x", status="failed", message="bad\x1b[31m\x00 end")])
    failure = parse_junit(report).find(".//failure")
    assert failure.text == "bad\\x1b[31m\\x00 end"


def test_junit_carries_points_and_total_score():
    report = sample_report()
    root = parse_junit(report)
    assert root.get("score") == "64" and root.get("max_score") == "100" and report.score == 64
    att = root.find("testsuite[@name='attention']")
    assert (att.get("points"), att.get("max_points")) == ("24", "60")  # the checks that ran count for the CUDA one
    props = {p.get("name"): p.get("value") for p in att.find("properties")}
    assert props == {"score": "24", "max_score": "60", "total_score": "64", "total_max_score": "100",
                     "not_graded": "10 CUDA points not graded on this machine; they count as the other checks of "
                                   "their module"}
    case_props = {p.get("name"): p.get("value")
                  for p in root.find(".//testcase[@name='test_shape']/properties")}
    assert (case_props["points"], case_props["score"], case_props["description"]) == ("24", "24", "checks test_shape")
    failed = {p.get("name"): p.get("value") for p in root.find(".//testcase[@name='test_values']/properties")}
    assert (failed["points"], failed["score"]) == ("36", "0")


def test_junit_reports_an_unfinished_grading_as_an_error():
    report = sample_report()
    report.status, report.error = "timeout", "grading did not finish within 600 s\nmore"
    root = parse_junit(report)
    assert root.get("errors") == "1" and root.get("tests") == "7"
    error = root.find("testsuite[@name='grading']/testcase/error")
    assert error.get("message") == "grading did not finish within 600 s" and error.text.endswith("more")


def test_junit_marks_grader_errors():
    report = GradeReport(submission="s", tests=[result("t", status="failed", message="internal", grader_error=True)])
    assert parse_junit(report).find(".//failure").get("type") == "grader-error"


# -- GitHub Classroom -----------------------------------------------------------
def decode(report):
    encoded = to_classroom(report)
    assert re.fullmatch(r"[A-Za-z0-9+/]+={0,2}", encoded), "one line of base64, nothing else"
    return json.loads(base64.b64decode(encoded).decode("utf-8"))


def test_classroom_result_has_the_reporters_fields():
    report = sample_report()
    data = decode(report)
    assert data["version"] == 1 and data["max_score"] == 100 and data["status"] == "fail"
    names = [t["name"] for t in data["tests"]]
    assert len(names) == 5 and not any("test_cuda" in n or "CUDA" in n for n in names)  # skipped: left out
    for t in data["tests"]:
        assert set(t) == {"name", "status", "score", "message", "test_code", "filename", "line_no", "duration"}
        assert t["status"] in ("pass", "fail") and isinstance(t["score"], int) and isinstance(t["duration"], int)
        assert (t["test_code"], t["filename"], t["line_no"]) == ("", "", 0)
    failed = [t for t in data["tests"] if t["status"] == "fail"]
    assert len(failed) == 1 and failed[0]["score"] == 0 and failed[0]["message"] == TRICKY
    assert data["tests"][0]["duration"] == 250
    assert report.score == 64 and sum(t["score"] for t in data["tests"]) == 64
    assert [t["score"] for t in data["tests"]] == [24, 0, 20, 12, 8]


def test_classroom_all_passed_is_pass_and_scaled_to_100():
    report = sample_report()
    report.tests[1].status = "passed"
    data = decode(report)
    assert data["status"] == "pass"
    assert report.score == 100 and sum(t["score"] for t in data["tests"]) == 100


def random_report(seed):
    rng = random.Random(seed)
    tests = [result(f"t{i}", module=rng.choice(["attention", "heads", "mha"]), points=rng.choice([1, 1.5, 2, 3, 4, 7]),
                    status=rng.choice(["passed", "passed", "failed", "skipped"])) for i in range(rng.randint(1, 60))]
    return GradeReport(submission="s", tests=tests)


@pytest.mark.parametrize("seed", range(40))
def test_classroom_scores_add_up_to_the_report_score_rounded_half_up(seed):
    report = random_report(seed)
    tests = report.tests
    scores = classroom_scores(report)
    graded = [t for t in tests if t.status != "skipped"]
    assert len(scores) == len(graded)
    total = Decimal(str(report.score))
    assert sum(scores) == int(total.quantize(Decimal(1), ROUND_HALF_UP))
    for t, s in zip(graded, scores):
        if t.status == "failed":
            assert s == 0
        else:  # each passed check gets its own figure, rounded down or up
            figure = report.check_figures(t)[0]
            assert int(figure) <= s <= int(figure) + 1
    assert sum(t["score"] for t in decode(report)["tests"] if t["name"] != "grading") == sum(scores)


@pytest.mark.parametrize("seed", range(40))
def test_figures_add_up_exactly_checks_to_modules_to_the_total(seed):
    """The rule of autograder.scoring on random gradings: module maxima from all points (CUDA included), each
    module's figure earned / available x maximum rounded half up once, checks apportioned to their module,
    and the total the sum of the modules, to the cent."""
    report = random_report(seed)
    fig = report.figures()
    graded = {m: f for m, f in fig.modules.items() if f.graded}
    if graded:
        assert sum(f.max_score for f in graded.values()) == 100
    assert fig.total == sum((f.score for f in graded.values()), Decimal(0))
    for m, f in graded.items():
        tests = [(t, c) for t, c in zip(report.tests, fig.checks) if t.module == m]
        assert sum(c[0] for _, c in tests) == f.score and sum(c[1] for _, c in tests) == f.max_score
        nominal = sum(Fraction(str(t.points)) for t, _ in tests)
        ran = sum(Fraction(str(t.points)) for t, _ in tests if t.status != "skipped")
        earned = sum(Fraction(str(t.points)) for t, _ in tests if t.status == "passed")
        whole = sum(Fraction(str(t.points)) for t in report.tests if fig.modules[t.module].graded)
        exact = earned / ran * Fraction(str(f.max_score))
        assert abs(Fraction(str(f.score)) - exact) <= Fraction(1, 200), (m, f, exact)
        if whole == 100:
            assert Fraction(str(f.max_score)) == nominal
        for t, (score, max_score) in tests:
            assert score == (max_score if t.status == "passed" else 0) and score.as_tuple().exponent >= -2
            assert (max_score == 0) == (t.status == "skipped")
    for m, f in fig.modules.items():
        if not f.graded:
            assert all(c == (0, 0) for t, c in zip(report.tests, fig.checks) if t.module == m)


def test_classroom_nothing_to_grade_is_a_fail_with_the_reason():
    report = GradeReport(submission="s", status="empty", error="no student work found: no module found")
    data = decode(report)
    assert data["status"] == "fail" and [t["score"] for t in data["tests"]] == [0]
    assert data["tests"][-1]["message"] == "nothing to grade: no student work found: no module found"


def test_classroom_unfinished_grading_is_an_error():
    report = sample_report()
    report.status, report.error = "error", "the graders did not run:\nTraceback..."
    data = decode(report)
    assert data["status"] == "error"
    last = data["tests"][-1]
    assert last["status"] == "error" and "the graders did not run" in last["message"]
    assert decode(GradeReport(submission="s"))["status"] == "error"  # nothing graded at all


def test_classroom_result_stays_small_enough_for_an_environment_variable():
    long = "x" * 50_000 + "\n" + "y" * 5000
    report = GradeReport(submission="s", tests=[result(f"t{i}", status="failed", message=long) for i in range(80)])
    encoded = to_classroom(report)
    assert len(encoded) <= CLASSROOM_MAX_CHARS
    data = json.loads(base64.b64decode(encoded))
    assert len(data["tests"]) == 80 and all(t["message"].startswith("x") for t in data["tests"])


def test_report_from_json_renders_the_same():
    report = sample_report()
    report.tests[0].data = {"heatmap": {"yours": [[0.5, 0.5]], "expected": [[0.4, 0.6]]}}
    again = GradeReport.from_dict(json.loads(json.dumps(report.to_dict())))
    assert again.score == report.score and again.tests[0].data == report.tests[0].data
    assert to_classroom(again) == to_classroom(report)
    assert re.sub(r'time="[^"]*"', "", to_junit(again)) == re.sub(r'time="[^"]*"', "", to_junit(report))


# -- the workflow template --------------------------------------------------------
@pytest.fixture(scope="module")
def workflow():
    return yaml.safe_load(WORKFLOW.read_text())


def steps(workflow):
    return workflow["jobs"]["run-autograding-tests"]["steps"]


def test_workflow_is_what_github_classroom_reads(workflow):
    assert workflow["name"] == "Autograding Tests"  # the reporter only records points for this name
    assert list(workflow["jobs"]) == ["run-autograding-tests"]
    assert "push" in workflow["on"]
    assert workflow["permissions"] == {"checks": "write", "actions": "read", "contents": "read"}
    job = workflow["jobs"]["run-autograding-tests"]
    assert 0 < job["timeout-minutes"] <= 30


def test_workflow_reports_the_grade_steps_result(workflow):
    all_steps = steps(workflow)
    reporter = all_steps[-1]
    assert reporter["uses"].startswith("classroom-resources/autograding-grading-reporter@")
    runners = reporter["with"]["runners"].split(",")
    by_id = {s.get("id"): s for s in all_steps}
    for runner in runners:
        assert runner in by_id, f"runner {runner} is no step id"
        assert reporter["env"][f"{runner.upper()}_RESULTS"] == f"${{{{ steps.{runner}.outputs.result }}}}"
        assert 'echo "result=' in by_id[runner]["run"] and "$GITHUB_OUTPUT" in by_id[runner]["run"]
    assert "$GITHUB_STEP_SUMMARY" in by_id["grade"]["run"]


def test_workflow_fetches_the_graders_from_the_private_kit(workflow):
    checkouts = [s for s in steps(workflow) if s.get("uses", "").startswith("actions/checkout@")]
    assert len(checkouts) == 2
    kit = checkouts[1]["with"]
    assert kit["repository"] == "${{ vars.MHA_KIT_REPO }}" and kit["token"] == "${{ secrets.MHA_KIT_TOKEN }}"
    assert kit["path"] == ".mha-kit"
    assert all(c.get("with", {}).get("persist-credentials") is False for c in checkouts)
    setup = next(s for s in steps(workflow) if s.get("uses", "").startswith("actions/setup-python@"))
    assert setup["with"]["python-version"] == "3.11" and setup["with"]["cache"] == "pip"
    scripts = "\n".join(s.get("run", "") for s in steps(workflow))
    assert workflow["env"]["TORCH"] == TORCH and '"$TORCH"' in scripts
    assert '-r "$MHA_KIT/requirements.txt" -c "$MHA_KIT/requirements.lock"' in scripts and 'mv .mha-kit "$RUNNER_TEMP/mha-kit"' in scripts
    upload = next(s for s in steps(workflow) if s.get("uses", "").startswith("actions/upload-artifact@"))
    assert "junit.xml" in upload["with"]["path"] and upload.get("if") == "always()"


def grader_commands(workflow):
    """Every `grader_cli.py` command the workflow runs, as argument lists after grader_cli.py."""
    commands = []
    for step in steps(workflow):
        script = step.get("run", "").replace("\\\n", " ")
        for line in script.splitlines():
            if "grader_cli.py" in line and not line.lstrip().startswith("#"):
                words = shlex.split(line, comments=True)
                at = next(i for i, w in enumerate(words) if w.endswith("grader_cli.py"))
                commands.append(words[at + 1:])
    return commands


@lru_cache(maxsize=None)
def cli_help(subcommand):
    out = subprocess.run([sys.executable, "grader_cli.py", subcommand, "--help"], cwd=ROOT,
                         capture_output=True, text=True)
    assert out.returncode == 0, f"grader_cli.py has no subcommand {subcommand!r}:\n{out.stderr}"
    return out.stdout


def test_workflow_calls_only_subcommands_and_options_that_exist(workflow):
    commands = grader_commands(workflow)
    assert len(commands) >= 3 and {c[0] for c in commands} >= {"grade"}
    formats = set()
    for words in commands:
        help_text = cli_help(words[0])
        for i, word in enumerate(words[1:], 1):
            if word.startswith("-"):
                option = word.split("=", 1)[0]
                assert re.search(rf"(^|[\s,]){re.escape(option)}\b", help_text), \
                    f"grader_cli.py {words[0]} has no option {option}"
            if word == "--format":
                formats.add(words[i + 1])
                assert re.search(rf"[\[|]{re.escape(words[i + 1])}[|\]]", help_text), \
                    f"grader_cli.py {words[0]} --format has no choice {words[i + 1]!r}"
    assert {"classroom", "junit"} <= formats


# -- one set of numbers in every format ----------------------------------------------------------------------
GRADER_LAYOUT = {  # points of each check per module, as the kit's graders mark them; the last is the CUDA check
    "attention": [3, 3, 2, 2, 2, 2, 2, 2, 2, 2, 1],
    "heads": [3, 3, 2, 2, 2, 2, 1],
    "masks": [3, 2, 2, 1],
    "mha": [4, 4, 3, 3, 3, 3, 3, 3, 3, 3, 2, 2, 2, 1, 1],
    "positional": [3, 2, 2, 2, 2, 2, 1],
}
BUGGY_FAILS = {"attention": {0, 4, 5}, "heads": set(), "masks": {0}, "mha": {0, 6, 12}, "positional": {1, 2, 3}}


def buggy_like_report():
    """The kit's module maxima (23/15/8/40/14), one CUDA check skipped in each module, failures that make
    fractional figures (9.41-like): the situation of issue 14's buggy student on a machine with no GPU."""
    tests = []
    for module, points in GRADER_LAYOUT.items():
        for i, p in enumerate(points):
            cuda = i == len(points) - 1
            status = "skipped" if cuda else "failed" if i in BUGGY_FAILS[module] else "passed"
            tests.append(result(f"test_{module}_{i}", module=module, points=p, status=status,
                                message="needs CUDA (none on this machine)" if cuda else
                                "wrong" if status == "failed" else ""))
    return GradeReport(submission="buggy", execution_time=2.0, isolation="namespaces", tests=tests)


def figures_in_every_format(report):
    """{format: (total, {module: (figure, maximum)})} as each format writes them, read back as Decimals."""
    import csv
    import io

    from autograder.classrun import gradebook

    D = (lambda x: Decimal(str(x)))
    out = {}
    text = render(report, "text")
    mods = {m: (D(a), D(b)) for m, a, b in re.findall(r"^  (\w+)\s+([\d.]+) / ([\d.]+)", text, re.M)}
    out["text"] = (D(re.search(r"^Total: ([\d.]+)/100", text, re.M).group(1)), mods)
    data = json.loads(render(report, "json"))
    out["json"] = (D(data["score"]), {m: (D(v["score"]), D(v["max_score"])) for m, v in data["modules"].items()})
    assert sum(D(t["score"]) for t in data["tests"]) == D(data["score"]), "json: checks do not add up"
    gs = json.loads(render(report, "gradescope"))
    by_tag = {}
    for t in gs["tests"]:
        earned, top = by_tag.get(t["tags"][0], (Decimal(0), Decimal(0)))
        by_tag[t["tags"][0]] = (earned + D(t["score"]), top + D(t["max_score"]))
    assert sum(e for e, _ in by_tag.values()) == D(gs["score"]), "gradescope: tests do not add up to the score"
    out["gradescope"] = (D(gs["score"]), by_tag)
    root = ET.fromstring(render(report, "junit").encode())
    suites = {s.get("name"): (D(s.get("points")), D(s.get("max_points"))) for s in root.findall("testsuite")}
    for s in root.findall("testsuite"):
        cases = [{p.get("name"): p.get("value") for p in c.find("properties")} for c in s.findall("testcase")]
        assert sum(D(c["score"]) for c in cases) == D(s.get("points")), f"junit: {s.get('name')} does not add up"
    out["junit"] = (D(root.get("score")), suites)
    md = render(report, "markdown")
    out["markdown"] = (D(re.search(r"Total: ([\d.]+)/100", md).group(1)),
                       {m: (D(a), D(b)) for m, a, b in re.findall(r"^\| (\w+) \| ([\d.]+) / ([\d.]+) \|$", md, re.M)})
    page = render(report, "html")
    out["html"] = (D(re.search(r"Total: ([\d.]+)/100", page).group(1)),
                   {m: (D(a), D(b))
                    for m, a, b in re.findall(r"<td>(\w+)</td><td[^>]*>([\d.]+) / ([\d.]+)</td>", page)})
    buf = io.StringIO()
    csv.DictWriter(buf, fieldnames=gradebook.COLUMNS).writerow(gradebook.row_from_report(report).as_csv())
    row = next(csv.DictReader(io.StringIO(buf.getvalue()), fieldnames=gradebook.COLUMNS))
    maxima = out["json"][1]
    out["gradebook"] = (D(row["total"]), {m: (D(row[m]), maxima[m][1]) for m in MODULES})
    return out


def test_the_same_figures_in_every_format():
    """Issue 14: module figures on their promised maxima (23/15/8/40/14, CUDA points included), the total the
    sum of the rounded module figures, the same in the text report, JSON, Gradescope, JUnit, the feedback,
    the gradebook; GitHub Classroom gets the total rounded half up to a whole point."""
    report = buggy_like_report()
    seen = figures_in_every_format(report)
    expected = seen["json"]
    assert {m: top for m, (_, top) in expected[1].items()} == {
        "attention": 23, "heads": 15, "masks": 8, "mha": 40, "positional": 14}
    assert expected[0] == sum(figure for figure, _ in expected[1].values())
    assert expected[1]["heads"] == (15, 15), "a module whose every check that ran passed has full marks"
    assert expected[0] != int(expected[0]), "expected a fractional total, else this test proves little"
    for fmt_name, figures in seen.items():
        assert figures == expected, f"{fmt_name} says {figures}, json says {expected}"
    classroom = json.loads(base64.b64decode(to_classroom(report)))
    assert sum(t["score"] for t in classroom["tests"]) == int(expected[0].quantize(Decimal(1), ROUND_HALF_UP))
    note = "5 CUDA points not graded on this machine; they count as the other checks of their module"
    for fmt_name in ("text", "markdown", "html", "gradescope"):
        assert note in render(report, fmt_name), f"{fmt_name} does not state the points not graded"
    assert json.loads(render(report, "json"))["not_graded"]["points"] == 5


def test_nothing_to_grade_says_so_in_every_format_without_contradiction():
    """An upload with nothing to grade (here a zip that cannot be read): 0, "empty", and the reason; no
    module table of 0/0, never "Every check passed"."""
    report = GradeReport(submission="erin.zip", status="empty",
                         error="no student work found: cannot read the zip erin.zip: File is not a zip file")
    text = render(report, "text")
    assert "NOTHING TO GRADE: no student work found" in text and "Total: 0/100 (nothing to grade" in text
    assert " / 0" not in text and "passed" not in text.lower()
    data = json.loads(render(report, "json"))
    assert (data["status"], data["score"]) == ("empty", 0)
    gs = json.loads(render(report, "gradescope"))
    assert gs["score"] == 0 and gs["output"].startswith("Nothing to grade: no student work found: cannot read")
    assert gs["extra_data"] == {"status": "empty"} and "Autograder failure" not in gs["output"]
    root = ET.fromstring(render(report, "junit").encode())
    assert root.get("score") == "0" and root.get("status") == "empty"
    assert root.find("testsuite[@name='grading']/testcase/failure").get("type") == "empty"


def test_nothing_to_grade_feedback_does_not_contradict_itself():
    report = GradeReport(submission="erin.zip", status="empty",
                         error="no student work found: cannot read the zip erin.zip: File is not a zip file")
    for fmt_name in ("markdown", "html"):
        page = render(report, fmt_name)
        assert "Every check passed" not in page and "0 / 0" not in page, fmt_name


def test_a_grading_that_did_not_complete_has_no_score_in_any_format():
    report = GradeReport(submission="s", status="error", grader_failure=True, error="the student process cannot start")
    assert json.loads(render(report, "json"))["score"] is None
    assert "no score" in render(report, "text") and "0/100" not in render(report, "text")
    gs = json.loads(render(report, "gradescope"))
    assert gs["output"].startswith("Autograder failure, not a grade: the student process cannot start")
    assert "not a problem with the submission" in gs["output"] and gs["extra_data"] == {"status": "error"}
    assert parse_junit(report).get("score") is None
    assert decode(report)["status"] == "error"
