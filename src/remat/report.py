"""Render the Quarto reports: `quarto render` when Quarto is on PATH, else a fallback (nbclient + pandoc).

    remat report [--engine auto|quarto|fallback] [NAME ...]     ->  reports/NAME.html (one self-contained file)

The Quarto project is the repository root (``_quarto.yml``): cells run with cwd = the root and read
``results/`` and ``figures/``; ``reports/NAME.qmd`` renders in place to ``reports/NAME.html``.

Both engines accept the same subset of Quarto markdown, which ``lint_qmd`` checks (``render`` refuses a
report outside it, so a report that renders in the fallback renders the same way under Quarto):

- YAML front matter with ``title`` (required) and only: subtitle, author, date, jupyter (``python3``),
  format (``html`` with toc / toc-depth), execute (echo / warning / output).
- Code cells are ```` ```{python} ```` only; ``#|`` options at the top of a cell, only label, echo, output
  (true / false / asis), fig-cap, tbl-cap, include, warning. A cell with fig-cap is labelled ``fig-…``, one
  with tbl-cap ``tbl-…``. No ``matplotlib.use(`` (it hides figures under Quarto's Jupyter engine).
- Inline values `` `{python} expr` `` (a str shows without quotes). Math ``$…$`` / ``$$…$$``.
- Cross references ``@fig-x``, ``@tbl-x``, ``@sec-x`` (also ``[-@fig-x]``) to labels defined in the file:
  headings ``## Title {#sec-x}``; images ``![caption](path){#fig-x}``; markdown tables with a caption line
  ``: caption {#tbl-x}``; cells with ``#| label: fig-x`` + ``#| fig-cap:`` or ``tbl-x`` + ``tbl-cap``.
- Image paths are relative to the .qmd (``../figures/x.png``) or to the project root (``/figures/x.png``),
  as in Quarto; never remote.
- Fenced divs only ``::: {.callout-note}`` / ``-warning`` / ``-tip`` (optional ``title="…"``).
- No shortcodes (``{{< >}}``), no raw LaTeX (``{=latex}`` blocks, ``\\begin{…}`` outside math), no spans
  ``[x]{…}``, no other attributes (``{.panel-tabset}``, ``layout-ncol``, ``fig-align``, …), no citations.

The fallback mirrors Quarto's Jupyter engine: cells run in order in one ipykernel (this interpreter) and each
inline expression is evaluated as a Jupyter ``user_expressions`` request after the cells above it, as
Quarto's ``notebook.py`` does; outputs become markdown; pandoc (pypandoc-binary) writes standalone HTML with
``--embed-resources --mathml --toc --number-sections`` and ``crossref.lua`` (Quarto-style "Figure N" refs).
"""

from __future__ import annotations

import base64
import datetime as _dt
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass, field
from importlib.resources import files
from pathlib import Path

import yaml

from remat.errors import UsageError
from remat.io import atomic_path

REPORTS_DIR = "reports"
ENGINES = ("auto", "quarto", "fallback")
CELL_TIMEOUT_S = 1200
# Reports the index lists first, in reading order; any other reports/*.qmd follow alphabetically.
REPORT_ORDER = ("chen2016", "korthikanti2022", "sweeps", "offload", "planner")

FRONT_MATTER_KEYS = {"title", "subtitle", "author", "date", "jupyter", "format", "execute"}
HTML_FORMAT_KEYS = {"toc", "toc-depth"}
EXECUTE_KEYS = {"echo", "warning", "output"}
CELL_OPTIONS = {"label", "echo", "output", "fig-cap", "tbl-cap", "include", "warning"}
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


def lint_qmd(text: str) -> list[str]:
    """Problems that put a .qmd outside the subset both engines render alike (empty list: it is inside).

    Each problem is one line, "line N: ..." where a line is known. The subset is described in this
    module's docstring (and in the notes to report authors). Pure function of the text; no I/O.
    """
    qmd = parse_qmd(text)
    problems = list(qmd.problems) + _lint_front(qmd.front)
    labels: dict[str, int] = {}
    for block in qmd.blocks:
        if isinstance(block, Cell):
            problems += _lint_cell(block, labels)
        else:
            problems += _lint_prose(block, labels)
    for block in qmd.blocks:
        if isinstance(block, Prose):
            problems += _lint_refs(block, labels)
    return problems


