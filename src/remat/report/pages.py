"""Markdown blocks report cells print: the provenance of a report's numbers, and the index of reports."""

from __future__ import annotations

import platform
from pathlib import Path

from remat.analysis.catalog import REPORTS
from remat.report.qmd import REPORTS_DIR, parse_qmd


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

    values = {column: sorted({str(v) for t in tables if column in t for v in t[column].dropna().unique()})
              for column, _ in _PROVENANCE_COLUMNS}
    lines = ["**Provenance**", ""] + [f"- results, {name}: {', '.join(f'`{v}`' for v in values[column])}"
                                      for column, name in _PROVENANCE_COLUMNS if values[column]]
    # results from several commits, or from a tree with uncommitted changes: their numbers may not be one version's
    commits = values["git_commit"]
    why = [f"{len(commits)} commits"] if len(commits) > 1 else []
    why += ["a tree with uncommitted changes"] if any(c.endswith("+dirty") for c in commits) else []
    if why:
        lines.append(f"- **note**: these results come from {' and from '.join(why)}; rerun the pipeline on one clean "
                     "commit (`make all`) for numbers of one version")
    stamps = sorted(str(v) for t in tables if "timestamp" in t for v in t["timestamp"].dropna())
    if stamps:
        lines.append(f"- results measured: {stamps[0]} to {stamps[-1]}")
    now = provenance(device=_render_device())
    lines += [f"- rendered: {now['timestamp']} on `{now['host']}` ({now['device_name']}),"
              f" git commit `{now['git_commit']}`",
              f"- versions: Python {platform.python_version()}, torch {now['torch_version']},"
              f" numpy {now['numpy_version']}, {_version('pandas')}, {_version('matplotlib')}"]
    return "\n".join(lines) + "\n"


def _render_device() -> str:
    """The device of the rendering machine; "cpu" where torch is not installed (the reports env)."""
    try:
        from remat.device import default_device
    except ImportError:
        return "cpu"
    return default_device()


def _version(name: str) -> str:
    from importlib.metadata import PackageNotFoundError, version
    try:
        return f"{name} {version(name)}"
    except PackageNotFoundError:
        return f"{name} (not installed)"


def index_markdown(root: str | Path = ".") -> str:
    """Markdown list of the reports in ``root/reports``: a link to NAME.html for each report rendered at
    this moment, "not rendered yet" with the snakemake target that makes it for the others; ``catalog.REPORTS``
    first, then the rest alphabetically.
    Titles come from each .qmd's front matter. (Used by reports/index.qmd.)"""
    folder = Path(root) / REPORTS_DIR
    names = sorted((p.stem for p in folder.glob("*.qmd") if p.stem != "index"),
                   key=lambda n: (REPORTS.index(n) if n in REPORTS else len(REPORTS), n))
    lines = []
    for name in names:
        title = parse_qmd((folder / f"{name}.qmd").read_text(encoding="utf-8")).front.get("title", name)
        if (folder / f"{name}.html").exists():
            lines.append(f"- [{title}]({name}.html)")
        else:
            lines.append(f"- {title} — not rendered yet (`snakemake {REPORTS_DIR}/{name}.html --cores all`)")
    return "\n".join(lines) + "\n" if lines else "No reports yet.\n"


