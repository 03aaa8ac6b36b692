"""The subset of Quarto markdown both engines (real Quarto and the fallback) render alike: ``lint_qmd`` lists
what puts a .qmd outside it. The subset is described in remat.report's docstring; what either engine refuses
anyway (a remote or missing image, a bad format) is left to it."""

from __future__ import annotations

import re

from remat.report.qmd import EXECUTE_KEYS, Cell, Prose, _blank, _mask_static_code, inline_exprs, parse_qmd

FRONT_MATTER_KEYS = {"title", "subtitle", "author", "date", "jupyter", "format", "execute"}
CELL_OPTIONS = {"label", "echo", "output", "fig-cap", "fig-alt", "tbl-cap", "include", "warning"}


def lint_qmd(text: str) -> list[str]:
    """Problems that put a .qmd outside the subset both engines render alike (empty list: it is inside).

    Each problem is one line, "line N: ..." where a line is known. Pure function of the text; no I/O.
    """
    qmd = parse_qmd(text)
    execute = qmd.front.get("execute", {})
    if not isinstance(execute, dict):
        qmd.problems.append("front matter: execute must be a mapping (echo, warning, output)")
        execute = {}
    keys = sorted(set(qmd.front) - FRONT_MATTER_KEYS) + [f"execute.{k}" for k in sorted(set(execute) - EXECUTE_KEYS)]
    problems = qmd.problems + [f"front matter: key {key!r} is outside the subset" for key in keys]
    labels: dict[str, str] = {}
    for block in qmd.blocks:
        problems += _lint_cell(block, labels) if isinstance(block, Cell) else _lint_prose(block, labels)
    for block in (b for b in qmd.blocks if isinstance(b, Prose)):   # cross references, once every label is known
        plain = _plain_prose(block.text)
        for m in _REF.finditer(plain):
            if not m["key"].startswith(("fig-", "tbl-", "sec-")):
                problems.append(f"{_line_of(block, plain, m.start())}: @{m['key']}: only @fig-, @tbl-, @sec- "
                                "cross references (no citations)")
            elif m["key"] not in labels:
                problems.append(f"{_line_of(block, plain, m.start())}: @{m['key']} refers to an undefined label")
    return problems + _lint_captions(text)


_CODE_SPAN = re.compile(r"(?<!`)(`+)(?!`).+?(?<!`)\1(?!`)", re.S)
_MATH = re.compile(r"\$\$.+?\$\$|(?<![\\$])\$(?=\S)[^$\n]*?(?<=\S)\$(?!\d)", re.S)


def _plain_prose(text: str) -> str:
    """Prose with static code, inline code and math blanked (same length): what markdown-level rules look at."""
    return _MATH.sub(_blank, _CODE_SPAN.sub(_blank, _mask_static_code(text)))


def _line_of(block: Prose, text: str, pos: int) -> str:
    """"line N": the .qmd line of offset ``pos`` in ``text`` (the block's text or a same-length masked copy)."""
    line = block.line + text.count("\n", 0, pos)
    return f"line {line}"


_CAPTION = re.compile(r"^\s*(#\|\s*(fig|tbl)-cap:|!\[|: )")
_QUOTED_EQUALS = re.compile(r"'[^'\n]*=[^'\n]*'")


def _lint_captions(text: str) -> list[str]:
    """A caption (``#| fig-cap:``, ``#| tbl-cap:``, an image's ``![…]``, a table's ``: …``) with two straight
    apostrophes and an "=" between them: Quarto 1.7 drops the spaces around that "=" (write ’ instead)."""
    return [f"line {n}: two straight apostrophes around '=' in a caption lose the spaces around it under Quarto; "
            "write ’ (U+2019) for the apostrophes" for n, line in enumerate(text.splitlines(), 1)
            if _CAPTION.match(line) and _QUOTED_EQUALS.search(line)]