def _lint_front(front: dict) -> list[str]:
    problems = []
    if front and not front.get("title"):
        problems.append("front matter: a title is required")
    for key in sorted(set(front) - FRONT_MATTER_KEYS):
        problems.append(f"front matter: key {key!r} is outside the subset ({', '.join(sorted(FRONT_MATTER_KEYS))})")
    if "jupyter" in front and front["jupyter"] != "python3":
        problems.append("front matter: jupyter must be python3")
    problems += _lint_format(front.get("format", "html"))
    execute = front.get("execute", {})
    if not isinstance(execute, dict):
        problems.append("front matter: execute must be a mapping")
    else:
        for key in sorted(set(execute) - EXECUTE_KEYS):
            problems.append(f"front matter: execute.{key} is outside the subset (echo, warning, output)")
        problems += [f"front matter: execute.{k} must be true or false"
                     for k in sorted(set(execute) & EXECUTE_KEYS) if not isinstance(execute[k], bool)]
    return problems


def _lint_format(fmt) -> list[str]:
    """format: html, or format: {html: {toc: ..., toc-depth: ...}}."""
    if fmt == "html":
        return []
    html = fmt.get("html") if isinstance(fmt, dict) and set(fmt) == {"html"} else False
    if html is None:
        return []
    if not isinstance(html, dict):
        return ["front matter: format must be html (with only toc / toc-depth)"]
    return [f"front matter: format.html.{key} is outside the subset (toc, toc-depth)"
            for key in sorted(set(html) - HTML_FORMAT_KEYS)]


def _lint_cell(cell: Cell, labels: dict[str, int]) -> list[str]:
    at = f"line {cell.line}"
    if cell.header != "python":
        engine = cell.header.split()[0]
        if engine == "python":
            return [f"{at}: ```{{{cell.header}}}: put cell options in '#|' lines, not in the braces"]
        return [f"{at}: ```{{{engine}}} cell: only ```{{python}} cells are in the subset"]
    problems = list(cell.problems)
    opts = cell.options
    for key in sorted(set(opts) - CELL_OPTIONS):
        problems.append(f"{at}: cell option {key!r} is outside the subset ({', '.join(sorted(CELL_OPTIONS))})")
    for key in ("echo", "include", "warning"):
        if key in opts and not isinstance(opts[key], bool):
            problems.append(f"{at}: cell option {key} must be true or false")
    if "output" in opts and opts["output"] not in (True, False, "asis"):
        problems.append(f"{at}: cell option output must be true, false or asis")
    problems += _lint_cell_label(cell, labels)
    if "matplotlib.use(" in cell.code:
        problems.append(f"{at}: matplotlib.use( in a cell hides figures under Quarto; leave the backend alone")
    return problems


def _lint_cell_label(cell: Cell, labels: dict[str, int]) -> list[str]:
    at, opts = f"line {cell.line}", cell.options
    label = opts.get("label")
    problems = []
    for cap, prefix in (("fig-cap", "fig-"), ("tbl-cap", "tbl-")):
        if cap in opts and not isinstance(opts[cap], str):
            problems.append(f"{at}: {cap} must be a string")
        if cap in opts and not (isinstance(label, str) and label.startswith(prefix)):
            problems.append(f"{at}: a cell with {cap} needs '#| label: {prefix}...'")
        if isinstance(label, str) and label.startswith(prefix) and cap not in opts:
            problems.append(f"{at}: cell label {label} needs '#| {cap}: ...'")
    if label is None:
        return problems
    if not isinstance(label, str) or not re.fullmatch(r"[A-Za-z][\w-]*", label):
        return problems + [f"{at}: cell label {label!r} must be letters, digits, '-' or '_'"]
    return problems + _define(label, cell.line, labels)


def _define(label: str, line: int, labels: dict[str, int]) -> list[str]:
    if label in labels:
        return [f"line {line}: label {label} is already defined on line {labels[label]}"]
    labels[label] = line
    return []


