"""The offload report's findings (``findings(root)``) and display tables, from one device's offload tables.
Seconds unless a header says ms / µs; GB/s = 10^9 bytes/s, GiB = 2^30 bytes, MiB = 2^20 bytes. On a CPU the link
is a host memcpy: ``where`` then says "CPU (a stand-in; simulated: host memcpy)", never PCIe. No paper is replicated
here: a judged claim sets a measurement against the model that predicts it or an invariant (the ``paper`` fields).
"""

from __future__ import annotations

import math
import os
from typing import Mapping

import pandas as pd

from remat.analysis import catalog, gates
from remat.analysis.findings import (MEASURED, NOT_MEASURED, NOT_REPRODUCIBLE, Finding, holds, judge, marked,
                                    not_measured, within_range)
from remat.analysis.tolerances import OFFLOAD_FIT, OFFLOAD_MODEL
from remat.errors import UsageError
from remat.formulas.offload import SIMULATED
from remat.paper import PaperValue
from remat.units import MINUS, GiB, MiB, format_bytes, percent, signed_percent, span, span_text

VARIANTS = ["none", "selective", "full", "offload", "save_on_cpu"]
FIT_CHECK_BYTES = MiB    # the fits are judged on copies of at least this many bytes (smaller ones: t0 and noise)
EXAMPLE = (2048, 12288)  # the grid point quoted when the grid has it: GPT-3 175B's layer (a = 96, b = 1, t = 8)
NAN = math.nan
FIT = PaperValue(1.0, "model: the fit t = t0 + bytes/BW of the copy's group", "1× (predicted = measured)")
MODEL = PaperValue(1.0, "model: remat.formulas.offload and remat.timemodel at this run's rates", "1× (= model)")
FIT_RULE, MODEL_RULE = (within_range(1 - t.value, 1 + t.value, t.unit, t.why) for t in (OFFLOAD_FIT, OFFLOAD_MODEL))
CLAIM = {
    "bandwidth.h2d": "Fastest host-to-device copies alone: fitted GB/s", "bandwidth.d2h": "The same, device to host",
    "bandwidth.fit_alone": "t = t0 + bytes/BW predicts every copy ≥ 1 MiB made alone (worst predicted ÷ measured)",
    "bandwidth.fit_overlap": "t = t0 + bytes/BW predicts every copy ≥ 1 MiB made beside a matmul (the worst)",
    "bandwidth.overlap_ratio": "Fitted bandwidth beside a matmul ÷ alone, per direction and memory kind",
    "steps.runs": "The GPT layers the hooks ran on: (s, h); a, b, L (and CPU threads)",
    "steps.bitwise": "Every variant's loss and gradients are bitwise equal to none's, at every size",
    **{f"steps.{v}": f"Step time with {v} over none's, per size" for v in VARIANTS[1:]},
    "steps.held_share": "Device bytes held after forward with offload ÷ without, per size",
    "steps.pool": "The host pool reserves exactly one step's peak host bytes and holds none after a step",
    "steps.hidden": "Share of save_on_cpu's copy time the hooks hide under compute (measured)",
    "breakeven.point": "The grid point quoted (s, h, b, t; the first GPU preset)",
    "breakeven.link": "Host link one GPU gets at that point (per direction)",
    **{i.format(k): c.format(k) for k in ("selective", "full") for i, c in (
        ("breakeven.{}", "Break-even link bandwidth: offloading what {} recomputation frees vs recomputing it"),
        ("breakeven.cheaper_{}", "The cheaper at the quoted point, at the bytes {} recomputation frees"),
        ("breakeven.wins_{}", "Grid points where offload is cheaper than {} recomputation"),
        ("breakeven.model_{}", "The time model predicts the measured {} recomputation overhead (measured ÷ model)"))},
    "breakeven.model_offload": "The offload model that applies predicts the measured offload overhead",
    "breakeven.extra_per_copy": "Measured offload overhead − serial model, per copy (mean over the sizes)",
    "breakeven.model_hidden": "Share of the copy time the overlapped model hides at the measured sizes",
    "breakeven.below_full": "Sizes where the measured offload overhead is below full recompute's",
    "breakeven.bytes_per_flop": "Bytes per FLOP (link ÷ achieved compute) here ÷ the first GPU preset's"}
"""Every finding of the report, id -> claim; the id's first part names its table (offload.<part>)."""


