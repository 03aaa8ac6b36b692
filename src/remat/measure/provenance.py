"""Provenance carried by every results row: device, dtype, versions, git commit, host, timestamp, seed."""

from __future__ import annotations

import datetime as _dt
import platform
import socket
import subprocess
from functools import lru_cache
from pathlib import Path


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


def provenance(device: str = "cpu", dtype: str = "float32", seed: int | None = None) -> dict:
    """One flat dict of provenance columns to append to every results row."""
    import numpy
    return {
        "device": device,
        "device_name": device_name(device),
        "dtype": dtype,
        "seed": seed,
        "torch_version": torch_version(),
        "numpy_version": numpy.__version__,
        "git_commit": git_commit(),
        "host": socket.gethostname(),
        "timestamp": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }


def stamp(row: dict, prov: dict) -> dict:
    """``row`` with the provenance columns of ``prov`` added; the row's own value of one (e.g. the model's
    dtype) wins."""
    return {**row, **{k: v for k, v in prov.items() if k not in row}}


def with_provenance(rows: list[dict], device: str = "cpu", dtype: str = "float32", seed: int | None = None):
    """A pandas DataFrame of ``rows``, each stamped with the provenance columns (``stamp``): the one place an
    experiment's table gets its provenance."""
    import pandas as pd
    prov = provenance(device=device, dtype=dtype, seed=seed)
    return pd.DataFrame([stamp(row, prov) for row in rows])