_SHORTCODE = re.compile(r"\{\{[<%]")
_RAW_FENCE = re.compile(r"^(`{3,}|~{3,})\s*\{=(\w+)\}", re.M)
_RAW_INLINE = re.compile(r"`\{=(\w+)\}")
_TEX_ENV = re.compile(r"\\begin\{")
_DIV = re.compile(r"^:{3,}[ \t]*(?P<attrs>\S.*?)?[ \t]*:*[ \t]*$", re.M)
_HEADING = re.compile(r"^#{1,6}[ \t].*?\{(?P<attrs>[^{}]*)\}[ \t]*$", re.M)
_IMAGE = re.compile(r"!\[(?P<cap>(?:[^\[\]]|\[[^\]]*\])*)\]\((?P<src>[^)\s]*)[^)]*\)(?:\{(?P<attrs>[^{}]*)\})?")
_LINK_ATTRS = re.compile(r"(?<!!)\[[^\]]*\]\([^)]*\)\{")
_SPAN = re.compile(r"\]\{")
_TABLE_CAPTION = re.compile(r"^(?:Table)?:[ \t].*?\{(?P<attrs>[^{}]*)\}[ \t]*$", re.M)
_ANY_ID = re.compile(r"\{[^{}]*?#(?P<id>[A-Za-z][\w-]*)")
_REF = re.compile(r"(?<![\w@.\\])@(?P<key>[A-Za-z0-9_](?:[\w-]|[:.#$%&+?<>~/](?=\w))*)")


def _lineno(block: Prose, text: str, pos: int) -> int:
    """The .qmd line of offset ``pos`` in ``text`` (the block's text or a same-length masked copy)."""
    return block.line + text.count("\n", 0, pos)


def _line_of(block: Prose, text: str, pos: int) -> str:
    return f"line {_lineno(block, text, pos)}"


def _lint_prose(block: Prose, labels: dict[str, int]) -> list[str]:
    """Markdown-level rules on one prose block; records the labels it defines."""
    raw = _mask_static_code(block.text)
    text = _plain_prose(block.text)
    problems = []
    for m in _RAW_FENCE.finditer(block.text):
        if m[2] != "html":
            problems.append(f"{_line_of(block, block.text, m.start())}: raw {{={m[2]}}} block (only {{=html}})")
    for m in _RAW_INLINE.finditer(raw):
        if m[1] != "html":
            problems.append(f"{_line_of(block, raw, m.start())}: raw inline {{={m[1]}}} (only {{=html}})")
    for m in inline_exprs(block.text):
        if m["engine"] != "python":
            problems.append(f"{_line_of(block, raw, m.start())}: inline `{{{m['engine']}}} ...`: only {{python}}")
    checks = ((_SHORTCODE, "shortcodes {{< >}} are Quarto-only"),
              (_TEX_ENV, "raw LaTeX (\\begin{...}) outside math"),
              (_LINK_ATTRS, "attributes on a link"),
              (_SPAN, "bracketed span [text]{...}"))
    for pattern, why in checks:
        problems += [f"{_line_of(block, text, m.start())}: {why}" for m in pattern.finditer(text)]
    problems += _lint_divs(block, text) + _lint_images(block, text, labels)
    problems += _lint_headings_tables(block, text, labels)
    return problems


def _lint_divs(block: Prose, text: str) -> list[str]:
    problems = []
    for m in _DIV.finditer(text):
        attrs = (m["attrs"] or "").strip()
        if not attrs:
            continue   # a closing fence
        inner = attrs[1:-1] if attrs.startswith("{") and attrs.endswith("}") else attrs
        tokens = re.findall(r'[^\s"=]+="[^"]*"|\S+', inner)
        classes = [t.lstrip(".") for t in tokens if not t.startswith("title=")]
        if len(classes) != 1 or classes[0] not in CALLOUTS:
            problems.append(f"{_line_of(block, text, m.start())}: fenced div {attrs!r}: only "
                            "::: {.callout-note} / {.callout-warning} / {.callout-tip}")
    return problems


def _lint_images(block: Prose, text: str, labels: dict[str, int]) -> list[str]:
    problems = []
    for m in _IMAGE.finditer(text):
        at = _line_of(block, text, m.start())
        src = m["src"]
        if re.match(r"^[a-z]+://", src):
            problems.append(f"{at}: remote image {src} (reports render offline)")
        elif re.match(r"^(figures|results)/", src):
            problems.append(f"{at}: image path {src} is relative to reports/ under Quarto: "
                            f"write ../{src} (or /{src}, from the project root)")
        for token in (m["attrs"] or "").split():
            if token.startswith("#fig-"):
                problems += _define(token[1:], _lineno(block, text, m.start()), labels)
            elif not re.match(r"^(width|height)=\S+$", token):
                problems.append(f"{at}: image attribute {token!r} (only #fig-..., width=, height=)")
    return problems


