"""The planner report's comparison with torch.compile's memory budget (remat.experiments.compile_budget): per
model and compile budget, compile's measured peak and step beside the fastest eager and compiled tensor plan
whose measured peak is at or below it (``comparison``), and the findings that count where remat is at least as
fast (``findings``). A ratio is t_plan / t_compile − 1 (a fraction). Step times are timings: a run made on a
busy machine makes them invalid (gates.busy); peaks stand."""

from __future__ import annotations

import math

import pandas as pd

from remat.analysis import gates
from remat.analysis.findings import Finding, judge
from remat.units import MiB, percent, signed_percent

EAGER_SLACK = 0.05
"""The slowdown an eager tensor plan may have over compile at an equal or lower peak (issue [5/6]'s target:
eager cannot fuse, so it is held to within 5 %, the compiled plan to at least as fast)."""
PLANS = (("eager tensor", "eager"), ("compiled tensor", "compiled"))
"""Modes compared with compile: (mode, column prefix)."""

CLAIMS = {
    "compile.device": "Where the comparison with torch.compile was measured",
    "compile.models": "Models compared", "compile.rounds": "Interleaved rounds per point",
    "compile.budgets": "Compile budgets measured (all models)", "compile.failed": "Points that failed",
    "compile.compiled": "Compile budgets where the compiled tensor plan, at an equal or lower measured peak, "
                        "is at least as fast",
    "compile.compiled.worst": "Largest slowdown of the compiled tensor plan at an equal or lower peak",
    "compile.eager": f"Compile budgets where the eager tensor plan, at an equal or lower measured peak, is within "
                     f"{EAGER_SLACK:.0%} of compile",
    "compile.plain": "The model in eager without a plan over compile at budget 1.0",
    "compile.monotone": "Models whose compile peak never rises as its budget falls",
    "compile.lower": "Models where a tensor plan reaches a lower peak than any compile budget",
    "compile.spread": "Largest spread between the rounds of one point (slowest − fastest, over their median)",
    "compile.same": "Largest spread of one plan measured at several budgets (same model, mode, predicted and "
                    "measured peak, and op sets kept; slowest − fastest, over their median)",
}
SAME_PLAN = ["model", "mode", "predicted_peak_bytes", "kept", "peak_bytes"]
"""Columns that together identify a plan measured more than once (``_same``)."""


def comparison(frame: pd.DataFrame) -> pd.DataFrame:
    """Per (model, compile budget) measured: compile's peak and step, then per PLANS mode the fastest plan whose
    measured peak is at most compile's: its peak and ratio (NaN where none reaches it)."""
    ok = frame[frame["error"].isna()] if "error" in frame else frame
    rows = []
    for model, g in ok.groupby("model", sort=False):
        for _, c in g[g["mode"] == "compile"].iterrows():
            row = {"model": model, "kind": c["kind"], "budget": c["compile_budget"], "peak": c["peak_bytes"],
                   "step": c["step_s"]}
            for mode, key in PLANS:
                fits = g[(g["mode"] == mode) & (g["peak_bytes"] <= c["peak_bytes"])]
                best = fits.loc[fits["step_s"].idxmin()] if len(fits) else None
                row[f"{key}_peak"] = math.nan if best is None else best["peak_bytes"]
                row[f"{key}_ratio"] = math.nan if best is None else best["step_s"] / c["step_s"] - 1
            rows.append(row)
    return pd.DataFrame(rows, columns=["model", "kind", "budget", "peak", "step", "eager_peak", "eager_ratio",
                                       "compiled_peak", "compiled_ratio"])


def _monotone(g: pd.DataFrame) -> bool:
    peaks = g[g["mode"] == "compile"].sort_values("compile_budget")["peak_bytes"].to_numpy()
    return bool((peaks[1:] >= peaks[:-1]).all())


def _plain(ok: pd.DataFrame) -> dict[str, float]:
    """Per model kind: the step in eager without a plan over compile's at budget 1.0."""
    out = {}
    for _, g in ok.groupby("model", sort=False):
        plain, first = g[g["mode"] == "eager"], g[(g["mode"] == "compile") & (g["compile_budget"] == 1.0)]
        if len(plain) and len(first):
            out[g["kind"].iloc[0]] = plain["step_s"].iloc[0] / first["step_s"].iloc[0] - 1
    return out


