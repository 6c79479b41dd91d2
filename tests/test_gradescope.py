"""The Gradescope autograder zip: its contents, and its real scripts run as Gradescope runs them.

run_autograder runs on a temporary folder laid out as Gradescope's /autograder
(source/ = the unzipped zip, submission/, results/), with AUTOGRADER_ROOT
pointing at it and PYTHON at this interpreter. setup.sh's installs are not
run: it runs against stand-in python3/apt-get commands that only log their calls.
"""
import json
import os
import shutil
import stat
import subprocess
import sys
import textwrap
import zipfile
from decimal import Decimal

import pytest

from autograder.integrations.gradescope import build_zip
from autograder.paths import TORCH
from tests.conftest import MODULES, ROOT, SOLUTIONS

SCRIPTS = ("setup.sh", "run_autograder")


@pytest.fixture(scope="module")
def autograder_zip(tmp_path_factory):
    path = tmp_path_factory.mktemp("zip") / "autograder.zip"
    return path, build_zip(path)


def unzip(archive, dest):
    """Unpack as `unzip` does, each file with the Unix mode stored in the zip."""
    with zipfile.ZipFile(archive) as zf:
        for info in zf.infolist():
            target = dest / info.filename
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(zf.read(info))
            target.chmod((info.external_attr >> 16) & 0o777)


@pytest.fixture()
def gradescope(tmp_path, autograder_zip):
    """A folder laid out as /autograder: source/ holds the unzipped autograder, submission/ is empty."""
    unzip(autograder_zip[0], tmp_path / "source")
    (tmp_path / "submission").mkdir()
    return tmp_path


def submit_reference(root, **edits):
    """Copy the reference solution's five modules into submission/, with str.replace edits per module."""
    for module in MODULES:
        text = (SOLUTIONS / f"{module}.py").read_text()
        for old, new in edits.get(module, []):
            assert old in text, f"{old!r} is not in solutions/{module}.py"
            text = text.replace(old, new)
        (root / "submission" / f"{module}.py").write_text(text)


def run_autograder(root, python=sys.executable, exit_status=0, **env_extra):
    """Run source/run_autograder as Gradescope does (cwd /autograder); return results.json and the log.

    A relative `python` is relative to /autograder, where Gradescope starts the script."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # only the unzipped kit may be imported
    env.update(AUTOGRADER_ROOT=str(root), PYTHON=str(python), **env_extra)
    proc = subprocess.run([str(root / "source" / "run_autograder")], cwd=root, env=env,
                          capture_output=True, text=True, timeout=600)
    log = proc.stdout + proc.stderr
    assert proc.returncode == exit_status, log
    results = root / "results" / "results.json"
    assert results.is_file(), log
    return json.loads(results.read_text()), log


def check_results_format(data):
    assert isinstance(data["score"], (int, float))
    assert isinstance(data["execution_time"], (int, float))
    assert "max_score" not in data  # not part of Gradescope's top level
    for test in data["tests"]:
        assert {"name", "score", "max_score", "status", "output", "tags", "visibility"} <= set(test), test
        assert test["status"] in ("passed", "failed")
        assert test["visibility"] in ("hidden", "after_due_date", "after_published", "visible")


# -- the zip ------------------------------------------------------------------

def test_zip_holds_the_scripts_and_the_kit_files_only(autograder_zip):
    path, names = autograder_zip
    with zipfile.ZipFile(path) as zf:
        infos = zf.infolist()
    assert [i.filename for i in infos] == names
    assert len(set(names)) == len(names)
    assert {n.split("/")[0] for n in names} == {*SCRIPTS, "grader_cli.py", "requirements.txt", "requirements.lock",
                                                "autograder", "parts", "solutions"}
    for name in names:
        parts = name.split("/")
        assert "__pycache__" not in parts and not name.endswith(".pyc"), name
        assert parts[0] not in ("tests", "student_template", "examples", "assignments", ".venv"), name
    kit_sources = {p.relative_to(ROOT).as_posix() for p in (ROOT / "autograder").rglob("*.py")
                   if "__pycache__" not in p.parts}
    assert kit_sources | {"autograder/graders/pytest.ini"} <= set(names)
    assert {f"solutions/{m}.py" for m in MODULES} <= set(names)
    assert {f"parts/{m}/test_{m}.py" for m in MODULES} | {f"parts/{m}/part.toml" for m in MODULES} <= set(names)
    modes = {i.filename: i.external_attr >> 16 for i in infos}
    for script in SCRIPTS:
        assert modes[script] == 0o100755, oct(modes[script])
    assert all(modes[n] == 0o100644 for n in names if n not in SCRIPTS)


def test_only_kit_sources_are_taken(tmp_path):
    kit = tmp_path / "kit"
    for name in ("grader_cli.py", "requirements.txt", "requirements.lock", "autograder/__init__.py", "autograder/graders/pytest.ini",
                 "autograder/graders/test_x.py", "solutions/attention.py",
                 # none of these may go in:
                 "autograder/__pycache__/engine.cpython-311.pyc", "autograder/graders/__pycache__/x.py",
                 "autograder/notes.txt", "solutions/notes.md", "tests/test_cli.py", "examples/buggy/attention.py",
                 "student_template/attention.py", "assignments/mha/01_attention.ipynb",
                 ".venv/lib/site.py", "README.md", "Makefile"):
        (kit / name).parent.mkdir(parents=True, exist_ok=True)
        (kit / name).write_text("x = 1\n")
    names = build_zip(tmp_path / "a.zip", kit=kit)
    assert names == [*SCRIPTS, "autograder/__init__.py", "autograder/graders/pytest.ini",
                     "autograder/graders/test_x.py", "grader_cli.py", "requirements.lock", "requirements.txt",
                     "solutions/attention.py"]


def test_two_builds_are_byte_identical(autograder_zip, tmp_path):
    again = tmp_path / "again.zip"
    assert build_zip(again) == autograder_zip[1]
    assert again.read_bytes() == autograder_zip[0].read_bytes()
    with zipfile.ZipFile(again) as zf:  # no build time or file times in the zip
        assert {i.date_time for i in zf.infolist()} == {(1980, 1, 1, 0, 0, 0)}


def test_scripts_are_valid_bash(gradescope):
    for script in SCRIPTS:
        path = gradescope / "source" / script
        assert path.stat().st_mode & stat.S_IXUSR
        assert path.read_text().startswith("#!/usr/bin/env bash\n")
        check = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
        assert check.returncode == 0, check.stderr
    setup = (gradescope / "source" / "setup.sh").read_text()
    assert "requirements.txt" in setup and "torch==" in setup
    assert setup.count("://") == 1 and "DEFAULT_TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu" in setup


# -- setup.sh, against stand-in commands ------------------------------------------

FAKE_PYTHON = """\
#!/usr/bin/env bash
# Stand-in for python3 / python3.11 / the venv's python: logs its call.
echo "$(basename "$0") $*" >> "$CALLS"
case "$*" in
  "-m venv "*) mkdir -p "$3/bin" && ln -s "$0" "$3/bin/python" ;;
  *version_info*) exit "${FAKE_OLD_PYTHON:-0}" ;;
  *ensurepip*) exit "${FAKE_NO_VENV:-0}" ;;