def report_device(environ: Mapping[str, str] = os.environ) -> str:
    """Whose tables the report shows: ``$REMAT_OFFLOAD_DEVICE`` ("cpu" | "cuda"; the report rule sets it from
    config ``offload.report_device``), "cpu" when unset. UsageError(REMAT_OFFLOAD_DEVICE) for another value."""
    device = environ.get("REMAT_OFFLOAD_DEVICE", "cpu")
    if device not in catalog.DEVICES:
        raise UsageError("REMAT_OFFLOAD_DEVICE", f"must be cpu or cuda, got {device!r}")
    return device


def findings(root=".", device: str | None = None) -> list[Finding]:
    """Every finding of the offload report (CLAIM), from ``results/offload/<device>/`` under ``root`` (device
    None: ``report_device()``). A missing table makes its findings "not measured" (no exception)."""
    device = device or report_device()
    steps = catalog.read_if("offload.steps", device, root)
    parts = {"bandwidth": _bandwidth, "steps": _steps, "breakeven": lambda t: _breakeven(t, steps)}
    return [f for part, make in parts.items() for f in catalog.unless_missing(
        lambda: make(catalog.read(f"offload.{part}", device, root)),
        lambda missing: [not_measured(i, c, missing, link=_link(i)) for i, c in CLAIM.items() if i.startswith(part)])]


def _link(id: str) -> str:
    section = "memory" if id in ("steps.held_share", "steps.pool") else id.split(".")[0]
    return "#sec-" + section.replace("steps", "hooks")


def _m(id: str, value: float, text: str, where: str, **kw) -> Finding:
    return judge(id, CLAIM[id], value, where=where, text=text, link=_link(id), **kw)


def _where(t: pd.DataFrame) -> str:
    link = str(t["link"].iloc[0])
    return f"CPU (a stand-in; {link})" if link == SIMULATED else f"GPU ({t['device_name'].iloc[0]}; {link})"


def _range(values, fmt=lambda x: percent(x, 0)) -> str:
    return span(fmt(min(values)), fmt(max(values))) if len(values) else "—"


def _fits(bw: pd.DataFrame) -> pd.DataFrame:
    # per (direction, memory, overlap): t0_us, bw_gb_s, bw_gib_s, points, abs_err (the worst ≥ FIT_CHECK_BYTES)
    group = ["direction", "memory", "overlap"]
    fits = bw.groupby(group).agg(t0_us=("fit_t0_s", "first"), bw_gb_s=("fit_bw_gb_s", "first"),
                                 bw_gib_s=("fit_bw_gib_s", "first"), points=("bytes", "size"))
    err = bw[bw["bytes"] >= FIT_CHECK_BYTES].assign(e=lambda d: d["rel_error"].abs()).groupby(group)["e"].max()
    return fits.assign(t0_us=fits["t0_us"] * 1e6, abs_err=err).reset_index()


def _fit(id: str, bw: pd.DataFrame, overlap: bool, where: str) -> Finding:
    big = bw[(bw["bytes"] >= FIT_CHECK_BYTES) & (bw["overlap"].astype(bool) == overlap)]
    if not len(big):
        return marked(_m(id, NAN, "—", where), NOT_MEASURED, "no copy of 1 MiB or more was measured")
    r = big.loc[big["rel_error"].abs().idxmax()]
    worst, at = 1 + float(r["rel_error"]), f"at the {format_bytes(int(r['bytes']))} {r['direction']} copy"
    return _m(id, worst, f"{worst:.2f}× ({signed_percent(worst - 1)})", where, paper=FIT, rule=FIT_RULE,
              reason=f"{at}, outside {FIT_RULE.text[7:]}")


def _bandwidth(bw: pd.DataFrame) -> list[Finding]:
    where, fits = _where(bw), _fits(bw)
    alone, over = (fits[fits["overlap"].astype(bool) == o].set_index(["direction", "memory"]) for o in (False, True))
    fast = [(d, alone.loc[d].sort_values("bw_gb_s").iloc[-1]) for d in ("h2d", "d2h")]
    ratio = (over["bw_gb_s"] / alone["bw_gb_s"]).dropna()
    return [*[_m(f"bandwidth.{d}", r["bw_gb_s"], f"{r['bw_gb_s']:.2f} GB/s ({r.name})", where) for d, r in fast],
            _fit("bandwidth.fit_alone", bw, False, where), _fit("bandwidth.fit_overlap", bw, True, where),
            _m("bandwidth.overlap_ratio", ratio.min(), _range(ratio, "{:.2f}×".format), where) if len(ratio) else
            marked(_m("bandwidth.overlap_ratio", NAN, "—", where), NOT_MEASURED, "no copy was timed beside a matmul")]


