"""Committed reference GPU results: what the reports show where the current run measured no GPU.

``make gpu`` (remat.gpu_run) copies its tables to ``results-reference/gpu/<gpu>-<date>/`` (the same relative
paths as under ``results/``) with ``provenance.json`` (GPU, driver, torch, CUDA, commit, date). Where the
current run has no GPU table, the reports read the newest reference run's instead, labelled with the GPU, the
date and the commit; where none exists yet, a visible note says so — a section is never silently GPU-less.

    path = gpu_table("sweeps/segments/cuda.csv")        # this run's, else the newest reference run's, else None
    tables = device_tables("sweeps/segments")           # every device's table of this run (+ the reference GPU's)
    print(note([path]))                                 # Markdown for an ``output: asis`` cell

The newest reference run is the folder whose name ends with the latest date (``<gpu>-YYYY-MM-DD``); the
pipeline's rules pick it the same way (workflow/rules/common.smk ``reference_gpu_table``).
"""

from __future__ import annotations

import json
from pathlib import Path

REFERENCE = Path("results-reference/gpu")
RESULTS = Path("results")
GPU_DEVICE = "cuda"


def latest(root: str | Path = REFERENCE) -> Path | None:
    """The newest reference run's folder (latest ``-YYYY-MM-DD`` suffix, then name), or None."""
    folders = [p for p in Path(root).glob("*") if p.is_dir()]
    return max(folders, key=lambda p: (p.name[-10:], p.name)) if folders else None


def gpu_table(rel: str, results: str | Path = RESULTS, root: str | Path = REFERENCE) -> Path | None:
    """The GPU table at ``rel`` (e.g. "sweeps/segments/cuda.csv"): this run's under ``results`` when it exists,
    else the newest reference run's, else None."""
    here = Path(results, rel)
    if here.exists():
        return here
    folder = latest(root)
    return folder / rel if folder is not None and (folder / rel).exists() else None


def device_tables(folder: str, results: str | Path = RESULTS, root: str | Path = REFERENCE) -> list[Path]:
    """Every ``<device>.csv`` of this run under ``results/<folder>``, plus the reference run's GPU table when
    this run has none (``gpu_table``)."""
    tables = sorted(Path(results, folder).glob("*.csv"))
    gpu = gpu_table(f"{folder}/{GPU_DEVICE}.csv", results, root)
    return tables + ([gpu] if gpu is not None and gpu not in tables else [])


def is_reference(path: Path | None, root: str | Path = REFERENCE) -> bool:
    """True for a table read from a reference run."""
    return path is not None and Path(root).resolve() in Path(path).resolve().parents


def label(path: Path, root: str | Path = REFERENCE) -> str:
    """"NVIDIA H200, 2026-12-01, commit 1a2b3c4d5e6f (results-reference/gpu/nvidia-h200-2026-12-01)" for a
    reference table; "this run" for one of the current run."""
    if not is_reference(path, root):
        return "this run"
    folder = next(p for p in Path(path).parents if p.parent.resolve() == Path(root).resolve())
    prov_file = folder / "provenance.json"
    prov = json.loads(prov_file.read_text(encoding="utf-8")) if prov_file.exists() else {}
    gpu = prov.get("device_name") or folder.name
    return (f"{gpu}, {prov.get('date', folder.name[-10:])}, commit {str(prov.get('git_commit', '?'))[:12]} "
            f"({folder.as_posix()})")


def note(paths, what: str = "GPU measurements", root: str | Path = REFERENCE, shows_reference: bool = True) -> str:
    """Markdown for the top of a GPU-bearing section: "" when this run measured on a GPU; the reference run's
    label when its tables are shown; otherwise a visible note that no GPU result exists yet and how to get one.
    ``paths``: the GPU tables the section reads (``gpu_table`` results, None where absent).
    ``shows_reference``: False for a section that shows this run's device only (it does not read a reference
    run's tables): a reference run is then named as where those tables are, not as the source of what is shown."""
    found = [p for p in paths if p is not None]
    if found and not any(is_reference(p, root) for p in found):
        return ""
    if found and not shows_reference:
        return f"A reference GPU run has these tables: {label(found[0], root)}.\n"
    if found:
        return (f"::: {{.callout-note title=\"GPU rows from the committed reference run\"}}\n{what} on this page "
                f"come from {label(found[0], root)}: this run measured no GPU.\n:::\n")
    run = latest(root)
    where = (f"{Path(root).as_posix()}/ holds no reference run yet" if run is None else
             f"the newest reference run ({run.as_posix()}) has none")
    return (f"::: {{.callout-note title=\"No GPU results yet\"}}\nThis page shows no {what}: this run had no GPU "
            f"and {where}. `make gpu` on a GPU node measures them (README, On a GPU node) and the reports then "
            "show them here.\n:::\n")
