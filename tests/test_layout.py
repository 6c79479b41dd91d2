"""The kit's import graph runs one way: no module of `autograder/` imports, directly or through others, a
module that imports it back. Read from the source (every `import` statement, at the top or inside a
function), so that a cycle cannot hide behind a lazy import."""
import ast
from pathlib import Path

from tests.conftest import ROOT

PACKAGE = ROOT / "autograder"


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _kit_modules() -> dict[str, Path]:
    files = [p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts] + [ROOT / "grader_cli.py"]
    return {_module_name(p): p for p in files}


def import_graph() -> dict[str, set[str]]:
    """{module: the kit's modules it imports}; `from autograder import x` counts as importing autograder.x
    when x is a module, and the package's face (autograder/__init__.py, which imports nothing) is left out."""
    modules = _kit_modules()
    graph = {}
    for name, path in modules.items():
        edges = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                targets = [f"{node.module}.{alias.name}" for alias in node.names] + [node.module]
            else:
                continue
            for target in targets:
                while target and target not in modules:  # `a.b.name` -> the module `a.b`
                    target = target.rpartition(".")[0]
                if target and target != name and target != "autograder":
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
    """It holds warm what its owner names (autograder.engine.GRADER_PRELOAD): generic, at the bottom."""
    assert import_graph()["autograder.forkserver"] == set()
