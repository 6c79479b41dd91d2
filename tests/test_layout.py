"""The kit's import graph runs one way: no module of `autograder/` imports, directly or through others, a
module that imports it back. Read from the source (every `import` statement, at the top or inside a
function), so that a cycle cannot hide behind a lazy import."""
import ast
import importlib
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import autograder
from autograder.paths import TORCH, TORCH_VERSION
from tests.conftest import ROOT

PACKAGE = ROOT / "autograder"


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _kit_modules() -> dict[str, Path]:
    files = [p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts] + [ROOT / "grader_cli.py"]
    return {_module_name(p): p for p in files}


def _imports(path: Path) -> list[ast.stmt]:
    return [node for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
            if isinstance(node, ast.Import) or (isinstance(node, ast.ImportFrom) and node.module and not node.level)]


def import_graph() -> dict[str, set[str]]:
    """{module: the kit's modules it imports}; `from autograder.grade import x` counts as importing
    autograder.grade.x when x is a module, and a package's face that imports nothing (autograder/__init__.py,
    autograder/grade/__init__.py, ...: a docstring) is left out: it can close no cycle, and a grader that imports
    `from autograder.grade import diagnose` depends on diagnose, not on one grading's package."""
    modules = _kit_modules()
    faces = {name for name, path in modules.items() if path.name == "__init__.py" and not _imports(path)}
    graph = {}
    for name, path in modules.items():
        edges = set()
        for node in _imports(path):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                targets = [f"{node.module}.{alias.name}" for alias in node.names] + [node.module]
            for target in targets:
                while target and target not in modules:  # `a.b.name` -> the module `a.b`
                    target = target.rpartition(".")[0]
                if target and target != name and target not in faces:
                    edges.add(target)
        graph[name] = edges
    return graph


