"""The numbers the sweeps report and figures show, computed from the sweep tables (nothing is re-measured):
fitted exponents, optima, crossovers, and measured-beside-closed-form tables.

    depth = read_sweep("depth")        # every results/sweeps/depth/<device>.csv, one frame (device column)
    depth_fits(depth)                  # per device and family: log-log exponent, intercept, bytes per layer

Only rows with status "ok" enter fits and ratios; "oom" and "skipped_too_large" rows are counted and listed.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

from remat.analysis.chen2016 import fit_loglog_exponent
from remat.formulas import torch_gpt
from remat.report.phrases import capitalized, count, count_of, join_words
from remat.units import percent

SWEEPS = ("segments", "depth", "seq-hidden", "layer-timing", "time-model")
DEVICE_ORDER = ("cpu", "cuda")


def read_sweep(sweep: str, results: str | Path = "results") -> pd.DataFrame:
    """All device tables of ``sweep`` (results/sweeps/<sweep>/<device>.csv, plus the committed reference GPU
    run's when this run has no GPU table: remat.report.reference) as one frame, CPU first; an empty frame if
    none exists. Raises ValueError for an unknown sweep name."""
    if sweep not in SWEEPS:
        raise ValueError(f"unknown sweep {sweep!r} (sweeps: {', '.join(SWEEPS)})")
    from remat.report.reference import device_tables
    found = device_tables(f"sweeps/{sweep}", results)
    paths = sorted(found, key=lambda p: (_rank(p.stem), p.stem))
    return pd.concat([pd.read_csv(p) for p in paths], ignore_index=True) if paths else pd.DataFrame()


def _rank(device: str) -> int:
    return DEVICE_ORDER.index(device) if device in DEVICE_ORDER else len(DEVICE_ORDER)


def devices(frame: pd.DataFrame) -> list[str]:
    """The devices in a sweep frame, CPU first."""
    return sorted(frame["device"].unique(), key=lambda d: (_rank(d), d)) if len(frame) else []


def ok(frame: pd.DataFrame) -> pd.DataFrame:
    """The measured rows (status "ok")."""
    return frame[frame["status"] == "ok"]


def not_run(frame: pd.DataFrame, device: str) -> int:
    """How many points of ``device`` in a sweep table did not run (status other than "ok": oom, too large)."""
    part = frame[frame["device"] == device] if len(frame) else frame
    return int((part["status"] != "ok").sum()) if len(part) else 0


def checkpoint_bytes(row) -> int:
    """x = s·b·h·e, the bytes one checkpoint keeps (a layer's input), at a sweep row's seq, micro_batch, hidden
    and dtype: remat.formulas.torch_gpt's x (``sz.sbh * sz.itemsize``)."""
    return int(row["seq"] * row["micro_batch"] * row["hidden"]) * torch_gpt.itemsize(row["dtype"])


# --- (a) segments -------------------------------------------------------------------------------------------------

def segments_summary(frame: pd.DataFrame) -> pd.DataFrame:
    """Per device of a sweep-segments table: L, points measured, √L (⌈√L⌉), the measured optimum k (arg-min of
    the measured peak activation bytes), the closed form's optimum and k* = √(L·y/x), peak bytes at k = 1,
    ⌈√L⌉ and the measured optimum, the largest |saved/closed form − 1|, the peak residual (measured − live
    saved peak: the backward working set) range, and the median time overhead per FLOP overhead."""
    rows = []
    for device in devices(frame):
        part = frame[frame["device"] == device]
        good = ok(part).set_index("k")
        k_best = int(good["peak_activation_bytes"].idxmin()) if len(good) else None
        k_sqrt = int(part["k_sqrt"].iloc[0])
        rows.append({
            "device": device, "layers": int(part["layers"].iloc[0]), "points": len(part), "ok": len(good),
            "k_sqrt": k_sqrt, "k_opt_measured": k_best, "k_opt_formula": int(part["k_opt_formula"].iloc[0]),
            "k_star": float(part["k_star"].iloc[0]),
            "peak_k1": _at(good, 1, "peak_activation_bytes"), "peak_k_sqrt": _at(good, k_sqrt, "peak_activation_bytes"),
            "peak_opt": _at(good, k_best, "peak_activation_bytes"),
            "max_saved_error": float((good["saved_ratio"] - 1).abs().max()) if len(good) else np.nan,
            "residual_min": _agg(good, "peak_residual_bytes", "min"), "residual_max": _agg(good, "peak_residual_bytes", "max"),
            "time_per_flop_median": _agg(good, "time_per_flop_overhead", "median"),
        })
    return pd.DataFrame(rows)


def segments_display(summary: pd.DataFrame) -> pd.DataFrame:
    """``segments_summary`` under the report's headers (units in each): peaks and residuals in bytes, the
    saved-bytes deviation in percent, the time/FLOP overhead as a multiple."""
    out = pd.DataFrame({
        "device": summary["device"], "layers L": summary["layers"], "points": summary["points"],
        "measured": summary["ok"], "√L segments k": summary["k_sqrt"],
        "optimum k, measured": summary["k_opt_measured"], "optimum k, closed form": summary["k_opt_formula"],
        "optimum k, continuous √(L·y/x)": summary["k_star"].map(lambda v: f"{v:.1f}"),
        "peak at k = 1 (bytes)": summary["peak_k1"].map(_int_text),
        "peak at √L segments (bytes)": summary["peak_k_sqrt"].map(_int_text),
        "peak at the optimum (bytes)": summary["peak_opt"].map(_int_text),
        "largest saved-bytes deviation (%)": summary["max_saved_error"].map(lambda v: _num_text(100 * v, 3)),
        "residual, least (bytes)": summary["residual_min"].map(_int_text),
        "residual, most (bytes)": summary["residual_max"].map(_int_text),
        "median time / FLOP overhead (×)": summary["time_per_flop_median"].map(lambda v: _num_text(v, 2)),
    })
    return out.reset_index(drop=True)


def _int_text(v) -> str:
    return "—" if v is None or v != v else f"{int(round(float(v))):,}"


def _num_text(v, digits: int) -> str:
    return "—" if v is None or v != v else f"{float(v):.{digits}f}"


def _at(frame: pd.DataFrame, key, column: str):
    return frame.loc[key, column] if key is not None and key in frame.index else np.nan


def _agg(frame: pd.DataFrame, column: str, how: str) -> float:
    return float(getattr(frame[column].dropna(), how)()) if column in frame and frame[column].notna().any() else np.nan


# --- (b) depth ------------------------------------------------------------------------------------------------------

def linear_fit(x, y) -> tuple[float, float]:
    """Least-squares y ≈ c0 + c1·x (scipy.stats.linregress): (c0, c1) in y's units (bytes, bytes per layer)."""
    fit = stats.linregress(np.asarray(x, float), np.asarray(y, float))
    return float(fit.intercept), float(fit.slope)


def depth_fits(frame: pd.DataFrame) -> pd.DataFrame:
    """Per device and family of a sweep-depth table: measured points, depths L_min..L_max, the log-log
    exponent of the measured peak activation bytes against L (remat.analysis.chen2016.fit_loglog_exponent) and
    of the closed-form live peak, and a linear fit peak ≈ c0 + c1·L of the measured peak (c0: what does not
    grow with L — head, loss, their backward working set; c1: bytes per layer)."""
    rows = []
    for (device, family), part in ok(frame).groupby(["device", "family"], sort=False):
        part = part.sort_values("layers")
        c0, c1 = linear_fit(part["layers"], part["peak_activation_bytes"]) if len(part) > 1 else (np.nan, np.nan)
        enough = part["layers"].nunique() > 1
        rows.append({"device": device, "family": family, "points": len(part),
                     "L_min": int(part["layers"].min()), "L_max": int(part["layers"].max()),
                     "exponent": fit_loglog_exponent(part["layers"], part["peak_activation_bytes"]) if enough else np.nan,
                     "exponent_formula": fit_loglog_exponent(part["layers"], part["peak_activation_bytes_formula"])
                     if enough else np.nan,
                     "intercept_bytes": c0, "bytes_per_layer": c1})
    out = pd.DataFrame(rows)
    if len(out):
        out["_d"] = out["device"].map(_rank)
        out = out.sort_values("_d", kind="stable").drop(columns="_d").reset_index(drop=True)
    return out


def fit_value(fits: pd.DataFrame, device: str, family: str, column: str = "exponent") -> float:
    """One number of ``depth_fits`` (``column`` of the device's ``family`` row); NaN when it has no such row."""
    row = fits[(fits["device"] == device) & (fits["family"] == family)] if len(fits) else fits
    return float(row[column].iloc[0]) if len(row) else np.nan


def depth_display(fits: pd.DataFrame) -> pd.DataFrame:
    """``depth_fits`` under the report's headers: exponents of the measured peak and of the closed form, the
    linear fit's intercept c0 (bytes) and slope c1 (bytes per layer)."""
    return pd.DataFrame({
        "device": fits["device"], "family": fits["family"], "points": fits["points"],
        "layers L, least": fits["L_min"], "layers L, most": fits["L_max"],
        "exponent a of L^a, measured": fits["exponent"].map(lambda v: _num_text(v, 3)),
        "exponent a, closed form": fits["exponent_formula"].map(lambda v: _num_text(v, 3)),
        "intercept c0 (bytes)": fits["intercept_bytes"].map(_int_text),
        "slope c1 (bytes per layer)": fits["bytes_per_layer"].map(_int_text),
    }).reset_index(drop=True)


# --- (c) sequence and hidden size ------------------------------------------------------------------------------------

def _crossing(x, ratio, reciprocal: bool = False) -> float:
    """The x where ``ratio`` (sorted by x) first reaches 1, interpolated linearly in x (or in 1/x when
    ``reciprocal``); NaN if it does not cross inside the range."""
    x, ratio = np.asarray(x, float), np.asarray(ratio, float) - 1
    u = 1 / x if reciprocal else x
    for i in range(len(x)):
        if ratio[i] == 0:
            return float(x[i])
        if i + 1 < len(x) and ratio[i] * ratio[i + 1] < 0:
            hit = u[i] + (u[i + 1] - u[i]) * ratio[i] / (ratio[i] - ratio[i + 1])
            return float(1 / hit if reciprocal else hit)
    return np.nan


def crossover(frame: pd.DataFrame) -> pd.DataFrame:
    """Per device of a sweep-seq-hidden table (mode none, measured by remat.accounting): where the as²b
    part of a layer's paper-faithful bytes overtakes the sbh part. Along s (h fixed): s* measured, by
    linear interpolation of the measured ratio as²b/sbh (∝ s), beside 34h/(5a); along h (s fixed): h*
    measured (interpolated in 1/h: the ratio ∝ 1/h) beside 5as/34."""
    rows = []
    for device in devices(frame):
        part = ok(frame[(frame["device"] == device) & (frame["mode"] == "none")])
        part = part.assign(ratio=part["as2b_term_measured"] / part["sbh_term_measured"])
        seq = part[part["axis"] == "seq"].sort_values("seq")
        hid = part[part["axis"] == "hidden"].sort_values("hidden")
        row = {"device": device}
        if len(seq):
            h, a = int(seq["hidden"].iloc[0]), int(seq["heads"].iloc[0])
            row.update(h=h, a=a, s_star_measured=_crossing(seq["seq"], seq["ratio"]),
                       s_star_formula=float(seq["crossover_seq_formula"].iloc[0]),
                       s_range=f"{int(seq['seq'].min())}–{int(seq['seq'].max())}")
        if len(hid):
            s, a = int(hid["seq"].iloc[0]), int(hid["heads"].iloc[0])
            row.update(s_fixed=s, h_star_measured=_crossing(hid["hidden"], hid["ratio"], reciprocal=True),
                       h_star_formula=5 * a * s / 34,
                       h_range=f"{int(hid['hidden'].min())}–{int(hid['hidden'].max())}")
        rows.append(row)
    return pd.DataFrame(rows)


def crossover_display(cross: pd.DataFrame) -> pd.DataFrame:
    """``crossover`` under the report's headers: along s (h and a fixed) the crossing s measured and in closed
    form 34h/(5a), along h (s fixed) the crossing h measured and in closed form 5as/34; sizes in elements
    (tokens for s); "—" where the sweep did not run that axis."""
    get = lambda c: cross[c] if c in cross else pd.Series([np.nan] * len(cross), index=cross.index)
    text = lambda v, d=1: "—" if v is None or (isinstance(v, float) and v != v) else (
        f"{v:.{d}f}" if isinstance(v, float) else str(v))
    return pd.DataFrame({
        "device": cross["device"], "hidden h (along s)": get("h").map(lambda v: text(v, 0)),
        "heads a": get("a").map(lambda v: text(v, 0)), "s swept": get("s_range").map(text),
        "crossing s, measured": get("s_star_measured").map(text),
        "crossing s, closed form 34h/(5a)": get("s_star_formula").map(text),
        "sequence s (along h)": get("s_fixed").map(lambda v: text(v, 0)), "h swept": get("h_range").map(text),
        "crossing h, measured": get("h_star_measured").map(text),
        "crossing h, closed form 5as/34": get("h_star_formula").map(text),
    }).reset_index(drop=True)


def selective_keep(frame: pd.DataFrame, device: str) -> dict | None:
    """What selective recompute keeps of a layer's saved bytes along s, from a sweep-seq-hidden table's
    measured points of ``device`` (axis "seq"): per-layer saved bytes under selective over those under none at
    the shortest and the longest s swept — {"s_short", "s_long", "keep_short", "keep_long", "h"}. None when no
    s has both modes measured."""
    part = ok(frame[(frame["device"] == device) & (frame["axis"] == "seq")]) if len(frame) else frame
    if not len(part):
        return None
    seq = part.pivot_table(index="seq", columns="mode", values="saved_per_layer_bytes")
    if "selective" not in seq or "none" not in seq:
        return None
    keep = (seq["selective"] / seq["none"]).dropna().sort_index()
    if not len(keep):
        return None
    return {"s_short": int(keep.index[0]), "s_long": int(keep.index[-1]), "keep_short": float(keep.iloc[0]),
            "keep_long": float(keep.iloc[-1]), "h": int(part["hidden"].iloc[0])}


def selective_keep_text(keep: dict | None) -> str:
    """``selective_keep`` as sentences (Markdown with TeX): the share kept at the longest and the shortest s,
    and that the 5as²b part it drops outgrows the rest only when the share falls with s."""
    if keep is None:
        return "Its saving is not measured (no sequence length ran both without and with selective recompute)."
    long, short = keep["keep_long"], keep["keep_short"]
    if keep["s_long"] == keep["s_short"]:
        return (f"It keeps {percent(long)} of a layer's saved bytes at $s$ = {keep['s_long']} ($h$ = {keep['h']}); "
                "one sequence length does not show how that share moves with $s$.")
    kept = (f"It keeps {percent(long)} of a layer's saved bytes at $s$ = {keep['s_long']} ({percent(short)} at "
            f"$s$ = {keep['s_short']}; $h$ = {keep['h']})")
    if long < short:
        return f"{kept}: the $5as^2b$ part it drops grows faster with $s$ than the rest of the layer."
    return f"{kept}: the share it keeps does not fall as $s$ grows over the swept range."


# --- (d) layer timing ------------------------------------------------------------------------------------------------

def layer_table(frame: pd.DataFrame) -> pd.DataFrame:
    """Korthikanti Table 4 layout per device and mode: forward, backward, combined milliseconds per layer
    (median; IQR of the combined), time overhead % against none, FLOP overhead % counted and from
    Appendix A, and time overhead / FLOP overhead."""
    rows = []
    for _, r in frame.iterrows():
        measured = r["status"] == "ok"
        rows.append({
            "device": r["device"], "mode": r["mode"],
            "forward (ms)": round(r["forward_s"] * 1e3, 2) if measured else r["status"],
            "backward (ms)": round(r["backward_s"] * 1e3, 2) if measured else "—",
            "combined (ms; IQR)": f"{r['combined_s'] * 1e3:.2f} ({r['combined_iqr_s'] * 1e3:.2f})" if measured else "—",
            "time overhead (%)": round(100 * r["time_overhead"], 1) if measured else "—",
            "FLOP overhead, counted (%)": round(100 * r["flop_overhead"], 2) if measured else "—",
            "FLOP overhead, App. A (%)": round(100 * r["flop_overhead_formula"], 2),
            "time / FLOP overhead (×)": round(r["time_per_flop_overhead"], 2)
            if measured and pd.notna(r["time_per_flop_overhead"]) else "—",
        })
    return pd.DataFrame(rows)


TIMING_SIZE = ("hidden", "seq", "micro_batch", "heads")
"""The columns that make one layer size in the per-layer timing and the time-model tables."""


def timing_contrast(layer_timing: pd.DataFrame, time_model: pd.DataFrame, device: str) -> dict | None:
    """The per-layer timing (``layer_timing``, one size) beside the time-model sweep's measured combined times
    at the same size (h, s, b, a) on ``device``: {"size": {column: value}, "there"/"here": {"dtype", "dropout",
    "none_s", mode: (overhead, added seconds)}} for the recompute modes both measured ("there": the per-layer
    timing, "here": the time-model sweep). None when either has no measured row or no size matches."""
    lt = ok(layer_timing[layer_timing["device"] == device]) if len(layer_timing) else pd.DataFrame()
    if not len(lt) or not len(time_model):
        return None
    tm = time_model[(time_model["device"] == device) & (time_model["phase"] == "combined")]
    tm = ok(tm) if "status" in tm else tm
    size = {c: lt[c].iloc[0] for c in TIMING_SIZE}
    for c, v in size.items():
        tm = tm[tm[c] == v]
    lt, tm = lt.set_index("mode"), tm.set_index("mode")
    if "none" not in lt.index or "none" not in tm.index:
        return None
    modes = [m for m in ("selective", "full") if m in lt.index and m in tm.index]
    out = {"size": {c: int(v) for c, v in size.items()}, "modes": modes}
    for key, frame, seconds, overhead in (("there", lt, "combined_s", "time_overhead"),
                                          ("here", tm, "measured_s", "measured_overhead")):
        none = float(frame.loc["none", seconds])
        out[key] = {"dtype": str(frame["dtype"].iloc[0]), "dropout": float(frame["dropout"].iloc[0]),
                    "none_s": none,
                    **{m: (float(frame.loc[m, overhead]), float(frame.loc[m, seconds]) - none) for m in modes}}
    return out


def timing_contrast_text(contrast: dict | None) -> str:
    """``timing_contrast`` as sentences for the time-model section ("here": this sweep; "the per-layer
    timing": the other): the two sweeps' overheads at the same size, how their runs differ (dtype, dropout),
    the none layer's time and the time each recompute adds in both, and which makes the percentages differ
    more — the base they are divided by or the added time itself (the larger |log ratio| of the two, over
    every mode). Never empty."""
    if contrast is None:
        return ("The time-model sweep measured no size of the per-layer timing's, so their overheads are not set "
                "side by side.")
    size, there, here, modes = contrast["size"], contrast["there"], contrast["here"], contrast["modes"]
    if not modes:
        return "The two sweeps share no recompute mode, so their overheads are not set side by side."
    at = f"h = {size['hidden']}, s = {size['seq']}, b = {size['micro_batch']}, a = {size['heads']}"
    run = lambda r: f"{r['dtype']} with dropout {r['dropout']:g}"
    first, *rest = modes
    pairs = join_words([f"{first} recompute adds {percent(there[first][0])} in the per-layer timing against "
                        f"{percent(here[first][0])} here"] +
                       [f"{m} {percent(there[m][0])} against {percent(here[m][0])}" for m in rest])
    same = (there["dtype"], there["dropout"]) == (here["dtype"], here["dropout"])
    runs = (f"both ran {run(here)}, so the difference is between runs" if same else
            f"the per-layer timing ran {run(there)}, this sweep {run(here)}")
    ms = lambda x: f"{1e3 * x:.1f} ms"
    base = here["none_s"] / there["none_s"]
    added = (f"{first} recompute added {ms(there[first][1])} and {ms(here[first][1])} to it"
             + "".join(f", {m} recompute {ms(there[m][1])} and {ms(here[m][1])}" for m in rest))
    text = (f"At the per-layer timing's size ({at}) the two sweeps measure different overheads — {pairs} — and "
            f"{runs}. Without recompute the layer took {ms(there['none_s'])} in the per-layer timing and "
            f"{ms(here['none_s'])} here ({base:.2f}× as long); {added}.")
    extras = [here[m][1] / there[m][1] for m in modes if there[m][1] > 0 and here[m][1] > 0]
    if len(extras) == len(modes) and base != 1:
        if all(abs(np.log(r)) < abs(np.log(base)) for r in extras):
            longer = run(here) if base > 1 else run(there)
            text += (" The added time differs less between the two than the base it is divided by, so most of the "
                     f"difference in the percentages is the base: the re-run is a smaller share of the longer layer "
                     f"({longer}).")
        else:
            text += (" The added time differs at least as much between the two as the base it is divided by: the "
                     "re-run itself costs differently, not only its share.")
    if there["dropout"] != here["dropout"] and min(there["dropout"], here["dropout"]) == 0:
        on = "the per-layer timing" if there["dropout"] > 0 else "this sweep"
        text += (f" Only {on} has dropout to re-run: selective recompute re-runs the attention dropout, full "
                 "recompute every dropout of the layer.")
    return text


def timing_contrast_pointer(contrast: dict | None) -> str:
    """The per-layer timing section's pointer to the time-model sweep (``timing_contrast``): whether that sweep
    measures this layer size, how it ran, and whether it finds other overheads — "other" only when some
    recompute mode's overhead differs as shown (one decimal). Never empty; no full stop."""
    if contrast is None:
        return "The time-model sweep has no measurement at this layer size to set beside these overheads"
    here, there, modes = contrast["here"], contrast["there"], contrast["modes"]
    run = f"The time-model sweep measures this layer size too, in {here['dtype']} with dropout {here['dropout']:g}"
    if not modes:
        return f"{run}, but under none of the recompute modes timed here"
    if any(percent(there[m][0]) != percent(here[m][0]) for m in modes):
        return f"{run}, and finds other overheads; the reason is worked out with it"
    return f"{run}, and finds the same overheads"


# --- every point beside its closed form --------------------------------------------------------------------------------

def point_label(row: pd.Series) -> str:
    """A short name for a sweep point: "k=3", "L=16 sqrt", "s=128 h=64 none"."""
    sweep = row["sweep"]
    if sweep == "sweep-segments":
        return f"k={int(row['k'])}"
    if sweep == "sweep-depth":
        return f"L={int(row['layers'])} {row['family']}"
    return f"s={int(row['seq'])} h={int(row['hidden'])} {row['mode']}"


def comparison(frame: pd.DataFrame) -> pd.DataFrame:
    """Measured / closed form per point of a sweep-segments, -depth or -seq-hidden table: saved bytes (ratio),
    peak activation bytes and the residual (the backward working set), recompute FLOPs (ratio), FLOP overhead
    and, where timed, time overhead per FLOP overhead. Not-run points keep their status."""
    out = pd.DataFrame({
        "device": frame["device"], "point": frame.apply(point_label, axis=1), "status": frame["status"],
        "saved (bytes)": frame.get("saved_bytes"), "saved, closed form (bytes)": frame["saved_bytes_formula"],
        "saved, measured / closed form": frame.get("saved_ratio", pd.Series(np.nan, index=frame.index)).round(4),
        "peak above model state (bytes)": frame.get("peak_activation_bytes"),
        "live peak, closed form (bytes)": frame["peak_activation_bytes_formula"],
        "residual (bytes)": frame.get("peak_residual_bytes"),
        "recompute FLOPs, measured / closed form":
            (frame.get("flops_recompute") / frame["flops_recompute_formula"]).round(4),
        "FLOP overhead (%)": (100 * frame.get("flop_overhead", np.nan)).round(2),
    })
    if "time_per_flop_overhead" in frame:
        out["time / FLOP overhead (×)"] = frame["time_per_flop_overhead"].round(2)
    return out


def saved_error(*frames: pd.DataFrame) -> float:
    """The largest |measured saved bytes / closed form − 1| over the measured points of the given tables."""
    ratios = [ok(f)["saved_ratio"] for f in frames if len(f)]
    return float(max((r - 1).abs().max() for r in ratios)) if ratios else np.nan


def all_saved_text(frames, device: str) -> str:
    """``saved_text`` over every point of ``device`` in the given sweep tables ((a)–(c): segments, depth,
    seq-hidden): the largest saved-bytes error over the points that ran, and how many ran of how many."""
    parts = [f[f["device"] == device] for f in frames if len(f)]
    measured, points = sum(len(ok(p)) for p in parts), sum(len(p) for p in parts)
    return saved_text(saved_error(*parts), measured, points, where="point", wheres="points")


# --- sizes and acceptance -----------------------------------------------------------------------------------------------

SIZE_COLUMNS = ("model", "layers", "seq", "micro_batch", "hidden", "heads", "vocab", "dtype", "dropout", "threads",
                "warmup", "repeats")
SIZE_HEADERS = {"model": "model", "layers": "layers L", "seq": "sequence s", "micro_batch": "micro-batch b",
                "hidden": "hidden h", "heads": "heads a", "vocab": "vocabulary v", "dtype": "dtype",
                "dropout": "dropout p", "threads": "CPU threads", "warmup": "warm-up calls",
                "repeats": "timed repeats"}
"""The sizes table's header for each of SIZE_COLUMNS (sizes in elements, s in tokens)."""
NOT_RECORDED = "—"
"""What the sizes table shows where a sweep's table has no such column (``sizes_note`` says why)."""
NOT_RECORDED_WHY = {"time-model": "it runs the transformer layers alone, without the embedding and the LM head "
                                  "(so no vocabulary enters), and records times per layer, not the model or its "
                                  "depth"}
"""Why a sweep's table lacks size columns, by sweep (``sizes_note``)."""


def sizes_table(frames: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """Per sweep and device: the model sizes and protocol of the run (first row's values; a column that
    varies along the sweep shows its range) under SIZE_HEADERS; NOT_RECORDED ("—") where the sweep's table
    has no such column or no value in it (``sizes_note`` names them and says why)."""
    rows = []
    for sweep, frame in frames.items():
        for device in devices(frame):
            part = frame[frame["device"] == device]
            row = {"sweep": sweep, "device": device}
            for column in SIZE_COLUMNS:
                values = part[column].dropna().unique() if column in part else []
                row[SIZE_HEADERS[column]] = _span(values) or NOT_RECORDED
            rows.append(row)
    return pd.DataFrame(rows, columns=["sweep", "device", *SIZE_HEADERS.values()])


def sizes_note(frames: dict[str, pd.DataFrame]) -> str:
    """A sentence on the sizes table's "—" cells: which sweep lacks which columns, and why where known
    (NOT_RECORDED_WHY); "Every sweep records every size." when none is missing."""
    parts = []
    for sweep, frame in frames.items():
        if not len(frame):
            continue
        missing = [SIZE_HEADERS[c] for c in SIZE_COLUMNS if c not in frame or frame[c].dropna().empty]
        if missing:
            why = NOT_RECORDED_WHY.get(sweep, "its table does not record them")
            parts.append(f"the {sweep} sweep's table lacks {join_words(missing)}: {why}")
    if not parts:
        return "Every sweep records every size."
    return f"{NOT_RECORDED} marks a size a sweep's table does not record. {capitalized('; '.join(parts))}."


def _span(values) -> str:
    if len(values) == 0:
        return ""
    if len(values) == 1:
        v = values[0]
        return str(int(v)) if isinstance(v, float) and v.is_integer() else str(v)
    try:
        return f"{int(min(values))}–{int(max(values))}"
    except (TypeError, ValueError):
        return ", ".join(str(v) for v in values)


EXPONENT_TARGETS = {"none": (0.9, 1.1), "sqrt": (0.4, 0.6)}
SAVED_TOLERANCE = 0.02
FULL_OVERHEAD = (1 / 3, 0.01)  # 33.3% ± 1 pp


def acceptance(segments: pd.DataFrame, depth: pd.DataFrame, seq_hidden: pd.DataFrame,
               layer_timing: pd.DataFrame) -> pd.DataFrame:
    """The checks the sweeps are built to pass, per device, from the tables: saved bytes within 2% of the closed form at
    every measured point of (a)–(c); full-recompute FLOP overhead 33% ± 1 pp (one layer, counted; and the
    whole model at the deepest L of the depth sweep, LM head included); fitted exponents of peak vs L
    (none in [0.9, 1.1], √L segments in [0.4, 0.6]). Columns: device, check, value, target, met."""
    rows = []
    found = sorted(set(devices(segments)) | set(devices(depth)) | set(devices(seq_hidden)) | set(devices(layer_timing)),
                   key=lambda d: (_rank(d), d))
    for device in found:
        pick = [f[f["device"] == device] for f in (segments, depth, seq_hidden) if len(f)]
        error = saved_error(*pick)
        rows.append(_check(device, "saved bytes: max abs(measured / closed form − 1), (a)–(c)", error,
                           f"≤ {SAVED_TOLERANCE:.0%}", error <= SAVED_TOLERANCE))
        full = ok(layer_timing[(layer_timing["device"] == device) & (layer_timing["mode"] == "full")]) \
            if len(layer_timing) else pd.DataFrame()
        if len(full):
            value = float(full["flop_overhead"].iloc[0])
            rows.append(_check(device, "full recompute FLOP overhead, one layer (counted)", value,
                               "33.3% ± 1 pp", abs(value - FULL_OVERHEAD[0]) <= FULL_OVERHEAD[1]))
        deep = ok(depth[(depth["device"] == device) & (depth["family"] == "full")]) if len(depth) else pd.DataFrame()
        if len(deep):
            last = deep.loc[deep["layers"].idxmax()]
            value = float(last["flop_overhead"])
            rows.append(_check(device, f"full recompute FLOP overhead, whole model at L = {int(last['layers'])}",
                               value, "33.3% ± 1 pp", abs(value - FULL_OVERHEAD[0]) <= FULL_OVERHEAD[1]))
        fits = depth_fits(depth[depth["device"] == device]) if len(depth) else pd.DataFrame()
        for family, (lo, hi) in EXPONENT_TARGETS.items():
            fit = fits[fits["family"] == family] if len(fits) else fits
            if len(fit):
                value = float(fit["exponent"].iloc[0])
                rows.append(_check(device, f"exponent of peak vs L, {family}", value, f"[{lo}, {hi}]",
                                   lo <= value <= hi, percent=False))
    return pd.DataFrame(rows)


def _check(device: str, name: str, value: float, target: str, met: bool, percent: bool = True) -> dict:
    shown = "n/a" if value != value else (f"{100 * value:.3f}%" if percent else f"{value:.3f}")
    return {"device": device, "check": name, "value": shown, "target": target,
            "met": "yes" if met else "NO"}


# --- wording: sentences the report prints, chosen from the data -------------------------------------------------------
# Every verdict word ("equal", "within", "every", "grows") is picked here from the numbers, so the report's prose
# is true for whatever the tables hold. Each function returns non-empty text (an inline value may not be empty).

def not_run_text(not_run: int, points: int) -> str:
    """How many sweep points did not run (oom or too large): "every point ran", "2 of the 8 points did not run
    (oom or too large)"."""
    if not_run == 0:
        return "every point ran"
    if not_run == points:
        return f"no point ran (all {count(points, 'point')}: oom or too large)"
    return f"{not_run} of the {count(points, 'point')} did not run (oom or too large)"


def saved_text(error: float, measured: int, points: int, tolerance: float = SAVED_TOLERANCE,
               where: str = "$k$", wheres: str | None = None) -> str:
    """The measured saved bytes against the closed form over a sweep's measured points (``error``: the largest
    |measured / closed form − 1|): "equal … at every $k$" only when the error is zero, "within" when under
    ``tolerance``, otherwise how far they deviate; says so when some points did not run. ``where`` / ``wheres``:
    what a point is called, singular and plural (default: ``where`` for both, as "$k$")."""
    if measured == 0 or error != error:
        return f"no {where} was measured, so the saved bytes are not compared with the closed form"
    at = f"at every {where}" if measured == points else f"at each of the {measured} {wheres or where} that ran"
    if error == 0:
        return f"the saved bytes equal the closed form {at}"
    if error <= tolerance:
        return (f"the saved bytes match the closed form within {percent(error, 3)} {at} (the acceptance allows "
                f"{percent(tolerance, 0)})")
    return (f"the saved bytes deviate from the closed form by up to {percent(error, 3)} {at}, more than the "
            f"{percent(tolerance, 0)} the acceptance allows")


def optimum_text(k_measured: int, k_formula: int, k_sqrt: int, peak_sqrt: str, peak_k1: str, peak_opt: str) -> str:
    """Where the measured peak of the segment sweep is lowest, against the closed form's optimum and Chen's
    k = √L (Markdown with TeX: wrap in IPython.display.Markdown inline). Peaks are formatted sizes."""
    agree = "the closed form agrees" if k_measured == k_formula else f"closed form: {k_formula}"
    if k_measured == k_sqrt:
        return (f"The measured peak is lowest at Chen's $k = \\sqrt L$ itself, $k$ = {k_measured} ({agree}; peak "
                f"{peak_opt}, against {peak_k1} without checkpoints).")
    return (f"The measured peak is lowest at $k$ = {k_measured} ({agree}), not at Chen's $k = \\sqrt L$ "
            f"({k_sqrt}, peak {peak_sqrt}; no checkpoints: {peak_k1}; optimum: {peak_opt}).")


def residual_text(lo: float, hi: float, fmt, where: str = "$k$") -> str:
    """The peak's residual over the live saved bytes (measured − closed-form live peak) across the measured
    points of a sweep, ``lo`` to ``hi`` bytes: "exceeds … at every $k$" only when every residual is positive.
    ``fmt`` formats bytes."""
    if lo != lo:
        return "is not compared with the live saved bytes (no point was measured)"
    if lo > 0:
        return f"exceeds the live saved bytes by {_range(fmt(lo), fmt(hi))} at every {where}"
    if hi < 0:
        return f"stays below the live saved bytes, by {_range(fmt(-hi), fmt(-lo))}, at every {where}"
    return (f"differs from the live saved bytes by {fmt(lo)} to {fmt(hi)} (measured − closed form; its sign "
            f"changes across {where})")


def _range(lo: str, hi: str) -> str:
    return lo if lo == hi else f"{lo} to {hi}"


def time_flop_text(ratio: float) -> str:
    """Recomputation's step-time overhead per FLOP overhead (median over the segment sweep): "more", "less" or
    "as much" time than its FLOPs predict, with the ratio."""
    if ratio != ratio:
        return "The segment sweep was not timed, so its time overhead is not set against its FLOPs"
    verdict = "more" if ratio > 1.005 else "less" if ratio < 0.995 else "as much"
    return (f"Recomputation costs {verdict} time than its FLOPs predict: the median ratio of step-time overhead to "
            f"FLOP overhead is {ratio:.2f}")


def growth_text(first: float, last: float, fmt) -> str:
    """"grows from A … to B …" / "shrinks …" / "stays at …" between the first and last point of a sweep."""
    if last > first:
        return f"grows from {fmt(first)} to {fmt(last)}"
    if last < first:
        return f"shrinks from {fmt(first)} to {fmt(last)}"
    return f"stays at {fmt(first)}"


def overhead_text(mode: str, time_overhead: float, flop_overhead: float, time_per_flop: float,
                  flop_digits: int = 1) -> str:
    """One recompute mode's layer-time overhead against no recompute, beside its FLOP overhead: "selective
    recompute adds 22.1% to the layer's time for 2.56% more FLOPs (8.63× the FLOP prediction)"."""
    flops = f"{percent(flop_overhead, flop_digits)} more FLOPs"
    if time_overhead > 0:
        ratio = f" ({time_per_flop:.2f}× the FLOP prediction)" if time_per_flop == time_per_flop else ""
        return f"{mode} recompute adds {percent(time_overhead)} to the layer's time for {flops}{ratio}"
    if time_overhead < 0:
        return (f"{mode} recompute measured {percent(-time_overhead)} faster than none despite {flops} (timing "
                "noise: see the IQR)")
    return f"{mode} recompute took the same time as none despite {flops}"


def intercept_text(c0: float, exponent_none: float, fmt) -> str:
    """The depth fit's intercept c0 and what it does to the log–log slopes (they sit below their asymptote of 1
    while c0 > 0 and the no-recompute exponent is under 1)."""
    if c0 > 0 and exponent_none < 1:
        return (f"The intercept $c_0$ = {fmt(c0)} (head, loss, the backward working set) does not grow with $L$ "
                "and pulls the log–log slopes below their asymptotes at small $L$.")
    return f"The intercept is $c_0$ = {fmt(c0)} (head, loss, the backward working set)."


def gap_text(gap: pd.Series, extras: pd.Series, modes: pd.Series) -> str:
    """What the torch layer keeps beyond the paper's count, per point of the seq/hidden sweep (gap_bytes,
    extras_per_layer_bytes — LayerNorm mean and rstd —, mode): which modes keep more, and whether the
    difference is the LayerNorm statistics alone."""
    more = sorted(set(modes[gap > 0]), key=lambda m: ("none", "selective", "full").index(m)
                  if m in ("none", "selective", "full") else 9)
    if not more:
        return "The torch layer keeps exactly what the paper counts at every point."
    which = "every mode" if set(more) == set(modes) else " and ".join(more)
    if bool((gap == extras).all()):
        return (f"The torch layer keeps more than the paper counts under {which}; the difference is LayerNorm mean "
                "and rstd alone ($4sb$ elements per layer) at every point.")
    return (f"The torch layer keeps more than the paper counts under {which}; the difference is itemized by the "
            "accounting module in the table's gap_items column (LayerNorm statistics, element sizes).")


def within_band(frame: pd.DataFrame, band: float) -> tuple[int, int]:
    """Rows of a sweep-time-model table whose |predicted / measured − 1| (``error``) is at most ``band``:
    (rows within, rows)."""
    return int((frame["error"].abs() <= band).sum()), len(frame)


def selective_model_text(selective: list[tuple[int, float, float]]) -> str:
    """The time model's selective-recompute overhead against the measured one per size ((h, predicted,
    measured) as time_summary.validation_checks gives): whether it is under-predicted at every size. A clause
    (lower case, no full stop), as every case reads after "Here" or "On cuda,"."""
    if not selective:
        return "no selective overhead was measured"
    under = sum(m > p for _, p, m in selective)
    pairs = "; ".join(f"$h$ = {h}: predicted {percent(p)}, measured {percent(m)}" for h, p, m in selective)
    if under == len(selective):
        verdict = ("the measured selective overhead is larger than predicted at "
                   f"{'every size' if len(selective) > 1 else 'the one size'}")
    elif under == 0:
        verdict = (f"the measured selective overhead is at most the prediction at "
                   f"{'every size' if len(selective) > 1 else 'the one size'}")
    else:
        verdict = (f"the measured selective overhead is larger than predicted at "
                   f"{count_of(under, len(selective), 'size')}")
    return f"{verdict} ({pairs})"


def stand_in_text(device: str) -> str:
    """What a time measured on ``device`` stands for: a CPU's stands in for a GPU's, said wherever it is quoted."""
    return "a CPU stand-in, not a GPU measurement" if device == "cpu" else f"measured on {device}"


def band_text(band: float) -> str:
    """The time model's tolerance band as shown: 0.25 -> "±25%"."""
    return f"±{100 * band:g}%"


def _largest_error(x: float) -> str:
    return percent(x, 0)


def time_model_intro(frame: pd.DataFrame, checks: dict | None, band: float) -> str:
    """The time-model section's numbers on one device (``frame``: its rows of the sweep-time-model table;
    ``checks``: time_summary.validation_checks of them): the rates measured beside the layers, the largest
    error per phase, and how many rows fall within ``band``."""
    if checks is None or not len(frame):
        return "No `sweep-time-model` table yet."
    within, rows = within_band(frame, band)
    error = checks["max_error"]
    return (f"On {frame['device'].iloc[0]} the rates measured beside the layers (at $h$ = "
            f"{int(frame['hidden'].iloc[0])}, the first size) were {checks['flops_per_s'] / 1e9:.1f} GFLOP/s for "
            f"torch.mm, {checks['memory_bytes_per_s'] / 1e9:.1f} GB/s for a copy and "
            f"{1e6 * checks['op_overhead_s']:.1f} µs per op. The largest error is {_largest_error(error['forward'])} "
            f"in forward, {_largest_error(error['backward'])} in backward and {_largest_error(error['combined'])} "
            f"combined; {count_of(within, rows, 'row', verb=('is', 'are'))} within {band_text(band)}.")


def time_model_summary(frame: pd.DataFrame, checks: dict | None, band: float) -> str:
    """The summary bullet's sentence on the time model (as ``time_model_intro``, shorter; no full stop): in how
    many rows the roofline at the measured rates predicts the layer's time within ``band``."""
    if checks is None or not len(frame):
        return "The time model has no table yet"
    within, rows = within_band(frame, band)
    device = frame["device"].iloc[0]
    return (f"At the rates measured on {device} ({stand_in_text(device)}), the roofline predicts the layer's time "
            f"within {band_text(band)} in {count_of(within, rows, 'row')} (largest combined error "
            f"{_largest_error(checks['max_error']['combined'])})")


def selective_model_note(frame: pd.DataFrame, device: str, checks: dict | None) -> str:
    """The paragraph after the time model's numbers on ``device`` (``frame``: its time-model rows; ``checks``:
    time_summary.validation_checks of them, None without rows): the selective overhead predicted against
    measured (``selective_model_text``) and, on a CPU, why the roofline under-prices the elementwise ops
    selective recompute re-runs — said only where the measured overhead is larger than predicted."""
    selective = checks["selective"] if checks else []
    verdict = capitalized(selective_model_text(selective))
    if device != "cpu":
        return f"On {device}, {selective_model_text(selective)}."
    threads = (int(frame["threads"].dropna().iloc[0]) if len(frame) and "threads" in frame
               and frame["threads"].notna().any() else None)
    on = f"on {count(threads, 'thread')}" if threads else "on the CPU"
    ops = "the elementwise ops that selective recompute re-runs"
    why = (f"softmax, GeLU and the masked fill compute exponentials and comparisons element by element {on}, "
           "slower per element than the copy bandwidth allows")
    under = sum(m > p for _, p, m in selective)
    if not selective:
        text = f"{verdict}, so the roofline's price of {ops} is not checked on this CPU."
    elif under == len(selective):
        text = f"{verdict}. On a CPU the roofline's memory roof is optimistic for {ops}: {why}."
    elif under:
        text = (f"{verdict}. Where it is larger, the roofline's memory roof is optimistic for {ops}: {why}; at the "
                "other sizes the prediction covers the measured overhead.")
    else:
        text = f"{verdict}: {on} the roofline's memory roof is not optimistic for {ops}."
    dropout_off = bool(len(frame)) and "dropout" in frame and bool((frame["dropout"] == 0).all())
    if dropout_off:
        text += (" (Dropout is off in this sweep: on a CPU it is a random-number generator, `bernoulli_`, not a "
                 "bandwidth-bound kernel.)")
    return text + (" On a GPU these ops are bandwidth-bound, which is what the paper-scale predictions assume; run "
                   "the rule with `config/gpu.yaml` on a GPU node for the GPU's own check.")


def acceptance_text(acc: pd.DataFrame) -> str:
    """The acceptance callout's verdict: "all 7 checks are met", "2 of the 7 checks are NOT met (…)"."""
    if not len(acc):
        return "there are no checks yet (no sweep table)"
    missed = acc[acc["met"] != "yes"]
    total = len(acc)
    if not len(missed):
        return f"{count_of(total, total, 'check', verb=('is', 'are'))} met"
    names = "; ".join(f"{r.device}: {r.check}" for r in missed.itertuples())
    return f"{count_of(len(missed), total, 'check', verb=('is', 'are'))} NOT met ({names})"


# --- one sentence per device beside the primary one -----------------------------------------------------------------

def layer_overhead_text(frame: pd.DataFrame, device: str, mode: str, digits: int = 1) -> str:
    """``overhead_text`` for one recompute ``mode`` of a sweep-layer-timing table on ``device`` (``digits``:
    decimals of the FLOP overhead); says so when the mode or none was not measured there."""
    rows = ok(frame[frame["device"] == device]).set_index("mode") if len(frame) else pd.DataFrame()
    if mode not in rows.index or mode == "none" or "none" not in rows.index:
        return f"{mode} recompute was not measured against none"
    r = rows.loc[mode]
    return overhead_text(mode, r["time_overhead"], r["flop_overhead"], r["time_per_flop_overhead"], digits)


def segments_line(frame: pd.DataFrame, device: str) -> str:
    """One sentence on the segment sweep on ``device``: L, the points that ran, the measured optimum beside the
    closed form's and k*, and the saved bytes against the closed form."""
    summary = segments_summary(frame).set_index("device") if len(frame) else pd.DataFrame()
    if device not in summary.index or not summary.loc[device, "ok"]:
        return f"On {device} no segment point ran."
    r = summary.loc[device]
    return (f"On {device} ($L$ = {int(r['layers'])}; {not_run_text(not_run(frame, device), int(r['points']))}) the "
            f"measured optimum is $k$ = {int(r['k_opt_measured'])} (closed form {int(r['k_opt_formula'])}, $k^*$ = "
            f"{r['k_star']:.1f}) and {saved_text(r['max_saved_error'], int(r['ok']), int(r['points']))}.")


def depth_line(frame: pd.DataFrame, device: str) -> str:
    """One sentence on the depth sweep on ``device``: the fitted exponents without recompute, with √L segments
    and with full recompute, and the points that ran."""
    fits = depth_fits(frame) if len(frame) else pd.DataFrame()
    if not len(fits) or device not in set(fits["device"]):
        return f"On {device} no depth point ran."
    a = [f"{fit_value(fits, device, family):.3f}" for family in ("none", "sqrt", "full")]
    points = int((frame["device"] == device).sum())
    return (f"On {device}: $a$ = {join_words(a)} over the points that ran "
            f"({not_run_text(not_run(frame, device), points)}).")


def crossover_line(frame: pd.DataFrame, device: str) -> str:
    """One sentence on the sequence/hidden sweep on ``device``: where 5as²b overtakes 34sbh, measured and in
    closed form, along s and along h."""
    cross = crossover(frame).set_index("device") if len(frame) else pd.DataFrame()
    if device not in cross.index:
        return f"On {device} no sequence/hidden point ran."
    r = cross.loc[device]
    return (f"On {device} ($h$ = {int(r['h'])}, $a$ = {int(r['a'])}): $s^*$ = {r['s_star_measured']:.1f} measured, "
            f"{r['s_star_formula']:.1f} closed form; $h^*$ = {r['h_star_measured']:.1f} against "
            f"{r['h_star_formula']:.1f} at $s$ = {int(r['s_fixed'])}.")


def timing_line(frame: pd.DataFrame, device: str) -> str:
    """One sentence on the per-layer timing on ``device``: full and selective recompute's time overhead beside
    their FLOP overhead."""
    return (f"On {device}, {layer_overhead_text(frame, device, 'full')}; "
            f"{layer_overhead_text(frame, device, 'selective', 2)}.")


DEVICE_LINES = {"segments": segments_line, "depth": depth_line, "seq-hidden": crossover_line,
                "layer-timing": timing_line}
"""The sentence each sweep's section gives a device beside the primary one."""


def others_text(sweep: str, frame: pd.DataFrame, devices) -> str:
    """One sentence per device in ``devices`` (the devices beside the report's primary one) for ``sweep``
    (a key of DEVICE_LINES); "" when there is none (a cell prints it, not an inline value)."""
    return " ".join(DEVICE_LINES[sweep](frame, d) for d in devices)
