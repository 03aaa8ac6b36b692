"""Quarto markdown (.qmd): parse into front matter, code cells and prose (the subset both engines render alike
is checked by remat.report.lint; it is listed in remat.report's docstring)."""

from __future__ import annotations

import re
from dataclasses import dataclass


REPORTS_DIR = "reports"
ENGINES = ("auto", "quarto", "fallback")
CELL_TIMEOUT_S = 1200

EXECUTE_KEYS = {"echo", "warning", "output"}


class RenderError(RuntimeError):
    """A report failed to render (a cell raised, pandoc or quarto failed). Nothing was written."""

    exit_code = 1


# --- parsing ----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Cell:
    """A ```{engine} code cell. ``line`` is the 1-based line of its opening fence in the .qmd."""

    line: int
    header: str                      # the text between the braces: "python" for a valid cell
    options: dict                    # the leading '#|' lines, parsed as YAML (as Quarto does)
    code: str                        # the source without the option lines
    problems: tuple[str, ...] = ()   # option lines that did not parse


@dataclass(frozen=True)
class Prose:
    """Markdown between cells (static code blocks included). ``line``: 1-based first line in the .qmd."""

    line: int
    text: str


@dataclass
class Qmd:
    """A parsed .qmd: front matter, then prose and cells in document order."""

    front: dict
    blocks: list
    problems: list   # front matter that does not parse


_FENCE = re.compile(r"^(?P<fence>`{3,}|~{3,})\s*(?P<info>[^`]*?)\s*$")
_ENGINE_INFO = re.compile(r"^\{\s*(?P<header>[A-Za-z][^}]*?)\s*\}$")   # {python}, {r}, {python echo=F}
_OPTION_LINE = re.compile(r"^#\s*\| ?")                                   # Quarto: ^#\s*\| ?


def parse_qmd(text: str) -> Qmd:
    """Split a .qmd into front matter (dict), prose blocks and code cells. Never raises on bad syntax:
    problems are recorded for ``lint_qmd``."""
    lines = text.splitlines()
    front, start, problems = _front_matter(lines)
    blocks, prose, i = [], start, start   # prose: index of the first line of the prose being read
    while i < len(lines):
        match = _FENCE.match(lines[i])
        info = _ENGINE_INFO.match(match["info"]) if match else None
        if info:
            blocks += [Prose(prose + 1, "\n".join(lines[prose:i]))] if i > prose else []
            cell, i = _read_cell(lines, i, match["fence"], info["header"])
            blocks.append(cell)
            prose = i
        else:   # a static code block is prose (no cell opens inside it; its content is not markdown)
            i = _closing_fence(lines, i + 1, match["fence"]) + 1 if match else i + 1
    if prose < len(lines):
        blocks.append(Prose(prose + 1, "\n".join(lines[prose:])))
    return Qmd(front, blocks, problems)


def _front_matter(lines: list[str]) -> tuple[dict, int, list[str]]:
    """(front matter dict, index of the first body line, problems); no closing ``---``: no front matter."""
    ends = [i for i, line in enumerate(lines[1:], 1) if line.strip() in ("---", "...")]
    if not lines or lines[0].strip() != "---" or not ends:
        return {}, 0, []
    front, problems = _mapping("\n".join(lines[1:ends[0]]), "front matter")
    return front, ends[0] + 1, problems


def _mapping(source: str, where: str) -> tuple[dict, list[str]]:
    """``source`` parsed as a YAML mapping (as Quarto does), or {} and the problem."""
    import yaml   # here, not at the top: remat.report.phrases must import on a GPU node without PyYAML
    try:
        value = yaml.safe_load(source) or {}
    except yaml.YAMLError as exc:
        return {}, [f"{where}: not valid YAML ({getattr(exc, 'problem', exc)})"]
    return (value, []) if isinstance(value, dict) else ({}, [f"{where}: not YAML 'key: value' lines"])


def _closing_fence(lines: list[str], i: int, fence: str) -> int:
    """Index of the line closing ``fence`` (same character, at least as long); len(lines) if none."""
    closing = re.compile(rf"^{re.escape(fence[0])}{{{len(fence)},}}\s*$")
    while i < len(lines) and not closing.match(lines[i]):
        i += 1
    return i


def _read_cell(lines: list[str], i: int, fence: str, header: str) -> tuple[Cell, int]:
    """Parse the cell opening at ``lines[i]``; return it and the index after its closing fence."""
    end = _closing_fence(lines, i + 1, fence)
    body = lines[i + 1:end]
    n_opts = 0
    while n_opts < len(body) and _OPTION_LINE.match(body[n_opts]):
        n_opts += 1
    source = "\n".join(_OPTION_LINE.sub("", line, count=1) for line in body[:n_opts])
    options, problems = _mapping(source, f"line {i + 2}: '#|' options")
    return Cell(i + 1, header.strip(), options, "\n".join(body[n_opts:]), tuple(problems)), end + 1


# --- inline expressions --------------------------------------------------------------------------------

def _blank(match: re.Match) -> str:
    """Same-length replacement that keeps newlines (so offsets still map to line numbers)."""
    return re.sub(r"[^\n]", " ", match.group(0))


_STATIC_FENCE_BLOCK = re.compile(r"^(`{3,}|~{3,})[^\n]*\n.*?^\1[`~]*[ \t]*$", re.M | re.S)
_INLINE_EXPR = re.compile(r"(?<!`)`\{(?P<engine>[A-Za-z]\w*)\}[ \t](?P<expr>[^`]+)`")


def _mask_static_code(text: str) -> str:
    """Blank static fenced code blocks (their text is not markdown)."""
    return _STATIC_FENCE_BLOCK.sub(_blank, text)


def inline_exprs(text: str) -> list[re.Match]:
    """Inline expressions `` `{engine} expr` `` of a prose block, outside static code blocks (Quarto's rule)."""
    return list(_INLINE_EXPR.finditer(_mask_static_code(text)))