def _spread(ok: pd.DataFrame) -> float:
    """The largest (slowest − fastest round) / step_s of one point (``round_ms``: its rounds' medians, in ms)."""
    rounds = ok["round_ms"].dropna().astype(str).map(lambda text: [float(x) for x in text.split()])
    return max(((max(r) - min(r)) / (1e3 * t) for r, t in zip(rounds, ok.loc[rounds.index, "step_s"])),
               default=math.nan)


def _same(ok: pd.DataFrame) -> float:
    """The largest (slowest − fastest) / median step among points that measured one plan at several budgets
    (SAME_PLAN equal): the run's noise, read off repeats of an identical configuration. NaN where none repeats."""
    if not set(SAME_PLAN) <= set(ok.columns):
        return math.nan
    steps = ok[ok["mode"].str.contains("tensor")].dropna(subset=SAME_PLAN).groupby(SAME_PLAN)["step_s"]
    return max(((s.max() - s.min()) / s.median() for _, s in steps if len(s) > 1), default=math.nan)


def findings(frame: pd.DataFrame) -> list[Finding]:
    """Every finding of CLAIMS from the planner-compile rows shown (attrs["where"])."""
    at, cmp = frame.attrs.get("where", ""), comparison(frame)
    m = lambda id, value, text=None, where=at: judge(id, CLAIMS[id], value, where=where,  # noqa: E731
                                                     text=str(value) if text is None else text)
    failed = frame[frame["error"].notna()] if "error" in frame else frame.iloc[:0]
    ok, timed = frame.drop(failed.index), [gates.busy(frame)]
    models = [g for _, g in ok.groupby("model", sort=False)]
    hits = {"compiled": cmp["compiled_ratio"] <= 0, "eager": cmp["eager_ratio"] <= EAGER_SLACK}
    worst, plain, monotone = cmp["compiled_ratio"].max(), _plain(ok), sum(_monotone(g) for g in models)
    lower = sum(g[g["mode"] != "compile"]["peak_bytes"].min() < g[g["mode"] == "compile"]["peak_bytes"].min()
                for g in models)
    return [
        m("compile.device", math.nan, str(frame["device"].iloc[0]).upper()),
        m("compile.models", frame["model"].nunique(), "; ".join(dict.fromkeys(frame["model"])), ""),
        m("compile.rounds", int(frame["rounds"].iloc[0]), where=""), m("compile.budgets", len(cmp)),
        m("compile.failed", len(failed), "none" if failed.empty else
          f"{len(failed)}: {failed['mode'].iloc[0]} ({failed['error'].iloc[0]})"),
        *(gates.gated(m(f"compile.{k}", int(h.sum()), f"{int(h.sum())} of {len(h)}"), timed) for k, h in hits.items()),
        gates.gated(m("compile.compiled.worst", worst, signed_percent(worst, 1)), timed),
        gates.gated(m("compile.plain", max(plain.values(), default=math.nan), ", ".join(
            f"{kind} {signed_percent(x, 1, ' %')}" for kind, x in plain.items()) or "—"), timed),
        m("compile.monotone", monotone, f"{monotone} of {len(models)}"),
        m("compile.lower", lower, f"{lower} of {len(models)}"),
        m("compile.spread", _spread(ok), percent(_spread(ok), 0)), m("compile.same", _same(ok), percent(_same(ok), 0))]


def display(frame: pd.DataFrame) -> pd.DataFrame:
    """@tbl-compile: per model and compile budget, compile's peak (MiB) and step (ms), then the fastest eager and
    compiled tensor plan at or below that peak: its peak and its step over compile's ("—": no plan reaches it)."""
    cmp = comparison(frame)
    mib = lambda x: "—" if x != x else f"{x / MiB:.1f}"
    pct = lambda x: "—" if x != x else signed_percent(x, 1)
    return pd.DataFrame({
        "model": cmp["kind"], "compile budget": cmp["budget"].map("{:.1f}".format),
        "compile peak (MiB)": cmp["peak"].map(mib), "compile step (ms)": cmp["step"].map(lambda s: f"{s * 1e3:.1f}"),
        **{f"{mode} {what}": cmp[f"{key}_{col}"].map(fmt) for mode, key in PLANS
           for what, col, fmt in (("peak (MiB)", "peak", mib), ("step vs compile", "ratio", pct))}})

