"""Quarto markdown (.qmd): parse into front matter, code cells and prose (the subset both engines render alike
is checked by remat.report.lint; it is listed in remat.report's docstring)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field


REPORTS_DIR = "reports"
ENGINES = ("auto", "quarto", "fallback")
CELL_TIMEOUT_S = 1200

FRONT_MATTER_KEYS = {"title", "subtitle", "author", "date", "jupyter", "format", "execute"}
HTML_FORMAT_KEYS = {"toc", "toc-depth"}
EXECUTE_KEYS = {"echo", "warning", "output"}
CELL_OPTIONS = {"label", "echo", "output", "fig-cap", "fig-alt", "tbl-cap", "include", "warning"}
CALLOUTS = {"callout-note", "callout-warning", "callout-tip"}
CROSSREF_KINDS = ("fig", "tbl", "sec")


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
    problems: tuple[str, ...] = ()   # option lines that did not parse, '#|' after code, unclosed fence


@dataclass(frozen=True)
class Prose:
    """Markdown between cells (static code blocks included). ``line``: 1-based first line in the .qmd."""

    line: int
    text: str


@dataclass
class Qmd:
    """A parsed .qmd: front matter, then prose and cells in document order."""

    front: dict
    blocks: list = field(default_factory=list)
    problems: list = field(default_factory=list)   # front matter that does not parse


_FENCE = re.compile(r"^(?P<fence>`{3,}|~{3,})\s*(?P<info>[^`]*?)\s*$")
_ENGINE_INFO = re.compile(r"^\{\s*(?P<header>[A-Za-z][^}]*?)\s*\}$")   # {python}, {r}, {python echo=F}
_OPTION_LINE = re.compile(r"^#\s*\| ?")                                   # Quarto: ^#\s*\| ?


def parse_qmd(text: str) -> Qmd:
    """Split a .qmd into front matter (dict), prose blocks and code cells. Never raises on bad syntax:
    problems are recorded for ``lint_qmd``."""
    lines = text.splitlines()
    front, start, problems = _front_matter(lines)
    qmd = Qmd(front=front, problems=problems)
    prose: list[str] = []
    prose_line = start + 1
    i = start
    while i < len(lines):
        match = _FENCE.match(lines[i])
        info = _ENGINE_INFO.match(match["info"]) if match else None
        if match and info:
            if prose:
                qmd.blocks.append(Prose(prose_line, "\n".join(prose)))
            cell, i = _read_cell(lines, i, match["fence"], info["header"])
            qmd.blocks.append(cell)
            prose, prose_line = [], i + 1
            continue
        if match:   # a static code block: copied through, its content is not markdown
            end = _closing_fence(lines, i + 1, match["fence"])
            prose.extend(lines[i:end + 1])
            i = end + 1
            continue
        prose.append(lines[i])
        i += 1
    if prose:
        qmd.blocks.append(Prose(prose_line, "\n".join(prose)))
    return qmd


def _front_matter(lines: list[str]) -> tuple[dict, int, list[str]]:
    """(front matter dict, index of the first body line, problems)."""
    import yaml   # here, not at the top: remat.report.phrases must import on a GPU node without PyYAML
    if not lines or lines[0].strip() != "---":
        return {}, 0, ["line 1: no YAML front matter (--- title: ... ---)"]
    for end in range(1, len(lines)):
        if lines[end].strip() in ("---", "..."):
            try:
                front = yaml.safe_load("\n".join(lines[1:end])) or {}
            except yaml.YAMLError as exc:
                return {}, end + 1, [f"front matter: YAML does not parse ({exc})"]
            if not isinstance(front, dict):
                return {}, end + 1, ["front matter: not a YAML mapping"]
            return front, end + 1, []
    return {}, len(lines), ["front matter: no closing ---"]


def _closing_fence(lines: list[str], i: int, fence: str) -> int:
    """Index of the line closing ``fence`` (same character, at least as long); len(lines) if none."""
    closing = re.compile(rf"^{re.escape(fence[0])}{{{len(fence)},}}\s*$")
    while i < len(lines) and not closing.match(lines[i]):
        i += 1
    return i


def _read_cell(lines: list[str], i: int, fence: str, header: str) -> tuple[Cell, int]:
    """Parse the cell opening at ``lines[i]``; return it and the index after its closing fence."""
    import yaml
    end = _closing_fence(lines, i + 1, fence)
    body = lines[i + 1:end]
    problems = [] if end < len(lines) else [f"line {i + 1}: cell is never closed ({fence})"]
    n_opts = 0
    while n_opts < len(body) and _OPTION_LINE.match(body[n_opts]):
        n_opts += 1
    options: dict = {}
    if n_opts:
        source = "\n".join(_OPTION_LINE.sub("", line, count=1) for line in body[:n_opts])
        try:
            options = yaml.safe_load(source) or {}
        except yaml.YAMLError as exc:
            problems.append(f"line {i + 2}: '#|' options are not valid YAML ({exc.problem})")
        if not isinstance(options, dict):
            problems.append(f"line {i + 2}: '#|' options must be 'key: value' lines")
            options = {}
    for k, line in enumerate(body[n_opts:], start=i + 2 + n_opts):
        if _OPTION_LINE.match(line):
            problems.append(f"line {k}: '#|' option after code starts (Quarto ignores it)")
    code = "\n".join(body[n_opts:])
    return Cell(i + 1, header.strip(), options, code, tuple(problems)), end + 1


# --- the subset both engines accept ------------------------------------------------------------------------

def _blank(match: re.Match) -> str:
    """Same-length replacement that keeps newlines (so offsets still map to line numbers)."""
    return re.sub(r"[^\n]", " ", match.group(0))


_STATIC_FENCE_BLOCK = re.compile(r"^(`{3,}|~{3,})[^\n]*\n.*?^\1[`~]*[ \t]*$", re.M | re.S)
_INLINE_EXPR = re.compile(r"(?<!`)`\{(?P<engine>[A-Za-z]\w*)\}[ \t](?P<expr>[^`]+)`")
_CODE_SPAN = re.compile(r"(?<!`)(`+)(?!`).+?(?<!`)\1(?!`)", re.S)
_MATH = re.compile(r"\$\$.+?\$\$|(?<![\\$])\$(?=\S)[^$\n]*?(?<=\S)\$(?!\d)", re.S)


def _mask_static_code(text: str) -> str:
    """Blank static fenced code blocks (their text is not markdown)."""
    return _STATIC_FENCE_BLOCK.sub(_blank, text)


def inline_exprs(text: str) -> list[re.Match]:
    """Inline expressions `` `{engine} expr` `` of a prose block, outside static code blocks (Quarto's rule)."""
    return list(_INLINE_EXPR.finditer(_mask_static_code(text)))


def _plain_prose(text: str) -> str:
    """Prose with static code, inline code and math blanked: what markdown-level rules look at."""
    text = _CODE_SPAN.sub(_blank, _mask_static_code(text))
    return _MATH.sub(_blank, text)


def _lineno(block: Prose, text: str, pos: int) -> int:
    """The .qmd line of offset ``pos`` in ``text`` (the block's text or a same-length masked copy)."""
    return block.line + text.count("\n", 0, pos)


def _line_of(block: Prose, text: str, pos: int) -> str:
    return f"line {_lineno(block, text, pos)}"
