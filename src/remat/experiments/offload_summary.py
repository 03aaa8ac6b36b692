"""The numbers the offload report shows, computed from the offload tables (nothing is re-measured): the
copy fits per group, the facts its prose quotes, and the step-time, memory and break-even tables.

    device = report_device()                          # config offload.report_device, passed by the report rule
    bw = pd.read_csv(f"results/offload/{device}/bandwidth.csv")
    fits = fit_table(bw); facts = link_facts(bw, fits)

Times in the tables are seconds unless a column says ms / µs; bandwidths GB/s (10^9 bytes/s) and GiB/s
(2^30 bytes/s); bytes are ints, MiB = 2^20 bytes. Needs no torch (the reports environment has none).
"""

from __future__ import annotations

import os
from typing import Mapping

import pandas as pd

from remat.errors import UsageError
from remat.units import MiB, format_bytes

REPORT_DEVICE_VARIABLE = "REMAT_OFFLOAD_DEVICE"
GROUP = ["direction", "memory", "overlap"]
VARIANT_ORDER = ["none", "selective", "full", "offload", "save_on_cpu"]
NOISE_THRESHOLD = 0.10  # a fit "predicts" a group when every copy ≥ 1 MiB is within 10 %


def report_device(environ: Mapping[str, str] = os.environ) -> str:
    """Whose offload tables the report shows: ``$REMAT_OFFLOAD_DEVICE`` ("cpu" | "cuda"), which the report
    rule sets from config ``offload.report_device``; "cpu" when unset (e.g. ``remat report offload`` by
    hand). Raises UsageError(REMAT_OFFLOAD_DEVICE) for another value."""
    device = environ.get(REPORT_DEVICE_VARIABLE, "cpu")
    if device not in ("cpu", "cuda"):
        raise UsageError(REPORT_DEVICE_VARIABLE, f"must be cpu or cuda, got {device!r}")
    return device


# --- bandwidth ---------------------------------------------------------------------------------------------------

def fit_table(bw: pd.DataFrame) -> pd.DataFrame:
    """One row per (direction, memory, overlap) of an offload-bandwidth table, sorted: t0_us (µs), bw_gb_s,
    bw_gib_s (the group's fit), points (sizes measured) and abs_err = max |predicted/measured − 1| over the
    sizes ≥ 1 MiB (NaN when the group has none)."""
    fits = (bw.groupby(GROUP, sort=True)
              .agg(t0_us=("fit_t0_s", "first"), bw_gb_s=("fit_bw_gb_s", "first"),
                   bw_gib_s=("fit_bw_gib_s", "first"), points=("bytes", "size"))
              .reset_index())
    fits["t0_us"] = fits["t0_us"] * 1e6
    big = bw[bw["bytes"] >= MiB].assign(abs_err=lambda d: d["rel_error"].abs())
    worst = big.groupby(GROUP, sort=True)["abs_err"].max().reset_index()
    return fits.merge(worst, on=GROUP, how="left")


def link_facts(bw: pd.DataFrame, fits: pd.DataFrame) -> dict:
    """What the bandwidth section quotes: simulated (bool), device, link, kinds (memory kinds), smallest and
    largest copy (formatted), alone_ok / alone_groups (groups copied alone whose fit is within 10 % at
    every size ≥ 1 MiB), the fastest host-to-device group alone (h2d_gb_s, h2d_gib_s, h2d_t0_us),
    overlap_ratio_min / _max (fitted BW with a matmul ÷ alone, per direction and memory; None without
    overlapped runs) and overlap_noisiest (the largest error is an overlapped group's; None without)."""
    alone = fits[~fits["overlap"].astype(bool)]
    over = fits[fits["overlap"].astype(bool)]
    h2d = alone[alone["direction"] == "h2d"].sort_values("bw_gb_s").iloc[-1]
    facts = {"simulated": bool(bw["simulated"].all()), "device": str(bw["device"].iloc[0]),
             "link": str(bw["link"].iloc[0]), "kinds": ", ".join(sorted(bw["memory"].unique())),
             "smallest": format_bytes(int(bw["bytes"].min())), "largest": format_bytes(int(bw["bytes"].max())),
             "alone_ok": int((alone["abs_err"] < NOISE_THRESHOLD).sum()), "alone_groups": len(alone),
             "h2d_gb_s": float(h2d["bw_gb_s"]), "h2d_gib_s": float(h2d["bw_gib_s"]),
             "h2d_t0_us": float(h2d["t0_us"]),
             "overlap_ratio_min": None, "overlap_ratio_max": None, "overlap_noisiest": None}
    if len(over):
        ratio = (over.set_index(["direction", "memory"])["bw_gb_s"]
                 / alone.set_index(["direction", "memory"])["bw_gb_s"]).dropna()
        facts.update(overlap_ratio_min=float(ratio.min()), overlap_ratio_max=float(ratio.max()),
                     overlap_noisiest=bool(over["abs_err"].max() > alone["abs_err"].max()))
    return facts


