"""The templates that grade a class in shards on a cluster (issue 17): templates/slurm/, templates/kubernetes/,
templates/github-actions/. Checked without a cluster: every YAML parses and has the keys its engine needs, N
stated twice agrees, every Kubernetes manifest is valid against the real schemas of the Kubernetes versions
it runs on (kubernetes-validate), every script is valid bash, and every call of the kit's command line uses options that the
command defines (read from click's own command objects), so that the templates cannot drift from the CLI.
tests/test_shards_class.py runs what they run (N shard processes, then merge) on this machine.
"""
from __future__ import annotations

import re
import shlex
import subprocess

import kubernetes_validate
import pytest
import yaml

from autograder.cli import cli
from tests.conftest import ROOT

TEMPLATES = ROOT / "templates"
SLURM = sorted((TEMPLATES / "slurm").glob("*"))
YAMLS = sorted((TEMPLATES / "kubernetes").glob("*.yaml")) + sorted((TEMPLATES / "github-actions").glob("*.yml"))


def documents(path):
    return [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d is not None]


def kube(name):
    (doc,) = documents(TEMPLATES / "kubernetes" / name)
    return doc


def container(job):
    (one,) = job["spec"]["template"]["spec"]["containers"]
    return one


def env_of(one):
    return {e["name"]: e["value"] for e in one.get("env", [])}


def workflow():
    return yaml.safe_load((TEMPLATES / "github-actions" / "grade-sharded.yml").read_text(encoding="utf-8"))


def scripts():
    """(where, bash text) of every script of the templates: the Slurm files, the containers' and the steps' own."""
    found = [(p.name, p.read_text(encoding="utf-8")) for p in SLURM]
    for path in sorted((TEMPLATES / "kubernetes").glob("*.yaml")):
        for doc in documents(path):
            if doc["kind"] == "Job":
                one = container(doc)
                assert one["command"][:1] == ["bash"] and one["command"][-1] == "-c", (path.name, one["command"])
                found.append((f"{path.name}: {one['name']}", one["args"][0]))
    for name, job in workflow()["jobs"].items():
        for step in job["steps"]:
            if "run" in step:
                text = re.sub(r"\$\{\{.*?\}\}", "EXPR", step["run"])  # the workflow's expressions: a plain word
                found.append((f"grade-sharded.yml: {name}: {step.get('name', step['run'][:30])}", text))
    return found


def test_every_template_is_there():
    assert [p.name for p in SLURM] == ["grade-shard.sbatch", "merge.sbatch", "submit.sh"]
    assert [p.name for p in YAMLS] == ["grade-job.yaml", "merge-job.yaml", "setup-job.yaml", "volume.yaml",
                                       "grade-sharded.yml"]


@pytest.mark.parametrize("path", YAMLS, ids=lambda p: p.name)
def test_every_yaml_parses(path):
    assert documents(path), f"expected {path.name} to hold YAML documents"