def _step_gates(steps: pd.DataFrame | None, variant: str) -> list[str]:
    # not timed on a busy machine; per size: neither timing noisy; the overhead not below zero beyond their IQRs
    # (every variant only adds work)
    if steps is None:
        return []
    t = steps.pivot_table(index=["s", "h"], columns="variant", values=["step_time_s", "step_time_iqr_s"])
    med, iqr = t["step_time_s"], t["step_time_iqr_s"]
    over, noise = med[variant] / med["none"] - 1, (iqr[variant] + iqr["none"]) / med["none"]
    return [gates.conditions(steps[steps["variant"].isin(["none", variant])])] + [
        gates.noisy(med.loc[i, v], iqr.loc[i, v], f"{v}'s step time at (s, h) = {i}") for i in t.index
            for v in ("none", variant)] + [gates.negative_overhead(over[i], noise[i], variant) for i in t.index]


def _steps(steps: pd.DataFrame) -> list[Finding]:
    where, first, n = _where(steps), steps.iloc[0], steps["threads"].iloc[0] if "threads" in steps else NAN
    ran = [v for v in VARIANTS[1:] if v in set(steps["variant"])]
    unequal = [v for v in ran if not steps.loc[steps["variant"] == v, "grads_bitwise_equal"].astype(bool).all()]
    time, held = (steps.pivot_table(index=["s", "h"], columns="variant", values=c)
                  for c in ("step_time_s", "device_held_after_forward_bytes"))
    host, cpu = steps[steps["variant"] == "offload"], where.startswith("CPU")
    live, pinned = int(host["host_live_after_step_bytes"].max()), host["host_pinned"].fillna(False).astype(bool).all()
    pool = (f"{format_bytes(int(host['host_reserved_bytes'].max()))} reserved "
            f"({'pinned' if pinned else 'pageable'}), {format_bytes(live)} live after a step")
    runs = (f"(s, h) = {', '.join(f'({s}, {h})' for s, h in time.index)}; a = {first['a']}, b = {first['b']}, "
            f"L = {first['L']}" + ("" if pd.isna(n) else f", {int(n)} CPU thread{'s' * (int(n) != 1)}"))
    hidden, held = host["copy_hidden_share"].dropna().iloc[:0 if cpu else None], held["offload"] / held["none"]
    return [_m("steps.runs", NAN, runs, where),
            _m("steps.bitwise", float(not unequal), ", ".join(ran), where, rule=holds("bitwise equal to none's"),
               paper=PaperValue(1.0, "invariant: recomputing or moving a tensor changes no arithmetic", "equal"),
               reason=f"not bitwise equal: {', '.join(unequal)}"),
            *[gates.gated(_m(f"steps.{v}", (time[v] / time["none"] - 1).max(), _range(time[v] / time["none"] - 1,
                                                                                   lambda x: signed_percent(x, 0)),
                             where), _step_gates(steps, v)) for v in ran],
            _m("steps.held_share", held.max(), _range(held, percent), where),
            _m("steps.pool", float(live == 0 and (host["host_reserved_bytes"] == host["host_peak_bytes"]).all()),
               pool, where, rule=holds("reserved = one step's peak host bytes, 0 B live after a step"),
               paper=PaperValue(1.0, "invariant: a buffer returns to the pool once its copy is back", "no growth"),
               reason=f"{format_bytes(live)} live after a step, or reserved ≠ one step's peak"),
            marked(_m("steps.hidden", hidden.min() if len(hidden) else NAN, _range(hidden), where),
                   *((NOT_REPRODUCIBLE, "a CPU has no copy engine and no streams: nothing overlaps") if cpu else
                     (MEASURED, "")))]


def _at_point(be: pd.DataFrame) -> pd.DataFrame:
    # the grid rows (one per GPU preset) at EXAMPLE when the grid has it, else at its largest s and h
    grid = be[be["kind"] == "grid"]
    s, h = EXAMPLE if ((grid["s"] == EXAMPLE[0]) & (grid["h"] == EXAMPLE[1])).any() else grid[["s", "h"]].max()
    return grid[(grid["s"] == s) & (grid["h"] == h)].reset_index(drop=True)


