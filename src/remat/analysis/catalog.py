"""The one table catalog: every result table by id, where it lives under ``results/``, the order devices are
shown in, and the committed reference GPU run a report falls back to where this run measured no GPU.

    catalog.read("offload.steps", device="cpu")          # results/offload/cpu/steps.csv
    catalog.read_devices("sweeps.segments")              # every device's table (+ the reference GPU's), one frame

An absent table raises ``Missing`` naming the path snakemake makes it at. ``make gpu`` (remat.gpu_run) copies its
tables to ``results-reference/gpu/<gpu>-<date>/`` with ``provenance.json``; the newest such run is the reference
(as workflow/rules/common.smk ``reference_gpu_table`` picks it).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pandas as pd

from remat.errors import UsageError

RESULTS = Path("results")
REFERENCE = Path("results-reference/gpu")
GPU_DEVICE = "cuda"
DEVICES = ("cpu", "cuda")
"""The order devices are shown in, everywhere: this machine's CPU first, then the GPU."""

REPORTS = ("chen2016", "korthikanti2022", "sweeps", "offload", "planner")
"""The reports, in the index's order; each has ``results/findings/<report>.csv``."""

SWEEPS = ("segments", "depth", "seq-hidden", "layer-timing", "time-model")

TABLES: dict[str, str] = {
    **{f"chen.{t}": f"chen/{t}.csv" for t in ("check", "segments", "depth", "revolve", "graph-check", "resnet",
                                              "lstm")},
    **{f"korthikanti.{t}": f"korthikanti/{t}.csv" for t in ("table2", "items", "flops", "memory", "modern",
                                                             "table4", "figure8", "table5")},
    **{f"planner.{t}": f"planner/{t}.csv" for t in ("paper", "frontier", "schedules")},
    "planner.pipeline": "planner/pipeline/cpu.csv",     # gloo ranks: on the CPU whatever config.device says
    **{f"findings.{r}": f"findings/{r}.csv" for r in (*REPORTS, "index")},
}
"""Tables of one file: id -> path under results/."""

DEVICE_TABLES: dict[str, str] = {
    "chen.speed": "chen/speed/{device}.csv",
    **{f"sweeps.{s}": f"sweeps/{s}/{{device}}.csv" for s in SWEEPS},
    **{f"offload.{t}": f"offload/{{device}}/{t}.csv" for t in ("bandwidth", "steps", "breakeven")},
    "planner.validate": "planner/validate/{device}.csv",
    "planner.tensor": "planner/tensor/{device}.csv",
    "planner.compile": "planner/compile/{device}.csv",
    "planner.paired": "planner/paired/{device}.csv",
}
"""Tables made once per device: id -> path under results/ with ``{device}``."""


SOURCES = {"chen2016": ("chen",), "korthikanti2022": ("korthikanti",), "sweeps": ("sweeps",), "offload": ("offload",),
           "planner": ("planner", "korthikanti/table5.csv"), "index": ("findings",)}
"""What each report's findings are judged from (under results/): a table there newer than them makes them stale."""


class Missing(Exception):
    """An input table is absent: ``target``, the path snakemake makes it at; ``where``, its device ("CPU"; "")."""

    def __init__(self, target: str, where: str = ""):
        super().__init__(target)
        self.target, self.where = target, where


def unless_missing(make: Callable[[], object], instead: Callable[[Missing], object]):
    """``make()``, or ``instead(the Missing)`` where a table it reads is absent."""
    try:
        return make()
    except Missing as missing:
        return instead(missing)


def relpath(table: str, device: str | None = None) -> str:
    """The path of ``table`` under results/ (``device`` for a per-device table: ValueError without one)."""
    if table in TABLES:
        return TABLES[table]
    if device is None:
        raise ValueError(f"table {table!r} is made per device: pass device=")
    return DEVICE_TABLES[table].format(device=device)


def path(table: str, device: str | None = None, root: str | Path = ".") -> Path:
    """``root/results/<relpath>`` (it may not exist)."""
    return Path(root) / RESULTS / relpath(table, device)


def target(table: str, device: str | None = None) -> str:
    """The path snakemake makes ``table`` at, as a user types it: "results/chen/depth.csv"."""
    return (RESULTS / relpath(table, device)).as_posix()


def read(table: str, device: str | None = None, root: str | Path = ".") -> pd.DataFrame:
    """The table as a DataFrame; Missing when the file is absent; UsageError when it is empty or not a CSV."""
    where = path(table, device, root)
    if not where.exists():
        raise Missing(target(table, device), "GPU" if device == GPU_DEVICE else (device or "").upper())
    return read_csv(where)


def read_csv(where: Path) -> pd.DataFrame:
    """``where`` as a DataFrame; UsageError(the path) when it is empty or not a CSV."""
    try:
        return pd.read_csv(where)
    except (pd.errors.EmptyDataError, pd.errors.ParserError, UnicodeDecodeError) as exc:
        raise UsageError(str(where), f"not a readable table ({str(exc).splitlines()[0]}); remake it with "
                                     f"snakemake -f {where}") from None


