"""The planner report's pipeline-rank findings: per-rank plans beside one shared plan for torch's schedules on the
paper's models (predicted, ``planner.schedules``; a gain is t_shared / t_per_rank − 1), and per-rank plans run on
gloo ranks (``planner.pipeline``, make extended), each rank held to max(1 %, 8 MiB) of its prediction and to its
budget, its gradients to the unsplit model's bit for bit."""

from __future__ import annotations

import pandas as pd

from remat.analysis import gates
from remat.analysis.findings import Finding, judge
from remat.units import MiB, signed_percent

TOLERANCE, TOLERANCE_TEXT = (0.01, 8 * MiB), "max(1 %, 8 MiB)"
"""A rank's measured peak within max(1 % of it, 8 MiB) of the prediction."""

CLAIMS = {"schedules.gains": "Per-rank plans over one plan for every rank, per schedule (a refused one: why)",
          "schedules.slower": "Schedules whose per-rank plans are predicted slower", "pipeline.ranks": "Ranks run",
          "pipeline.within": f"Ranks whose measured peak is within {TOLERANCE_TEXT} of the prediction",
          "pipeline.fit": "Ranks whose measured peak is within their budget",
          "pipeline.bitwise": "Ranks whose gradients equal the unsplit model's bit for bit"}
YES = {True: "yes", False: "NO"}


def _m(id: str, value: float, text: str | None = None, where: str = "CPU, gloo ranks, float32") -> Finding:
    return judge(id, CLAIMS[id], value, where=where, text=str(value) if text is None else text)


def schedule_findings(frame: pd.DataFrame) -> list[Finding]:
    gains = frame["uniform_step_time_s"] / frame["step_time_s"] - 1
    each = [f"{s} {signed_percent(g, 2)}" if ok else f"{s} refused ({note})"
            for s, g, ok, note in zip(frame["schedule"], gains, frame["feasible"].astype(bool), frame["note"])]
    first, slower = frame.iloc[0], int((gains < -1e-12).sum())
    text = f"{first['model']} on {first['gpu']}{' with SP' if first['sp'] else ''}: {', '.join(each)}"
    found = _m("schedules.gains", gains.max(), text, "predicted")
    return [gates.gated(found, [f"the per-rank plans are predicted slower at {slower}" if slower else ""]),
            _m("schedules.slower", slower, where="predicted")]


def _within(frame: pd.DataFrame) -> pd.Series:
    allowed = (frame["measured_peak_bytes"] * TOLERANCE[0]).clip(lower=TOLERANCE[1])
    return frame["peak_error_bytes"].abs() <= allowed


def pipeline_findings(frame: pd.DataFrame) -> list[Finding]:
    return [_m("pipeline.ranks", len(frame)), _m("pipeline.within", int(_within(frame).sum())),
            _m("pipeline.fit", int((frame["measured_peak_bytes"] <= frame["budget_bytes"]).sum())),
            _m("pipeline.bitwise", int((frame["grads_max_rel_error"] == 0).sum()))]


def pipeline_display(frame: pd.DataFrame) -> pd.DataFrame:
    """@tbl-pipeline: per schedule, p and rank: its stages and plan, budget, predicted and measured peak (MiB), the
    error and whether it is within the tolerance, the gradient check."""
    mib = {f"{k} (MiB)": (frame[c] / MiB).round(2) for k, c in (("budget", "budget_bytes"), (
        "predicted", "predicted_peak_bytes"), ("measured", "measured_peak_bytes"))}
    return pd.DataFrame({
        "schedule": frame["schedule"], "p": frame["pp"], "rank": frame["rank"], "stages": frame["stages"],
        "plan": frame["plan"].str.replace(",", ", "), **mib, "error": frame["peak_rel_error"].map(signed_percent),
        "within": _within(frame).map(YES), "bitwise": (frame["grads_max_rel_error"] == 0).map(YES)})