def _model(id: str, measured: pd.Series, model: pd.Series, label: str, where: str, reasons: list[str]) -> Finding:
    ratio = (measured / model.where(model > 0)).fillna(math.inf).reset_index(drop=True)
    text, worst = span_text(ratio, 2, "×") + label, float(ratio[(ratio - 1).abs().idxmax()])
    out = int((~ratio.between(1 - OFFLOAD_MODEL.value, 1 + OFFLOAD_MODEL.value)).sum())
    return gates.gated(_m(id, worst, text, where, paper=MODEL, rule=MODEL_RULE,
                          reason=f"{out} of the {len(ratio)} sizes outside {MODEL_RULE.text[7:]}"), reasons)


def _breakeven(be: pd.DataFrame, steps: pd.DataFrame | None) -> list[Finding]:
    grid, m, r = be[be["kind"] == "grid"], be[be["kind"] == "measured"], _at_point(be).iloc[0]
    gpu, here = f"predicted (the {r['gpu_name']}, by remat.timemodel's per-op roofline; not measured)", _where(m)
    link, serial_applies = r["link_per_gpu_gb_s"], here.startswith("CPU")
    presets = f"predicted (the presets {', '.join(dict.fromkeys(grid['gpu']))})"
    point = f"s = {r['s']}, h = {r['h']}, b = {r['b']}, t = {r['t']:g} on the {r['gpu_name']}"
    out = [_m("breakeven.point", NAN, point, gpu), _m("breakeven.link", link, f"{link:.1f} GB/s", gpu)]
    for k in ("selective", "full"):
        gb_s, wins, cheap = r[f"breakeven_{k}_gb_s"], int((grid[f"cheaper_{k}"] == "offload").sum()), r[f"cheaper_{k}"]
        out += [_m(f"breakeven.{k}", gb_s, f"{gb_s:.1f} GB/s ({gb_s / link:.1f}× that link)", gpu),
                _m(f"breakeven.cheaper_{k}", cheap == "offload", cheap.replace(k, f"{k} recomputation"), gpu),
                _m(f"breakeven.wins_{k}", wins, f"{wins} of {len(grid)}", presets)]
    model = f"predicted (the model at this run's rates) beside {here}"
    serial, overlap = m["predicted_offload_serial_s"], m["predicted_offload_overlap_s"]
    extra = float(((m["measured_offload_s"] - serial) / (m["L"] * 2 * m["tensors"])).mean()) * 1e6
    below, hidden = int((m["measured_offload_s"] < m["measured_full_s"]).sum()), (1 - overlap / serial)[serial > 0]
    bpf = m["bw_gb_s"].iloc[0] / m["flops_per_s"].mean() / (link / r["flops_per_s"])
    return out + [
        _model("breakeven.model_offload", m["measured_offload_s"], serial if serial_applies else overlap,
               f" ({'serial' if serial_applies else 'overlapped'} model)", model, _step_gates(steps, "offload")),
        *[_model(f"breakeven.model_{v}", m[f"measured_{v}_s"], m[f"predicted_{v}_s"], "", model, _step_gates(steps, v))
          for v in ("full", "selective")],
        _m("breakeven.extra_per_copy", extra, f"{extra:+.1f} µs".replace("-", MINUS), model),
        _m("breakeven.model_hidden", hidden.min() if len(hidden) else NAN, _range(hidden), model),
        _m("breakeven.below_full", below, f"{below} of {len(m)}", here),
        _m("breakeven.bytes_per_flop", bpf, f"{bpf:,.0f}×" if bpf >= 10 else f"{bpf:.2g}×", here)]


# --- display tables: headers with units; seconds and bytes scaled to the header's unit ---------------------------

SCALE = {"(ms)": 1e3, "(µs)": 1e6, "(MiB)": 1 / MiB, "(GiB)": 1 / GiB}


def _show(t: pd.DataFrame, columns: dict) -> pd.DataFrame:
    out = t[list(columns)].rename(columns=columns).reset_index(drop=True)
    return out.apply(lambda c: c * next(f for u, f in SCALE.items() if c.name.endswith(u))
                     if c.name.endswith(tuple(SCALE)) else c)


def fit_display_table(bw: pd.DataFrame) -> pd.DataFrame:
    """The fits per direction, memory kind and overlap (yes / no): t0 (µs), GB/s, GiB/s, sizes measured, the
    largest error |predicted/measured − 1| over copies ≥ 1 MiB (%)."""
    t = _fits(bw).replace({"direction": {"h2d": "host → device", "d2h": "device → host"}}).astype({"overlap": bool})
    return t.assign(overlap=t["overlap"].map({True: "yes", False: "no"}), abs_err=100 * t["abs_err"]).set_axis(
        ["Direction", "Host memory", "With a matmul", "t0 (µs)", "BW (GB/s)", "BW (GiB/s)", "Sizes measured",
         "Largest error ≥ 1 MiB (%)"], axis=1)