def cycles(graph) -> list[list[str]]:
    """Every import cycle of `graph`, each once, as the list of its modules."""
    found, state = [], {}

    def visit(node, path):
        state[node] = "open"
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                found.append(path[path.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt, path + [nxt])
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    return found


def test_the_kits_imports_have_no_cycle():
    found = cycles(import_graph())
    assert not found, "expected the kit's imports to run one way, found cycles:\n" + "\n".join(
        " -> ".join(c) for c in found)


def test_the_cycle_check_sees_a_cycle_through_a_lazy_import():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c", "a"]]


def test_the_fork_server_knows_no_other_module_of_the_kit():
    """It holds warm what its owner names (autograder.grade.servers.GRADER_PRELOAD): generic, at the bottom."""
    assert import_graph()["autograder.sandbox.forkserver"] == set()


def test_every_grading_collects_the_graders_the_warm_server_imported():
    """The grader server imports the graders once (GRADER_PRELOAD), and the pytest of each fork, in importlib mode
    (autograder/graders/pytest.ini), collects a test module found in sys.modules as it is: a grader file added
    without its name in GRADER_PRELOAD, or a pytest that imported the file again, would cost every grading."""
    from _pytest.pathlib import ImportMode, import_path

    from autograder import registry
    from autograder.grade.servers import GRADER_PRELOAD
    from autograder.paths import GRADERS

    assert "--import-mode=importlib" in (GRADERS / "pytest.ini").read_text()
    assert not list(GRADERS.glob("test_*.py")), "expected the graders in the part folders (parts/<name>/) alone"
    for part in registry.parts():
        path, name = part.graders, part.grader_module
        assert name in GRADER_PRELOAD, f"expected {name} among the grader server's preloaded modules"
        preloaded = importlib.import_module(name)
        collected = import_path(path, mode=ImportMode.importlib, root=GRADERS, consider_namespace_packages=False)
        assert collected is preloaded, f"pytest imported {path.name} again instead of taking the preloaded module"


# ---- the package: installable, one entry point, every root and the torch pin stated once ----------------

def test_every_root_of_the_kit_is_found_in_paths_py_alone():
    """A module that finds the checkout from its own file breaks the day it moves: autograder/paths.py is the
    one place that does (the fork server aside: it is generic, and finds the folder imports start from)."""
    offenders = [name for name, path in _kit_modules().items()
                 if "Path(__file__).resolve().parent.parent" in path.read_text(encoding="utf-8")
                 and name not in ("autograder.paths", "autograder.sandbox.forkserver")]
    assert not offenders, f"expected only autograder/paths.py to find the kit's root, found it in {offenders}"


def test_the_torch_pin_is_stated_once():
    """autograder/paths.py states it; the Makefile reads it there; what cannot read it (the Classroom templates,
    copied into course repositories) says the same, and no module of the kit repeats the number."""
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    assert "autograder/paths.py" in makefile and TORCH_VERSION not in makefile, \
        "expected the Makefile to read the torch pin from autograder/paths.py, not to repeat it"
    setup = subprocess.run(["make", "-n", "-B", "setup", "VENV=/nonexistent-venv"], cwd=ROOT, capture_output=True,
                           text=True, timeout=60).stdout  # what `make setup` would run, run nothing
    assert f'"{TORCH}"' in setup, f"expected make setup to install {TORCH}, it would run:\n{setup}"
    for template in sorted((ROOT / "templates" / "github-classroom").glob("*.yml")):
        pins = [line.split("TORCH:")[1].split("#")[0].strip() for line in template.read_text().splitlines()
                if line.strip().startswith("TORCH:")]
        assert pins == [TORCH], f"expected {template.name} to pin {TORCH}, found {pins}"
    repeats = [name for name, path in _kit_modules().items()
               if TORCH_VERSION in path.read_text(encoding="utf-8") and name != "autograder.paths"]
    assert not repeats, f"expected only autograder/paths.py to say {TORCH_VERSION}, found it in {repeats}"


def _run(*args, cwd):
    return subprocess.run([sys.executable, *args], cwd=cwd, capture_output=True, text=True, timeout=600)


def test_the_kit_builds_as_a_package_with_its_command_line_and_graders(tmp_path):
    """pyproject.toml: the wheel of `pip install -e .`'s project holds every module and the graders' pytest.ini,
    the version of autograder/__init__.py, requirements.txt's pins as dependencies, and the `mha-grader` script."""
    source = tmp_path / "kit"  # a copy: a build writes build/ and *.egg-info beside the project
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(".*", "__pycache__", "tests", "examples", "benchmarks"))
    built = _run("-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", "-w", str(tmp_path), str(source),
                 cwd=tmp_path)
    assert built.returncode == 0, f"expected the kit to build as a wheel, pip said:\n{built.stderr[-3000:]}"
    (wheel,) = tmp_path.glob("mha_kit-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    expected = {f"autograder/{p.relative_to(PACKAGE).as_posix()}" for p in PACKAGE.rglob("*.py")
                if "__pycache__" not in p.parts} | {"autograder/graders/pytest.ini", "grader_cli.py"}
    assert expected <= names, f"expected the wheel to hold every module of the kit, missing {sorted(expected - names)}"
    meta = next(n for n in names if n.endswith(".dist-info/METADATA"))
    metadata = zipfile.ZipFile(wheel).read(meta).decode()
    assert f"Version: {autograder.__version__}\n" in metadata
    pins = [line for line in (ROOT / "requirements.txt").read_text().splitlines() if line and not line.startswith("#")]
    assert all(f"Requires-Dist: {pin}\n" in metadata for pin in pins), metadata
    scripts = zipfile.ZipFile(wheel).read(meta.replace("METADATA", "entry_points.txt")).decode()
    assert "mha-grader = autograder.cli:main" in scripts


def test_python_dash_m_autograder_is_the_command_line(tmp_path):
    """From any folder (the kit is installed editable by make setup), as grader_cli.py is."""
    shown = _run("-m", "autograder", "--version", cwd=tmp_path)
    assert shown.returncode == 0 and shown.stdout.startswith("mha-kit "), shown.stdout + shown.stderr
    shim = _run(str(ROOT / "grader_cli.py"), "--version", cwd=tmp_path)
    assert shim.stdout == shown.stdout, "expected grader_cli.py and python -m autograder to be one command line"


# ---- the layers: every import goes down or sideways, never up ---------------------------------------------