@pytest.mark.parametrize("where, text", scripts(), ids=lambda v: v if isinstance(v, str) and len(v) < 80 else "")
def test_every_script_is_valid_bash(where, text):
    proc = subprocess.run(["bash", "-n"], input=text, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, f"{where}: {proc.stderr}"


def kubernetes_versions():
    """The oldest Kubernetes the templates state (grade-job.yaml's header: backoffLimitPerIndex), and the newest
    that kubernetes-validate carries the schemas of."""
    oldest = re.search(r"# Kubernetes (\d+\.\d+) or later", (TEMPLATES / "kubernetes" / "grade-job.yaml").read_text())
    assert oldest, "grade-job.yaml's header names the oldest Kubernetes it runs on"
    return [f"{oldest[1]}.0", kubernetes_validate.latest_version()]


@pytest.mark.parametrize("path", sorted((TEMPLATES / "kubernetes").glob("*.yaml")), ids=lambda p: p.name)
def test_every_kubernetes_manifest_is_valid_against_the_real_schemas(path):
    """Strict: a field the schema does not know (a misspelt key, one from a newer Kubernetes) fails too."""
    for doc in documents(path):
        for version in kubernetes_versions():
            try:
                kubernetes_validate.validate(doc, version, strict=True)
            except kubernetes_validate.ValidationError as e:
                pytest.fail(f"{path.name}: {doc['kind']} {doc['metadata']['name']} is not valid for Kubernetes "
                            f"{version}: {e.message} (at {'.'.join(map(str, e.path)) or 'the top'})")


def test_the_schema_check_refuses_a_misspelt_field():
    job = kube("grade-job.yaml")
    job["spec"]["backoffLimitPerIndx"] = 3
    with pytest.raises(kubernetes_validate.ValidationError, match="backoffLimitPerIndx"):
        kubernetes_validate.validate(job, kubernetes_versions()[0], strict=True)


def test_the_kubernetes_job_is_indexed_with_n_stated_once_in_effect():
    job = kube("grade-job.yaml")
    spec = job["kind"], job["spec"]
    assert spec[0] == "Job" and spec[1]["completionMode"] == "Indexed"
    n = spec[1]["completions"]
    assert 1 <= spec[1]["parallelism"] <= n, "parallelism: how many shards at once, at most N"
    one = container(job)
    assert env_of(one)["MHA_SHARDS"] == str(n), "MHA_SHARDS must be the Job's completions: N"
    script = one["args"][0]
    assert '--shard "$JOB_COMPLETION_INDEX/$MHA_SHARDS"' in script
    assert '--output "/data/results/shards/$JOB_COMPLETION_INDEX"' in script
    merge = container(kube("merge-job.yaml"))
    assert env_of(merge)["MHA_SHARDS"] == str(n), "the merge must gather the same N shards"
    assert "/data/results/shards/$k" in merge["args"][0]


def test_the_kubernetes_pods_share_one_volume():
    claim = kube("volume.yaml")
    assert claim["kind"] == "PersistentVolumeClaim" and claim["spec"]["accessModes"] == ["ReadWriteMany"]
    for name in ("setup-job.yaml", "grade-job.yaml", "merge-job.yaml"):
        spec = kube(name)["spec"]["template"]["spec"]
        assert spec["restartPolicy"] == "Never"
        (volume,) = spec["volumes"]
        assert volume["persistentVolumeClaim"]["claimName"] == claim["metadata"]["name"], name
        assert container(kube(name))["volumeMounts"] == [{"name": volume["name"], "mountPath": "/data"}], name
    images = {container(kube(n))["image"] for n in ("setup-job.yaml", "grade-job.yaml", "merge-job.yaml")}
    assert len(images) == 1, f"the venv made by the setup Job runs in the same image everywhere: {images}"


def test_the_actions_matrix_is_the_shards_0_to_n_minus_1():
    flow = workflow()
    n = flow["env"]["SHARDS"]
    grade = flow["jobs"]["grade"]
    assert grade["strategy"]["matrix"]["shard"] == list(range(n)), "matrix.shard must be 0 ... SHARDS-1"
    assert grade["strategy"]["fail-fast"] is False
    merge = flow["jobs"]["merge"]
    assert merge["needs"] == "grade" and merge["if"] == "always()"
    uploads = [s for s in grade["steps"] if s.get("uses", "").startswith("actions/upload-artifact")]
    downloads = [s for s in merge["steps"] if s.get("uses", "").startswith("actions/download-artifact")]
    assert uploads[0]["with"]["name"] == "shard-${{ matrix.shard }}" and downloads[0]["with"]["pattern"] == "shard-*"


def test_the_slurm_array_is_the_shards_and_the_merge_waits_for_it():
    submit = (TEMPLATES / "slurm" / "submit.sh").read_text(encoding="utf-8")
    assert 'array="0-$((shards - 1))"' in submit and '--array="$array"' in submit and 'MHA_SHARDS="$shards"' in submit
    assert '--dependency="afterany:$array_job"' in submit
    assert "--gres=gpu:1" in submit and "MHA_GPU" in submit, "a GPU partition by a switch"
    grade = (TEMPLATES / "slurm" / "grade-shard.sbatch").read_text(encoding="utf-8")
    assert 'K="$SLURM_ARRAY_TASK_ID"' in grade and '--shard "$K/$N"' in grade
    assert '--output "$MHA_RESULTS/shards/$K"' in grade
    assert '"$MHA_RESULTS/shards/$k"' in (TEMPLATES / "slurm" / "merge.sbatch").read_text(encoding="utf-8")


def test_every_slurm_job_logs_under_results_appended_across_requeues_and_reruns():
    """One log per shard (RESULTS/logs/shard-K.out, %a: the task's K, the same in a rerun) and one for the
    merges, appended to (--open-mode=append), so that a requeue or a rerun never overwrites the run that graded."""
    submit = (TEMPLATES / "slurm" / "submit.sh").read_text(encoding="utf-8")
    assert '--output="$results/logs/shard-%a.out"' in submit and '--output="$results/logs/merge.out"' in submit
    assert submit.count("--open-mode=append") == 2, "the shards' and the merge's options"
    for name in ("grade-shard.sbatch", "merge.sbatch"):
        assert "#SBATCH --open-mode=append" in (TEMPLATES / "slurm" / name).read_text(encoding="utf-8"), name


def test_no_slurm_template_asks_for_more_than_a_two_cpu_node_has_by_default():
    """The jobs' own defaults (#SBATCH) fit a 2-CPU node; submit.sh sizes them from sinfo (MHA_CPUS, MHA_MEM)."""
    for name in ("grade-shard.sbatch", "merge.sbatch"):
        text = (TEMPLATES / "slurm" / name).read_text(encoding="utf-8")
        cpus = int(re.search(r"^#SBATCH --cpus-per-task=(\d+)$", text, re.M).group(1))
        mem = re.search(r"^#SBATCH --mem=(\d+)G$", text, re.M)
        assert cpus <= 2 and mem and int(mem.group(1)) <= 6, f"{name}: expected at most 2 CPUs and 6G, got " \
            f"{cpus} CPUs and {mem and mem.group(0)}"


def _calls():
    """(template, command, [options]) for every call of grader_cli.py in the templates (continuation lines
    joined)."""
    found = []
    for path in SLURM + YAMLS:
        text = path.read_text(encoding="utf-8").replace("\\\n", " ")
        for line in text.splitlines():
            if line.lstrip().startswith("#"):
                continue
            for match in re.finditer(r"grader_cli\.py\s+([\w-]+)(.*)", line):
                words = shlex.split(re.sub(r"\$\{\{.*?\}\}", "EXPR", match.group(2)), comments=False)
                found.append((path.name, match.group(1), [w.split("=")[0] for w in words if w.startswith("-")]))
    return found


def test_the_templates_call_the_command_line_with_its_own_options():
    calls = _calls()
    commands = {command for _, command, _ in calls}
    assert commands == {"grade-all", "merge", "unfinished"}, commands
    for template, command, options in calls:
        defined = {opt for param in cli.commands[command].params for opt in getattr(param, "opts", [])}
        unknown = sorted(set(options) - defined)
        assert not unknown, f"{template}: `{command}` has no option {unknown} (it has {sorted(defined)})"
        if command == "grade-all":
            assert "--shard" in options and "--output" in options, (template, options)
        elif command == "merge":
            assert "--output" in options, (template, options)
    per_template = {t for t, c, _ in calls if c == "grade-all"} & {t for t, c, _ in calls if c == "merge"}
    assert {t for t, _, _ in calls} == {"grade-shard.sbatch", "merge.sbatch", "submit.sh", "grade-job.yaml",
                                        "merge-job.yaml", "grade-sharded.yml"} and per_template == {"grade-sharded.yml"}
    assert {t for t, c, _ in calls if c == "unfinished"} == {"submit.sh"}, "submit.sh --resume"