esac
"""


def run_setup(tmp_path, zip_kwargs=None, **env_extra):
    """Build a zip, unpack it under tmp_path/root/source, run setup.sh with stand-ins; return the logged calls."""
    root = tmp_path / "root"
    unzip_from = tmp_path / "autograder.zip"
    build_zip(unzip_from, **(zip_kwargs or {}))
    unzip(unzip_from, root / "source")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("python3", FAKE_PYTHON), ("python3.11", FAKE_PYTHON),
                       ("apt-get", '#!/usr/bin/env bash\necho "apt-get $*" >> "$CALLS"\n')):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    calls = tmp_path / "calls.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCH_", "FAKE_"))}
    env.update(PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}", AUTOGRADER_ROOT=str(root),
               CALLS=str(calls), **env_extra)
    proc = subprocess.run(["bash", str(root / "source" / "setup.sh")], cwd=root / "source", env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    pip = "python -m pip install --no-cache-dir --disable-pip-version-check"
    return root, calls.read_text().splitlines(), pip


CPU = "https://download.pytorch.org/whl/cpu"


def test_setup_installs_pinned_cpu_torch_then_requirements(tmp_path):
    """The CPU build of torch by default: Gradescope's images have no GPU unless asked, the CUDA build is GBs."""
    root, calls, pip = run_setup(tmp_path)
    assert not [c for c in calls if c.startswith("apt-get")]  # python3 >= 3.10 with venv: nothing to install
    assert f"python3 -m venv {root}/venv" in calls
    installs = [c for c in calls if c.startswith(pip)]
    assert installs == [f"{pip} --no-deps {TORCH} --index-url {CPU}",
                        f"{pip} {TORCH} -r {root}/source/requirements.txt -c {root}/source/requirements.lock"], \
        f"expected torch alone from the CPU index, then its dependencies with the rest under the lock: {installs}"