def step_time_display_table(steps: pd.DataFrame) -> pd.DataFrame:
    """Median step time (ms) per (s, h) and variant; every variant's but none's with its overhead: "14.65 (+46%)"."""
    t = steps.pivot_table(index=["s", "h"], columns="variant", values="step_time_s")[VARIANTS] * 1e3
    return t.apply(lambda c: [f"{x:.2f}" + ("" if c.name == "none" else f" ({signed_percent(x / n - 1, 0)})")
                              for x, n in zip(c, t["none"])]).rename(columns=lambda v: f"{v} (ms)").reset_index()


def memory_display_table(steps: pd.DataFrame) -> pd.DataFrame:
    """Per (s, h): device MiB held after forward per variant, offload ÷ none (%), host MiB the hooks and
    save_on_cpu copy per step."""
    held, copied = (steps.pivot_table(index=["s", "h"], columns="variant", values=c) / MiB
                    for c in ("device_held_after_forward_bytes", "offloaded_bytes"))
    return held[VARIANTS[:4]].rename(columns=lambda v: f"held: {v} (MiB)").assign(**{
        "offload ÷ none (%)": (100 * held["offload"] / held["none"]).map("{:.1f}".format),
        "copied: hooks (MiB)": copied["offload"], "copied: save_on_cpu (MiB)": copied["save_on_cpu"]}).reset_index()


def link_table(be: pd.DataFrame) -> pd.DataFrame:
    """Per GPU preset: host link, GPUs sharing it, t0, host memory, full-sized offloads it holds, their sources."""
    return _show(_at_point(be), {"gpu": "GPU", "link_gb_s": "host link (GB/s)", "gpus_per_host_link": "GPUs per link",
                 "t0_s": "t0 (µs)", "host_memory_bytes": "host per GPU (GiB)", "host_layers_full": "layers in host",
                 "host_source": "source"})


def grid_table(be: pd.DataFrame) -> pd.DataFrame:
    """Per GPU preset at the quoted point and selective / full: MiB freed, ms, break-even beside link, cheaper."""
    t = pd.concat([_at_point(be).rename(columns=lambda c: c.replace(k, "X")).assign(vs=k) for k in VARIANTS[1:3]])
    return _show(t.sort_index(kind="stable"), {
        "gpu": "GPU", "vs": "against", "freed_X_bytes": "freed (MiB)", "X_recompute_s": "recompute (ms)",
        "offload_X_exposed_s": "offload exposed (ms)", "breakeven_X_gb_s": "break-even (GB/s)",
        "link_per_gpu_gb_s": "link per GPU (GB/s)", "cheaper_X": "cheaper"})


def measured_table(be: pd.DataFrame) -> pd.DataFrame:
    """Measured sizes per variant: MiB freed, model and measured ms over none, measured ÷ model (offload: its own)."""
    m = be[be["kind"] == "measured"].astype({"s": int, "h": int})
    model = "serial" if _where(m).startswith("CPU") else "overlap"
    t = pd.concat([m.rename(columns=lambda c: c.replace(f"_{v}_", "_X_")).assign(variant=v) for v in VARIANTS[1:4]])
    t = t.assign(variant=t["variant"].replace("offload", f"offload ({model} model)"),
                 predicted_X_s=t["predicted_X_s"].fillna(t[f"predicted_X_{model}_s"])).sort_index(kind="stable")
    ratio = t["measured_X_s"] / t["predicted_X_s"].where(t["predicted_X_s"] > 0)
    return _show(t.assign(r=ratio.map("{:.2f}×".format)), {
        "s": "s", "h": "h", "variant": "variant", "freed_X_bytes": "freed (MiB)", "predicted_X_s": "model (ms)",
        "measured_X_s": "measured (ms)", "r": "measured ÷ model"})


def markdown_table(t: pd.DataFrame, floatfmt: str = ".3f") -> str:
    """A display table as a Markdown pipe table: text kept as it is, floats with ``floatfmt`` ("–" for NaN);
    columns whose every cell starts with a number right-aligned, the others left-aligned."""
    shown = t.map(lambda v: ("–" if v != v else format(v, floatfmt)) if isinstance(v, float) else str(v))
    align = ["right" if len(t) and shown[c].str.match(rf"[+\-{MINUS}]?\d|–$").all() else "left" for c in t]
    return shown.to_markdown(index=False, disable_numparse=True, colalign=align)
