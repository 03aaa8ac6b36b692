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
from remat.units import GiB, MiB, format_bytes

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

EXAMPLE = (2048, 12288)
"""The (s, h) the text quotes when the grid has it: GPT-3 175B's layer (Korthikanti Table 3: a = 96 = h/128,
b = 1, t = 8)."""
GRID_COLUMNS = {
    "gpu": "GPU", "link_gb_s": "link (GB/s)", "gpus_per_host_link": "GPUs/link", "link_per_gpu_gb_s": "per GPU (GB/s)",
    "host_gib": "host/GPU (GiB)",
    "freed_selective_mib": "sel.: freed (MiB)", "selective_recompute_ms": "sel.: recompute (ms)",
    "offload_selective_exposed_ms": "sel.: offload (ms)", "breakeven_selective_gb_s": "sel.: break-even (GB/s)",
    "cheaper_selective": "sel.: cheaper",
    "freed_full_mib": "full: freed (MiB)", "full_recompute_ms": "full: recompute (ms)",
    "offload_full_exposed_ms": "full: offload (ms)", "breakeven_full_gb_s": "full: break-even (GB/s)",
    "cheaper_full": "full: cheaper", "host_layers_full": "full: layers in host"}


def grid_point(breakeven: pd.DataFrame) -> tuple[int, int]:
    """The grid's (s, h) the text quotes: EXAMPLE when in the grid, else s = 2048 if present (else the middle
    s) with the largest h."""
    grid = breakeven[breakeven["kind"] == "grid"]
    seqs, hiddens = sorted(grid["s"].unique()), sorted(grid["h"].unique())
    if EXAMPLE[0] in seqs and EXAMPLE[1] in hiddens:
        return EXAMPLE
    return (2048 if 2048 in seqs else int(seqs[len(seqs) // 2])), int(hiddens[-1])


def _at_point(breakeven: pd.DataFrame) -> pd.DataFrame:
    s, h = grid_point(breakeven)
    grid = breakeven[breakeven["kind"] == "grid"]
    return grid[(grid["s"] == s) & (grid["h"] == h)].reset_index(drop=True)


def grid_table(breakeven: pd.DataFrame) -> pd.DataFrame:
    """One row per GPU preset at ``grid_point``, for display (GRID_COLUMNS): the link (its own GB/s, the GPUs
    sharing it, the GB/s one GPU gets), host memory per GPU (GiB = 2^30 bytes), and per comparison — offload
    what selective frees vs selective's recompute ("sel."), offload what full frees vs full's ("full") —
    the freed MiB (2^20 bytes), recompute and exposed offload ms per layer and micro-batch, the break-even
    GB/s (10^9 bytes/s per direction) and the cheaper one; "layers in host": layer-micro-batches of
    whole-layer offload the host memory holds."""
    t = _at_point(breakeven).copy()
    t["host_gib"] = t["host_memory_bytes"] / GiB
    for k in ("selective", "full"):
        t[f"freed_{k}_mib"] = t[f"freed_{k}_bytes"] / MiB
        t[f"{k}_recompute_ms"] = t[f"{k}_recompute_s"] * 1e3
        t[f"offload_{k}_exposed_ms"] = t[f"offload_{k}_exposed_s"] * 1e3
    return t[list(GRID_COLUMNS)].rename(columns=GRID_COLUMNS)


def host_assumptions(breakeven: pd.DataFrame) -> str:
    """The host-side assumptions of the grid as a Markdown bullet list, one line per GPU preset: its link's
    own GB/s per direction, the GPUs sharing it, the GB/s one GPU gets, t0 (µs), the host memory per GPU
    (GiB = 2^30 bytes) and the source or assumption (the table's host_source)."""
    grid = breakeven[breakeven["kind"] == "grid"].drop_duplicates("gpu")
    return "\n".join(
        f"- {r.gpu_name} (`{r.gpu}`): host link {r.link_gb_s:.1f} GB/s per direction shared by "
        f"{int(r.gpus_per_host_link)} GPU{'s' if r.gpus_per_host_link > 1 else ''} → {r.link_per_gpu_gb_s:.1f} GB/s "
        f"per GPU, $t_0$ = {r.t0_s * 1e6:g} µs; host memory {r.host_memory_bytes / GiB:g} GiB per GPU. "
        f"Source: {r.host_source}." for r in grid.itertuples())


def grid_example(breakeven: pd.DataFrame) -> dict:
    """What the text says of the grid: at ``grid_point`` on the first GPU preset — s, h, a, b, t, gpu,
    gpu_name, link_gb_s, gpus_per_host_link, link_per_gpu_gb_s, host_gib, host_source, t0_us, and per
    k in (selective, full): freed_k_mib, copies_k, k_recompute_ms, offload_k_exposed_ms, breakeven_k_gb_s,
    cheaper_k, over_link_k (break-even ÷ the per-GPU link); over the whole grid: points (rows) and
    offload_wins_k (rows where offload is the cheaper)."""
    grid = breakeven[breakeven["kind"] == "grid"]
    r = _at_point(breakeven).iloc[0]
    out = {"s": int(r["s"]), "h": int(r["h"]), "a": int(r["a"]), "b": int(r["b"]), "t": int(r["t"]),
           "gpu": str(r["gpu"]), "gpu_name": str(r["gpu_name"]), "link_gb_s": float(r["link_gb_s"]),
           "gpus_per_host_link": int(r["gpus_per_host_link"]), "link_per_gpu_gb_s": float(r["link_per_gpu_gb_s"]),
           "host_gib": float(r["host_memory_bytes"]) / GiB, "host_source": str(r["host_source"]),
           "t0_us": float(r["t0_s"]) * 1e6, "flops_per_s": float(r["flops_per_s"]), "points": len(grid),
           "gpus": ", ".join(dict.fromkeys(grid["gpu"]))}
    for k in ("selective", "full"):
        out.update({f"freed_{k}_mib": float(r[f"freed_{k}_bytes"]) / MiB,
                    f"{k}_recompute_ms": float(r[f"{k}_recompute_s"]) * 1e3,
                    f"offload_{k}_exposed_ms": float(r[f"offload_{k}_exposed_s"]) * 1e3,
                    f"breakeven_{k}_gb_s": float(r[f"breakeven_{k}_gb_s"]), f"cheaper_{k}": str(r[f"cheaper_{k}"]),
                    f"copies_{k}": int(r[f"copies_{k}"]),
                    f"over_link_{k}": float(r[f"breakeven_{k}_gb_s"]) / float(r["link_per_gpu_gb_s"]),
                    f"offload_wins_{k}": int((grid[f"cheaper_{k}"] == "offload").sum())})
    return out


def grid_sentences(ex: dict) -> str:
    """The break-even section's sentences on the grid from ``grid_example``: Markdown with TeX math (wrap in
    IPython.display.Markdown inline), never empty."""
    paper = ", the layer of GPT-3 175B" if (ex["s"], ex["h"], ex["b"], ex["t"]) == (2048, 12288, 1, 8) else ""
    return (f"At $s$ = {ex['s']}, $h$ = {ex['h']} ($a$ = {ex['a']}, $b$ = {ex['b']}, $t$ = {ex['t']}{paper}) on the "
            f"{ex['gpu_name']}, selective recomputation frees {ex['freed_selective_mib']:.0f} MiB per layer for "
            f"{ex['selective_recompute_ms']:.2f} ms of recompute. Offloading the same bytes over the "
            f"{ex['link_per_gpu_gb_s']:.1f} GB/s one GPU gets exposes {ex['offload_selective_exposed_ms']:.1f} ms; "
            f"it breaks even at {ex['breakeven_selective_gb_s']:.1f} GB/s, {ex['over_link_selective']:.1f}× that "
            f"link. Full recomputation frees {ex['freed_full_mib']:.0f} MiB for {ex['full_recompute_ms']:.2f} ms; "
            f"offloading those bytes exposes {ex['offload_full_exposed_ms']:.1f} ms and breaks even at "
            f"{ex['breakeven_full_gb_s']:.1f} GB/s ({ex['over_link_full']:.1f}× the link). Over the whole grid "
            f"({ex['points']} points on {ex['gpus']}), offload is the cheaper at equal bytes at "
            f"{ex['offload_wins_selective']} points against selective and {ex['offload_wins_full']} against full "
            "recomputation.")


def measured_facts(breakeven: pd.DataFrame) -> dict:
    """What the text says of the measured sizes: gflops_min / _max (achieved GFLOP/s of none), link_gb_s
    (the measured link, GB/s), hidden (sizes where the overlapped model hides every copy), sizes,
    extra_per_copy_us (mean of (measured offload overhead − serial model) / (L · 2 · copies per layer), µs),
    offload_below_full (sizes where the measured offload overhead was below full recompute's),
    freed_ratio_min / _max (bytes offload freed ÷ bytes full freed, per size) and bytes_per_flop (the
    measured link's bytes/s ÷ the mean achieved FLOP/s)."""
    m = breakeven[breakeven["kind"] == "measured"]
    extra = (m["measured_offload_s"] - m["predicted_offload_serial_s"]) / (m["L"] * 2 * m["tensors"])
    ratio = m["freed_offload_bytes"] / m["freed_full_bytes"]
    link = float(m["bw_gb_s"].iloc[0])
    return {"gflops_min": float(m["flops_per_s"].min()) / 1e9, "gflops_max": float(m["flops_per_s"].max()) / 1e9,
            "link_gb_s": link, "hidden": int((m["predicted_offload_overlap_s"] == 0).sum()),
            "sizes": len(m), "extra_per_copy_us": float(extra.mean()) * 1e6,
            "offload_below_full": int((m["measured_offload_s"] < m["measured_full_s"]).sum()),
            "freed_ratio_min": float(ratio.min()), "freed_ratio_max": float(ratio.max()),
            "bytes_per_flop": link * 1e9 / float(m["flops_per_s"].mean())}


def measured_comparison_sentence(facts: dict, simulated: bool, example: dict) -> str:
    """The measured offload against full recompute (``measured_facts``), qualified: on a CPU run the link is
    a host memcpy, so the sentence says so and sets its bytes per FLOP beside the GPU preset's of
    ``grid_example`` (its per-GPU link ÷ its achievable FLOP/s). Never empty."""
    lo, hi = f"{facts['freed_ratio_min']:.2f}", f"{facts['freed_ratio_max']:.2f}"
    ratio = f"{lo}×" if lo == hi else f"{lo}–{hi}×"
    below = (f"the measured offload overhead was below full recomputation's at {facts['offload_below_full']} of "
             f"{facts['sizes']} sizes, offload freeing {ratio} the bytes full recompute freed (it also moves the "
             "layer input, which full recompute keeps)")
    if not simulated:
        return (f"Over the measured host link (one GPU copying alone), {below}; where GPUs share an uplink each "
                "gets its share of it, as in the break-even above.")
    gpu_bpf = example["link_per_gpu_gb_s"] * 1e9 / example["flops_per_s"]
    return (f"On this simulated link {below}. That is a host memcpy between two buffers of the same DRAM (no "
            "PCIe, no copy engine, no other GPU on the link) timed against CPU matmuls: it moves "
            f"{facts['bytes_per_flop']:.2g} bytes per FLOP of achieved compute, where the {example['gpu_name']}'s "
            f"per-GPU link moves {gpu_bpf:.2g} ({facts['bytes_per_flop'] / gpu_bpf:,.0f}× fewer). It says nothing "
            "about which choice wins on a GPU; the equal-bytes break-even above does.")


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
    "freed_offload_bytes": "freed: offload (MiB)", "freed_full_bytes": "freed: full (MiB)",
    "freed_selective_bytes": "freed: selective (MiB)",
    "predicted_offload_serial_s": "offload, serial (model)",
    "predicted_offload_overlap_s": "offload, overlapped (model)", "measured_offload_s": "offload (measured)",
    "predicted_full_s": "full (model)", "measured_full_s": "full (measured)",
    "predicted_selective_s": "selective (model)", "measured_selective_s": "selective (measured)",
    "predicted_offload_selective_bytes_serial_s": "offload sel. bytes, serial (model)",
    "breakeven_full_gb_s": "break-even vs full (GB/s)", "breakeven_selective_gb_s": "break-even vs sel. (GB/s)"}


def measured_table(breakeven: pd.DataFrame) -> pd.DataFrame:
    """The measured rows of an offload-breakeven table for display: the model's and the measured seconds
    per step -> ms, bytes -> MiB (layer bytes per layer, freed bytes per step), break-even bandwidths kept
    in GB/s (equal freed bytes), s, h and copies as text (a float format leaves them alone), columns
    renamed (MEASURED_COLUMNS)."""
    t = breakeven.loc[breakeven["kind"] == "measured", list(MEASURED_COLUMNS)].copy()
    seconds = [c for c in MEASURED_COLUMNS if c.startswith(("predicted_", "measured_"))]
    t[seconds] = t[seconds] * 1e3
    mib = ["layer_bytes", "freed_offload_bytes", "freed_full_bytes", "freed_selective_bytes"]
    t[mib] = t[mib] / MiB
    t[["s", "h", "tensors"]] = t[["s", "h", "tensors"]].astype(int).astype(str)  # counts: no float format
    return t.rename(columns=MEASURED_COLUMNS).reset_index(drop=True)
