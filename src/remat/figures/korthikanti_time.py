"""Paper Figure 8 beside the roofline time model's prediction, from the ``korthikanti-figure8`` table (no
measuring here).

    remat figure korthikanti-figure8 --inputs results/korthikanti/figure8.csv --out figures/korthikanti_figure8.png
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

_PARTS = (("forward", "C0"), ("backward", "C1"), ("recompute", "C3"))


def _stack(row: pd.Series, prefix: str) -> list[float]:
    """Forward, backward (gradient work) and recompute % of the baseline layer time."""
    fwd, fb, rec = row[f"{prefix}forward_pct"], row[f"{prefix}forward_backward_pct"], row[f"{prefix}recompute_pct"]
    return [fwd, fb - fwd, rec]


def figure8(frames: list[pd.DataFrame]) -> Figure:
    """Per model and variant (full recompute; SP + selective = "present"), two stacked bars: paper Figure 8
    (hatched, read off the bars) and the model's prediction — forward, backward and recompute in % of the
    baseline layer time (no recompute, no SP). Input: one ``korthikanti-figure8`` table."""
    frame = frames[0]
    fig = Figure(figsize=(10, 4.8))
    ax = fig.subplots()
    labels, x = [], 0.0
    for _, row in frame.iterrows():
        for offset, prefix, hatch in ((-0.2, "paper_", "//"), (0.2, "", None)):
            if prefix and pd.isna(row.get(f"{prefix}forward_pct", np.nan)):
                continue
            bottom = 0.0
            for (part, color), value in zip(_PARTS, _stack(row, prefix)):
                ax.bar(x + offset, value, 0.38, bottom=bottom, color=color, hatch=hatch, edgecolor="white",
                       label=part if x == 0 and not prefix else None)
                bottom += value
            ax.text(x + offset, bottom + 1, f"{bottom:.0f}", ha="center", fontsize=7)
        labels.append((x, f"{row['model']}\n{row['variant']}"))
        x += 1.0
    ax.bar(0, 0, color="grey", hatch="//", edgecolor="white", label="paper Figure 8 (left bar)")
    ax.set_xticks([p for p, _ in labels], [name for _, name in labels], fontsize=8)
    ax.set_ylabel("% of the baseline layer time\n(forward + backward, no recompute, no SP)")
    ax.set_title(f"paper Figure 8 (left, hatched) vs the roofline model (right), {frame['gpu'].iloc[0]}")
    tops = frame[["total_pct", "paper_total_pct"]].max().max()
    ax.set_ylim(0, max(160.0, 1.15 * float(tops)))  # headroom for the legend above the tallest bar
    ax.axhline(100, color="black", lw=0.6)
    ax.legend(fontsize=8, ncol=4, loc="upper right")
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    return fig
