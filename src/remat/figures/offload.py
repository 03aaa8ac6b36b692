"""Figures for activation offload from the ``offload-*`` tables (no measuring here).

    remat figure offload-bandwidth --inputs results/offload/bandwidth.csv --out figures/offload_bandwidth.png
    remat figure offload-breakeven --inputs results/offload/breakeven.csv --out figures/offload_breakeven.png

Without CUDA the copies are host memcpys: titles say "simulated: host memcpy", never PCIe.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from remat.offload import FIT_KEYS, predicted_copy_s

MIB = 2**20  # axis unit: MiB = 2**20 bytes


def _link_title(frame: pd.DataFrame) -> str:
    link = str(frame["link"].iloc[0])
    return f"{frame['device'].iloc[0]}: {link}"


def bandwidth(frames: list[pd.DataFrame]) -> Figure:
    """Copy time (s) and achieved bandwidth (GB/s = 10^9 bytes/s) vs copy size (MiB), log-log, per direction,
    memory kind and overlap: measured medians (markers) and the fit t = t0 + bytes/BW (lines).

    Input: one ``offload-bandwidth`` table (with fit_t0_s, fit_bw_gb_s per row).
    """
    frame = frames[0]
    fig = Figure(figsize=(11, 4.2))
    times, rates = fig.subplots(1, 2)
    for i, (key, part) in enumerate(frame.groupby(list(FIT_KEYS[1:]), sort=True)):
        direction, memory, overlap = key
        part = part.sort_values("bytes")
        t0, bw = float(part["fit_t0_s"].iloc[0]), float(part["fit_bw_gb_s"].iloc[0]) * 1e9
        grid = np.geomspace(part["bytes"].min(), part["bytes"].max(), 100)
        style = "--" if str(overlap) in ("True", "true") else "-"
        label = (f"{direction} {memory}{' + matmul' if style == '--' else ''}: "
                 f"t0 = {t0 * 1e6:.2f} µs, BW = {bw / 1e9:.2f} GB/s")
        color = f"C{i}"
        times.loglog(part["bytes"] / MIB, part["seconds"], "o", ms=4, mfc="none", color=color)
        times.loglog(grid / MIB, predicted_copy_s(grid, t0, bw), style, lw=1, color=color, label=label)
        rates.semilogx(part["bytes"] / MIB, part["bw_gb_s"], "o", ms=4, mfc="none", color=color)
        rates.semilogx(grid / MIB, grid / predicted_copy_s(grid, t0, bw) / 1e9, style, lw=1, color=color)
    times.set_ylabel("copy time (s), best of the repeats")
    rates.set_ylabel("achieved bandwidth (GB/s = 10⁹ B/s)")
    for ax in (times, rates):
        ax.set_xlabel("copy size (MiB)")
        ax.grid(alpha=0.3, which="both")
    times.legend(fontsize=7)
    fig.suptitle(f"Host↔device copies — {_link_title(frame)} (markers: measured; lines: fit)", fontsize=10)
    fig.tight_layout()
    return fig