def _lint_headings_tables(block: Prose, text: str, labels: dict[str, int]) -> list[str]:
    problems = []
    for pattern, id_prefix, ok_classes in ((_HEADING, "#sec-", {".unnumbered", ".unlisted", "-"}),
                                            (_TABLE_CAPTION, "#tbl-", set())):
        for m in pattern.finditer(text):
            at = _line_of(block, text, m.start())
            for token in m["attrs"].split():
                if token.startswith(id_prefix):
                    problems += _define(token[1:], _lineno(block, text, m.start()), labels)
                elif token not in ok_classes:
                    problems.append(f"{at}: attribute {token!r} (only {id_prefix}..."
                                    f"{', ' + ', '.join(sorted(ok_classes)) if ok_classes else ''})")
    for m in _ANY_ID.finditer(text):
        if not m["id"].startswith(("fig-", "tbl-", "sec-")):
            problems.append(f"{_line_of(block, text, m.start())}: label #{m['id']}: only fig-, tbl-, sec- labels")
    return problems


def _lint_refs(block: Prose, labels: dict[str, int]) -> list[str]:
    text = _plain_prose(block.text)
    problems = []
    for m in _REF.finditer(text):
        key, at = m["key"], _line_of(block, text, m.start())
        if not key.startswith(tuple(f"{k}-" for k in CROSSREF_KINDS)):
            problems.append(f"{at}: @{key}: only @fig-, @tbl-, @sec- cross references (no citations)")
        elif key not in labels:
            problems.append(f"{at}: @{key} refers to an undefined label")
    return problems


# --- render: choosing files and engine ---------------------------------------------------------------------

def project_root(start: Path | None = None) -> Path:
    """The Quarto project root: the nearest folder at or above ``start`` (default: cwd) with _quarto.yml.

    Raises UsageError("reports") when there is none (run `remat report` inside the repository).
    """
    start = (start or Path.cwd()).resolve()
    for folder in (start, *start.parents):
        if (folder / "_quarto.yml").is_file():
            return folder
    raise UsageError("reports", f"no _quarto.yml in {start} or above; run `remat report` in the repository")


def report_sources(root: Path, names: list[str] | None = None) -> list[Path]:
    """The .qmd files to render: ``reports/NAME.qmd`` for each name (``NAME``, ``NAME.qmd`` or
    ``reports/NAME.qmd`` accepted), or every ``reports/*.qmd`` with ``index`` last (it links the others).

    Raises UsageError("NAME") for a name with no .qmd.
    """
    folder = root / REPORTS_DIR
    available = sorted(p.stem for p in folder.glob("*.qmd"))
    wanted = [Path(n).stem if n.endswith(".qmd") else n for n in names] if names else available
    for name in wanted:
        if name not in available:
            raise UsageError("NAME", f"no {REPORTS_DIR}/{name}.qmd (available: {', '.join(available) or 'none'})")
    wanted = list(dict.fromkeys(wanted))
    if not names:
        wanted.sort(key=lambda n: n == "index")   # stable: index last
    return [folder / f"{name}.qmd" for name in wanted]


def render(names: list[str] | None = None, engine: str = "auto", root: str | Path | None = None,
           timeout: int = CELL_TIMEOUT_S) -> list[Path]:
    """Render reports to ``reports/NAME.html`` (self-contained: figures embedded, MathML); return the paths.

    engine: "auto" (Quarto when a ``quarto`` binary is on PATH, else the fallback), "quarto", "fallback".
    root: the project root (default: the folder with _quarto.yml at or above cwd). timeout: seconds per cell.
    Every selected .qmd is linted first (``lint_qmd``); nothing is rendered if one is outside the subset.
    Raises UsageError("--engine") for an unknown engine or "quarto" without Quarto on PATH,
    UsageError("NAME") for an unknown report, UsageError("reports/NAME.qmd") listing lint problems,
    RenderError when a cell raises or pandoc/quarto fails (that report's HTML is not written).
    """
    quarto = quarto_binary(engine)
    root = Path(root).resolve() if root else project_root()
    sources = report_sources(root, names)
    for qmd in sources:
        problems = lint_qmd(qmd.read_text(encoding="utf-8"))
        if problems:
            raise UsageError(str(qmd.relative_to(root)), "outside the Quarto subset: " + "; ".join(problems))
    if quarto is None:
        return [render_fallback(qmd, root, timeout) for qmd in sources]
    return [render_quarto(qmd, root, quarto) for qmd in sources]