def overlap_sentence(facts: dict) -> str:
    """The bandwidth section's sentence on the overlapped copies, from ``link_facts``: plain text, never
    empty (the report follows it with a pointer to the fit table's error column)."""
    if facts["overlap_ratio_min"] is None:
        return "The copies were measured alone only (overlap off)"
    text = (f"With the matmul running, the fitted bandwidth is {facts['overlap_ratio_min']:.2f}–"
            f"{facts['overlap_ratio_max']:.2f} of the copy alone; ")
    if facts["overlap_noisiest"]:
        where = "on a shared CPU " if facts["simulated"] else ""
        return text + f"{where}the overlapped copies are the noisiest points"
    return text + "the overlapped copies are not the noisiest points"


# --- steps -------------------------------------------------------------------------------------------------------

def held_ratio(steps: pd.DataFrame) -> pd.Series:
    """Per (s, h): device bytes held after forward with offload ÷ with none."""
    held = steps.pivot_table(index=["s", "h"], columns="variant", values="device_held_after_forward_bytes")
    return held["offload"] / held["none"]


def steps_facts(steps: pd.DataFrame) -> dict:
    """What the hooks and memory sections quote from an offload-steps table: sizes ("(s, h) = (64, 64), …"),
    a, b, L of the first size, all_equal (every variant's gradients bitwise equal to none), threads (CPU
    intra-op threads; None on a GPU), held_ratio_min / _max (``held_ratio``), host_live_after_step (max
    bytes live in the offload pool after a step), host_reserved (max bytes the pool holds) and
    reserved_is_peak (the pool holds exactly a step's peak host bytes, at every size)."""
    sizes = steps[["s", "h", "a", "b", "L"]].drop_duplicates()
    first = sizes.iloc[0]
    ratio = held_ratio(steps)
    host = steps[steps["variant"] == "offload"]
    threads = steps["threads"].iloc[0] if "threads" in steps else None
    return {"sizes": ", ".join(f"(s, h) = ({r.s}, {r.h})" for r in sizes.itertuples()),
            "a": int(first["a"]), "b": int(first["b"]), "L": int(first["L"]),
            "all_equal": bool(steps["grads_bitwise_equal"].all()),
            "threads": None if threads is None or pd.isna(threads) else int(threads),
            "held_ratio_min": float(ratio.min()), "held_ratio_max": float(ratio.max()),
            "host_live_after_step": int(host["host_live_after_step_bytes"].max()),
            "host_reserved": int(host["host_reserved_bytes"].max()),
            "reserved_is_peak": bool((host["host_reserved_bytes"] == host["host_peak_bytes"]).all())}


def step_time_table(steps: pd.DataFrame) -> pd.DataFrame:
    """Median step time per (s, h) and variant, in ms (columns "<variant> (ms)", VARIANT_ORDER)."""
    t = steps.pivot_table(index=["s", "h"], columns="variant", values="step_time_s")
    cols = [c for c in VARIANT_ORDER if c in t.columns]
    return (t[cols] * 1e3).rename(columns=lambda c: f"{c} (ms)").reset_index()


def memory_table(steps: pd.DataFrame) -> pd.DataFrame:
    """Per (s, h), in MiB: device bytes held after forward per variant ("held: <variant>"), offload ÷ none,
    and host bytes copied per step by the hooks and by save_on_cpu."""
    held = steps.pivot_table(index=["s", "h"], columns="variant", values="device_held_after_forward_bytes")
    copied = steps.pivot_table(index=["s", "h"], columns="variant", values="offloaded_bytes")
    m = (held[["none", "selective", "full", "offload"]] / MiB).rename(columns=lambda c: f"held: {c}")
    m["offload / none"] = held["offload"] / held["none"]
    m["copied: hooks"] = copied["offload"] / MiB
    m["copied: save_on_cpu"] = copied["save_on_cpu"] / MiB
    m.columns.name = None
    return m.reset_index()


# --- break-even --------------------------------------------------------------------------------------------------

