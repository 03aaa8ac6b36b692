"""Render one .qmd without Quarto, as Quarto's Jupyter engine does: cells run in order in one ipykernel (this
interpreter, nbclient) and each inline expression is evaluated as a Jupyter ``user_expressions`` request after the
cells above it (Quarto's ``notebook.py``); outputs become markdown; pandoc (pypandoc-binary) writes one
self-contained HTML file (``--embed-resources --mathml --toc --number-sections``) with ``crossref.lua``
(Quarto-style "Figure N" refs, alt text from fig-alt), ``footer.lua`` and remat's page (``page.html`` +
``page.css``: title block, table of contents in a side column, wide tables scrolling, as a Quarto page)."""

from __future__ import annotations

import base64
import datetime as _dt
import os
import re
import tempfile
from contextlib import contextmanager
from importlib.resources import files
from pathlib import Path

from remat.errors import UsageError
from remat.io import atomic_path
from remat.report.qmd import CELL_TIMEOUT_S, EXECUTE_KEYS, Cell, Prose, RenderError, inline_exprs, parse_qmd


# --- render: the fallback --------------------------------------------------------------------------------

def render_fallback(qmd: Path, root: Path, timeout: int = CELL_TIMEOUT_S) -> Path:
    """Render one .qmd without Quarto: run its cells and inline expressions in one ipykernel (cwd = root),
    turn outputs into markdown, convert with pandoc + crossref.lua, write ``qmd.with_suffix('.html')``
    atomically. Returns that path. Raises RenderError (cell error, inline error, pandoc failure)."""
    front, out = parse_qmd(qmd.read_text(encoding="utf-8")).front, qmd.with_suffix(".html")
    rel = qmd.relative_to(root) if qmd.is_relative_to(root) else qmd
    body = _title_block(front) + executed_markdown(qmd, root, timeout)
    _pandoc(body, out, qmd.parent, root, _settings(root, front), rel)
    return out


def executed_markdown(qmd: Path, root: Path, timeout: int = CELL_TIMEOUT_S) -> str:
    """The body of one .qmd after execution, before pandoc: every cell's outputs and every inline value as
    markdown (what ``render_fallback`` converts; ``benchmarks/report_markdown.py`` compares it across
    changes). Raises RenderError (cell error, inline error)."""
    doc = parse_qmd(qmd.read_text(encoding="utf-8"))
    settings = _settings(root, doc.front)
    rel = qmd.relative_to(root) if qmd.is_relative_to(root) else qmd
    parts = []
    with _kernel(root, timeout) as client:
        for block in doc.blocks:
            if isinstance(block, Cell):
                opts = {"include": True, **{k: settings[k] for k in EXECUTE_KEYS}, **block.options}
                parts.append(cell_markdown(block, _execute_cell(client, block, rel), opts, rel))
            else:
                parts.append(_substitute_inline(client, block, rel))
    return "\n\n".join(parts)


def _settings(root: Path, front: dict) -> dict:
    """Effective options: defaults < _quarto.yml (format.html, execute) < the document's front matter."""
    import yaml   # here, not at the top: remat.report imports on a GPU node without PyYAML
    settings = {"toc": True, "toc-depth": 3, "echo": True, "warning": True, "output": True}
    project = root / "_quarto.yml"
    layers = [yaml.safe_load(project.read_text(encoding="utf-8")) or {}] if project.is_file() else []
    for layer in (*layers, front):
        fmt = layer.get("format")
        html = fmt.get("html") if isinstance(fmt, dict) else None
        settings.update({k: v for k, v in (html or {}).items() if k in ("toc", "toc-depth")})
        settings.update({k: v for k, v in (layer.get("execute") or {}).items() if k in EXECUTE_KEYS})
    return settings


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
_MISSING_FILE = re.compile(r"No such file or directory: '(?P<path>(?:\./)?(?:results|figures)/[^']+)'")


def _execute_cell(client, cell: Cell, rel: Path) -> list:
    """Run one cell; its outputs (nbformat output nodes). Raises RenderError naming the .qmd line."""
    import nbformat
    from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError

    node = nbformat.v4.new_code_cell(cell.code)
    client.nb.cells.append(node)
    try:
        return client.execute_cell(node, len(client.nb.cells) - 1).outputs
    except (CellExecutionError, CellTimeoutError, DeadKernelError) as exc:
        # a pipeline output (results/… or figures/…) not made yet: say which and how to make it
        missing = getattr(exc, "ename", None) == "FileNotFoundError" and _MISSING_FILE.search(str(exc.evalue))
        if missing:
            raise UsageError(str(rel), f"{missing['path']} does not exist yet: run `snakemake "
                             f"{rel.with_suffix('.html')} --cores all` (or `make all`), which makes it and renders "
                             "the report") from None
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
    values = [_inline_value(results.get(str(i), {}), m, block, rel) for i, m in enumerate(matches)]
    text = block.text
    for m, value in reversed(list(zip(matches, values))):
        text = text[:m.start()] + value + text[m.end():]
    return text


