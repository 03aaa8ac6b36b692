"""The index page's picture, from the index's findings (results/findings/index.csv): each scorecard claim's
value over the paper's, coloured by the verdict the analysis gave it (nothing is judged here).

    remat figure scorecard --inputs results/findings/index.csv --out figures/scorecard.png
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from remat.analysis.findings import (GRADES, INVALID, MEASURED, MINOR, NOT_MEASURED, NOT_REPRODUCED,
                                     NOT_REPRODUCIBLE, PARTIAL, REPRODUCED)

COLOURS = {REPRODUCED: "#1a7f37", MINOR: "#7d8c00", PARTIAL: "#bf8700", NOT_REPRODUCED: "#cf222e",
           NOT_REPRODUCIBLE: "#57606a", INVALID: "#8250df", NOT_MEASURED: "#57606a", MEASURED: "#57606a"}
"""Each status's colour, here and in the index's badges (remat.report.scorecard)."""


def ratios(frames: list[pd.DataFrame]) -> Figure:
    """Ours ÷ the paper's value per graded claim (log x; 1 marked), one row each, coloured by grade (each claim's
    own tolerance decided the grade: no common band is drawn). Left out, and counted in the x label: claims not
    graded here (invalid, not measured, a stand-in not reproducible here: no data to set beside the paper's) and
    values that make no ratio (not a number, zero, signs apart)."""
    claims = frames[0]
    ratio = claims["value"] / claims["paper_value"]
    shown = claims[np.isfinite(ratio) & (ratio > 0) & claims["status"].isin(GRADES)].iloc[::-1]
    fig = Figure(figsize=(8, 0.3 * len(shown) + 1.3), layout="constrained")
    ax = fig.subplots()
    ax.axvline(1, color="0.3", lw=1)
    r = ratio[shown.index]
    ax.scatter(r, range(len(shown)), s=40, c=[COLOURS[s] for s in shown["status"]], zorder=2)
    names = [f"{c[:46]}{'…' * (len(c) > 46)} ({p.split()[0]})" for c, p in zip(shown["claim"], shown["scorecard"])]
    ax.set_yticks(range(len(shown)), names, fontsize=8)
    ax.set_xscale("log")
    ax.set_xlim(min(0.5, r.min() / 1.2), max(2, r.max() * 1.2))   # at least 0.5–2×; an empty r's NaN leaves those
    ax.xaxis.set_major_locator(LogLocator(subs=(1, 2, 5)))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}×"))
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel(f"ours ÷ the paper's value (log scale); {len(claims) - len(shown)} claims "
                  "not graded or without a ratio are left out")
    ax.grid(axis="x", which="both", alpha=0.3)
    return fig