def grid_example(breakeven: pd.DataFrame) -> dict:
    """The grid point the text quotes: s = 2048 (Korthikanti's) when in the grid, else the middle s; the
    largest h; the middle achieved rate. Returns s, h, tflops (TFLOP/s, rounded), full_gb_s and
    selective_gb_s (break-even bandwidths, GB/s, one decimal), and the grid's b, tensors, t0_us."""
    grid = breakeven[breakeven["kind"] == "grid"]
    seqs, rates = sorted(grid["s"].unique()), sorted(grid["flops_per_s"].unique())
    s = 2048 if 2048 in seqs else int(seqs[len(seqs) // 2])
    ex = grid[(grid["s"] == s) & (grid["h"] == grid["h"].max()) & (grid["flops_per_s"] == rates[len(rates) // 2])]
    return {"s": s, "h": int(ex["h"].iloc[0]), "tflops": round(float(ex["flops_per_s"].iloc[0]) / 1e12),
            "full_gb_s": round(float(ex["breakeven_full_gb_s"].iloc[0]), 1),
            "selective_gb_s": round(float(ex["breakeven_selective_gb_s"].iloc[0]), 1),
            "b": int(grid["b"].iloc[0]), "tensors": int(grid["tensors"].iloc[0]),
            "t0_us": round(float(grid["t0_s"].iloc[0]) * 1e6, 2)}


def measured_facts(breakeven: pd.DataFrame) -> dict:
    """What the text says of the measured sizes: gflops_min / _max (achieved GFLOP/s of none), link_gb_s
    (the measured link, GB/s), hidden (sizes where the overlapped model hides every copy), sizes,
    extra_per_copy_us (mean of (measured offload overhead − serial model) / (L · 2 · copies per layer), µs)
    and offload_best (sizes where offload was the cheapest measured choice)."""
    m = breakeven[breakeven["kind"] == "measured"]
    extra = (m["measured_offload_s"] - m["predicted_offload_serial_s"]) / (m["L"] * 2 * m["tensors"])
    return {"gflops_min": float(m["flops_per_s"].min()) / 1e9, "gflops_max": float(m["flops_per_s"].max()) / 1e9,
            "link_gb_s": float(m["bw_gb_s"].iloc[0]), "hidden": int((m["predicted_offload_overlap_s"] == 0).sum()),
            "sizes": len(m), "extra_per_copy_us": float(extra.mean()) * 1e6,
            "offload_best": int((m["best_measured"] == "offload").sum())}


def overlap_model_sentence(facts: dict, simulated: bool) -> str:
    """Which offload model applies (``measured_facts``; ``simulated``: the CPU run) — never empty."""
    if simulated:
        return ("Without a copy engine the CPU copies in line with the compute, so the serial model is the one "
                f"that applies here; the overlapped model, which hides every copy at {facts['hidden']} of "
                f"{facts['sizes']} sizes, describes a GPU.")
    return "The copies run on a side stream: the overlapped model applies."


def extra_sentence(facts: dict) -> str:
    """How the measured offload overhead compares with the serial model, per copy (``measured_facts``)."""
    us = facts["extra_per_copy_us"]
    if us > 0:
        return (f"The measured offload overhead exceeds the serial model by {us:.1f} µs per copy on average: the "
                "hooks' own bookkeeping (Python code per saved tensor), which a fitted memcpy t0 does not "
                "contain.")
    return f"The measured offload overhead is {-us:.1f} µs per copy below the serial model on average."


MEASURED_COLUMNS = {
    "s": "s", "h": "h", "layer_bytes": "MiB/layer", "tensors": "copies/layer",
    "predicted_offload_serial_s": "offload, serial (model)", "predicted_offload_overlap_s": "offload, overlapped (model)",
    "measured_offload_s": "offload (measured)", "predicted_full_s": "full (model)", "measured_full_s": "full (measured)",
    "predicted_selective_s": "selective (model)", "measured_selective_s": "selective (measured)",
    "best_measured": "cheapest measured", "breakeven_full_gb_s": "break-even vs full (GB/s)"}


def measured_table(breakeven: pd.DataFrame) -> pd.DataFrame:
    """The measured rows of an offload-breakeven table for display: the model's and the measured seconds
    per step -> ms, layer bytes -> MiB, break-even bandwidth kept in GB/s, columns renamed (MEASURED_COLUMNS)."""
    t = breakeven.loc[breakeven["kind"] == "measured", list(MEASURED_COLUMNS)].copy()
    seconds = [c for c in MEASURED_COLUMNS if c.startswith(("predicted_", "measured_"))]
    t[seconds] = t[seconds] * 1e3
    t["layer_bytes"] = t["layer_bytes"] / MiB
    return t.rename(columns=MEASURED_COLUMNS).reset_index(drop=True)