def read_if(table: str, device: str | None = None, root: str | Path = ".") -> pd.DataFrame | None:
    """The table, or None when it is absent."""
    return unless_missing(lambda: read(table, device, root), lambda _: None)


def device_paths(table: str, root: str | Path = ".") -> list[Path]:
    """This run's files of per-device ``table`` (DEVICES order), plus the reference run's GPU one if it has none."""
    here = [p for d in DEVICES if (p := Path(root) / RESULTS / DEVICE_TABLES[table].format(device=d)).exists()]
    gpu = gpu_of(table, root)
    return here + ([gpu] if gpu is not None and gpu not in here else [])


def read_devices(table: str, root: str | Path = ".") -> pd.DataFrame:
    """``device_paths`` as one frame; Missing(this device's path) when there is none."""
    paths = device_paths(table, root)
    if not paths:
        raise Missing(target(table, DEVICES[0]), DEVICES[0].upper())
    return pd.concat([read_csv(p) for p in paths], ignore_index=True)


def read_shown(table: str, root: str | Path = ".") -> pd.DataFrame:
    """The one device's rows of per-device ``table`` a report shows: the GPU's if any, else the first device's;
    attrs["where"] says where. Missing when no device has it."""
    frame = read_devices(table, root)
    gpu = (frame["device"] == GPU_DEVICE).any()
    out = frame[frame["device"] == (GPU_DEVICE if gpu else frame["device"].iloc[0])].reset_index(drop=True)
    out.attrs["where"] = where(str(out["device"].iloc[0]), table, out, root)
    return out


def shown_or_none(table: str, root: str | Path = ".") -> pd.DataFrame | None:
    """``read_shown``, or None where no device has the table (a rule outside the default target)."""
    return unless_missing(lambda: read_shown(table, root), lambda _: None)


def stale(report: str, root: str | Path = ".") -> Path | None:
    """A table under the report's SOURCES newer than its findings, or None (also with no findings yet)."""
    made = path(f"findings.{report}", root=root)
    if not made.exists():
        return None
    bases = [Path(root) / RESULTS / source for source in SOURCES[report]]   # a file, or a folder of tables
    tables = [t for base in bases for t in ([base] if base.suffix else sorted(base.rglob("*.csv")))]
    return next((t for t in tables if t.exists() and t != made and t.stat().st_mtime > made.stat().st_mtime), None)


# --- the committed reference GPU run --------------------------------------------------------------------------

def latest(root: str | Path = ".") -> Path | None:
    """The newest reference run's folder (latest ``-YYYY-MM-DD`` suffix, then name), or None."""
    folders = [p for p in (Path(root) / REFERENCE).glob("*") if p.is_dir()]
    return max(folders, key=lambda p: (p.name[-10:], p.name)) if folders else None


def gpu_table(rel: str, root: str | Path = ".") -> Path | None:
    """The GPU table at ``rel`` under results/: this run's, else the newest reference run's, else None."""
    here = Path(root) / RESULTS / rel
    if here.exists():
        return here
    folder = latest(root)
    return folder / rel if folder is not None and (folder / rel).exists() else None


def gpu_of(table: str, root: str | Path = ".") -> Path | None:
    """The GPU file of per-device table ``table`` (an id): this run's, else the reference run's, else None."""
    return gpu_table(relpath(table, GPU_DEVICE), root)


def where(device: str, table: str, rows: pd.DataFrame, root: str | Path = ".") -> str:
    """Where a device's ``rows`` of ``table`` were measured (findings.WHERE) with their dtype: "CPU, float32",
    "GPU, bfloat16", "GPU (<the reference run>), bfloat16"."""
    if device != GPU_DEVICE:
        return device.upper() + dtype_of(rows)
    gpu = gpu_of(table, root)
    return (f"GPU ({label(gpu, root)})" if is_reference(gpu, root) else "GPU") + dtype_of(rows)


def dtype_of(rows: pd.DataFrame) -> str:
    """", float32": the dtype(s) of ``rows`` for a ``where`` label; "" without a ``dtype`` column."""
    names = list(dict.fromkeys(rows["dtype"].dropna().astype(str))) if "dtype" in rows else []
    return f", {' / '.join(names)}" if names else ""


def is_reference(table: Path | None, root: str | Path = ".") -> bool:
    """True for a table read from a reference run."""
    return table is not None and (Path(root) / REFERENCE).resolve() in Path(table).resolve().parents


def label(table: Path, root: str | Path = ".") -> str:
    """"NVIDIA H200, 2026-12-01, commit 1a2b3c4d5e6f (results-reference/gpu/…)" for a reference, else "this run"."""
    if not is_reference(table, root):
        return "this run"
    base = (Path(root) / REFERENCE).resolve()
    folder = next(p for p in Path(table).parents if p.parent.resolve() == base)
    prov_file = folder / "provenance.json"
    prov = json.loads(prov_file.read_text(encoding="utf-8")) if prov_file.exists() else {}
    gpu = prov.get("device_name") or folder.name
    shown = (REFERENCE / folder.name).as_posix()
    return f"{gpu}, {prov.get('date', folder.name[-10:])}, commit {str(prov.get('git_commit', '?'))[:12]} ({shown})"