#: The kit's modules, bottom up. A module imports only from its own layer or the ones below it; a new module
#: must be placed here (the test names it), which is where its place in the architecture is decided. Each
#: sub-package of autograder/ sits in one layer (test_a_sub_package_sits_in_one_layer): the folders show it.
LAYERS = [
    ("foundations: stdlib only, no other module of the kit",
     {"autograder", "autograder.paths", "autograder.files", "autograder.scoring", "autograder.course"}),
    ("the parts: each part of the assignment one folder, parts/<name>/, read from autograder.PARTS",
     {"autograder.registry"}),
    ("the submission: what a student hands in, read without following a link, notebooks turned into modules",
     {"autograder.submission", "autograder.submission.intake", "autograder.submission.folder",
      "autograder.submission.forms", "autograder.submission.zips", "autograder.submission.notebooks",
      "autograder.submission.released", "autograder.submission.take"}),
    ("the sandbox: the student process (an orchestrator over a file per subsystem), its client, its limits and "
     "isolation, what stops or guards it from outside",
     {"autograder.sandbox", "autograder.sandbox.limits", "autograder.sandbox.errors", "autograder.sandbox.isolation",
      "autograder.sandbox.client", "autograder.sandbox.process", "autograder.sandbox.remote",
      "autograder.sandbox.student_process", "autograder.sandbox.wire",
      "autograder.sandbox.channel", "autograder.sandbox.libc", "autograder.sandbox.namespaces",
      "autograder.sandbox.devices", "autograder.sandbox.privileges", "autograder.sandbox.keeper",
      "autograder.sandbox.rlimits", "autograder.sandbox.landlock_rules", "autograder.sandbox.request_server",
      "autograder.sandbox.student_code",
      "autograder.sandbox.landlock", "autograder.sandbox.forkserver", "autograder.sandbox.forkclient",
      "autograder.sandbox.diskguard",
      "autograder.sandbox.freeze", "autograder.sandbox.batchlock", "autograder.sandbox.uids",
      "autograder.sandbox.lazy_dynamo", "autograder.sandbox.seeding", "autograder.sandbox.seccomp",
      "autograder.sandbox.seccomp_bpf", "autograder.sandbox.seccomp_rules",
      "autograder.sandbox.standin"}),
    ("the report: the model and its formats",
     {"autograder.report", "autograder.report.model", "autograder.report.ci", "autograder.report.html",
      "autograder.report.formats"}),
    ("the graders' library (checks, the speed measurement, blame), run in the graders' process beside the hidden "
     "graders of parts/<name>/",
     {"autograder.graders", "autograder.graders.checks", "autograder.graders.timing", "autograder.graders.common",
      "autograder.graders.blame", "autograder.grade.diagnose"}),
    ("one grading: the engine, the grading it hands the graders' process, the plugin that records it there, the "
     "servers kept warm for it, the timing of implementations side by side",
     {"autograder.grade", "autograder.grade.engine", "autograder.grade.spec", "autograder.grade.plugin",
      "autograder.grade.servers", "autograder.grade.bench", "autograder.grade.prepared"}),
    ("a class: many gradings, their gradebook, shards and merge, the class page, similar submissions",
     {"autograder.classrun", "autograder.classrun.run", "autograder.classrun.gradebook",
      "autograder.classrun.fingerprints", "autograder.classrun.outlock", "autograder.classrun.shards",
      "autograder.classrun.merge",
      "autograder.classrun.classpage", "autograder.classrun.similarity"}),
    ("the release step and the platforms: the student template, its self-check and the tutorials it cites, "
     "Gradescope, nbgrader",
     {"autograder.release", "autograder.selfcheck", "autograder.tutorials", "autograder.integrations",
      "autograder.integrations.gradescope",
      "autograder.integrations.nbgrader_sync"}),
    ("the command line", {"autograder.cli", "autograder.__main__", "grader_cli"}),
]


def test_every_module_of_the_kit_has_its_layer():
    placed = [m for _, modules in LAYERS for m in modules]
    assert len(placed) == len(set(placed)), "expected each module in one layer"
    unplaced = sorted(set(_kit_modules()) - set(placed))
    gone = sorted(set(placed) - set(_kit_modules()))
    assert not unplaced and not gone, (f"expected every module of the kit in LAYERS (tests/test_layout.py): "
                                       f"not placed {unplaced}, placed but gone {gone}")


