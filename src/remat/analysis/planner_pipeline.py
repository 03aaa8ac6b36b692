"""The planner report's pipeline-rank findings: per-rank plans beside one shared plan for torch's schedules on the
paper's models (predicted, ``planner.schedules``), and per-rank plans run on gloo ranks (``planner.pipeline``, make
extended), each rank held to max(1 %, 8 MiB) of its predicted peak and to its budget, its gradients to the unsplit
model's bit for bit. A gain is t_shared / t_per_rank − 1."""

from __future__ import annotations

import math

import pandas as pd

from remat.analysis import gates
from remat.analysis.findings import Finding, judge
from remat.units import MINUS, GiB, MiB, percent, signed_percent

TOLERANCE, TOLERANCE_TEXT = (0.01, 8 * MiB), "max(1 %, 8 MiB)"
"""A rank's measured peak within max(1 % of it, 8 MiB) of the prediction."""

CLAIMS = {
    "schedules.refused": "Schedules refused, with the reason",
    "schedules.gain": "Largest predicted gain of per-rank plans over one plan for every rank",
    "schedules.gain.where": "Where", "schedules.slower": "Schedules whose per-rank plans are predicted slower",
    "pipeline.runs": "Schedules and pipeline sizes run on gloo ranks", "pipeline.ranks": "Ranks measured",
    "pipeline.within": f"Ranks whose measured peak is within {TOLERANCE_TEXT} of the prediction",
    "pipeline.fit": "Ranks whose measured peak is within their budget",
    "pipeline.error": "Predicted − measured peak over the ranks",
    "pipeline.bitwise": "Ranks whose gradients equal the unsplit model's bit for bit",
}


def _m(id: str, value: float, text: str | None = None, where: str = "predicted") -> Finding:
    return judge(id, CLAIMS[id], value, where=where, text=str(value) if text is None else text)


def _gains(frame: pd.DataFrame) -> pd.Series:
    return frame["uniform_step_time_s"] / frame["step_time_s"] - 1


def schedule_findings(frame: pd.DataFrame) -> list[Finding]:
    ok, refused = frame[frame["feasible"].astype(bool)], frame[~frame["feasible"].astype(bool)]
    gains = _gains(ok)
    best, slower = ok.loc[gains.idxmax()] if gains.notna().any() else None, int((gains < -1e-12).sum())
    gain = _m("schedules.gain", math.nan if best is None else gains.max(),
              "—" if best is None else percent(gains.max(), 1))
    where = "—" if best is None else f"{best['schedule']}, {best['model']} on {best['gpu']}" + (
        " with SP" if best["sp"] else "")
    return [gates.gated(gain, [f"the per-rank plans are predicted slower at {slower}" if slower else ""]),
            _m("schedules.gain.where", math.nan, where), _m("schedules.slower", slower),
            _m("schedules.refused", len(refused), "; ".join(f"{s}: {n}" for s, n in zip(refused["schedule"],
                                                                                       refused["note"])) or "none")]


def _mib(n: float) -> str:
    return f"{n / MiB:+.2f}".replace("-", MINUS)


def _within(frame: pd.DataFrame) -> pd.Series:
    allowed = (frame["measured_peak_bytes"] * TOLERANCE[0]).clip(lower=TOLERANCE[1])
    return frame["peak_error_bytes"].abs() <= allowed


def pipeline_findings(frame: pd.DataFrame) -> list[Finding]:
    at, error = "CPU, gloo ranks, float32", frame["peak_error_bytes"]
    runs = frame.groupby(["schedule", "pp"], sort=False).ngroups
    return [
        _m("pipeline.runs", runs, f"{runs}: {', '.join(dict.fromkeys(frame['schedule']))} at p = "
                                  f"{', '.join(map(str, sorted(frame['pp'].unique())))}", at),
        _m("pipeline.ranks", len(frame), where=at), _m("pipeline.within", int(_within(frame).sum()), where=at),
        _m("pipeline.fit", int((frame["measured_peak_bytes"] <= frame["budget_bytes"]).sum()), where=at),
        _m("pipeline.error", math.nan, f"{signed_percent(frame['peak_rel_error'].min(), 1)} to "
                                       f"{signed_percent(frame['peak_rel_error'].max(), 1)} "
                                       f"({_mib(error.min())} to {_mib(error.max())} MiB)", at),
        _m("pipeline.bitwise", int((frame["grads_max_rel_error"] == 0).sum()), where=at)]


def schedules_display(frame: pd.DataFrame) -> pd.DataFrame:
    """@tbl-schedules: per schedule, ranks × stages, micro-batches, the step with per-rank plans and with one shared
    plan (s, predicted), the gain, the ranks with a plan of their own and the largest rank's peak (GiB); "—" where
    the schedule was refused (``schedules.refused`` says why)."""
    ok = frame["feasible"].astype(bool)
    num = lambda col, f: [f(x) if k else "—" for x, k in zip(frame[col], ok)]           # noqa: E731
    return pd.DataFrame({
        "model": frame["model"], "schedule": frame["schedule"],
        "ranks × stages": [f"{p} × {k}" for p, k in zip(frame["pp"], frame["stages_per_rank"])],
        "N": num("micro_batches", lambda x: f"{int(x)}"), "per-rank (s)": num("step_time_s", lambda x: f"{x:.3f}"),
        "shared (s)": num("uniform_step_time_s", lambda x: "none fits" if math.isnan(x) else f"{x:.3f}"),
        "gain": [signed_percent(g, 2) if k and not math.isnan(g) else "—" for g, k in zip(_gains(frame), ok)],
        "ranks with their own plan": num("ranks_own_plan", lambda x: f"{int(x)}"),
        "largest peak (GiB)": num("peak_bytes", lambda x: f"{x / GiB:.2f}")})


def pipeline_display(frame: pd.DataFrame) -> pd.DataFrame:
    """@tbl-pipeline: per schedule, p and rank: its stages and plan, budget, predicted and measured peak (MiB), the
    error and whether it is within the tolerance, the gradient check."""
    return pd.DataFrame({
        "schedule": frame["schedule"], "p": frame["pp"], "rank": frame["rank"], "stages": frame["stages"],
        "plan": frame["plan"].str.replace(",", ", "), "budget (MiB)": (frame["budget_bytes"] / MiB).round(2),
        "predicted (MiB)": (frame["predicted_peak_bytes"] / MiB).round(2),
        "measured (MiB)": (frame["measured_peak_bytes"] / MiB).round(2),
        "error": frame["peak_rel_error"].map(lambda x: signed_percent(x, 1)),
        "within": _within(frame).map({True: "yes", False: "NO"}),
        "bitwise": (frame["grads_max_rel_error"] == 0).map({True: "yes", False: "NO"})})
