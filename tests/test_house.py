"""The house rules (docs/layout.md), checked on the source: module and function size, no import cycle
(function-local imports included: a lazy import hides a cycle, it does not remove it), the package's layer
order, few function-local imports, and one home for result paths (the table catalog)."""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from functools import lru_cache
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = SRC / "remat"
REPORTS = SRC.parent / "reports"

MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60
MAX_LOCAL_IMPORTS = 40
MAX_COLUMNS = 120

# The layers of docs/layout.md, top (0) to bottom: a module may import its own layer or lower ones, never a higher
# one. Figures sit above the analysis, since they draw its fits beside the data.
LAYERS = [
    ("remat.cli", "remat.gpu_run", "remat.__main__", "remat"),
    ("remat.report",),
    ("remat.figures",),
    ("remat.analysis",),
    ("remat.experiments",),
    ("remat.auto", "remat.planner"),
    ("remat.timemodel", "remat.measure", "remat.accounting"),
    ("remat.policies", "remat.drop_cheap", "remat.offload", "remat.offload_pool"),
    ("remat.models", "remat.graph"),
    ("remat.formulas", "remat.chain", "remat.schedules"),
    ("remat.units", "remat.io", "remat.interrupt", "remat.device", "remat.errors", "remat.paper",
     "remat.precision"),
]
RANK = {name: rank for rank, names in enumerate(LAYERS) for name in names}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@lru_cache(maxsize=None)
def modules() -> dict[str, tuple[Path, ast.Module]]:
    return {module_name(p): (p, ast.parse(p.read_text(encoding="utf-8"))) for p in sorted(PACKAGE.rglob("*.py"))}


def _targets(name: str, path: Path, node: ast.AST) -> list[str]:
    """The remat modules an import statement in module ``name`` loads."""
    known = modules()
    if isinstance(node, ast.Import):
        found = [a.name for a in node.names]
    else:
        base = node.module or ""
        if node.level:
            package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
            package = package[: len(package) - node.level + 1]
            base = ".".join(package + ([base] if base else []))
        found = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
    out = []
    for target in found:
        while target not in known and "." in target:
            target = target.rsplit(".", 1)[0]
        if target in known and target.startswith("remat"):
            out.append(target)
    return out


def import_graph() -> tuple[dict[str, set[str]], int]:
    """Module -> remat modules it imports (top-level and function-local), and the count of function-local
    import statements that load a remat module."""
    graph, local = defaultdict(set), 0
    for name, (path, tree) in modules().items():
        top = {id(n) for n in tree.body}
        top |= {id(n) for n in tree.body if isinstance(n, ast.If)}  # `if TYPE_CHECKING:` blocks stay top-level
        type_only = {id(s) for n in tree.body if isinstance(n, ast.If) for s in ast.walk(n)}
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Import, ast.ImportFrom)) or id(node) in type_only:
                continue
            targets = [t for t in _targets(name, path, node) if t != name]
            if targets and id(node) not in top:
                local += 1
            graph[name].update(targets)
    return graph, local


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index, low, stack, on, found, counter = {}, {}, [], set(), [], [0]

    def visit(root):
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = counter[0]; counter[0] += 1; stack.append(root); on.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter[0]; counter[0] += 1; stack.append(child); on.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop(); on.discard(member); component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def layer_of(name: str) -> int:
    while name not in RANK:
        name = name.rsplit(".", 1)[0]
    return RANK[name]


def test_no_module_over_400_lines():
    long = {n: len(p.read_text().splitlines()) for n, (p, _) in modules().items()}
    assert {n: k for n, k in long.items() if k > MAX_MODULE_LINES} == {}


def test_no_function_over_60_lines():
    long = [f"{n}.{f.name} ({f.end_lineno - f.lineno + 1} lines)" for n, (_, tree) in modules().items()
            for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
            and f.end_lineno - f.lineno + 1 > MAX_FUNCTION_LINES]
    assert long == []


def test_no_line_over_120_columns():
    """Every line of Python in src/remat, tests/ and benchmarks/ fits in 120 columns."""
    paths = [p for p, _ in modules().values()] + [p for d in ("tests", "benchmarks")
                                                  for p in sorted((SRC.parent / d).rglob("*.py"))]
    long = [f"{p.relative_to(SRC.parent)}:{i} ({len(line)} columns)" for p in paths
            for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if len(line) > MAX_COLUMNS]
    assert long == []


def test_no_import_cycles():
    assert cycles(import_graph()[0]) == []


def test_cycle_finder_finds_a_planted_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_layer_order():
    graph = import_graph()[0]
    upward = sorted(f"{a} -> {b}" for a, targets in graph.items() for b in targets if layer_of(b) < layer_of(a))
    assert upward == []


def test_few_function_local_imports():
    assert import_graph()[1] <= MAX_LOCAL_IMPORTS


RESULTS_LITERAL = re.compile(r"""["']results/""")
CATALOG = PACKAGE / "analysis" / "catalog.py"


def test_result_paths_live_in_the_catalog():
    """Every path under results/ is named in remat.analysis.catalog (or in workflow/, which makes them)."""
    sources = [p for p in PACKAGE.rglob("*.py") if p != CATALOG] + sorted(REPORTS.glob("*.qmd"))
    found = [f"{p.relative_to(SRC.parent)}:{i}" for p in sources
             for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if RESULTS_LITERAL.search(line)]
    assert found == []


def test_no_tracker_tags_in_the_source():
    """The source says what and why, not which ticket: no issue, turn or stop numbers in code, tests or workflow."""
    tag = re.compile(r"\b(?:[Ii]ssue|[Tt]urn|[Ss]top) \d")   # not an upstream tracker: "nccl-tests issues #149"
    roots = [SRC, SRC.parent / "tests", SRC.parent / "workflow", SRC.parent / "reports", SRC.parent / "benchmarks"]
    found = [f"{p.relative_to(SRC.parent)}:{i}" for root in roots for p in sorted(root.rglob("*"))
             if p.suffix in (".py", ".smk", ".qmd") for i, line in enumerate(p.read_text().splitlines(), 1)
             if tag.search(line)]
    assert found == []