def _inline_value(result: dict, match: re.Match, block: Prose, rel: Path) -> str:
    """Markdown for one user_expressions result, as Quarto's Jupyter engine writes it for HTML (its
    ``resolveUserExpressions``): text/html as raw HTML, text/markdown as is, else text/plain — a str without
    its quotes and with markdown's characters escaped (``quarto_escaped``). Raises RenderError for an error, a
    value with no text form, or an empty value (which Quarto would print as the expression's source)."""
    line = block.line + block.text.count("\n", 0, match.start())
    where = f"{rel}: line {line}: `{{python}} {match['expr']}`"
    if result.get("status") != "ok":
        raise RenderError(f"{where} raised {result.get('ename')}: {result.get('evalue')}")
    data = result.get("data", {})
    if "text/html" in data:
        tick = _ticks(data["text/html"])
        return f"{tick}{data['text/html']}{tick}{{=html}}"
    if "text/markdown" in data:
        return data["text/markdown"]
    if "text/plain" not in data:
        raise RenderError(f"{where}: the value has no text/plain or text/markdown form")
    plain = data["text/plain"]
    if not quarto_escaped(plain).strip():  # Quarto would print the expression's source instead of nothing
        raise RenderError(f"{where}: the value is empty (Quarto prints the source then); put optional text in "
                          "an `#| output: asis` cell")
    if plain[:1] in "'\"" and "\\" in plain:   # the repr escapes something: Quarto shows the backslashes
        raise RenderError(f"{where}: the str's repr has a backslash (a \\, or both ' and \" inside), which both "
                          "engines show as backslashes; use ’ or “ ” instead, or return Markdown(...)")
    return quarto_escaped(plain)


_QUARTO_ESCAPES = re.compile(r"([\\`*_{}\[\]()>#+,\-.!])")


def quarto_escaped(text: str) -> str:
    """An inline value's text/plain as Quarto writes it into the markdown (``asEscapedMarkdown`` in Quarto's
    jupyter-inline.ts): a quoted repr (a str) loses its quotes, its backslashes are doubled and then each of
    ``\\ ` * _ { } [ ] ( ) > # + , - . !`` gets a backslash (so one backslash in the str shows as four, as
    under Quarto; ``+-.`` in Quarto's character class is a range, hence the comma). ``$ ~ ^ @ < |`` are not
    escaped (math, sub/superscripts and citations still parse, as under Quarto). Other values stay as they are
    (numbers; a list's markdown is parsed)."""
    if not (text[:1] in ("'", '"') and text.startswith(text[0]) and text.endswith(text[0])):
        return text
    return _QUARTO_ESCAPES.sub(r"\\\1", text[1:-1].replace("\\", "\\\\"))


# --- outputs -> markdown ----------------------------------------------------------------------------------

_MIME_ORDER = ("text/markdown", "text/html", "image/svg+xml", "image/png", "image/jpeg", "text/plain")


def _ticks(text: str, least: int = 1) -> str:
    """Backticks longer than any run of them inside ``text`` (at least ``least``): a code span or fence for it."""
    return "`" * max(least, max((len(run) for run in re.findall(r"`+", text)), default=0) + 1)


def _fenced(text: str, info: str) -> str:
    """A fenced code block whose fence is longer than any backtick run inside ``text``."""
    fence = _ticks(text, 3)
    return f"{fence}{info}\n{text.rstrip(chr(10))}\n{fence}"


def _image_markdown(mime: str, data, metadata: dict, alt: str | None = None) -> str:
    """An image output as an embedded data URI; ``alt`` (a cell's fig-alt) goes in a fig-alt attribute,
    which crossref.lua makes the <img>'s alt text (an empty ![] keeps pandoc from making it a figure)."""
    b64 = base64.b64encode(data.encode()).decode() if mime == "image/svg+xml" else "".join(str(data).split())
    size = metadata.get(mime, {}) if isinstance(metadata, dict) else {}
    attrs = [f"{k}={int(size[k])}" for k in ("width", "height") if k in size]
    if alt:
        quoted = " ".join(str(alt).split()).replace("\\", "\\\\").replace('"', '\\"')
        attrs.insert(0, f'fig-alt="{quoted}"')
    return f"![](data:{mime};base64,{b64})" + (f"{{{' '.join(attrs)}}}" if attrs else "")