def upward_imports(graph) -> list[str]:
    layer = {m: i for i, (_, modules) in enumerate(LAYERS) for m in modules}
    return [f"{a} ({LAYERS[layer[a]][0].split(':')[0]}) imports {b} ({LAYERS[layer[b]][0].split(':')[0]})"
            for a in sorted(graph) for b in sorted(graph[a]) if a in layer and b in layer and layer[b] > layer[a]]


def test_no_module_imports_from_a_layer_above_its_own():
    found = upward_imports(import_graph())
    assert not found, "expected every import to go down or sideways, found:\n" + "\n".join(found)


def test_the_layer_check_sees_an_upward_import():
    assert upward_imports({"autograder.scoring": {"autograder.cli"}}) == [
        "autograder.scoring (foundations) imports autograder.cli (the command line)"]


def packages_across_layers(layers, modules) -> dict[str, list[str]]:
    """{sub-package: the layers its modules sit in}, for each sub-package of autograder/ in more than one.
    `modules`: {module: its file}; a module's package is the folder its file is in (autograder/ itself aside)."""
    layer = {m: label.split(":")[0] for label, members in layers for m in members}
    found = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        if package.count(".") == 1 and package.startswith("autograder.") and name in layer:
            found.setdefault(package, set()).add(layer[name])
    return {package: sorted(labels) for package, labels in sorted(found.items()) if len(labels) > 1}


#: Modules whose layer is not their folder's yet, each with why: a short list that only shrinks (a stray that is
#: gone from the kit fails test_every_stray_is_still_there, so the entry leaves with it).
STRAYS = {
    "autograder.grade.diagnose": "the graders' library (the graders and checks.py import it), in grade/ until it "
                                 "is split by part beside the graders (issue 52, item 2)",
}


def test_a_sub_package_sits_in_one_layer():
    """submission/, sandbox/, report/, graders/, grade/, classrun/, integrations/: the folders are the
    architecture (the STRAYS aside)."""
    modules = {name: path for name, path in _kit_modules().items() if name not in STRAYS}
    found = packages_across_layers(LAYERS, modules)
    assert not found, f"expected each sub-package of autograder/ in one layer, found {found}"


def test_every_stray_is_still_there():
    gone = sorted(set(STRAYS) - set(_kit_modules()))
    assert not gone, f"expected every module of STRAYS (tests/test_layout.py) in the kit, gone: {gone}; remove them"


def test_the_package_check_sees_a_package_across_layers():
    modules = {"autograder.report": Path("autograder/report/__init__.py"),
               "autograder.report.model": Path("autograder/report/model.py"),
               "autograder.scoring": Path("autograder/scoring.py")}
    layers = [("foundations: ...", {"autograder.scoring", "autograder.report.model"}),
              ("the report", {"autograder.report"})]
    assert packages_across_layers(layers, modules) == {"autograder.report": ["foundations", "the report"]}
    assert packages_across_layers([("foundations", set(modules))], modules) == {}


def test_the_foundations_import_no_module_of_the_kit():
    """The student process loads some of them by path under `python -I`, before it confines itself."""
    graph = import_graph()
    found = {m: sorted(graph[m]) for m in LAYERS[0][1] if graph.get(m)}
    assert not found, f"expected the foundations to import nothing of the kit, found {found}"


def _loaded_by_path() -> set[str]:
    """The siblings the student process loads by path (`_sibling("wire")`, `_sibling("keeper", libc=_libc)`): it
    runs under `python -I` with no kit on sys.path, and loads them before it confines itself."""
    source = (PACKAGE / "sandbox" / "student_process.py").read_text(encoding="utf-8")
    return {f"autograder.sandbox.{name}" for name in re.findall(r'_sibling\("(\w+)"[,)]', source)}


