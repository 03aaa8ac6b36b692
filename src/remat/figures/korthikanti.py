"""Figures for Korthikanti et al. 2022 from the ``korthikanti-table2`` and ``korthikanti-memory`` tables
(no measuring here). "paper Table N / Figure N" names the paper's; a value computed from its formula says so.

    remat figure korthikanti-percent --inputs results/korthikanti/table2.csv --out figures/korthikanti_percent.png
    remat figure korthikanti-memory  --inputs results/korthikanti/memory.csv --out figures/korthikanti_memory.png
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from remat.units import GB, GiB


def _order(values) -> list:
    return list(dict.fromkeys(values))


def percent(frames: list[pd.DataFrame]) -> Figure:
    """Paper Figure 7 style: activation bytes per layer as a percent of the TP baseline, per technique and model.

    Bars: measured (paper-faithful) bytes; black ticks: paper Table 2's formula evaluated. Only rows with t > 1 and not
    the baseline itself. Input: one ``korthikanti-table2`` table.
    """
    frame = frames[0]
    frame = frame[(frame["tp"] > 1) & (frame["technique"] != "TP baseline")]
    models, techniques = _order(frame["model"]), _order(frame["technique"])
    fig = Figure(figsize=(10, 4.5))
    ax = fig.subplots()
    width = 0.8 / len(techniques)
    x = np.arange(len(models))
    for i, technique in enumerate(techniques):
        rows = frame[frame["technique"] == technique].set_index("model").loc[models]
        pos = x + (i - (len(techniques) - 1) / 2) * width
        bars = ax.bar(pos, rows["percent_of_baseline"], width, label=technique, color=f"C{i}")
        ax.plot(pos, rows["percent_of_baseline_formula"], "_", color="black", ms=12, mew=1.5)
        ax.bar_label(bars, fmt="%.0f", fontsize=7, padding=1)
    ax.plot([], [], "_", color="black", ms=12, mew=1.5, label="formula (paper Table 2)")
    ax.set_xticks(x, models)
    ax.set_ylabel("activation memory per layer (% of TP baseline)")
    tp = int(frame["tp"].iloc[0])
    ax.set_title(f"Activation memory relative to tensor parallelism alone (t = {tp}), measured per layer")
    ax.set_ylim(0, float(frame["percent_of_baseline"].max()) * 1.3)
    ax.legend(fontsize=8, ncol=3, loc="upper right")
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    return fig


def memory(frames: list[pd.DataFrame]) -> Figure:
    """Paper Figure 1 style: memory per GPU of the first pipeline stage — parameters + optimizer state as the
    first stage holds them, activations of the layers (measured per layer × L × interleave factor) and outside
    the layers (§4.3) — stacked, in GiB (2**30 bytes), per model and technique; a black tick on each
    parameter segment marks the paper's even share 18·P/(t·p) (``model_state_even_bytes``); the dashed line
    is the table's GPU memory (``gpu``, ``gpu_memory_bytes``: the A100 80GB preset's 80 GiB by default, one
    constant with the planner). Input: one ``korthikanti-memory`` table."""
    frame = frames[0]
    models, techniques = _order(frame["model"]), _order(frame["technique"])
    fig = Figure(figsize=(12, 4.8))
    ax = fig.subplots()
    width = 0.8 / len(techniques)
    x = np.arange(len(models))
    parts = [("model_state_bytes", "parameters + optimizer state (first stage)", "0.65"),
             ("activations_layers", "activations (layers)", "C0"),
             ("activations_outside", "activations (outside layers)", "C1")]
    for i, technique in enumerate(techniques):
        rows = frame[frame["technique"] == technique].set_index("model").loc[models]
        pos = x + (i - (len(techniques) - 1) / 2) * width
        bottom = np.zeros(len(models))
        for column, label, color in parts:
            values = rows[column].to_numpy() / GiB
            ax.bar(pos, values, width * 0.95, bottom=bottom, color=color, edgecolor="white", lw=0.3,
                   label=label if i == 0 else None)
            bottom += values
        ax.plot(pos, rows["model_state_even_bytes"].to_numpy() / GiB, "_", color="black", ms=7, mew=1.5,
                label="params + optimizer, paper: 18·P/(t·p)" if i == 0 else None)
        for p, top in zip(pos, bottom):
            ax.text(p, top + 1, technique, rotation=90, ha="center", va="bottom", fontsize=6.5)
    capacity, gpu = int(frame["gpu_memory_bytes"].iloc[0]), str(frame["gpu"].iloc[0])
    ax.axhline(capacity / GiB, color="red", ls="--", lw=1,
               label=f"{gpu}: {capacity / GiB:.1f} GiB = {capacity / GB:.1f} GB")
    ax.set_xticks(x, models)
    ax.set_ylabel("memory per GPU (GiB)")
    bpp = int(frame["bytes_per_param"].iloc[0])
    ax.set_title(f"Memory per GPU, first pipeline stage, paper Figure 1 layout ({bpp} B/parameter for weights, "
                 "gradients, Adam)")
    ax.set_ylim(0, float((frame["total_bytes"] / GiB).max()) * 1.35)
    ax.legend(fontsize=8, loc="upper left")
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    return fig