def quarto_binary(engine: str) -> str | None:
    """The ``quarto`` executable ``engine`` asks for, or None for the fallback: "auto" -> Quarto when on
    PATH; "quarto" -> Quarto (UsageError("--engine") when not on PATH); "fallback" -> None."""
    if engine not in ENGINES:
        raise UsageError("--engine", f"{engine!r} is not one of {', '.join(ENGINES)}")
    quarto = shutil.which("quarto") if engine != "fallback" else None
    if engine == "quarto" and not quarto:
        raise UsageError("--engine", "quarto is not on PATH (use --engine fallback or auto)")
    return quarto


def render_quarto(qmd: Path, root: Path, quarto: str = "quarto") -> Path:
    """`quarto render reports/NAME.qmd` in the project root (settings from _quarto.yml); returns the HTML
    path. Raises RenderError when quarto exits non-zero or writes no HTML."""
    rel = qmd.relative_to(root)
    proc = subprocess.run([quarto, "render", str(rel)], cwd=root)
    out = qmd.with_suffix(".html")
    if proc.returncode != 0 or not out.exists():
        raise RenderError(f"{rel}: quarto render failed (exit {proc.returncode})")
    return out


# --- render: the fallback --------------------------------------------------------------------------------

def render_fallback(qmd: Path, root: Path, timeout: int = CELL_TIMEOUT_S) -> Path:
    """Render one .qmd without Quarto: run its cells and inline expressions in one ipykernel (cwd = root),
    turn outputs into markdown, convert with pandoc + crossref.lua, write ``qmd.with_suffix('.html')``
    atomically. Returns that path. Raises RenderError (cell error, inline error, pandoc failure)."""
    doc = parse_qmd(qmd.read_text(encoding="utf-8"))
    settings = _settings(root, doc.front)
    rel = qmd.relative_to(root) if qmd.is_relative_to(root) else qmd
    parts = []
    with _kernel(root, timeout) as client:
        for block in doc.blocks:
            if isinstance(block, Cell):
                outputs = _execute_cell(client, block, rel)
                try:
                    parts.append(cell_markdown(block, outputs, _cell_options(block, settings)))
                except RenderError as exc:
                    raise RenderError(f"{rel}: {exc}") from None
            else:
                parts.append(_substitute_inline(client, block, rel))
    out = qmd.with_suffix(".html")
    _pandoc(_title_block(doc.front) + "\n\n".join(parts), out, qmd.parent, root, settings, rel)
    return out


def _settings(root: Path, front: dict) -> dict:
    """Effective options: defaults < _quarto.yml (format.html, execute) < the document's front matter."""
    settings = {"toc": True, "toc-depth": 3, "echo": True, "warning": True, "output": True}
    project = root / "_quarto.yml"
    layers = [yaml.safe_load(project.read_text(encoding="utf-8")) or {}] if project.is_file() else []
    for layer in (*layers, front):
        fmt = layer.get("format")
        html = fmt.get("html") if isinstance(fmt, dict) else None
        settings.update({k: v for k, v in (html or {}).items() if k in HTML_FORMAT_KEYS})
        settings.update({k: v for k, v in (layer.get("execute") or {}).items() if k in EXECUTE_KEYS})
    return settings


def _cell_options(cell: Cell, settings: dict) -> dict:
    opts = {"echo": settings["echo"], "warning": settings["warning"], "output": settings["output"],
            "include": True}
    opts.update(cell.options)
    return opts


# Quarto's Jupyter defaults for HTML: fig-width 7in, fig-height 5in, fig-dpi 96, fig-format retina.
_KERNEL_ARGS = ["--InlineBackend.figure_formats=retina",
                "--InlineBackend.rc={'figure.figsize': (7.0, 5.0), 'figure.dpi': 96}"]


