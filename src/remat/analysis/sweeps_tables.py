"""The sweep tables as the sweeps report uses them: every device's table, the timing gates (``validity``), the fits
and crossovers the findings judge (rows with status "ok" only), and the tables the report shows.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from remat.analysis import catalog, gates
from remat.analysis.chen2016 import fit_loglog_exponent
from remat.analysis.times import validation_display
from remat.formulas import torch_gpt

SIZE = ["device", "hidden", "seq", "micro_batch", "heads"]
"""The columns that make one layer size on one device in the per-layer timing and the time-model tables."""


def read(root=".") -> dict[str, pd.DataFrame]:
    """sweep -> every device's table (catalog.device_paths), an empty frame where it has none."""
    empty = pd.DataFrame(columns=["device", "status"])
    return {s: pd.concat([catalog.read_csv(p) for p in catalog.device_paths(f"sweeps.{s}", root)] or [empty],
                         ignore_index=True) for s in catalog.SWEEPS}


def devices(frame: pd.DataFrame) -> list[str]:
    """The devices of a sweep frame, in catalog.DEVICES order."""
    return [d for d in catalog.DEVICES if (frame["device"] == d).any()]


def ok(frame: pd.DataFrame) -> pd.DataFrame:
    """The measured rows (status "ok")."""
    return frame[frame["status"] == "ok"]


def checkpoint_bytes(row) -> int:
    """x = s·b·h·e, the bytes one checkpoint keeps (a layer's input), at a sweep row's sizes and dtype."""
    return int(row["seq"] * row["micro_batch"] * row["hidden"]) * torch_gpt.itemsize(row["dtype"])


# --- timing gates -------------------------------------------------------------------------------------------------

def _reasons(g: pd.DataFrame, base) -> pd.Series:
    """Per row of one set of timings (``_timings``) against the reference row ``base``: the first failing gate
    (noisy, a forward apart from the reference's, an overhead below zero beyond the noise) or ""."""
    b = g.loc[base]
    found = [next((x for x in (
        gates.noisy(r.combined_s, r.combined_iqr_s, f"{r.label}'s time"),
        gates.noisy(r.forward_s, r.forward_iqr_s, f"{r.label}'s forward"),
        gates.apart(1e3 * b.forward_s, 1e3 * b.forward_iqr_s, 1e3 * r.forward_s, 1e3 * r.forward_iqr_s,
                    f"the forward ({b.label} and {r.label}, ms)"),
        gates.negative_overhead(r.time_overhead, (r.combined_iqr_s + b.combined_iqr_s) / b.combined_s,
                                f"{r.label} recompute")) if x), "") for r in g.itertuples()]
    return pd.Series(found, index=g.index, dtype=object)


TIMED = {"segments": "device", "layer-timing": "device", "time-model": SIZE}
"""The timed sweeps, and what one set of timings against one reference spans: a device's rows, a time-model size's."""


def _timings(sweep: str, g: pd.DataFrame) -> pd.DataFrame:
    """A TIMED group as ``_reasons`` reads it: per k (segments, no forward) or per mode (the others)."""
    if sweep == "segments":
        return g.assign(label=[f"k = {k}" for k in g["k"]], combined_s=g["step_time_s"], forward_s=np.nan,
                        combined_iqr_s=g["step_time_iqr_s"], forward_iqr_s=np.nan)
    if sweep == "layer-timing":
        return g.assign(label=g["mode"])
    forward, combined = (g[g["phase"] == p].set_index("mode") for p in ("forward", "combined"))
    modes = sorted(set(g["mode"]))
    return pd.DataFrame({"label": modes, "forward_s": forward["measured_s"], "forward_iqr_s": forward["measured_iqr_s"],
                         "combined_s": combined["measured_s"], "combined_iqr_s": combined["measured_iqr_s"],
                         "time_overhead": combined["measured_overhead"]}, index=modes)


def validity(sweep: str, frame: pd.DataFrame) -> pd.Series:
    """Per row of a sweep table: "" when its timing passes the gates (or it is not timed), else why it is invalid
    (gates.conditions, then ``_reasons`` against k = 1 or mode none): per point in segments, else per TIMED group."""
    out, good = pd.Series("", index=frame.index, dtype=object), ok(frame)
    if sweep not in TIMED or (sweep == "segments" and "step_time_s" not in good):   # segments run untimed
        return out
    for _, g in good.groupby(TIMED[sweep], dropna=False):
        t = _timings(sweep, g)
        base = t.index[t["label"].isin(["none", "k = 1"])]
        why = _reasons(t, base[0]) if len(base) else pd.Series("", index=t.index, dtype=object)
        if sweep == "segments":   # k = 1's busy window, else a point's own, else k = 1's failed gate
            k1_busy, k1 = gates.conditions(g[g["k"] == 1]), why[base[0]] if len(base) else ""
            out[g.index] = [k1_busy or gates.conditions(r) or k1 or w for (_, r), w in zip(g.iterrows(), why)]
        else:
            out[g.index] = gates.conditions(g) or next((r for r in why if r), "")
    return out


