"""Provenance carried by every results row: device, dtype, versions, git commit, host, timestamp, seed; and the
machine's load while a table was made (``run_columns``) or a timing was taken (``Load``, via remat.measure.timing).

    start = snapshot(); ...; load = load_since(start)     # load.other_cores: others' CPU s per wall s (cores)
"""

from __future__ import annotations

import datetime as _dt
import math
import os
import platform
import socket
import subprocess
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from remat.precision import DTYPES, precision as choose

BUSY_CORES = 0.25
"""A window is busy when other processes used more than this many cores meanwhile (CPU seconds per wall second).
Measured on the project's 2-core machine over 1 s windows (2026-12-01): quiet, others read 0.00-0.04 cores
(beside a spinning or a sleeping process); with `yes > /dev/null` beside it, 1.00-1.02 (one 1.26); while
other sessions' jobs ran, 1.0-1.7 beside a spinning timing and 2.0 beside a sleeping one. This process's
tick-accounted CPU time agrees with its exact CPU time to ±0.015 cores. A quarter core lies far above quiet and
far below one busy neighbour."""
MIN_WINDOW_S = 0.5
"""Windows shorter than this are never called busy: the reading's error (up to a 10 ms tick per CPU at each end,
0.08 cores of 2 over 0.5 s) grows past a third of BUSY_CORES below it; the analysis then reads the run's load."""


@lru_cache(maxsize=1)
def git_commit() -> str:
    """Short commit hash of the checkout this package runs from, with '+dirty' if modified; 'unknown' outside git."""
    root = Path(__file__).resolve().parents[3]
    try:
        sha = subprocess.run(["git", "-C", str(root), "rev-parse", "--short=12", "HEAD"],
                             capture_output=True, text=True, timeout=5, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=5).stdout.strip()
        return sha + ("+dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def device_name(device: str) -> str:
    """Human name of a device string: the CUDA device name, the CPU model, or 'fake'."""
    if device.startswith("cuda"):
        import torch
        return torch.cuda.get_device_name(torch.device(device))
    if device == "fake":
        return "fake (FakeTensorMode, no memory)"
    return _cpu_model() or platform.processor() or platform.machine()


def _cpu_model() -> str | None:
    """The CPU model name from /proc/cpuinfo (Linux), else None."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def torch_version() -> str | None:
    """torch.__version__ if torch is imported, else the installed distribution's version (the numpy engine's
    rows do not pay torch's import), None without torch."""
    import importlib.metadata
    import sys

    if "torch" in sys.modules:
        return sys.modules["torch"].__version__
    try:
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return None


def provenance(device: str = "cpu", dtype: str = "float32", seed: int | None = None, precision=None) -> dict:
    """One flat dict of provenance columns to append to every results row. ``precision``
    (remat.precision.Precision): the dtype and why it was chosen, in place of ``dtype``; without it the reason says
    whether ``device`` computes ``dtype`` natively (remat.precision.precision)."""
    import numpy

    if precision is None and dtype in DTYPES and device.split(":")[0] in ("cpu", "cuda", "fake"):
        precision = choose(dtype, device)
    return {
        "device": device,
        "device_name": device_name(device),
        "dtype": dtype if precision is None else precision.dtype,
        "dtype_reason": None if precision is None else precision.reason,
        "dtype_native": None if precision is None else precision.native,
        "seed": seed,
        "torch_version": torch_version(),
        "numpy_version": numpy.__version__,
        "git_commit": git_commit(),
        "host": socket.gethostname(),
        "timestamp": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }


def stamp(row: dict, prov: dict) -> dict:
    """``row`` with the provenance columns of ``prov`` added; the row's own value of one (e.g. the model's
    dtype) wins, and then the reason given for the dtype is its own."""
    out = {**row, **{k: v for k, v in prov.items() if k not in row}}
    own = row.get("dtype")
    if "dtype_reason" not in row and own != prov.get("dtype") and own in DTYPES and prov.get("device"):
        chosen = choose(own, prov["device"])
        out["dtype_reason"], out["dtype_native"] = chosen.reason, chosen.native
    return out


def with_provenance(rows: list[dict], device: str = "cpu", dtype: str = "float32", seed: int | None = None,
                    precision=None):
    """A pandas DataFrame of ``rows``, each stamped with the provenance columns (``stamp``): the one place an
    experiment's table gets its provenance."""
    import pandas as pd
    prov = provenance(device=device, dtype=dtype, seed=seed, precision=precision)
    return pd.DataFrame([stamp(row, prov) for row in rows])


# --- the machine's load over a measured window ----------------------------------------------------------------

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


@dataclass(frozen=True)
class Snapshot:
    """The clocks at one instant: wall (perf_counter, s), this process's CPU time (process_time: every thread,
    and its finished children's; s), all CPUs' busy seconds since boot (NaN off Linux) and the 1-minute load
    average (NaN where unknown)."""

    wall: float
    cpu: float
    busy: float
    load: float


def _busy_cpu_s() -> float:
    """Seconds every CPU together has been busy since boot: /proc/stat's first line, user + nice + system + irq +
    softirq + steal jiffies ÷ CLK_TCK (guest time is inside user); NaN without /proc/stat (not Linux)."""
    try:
        with open("/proc/stat") as f:
            user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in f.readline().split()[1:9])
    except (OSError, ValueError):
        return math.nan
    return (user + nice + system + irq + softirq + steal) / _TICK