@contextmanager
def _kernel(root: Path, timeout: int):
    """An nbclient NotebookClient with a started ipykernel of THIS interpreter (ipykernel's native spec,
    not whatever 'python3' kernelspec a user dir holds), cwd = ``root``, talking over IPC sockets in a
    temp dir; shut down on exit."""
    import nbformat
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import AsyncKernelManager
    from nbclient import NotebookClient

    with tempfile.TemporaryDirectory(prefix="remat-kernel-") as sockets:   # IPC: local, no open TCP ports
        km = AsyncKernelManager(kernel_name="python3", kernel_spec_manager=KernelSpecManager(kernel_dirs=[]),
                                transport="ipc", ip=str(Path(sockets) / "kernel"))
        client = NotebookClient(nbformat.v4.new_notebook(), km=km, timeout=timeout,
                                extra_arguments=_KERNEL_ARGS)
        # Inline figures even where the caller's environment sets MPLBACKEND (e.g. Agg for the figure rules).
        env = {**os.environ, "MPLBACKEND": "module://matplotlib_inline.backend_inline"}
        with client.setup_kernel(cwd=str(root), env=env, cleanup_kc=True):
            yield client


_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def _execute_cell(client, cell: Cell, rel: Path) -> list:
    """Run one cell; its outputs (nbformat output nodes). Raises RenderError naming the .qmd line."""
    import nbformat
    from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError

    node = nbformat.v4.new_code_cell(cell.code)
    client.nb.cells.append(node)
    try:
        return client.execute_cell(node, len(client.nb.cells) - 1).outputs
    except (CellExecutionError, CellTimeoutError, DeadKernelError) as exc:
        label = f" ({cell.options['label']})" if "label" in cell.options else ""
        raise RenderError(f"{rel}: the cell at line {cell.line}{label} raised:\n{_ANSI.sub('', str(exc))}") from None


def _substitute_inline(client, block: Prose, rel: Path) -> str:
    """The prose with each `` `{python} expr` `` replaced by its value, evaluated now (after the cells
    above) through a Jupyter execute request with ``user_expressions`` — Quarto's method."""
    matches = inline_exprs(block.text)
    if not matches:
        return block.text
    exprs = {str(i): m["expr"] for i, m in enumerate(matches)}
    reply = client.wait_for_reply(client.kc.execute("", store_history=False, user_expressions=exprs))
    if reply is None:
        raise RenderError(f"{rel}: line {block.line}: no reply to the inline expressions (timeout)")
    results = reply["content"].get("user_expressions", {})
    text, offset = block.text, 0
    for i, m in enumerate(matches):
        value = _inline_value(results.get(str(i), {}), m, block, rel)
        text = text[:m.start() + offset] + value + text[m.end() + offset:]
        offset += len(value) - (m.end() - m.start())
    return text


def _inline_value(result: dict, match: re.Match, block: Prose, rel: Path) -> str:
    """Markdown for one user_expressions result: text/markdown as is, else text/plain (a str without its
    quotes, as Quarto shows it). Raises RenderError for an error or a value with no text form."""
    where = f"{rel}: {_line_of(block, block.text, match.start())}: `{{python}} {match['expr']}`"
    if result.get("status") != "ok":
        raise RenderError(f"{where} raised {result.get('ename')}: {result.get('evalue')}")
    data = result.get("data", {})
    if "text/markdown" in data:
        return data["text/markdown"]
    if "text/plain" not in data:
        raise RenderError(f"{where}: the value has no text/plain or text/markdown form")
    text = data["text/plain"]
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        text = text[1:-1]
    return text


# --- outputs -> markdown ----------------------------------------------------------------------------------

_MIME_ORDER = ("text/markdown", "text/html", "image/svg+xml", "image/png", "image/jpeg", "text/plain")


