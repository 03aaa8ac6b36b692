"""The planner report's comparison with torch.compile's memory budget (remat.experiments.compile_budget and
compile_paired): per model and compile budget, compile's peak and step beside each plan mode's candidate
(``comparison``), and the findings. A ratio is t_plan / t_compile − 1; the speed targets are judged on the paired
ratios only (separate processes differ by more than their margins); a busy run's step times are invalid."""

from __future__ import annotations

import math

import pandas as pd

from remat.analysis import catalog, gates
from remat.analysis.findings import Finding, judge, not_measured
from remat.experiments.pairing import PLAIN_AT, candidate
from remat.units import MiB, percent, signed_percent

EAGER_SLACK = 0.05
"""The slowdown an eager tensor plan (which cannot fuse) may have over compile at an equal or lower peak."""
PLANS = (("eager tensor", "eager"), ("compiled tensor", "compiled"))
"""Modes compared with compile: (mode, column prefix)."""
PAIRED = " (paired steps: median over palindromes)"

CLAIMS = {
    "compile.device": "Where the comparison with torch.compile was measured",
    "compile.models": "Models compared", "compile.rounds": "Interleaved rounds per point",
    "compile.budgets": "Compile budgets measured (all models)", "compile.failed": "Points that failed",
    "compile.compiled": "Compile budgets where the compiled tensor plan, at an equal or lower measured peak, "
                        "is at least as fast" + PAIRED,
    "compile.compiled.worst": "Largest slowdown of the compiled tensor plan at an equal or lower peak" + PAIRED,
    "compile.eager": f"Compile budgets where the eager tensor plan, at an equal or lower measured peak, is within "
                     f"{EAGER_SLACK:.0%} of compile" + PAIRED,
    "compile.resolution": "Widest interquartile range of one pair's ratio over its palindromes",
    "compile.unresolved": "Pairs whose interquartile range holds their target's line (0 compiled, "
                          f"{EAGER_SLACK:.0%} eager): a verdict that another run could turn",
    "compile.plain": f"The model in eager without a plan over compile at budget {PLAIN_AT}" + PAIRED,
    "compile.monotone": "Models whose compile peak never rises as its budget falls",
    "compile.lower": "Models where a tensor plan reaches a lower peak than any compile budget",
    "compile.spread": "Largest spread between the rounds of one point (slowest − fastest, over their median)",
    "compile.same": "Largest spread of one plan measured at several budgets (same model, mode, predicted and "
                    "measured peak, and op sets kept; slowest − fastest, over their median)",
}
SPEED = ("compile.compiled", "compile.compiled.worst", "compile.eager", "compile.plain", "compile.resolution",
         "compile.unresolved")
"""The claims judged on the paired table (remat.experiments.compile_paired)."""
SAME_PLAN = ["model", "mode", "predicted_peak_bytes", "kept", "peak_bytes"]
"""Columns that together identify a plan measured more than once (``_same``)."""


