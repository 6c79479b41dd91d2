"""Generated classes for the similarity check (tests/test_similarity.py, benchmarks/similarity_scale.py).

`make_class(folder, n)`: n submissions, each the student template (`student_template/*.py`) with every body
marked `# YOUR CODE HERE` filled by code drawn at random for that student (tensor expressions over its
arguments, with its own numbers, shapes and order), so that no two students write alike by chance beyond a
common idiom. `renamed_copy(source, target)`: a copy of a submission as a student hides one: every local
variable renamed, the comments replaced, blank lines added; what the names and comments were does not
matter to a fingerprint that reads names as one letter, which is the point.
"""
from __future__ import annotations

import ast
import io
import keyword
import random
import re
import shutil
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
TEMPLATE = ROOT / "student_template"
from autograder import MODULES  # noqa: E402  (the kit's own list of parts)

_BODY = re.compile(r"^(?P<indent>[ \t]+)# YOUR CODE HERE\n(?P=indent)raise NotImplementedError\(\)\n", re.M)
_WORDS = ("scores", "weights", "out", "attn", "probs", "mixed", "hidden", "scale", "table", "rows", "cols", "keys",
          "vals", "logits", "acc", "tmp", "part", "heads", "feat", "pos")
_CALLS = ("torch.softmax({a}, dim={d})", "torch.tanh({a})", "({a}).sum(dim={d}, keepdim=True)",
          "({a}).transpose({d}, {e})", "torch.clamp({a}, min={c})", "({a}).masked_fill({a} > {c}, {f})",
          "torch.exp({a} - {c})", "({a}).mean(dim={d})", "torch.relu({a})", "({a})[..., :{n}]",
          "torch.cat([{a}, {b}], dim={d})", "({a}).reshape({n}, -1)", "torch.matmul({a}, {b})",
          "({a}).unsqueeze({d})", "torch.where({a} > {c}, {a}, {b})", "math.sqrt({n}) * {a}", "({a}).view(-1, {n})")
_OPS = ("+", "-", "*", "/", "@")


def _expr(rng: random.Random, names: list[str], depth: int = 0) -> str:
    if depth > 2 or rng.random() < 0.25:
        return rng.choice(names) if names and rng.random() < 0.7 else f"{rng.uniform(-9, 9):.{rng.randint(1, 4)}f}"
    if rng.random() < 0.6:
        template = rng.choice(_CALLS)
        return template.format(a=_expr(rng, names, depth + 1), b=_expr(rng, names, depth + 1), d=rng.randint(-3, 3),
                               e=rng.randint(-3, 3), c=f"{rng.uniform(-5, 5):.3f}", f=f"{rng.uniform(-99, 0):.1f}",
                               n=rng.randint(2, 64))
    return f"{_expr(rng, names, depth + 1)} {rng.choice(_OPS)} {_expr(rng, names, depth + 1)}"


def _body(rng: random.Random, indent: str, params: list[str]) -> str:
    names = list(params) or ["x"]
    lines = []
    for number in range(rng.randint(5, 12)):
        if rng.random() < 0.15:
            lines.append(f"{indent}if {_expr(rng, names)} is not None:")
            lines.append(f"{indent}    {rng.choice(names)} = {_expr(rng, names)}")
            continue
        if rng.random() < 0.1:
            lines.append(f"{indent}for _ in range({rng.randint(1, 9)}):")
            lines.append(f"{indent}    {rng.choice(names)} = {_expr(rng, names)}")
            continue
        name = f"{rng.choice(_WORDS)}_{number}"
        lines.append(f"{indent}{name} = {_expr(rng, names)}")
        names.append(name)
    lines.append(f"{indent}return {names[-1]}")
    return "\n".join(lines) + "\n"


def _params_before(source: str, offset: int) -> list[str]:
    """The parameters of the function whose body starts at `offset` (the last `def` before it)."""
    found = re.findall(r"def \w+\(([^)]*)\)", source[:offset])
    if not found:
        return ["x"]
    params = [p.split("=")[0].split(":")[0].strip() for p in found[-1].split(",")]
    return [p for p in params if p and p not in ("self", "*", "/") and not p.startswith("*")]


def student_module(module: str, rng: random.Random) -> str:
    """The template's module with each YOUR CODE HERE body filled at random."""
    source = (TEMPLATE / f"{module}.py").read_text(encoding="utf-8")
    pieces, cursor = [], 0
    for match in _BODY.finditer(source):
        pieces.append(source[cursor:match.start()])
        pieces.append(_body(rng, match.group("indent"), _params_before(source, match.start())))
        cursor = match.end()
    pieces.append(source[cursor:])
    return "".join(pieces)


def make_class(folder: Path, n: int, seed: int = 2026, width: int = 3) -> list[str]:
    """n generated submissions in `folder` (student-000 ...); their ids."""
    folder.mkdir(parents=True, exist_ok=True)
    ids = []
    for k in range(n):
        rng = random.Random(f"{seed}-{k}")
        sub = folder / f"student-{k:0{width}d}"
        sub.mkdir()
        for module in MODULES:
            (sub / f"{module}.py").write_text(student_module(module, rng), encoding="utf-8")
        ids.append(sub.name)
    return ids


def rename_locals(source: str, rng: random.Random) -> str:
    """`source` with every name assigned inside a function (not its parameters, not an attribute) renamed, its
    comments replaced and blank lines added: the same code to a fingerprint that reads names as one letter."""
    tree = ast.parse(source)
    local = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            params = {a.arg for a in node.args.args + node.args.kwonlyargs}
            for inner in ast.walk(node):
                if isinstance(inner, ast.Name) and isinstance(inner.ctx, ast.Store) and inner.id not in params:
                    local.add(inner.id)
    fresh = {name: f"v{rng.randrange(10**6):06d}_{name[::-1]}" for name in sorted(local) if not keyword.iskeyword(name)}
    out, previous = [], None
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.NAME and tok.string in fresh and not (previous and previous.string == "."):
            tok = tok._replace(string=fresh[tok.string])
        elif tok.type == tokenize.COMMENT:
            tok = tok._replace(string=f"# note {rng.randrange(10**6)}")
        out.append(tok)
        if tok.type not in (tokenize.NL, tokenize.COMMENT):
            previous = tok
    text = tokenize.untokenize(out)
    return re.sub(r"\n(\s*)return ", lambda m: f"\n\n{m.group(1)}return ", text)


def renamed_copy(source: Path, target: Path, seed: int = 7):
    """A copy of the submission folder `source` at `target`, each module's locals renamed (rename_locals)."""
    rng = random.Random(seed)
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    for path in sorted(source.iterdir()):
        if path.suffix == ".py":
            (target / path.name).write_text(rename_locals(path.read_text(encoding="utf-8"), rng), encoding="utf-8")
