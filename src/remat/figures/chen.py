"""Figures for Chen et al. 2016 from the ``chen-*`` tables (no measuring here).

    remat figure chen-segments --inputs results/chen/segments.csv --out figures/chen_segments.png
    remat figure chen-depth    --inputs results/chen/depth.csv    --out figures/chen_depth.png
    remat figure chen-resnet   --inputs results/chen/resnet.csv   --out figures/chen_resnet.png
    remat figure chen-lstm     --inputs results/chen/lstm.csv     --out figures/chen_lstm.png
"""

from __future__ import annotations

import math

import pandas as pd
from matplotlib.figure import Figure

from remat.analysis.chen2016 import depth_fits, strategy_fits
from remat.paper import PAPER
from remat.units import GiB, KiB



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
    layer forwards vs L. Input: one ``chen-depth`` table (fits: remat.analysis.chen2016.depth_fits)."""
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


STRATEGY_ORDER = ("no-opt", "inplace", "sharing", "drop-cheap", "sublinear")


def _strategies(frame: pd.DataFrame, size: str, xlabel: str, title: str) -> Figure:
    """Left: planned feature-map memory (GiB) of the strategies of Figures 5 and 6 against ``size``, log–log, exponents
    in the legend. Right: Algorithm 3 at the largest size — planned bytes against the budget B (B = 0 drawn at
    the left edge), the chosen plan, √n and the optimum of x + y as horizontal lines."""
    fits = strategy_fits(frame, size).set_index("strategy")
    fig = Figure(figsize=(11, 4.2))
    memory, search = fig.subplots(1, 2)
    for i, strategy in enumerate(s for s in STRATEGY_ORDER if s in fits.index):
        part = frame[frame["strategy"] == strategy].sort_values(size)
        memory.loglog(part[size], part["planned_bytes"] / GiB, "os^Dv"[i] + "-", mfc="none", color=f"C{i}",
                      label=f"{strategy}: {size}^{fits.loc[strategy, 'exponent']:.2f}")
    memory.set_xlabel(xlabel)
    memory.set_ylabel("planned feature-map memory (GiB)")
    memory.set_title(title, fontsize=10)
    largest = frame[frame[size] == frame[size].max()]
    budgets = largest[largest["strategy"] == "budget"].sort_values("budget_bytes")
    search.plot(budgets["budget_bytes"] / GiB, budgets["planned_bytes"] / GiB, "o-", color="C4",
                label="Algorithm 3 at budget B")
    for j, (name, style) in enumerate((("sublinear", "-"), ("sqrt", "--"), ("optimal", ":"))):
        row = largest[largest["strategy"] == name]
        if len(row):
            search.axhline(row["planned_bytes"].iloc[0] / GiB, ls=style, color=f"C{5 + j}",
                           label=f"{name}: {row['planned_bytes'].iloc[0] / GiB:.2f} GiB")
    search.set_xlabel("budget B (GiB of segment outputs)")
    search.set_ylabel("planned feature-map memory (GiB)")
    search.set_title(f"Algorithm 3 at {size} = {int(frame[size].max())}", fontsize=10)
    for ax in (memory, search):
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def resnet(frames: list[pd.DataFrame]) -> Figure:
    """Chen Figure 5a from a ``chen-resnet`` table, with the paper's 1,000-layer numbers (GB read as 10⁹
    bytes) marked on the left panel when the sweep reaches that depth."""
    frame = frames[0]
    fig = _strategies(frame, "depth", "requested depth (layers)",
                      f"ResNet (batch {int(frame['batch'].iloc[0])}, {int(frame['image'].iloc[0])}²): memory vs depth")
    memory = fig.axes[0]
    depth = PAPER["chen.resnet_depth"].value
    if frame["depth"].max() < depth:
        return fig
    for key, label in (("chen.resnet_before_gb", "paper: before"),
                       ("chen.resnet_after_gb", "paper: sublinear, GPU total")):
        memory.plot(depth, PAPER[key].value * 1e9 / GiB, "kx", ms=9)
        memory.annotate(label, (depth, PAPER[key].value * 1e9 / GiB), fontsize=7,
                        xytext=(-60, 4), textcoords="offset points")
    return fig


def lstm(frames: list[pd.DataFrame]) -> Figure:
    """Chen Figure 6a from a ``chen-lstm`` table."""
    frame = frames[0]
    return _strategies(frame, "length", "unrolled length (time steps)",
                       f"LSTM ({int(frame['layers'].iloc[0])} × {int(frame['hidden'].iloc[0])}, batch "
                       f"{int(frame['batch'].iloc[0])}): memory vs length")