def _lint_cell(cell: Cell, labels: dict[str, str]) -> list[str]:
    at, opts = f"line {cell.line}", cell.options
    if cell.header != "python":
        return [f"{at}: ```{{{cell.header}}}: only ```{{python}} cells, with their options in '#|' lines"]
    problems = list(cell.problems)
    problems += [f"{at}: cell option {key!r} is outside the subset ({', '.join(sorted(CELL_OPTIONS))})"
                 for key in sorted(set(opts) - CELL_OPTIONS)]
    problems += [f"{at}: cell option {key} must be true or false" for key in ("echo", "include", "warning")
                 if not isinstance(opts.get(key, True), bool)]
    if opts.get("output", True) not in (True, False, "asis"):
        problems.append(f"{at}: cell option output must be true, false or asis")
    label = opts.get("label")
    for cap, prefix in (("fig-cap", "fig-"), ("tbl-cap", "tbl-")):
        if cap in opts and not isinstance(opts[cap], str):
            problems.append(f"{at}: {cap} must be a string")
        if (cap in opts) != str(label).startswith(prefix):
            problems.append(f"{at}: '#| {cap}: ...' and '#| label: {prefix}...' go together")
    if "fig-cap" in opts and not str(opts.get("fig-alt") or "").strip():
        problems.append(f"{at}: a figure cell needs alt text: '#| fig-alt: what it shows'")
    if label is not None:
        problems += _define(str(label), at, labels)
    for key in ("fig-cap", "tbl-cap", "fig-alt"):
        if isinstance(opts.get(key), str):
            problems += _lint_numbers(Prose(cell.line, opts[key]))
    if "matplotlib.use(" in cell.code:
        problems.append(f"{at}: matplotlib.use( in a cell hides figures under Quarto; leave the backend alone")
    return problems


def _define(label: str, at: str, labels: dict[str, str]) -> list[str]:
    if not re.fullmatch(r"[A-Za-z][\w-]*", label):
        return [f"{at}: label {label!r}: a letter, then letters, digits, - and _ only"]
    if label in labels:
        return [f"{at}: label {label} is already defined on {labels[label]}"]
    labels[label] = at
    return []


_DIV = re.compile(r"^:{3,}[ \t]*(?P<attrs>\S.*?)?[ \t]*:*[ \t]*$", re.M)
_CALLOUT = re.compile(r'\{\.callout-(note|warning|tip)( title="[^"]*")?\}|callout-(note|warning|tip)')
_IMAGE = re.compile(r"!\[(?:[^\[\]]|\[[^\]]*\])*\]\([^)]*\)\{(?P<attrs>[^{}]*)\}")
_ID = re.compile(r"\{[^{}]*?#(?P<id>[A-Za-z][\w-]*)")
_REF = re.compile(r"(?<![\w@.\\])@(?P<key>[A-Za-z0-9_](?:[\w-]|[:.#$%&+?<>~/](?=\w))*)")
_CHECKS = ((re.compile(r"\{\{[<%]"), "shortcodes {{< >}} are Quarto-only"),
           (re.compile(r"\]\{(?!\.paper\})"), "bracketed span [text]{...} (only [a paper value]{.paper})"))


def _lint_prose(block: Prose, labels: dict[str, str]) -> list[str]:
    """Markdown-level rules on one prose block; records the labels it defines (``{#fig-x}``, ``{#tbl-x}``,
    ``{#sec-x}`` on an image, a table's caption or a heading)."""
    text = _plain_prose(block.text)
    problems = [f"{_line_of(block, block.text, m.start())}: `{{{m['engine']}}}` inline: only `{{python}}` expressions"
                for m in inline_exprs(block.text) if m["engine"] != "python"]
    problems += [f"{_line_of(block, text, m.start())}: {why}"
                for pattern, why in _CHECKS for m in pattern.finditer(text)]
    problems += [f"{_line_of(block, text, m.start())}: fenced div {m['attrs']!r}: only ::: {{.callout-note}} / "
                 "{.callout-warning} / {.callout-tip}" for m in _DIV.finditer(text)
                 if m["attrs"] and not _CALLOUT.fullmatch(m["attrs"])]
    problems += [f'{_line_of(block, text, m.start())}: figure image needs alt text: {{#fig-... fig-alt="..."}}'
                 for m in _IMAGE.finditer(text) if "#fig-" in m["attrs"] and "fig-alt=" not in m["attrs"]]
    for m in _ID.finditer(text):
        if m["id"].startswith(("fig-", "tbl-", "sec-")):
            problems += _define(m["id"], _line_of(block, text, m.start()), labels)
        else:
            problems.append(f"{_line_of(block, text, m.start())}: label #{m['id']}: only fig-, tbl-, sec- labels")
    return problems + _lint_numbers(block) + _lint_example_markers(block, text)