def valid(sweep: str, frame: pd.DataFrame) -> pd.DataFrame:
    """The measured rows whose timing passes the gates."""
    return ok(frame)[validity(sweep, frame)[ok(frame).index] == ""]


# --- fits and crossovers ------------------------------------------------------------------------------------------

def depth_fits(frame: pd.DataFrame) -> pd.DataFrame:
    """Per device and family of a sweep-depth table: points, L range, log-log exponents of the measured and closed-form
    peaks against L, and peak ≈ c0 + c1·L (``intercept_bytes``, ``bytes_per_layer``)."""
    good = ok(frame).sort_values("device", key=lambda d: d.map(catalog.DEVICES.index), kind="stable")
    rows = []
    for (device, family), part in good.groupby(["device", "family"], sort=False):
        part, enough = part.sort_values("layers"), part["layers"].nunique() > 1
        c1, c0 = np.polyfit(part["layers"], part["peak_activation_bytes"], 1) if enough else (np.nan, np.nan)
        exponent = lambda col: fit_loglog_exponent(part["layers"], part[col]) if enough else np.nan
        rows.append({"device": device, "family": family, "points": len(part), "L_min": int(part["layers"].min()),
                     "L_max": int(part["layers"].max()), "exponent": exponent("peak_activation_bytes"),
                     "exponent_formula": exponent("peak_activation_bytes_formula"),
                     "intercept_bytes": c0, "bytes_per_layer": c1})
    return pd.DataFrame(rows)


def _crossing(x, ratio, reciprocal: bool = False) -> float:
    """The x where ``ratio`` first reaches 1, interpolated in x (or 1/x: ``reciprocal``); NaN if it does not."""
    x, ratio = np.asarray(x, float), np.asarray(ratio, float) - 1
    u = 1 / x if reciprocal else x
    for i in range(len(x)):
        if ratio[i] == 0:
            return float(x[i])
        if i + 1 < len(x) and ratio[i] * ratio[i + 1] < 0:
            hit = u[i] + (u[i + 1] - u[i]) * ratio[i] / (ratio[i] - ratio[i + 1])
            return float(1 / hit if reciprocal else hit)
    return np.nan


def crossover(part: pd.DataFrame, axis: str) -> tuple[float, float]:
    """(measured, closed form) where a layer's as²b bytes overtake its sbh bytes along ``axis``: "seq" s* (closed form
    34h/(5a)) or "hidden" h* (5as/34, interpolated in 1/h); NaNs without points."""
    part = ok(part[(part["mode"] == "none") & (part["axis"] == axis)]).sort_values(axis)
    if not len(part):
        return np.nan, np.nan
    h, a, s = (int(part[c].iloc[0]) for c in ("hidden", "heads", "seq"))
    ratio = part["as2b_term_measured"] / part["sbh_term_measured"]
    return _crossing(part[axis], ratio, axis == "hidden"), (34 * h / (5 * a) if axis == "seq" else 5 * a * s / 34)


# --- tables the report shows --------------------------------------------------------------------------------------

def _timing_column(sweep: str, frame: pd.DataFrame) -> pd.Series:
    return validity(sweep, frame).map(lambda why: f"invalid: {why}" if why else "")


def layer_table(frame: pd.DataFrame) -> pd.DataFrame:
    """Paper Table 4's layout per device and mode of a sweep-layer-timing table, with the timing gate's verdict."""
    ms, pct = (lambda c: (1e3 * frame[c]).round(2).astype(str)), (lambda c, digits=2: (100 * frame[c]).round(digits))
    return pd.DataFrame({
        "device": frame["device"], "mode": frame["mode"], "status": frame["status"],
        "forward (IQR)": ms("forward_s") + " (" + ms("forward_iqr_s") + ")", "backward": ms("backward_s"),
        "combined (IQR)": ms("combined_s") + " (" + ms("combined_iqr_s") + ")", "time ovh. %": pct("time_overhead", 1),
        "FLOP ovh. % counted": pct("flop_overhead"), "FLOP ovh. % App. A": pct("flop_overhead_formula"),
        "time ÷ FLOP ovh.": frame["time_per_flop_overhead"].round(2),
        "timing": _timing_column("layer-timing", frame)}).astype(object).fillna("—")


def time_model_table(frame: pd.DataFrame) -> pd.DataFrame:
    """``times.validation_display`` with the device and "invalid" where the row's size fails a timing gate."""
    invalid = validity("time-model", frame).map(lambda why: "invalid" if why else "")
    return validation_display(frame).assign(device=frame["device"].to_numpy(), timing=invalid.to_numpy())


