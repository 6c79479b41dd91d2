"""The GitHub Classroom workflows (templates/github-classroom/): the student's run and the trusted run.

In the student's run everything is the student's; what the kit can still
guarantee is that nothing of the kit is graded as the student's work: the
kit is moved out of the graded folder before grading, so that files linking
to its notebooks or solutions (`.mha-kit/...`) point at nothing. That is
tested here by running the workflow's own step on a workspace that holds the
attack, then grading the workspace with the real engine.

The trusted run (trusted-grading.yml) lives in the instructor's repository:
its token is seen by the clone step alone, and no secret is in the
environment of the step where student code runs.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest
import yaml

from autograder.grade.engine import grade
from autograder.release import NOTEBOOKS as release_notebooks
from tests.conftest import MODULES, ROOT

TEMPLATES = ROOT / "templates" / "github-classroom"
NOTEBOOKS = sorted(p for p in (ROOT / "assignments" / "mha").glob("0*_*.ipynb")
                   if p.name in release_notebooks.values())  # the parts handed out with no course file


def load(name):
    return yaml.safe_load((TEMPLATES / name).read_text(encoding="utf-8"))


def job_steps(workflow):
    (job,) = workflow["jobs"].values()
    return job["steps"]


def script(step):
    """A step's shell script, with the workflow's ${{ expressions }} replaced by a plain word (for bash -n)."""
    return re.sub(r"\$\{\{.*?\}\}", "EXPR", step["run"])


@pytest.mark.parametrize("name", ["autograding.yml", "trusted-grading.yml"])
def test_every_shell_step_of_the_workflow_is_valid_bash(name):
    for step in job_steps(load(name)):
        if "run" in step:
            proc = subprocess.run(["bash", "-n"], input=script(step), capture_output=True, text=True)
            assert proc.returncode == 0, f"{step['name']}: {proc.stderr}"


def test_the_students_run_moves_the_kit_out_before_grading():
    steps = job_steps(load("autograding.yml"))
    names = [s["name"] for s in steps]
    move = names.index("Move the kit out of the graded folder")
    checkout = next(i for i, s in enumerate(steps) if s.get("with", {}).get("path") == ".mha-kit")
    assert checkout < move < names.index("Grade")
    later = [s["name"] for s in steps[move + 1:] if ".mha-kit" in s.get("run", "")]
    assert not later, f"steps after the move still use the kit inside the graded folder: {later}"
    assert '"$MHA_KIT/grader_cli.py" grade .' in steps[names.index("Grade")]["run"]


@pytest.mark.grading
def test_links_to_the_kit_grade_as_nothing_once_the_kit_is_moved_out(tmp_path):
    """The Classroom attack: relative links 0N_x.ipynb -> .mha-kit/assignments/mha/0N_x.ipynb (the instructor's
    source notebooks, solutions included), no change under .github. After the workflow's move step, they point
    at nothing and earn nothing."""
    workspace, runner_temp = tmp_path / "workspace", tmp_path / "runner-temp"
    (workspace / ".mha-kit" / "assignments" / "mha").mkdir(parents=True)
    runner_temp.mkdir()
    for notebook in NOTEBOOKS:
        shutil.copy(notebook, workspace / ".mha-kit" / "assignments" / "mha" / notebook.name)
        (workspace / notebook.name).symlink_to(f".mha-kit/assignments/mha/{notebook.name}")
    assert len(NOTEBOOKS) == len(MODULES)
    move = next(s for s in job_steps(load("autograding.yml")) if s["name"] == "Move the kit out of the graded folder")
    env = {**os.environ, "RUNNER_TEMP": str(runner_temp), "GITHUB_ENV": str(tmp_path / "github-env")}
    subprocess.run(["bash", "-e", "-c", script(move)], cwd=workspace, env=env, check=True)
    assert not (workspace / ".mha-kit").exists() and (runner_temp / "mha-kit").is_dir()
    assert (tmp_path / "github-env").read_text().strip() == f"MHA_KIT={runner_temp}/mha-kit"

    report = grade(workspace, call_timeout=10.0)
    earned = {m: e for m, (e, _) in report.modules().items()}
    assert not any(earned.values()), f"links to the kit earned points: {earned}"


def test_the_trusted_run_shows_its_token_to_the_clone_step_alone():
    workflow = load("trusted-grading.yml")
    assert workflow["permissions"] == {"contents": "read"}
    steps = job_steps(workflow)
    with_secrets = [s["name"] for s in steps if "secrets." in yaml.safe_dump(s)]
    assert with_secrets == ["Clone the students' repositories (read-only)"]
    clone = steps[[s["name"] for s in steps].index(with_secrets[0])]
    assert "http.extraheader" in clone["run"] and "@github.com" not in clone["run"]  # never in a URL or a config
    assert 'rm -rf "$class/' in clone["run"]  # no .git (and no hooks, no remote) in what is graded
    grade_step = next(s for s in steps if s["name"] == "Grade")
    assert "env" not in grade_step and "grade-all" in grade_step["run"]
    assert steps.index(clone) < steps.index(grade_step)
    checkout = steps[0]
    assert checkout["uses"].startswith("actions/checkout@") and checkout["with"]["persist-credentials"] is False


def test_the_trusted_run_requires_the_namespaces_level_and_never_swallows_its_sysctl():
    """Issue 32: `sysctl ... || true` let a runner that refused it grade at a level the documentation calls weaker."""
    steps = job_steps(load("trusted-grading.yml"))
    allow = next(s for s in steps if "sysctl" in s.get("run", ""))
    assert "|| true" not in allow["run"] and "kernel.apparmor_restrict_unprivileged_userns=0" in allow["run"], \
        f"expected the sysctl to fail the job when refused, got: {allow['run']!r}"
    grade_step = next(s for s in steps if s["name"] == "Grade")
    assert "--require-isolation namespaces" in grade_step["run"], \
        f"expected grade-all to refuse any weaker level, got: {grade_step['run']!r}"