_EXAMPLE_MARKER = re.compile(r"[ \t]*(?:\(@[\w-]+\)|@[\w-]+[.)])(?:[ \t]|$)")
_LIST_ITEM = re.compile(r"[ \t]*(?:[-*+]|\d+[.)])[ \t]")


def _lint_example_markers(block: Prose, text: str) -> list[str]:
    """A cross reference written "@tbl-x." / "@tbl-x)" / "(@tbl-x)" where pandoc (so Quarto too) can open a list:
    at a paragraph's start, or on a line of a list item. It becomes an empty numbered list, and every @tbl-x its
    number."""
    problems, listed, lines = [], False, text.split("\n")
    for i, line in enumerate(lines):
        first = i == 0 or not lines[i - 1].strip()
        listed = bool(_LIST_ITEM.match(line)) or (listed and not first) or (listed and line[:1] in " \t")
        if _EXAMPLE_MARKER.match(line) and (first or listed):
            problems.append(f"line {block.line + i}: {line.split()[0]} opening a line is a pandoc example list "
                            "(an empty numbered list in both engines): move the reference off the line's start")
    return problems


# Numbers a reader sees must come from the result tables (inline values) or be labelled paper values
# ([1,000-layer]{.paper}). Allowed as they stand: references (Table 4, Eq. 5 and 6, §4.1, Algorithm 3,
# ResNet-200, GPT-3, Llama 3), tokens that mix digits and letters (fp32, 2sbh, 22B, 1F1B), years, 16-bit,
# unit definitions (MiB = 2^20 bytes, GB = 10⁹). Cells' captions and alt texts are prose too.
_ATTRS = re.compile(r"\{[^{}\n]*\}")   # {#fig-x width=80%}: attributes, not prose
_PAPER_SPAN = re.compile(r"\[[^\[\]]*\]\{\.paper\}")
_NUMBER = re.compile(r"(?<![\w.])\d(?:[\d,.]*\d)?")
_NUMBER_ALLOWED = re.compile(r"""
    (?:\b(?:Tables?|Figures?|Eqs?\.|Equations?|Algorithms?|Appendix|Sections?|Llama|Titan)[ \t]|§|GPT-|ResNet-)
        \d+(?:\.\d+)*[a-z]?(?:[ \t]*(?:,|and|or|–|to)[ \t]*\d+(?:\.\d+)*[a-z]?)*
    | \b\d+[A-Za-z]\w* | \w*[A-Za-z]\d+\w* | \b(?:19|20)\d\d\b | \b\d+-(?:bit|byte)\b
    | \b(?:2|10)\^\d+\b | \b10[⁰¹²³⁴⁵⁶⁷⁸⁹]+                                  # units: 2^20, 10^9, 10⁹
""", re.X)


def _lint_numbers(block: Prose) -> list[str]:
    """Digits typed in prose (outside code, math, inline values, [..]{.paper} spans and the references and
    names of ``_NUMBER_ALLOWED``): a number a reader sees is computed at render time or a labelled paper value."""
    text = _NUMBER_ALLOWED.sub(_blank, _ATTRS.sub(_blank, _PAPER_SPAN.sub(_blank, _plain_prose(block.text))))
    return [f"{_line_of(block, text, m.start())}: the number {m.group(0)} is typed in the prose: compute it "
            "(`{python} ...`), put a formula in $math$, or mark a paper value [..]{.paper}"
            for m in _NUMBER.finditer(text)]