def _fenced(text: str, info: str) -> str:
    """A fenced code block whose fence is longer than any backtick run inside ``text``."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{info}\n{text.rstrip(chr(10))}\n{fence}"


def _image_markdown(mime: str, data, metadata: dict) -> str:
    payload = data.encode() if mime == "image/svg+xml" else None
    b64 = base64.b64encode(payload).decode() if payload is not None else "".join(str(data).split())
    size = metadata.get(mime, {}) if isinstance(metadata, dict) else {}
    attrs = " ".join(f"{k}={int(size[k])}" for k in ("width", "height") if k in size)
    return f"![](data:{mime};base64,{b64})" + (f"{{{attrs}}}" if attrs else "")


def output_markdown(output, asis: bool = False) -> str:
    """Markdown for one Jupyter output: images as embedded data URIs, text/markdown as markdown,
    text/html raw, text/plain and streams in code blocks (raw markdown when ``asis``)."""
    if output["output_type"] == "stream":
        return output["text"] if asis else _fenced(output["text"], " {.cell-output}")
    data = output.get("data", {})
    mime = next((m for m in _MIME_ORDER if m in data), None)
    if mime is None:
        return ""
    if mime.startswith("image/"):
        return _image_markdown(mime, data[mime], output.get("metadata", {}))
    if mime == "text/markdown" or asis:
        return data[mime]
    if mime == "text/html":
        return _fenced(data[mime], "{=html}")
    return _fenced(data[mime], " {.cell-output}")


def _is_image(output) -> bool:
    return output["output_type"] != "stream" and any(m.startswith("image/") for m in output.get("data", {}))


def cell_markdown(cell: Cell, outputs: list, opts: dict) -> str:
    """Markdown for an executed cell under its options (echo, output, include, warning, label + fig-cap /
    tbl-cap): a labelled figure cell's images go in a ``::: {#fig-x}`` div, a table cell's outputs in
    ``::: {#tbl-x}``, the caption as the div's last paragraph (crossref.lua numbers them)."""
    if not opts["include"]:
        return ""
    parts = [_fenced(cell.code, " {.python .cell-code}")] if opts["echo"] and cell.code.strip() else []
    if opts["output"] is False:
        return "\n\n".join(parts)
    kept = [o for o in outputs if opts["warning"] or not (o["output_type"] == "stream" and o["name"] == "stderr")]
    asis = opts["output"] == "asis"
    label = opts.get("label", "")
    if "fig-cap" in opts:
        images = [output_markdown(o) for o in kept if _is_image(o)]
        if not images:
            raise RenderError(f"line {cell.line}: cell {label} has a fig-cap but made no figure")
        parts += [output_markdown(o, asis) for o in kept if not _is_image(o)]
        parts.append(_float(label, images, opts["fig-cap"]))
    elif "tbl-cap" in opts:
        parts.append(_float(label, [output_markdown(o, asis) for o in kept], opts["tbl-cap"]))
    else:
        parts += [output_markdown(o, asis) for o in kept]
    return "\n\n".join(p for p in parts if p)


def _float(label: str, body: list[str], caption: str) -> str:
    inner = "\n\n".join(b for b in body if b)
    caption = " ".join(caption.split())
    return f":::::: {{#{label}}}\n{inner}\n\n{caption}\n::::::"


# --- pandoc ------------------------------------------------------------------------------------------------

_CSS = """<style>
body { max-width: 50em; }
figure { margin: 1.5em 0; }
figure img, figure svg { max-width: 100%; height: auto; display: block; margin: 0 auto; }
figcaption, table caption, .table-caption { font-size: 0.92em; color: #333; text-align: left; margin: .4em 0; }
.cell-output { background: #f6f8fa; border-left: 3px solid #d0d7de; }
div.sourceCode.cell-code { border-left: 3px solid #9ab; }
table { border-collapse: collapse; margin: 1em 0; font-variant-numeric: tabular-nums; font-size: 0.92em; }
th, td { padding: 0.25em 0.7em; border-bottom: 1px solid #d8dde3; }
thead th { border-bottom: 2px solid #999; }
.header-section-number { margin-right: 0.4em; color: #666; }
.callout { border-left: 5px solid #6c757d; background: #f8f9fa; padding: 0.4em 1em; margin: 1.2em 0;
           border-radius: 4px; }
.callout-title { font-weight: 600; margin-bottom: 0.2em; }
.callout-note { border-left-color: #0d6efd; } .callout-warning { border-left-color: #e0a800; }
.callout-tip { border-left-color: #198754; }
a.quarto-xref { text-decoration: none; }
</style>"""


def _title_block(front: dict) -> str:
    """Front matter for pandoc: title, subtitle, author, date (date: today -> the ISO date)."""
    meta = {k: front[k] for k in ("title", "subtitle", "author", "date") if k in front}
    if str(meta.get("date", "")).lower() in ("today", "now", "last-modified"):
        meta["date"] = _dt.date.today().isoformat()
    meta = {k: v if isinstance(v, (str, list)) else str(v) for k, v in meta.items()}
    return f"---\n{yaml.safe_dump(meta, allow_unicode=True, sort_keys=False)}---\n\n" if meta else ""


def _pandoc(markdown: str, out: Path, doc_dir: Path, root: Path, settings: dict, rel: Path) -> None:
    """markdown -> standalone, self-contained HTML at ``out`` (atomic). Relative resources resolve from the
    .qmd's folder (pandoc runs there, as under Quarto), ``/x`` from the project root. Warnings (e.g. a
    missing image) are errors. Raises RenderError."""
    import pypandoc

    args = ["--standalone", "--embed-resources", "--mathml", "--number-sections", "--fail-if-warnings",
            f"--resource-path={doc_dir}", f"--lua-filter={files('remat') / 'crossref.lua'}",
            f"--metadata=remat-project-root:{root}", f"--variable=header-includes:{_CSS}",
            "--variable=lang:en"]
    if settings.get("toc"):
        args += ["--toc", f"--toc-depth={int(settings.get('toc-depth', 3))}"]
    with atomic_path(out) as tmp:
        try:
            pypandoc.convert_text(markdown, "html5", format="markdown", extra_args=args, outputfile=str(tmp),
                                  cworkdir=str(doc_dir))
        except RuntimeError as exc:
            raise RenderError(f"{rel}: pandoc failed: {exc}") from None


# --- provenance and index, for report cells -------------------------------------------------------------

_PROVENANCE_COLUMNS = (("device_name", "device"), ("dtype", "dtype"), ("git_commit", "git commit"),
                       ("torch_version", "torch"), ("numpy_version", "numpy"), ("host", "host"))


def provenance_markdown(*tables) -> str:
    """Markdown (a bullet list) saying where the report's numbers come from and how it was rendered.

    tables: result tables (pandas DataFrames) whose rows carry the provenance columns of
    ``remat.measure.provenance.provenance``; for each column present, the distinct values are listed, and
    the range of ``timestamp``. Then the render itself: UTC time, git commit, host, Python / torch / numpy /
    pandas / matplotlib versions, and the device the render ran on. Use in a final cell:
    ``#| output: asis`` + ``print(provenance_markdown(df))``, or ``Markdown(provenance_markdown(df))``.
    """
    from remat.measure.provenance import provenance

    lines = ["**Provenance**", ""]
    for column, name in _PROVENANCE_COLUMNS:
        values = sorted({str(v) for t in tables if column in t for v in t[column].dropna().unique()})
        if values:
            lines.append(f"- results, {name}: {', '.join(f'`{v}`' for v in values)}")
    stamps = sorted(str(v) for t in tables if "timestamp" in t for v in t["timestamp"].dropna())
    if stamps:
        lines.append(f"- results measured: {stamps[0]} to {stamps[-1]}")
    now = provenance(device=_render_device())
    lines += [f"- rendered: {now['timestamp']} on `{now['host']}` ({now['device_name']}),"
              f" git commit `{now['git_commit']}`",
              f"- versions: Python {platform.python_version()}, torch {now['torch_version']},"
              f" numpy {now['numpy_version']}, {_versions('pandas', 'matplotlib')}"]
    return "\n".join(lines) + "\n"


def _render_device() -> str:
    try:
        import torch
        return "cuda" if torch.cuda.is_available() else "cpu"
    except ImportError:
        return "cpu"


def _versions(*modules: str) -> str:
    from importlib.metadata import PackageNotFoundError, version
    out = []
    for name in modules:
        try:
            out.append(f"{name} {version(name)}")
        except PackageNotFoundError:
            out.append(f"{name} (not installed)")
    return ", ".join(out)


def index_markdown(root: str | Path = ".") -> str:
    """Markdown list of the reports in ``root/reports``: a link to NAME.html for each report rendered at
    this moment, "not rendered yet" for the others; ``REPORT_ORDER`` first, then the rest alphabetically.
    Titles come from each .qmd's front matter. (Used by reports/index.qmd.)"""
    folder = Path(root) / REPORTS_DIR
    names = sorted((p.stem for p in folder.glob("*.qmd") if p.stem != "index"),
                   key=lambda n: (REPORT_ORDER.index(n) if n in REPORT_ORDER else len(REPORT_ORDER), n))
    lines = []
    for name in names:
        title = parse_qmd((folder / f"{name}.qmd").read_text(encoding="utf-8")).front.get("title", name)
        if (folder / f"{name}.html").exists():
            lines.append(f"- [{title}]({name}.html)")
        else:
            lines.append(f"- {title} — not rendered yet (`remat report {name}`)")
    return "\n".join(lines) + "\n" if lines else "No reports yet.\n"


if __name__ == "__main__":   # pragma: no cover - `python -m remat.report NAME` == `remat report NAME`
    print("\n".join(str(p) for p in render(sys.argv[1:] or None)))
