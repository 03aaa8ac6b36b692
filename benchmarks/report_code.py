"""How much code serves the reports, and whether it keeps the house rules: prints one line per figure.

    python benchmarks/report_code.py

- report-serving lines: non-blank lines of src/remat/analysis/ and src/remat/report/ (Python), of the Python in
  reports/*.qmd (cell code and inline expressions), and of the tests of those layers (a test file about them whole;
  in a file about other code, the test functions that use what it imports from them);
- sentence builders outside remat.report.phrases: functions in the analysis and report layers that return a string
  of prose (a literal or f-string of three words or more) — a heuristic, listed by name; listed apart, not
  counted: the gates' one-line reasons (a finding's ``reason`` column, like the rules' in findings.py) and the
  page blocks (pages.index_markdown: the list of reports; scorecard: its table and links);
- modules over 400 lines, functions over 60, import cycles, function-local remat imports (tests/test_house.py's
  own measures, so the figures here and the test agree).
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

import test_house as house  # noqa: E402  (the house test's own measures)

from remat.report.qmd import Cell, inline_exprs, parse_qmd  # noqa: E402

LAYERS = (ROOT / "src/remat/analysis", ROOT / "src/remat/report")
PHRASES = ROOT / "src/remat/report/phrases.py"
RENDERER = ("__init__.py", "fallback.py", "lint.py", "qmd.py", "pages.py")
RENDERER_TESTS = ("test_report.py", "test_report_page.py", "test_report_parity.py", "test_qmd_subset.py")
APART = {"src/remat/analysis/gates.py": "reasons", "src/remat/report/pages.py": "page blocks",
         "src/remat/report/scorecard.py": "page blocks"}
PROSE = re.compile(r"[A-Za-z]+\s+[A-Za-z]+\s+[A-Za-z]+")


def _lines(text: str) -> int:
    return sum(1 for line in text.splitlines() if line.strip())


def qmd_python(path: Path) -> int:
    doc = parse_qmd(path.read_text(encoding="utf-8"))
    cells = sum(_lines(b.code) for b in doc.blocks if isinstance(b, Cell))
    inline = sum(len(inline_exprs(b.text)) for b in doc.blocks if not isinstance(b, Cell))
    return cells + inline


ABOUT = re.compile(r"test_(findings|phrases|\w+_summary\w*|report\w*|qmd_subset|reference|house)\.py$")
USES = re.compile(r"^\s*from remat\.(analysis|report)\b.*? import (.+)$|^\s*import remat\.(analysis|report)", re.M)


def serving_test_lines(path: Path) -> int:
    """Lines of ``path`` that test the analysis or report layers: the whole file when it is about them (ABOUT), else
    only the test functions that use a name it imports from them."""
    text = path.read_text(encoding="utf-8")
    names = {n.split(" as ")[-1].strip(" ()") for m in USES.finditer(text) if m.group(2) for n in m.group(2).split(",")}
    if not USES.search(text):
        return 0
    if ABOUT.match(path.name):
        return _lines(text)
    tree = ast.parse(text)
    lines = text.splitlines()
    used = [f for f in tree.body if isinstance(f, ast.FunctionDef)
            and {n.id for n in ast.walk(f) if isinstance(n, ast.Name)} & names]
    return sum(_lines("\n".join(lines[f.lineno - 1:f.end_lineno])) for f in used)


def _is_prose(value: ast.AST) -> bool:
    """A string expression that reads as words: a literal or f-string of three words or more, either branch of a
    conditional, or a concatenation of such."""
    if isinstance(value, ast.IfExp):
        return _is_prose(value.body) or _is_prose(value.orelse)
    if isinstance(value, ast.BinOp):
        return _is_prose(value.left) or _is_prose(value.right)
    if isinstance(value, ast.JoinedStr):
        return bool(PROSE.search("".join(v.value for v in value.values if isinstance(v, ast.Constant))))
    return isinstance(value, ast.Constant) and isinstance(value.value, str) and bool(PROSE.search(value.value))


def _returns_prose(func: ast.AST) -> bool:
    return any(isinstance(n, ast.Return) and n.value is not None and _is_prose(n.value) for n in ast.walk(func))


def sentence_builders() -> list[str]:
    found = []
    for layer in LAYERS:
        for path in sorted(layer.rglob("*.py")):
            if path == PHRASES:
                continue
            tree = ast.parse(path.read_text(encoding="utf-8"))
            found += [f"{path.relative_to(ROOT)}:{f.name}" for f in ast.walk(tree)
                      if isinstance(f, ast.FunctionDef) and _returns_prose(f)]
    return found


def main() -> None:
    src = sum(_lines(p.read_text(encoding="utf-8")) for layer in LAYERS for p in layer.rglob("*.py"))
    qmd = sum(qmd_python(p) for p in sorted((ROOT / "reports").glob("*.qmd")))
    tests = sum(serving_test_lines(p) for p in sorted((ROOT / "tests").glob("test_*.py")))
    print(f"report-serving lines: {src + qmd + tests} (analysis + report {src}, .qmd Python {qmd}, tests {tests})")
    engine = sum(_lines((ROOT / "src/remat/report" / f).read_text(encoding="utf-8")) for f in RENDERER)
    engine_tests = sum(serving_test_lines(ROOT / "tests" / f) for f in RENDERER_TESTS)
    print(f"  of which the two-engine renderer (any .qmd -> HTML): {engine} + its tests {engine_tests}; "
          f"without it: {src + qmd + tests - engine - engine_tests}")
    builders = sentence_builders()
    counted = [b for b in builders if b.split(":")[0] not in APART]
    print(f"sentence builders outside phrases (heuristic): {len(counted)} {counted}; "
          f"apart: {[f'{b} ({APART[b.split(chr(58))[0]]})' for b in builders if b not in counted]}")
    sizes = {n: len(p.read_text().splitlines()) for n, (p, _) in house.modules().items()}
    print(f"modules over 400 lines: {sorted(n for n, k in sizes.items() if k > house.MAX_MODULE_LINES)}")
    long = [f"{n}.{f.name}" for n, (_, t) in house.modules().items() for f in ast.walk(t)
            if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)) and f.end_lineno - f.lineno + 1 > 60]
    print(f"functions over 60 lines: {long}")
    graph, local = house.import_graph()
    print(f"import cycles: {house.cycles(graph)}")
    print(f"function-local remat imports: {local}")


if __name__ == "__main__":
    main()
