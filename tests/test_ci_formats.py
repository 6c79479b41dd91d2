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
from fractions import Fraction
from functools import lru_cache

import pytest
import yaml

from autograder.ci_formats import (CLASSROOM_MAX_CHARS, classroom_scores, report_from_dict, to_classroom,
                                   to_junit)
from autograder.results import GradeReport
from autograder.results import TestResult as Result
from tests.conftest import ROOT

WORKFLOW = ROOT / "templates" / "github-classroom" / "autograding.yml"
TRICKY = 'expected <0.5> & got "0.6" \'x\' — é ü 日本 ✓\nsecond line: a < b && c > d'


def result(id, module="attention", points=2, status="passed", message="", aspect="values", duration=0.25,
           **kw):
    return Result(id=id, name=f"checks {id}", module=module, aspect=aspect, points=points, status=status,
                      message=message, duration=duration, **kw)


def sample_report():
    """Six checks in three modules: 4 passed, 1 failed, 1 skipped (CUDA): 11 of 14 points here."""
    return GradeReport(submission="sub", execution_time=3.5, tests=[
        result("test_shape", points=2),
        result("test_values", points=3, status="failed", message=TRICKY),
        result("test_cuda", points=5, status="skipped", message="CUDA is not available", aspect="device"),
        result("test_split", module="heads", points=4),
        result("test_causal", module="masks", points=3, duration=1.5),
        result("test_dtype", module="masks", points=2),
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
    assert root.get("score") == f"{report.score:g}" and root.get("max_score") == "100"
    att = root.find("testsuite[@name='attention']")
    assert (att.get("points"), att.get("max_points")) == ("2", "5")  # the CUDA check counts in neither
    props = {p.get("name"): p.get("value") for p in att.find("properties")}
    assert props == {"score": "2", "max_score": "5", "total_score": f"{report.score:g}", "total_max_score": "100"}
    case_props = {p.get("name"): p.get("value")
                  for p in root.find(".//testcase[@name='test_split']/properties")}
    assert (case_props["points"], case_props["score"], case_props["description"]) == ("4", "4", "checks test_split")


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
    # 11 of 14 available points: 78.57 out of 100, recorded as 79 whole points
    assert report.score == 78.57
    assert sum(t["score"] for t in data["tests"]) == 79


def test_classroom_all_passed_is_pass_and_scaled_to_100():
    report = sample_report()
    report.tests[1].status = "passed"
    data = decode(report)
    assert data["status"] == "pass"
    assert report.score == 100 and sum(t["score"] for t in data["tests"]) == 100


@pytest.mark.parametrize("seed", range(40))
def test_classroom_scores_add_up_to_the_report_score(seed):
    rng = random.Random(seed)
    tests = [result(f"t{i}", module=rng.choice(["attention", "mha"]), points=rng.choice([1, 1.5, 2, 3, 4, 7]),
                    status=rng.choice(["passed", "passed", "failed", "skipped"])) for i in range(rng.randint(1, 60))]
    report = GradeReport(submission="s", tests=tests)
    scores = classroom_scores(report)
    graded = [t for t in tests if t.status != "skipped"]
    assert len(scores) == len(graded)
    assert abs(sum(scores) - report.score) <= 0.5 + 1e-9
    if report.available:
        exact = Fraction(100) * sum(Fraction(str(t.points)) for t in graded if t.status == "passed") \
            / sum(Fraction(str(t.points)) for t in graded)
        assert sum(scores) == int(exact + Fraction(1, 2))
    for t, s in zip(graded, scores):
        if t.status == "failed":
            assert s == 0
        else:  # each passed check gets its share, rounded down or up
            share = 100 * t.points / report.available
            assert int(share) <= s <= int(share) + 1
    assert sum(t["score"] for t in decode(report)["tests"] if t["name"] != "grading") == sum(scores)


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
    again = report_from_dict(json.loads(json.dumps(report.to_dict())))
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
    assert "torch==2.13.0" in workflow["env"]["TORCH"] and '"$TORCH"' in scripts
    assert "-r .mha-kit/requirements.txt" in scripts
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