def comparison(frame: pd.DataFrame, paired: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per (model, compile budget): compile's peak and step, then per PLANS mode its candidate's peak, ``ratio``
    (separate processes) and where ``paired`` has it for the same plan budget, ``paired``, ``lo``, ``hi`` (else NaN)."""
    pairs = {(r["model"], float(r["compile_budget"]), r["mode"], r.get("budget_bytes")): r   # the pairs without
             for r in (_ok(paired).to_dict("records") if paired is not None else [])}   # an error, by plan budget
    rows = []
    for model, g in _ok(frame).groupby("model", sort=False):
        for _, c in g[g["mode"] == "compile"].iterrows():
            row = {"model": model, "kind": c["kind"], "budget": c["compile_budget"], "peak": c["peak_bytes"],
                   "step": c["step_s"]}
            for mode, key in PLANS:
                best = candidate(g, mode, c["peak_bytes"])
                peak, step, budget = [math.nan] * 3 if best is None else best[["peak_bytes", "step_s", "budget_bytes"]]
                pair = pairs.get((model, float(c["compile_budget"]), mode, budget), {})   # this candidate's pair
                row |= {f"{key}_peak": peak, f"{key}_ratio": step / c["step_s"] - 1}
                for col, name in (("paired", "ratio"), ("lo", "ratio_lo"), ("hi", "ratio_hi")):
                    row[f"{key}_{col}"] = pair.get(name, math.nan)
            rows.append(row)
    return pd.DataFrame(rows, columns=["model", "kind", "budget", "peak", "step"] + [
        f"{key}_{col}" for _, key in PLANS for col in ("peak", "ratio", "paired", "lo", "hi")])


def _ok(frame: pd.DataFrame) -> pd.DataFrame:
    """The rows without an error."""
    return frame[frame["error"].isna()] if "error" in frame else frame


def _spread(ok: pd.DataFrame) -> float:
    """The largest (slowest − fastest round) / step_s of one point (``round_ms``: its rounds' medians, in ms)."""
    rounds = ok["round_ms"].dropna().astype(str).str.split(expand=True).astype(float)   # a column per round
    return ((rounds.max(axis=1) - rounds.min(axis=1)) / (1e3 * ok.loc[rounds.index, "step_s"])).max()


def _same(ok: pd.DataFrame) -> float:
    """The largest (slowest − fastest) / median step of one plan (SAME_PLAN) measured repeatedly; NaN: none."""
    if not set(SAME_PLAN) <= set(ok.columns):
        return math.nan
    steps = ok[ok["mode"].str.contains("tensor")].dropna(subset=SAME_PLAN).groupby(SAME_PLAN)["step_s"]
    return max(((s.max() - s.min()) / s.median() for _, s in steps if len(s) > 1), default=math.nan)


def findings(frame: pd.DataFrame, paired: pd.DataFrame | None = None) -> list[Finding]:
    """Every finding of CLAIMS from the planner-compile and planner-paired rows (None: SPEED not measured)."""
    at, cmp = frame.attrs.get("where", ""), comparison(frame, paired)
    m = lambda id, value, text=None, where=at: judge(id, CLAIMS[id], value, where=where,  # noqa: E731
                                                     text=str(value) if text is None else text)
    ok = _ok(frame)
    bad = pd.concat([t.drop(_ok(t).index) for t in (frame, paired) if t is not None])   # the failed points and pairs
    models = [(g[g["mode"] == "compile"].sort_values("compile_budget"), g[g["mode"] != "compile"])
              for _, g in ok.groupby("model", sort=False)]   # per model: compile's points by budget, the plans'
    monotone = sum(c["peak_bytes"].is_monotonic_increasing for c, _ in models)
    lower = sum(plans["peak_bytes"].min() < c["peak_bytes"].min() for c, plans in models)
    return [
        m("compile.device", math.nan, str(frame["device"].iloc[0]).upper()),
        m("compile.models", frame["model"].nunique(), "; ".join(dict.fromkeys(frame["model"])), ""),
        m("compile.rounds", int(frame["rounds"].iloc[0]), where=""), m("compile.budgets", len(cmp)),
        m("compile.failed", len(bad), "none" if bad.empty else
          f"{len(bad)}: {bad['mode'].iloc[0]} ({bad['error'].iloc[0]})"),
        *_speed(cmp, paired, str(frame["device"].iloc[0])),
        m("compile.monotone", monotone, f"{monotone} of {len(models)}"),
        m("compile.lower", lower, f"{lower} of {len(models)}"),
        m("compile.spread", _spread(ok), percent(_spread(ok), 0)), m("compile.same", _same(ok), percent(_same(ok), 0))]


def _speed(cmp: pd.DataFrame, paired: pd.DataFrame | None, device: str) -> list[Finding]:
    """SPEED's findings from the paired ratios (a budget without one is a miss); invalid on a busy paired run."""
    if paired is None:
        missing = catalog.Missing(catalog.target("planner.paired", device), device.upper())
        return [not_measured(id, CLAIMS[id], missing) for id in SPEED]
    at, timed = paired.attrs.get("where", ""), [gates.conditions(paired)]
    m = lambda id, value, text: gates.gated(judge(id, CLAIMS[id], value, where=at, text=text), timed)  # noqa: E731
    lines = {"compiled": 0.0, "eager": EAGER_SLACK}
    hits = {k: cmp[f"{k}_paired"] <= line for k, line in lines.items()}
    held = [(cmp[f"{k}_lo"] <= line) & (line <= cmp[f"{k}_hi"]) for k, line in lines.items()]
    unresolved, pairs = sum(int(h.sum()) for h in held), sum(int(cmp[f"{k}_paired"].notna().sum()) for k in lines)
    worst = cmp["compiled_paired"].max()
    ok = _ok(paired)
    eager = ok[ok["mode"] == "eager"]   # per model kind: the step in eager without a plan over compile's at budget 1.0
    width, plain = (ok["ratio_hi"] - ok["ratio_lo"]).max(), dict(zip(eager["kind"], eager["ratio"]))   # paired
    return [*(m(f"compile.{k}", int(h.sum()), f"{int(h.sum())} of {len(h)}") for k, h in hits.items()),
            m("compile.compiled.worst", worst, signed_percent(worst, 1)),
            m("compile.plain", max(plain.values(), default=math.nan),
              ", ".join(f"{kind} {signed_percent(x, 1, ' %')}" for kind, x in plain.items()) or "—"),
            m("compile.resolution", width, percent(width, 1)),
            m("compile.unresolved", unresolved, f"{unresolved} of {pairs}")]


def display(frame: pd.DataFrame, paired: pd.DataFrame | None = None) -> pd.DataFrame:
    """@tbl-compile: ``comparison`` shown, the paired ratios with their quartiles in brackets ("—": none)."""
    cmp = comparison(frame, paired)
    mib = lambda x: "—" if x != x else f"{x / MiB:.1f}"
    pct = lambda x: signed_percent(x, 1)   # "—" for NaN
    out = {"model": cmp["kind"], "compile budget": cmp["budget"].map("{:.1f}".format),
           "compile peak (MiB)": cmp["peak"].map(mib), "compile step (ms)": cmp["step"].map(lambda s: f"{s * 1e3:.1f}")}
    for mode, key in PLANS:
        out[f"{mode} peak (MiB)"] = cmp[f"{key}_peak"].map(mib)
        out[f"{mode} vs compile, separate"] = cmp[f"{key}_ratio"].map(pct)
        out[f"{mode} vs compile, paired"] = [pct(r) if r != r else f"{pct(r)} [{pct(lo)}, {pct(hi)}]"
                                             for r, lo, hi in zip(*(cmp[f"{key}_{c}"] for c in ("paired", "lo", "hi")))]
    return pd.DataFrame(out)
