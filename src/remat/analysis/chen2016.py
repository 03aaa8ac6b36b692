"""Chen et al. 2016: the ``chen.*`` tables -> findings (every number and verdict of reports/chen2016.qmd), the
tables that report shows, and the fits the figures draw. Nothing is measured here.

    found = findings(".")      # list[Finding]: the scorecard's claims (SCORECARD) and the quoted values
    shown = tables(".")        # display DataFrames by name ("check", "resnet", "speed", …)
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from remat.analysis import catalog, tolerances as tol
from remat.analysis.findings import (INVALID, NOT_MEASURED, NOT_REPRODUCIBLE, Finding, judge, marked, not_measured,
                                    within_abs, within_range, within_rel)
from remat.analysis.gates import conditions, gated, negative_overhead, noisy
from remat.paper import CHEN, PAPER

# --- fits: the figures, the findings and the sweeps report use them ------------------------------------------


def fit_loglog_exponent(x, y) -> float:
    """Slope of log y against log x by least squares: y ∝ x^slope."""
    return _line(np.log(np.asarray(x, float)), np.log(np.asarray(y, float)))[0]


def fit_log2_growth(x, y) -> tuple[float, float]:
    """Least-squares y ≈ a + b·log2 x. Returns (b, r²); b in y's units per doubling."""
    return _line(np.log2(np.asarray(x, float)), y)


def _line(x, y) -> tuple[float, float]:
    """(slope, r²) of the least-squares line, as scipy.stats.linregress (whose import costs ~0.9 s per job)."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    dx, dy = x - x.mean(), y - y.mean()
    sxx, sxy, syy = float(dx @ dx), float(dx @ dy), float(dy @ dy)
    if sxx == 0:
        raise ValueError("a line through points that all share one x")
    return sxy / sxx, sxy * sxy / (sxx * syy) if syy else math.nan


def depth_fits(frame: pd.DataFrame) -> pd.DataFrame:
    """Per family of ``chen.depth``: exponent, bytes_per_doubling and r2_log2 (of a + b·log2 L), forwards_exponent."""
    rows = []
    for family, part in frame.groupby("family", sort=False):
        per_doubling, r2 = fit_log2_growth(part["layers"], part["peak_bytes"])
        rows.append({"family": family, "exponent": fit_loglog_exponent(part["layers"], part["peak_bytes"]),
                     "bytes_per_doubling": per_doubling, "r2_log2": r2,
                     "forwards_exponent": fit_loglog_exponent(part["layers"], part["forwards"])})
    return pd.DataFrame(rows)


def strategy_fits(frame: pd.DataFrame, size: str) -> pd.DataFrame:
    """Per strategy of ``chen.resnet``/``chen.lstm`` (``size``: "depth" or "length"): planned bytes' log–log exponent
    and r² against size and √size, then at the largest size its bytes, ÷ no-opt, ÷ sharing, recompute_ratio."""
    frame = frame[frame["strategy"] != "budget"]
    largest = frame[frame[size] == frame[size].max()].set_index("strategy")
    rows = []
    for strategy, part in frame.groupby("strategy", sort=False):
        at = largest.loc[strategy]
        rows.append({"strategy": strategy, "exponent": fit_loglog_exponent(part[size], part["planned_bytes"]),
                     "r2_linear": _line(part[size], part["planned_bytes"])[1],
                     "r2_sqrt": _line(np.sqrt(part[size].astype(float)), part["planned_bytes"])[1],
                     "planned_bytes": int(at["planned_bytes"]), "live_peak_bytes": int(at["live_peak_bytes"]),
                     "vs_no_opt": largest.loc["no-opt", "planned_bytes"] / at["planned_bytes"],
                     "vs_sharing": largest.loc["sharing", "planned_bytes"] / at["planned_bytes"],
                     "recompute_ratio": float(at["recompute_ratio"])})
    return pd.DataFrame(rows)


def depth_at(frame: pd.DataFrame, size: str, strategy: str, limit_bytes: float) -> float | None:
    """The ``size`` at which ``strategy``'s planned bytes reach ``limit_bytes`` (log–log interpolated), or None."""
    part = frame[frame["strategy"] == strategy].sort_values(size)
    xs, ys = np.log(part[size].to_numpy(float)), np.log(part["planned_bytes"].to_numpy(float))
    if not ys[0] <= np.log(limit_bytes) <= ys[-1]:
        return None
    return float(np.exp(np.interp(np.log(limit_bytes), ys, xs)))


def decimal_unit(values) -> tuple[str, float]:
    """("GB", 1e9) … ("B", 1): the largest decimal unit that shows the smallest positive of ``values`` as ≥ 1."""
    smallest = min((float(v) for v in values if v == v and float(v) > 0), default=0.0)
    return next(((n, s) for n, s in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)) if smallest >= s), ("B", 1.0))


def size_text(n_bytes: float, unit: tuple[str, float]) -> str:
    """Bytes in ``unit`` with two decimals: "37.17 GB"."""
    return f"{float(n_bytes) / unit[1]:.2f} {unit[0]}"


# --- findings --------------------------------------------------------------------------------------------------

SCORECARD = {"sqrt": "sec-depth", "sqrt-forwards": "sec-recompute", "recursion": "sec-depth",
             "recursion-forwards": "sec-recompute", "resnet": "sec-resnet", "resnet-limit": "sec-resnet",
             "lstm": "sec-lstm", "speed": "sec-speed", "drop-cheap": "sec-speed", "backward": "sec-speed"}
"""The claims the index's scorecard lists: id -> the report section showing it."""

_upto = lambda t: within_range(0, t.value, t.unit, t.why)                          # a bound the paper states
_SUBLINEAR = ("chen.sublinear_trend", _upto(tol.CHEN_SUBLINEAR_SLOPE))
RULES = {"sqrt": ("chen.sqrt_exponent", within_abs(tol.CHEN_SQRT_SLOPE)), "resnet-sqrt": _SUBLINEAR,
         "lstm-sqrt": _SUBLINEAR, "sqrt-forwards": ("chen.extra_forwards", within_abs(tol.CHEN_EXTRA_FORWARDS)),
         "recursion": ("chen.recursion_per_doubling", within_abs(tol.CHEN_RECURSION)),
         "recursion-forwards": ("chen.recursion_forwards_per_doubling", within_abs(tol.CHEN_RECURSION_FORWARDS)),
         "resnet": ("chen.resnet_reduction", within_rel(tol.CHEN_RESNET_REDUCTION, tol.MINOR)),
         "resnet-limit": ("chen.deepest_without", within_rel(tol.CHEN_RESNET_LIMIT, tol.MINOR)),
         "resnet-sharing": ("chen.system_reduction_lo", within_range(PAPER["chen.system_reduction_lo"].value,
                            PAPER["chen.system_reduction_hi"].value, "×", tol.CHEN_SYSTEM_BAND.why)),
         "lstm": ("chen.lstm_reduction", within_range(PAPER["chen.lstm_reduction"].value,
                  tol.CHEN_LSTM_REDUCTION_HI.value, "×", tol.CHEN_LSTM_REDUCTION_HI.why)),
         "speed": ("chen.speed_overhead_pct", within_abs(tol.CHEN_SPEED_PP)),
         "drop-cheap": ("chen.drop_cheap_overhead_pct", _upto(tol.CHEN_LITTLE_OVERHEAD)),
         "backward": ("chen.backward_over_forward", within_abs(tol.CHEN_BACKWARD_RATIO))}
"""The judged findings: id -> (the paper value's id in remat.paper, the rule for "reproduced")."""

_DEPTH = f"{PAPER['chen.resnet_depth'].value:,.0f}"                                 # "1,000"
_GPU, _STEPS = PAPER["chen.gpu_memory_gb"].text, PAPER["chen.lstm_steps"].text      # "12 GB", "64 steps"

GROUPS = {
    "depth": {"sqrt": "√L segments: O(√n) memory", "sqrt-forwards": "√L segments: one extra forward pass",
              "recursion": "Recursion: O(log n) memory", "revolve.growth": "Revolve: memory per doubling of L",
              "recursion-forwards": "Recursion: O(n log n) forwards", "revolve.cost": "Revolve at the deepest L"},
    "chain": {"chain.shape": "The chain of the sweeps", "check": "Schedules with gradients bitwise equal to the plain "
              "backward", "segments.exact": "Counted = closed form over k", "segments.none": "Peak, everything kept",
              "segments.sqrt": "Peak at k = √L", "segments.opt": "Peak at the best k",
              "revolve.exact": "Revolve: counted = closed form = DP", "graph.check": "Executed plans bitwise equal"},
    "resnet": {"resnet-sqrt": "ResNet, sublinear plan: memory sub-linear in depth", "budget.resnet": "ResNet: "
               "Algorithm 3 against √n and x + y", "resnet": f"{_DEPTH}-layer ResNet: memory reduction of the "
               "sublinear plan", "resnet-limit": f"Deepest ResNet a {_GPU} GPU trains without the plan",
               "resnet-sharing": "In-place + sharing cut memory", "resnet.size": "The ResNet traced"},
    "lstm": {"lstm-sqrt": "LSTM, sublinear plan: memory sub-linear in length", "budget.lstm": "LSTM: Algorithm 3 "
             "against √n and x + y", "lstm": f"LSTM, {_STEPS}: reduction over the optimized plan",
             "lstm.size": "The LSTM traced"},
    "speed": {"speed": "Sublinear plan: extra runtime", "drop-cheap": "Drop-cheap (§4.2): extra runtime",
              "backward": "Backward over forward FLOPs"}}
"""Every finding by the part of ``findings`` that makes it: id -> claim (a missing table: the part's not measured)."""
CLAIMS = {id: claim for part in GROUPS.values() for id, claim in part.items()}


def _f(id: str, value: float, text: str, where: str, reason: str = "", missing: catalog.Missing | None = None):
    """Finding ``id``, judged by RULES[id] when it has one (else measured); not measured when ``missing``."""
    paper, rule = RULES.get(id, (None, None))
    claim, link = CLAIMS[id], SCORECARD.get(id)
    extra = dict(scorecard=CHEN, link=f"chen2016.html#{link}") if link else {}
    if missing is not None:
        return not_measured(id, claim, missing, PAPER.get(paper), rule, where=where, **extra)
    return judge(id, claim, value, PAPER.get(paper), rule, where=where, text=text, reason=reason, **extra)


def _exact(id: str, ok: pd.Series, text: str, noun: str) -> Finding:
    """Rows that agree (``ok``): "k of n" + ``text``; a row that does not is an invalid measurement."""
    found = _f(id, int(ok.sum()), f"{int(ok.sum())} of {len(ok)}{text}", "CPU")
    return gated(found, ["" if ok.all() else f"{len(ok) - int(ok.sum())} {noun} disagree"])


def _depth(t, root) -> list[Finding]:
    depth = t("depth")
    fits, x, L = depth_fits(depth).set_index("family"), int(depth["x_bytes"].iloc[0]), int(depth["layers"].max())
    deep = depth[depth["layers"] == L].set_index("family")
    share = deep.loc["sqrt", "extra_forwards"] / L
    rec = depth[depth["family"] == "recursive"]
    per_layer = fit_log2_growth(rec["layers"], rec["forwards"] / rec["layers"])     # O(n log n): a + b·log₂ n
    growth = lambda f: (f"{fits.loc[f, 'bytes_per_doubling'] / x:.2f} checkpoints per doubling "
                        f"({fits.loc[f, 'bytes_per_doubling']:.0f} bytes, r² = {fits.loc[f, 'r2_log2']:.4f})")
    cost = lambda f: (f"{int(deep.loc[f, 'extra_forwards']):,} extra layer forwards, peak "
                      f"{int(deep.loc[f, 'peak_bytes']):,} bytes (L = {L})")
    return [_f("sqrt", fits.loc["sqrt", "exponent"], f"{fits.loc['sqrt', 'exponent']:.2f} (L = "
               f"{int(depth['layers'].min())} … {L})", "CPU"),
            _f("sqrt-forwards", share, f"{share:.2f} forward passes ({int(deep.loc['sqrt', 'extra_forwards'])} "
               f"extra layer forwards at L = {L})", "CPU"),
            _f("recursion", fits.loc["recursive", "bytes_per_doubling"] / x, growth("recursive"), "CPU"),
            _f("revolve.growth", fits.loc["revolve", "bytes_per_doubling"] / x, f"{growth('revolve')}, "
               f"s = {int(deep.loc['revolve', 'param'])} slots at L = {L}", "CPU"),
            _f("recursion-forwards", per_layer[0], f"{per_layer[0]:.2f} forwards per layer per doubling (r² = "
               f"{per_layer[1]:.4f}); {cost('recursive')}", "CPU"),
            _f("revolve.cost", deep.loc["revolve", "extra_forwards"], cost("revolve"), "CPU")]


def _chain(t, root) -> list[Finding]:
    check, seg, rev, graph = t("check"), t("segments"), t("revolve"), t("graph-check")
    first, by_k = seg.iloc[0], seg.set_index("k")
    k_sqrt, L = int(first["k_sqrt"]), int(first["layers"])
    extra = int(by_k.loc[k_sqrt, "forwards"]) - L
    at = lambda k: f"k = {int(k)}: {int(by_k.loc[k, 'peak_bytes']):,} bytes"
    return [_f("chain.shape", math.nan, f"B = {first['batch']}, d = {first['width']}, d′ = {first['hidden']}, "
               f"{first['dtype']}; x = {first['x_bytes']:,} bytes, h = {first['h_bytes']:,} bytes", "CPU"),
            _exact("check", check["passed"].astype(bool) & check["bitwise_equal"].astype(bool), f" (L = "
                   f"{check['layers'].iloc[0]}, d = {check['width'].iloc[0]}, B = {check['batch'].iloc[0]}; finite "
                   f"differences within {check['fd_rel_error'].max():.1e})", "schedules"),
            _exact("segments.exact", (seg["peak_bytes"] == seg["peak_bytes_formula"])
                   & (seg["forwards"] == seg["forwards_formula"]), f" values of k at L = {L}", "values of k"),
            _f("segments.none", by_k.loc[1, "peak_bytes"], at(1), "CPU"),
            _f("segments.sqrt", by_k.loc[k_sqrt, "peak_bytes"], f"{at(k_sqrt)}, {extra} extra layer forwards "
               f"({extra / L:.2f} of a forward pass)", "CPU"),
            _f("segments.opt", by_k.loc[int(first["k_opt"]), "peak_bytes"], f"{at(first['k_opt'])} "
               f"(k* = {float(first['k_star']):.2f})", "CPU"),
            _exact("revolve.exact", (rev["extra_forwards"] == rev["extra_forwards_formula"])
                   & (rev["extra_forwards"] == rev["extra_forwards_dp"]), " pairs (l, s)", "pairs"),
            _exact("graph.check", graph["bitwise_equal"].astype(bool), f" plans on {graph['net'].nunique()} nets "
                   f"(finite differences within {graph['fd_rel_error'].max():.1e})", "plans")]


def _net(frame: pd.DataFrame, size: str, net: str) -> tuple:
    """Fits, decimal unit, and the findings a ResNet and an LSTM share (the sublinear trend, Algorithm 3)."""
    fits = strategy_fits(frame, size).set_index("strategy")
    plans, s = fits["planned_bytes"], fits.loc["sublinear"]
    unit = decimal_unit(plans)
    return fits, unit, [
        _f(f"{net}-sqrt", s["exponent"], f"slope {s['exponent']:.2f} (r² of a + b·√{size} {s['r2_sqrt']:.4f}, of "
           f"a line {s['r2_linear']:.4f})", "fake"),
        _f(f"budget.{net}", plans["sublinear"], f"{size_text(plans['sublinear'], unit)} (grid), "
           f"{size_text(plans['sqrt'], unit)} (√n), {size_text(plans['optimal'], unit)} (optimum of x + y)", "fake")]


def _reduction(frame: pd.DataFrame, size: str, steps: float, unit: tuple) -> tuple[float, str]:
    """Sharing's planned bytes over sublinear's at ``steps`` and "6.9×, 48.00 GB → 7.00 GB" (NaN, "": none)."""
    at = frame[frame[size] == steps].drop_duplicates("strategy").set_index("strategy")["planned_bytes"]
    if not len(at):
        return math.nan, ""
    ratio = at["sharing"] / at["sublinear"]
    return ratio, f"{ratio:.1f}×, {size_text(at['sharing'], unit)} → {size_text(at['sublinear'], unit)}"


def _short(found: Finding, size: str, largest) -> Finding:
    """``found`` not measured when its value is NaN: the sweep stops short of the paper's size."""
    return found if found.value == found.value else marked(found, NOT_MEASURED, f"the sweep stops at {largest} {size}")


def _resnet(t, root) -> list[Finding]:
    """Feature maps as planned; GPU totals add weights, gradients, momentum (MXNet's SGD): 3 copies, 2 without."""
    resnet, gb, depth = t("resnet"), ("GB", 1e9), PAPER["chen.resnet_depth"].value
    fits, unit, found = _net(resnet, "depth", "resnet")
    total = lambda copies: resnet.assign(planned_bytes=resnet["planned_bytes"] + copies * resnet["param_bytes"])
    (ratio, text), (_, bare), (_, maps) = (_reduction(f, "depth", depth, gb) for f in (total(3), total(2), resnet))
    missing = "cuDNN's workspace and the allocator's slack are not counted"
    deep = resnet[resnet["depth"] == resnet["depth"].max()].iloc[0]
    limit, maps_limit = (depth_at(f, "depth", "sharing", PAPER["chen.gpu_memory_gb"].value * 1e9)
                         for f in (total(3), resnet))
    limit_f = _f("resnet-limit", limit or math.nan, f"{limit or 0:.0f} layers with weights, gradients and momentum "
                 f"({maps_limit or 0:.0f} with feature maps alone)", "fake", reason=f"{missing}; they would lower "
                 "ours" if (limit or 0) > PAPER["chen.deepest_without"].value else "")
    s, mb = fits.loc["sharing"], lambda v: size_text(v, unit)
    return found + [
        _short(_f("resnet", ratio, f"{text} with weights, gradients and momentum ({bare} without momentum; "
                  f"feature maps alone {maps}; {missing})", "fake"), "depth", resnet["depth"].max()),
        limit_f if limit else marked(limit_f, NOT_MEASURED, f"{_GPU} lies outside the swept depths"),
        _f("resnet-sharing", s["vs_no_opt"], f"{s['vs_no_opt']:.1f}× ({mb(fits.loc['no-opt', 'planned_bytes'])} → "
           f"{mb(s['planned_bytes'])})", "fake", reason="our no-opt gives every value, activation or gradient, its "
           "own storage; the paper does not say what its baseline shares"),
        _f("resnet.size", deep["depth"], f"batch {int(deep['batch'])}, 3×{int(deep['image'])}×{int(deep['image'])}; "
           f"depth {int(deep['depth'])}: blocks {deep['blocks']}, {int(deep['layers'])} layers, "
           f"{deep['params'] / 1e6:.1f} M parameters ({size_text(deep['param_bytes'], gb)}), "
           f"{int(deep['nodes']):,} graph nodes traced in {deep['trace_s']:.1f} s, "
           f"{int(resnet['other_ops'].max())} ops of unknown kind", "fake")]


def _lstm(t, root) -> list[Finding]:
    lstm = t("lstm")
    fits, unit, found = _net(lstm, "length", "lstm")
    row = lstm.iloc[0]
    return found + [
        _short(_f("lstm", *_reduction(lstm, "length", PAPER["chen.lstm_steps"].value, unit), "fake"), "length",
               lstm["length"].max()),
        _f("lstm.size", row["layers"], f"{int(row['layers'])} stacked layers of {int(row['hidden']):,} units, a "
           f"{int(row['input'])}-dimensional input, a {int(row['classes']):,}-way softmax at every step, batch "
           f"{int(row['batch'])}, {int(lstm['length'].min())} … {int(lstm['length'].max())} steps", "fake")]


def _speed(t, root) -> list[Finding]:
    """The sublinear plan's and drop-cheap's overheads, and the backward's FLOPs over the forward's."""
    speed = catalog.read_shown("chen.speed", root)   # the GPU's rows when there are any
    where, rows = speed.attrs["where"], speed.set_index(["net", "strategy"])
    gates = [conditions(rows)] + [noisy(r["step_time_s"], r["step_time_iqr_s"], f"{n} {s}")
                                  for (n, s), r in rows.iterrows()]
    ratio = rows.xs("none", level="strategy").eval("flops_backward / flops_forward")
    far = (ratio - PAPER[RULES["backward"][0]].value).abs().idxmax()
    return [_timed(id, s, rows, gates, where, speed["device"].iloc[0], why) for id, s, why in (
        ("speed", "sublinear", "this is a CPU stand-in at small sizes, whose op costs differ (config/gpu.yaml has "
         "the paper's sizes)"), ("drop-cheap", "drop-cheap", "cuDNN's batch norm and activations are cheap beside "
         "its convolutions, which this CPU at small sizes does not show"))] + [
        _f("backward", ratio[far], ", ".join(f"{n} {v:.2f}×" for n, v in ratio.items()) + " (matmul and "
           "convolution FLOPs counted; the timed step is not split into forward and backward)", f"{where} (counted)")]


def _timed(id: str, strategy: str, rows: pd.DataFrame, gates: list[str], where: str, dev: str, why: str) -> Finding:
    """``strategy``'s overhead over none's per net, the farthest from the paper's judged; ``why`` a CPU's is not."""
    sub, none = (rows.xs(s, level="strategy") for s in (strategy, "none"))
    worst = (100 * sub["overhead"] - PAPER[RULES[id][0]].value).abs().idxmax()
    gates = gates + [negative_overhead(sub.loc[n, "overhead"], none.loc[n, "step_time_iqr_s"] /
                                       none.loc[n, "step_time_s"], f"{n} {strategy}") for n in sub.index]
    ours = ", ".join(f"{n} {100 * v:.0f} %" for n, v in sub["overhead"].items())
    found = gated(_f(id, 100 * sub.loc[worst, "overhead"], f"{ours} ({where})", where), gates)
    if found.status != INVALID and dev != catalog.GPU_DEVICE:
        found = marked(found, NOT_REPRODUCIBLE, f"needs a GPU: the paper timed a Titan X; {why}"
                       + (f" (here {found.reason})" if found.reason else ""))
    return found


PARTS = {"depth": _depth, "chain": _chain, "resnet": _resnet, "lstm": _lstm, "speed": _speed}


def findings(root=".") -> list[Finding]:
    """Every finding of the chen2016 report (GROUPS); a part whose table is absent gives them not measured."""
    where = {"resnet": "fake", "lstm": "fake", "speed": ""}
    return [f for part, make in PARTS.items() for f in catalog.unless_missing(
        lambda: make(lambda table: _read(table, root), root),
        lambda missing: [_f(id, math.nan, "", where.get(part, "CPU"), missing=missing) for id in GROUPS[part]])]


# --- the tables the report shows --------------------------------------------------------------------------------

def _cols(frame: pd.DataFrame, spec: dict) -> pd.DataFrame:
    """A display frame: header -> a column of ``frame`` (its name) or a function of ``frame``."""
    return pd.DataFrame({h: frame[c] if isinstance(c, str) else c(frame)
                         for h, c in spec.items()}).reset_index(drop=True)


def depth_fits_table(depth: pd.DataFrame) -> pd.DataFrame:
    """Per schedule: the depth sweep's fits, and the deepest chain's peak and forwards beside their closed forms."""
    fits = depth_fits(depth).set_index("family")
    deep = depth[depth["layers"] == depth["layers"].max()].set_index("family").join(fits)
    return _cols(deep.reset_index(), {
        "schedule": "family", "k or slots": "param", "peak: slope": lambda f: f["exponent"].round(3),
        "bytes / doubling": lambda f: f["bytes_per_doubling"].round(1), "peak (bytes)": "peak_bytes",
        "closed form": "peak_bytes_formula", "forwards": "forwards", "closed form ": "forwards_formula"})


def revolve_table(frame: pd.DataFrame) -> pd.DataFrame:
    """Counted extra forwards of ``chen.revolve``, steps l (rows) × slots s (columns)."""
    table = frame.pivot(index="steps", columns="slots", values="extra_forwards")
    return table.set_axis([f"s = {s}" for s in table.columns], axis=1).reset_index().rename(columns={"steps": "l"})


def net_table(frame: pd.DataFrame, size: str) -> pd.DataFrame:
    """``strategy_fits`` of a ``chen.resnet``/``chen.lstm`` table for display, bytes in the net's decimal unit."""
    fits = strategy_fits(frame, size)
    name, scale = decimal_unit(fits["planned_bytes"])
    by = lambda c, d=2, s=1.0: lambda f: (f[c] / s).round(d)
    return _cols(fits, {"strategy": "strategy", f"planned ({name})": by("planned_bytes", 2, scale),
                        f"live peak ({name})": by("live_peak_bytes", 2, scale), "÷ no-opt": by("vs_no_opt", 1),
                        "÷ sharing": by("vs_sharing"), "recomputed": by("recompute_ratio"), "slope": by("exponent"),
                        "r² line": by("r2_linear", 4), f"r² √{size}": by("r2_sqrt", 4)})


def speed_table(frame: pd.DataFrame) -> pd.DataFrame:
    """``chen.speed`` (every device): step and IQR (ms), overhead measured and by FLOPs, saved MB (10⁶ bytes)."""
    pct = lambda c: lambda f: (f[c] * 100).round(0).astype(int).astype(str) + " %"
    ms = lambda c: lambda f: (f[c] * 1e3).round(1)
    return _cols(frame, {"device": "device", "net": "net", "strategy": "strategy",
                         "step (ms)": ms("step_time_s"), "IQR (ms)": ms("step_time_iqr_s"), "overhead": pct("overhead"),
                         "FLOP-predicted": pct("overhead_flops"),
                         "saved (MB)": lambda f: (f["saved_bytes"] / 1e6).round(1)})


TABLES = {"depth": depth_fits_table, "revolve": revolve_table, "resnet": lambda f: net_table(f, "depth"),
          "lstm": lambda f: net_table(f, "length"), "speed": speed_table}
"""The report's tables: the chen.* table's name -> its display function."""


def tables(root=".") -> dict[str, pd.DataFrame]:
    """The report's display tables by name; a missing table shows as one row naming its snakemake target."""
    waiting = lambda missing: pd.DataFrame({"not measured yet": [f"`snakemake {missing.target}`"]})
    return {name: catalog.unless_missing(lambda: show(_read(name, root)), waiting) for name, show in TABLES.items()}


def _read(table: str, root) -> pd.DataFrame:
    """``chen.<table>``; the speed table of every device (and the reference GPU run's)."""
    return catalog.read_devices("chen.speed", root) if table == "speed" else catalog.read(f"chen.{table}", root=root)


def raw_tables(root=".") -> list[pd.DataFrame]:
    """Every chen.* table present (the provenance list)."""
    found = [catalog.read_if(t, root=root) for t in catalog.TABLES if t.startswith("chen.")]
    found.append(catalog.unless_missing(lambda: _read("speed", root), lambda _: None))   # every device's
    return [f for f in found if f is not None]
