"""The subset of Quarto markdown both engines (real Quarto and the fallback) render alike: ``lint_qmd`` lists
what puts a .qmd outside it (front matter, cell options, labels and cross-references, divs, images with alt text,
hand-typed numbers in prose). The subset is described in remat.report's docstring."""

from __future__ import annotations

import re

from remat.report.qmd import (CALLOUTS, CELL_OPTIONS, CROSSREF_KINDS, EXECUTE_KEYS, FRONT_MATTER_KEYS,
                              HTML_FORMAT_KEYS, Cell, Prose, _blank, _line_of, _lineno, _mask_static_code,
                              _plain_prose, inline_exprs, parse_qmd)


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
    return problems + _lint_captions(text)


_CAPTION = re.compile(r"^\s*(#\|\s*(fig|tbl)-cap:|!\[|: )")
_QUOTED_EQUALS = re.compile(r"'[^'\n]*=[^'\n]*'")


def _lint_captions(text: str) -> list[str]:
    """A caption (``#| fig-cap:``, ``#| tbl-cap:``, an image's ``![…]``, a table's ``: …``) with two straight
    apostrophes and an "=" between them: Quarto 1.7 drops the spaces around that "=" (write ’ instead)."""
    return [f"line {n}: two straight apostrophes around '=' in a caption lose the spaces around it under Quarto; "
            "write ’ (U+2019) for the apostrophes" for n, line in enumerate(text.splitlines(), 1)
            if _CAPTION.match(line) and _QUOTED_EQUALS.search(line)]


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
    for key in ("fig-cap", "tbl-cap", "fig-alt"):
        if isinstance(opts.get(key), str):
            text = opts[key]
            problems += [f"{at}: {key}: {p.split(': ', 1)[1]}" for p in _lint_numbers(Prose(cell.line, text),
                                                                                 _plain_prose(text))]
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
    if "fig-cap" in opts and not (isinstance(opts.get("fig-alt"), str) and opts["fig-alt"].strip()):
        problems.append(f"{at}: a figure cell needs alt text: '#| fig-alt: what it shows'")
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
_SPAN = re.compile(r"\]\{(?!\.paper\})")
_PAPER_SPAN = re.compile(r"\[[^\[\]]*\]\{\.paper\}")
_TABLE_CAPTION = re.compile(r"^(?:Table)?:[ \t].*?\{(?P<attrs>[^{}]*)\}[ \t]*$", re.M)
_ATTR_TOKEN = re.compile(r'[^\s"=]+="[^"]*"|\S+')
_ANY_ID = re.compile(r"\{[^{}]*?#(?P<id>[A-Za-z][\w-]*)")
_REF = re.compile(r"(?<![\w@.\\])@(?P<key>[A-Za-z0-9_](?:[\w-]|[:.#$%&+?<>~/](?=\w))*)")


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
              (_SPAN, "bracketed span [text]{...} (only [a paper value]{.paper})"))
    for pattern, why in checks:
        problems += [f"{_line_of(block, text, m.start())}: {why}" for m in pattern.finditer(text)]
    problems += _lint_divs(block, text) + _lint_images(block, text, labels)
    problems += _lint_headings_tables(block, text, labels)
    return problems + _lint_numbers(block, text)


# Numbers a reader sees must come from the result tables (inline values) or be labelled paper values
# ([1,000-layer]{.paper}). Allowed as they stand: references (Table 4, Eq. 5 and 6, §4.1, Algorithm 3,
# ResNet-200, GPT-3, Llama 3), tokens that mix digits and letters (fp32, 2sbh, 22B, 1F1B), years, 16-bit,
# unit definitions (MiB = 2^20 bytes, GB = 10⁹). Cells' captions and alt texts are prose too.
_ATTRS = re.compile(r"\{[^{}\n]*\}")   # {#fig-x width=80%}: attributes, not prose
_NUMBER = re.compile(r"(?<![\w.])\d(?:[\d,.]*\d)?")
_NUMBER_ALLOWED = re.compile(r"""
    (?:\b(?:Tables?|Figures?|Eqs?\.|Equations?|Algorithms?|Appendix|Sections?|Llama|Titan)[ \t]|§|GPT-|ResNet-)
        \d+(?:\.\d+)*[a-z]?(?:[ \t]*(?:,|and|or|–|to)[ \t]*\d+(?:\.\d+)*[a-z]?)*
    | \b\d+[A-Za-z]\w* | \w*[A-Za-z]\d+\w* | \b(?:19|20)\d\d\b | \b\d+-(?:bit|byte)\b
    | \b(?:2|10)\^\d+\b | \b10[⁰¹²³⁴⁵⁶⁷⁸⁹]+                                  # units: 2^20, 10^9, 10⁹
""", re.X)


def _lint_numbers(block: Prose, text: str) -> list[str]:
    """Digits typed in prose (outside code, math, inline values, [..]{.paper} spans and the references and
    names of ``_NUMBER_ALLOWED``): a number a reader sees is computed at render time or a labelled paper value."""
    text = _NUMBER_ALLOWED.sub(_blank, _ATTRS.sub(_blank, _PAPER_SPAN.sub(_blank, text)))
    return [f"{_line_of(block, text, m.start())}: the number {m.group(0)} is typed in the prose: compute it "
            "(`{python} ...`), put a formula in $math$, or mark a paper value [..]{.paper}"
            for m in _NUMBER.finditer(text)]


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
        tokens = _ATTR_TOKEN.findall(m["attrs"] or "")
        for token in tokens:
            if token.startswith("#fig-"):
                problems += _define(token[1:], _lineno(block, text, m.start()), labels)
            elif not re.match(r'^(width|height)=\S+$|^fig-alt="[^"]+"$', token):
                problems.append(f"{at}: image attribute {token!r} (only #fig-..., width=, height=, fig-alt=\"...\")")
        if any(t.startswith("#fig-") for t in tokens) and not any(t.startswith("fig-alt=") for t in tokens):
            problems.append(f'{at}: figure image needs alt text: {{#fig-... fig-alt="what it shows"}}')
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