@pytest.mark.parametrize("how", ["env", "zip"])
def test_setup_installs_the_cuda_build_when_asked(tmp_path, how):
    env = {"TORCH_CUDA": "1"} if how == "env" else {}
    _, calls, pip = run_setup(tmp_path, zip_kwargs={"cuda": True} if how == "zip" else None, **env)
    assert [c for c in calls if c.startswith(f"{pip} --no-deps torch")] == [f"{pip} --no-deps {TORCH}"]  # pip's default index


def test_setup_on_old_python_installs_python311_and_honours_torch_env(tmp_path):
    root, calls, pip = run_setup(tmp_path, FAKE_OLD_PYTHON="1", FAKE_NO_VENV="1",
                                 TORCH_VERSION="2.14.1", TORCH_INDEX_URL="LOCAL-INDEX")
    apt = [c for c in calls if c.startswith("apt-get install")]
    assert apt and "python3.11-venv" in apt[0].split()
    assert f"python3.11 -m venv {root}/venv" in calls
    installs = [c for c in calls if c.startswith(pip)]
    assert installs == [f"{pip} --no-deps torch==2.14.1 --index-url LOCAL-INDEX",
                        f"{pip} torch==2.14.1 -r {root}/source/requirements.txt -c {root}/source/requirements.lock"]


def test_setup_defaults_given_to_build_zip(tmp_path):
    _, calls, pip = run_setup(tmp_path, zip_kwargs={"torch_version": "2.12.0", "torch_index_url": "BUILT-IN INDEX"})
    assert f"{pip} --no-deps torch==2.12.0 --index-url BUILT-IN INDEX" in calls


# -- run_autograder on real submissions -----------------------------------------

@pytest.mark.grading
def test_reference_solution_scores_100(gradescope):
    submit_reference(gradescope)
    data, log = run_autograder(gradescope)
    check_results_format(data)
    assert data["score"] == 100, log
    assert data["tests"] and all(t["status"] == "passed" for t in data["tests"])
    # the tests add up to the top-level score, CUDA checks off-GPU 0 of 0 (their points count as their module's)
    assert sum(Decimal(str(t["score"])) for t in data["tests"]) == 100
    assert sum(Decimal(str(t["max_score"])) for t in data["tests"]) == 100


@pytest.mark.grading
def test_the_documented_try_out_command_with_a_relative_python(gradescope):
    """Issue 14: `PYTHON=.venv/bin/python .../run_autograder` failed: the script changes folder first."""
    submit_reference(gradescope, attention=[("/ math.sqrt(d_k)", "/ d_k")])
    relative = os.path.relpath(sys.executable, gradescope)
    assert not os.path.isabs(relative) and "/" in relative
    data, log = run_autograder(gradescope, relative)
    assert 0 < data["score"] < 100, log
    assert sum(Decimal(str(t["score"])) for t in data["tests"]) == Decimal(str(data["score"]))
    assert str(gradescope) not in data["output"] and all(str(gradescope) not in t["output"] for t in data["tests"])


@pytest.mark.grading
def test_buggy_submission_scores_between_0_and_100(gradescope):
    submit_reference(gradescope, attention=[("/ math.sqrt(d_k)", "/ d_k")])
    data, log = run_autograder(gradescope)
    check_results_format(data)
    assert 0 < data["score"] < 100, log
    failed = [t for t in data["tests"] if t["status"] == "failed"]
    assert failed and all(t["score"] == 0 and t["output"] for t in failed)
    assert any(t["name"].startswith("attention:") for t in failed)


@pytest.mark.grading
def test_empty_submission_scores_0_and_says_there_is_nothing_to_grade(gradescope):
    data, log = run_autograder(gradescope)
    check_results_format(data)
    assert data["score"] == 0, log
    assert all(t["score"] == 0 for t in data["tests"])
    assert data["output"].startswith("Nothing to grade: no student work found: no module found (looked for")
    assert data["extra_data"] == {"status": "empty"}


def test_no_submission_at_all_is_nothing_to_grade(gradescope):
    shutil.rmtree(gradescope / "submission")
    data, log = run_autograder(gradescope)
    check_results_format(data)
    assert data["score"] == 0 and data["tests"] == [] and data["extra_data"] == {"status": "empty"}
    assert data["output"].startswith("Nothing to grade: no student work found: no such file or folder: submission")
    assert str(gradescope) not in data["output"]


def test_an_autograder_that_cannot_run_tells_the_instructor_not_the_student(gradescope):
    """Issue 14: a broken interpreter used to give the student 0 and "Upload attention.py, ...". Now the results
    say autograder failure, blame nobody, and run_autograder exits non-zero; the cause is in the log only
    instructors see."""
    python = gradescope / "broken-python"
    python.write_text(textwrap.dedent("""\
        #!/usr/bin/env bash
        echo 'Traceback: something "quoted" \\ broke' >&2
        exit 1
        """))
    python.chmod(0o755)
    data, log = run_autograder(gradescope, python, exit_status=1)
    check_results_format(data)
    assert data["tests"] == [] and data["extra_data"] == {"status": "error"}
    assert data["output"].startswith("Autograder failure, not a grade: the autograder could not run.")
    assert "not a problem with the submission" in data["output"] and "Upload" not in data["output"]
    assert 'something "quoted" \\ broke' in log and "did not write" in log