def output_markdown(output, asis: bool = False, alt: str | None = None) -> str:
    """Markdown for one Jupyter output: images as embedded data URIs (alt text ``alt``), text/markdown as
    markdown, text/html raw, text/plain and streams in code blocks (raw markdown when ``asis``)."""
    if output["output_type"] == "stream":
        return output["text"] if asis else _fenced(output["text"], " {.cell-output}")
    data = output.get("data", {})
    mime = next((m for m in _MIME_ORDER if m in data), None)
    if mime is None:
        return ""
    if mime.startswith("image/"):
        return _image_markdown(mime, data[mime], output.get("metadata", {}), alt)
    if mime == "text/markdown" or asis:
        return data[mime]
    if mime == "text/html":
        return _fenced(data[mime], "{=html}")
    return _fenced(data[mime], " {.cell-output}")


def _is_image(output) -> bool:
    return output["output_type"] != "stream" and any(m.startswith("image/") for m in output.get("data", {}))


def cell_markdown(cell: Cell, outputs: list, opts: dict, rel: Path) -> str:
    """Markdown for an executed cell under its options (echo, output, include, warning, label + fig-cap /
    tbl-cap, fig-alt): a labelled figure cell's images go in a ``::: {#fig-x}`` div with fig-alt as their alt
    text, a table cell's outputs in ``::: {#tbl-x}``, the caption as the div's last paragraph (crossref.lua
    numbers them). Raises RenderError (naming ``rel``, the .qmd) when a fig-cap cell made no figure."""
    if not opts["include"]:
        return ""
    parts = [_fenced(cell.code, " {.python .cell-code}")] if opts["echo"] and cell.code.strip() else []
    if opts["output"] is False:
        return "\n\n".join(parts)
    kept = [o for o in outputs if opts["warning"] or not (o["output_type"] == "stream" and o["name"] == "stderr")]
    asis = opts["output"] == "asis"
    label = opts.get("label", "")
    if "fig-cap" in opts:
        images = [output_markdown(o, alt=opts.get("fig-alt")) for o in kept if _is_image(o)]
        if not images:
            raise RenderError(f"{rel}: line {cell.line}: cell {label} has a fig-cap but made no figure")
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

def _title_block(front: dict) -> str:
    """Front matter for pandoc: title, subtitle, author, date. A date (today / now / last-modified: today's)
    shows as Quarto shows it by default (date-format: long, "January 5, 2025"); one that is not an ISO date
    stays as written."""
    meta = {k: front[k] for k in ("title", "subtitle", "author", "date") if k in front}
    if "date" in meta:
        meta["date"] = _long_date(meta["date"])
    meta = {k: v if isinstance(v, (str, list)) else str(v) for k, v in meta.items()}
    if isinstance(meta.get("author"), list) and len(meta["author"]) > 1:
        meta["remat-authors"] = True    # page.html: "Authors"
    import yaml
    return f"---\n{yaml.safe_dump(meta, allow_unicode=True, sort_keys=False)}---\n\n" if meta else ""


def _long_date(value) -> str:
    day = _dt.date.today() if str(value).lower() in ("today", "now", "last-modified") else value
    try:
        day = day if isinstance(day, _dt.date) else _dt.date.fromisoformat(str(day).strip())
    except ValueError:
        return str(value)
    return f"{day:%B} {day.day}, {day.year}"


_PAGE = files("remat.report")


def _pandoc(markdown: str, out: Path, doc_dir: Path, root: Path, settings: dict, rel: Path) -> None:
    """markdown -> standalone, self-contained HTML at ``out`` (atomic), on remat's page (page.html +
    page.css: laid out like Quarto's), with crossref.lua and footer.lua. Relative resources resolve from the
    .qmd's folder (pandoc runs there, as under Quarto), ``/x`` from the project root. Warnings (e.g. a missing
    image) are errors. Raises RenderError."""
    import pypandoc

    args = ["--standalone", "--embed-resources", "--mathml", "--number-sections", "--fail-if-warnings",
            f"--resource-path={doc_dir}", f"--template={_PAGE / 'page.html'}", f"--css={_PAGE / 'page.css'}",
            f"--lua-filter={_PAGE / 'crossref.lua'}", f"--lua-filter={_PAGE / 'footer.lua'}",
            f"--metadata=remat-project-root:{root}", "--variable=lang:en"]
    if settings.get("toc"):
        args += ["--toc", f"--toc-depth={int(settings.get('toc-depth', 3))}"]
    with atomic_path(out) as tmp:
        try:
            # no example lists: pandoc would read "@tbl-x." or "(@tbl-x)" opening a line as one, and every
            # @tbl-x as its number (the lint refuses such lines, which Quarto reads so too)
            pypandoc.convert_text(markdown, "html5", format="markdown-example_lists", extra_args=args,
                                  outputfile=str(tmp),
                                  cworkdir=str(doc_dir))
        except RuntimeError as exc:
            raise RenderError(f"{rel}: pandoc failed: {exc}") from None