def _load_average() -> float:
    try:
        return float(os.getloadavg()[0])
    except (OSError, AttributeError):
        return math.nan


def snapshot() -> Snapshot:
    """The clocks now (``Snapshot``); this process's CPU time includes its finished children's (a point run in a
    fresh process is the run's own work, not another process's load)."""
    own = os.times()
    return Snapshot(time.perf_counter(), time.process_time() + own.children_user + own.children_system,
                    _busy_cpu_s(), _load_average())


@dataclass(frozen=True)
class Load:
    """The machine's load over one window: 1-minute load averages at its start and end, its wall time and this
    process's own CPU time (seconds), and the CPU seconds all OTHER processes used meanwhile (every CPU's busy
    time minus ours; NaN off Linux; resolution one 10 ms tick per CPU). ``started``: perf_counter at the start."""

    load_before: float
    load_after: float
    wall_s: float
    cpu_s: float
    other_cpu_s: float
    started: float = math.nan

    @property
    def other_cores(self) -> float:
        """Others' CPU seconds per wall second: the cores other processes kept busy on average (≥ 0)."""
        return max(self.other_cpu_s, 0.0) / self.wall_s if self.wall_s > 0 else math.nan

    @property
    def busy(self) -> bool:
        """Others used more than BUSY_CORES cores over a window of MIN_WINDOW_S or more (False where unknown)."""
        return bool(self.wall_s >= MIN_WINDOW_S and self.other_cores > BUSY_CORES)

    def columns(self, prefix: str) -> dict:
        """``<prefix>load_before``, ``<prefix>load_after`` (1-min load averages), ``<prefix>wall_s``,
        ``<prefix>cpu_s`` (this process's CPU seconds), ``<prefix>other_cores`` (others' CPU s per wall s)."""
        return {f"{prefix}load_before": self.load_before, f"{prefix}load_after": self.load_after,
                f"{prefix}wall_s": self.wall_s, f"{prefix}cpu_s": self.cpu_s, f"{prefix}other_cores": self.other_cores}


def load_since(start: Snapshot) -> Load:
    """The load from ``start`` to now."""
    end = snapshot()
    cpu = end.cpu - start.cpu
    return Load(start.load, end.load, end.wall - start.wall, cpu, end.busy - start.busy - cpu, start.wall)


_TIMED: list[Load] = []


def record_timed(load: Load) -> None:
    """Note one timing window of this process (remat.measure.timing calls it), for ``run_columns``."""
    _TIMED.append(load)


def run_columns(start: Snapshot) -> dict:
    """The run-level load columns stamped on every row of a table made since ``start``: ``run_load_before``,
    ``run_load_after``, ``run_wall_s``, ``run_cpu_s``, ``run_other_cores`` (as ``Load.columns``), ``run_cores``
    (the CPUs this machine has), and over the timing windows since ``start`` (remat.measure.timing.time_steps) of
    MIN_WINDOW_S or more the busiest one's ``run_timed_other_cores`` (NaN when none) and ``run_timed_busy`` (it
    exceeds BUSY_CORES)."""
    timed = [w.other_cores for w in _TIMED if w.started >= start.wall and w.wall_s >= MIN_WINDOW_S
             and w.other_cores == w.other_cores]
    worst = max(timed) if timed else math.nan
    return {**load_since(start).columns("run_"), "run_cores": os.cpu_count(), "run_timed_other_cores": worst,
            "run_timed_busy": worst > BUSY_CORES}