def test_what_runs_outside_the_package_imports_nothing_of_the_kit():
    """The student process and the siblings it loads by path, from its own folder (autograder/sandbox/); the
    self-check, shipped to students as is; the fork server, generic."""
    loaded = _loaded_by_path()
    assert loaded >= {"autograder.sandbox.wire", "autograder.sandbox.landlock", "autograder.sandbox.seccomp",
                      "autograder.sandbox.namespaces", "autograder.sandbox.keeper",
                      "autograder.sandbox.request_server"}, loaded
    modules, graph = _kit_modules(), import_graph()
    beside = sorted(m for m in loaded if m not in modules)
    assert not beside, f"expected the student process's by-path siblings in its folder, missing {beside}"
    alone = {"autograder.sandbox.student_process", "autograder.selfcheck", "autograder.sandbox.forkserver",
             *loaded}
    found = {m: sorted(graph[m]) for m in sorted(alone) if graph[m]}
    assert not found, f"expected these to import nothing of the kit, found {found}"


def _kit_files() -> list[str]:
    """Every file of the kit, relative to it: git's list of tracked files (not what a command left in the
    checkout, such as bench.png or the Gradescope zip), else the tree."""
    listed = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True).stdout.split("\n")
    if any(listed):
        return [name for name in listed if name]
    files = []  # not a git checkout (an unpacked copy)
    for top, dirs, names in os.walk(ROOT):
        dirs[:] = [d for d in dirs if not d.startswith(".") and d != "__pycache__"]
        files += [Path(top, n).relative_to(ROOT).as_posix() for n in names]
    return files


#: The documentation's layout table (its contributing guide).
LAYOUT_PAGE = ROOT / "docs" / "contributing" / "layout.md"


def _documented_layout() -> str:
    text = LAYOUT_PAGE.read_text(encoding="utf-8")
    return text[text.index("# Layout\n"):].split("\n## ", 1)[0]


def test_the_documented_layout_table_names_every_folder_and_module():
    """What the table says is there, is there; and what is there, the table says."""
    layout = _documented_layout()
    files = _kit_files()
    top = {name.split("/")[0] for name in files} - {".gitignore", "README.md"}
    missing = sorted(name for name in top if f"`{name}" not in layout)
    assert not missing, f"expected the layout table to name every top-level entry, missing {missing}"
    modules = {p.relative_to(PACKAGE).as_posix() for p in PACKAGE.rglob("*.py")
               if "__pycache__" not in p.parts and p.name != "__init__.py" and not p.name.startswith("test_")}
    unnamed = sorted(m for m in modules if f"`{m}`" not in layout)
    assert not unnamed, f"expected the layout table to name every module of autograder/, missing {unnamed}"
    named = set(re.findall(r"`([\w./-]+)`", layout))
    paths = set(files) | {name.rsplit("/", i)[0] + "/" for name in files for i in range(1, name.count("/") + 1)}
    gone = sorted(n for n in named if n.endswith((".py", "/")) and len(n) > 3
                  and not any(p == n or p.endswith("/" + n) for p in paths))
    assert not gone, f"expected every path of the layout table to exist, found gone {gone}"


def test_the_grader_plugin_imports_no_torch_so_the_student_process_starts_first():
    """A cold grading imports torch twice, in parallel: the plugin starts the student process when pytest is
    configured, and the grader imports torch after that, while it collects the graders (a plugin that imported
    torch at its top made the two imports one after the other: ~1 s more per grading)."""
    proc = subprocess.run([sys.executable, "-c", "import sys, autograder.grade.plugin; print('torch' in sys.modules)"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.stdout.strip() == "False", f"expected no torch imported by the plugin's imports: {proc.stdout}{proc.stderr}"


def test_no_file_of_the_sandbox_is_over_about_300_lines():
    """The sandbox is split by subsystem (nsjail's way: a file per mnt, net, user, pid, cgroup), each readable
    at once: none over MAX_SANDBOX_LINES."""
    long = {p.name: n for p in sorted((PACKAGE / "sandbox").glob("*.py"))
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_SANDBOX_LINES}
    assert not long, f"expected every file of autograder/sandbox/ within {MAX_SANDBOX_LINES} lines, got {long}"


MAX_SANDBOX_LINES = 340
