"""Figures for activation offload from the ``offload-*`` tables (no measuring here).

    remat figure offload-bandwidth --inputs results/offload/cpu/bandwidth.csv --out figures/offload_bandwidth.png
    remat figure offload-breakeven --inputs results/offload/cpu/breakeven.csv --out figures/offload_breakeven.png

Without CUDA the copies are host memcpys: titles carry the tables' ``link`` column
(remat.measure.bandwidth.SIMULATED), never PCIe.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, LogLocator

from remat.measure.bandwidth import FIT_KEYS, predicted_copy_s
from remat.units import MiB


LEGEND_SIZE = 9
"""Legend text (pt): the figures are drawn 7.5–9 in wide and shown about 700 px wide in the report, where
9 pt reads as about 10–12 px."""


def _link_title(frame: pd.DataFrame) -> str:
    link = str(frame["link"].iloc[0])
    return f"{frame['device'].iloc[0]}: {link}"


def bandwidth(frames: list[pd.DataFrame]) -> Figure:
    """Copy time (s) and achieved bandwidth (GB/s = 10^9 bytes/s) vs copy size (MiB), log-log, per direction,
    memory kind and overlap: measured medians (markers) and the fit t = t0 + bytes/BW (lines).

    Input: one ``offload-bandwidth`` table (with fit_t0_s, fit_bw_gb_s per row).
    """
    frame = frames[0]
    fig = Figure(figsize=(9, 5.2), layout="constrained")   # shown about 700 px wide: legend below, 9 pt
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
        times.loglog(part["bytes"] / MiB, part["seconds"], "o", ms=4, mfc="none", color=color)
        times.loglog(grid / MiB, predicted_copy_s(grid, t0, bw), style, lw=1, color=color, label=label)
        rates.semilogx(part["bytes"] / MiB, part["bw_gb_s"], "o", ms=4, mfc="none", color=color)
        rates.semilogx(grid / MiB, grid / predicted_copy_s(grid, t0, bw) / 1e9, style, lw=1, color=color)
    times.set_ylabel("copy time (s), best of the repeats")
    rates.set_ylabel("achieved bandwidth (GB/s = 10⁹ B/s)")
    for ax in (times, rates):
        ax.set_xlabel("copy size (MiB)")
        ax.grid(alpha=0.3, which="both")
    fig.legend(*times.get_legend_handles_labels(), fontsize=LEGEND_SIZE, ncol=2, loc="outside lower center")
    fig.suptitle(f"Host↔device copies — {_link_title(frame)}\n(markers: measured; lines: fit)", fontsize=11)
    return fig


_STYLES = ("-", "--", ":", "-.")
_FREED = {"selective": "offload the 5as²b/t bytes selective frees\nvs selective recompute",
          "full": "offload the bytes full frees (layer less its input)\nvs full recompute"}


def _frontier(ax, grid: pd.DataFrame, against: str, measured_gb_s: float | None, measured_link: str) -> None:
    """Break-even GB/s against s: colour per h, line style per GPU preset; each preset's per-GPU link (its
    host link ÷ the GPUs sharing it) as a horizontal line in that preset's style."""
    col = f"breakeven_{against}_gb_s"
    gpus = list(dict.fromkeys(grid["gpu"]))
    for i, (h, part) in enumerate(grid.groupby("h")):
        for j, name in enumerate(gpus):
            p = part[part["gpu"] == name].groupby("s")[col].first().replace(np.inf, np.nan)
            ax.loglog(p.index, p.values, _STYLES[j % 4], color=f"C{i}", lw=1.2, label=f"h = {h}" if j == 0 else None)
    for j, name in enumerate(gpus):
        g = grid[grid["gpu"] == name].iloc[0]
        ax.axhline(g["link_per_gpu_gb_s"], color="k", ls=_STYLES[j % 4], lw=0.8, alpha=0.7,
                   label=f"{name}: {g['link_per_gpu_gb_s']:.1f} GB/s per GPU "
                         f"({g['link_gb_s']:.1f} ÷ {int(g['gpus_per_host_link'])})")
    if measured_gb_s:
        ax.axhline(measured_gb_s, color="C3", lw=0.8, alpha=0.7, label=f"measured: {measured_gb_s:.1f} GB/s "
                                                                         f"({measured_link}, one GPU alone)")
    seqs = sorted(grid["s"].unique())
    ax.set_xscale("log", base=2)
    ax.set_xticks(seqs, [str(s) for s in seqs])
    ax.minorticks_off()
    ax.set_xlabel("sequence length s")
    ax.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.set_ylabel("break-even bandwidth (GB/s = 10⁹ B/s)")
    ax.set_title(f"{_FREED[against]}: offload cheaper above the curve", fontsize=10)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=LEGEND_SIZE, ncol=2, loc="upper center", bbox_to_anchor=(0.5, -0.16))


