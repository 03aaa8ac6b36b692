"""Figures of the planner experiments (tables in, one figure out; nothing is measured here).

    remat figure planner-frontier   --inputs results/planner/frontier.csv --out figures/planner_frontier.png
    remat figure planner-measured   --inputs results/planner/validate/cpu.csv --out figures/planner_measured.png
    remat figure planner-peak       --inputs results/planner/validate/cpu.csv --out figures/planner_peak.png
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from remat.units import GiB, MiB

PEAK_BAND = 0.05
"""Half-width of the grey band around y = x in ``peak``: predicted within ±5 % of measured (a fraction)."""

_STYLE = {"plan": dict(color="black", lw=2.2, marker="o", zorder=5)}


def _methods(frame: pd.DataFrame) -> list[str]:
    methods = list(dict.fromkeys(frame["method"]))
    return ["plan"] + [m for m in methods if m != "plan"]


def _panel(ax, frame: pd.DataFrame, x: str, y: str, unit: float, measured: str | None = None) -> None:
    for i, method in enumerate(_methods(frame)):
        rows = frame[(frame["method"] == method) & frame["feasible"].astype(bool)].sort_values(x)
        if rows.empty:
            continue
        style = _STYLE.get(method, dict(color=f"C{i}", lw=1.2, marker=".", alpha=0.85))
        ax.plot(rows[x] / unit, rows[y], label=method, **style)
        if measured and measured in rows and rows[measured].notna().any():
            ax.plot(rows[x] / unit, rows[measured], ls="none", marker="x", color=style["color"], ms=6)


def frontier(frames: list[pd.DataFrame]) -> Figure:
    """Budget (GiB) vs predicted step time (s) of the plan and each baseline, one panel per model; only
    budgets where the method fits. Input: one ``planner-frontier`` table."""
    frame = frames[0]
    frame = frame.assign(label=frame["model"])
    return _budget_panels(frame, "step_time_s", GiB, "GiB", None,
                          lambda label, rows: f"{label} ({rows['gpu'].iloc[0]}, predicted)")


def measured(frames: list[pd.DataFrame]) -> Figure:
    """Tiny validation models (on the table's device): budget (MiB) vs step time, predicted (lines) and
    measured (×), plan and baselines. Input: one ``planner-validate`` table."""
    frame = frames[0]
    frame = frame.assign(label=frame["model"] + " L=" + frame["layers"].astype(str))
    return _budget_panels(frame, "predicted_step_time_s", MiB, "MiB", "measured_step_time_s",
                          lambda label, rows: f"{label} on {rows['device'].iloc[0]}: predicted (line), measured (×)")


def _budget_panels(frame: pd.DataFrame, y: str, unit: int, unit_name: str, measured_col: str | None,
                   title) -> Figure:
    """One panel per ``label``: memory budget against step time, each method where it fits."""
    labels = list(dict.fromkeys(frame["label"]))
    fig = Figure(figsize=(5.2 * len(labels), 4.2))
    axes = np.atleast_1d(fig.subplots(1, len(labels)))
    for ax, label in zip(axes, labels):
        rows = frame[frame["label"] == label]
        _panel(ax, rows, "budget_bytes", y, unit, measured=measured_col)
        ax.set(title=title(label, rows), xlabel=f"memory budget ({unit_name})", ylabel="step time (s)")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    return fig


def peak(frames: list[pd.DataFrame]) -> Figure:
    """Predicted vs measured peak bytes (MiB) of every applied plan, with y = x and a ±PEAK_BAND band.
    Input: one ``planner-validate`` table."""
    frame = frames[0]
    frame = frame[frame["measured_peak_bytes"].notna()].drop_duplicates(["model", "layers", "spec"])
    fig = Figure(figsize=(5.5, 5))
    ax = fig.subplots()
    lo, hi = frame[["predicted_peak_bytes", "measured_peak_bytes"]].min().min() / MiB, \
        frame[["predicted_peak_bytes", "measured_peak_bytes"]].max().max() / MiB
    grid = np.linspace(lo * 0.9, hi * 1.05, 50)
    ax.plot(grid, grid, color="gray", lw=1)
    ax.fill_between(grid, grid * (1 - PEAK_BAND), grid * (1 + PEAK_BAND), color="gray", alpha=0.15,
                    label=f"±{PEAK_BAND * 100:g} %")
    for i, method in enumerate(_methods(frame)):
        rows = frame[frame["method"] == method]
        ax.scatter(rows["measured_peak_bytes"] / MiB, rows["predicted_peak_bytes"] / MiB, s=22,
                   color="black" if method == "plan" else f"C{i}", label=method, zorder=3)
    ax.set(xlabel="measured peak (MiB)", ylabel="predicted peak (MiB)",
           title="applied plans: predicted vs measured peak")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig
