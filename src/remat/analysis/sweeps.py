"""The sweeps report's findings: each measurement of the torch GPT sweeps judged against its closed form or the
paper, per device (ids end in it: "saved.cpu"); a timing failing a gate (sweeps_tables.validity) is ``invalid``.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd

from remat.analysis import catalog, tolerances as tol
from remat.analysis.findings import (NOT_MEASURED, NOT_REPRODUCIBLE, Finding, holds, judge, marked, not_measured,
                                    within_abs, within_rel)
from remat.analysis.gates import gated
from remat.analysis.times import TABLE4_RULE
from remat.analysis.sweeps_tables import checkpoint_bytes, crossover, depth_fits, devices, ok, read, valid, validity
from remat.paper import KORTHIKANTI, PAPER, PAPER_TABLE4_OVERHEAD, PaperValue
from remat.units import format_bytes, signed_percent

TABLE4 = {m: PaperValue(PAPER_TABLE4_OVERHEAD[f"{m} recompute"], "Table 4",
                        f"{PAPER_TABLE4_OVERHEAD[f'{m} recompute']:g} %") for m in ("full", "selective")}
ONE = PaperValue(1, "closed form: bytes by Korthikanti Eq. 1 + LayerNorm statistics, FLOPs by Appendix A", "1")
EXPONENT = replace(within_abs(tol.SWEEPS_LINEAR_SLOPE), text="within ±0.1 of the closed form's exponent",
                   why="the measured peak is the closed form's live peak plus the backward working set, a constant "
                       "over L (the residual of the points table), which bends a log–log slope over L = 2–64 below "
                       "the closed form's by up to about 0.1; the closed form at the same L, not the paper's "
                       "asymptote, is the like-for-like value (⌈√L⌉ rounding and the live segment put it "
                       "above 0.5)")
ROOFLINE = "model: the roofline at the measured rates (remat.timemodel)"
NEEDS_GPU = "needs a GPU (the paper timed a 22B layer on 8 A100s, t = 8; a CPU's op costs differ)"

CLAIMS = {  # sweep -> {id stem: claim}: the ids every device gets (the report quotes them)
    "segments": {"saved": "Saved bytes, measured / closed form, worst point of the segment, depth and "
                          "seq/hidden sweeps",
                 "recompute-flops": "Recompute FLOPs, measured / closed form, worst point of those sweeps",
                 "segments.optimum": "Segments k with the lowest measured peak, against the closed form's",
                 "segments.k-star": "Continuous optimum k* = √(L·y/x) (x: one checkpoint, y: one kept layer)",
                 "segments.time-per-flop": "Step-time overhead per FLOP overhead, median over the valid timed k"},
    "depth": {**{f"depth.exponent.{f}": f"Exponent a of peak ∝ L^a, {how}" for f, how in (
                  ("none", "no recompute"), ("sqrt", "⌈√L⌉ segments"), ("full", "per-layer full recompute"))},
              "depth.slope.none": "Peak growth per layer c1, no recompute, against one kept layer",
              "depth.slope.full": "Peak growth per layer c1, full recompute, against one checkpoint",
              "depth.sqrt-share": "Peak with ⌈√L⌉ segments over peak without recompute, deepest L",
              "depth.full-flops": "Full recompute FLOP overhead (%), whole model, deepest L"},
    "seq-hidden": {"crossover.seq": "Sequence length s* where 5as²b overtakes 34sbh (h, a fixed)",
                   "crossover.hidden": "Hidden size h* where 5as²b overtakes 34sbh (s, a fixed)",
                   "seq-hidden.stats": "The torch layer keeps Eq. 1's tensors plus LayerNorm mean and rstd, no more",
                   "selective.keep": "Share of a layer's saved bytes selective recompute keeps, falling with s"},
    "layer-timing": {**{f"timing.{m}": f"One layer: {m} recompute time overhead" for m in ("full", "selective")},
                     **{f"timing.flops.{m}": f"One layer: {m} recompute FLOP overhead, counted"
                        for m in ("full", "selective")}},
    "time-model": {"time-model.error": "Roofline at measured rates: worst predicted / measured − 1 over valid sizes"},
}
CLAIM = {stem: claim for group in CLAIMS.values() for stem, claim in group.items()}


def findings(root=".") -> list[Finding]:
    """Every claim per device (catalog order), then ``table4-measured``; a missing table's or point's not measured."""
    frames = read(root)
    found = devices(pd.concat([f[["device"]] for f in frames.values()])) or [catalog.DEVICES[0]]
    out = []
    for d in found:
        for sweep, build in BUILDERS.items():
            part = frames[sweep][frames[sweep]["device"] == d]
            where = catalog.where(d, f"sweeps.{sweep}", part, root)
            target = catalog.target(f"sweeps.{sweep}", d)
            try:
                out += build(part, d, where, frames) if len(ok(part)) else [
                    not_measured(f"{i}.{d}", c, catalog.Missing(target)) for i, c in CLAIMS[sweep].items()]
            except (KeyError, IndexError) as e:   # a point a claim needs did not run (oom, too large)
                out += [Finding(f"{i}.{d}", c, "—", where=where, status=NOT_MEASURED,
                                reason=f"a point it needs did not run ({e}): see {target}")
                        for i, c in CLAIMS[sweep].items()]
    return out + [_table4(out, found)]


def stand_in(where: str) -> str:
    """``where`` with a CPU labelled a stand-in for a GPU: "CPU (a stand-in for a GPU), float32"."""
    return where.replace("CPU", "CPU (a stand-in for a GPU)", 1) if where.startswith("CPU") else where


def _f(stem: str, d: str, ours, **kw) -> Finding:
    return judge(f"{stem}.{d}", CLAIM[stem], ours, **kw)


def _segments(part: pd.DataFrame, d: str, where: str, frames) -> list[Finding]:
    points = pd.concat([ok(frames[s][frames[s]["device"] == d]) for s in ("segments", "depth", "seq-hidden")],
                       ignore_index=True)
    saved, flops = (float(r.loc[(r - 1).abs().idxmax()]) for r in (      # the ratios farthest from 1
        pd.concat([points["saved_ratio"], points.get("saved_per_layer_ratio", pd.Series())]).dropna(),
        (points["flops_recompute"] / points["flops_recompute_formula"]).dropna()))
    good, why = ok(part).set_index("k"), validity("segments", part)
    k_best, k_formula = int(good["peak_activation_bytes"].idxmin()), int(part["k_opt_formula"].iloc[0])
    x, y = checkpoint_bytes(good.iloc[0]), float(good["saved_per_layer_bytes"].iloc[0])
    k_star = float(np.sqrt(int(part["layers"].iloc[0]) * y / x))
    timed = valid("segments", part)["time_per_flop_overhead"].dropna()
    exact = dict(paper=ONE, rule=within_rel(tol.SWEEPS_EXACT_REL), where=where)
    return [
        _f("saved", d, saved, text=f"{saved:.4f} ({len(points)} points)", **exact),
        _f("recompute-flops", d, flops, text=f"{flops:.4f}", **exact),
        _f("segments.optimum", d, k_best, where=where, text=f"{k_best}", rule=within_abs(tol.SWEEPS_OPTIMUM_K),
           paper=PaperValue(k_formula, "closed form: the live peak (Chen §3 for this model)", f"{k_formula}")),
        _f("segments.k-star", d, k_star, where=where,
           text=f"{k_star:.1f} (x = {format_bytes(x)}, y = {format_bytes(y)})"),
        gated(_f("segments.time-per-flop", d, timed.median() if len(timed) else np.nan, where=stand_in(where),
                 text=f"{timed.median():.2f}× ({len(timed)} points)" if len(timed) else "—"),
              [] if len(timed) else ["no timed k passes the timing gates"]),
    ] + [gated(judge(f"segments.timing.k{int(r['k'])}.{d}", f"Segment sweep, k = {int(r['k'])}: time overhead",
                     100 * r["time_overhead"], where=stand_in(where),
                     text=f"{100 * r['time_overhead']:.1f} %"), [why[i]])
         for i, r in part[why != ""].iterrows()]


def _depth(part: pd.DataFrame, d: str, where: str, frames) -> list[Finding]:
    fits, good = depth_fits(part).set_index("family"), ok(part)
    fit = lambda fam, col="exponent": float(fits.loc[fam, col])
    exponent = lambda fam: f"{fit(fam):.3f} (closed form {fit(fam, 'exponent_formula'):.3f})"
    both = good.pivot_table(index="layers", columns="family", values="peak_activation_bytes").dropna()
    deep = good[(good["family"] == "full") & (good["layers"] == good.loc[good["family"] == "full", "layers"].max())]
    full = 100 * float(deep["flop_overhead"].iloc[0])
    share = float(both["sqrt"].iloc[-1] / both["none"].iloc[-1])

    def slope(fam: str, name: str) -> Finding:   # closed form: the saved bytes' growth per layer
        g = good[good["family"] == fam]
        closed = float(np.polyfit(g["layers"], g["saved_bytes_formula"], 1)[0])
        return _f(f"depth.slope.{fam}", d, fit(fam, "bytes_per_layer"), where=where,
                  rule=within_rel(tol.SWEEPS_EXACT_REL), text=format_bytes(fit(fam, "bytes_per_layer")),
                  paper=PaperValue(closed, f"closed form: one {name} (the saved bytes' growth per layer)",
                                   format_bytes(closed)))
    def like_for_like(fam: str) -> Finding:   # against the closed form's exponent at the same L points
        claim = PAPER[f"chen.{'linear' if fam == 'none' else 'sqrt'}_exponent"]
        closed = fit(fam, "exponent_formula")
        source = f"closed form: the live peak at the same L (the paper: {claim.text}, {claim.source}, an asymptote)"
        return _f(f"depth.exponent.{fam}", d, fit(fam), paper=PaperValue(closed, source, f"{closed:.3f}"),
                  rule=EXPONENT, where=where, text=f"{fit(fam):.3f}")
    return [
        like_for_like("none"), like_for_like("sqrt"),
        _f("depth.exponent.full", d, fit("full"), where=where, text=exponent("full")),
        slope("none", "kept layer y"), slope("full", "checkpoint x"),
        _f("depth.sqrt-share", d, share, where=where, text=f"{100 * share:.1f} % at L = {int(both.index[-1])} "
           f"({format_bytes(both['sqrt'].iloc[-1])} of {format_bytes(both['none'].iloc[-1])})"),
        _f("depth.full-flops", d, full, paper=PAPER["korthikanti.full_flops_pct"], where=where,
           rule=within_abs(tol.KORTHIKANTI_FULL_FLOPS_PP), text=f"{full:.2f} % at L = {int(deep['layers'].iloc[0])}"),
    ]


def _seq_hidden(part: pd.DataFrame, d: str, where: str, frames) -> list[Finding]:
    out = []
    for axis, formula in (("seq", "34h/(5a)"), ("hidden", "5as/34")):
        measured, closed = crossover(part, axis)
        f = _f(f"crossover.{axis}", d, measured, where=where, text=f"{measured:.1f}",
               paper=PaperValue(closed, f"closed form: Korthikanti Eq. 1, {formula}", f"{closed:.1f}"),
               rule=within_rel(tol.SWEEPS_CROSSOVER_REL))
        out.append(marked(f, NOT_MEASURED, f"no {axis} point crosses (or none ran)") if measured != measured else f)
    good = ok(part)
    items = good.get("gap_items", pd.Series("", index=good.index)).astype(str).map(    # "name: bytes; …" per point
        lambda text: [(n, float(b)) for n, b in (t.rsplit(": ", 1) for t in text.split("; ") if ": " in t)])
    elem = items.map(lambda it: sum(b for n, b in it if n.startswith("element size")))
    # like for like: at the paper's element sizes (a float32 run stores 4 B where Eq. 1 counts 2 B / 1 B)
    off = (good["gap_bytes"] - elem - good["extras_per_layer_bytes"])[lambda x: x != 0]   # points whose extras differ
    hi = off.abs().idxmax() if len(off) else None   # the point farthest off, and its largest gap item
    name, size = max(items[hi] if hi is not None else [], key=lambda t: abs(t[1]), default=("none listed", 0))
    seq = good[good["axis"] == "seq"].pivot_table(index="seq", columns="mode", values="saved_per_layer_bytes")
    keep = (seq["selective"] / seq["none"]).dropna()
    falls = bool(len(keep) > 1 and keep.is_monotonic_decreasing and keep.iloc[-1] < keep.iloc[0])
    return out + [
        _f("seq-hidden.stats", d, off.empty, where=where, text="no" if len(off) else "yes",
           paper=PaperValue(1, "closed form: Korthikanti Eq. 1 + 4sb LayerNorm statistics", "Eq. 1 + 4sb"),
           rule=holds("at the paper's element sizes, the torch layer's bytes beyond Eq. 1 are LayerNorm mean and "
                      "rstd at every point"),
           reason=f"at {len(off)} of {len(good)} points the bytes beyond Eq. 1 differ from the LayerNorm statistics, "
                  f"by up to {format_bytes(off[hi])} ({good.loc[hi, 'mode']}, s = {good.loc[hi, 'seq']}, "
                  f"h = {good.loc[hi, 'hidden']}; its largest item: {name}, {format_bytes(float(size))})"
                  if len(off) else ""),
        _f("selective.keep", d, falls, where=where, rule=holds("the kept share falls as s grows"),
           text=f"{100 * keep.iloc[0]:.1f} % at s = {keep.index[0]}, "
                f"{100 * keep.iloc[-1]:.1f} % at s = {keep.index[-1]}",
           paper=PaperValue(1, "closed form: Korthikanti Eq. 1 (selective drops 5as²b)", "falls with s"))]


def _timing(part: pd.DataFrame, d: str, where: str, frames) -> list[Finding]:
    rows, reason = ok(part).set_index("mode"), next((r for r in validity("layer-timing", part) if r), "")
    out = []
    for m in ("full", "selective"):
        r, formula = rows.loc[m], 100 * rows.loc[m, "flop_overhead_formula"]
        f = _f(f"timing.{m}", d, 100 * r["time_overhead"], paper=TABLE4[m], where=stand_in(where),
               rule=TABLE4_RULE, text=f"{100 * r['time_overhead']:.1f} %")
        flops = dict(paper=PAPER["korthikanti.full_flops_pct"], rule=within_abs(tol.KORTHIKANTI_FULL_FLOPS_PP)) \
            if m == "full" else dict(paper=PaperValue(formula, "closed form: Appendix A, 4bs²h / 3(24bsh² + 4bs²h)",
                                                      f"{formula:.2f} %"), rule=within_rel(tol.SWEEPS_EXACT_REL))
        out += [gated(f if d == catalog.GPU_DEVICE else marked(f, NOT_REPRODUCIBLE, NEEDS_GPU), [reason]),
                _f(f"timing.flops.{m}", d, 100 * r["flop_overhead"], where=where,
                   text=f"{100 * r['flop_overhead']:.2f} %", **flops)]
    return out


def _time_model(part: pd.DataFrame, d: str, where: str, frames) -> list[Finding]:
    why, good = validity("time-model", part), valid("time-model", part)
    rows = ok(part)[(part["phase"] == "combined") & (part["mode"] != "none")]
    out = [gated(judge(
        f"time-model.{r['mode']}.h{int(r['hidden'])}-s{int(r['seq'])}.{d}", f"Roofline at measured rates: {r['mode']} "
        f"recompute overhead, h = {int(r['hidden'])}, s = {int(r['seq'])}", 100 * r["measured_overhead"],
        where=stand_in(where), text=f"{100 * r['measured_overhead']:.1f} %", paper=PaperValue(
            100 * r["predicted_overhead"], ROOFLINE, f"{100 * r['predicted_overhead']:.1f} %"),
        rule=within_abs(tol.SWEEPS_MODEL_PP)), [why[i]])
        for i, r in rows.iterrows()]
    worst = float(good["error"].loc[good["error"].abs().idxmax()]) if len(good) else np.nan
    error = _f("time-model.error", d, 1 + worst, where=stand_in(where), rule=within_rel(tol.TIME_MODEL_BAND),
               text=signed_percent(worst, 1, " %"), paper=PaperValue(1, ROOFLINE, "predicted = measured"))
    return out + [gated(error, [] if len(good) else ["no size passes the timing gates"])]


BUILDERS = {"segments": _segments, "depth": _depth, "seq-hidden": _seq_hidden, "layer-timing": _timing,
            "time-model": _time_model}


def _table4(found: list[Finding], devices_found: list[str]) -> Finding:
    """The scorecard's claim: Table 4's overheads on one layer, on the GPU where timed (else the CPU stand-in), with
    the status of the mode farther from the paper."""
    d = catalog.GPU_DEVICE if catalog.GPU_DEVICE in devices_found else devices_found[0]
    modes = [next(f for f in found if f.id == f"timing.{m}.{d}") for m in ("full", "selective")]
    worst = max(modes, key=lambda f: abs(f.value - f.paper_value) if f.value == f.value else np.inf)
    return replace(worst, id="table4-measured", claim="One layer: time overhead (measured)",
                   ours=", ".join(f"{m} {f.ours}" for m, f in zip(("full", "selective"), modes)),
                   paper=f"full {TABLE4['full'].text}, selective {TABLE4['selective'].text}",
                   scorecard=KORTHIKANTI, link="sweeps.html#sec-timing")