@pytest.mark.grading
def test_a_grader_that_cannot_run_student_code_is_an_autograder_failure_not_a_0(gradescope):
    """The student process cannot start (refused on purpose): run_autograder exits non-zero, and the results
    say so, so that Gradescope shows the instructor a failure rather than a grade."""
    submit_reference(gradescope)
    data, log = run_autograder(gradescope, exit_status=2, MHA_REFUSE="setrlimit@student")
    assert data["output"].startswith("Autograder failure, not a grade:"), data["output"]
    assert "setrlimit" in data["output"] and data["tests"] == [], data
    assert "not a problem with the submission" in data["output"] and data["extra_data"] == {"status": "error"}


@pytest.mark.grading
@pytest.mark.parametrize("with_stub", [False, True], ids=["alone", "beside-the-masks-stub"])
def test_a_notebook_uploaded_under_the_students_name_is_graded_as_its_module(gradescope, with_stub):
    """Issue 33: Gradescope keeps the student's file names in /autograder/submission. bea_03_masks.ipynb (the
    reference notebook, renamed) earns masks' 8 of 8, alone (it was "Nothing to grade" before) or beside the
    untouched masks.py stub, which the output then names as not graded, naming the notebook graded instead."""
    from autograder.release import ASSIGNMENT_DIR, NOTEBOOKS, TEMPLATE_DIR

    shutil.copyfile(ASSIGNMENT_DIR / NOTEBOOKS["masks"], gradescope / "submission" / "bea_03_masks.ipynb")
    if with_stub:
        shutil.copyfile(TEMPLATE_DIR / "masks.py", gradescope / "submission" / "masks.py")
    data, log = run_autograder(gradescope)
    check_results_format(data)
    assert data["score"] == 8 and data["extra_data"] == {"status": "graded"}, (data["output"], log)
    masks = [t for t in data["tests"] if t["name"].startswith("masks:")]
    assert masks and all(t["status"] == "passed" for t in masks), masks
    assert sum(Decimal(str(t["score"])) for t in masks) == sum(Decimal(str(t["max_score"])) for t in masks) == 8
    note = ("masks.py: not graded: bea_03_masks.ipynb was graded instead (masks.py is the untouched template and "
            "the notebook holds your work)")
    assert (note in data["output"]) == with_stub, data["output"]


# -- a course file that hands out the optional part kvcache (docs/instructor/kvcache.md) ----------------------------
@pytest.fixture(scope="module")
def kvcache_zip(tmp_path_factory):
    """The zip built under the course file of tests/test_optional_part.py (the five at their worths, kvcache = 11)."""
    from tests.test_optional_part import KVCACHE_COURSE

    path = tmp_path_factory.mktemp("kvcache-zip") / "autograder.zip"
    build_zip(path, course=KVCACHE_COURSE)
    return path


@pytest.mark.grading
@pytest.mark.parametrize("handed_in", ["reference", "template"])
def test_under_a_course_file_with_kvcache_the_zip_grades_the_six_parts(tmp_path, kvcache_zip, handed_in):
    """Unzipped and run as Gradescope runs it: the reference's six modules earn 111 of 111, kvcache's checks among
    the tests (11 of its points), and the untouched template of that course (the kit's template and the kvcache
    stub) 0 of 111."""
    from tests.test_optional_part import KVCACHE_COURSE, PARTS, _reference, _template

    unzip(kvcache_zip, tmp_path / "source")
    (_reference if handed_in == "reference" else _template)(tmp_path / "submission")
    data, log = run_autograder(tmp_path)
    check_results_format(data)
    kvcache = [t for t in data["tests"] if t["name"].startswith("kvcache:")]
    assert kvcache, [t["name"] for t in data["tests"]]
    assert sum(Decimal(str(t["max_score"])) for t in kvcache) == 11, kvcache
    assert {t["name"].split(":")[0] for t in data["tests"]} == set(PARTS), {t["name"] for t in data["tests"]}
    assert sum(Decimal(str(t["max_score"])) for t in data["tests"]) == KVCACHE_COURSE.total == 111
    assert data["score"] == (111 if handed_in == "reference" else 0), (data["output"], log)
    assert sum(Decimal(str(t["score"])) for t in data["tests"]) == Decimal(str(data["score"]))