def _measured(ax, curve: pd.DataFrame, measured: pd.DataFrame, link: str) -> None:
    markers = {"offload": "o", "full": "s", "selective": "^"}
    for i, ((s, h), part) in enumerate(curve.groupby(["s", "h"])):
        color = f"C{i}"
        ax.loglog(part["bw_gb_s"], part["predicted_offload_serial_s"] * 1e3, "--", color=color, lw=1)
        hidden = part["predicted_offload_overlap_s"] > 0  # fully hidden copies cost nothing: not on a log axis
        ax.loglog(part["bw_gb_s"][hidden], part["predicted_offload_overlap_s"][hidden] * 1e3, "-", color=color,
                  lw=0.8, alpha=0.5)
        ax.axhline(part["predicted_full_s"].iloc[0] * 1e3, color=color, lw=0.6, ls=":")
        m = measured[(measured["s"] == s) & (measured["h"] == h)].iloc[0]
        for kind, marker in markers.items():
            ax.loglog(m["bw_gb_s"], max(m[f"measured_{kind}_s"], 1e-6) * 1e3, marker, color=color, mfc="none",
                      label=f"s={s}, h={h}" if kind == "offload" else None)
    for kind, marker in markers.items():
        ax.plot([], [], marker, color="grey", mfc="none", label=f"measured {kind}")
    ax.plot([], [], "--", color="grey", label="model offload, serial copies")
    ax.plot([], [], "-", color="grey", alpha=0.5, label="model offload, overlapped")
    ax.plot([], [], ":", color="grey", label="model full recompute")
    ax.set_xlabel("link bandwidth (GB/s = 10⁹ B/s)")
    ax.set_ylabel("extra time per step over none (ms)")
    ax.set_title(f"measured sizes ({link}):\nmodel (lines), measured overheads (markers)", fontsize=10)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=LEGEND_SIZE, ncol=2, loc="upper center", bbox_to_anchor=(0.5, -0.16))


def breakeven(frames: list[pd.DataFrame]) -> Figure:
    """Offload against recompute at equal freed bytes (remat.formulas.offload) and the measured points.

    Top: offloading what selective recompute frees (5as²b/t per layer and TP rank) against selective's
    recompute; middle: offloading what full recompute frees (the layer less its input) against full's
    recompute — break-even link GB/s per direction against s, colour per h, line style per GPU preset
    (times from the roofline, remat.timemodel), each preset's per-GPU link as a horizontal line (its host
    link ÷ the GPUs sharing it); a measured CUDA link is drawn too (a simulated one is not: a host memcpy
    is no GPU's link). Bottom: at each measured size, the model's extra seconds per step of offload over
    bandwidth (serial and overlapped copies) and of full recompute, with the measured overheads of offload,
    full and selective at the measured bandwidth. Input: one ``offload-breakeven`` table.
    """
    frame = frames[0]
    grid, curve = frame[frame["kind"] == "grid"], frame[frame["kind"] == "curve"]
    measured = frame[frame["kind"] == "measured"]
    link = str(measured["link"].iloc[0]) if len(measured) else "no measured sizes"
    simulated = link.startswith("simulated")
    measured_gb_s = float(measured["bw_gb_s"].iloc[0]) if len(measured) and not simulated else None
    fig = Figure(figsize=(7.5, 15), layout="constrained")   # one panel above the other: legible ~700 px wide
    sel_ax, full_ax, meas_ax = fig.subplots(3, 1)
    _frontier(sel_ax, grid, "selective", measured_gb_s, link)
    _frontier(full_ax, grid, "full", measured_gb_s, link)
    if len(measured):
        _measured(meas_ax, curve, measured, link)
    first = grid.iloc[0]
    fig.suptitle(f"Offload vs recompute at equal freed bytes\n(grid: b = {int(first['b'])}, t = {int(first['t'])}, "
                 f"a = h/128, 16-bit, t0 = {first['t0_s'] * 1e6:g} µs, roofline times; line style = GPU)\n"
                 f"measured on {frame['device'].iloc[0]}: {link}", fontsize=11)
    return fig