POINT = {"segments": "k={k}", "depth": "L={layers} {family}", "seq-hidden": "s={seq} h={hidden} {mode}"}
"""How a point of each memory sweep is named in the points table."""


def points_table(frames: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """Every point of the memory sweeps beside its closed form ("—": none), the timing verdict in its status."""
    parts = [pd.DataFrame({
        "device": f["device"], "point": [POINT[s].format(**r) for r in f.to_dict("records")],
        "status": f["status"] + _timing_column(s, f).map(lambda why: f"; timing {why}" if why else ""),
        "saved ÷ closed form": f["saved_ratio"].round(4), "saved": f["saved_bytes"],
        "peak": f["peak_activation_bytes"], "live peak, closed form": f["peak_activation_bytes_formula"],
        "residual": f["peak_residual_bytes"],
        "FLOPs ÷ closed form": (f["flops_recompute"] / f["flops_recompute_formula"]).round(4),
        "FLOP ovh. %": (100 * f["flop_overhead"]).round(2),
        "time ÷ FLOP ovh.": f.get("time_per_flop_overhead", pd.Series(np.nan, f.index)).round(2)})
        for s, f in frames.items() if s in POINT and len(f)]
    out = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()
    return out.astype(object).where(out.notna(), "—")


SIZES = {"model": "model", "layers": "L", "seq": "s", "micro_batch": "b", "hidden": "h", "heads": "a", "vocab": "v",
         "dtype": "dtype", "dropout": "p", "threads": "threads", "warmup": "warm-up", "repeats": "repeats",
         "rounds": "rounds"}
"""The sizes table's columns and headers: the paper's symbols (the caption spells them out)."""


def sizes_table(frames: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """Per sweep and device: the sizes and protocol of the run (a range where it varies; "—" where absent)."""
    def shown(values):
        v = sorted(values, key=str)
        if not v or isinstance(v[0], str):
            return ", ".join(v) or "—"
        return f"{v[0]:g}" if len(v) == 1 else f"{min(v):g}–{max(v):g}"
    t = pd.DataFrame([{"sweep": s, "device": d, **{h: shown(f.loc[f["device"] == d, c].dropna().unique()
                                                             if c in f else []) for c, h in SIZES.items()}}
                      for s, f in frames.items() for d in devices(f)], columns=["sweep", "device", *SIZES.values()])
    protocol = ["warm-up", "repeats", "rounds"]
    return t.drop(columns=protocol).assign(**{" / ".join(protocol): t[protocol].agg(" / ".join, axis=1)})


def precision_table(frames: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """Per device and dtype: the sweeps that computed in it and the reason recorded (remat.precision; else "—")."""
    rows = pd.concat([f.assign(sweep=s) for s, f in frames.items() if len(f)], ignore_index=True) \
        if any(len(f) for f in frames.values()) else pd.DataFrame(columns=["sweep", "device", "dtype"])
    rows = rows.assign(reason=rows.get("dtype_reason", pd.Series("—", index=rows.index)).fillna("—"))
    return pd.DataFrame([{"device": d, "dtype": t, "sweeps": ", ".join(dict.fromkeys(g["sweep"])), "why": why}
                         for (d, t, why), g in rows.groupby(["device", "dtype", "reason"], sort=False)])


DEPTH = {"L_min": "L, least", "L_max": "L, most", "exponent": "exponent a of L^a, measured",
         "exponent_formula": "exponent a, closed form", "intercept_bytes": "intercept c0 (bytes)",
         "bytes_per_layer": "slope c1 (bytes per layer)"}


def depth_table(fits: pd.DataFrame) -> pd.DataFrame:
    """``depth_fits`` under the report's headers (DEPTH): exponents to 3 decimals, bytes as integers."""
    return fits.round({"exponent": 3, "exponent_formula": 3, "intercept_bytes": 0, "bytes_per_layer": 0}) \
        .astype({"intercept_bytes": int, "bytes_per_layer": int}).rename(columns=DEPTH)


def reference(source: str) -> tuple[str, str]:
    """What a finding is judged against, from its source: (closed form | model | invariant | paper, the rest)."""
    kind = next((k for k in ("closed form", "model", "invariant") if source.startswith(k + ":")), "paper")
    return kind, source.removeprefix(kind + ":").strip()


def findings_table(found, prefix: str = "") -> pd.DataFrame:
    """The findings whose id starts with ``prefix``, one row each; reference: what ours is judged against."""
    return pd.DataFrame([{"claim": f.claim, "where": f.where, "ours": f.ours,
                          "reference": reference(f.source)[0] if f.paper else "—",
                          "reference value (source)": f"{f.paper} ({reference(f.source)[1]})" if f.paper else "—",
                          "rule": f.rule or "—", "status": f.status, "reason": f.reason or "—"}
                         for f in found if f.id.startswith(prefix)])
