"""Figures for Chen et al. 2016 from the ``chen-segments`` and ``chen-depth`` tables (no measuring here).

    remat figure chen-segments --inputs results/chen/segments.csv --out figures/chen_segments.png
    remat figure chen-depth    --inputs results/chen/depth.csv    --out figures/chen_depth.png
"""

from __future__ import annotations

import math

import pandas as pd
from matplotlib.figure import Figure

from remat.experiments.chen_summary import depth_fits
from remat.units import KiB



def segments(frames: list[pd.DataFrame]) -> Figure:
    """Peak stored activations (KiB) and layer forwards vs the number of segments k at fixed L.

    Left: counted peak (markers) and the closed form (line), vertical lines at k = √L and at the integer
    optimum. Right: counted forwards (markers) and 2L − ⌊L/k⌋ (line). Input: one ``chen-segments`` table.
    """
    frame = frames[0].sort_values("k")
    layers = int(frame["layers"].iloc[0])
    fig = Figure(figsize=(10, 4))
    memory, work = fig.subplots(1, 2)
    memory.plot(frame["k"], frame["peak_bytes_formula"] / KiB, "-", color="C0", label="closed form")
    memory.plot(frame["k"], frame["peak_bytes"] / KiB, "o", ms=3, color="C1", label="counted by the store")
    work.plot(frame["k"], frame["forwards_formula"], "-", color="C0", label="2L − ⌊L/k⌋")
    work.plot(frame["k"], frame["forwards"], "o", ms=3, color="C1", label="counted")
    for ax in (memory, work):
        ax.axvline(math.sqrt(layers), color="grey", ls="--", lw=1, label=f"k = √L = {math.sqrt(layers):.3g}")
        ax.set_xlabel("segments k")
        ax.grid(alpha=0.3)
    if "k_opt" in frame:
        memory.axvline(int(frame["k_opt"].iloc[0]), color="C2", ls=":", lw=1,
                       label=f"optimal k = {int(frame['k_opt'].iloc[0])}")
    memory.set_ylabel("peak stored activations (KiB)")
    memory.set_title(f"Memory, L = {layers}")
    work.set_ylabel("layer-forward evaluations")
    work.set_title(f"Compute, L = {layers}")
    memory.legend(fontsize=8)
    work.legend(fontsize=8)
    fig.tight_layout()
    return fig


def depth(frames: list[pd.DataFrame]) -> Figure:
    """Log–log peak stored activations (KiB) vs depth L per schedule, fitted exponents in the legend; and
    layer forwards vs L. Input: one ``chen-depth`` table (fits: remat.experiments.chen_summary.depth_fits)."""
    frame = frames[0]
    fits = depth_fits(frame).set_index("family")
    fig = Figure(figsize=(10, 4))
    memory, work = fig.subplots(1, 2)
    for i, (family, part) in enumerate(frame.groupby("family", sort=False)):
        part = part.sort_values("layers")
        fit = fits.loc[family]
        label = f"{family}: L^{fit['exponent']:.2f}"
        if family in ("recursive", "revolve"):
            label += f" (≈ a + b·log2 L, r² = {fit['r2_log2']:.3f})"
        marker = "osDx"[i % 4]  # distinct markers: recursive and revolve coincide at equal slots
        memory.loglog(part["layers"], part["peak_bytes"] / KiB, marker, ms=7 - i, mfc="none", color=f"C{i}",
                      label=label)
        memory.loglog(part["layers"], part["peak_bytes_formula"] / KiB, "-", lw=1, color=f"C{i}")
        work.loglog(part["layers"], part["forwards"], marker + "-", ms=5, mfc="none", lw=1, color=f"C{i}",
                    label=f"{family}: L^{fit['forwards_exponent']:.2f}")
    memory.set_xlabel("layers L")
    memory.set_ylabel("peak stored activations (KiB)")
    memory.set_title("Memory (points: counted; lines: closed form, Revolve: bound)", fontsize=10)
    work.set_xlabel("layers L")
    work.set_ylabel("layer-forward evaluations")
    work.set_title("Compute")
    for ax in (memory, work):
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=8)
    fig.tight_layout()
    return fig
