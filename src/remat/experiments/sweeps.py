"""Memory and time sweeps on the torch GPT model (``remat.models``), every point beside its closed form.

    sweep-segments      Chen: L layers, segments k = 1..L (remat.formulas.chen.segment_sizes): saved bytes, peak
                        bytes, recompute FLOPs, step time; the measured optimum k against √L
    sweep-depth         peak bytes against depth L for none, √L segments (k = ⌈√L⌉) and per-layer full
    sweep-seq-hidden    per-layer saved bytes against s and against h for none | selective | full, around the
                        crossover s* = 34h/(5a) where the 5as/h term overtakes 34 (Korthikanti Eq. 1)
    sweep-layer-timing  Korthikanti Table 4: forward, backward and combined time per layer, overhead % beside
                        the FLOP-predicted overhead, for none | selective | full

Closed forms: ``remat.formulas.torch_gpt`` (saved bytes, live peak, units, FLOPs) on top of
``remat.formulas.korthikanti`` (§4.1 terms, Appendix A FLOPs). Each function takes the rule's parameters (a
dict) and returns a tidy DataFrame, one row per point, with provenance columns; ``status`` is "ok", "oom"
(torch.OutOfMemoryError caught: the sweep goes on) or "skipped_too_large" (predicted peak > ``max_bytes``:
not run). One line per point goes to stderr (the rule's log).

Parameters (unknown keys are UsageErrors naming "sweep-<name>.<key>"). Shared:
    device    "cpu" | "cuda" (default "cpu")
    model     a preset or config.json path of a GPT model (default: "gpt-tiny" at h = 128, v = 64, bfloat16,
              the CPU size; s = 32, b = 2, a = 4, dropout 0.1); hidden, heads, seq, micro_batch, vocab,
              dtype, dropout, attention override the model's (hidden also sets the MLP width to 4·hidden);
              the run is serial on one device (t = p = 1)
    seed 0 · threads 1 (CPU only: torch.set_num_threads during the run) · warmup 1 · repeats 5 (≥ 5)
    max_bytes predicted-peak limit, e.g. "4GiB" (default "4GiB" on cpu; none on cuda, where OOM is caught)
Per sweep (CPU defaults):
    sweep-segments      layers 16, ks [1..layers], timing true, repeats 10
    sweep-depth         depths [2, 4, 8, 16, 32, 64], policies ["none", "sqrt", "full"], timing false
    sweep-seq-hidden    layers 2, seqs [64, 128, 192, 256, 384, 512] (h = the model's),
                        hiddens [32, 64, 128, 256] (at s = hiddens_seq, default 128),
                        modes ["none", "selective", "full"], timing false
    sweep-layer-timing  layers 1 (times per layer = totals / L), modes ["none", "selective", "full"],
                        rounds 3, warmup 2, repeats 10; CPU model h = 512, a = 8, s = 256

Protocol of one measured point (the report's timing protocol): the model is built (seeded) under the plan;
one untimed step allocates the parameter gradients, which are then zeroed in place and kept (so a peak is
activations above a fixed model state); one instrumented step records saved bytes
(``remat.measure.saved.SavedTensorLog``), peak bytes (``remat.measure.peak.PeakMemory``: CUDA allocator
statistics on a GPU, torch's MemTracker on the CPU) and FLOPs (``remat.measure.flops.StepFlopCounter``:
FlopCounterMode, recompute counted inside each recompute); then, if timed, ``warmup`` untimed and
``repeats`` timed steps (``remat.measure.timing.time_step``: median and IQR; CUDA events on a GPU,
time.perf_counter with the thread count fixed on the CPU). Time overheads are ratios to the sweep's own
reference point (k = 1 or none) timed in the same run.
"""

from __future__ import annotations

import dataclasses
import gc
import math
import sys
import time
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from remat.errors import UsageError
from remat.experiments.params import check_known, get_int, get_int_list
from remat.formulas import chen as chen_formulas
from remat.formulas import korthikanti as K
from remat.formulas import torch_gpt as G
from remat.measure.flops import StepFlopCounter, StepFlops
from remat.measure.peak import PeakMemory
from remat.measure.provenance import provenance
from remat.measure.saved import SavedTensorLog
from remat.measure.timing import MIN_REPEATS, intra_op_threads, time_step
from remat.models.presets import ModelConfig, from_name, validate
from remat.models.transformer import build_model, lm_loss, random_tokens
from remat.policies import LayerPolicies, apply_plan, parse_plan
from remat.units import parse_bytes

DEVICES = ("cpu", "cuda")
MODEL_FIELDS = ("hidden", "heads", "seq", "micro_batch", "vocab", "dtype", "dropout", "attention")
# The CPU sizes, used when params name no model: gpt-tiny (s = 32, b = 2, a = 4, dropout 0.1) at h = 128 and
# v = 64, so that the terms outside the layers (∝ sbv) are small next to one layer (∝ 39·sbh), as in a deep
# model; the timing sweep uses a layer large enough for its matmuls to dominate.
CPU_MODEL = {"model": "gpt-tiny", "hidden": 128, "vocab": 64, "dtype": "bfloat16"}
CPU_TIMING_MODEL = {**CPU_MODEL, "hidden": 512, "heads": 8, "seq": 256}
SHARED = {"device", "model", *MODEL_FIELDS, "seed", "threads", "warmup", "repeats", "max_bytes"}
CPU_MAX_BYTES = "4GiB"
DEFAULT_DEPTHS = [2, 4, 8, 16, 32, 64]
DEFAULT_SEQS = [64, 128, 192, 256, 384, 512]
DEFAULT_HIDDENS = [32, 64, 128, 256]
DEPTH_FAMILIES = ("none", "sqrt", "full", "selective")
FLOPS_NOTE = "torch.utils.flop_counter.FlopCounterMode (matmuls); recompute counted inside each recompute"


# --- parameters ------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Setup:
    """The shared, validated parameters of one sweep run."""

    sweep: str
    device: str
    cfg: ModelConfig
    seed: int
    threads: int
    warmup: int
    repeats: int
    max_bytes: int | None


def _bool(params: dict, key: str, default: bool) -> bool:
    value = params.get(key, default)
    if not isinstance(value, bool):
        raise UsageError(key, f"must be true or false, got {value!r}")
    return value


def _names(params: dict, key: str, default: list[str], allowed: tuple[str, ...]) -> list[str]:
    values = params.get(key, default)
    if not isinstance(values, list) or not values:
        raise UsageError(key, f"must be a non-empty list of {', '.join(allowed)}, got {values!r}")
    for v in values:
        if v not in allowed:
            raise UsageError(key, f"unknown value {v!r} (use {', '.join(allowed)})")
    return list(values)


def with_sizes(cfg: ModelConfig, **changes) -> ModelConfig:
    """``cfg`` with field changes (None ignored), validated: a new hidden size also sets the MLP width to
    4·hidden (the GPT layer, Korthikanti §4.1), new heads the KV heads, a longer sequence the position table.
    Raises UsageError naming the field (e.g. "heads" if a does not divide h)."""
    changes = {k: v for k, v in changes.items() if v is not None}
    if "hidden" in changes and isinstance(changes["hidden"], int):
        changes.setdefault("ffn_hidden", 4 * changes["hidden"])
    if "heads" in changes:
        changes.setdefault("kv_heads", changes["heads"])  # the GPT layer: one KV head per head
    if "seq" in changes and isinstance(changes["seq"], int):
        changes.setdefault("max_positions", max(cfg.max_positions, changes["seq"]))
    return validate(dataclasses.replace(cfg, **changes))


def _setup(params: dict, sweep: str, keys: set[str], cpu_model: dict = CPU_MODEL, **defaults) -> Setup:
    """Validate the shared keys of ``params`` (and that every key is known); return the Setup. The model is
    ``cpu_model`` unless params name one; it runs serially on one device (t = p = 1)."""
    check_known(params, SHARED | keys, sweep)
    device = params.get("device", "cpu")
    if device not in DEVICES:
        raise UsageError("device", f"must be one of {', '.join(DEVICES)}, got {device!r}")
    if device == "cuda" and not torch.cuda.is_available():
        raise UsageError("device", "CUDA is not available on this machine")
    model = {**(cpu_model if "model" not in params else {}),
             **{k: params[k] for k in MODEL_FIELDS + ("model",) if k in params}}
    base = from_name(model.pop("model"))
    if base.arch != "gpt":
        raise UsageError("model", f"the sweeps measure the GPT layer; {base.name} is {base.arch}")
    cfg = with_sizes(base, tp=1, pp=1, interleave=1, **model)
    repeats = get_int(params, "repeats", defaults.get("repeats", MIN_REPEATS), minimum=MIN_REPEATS)
    limit = params.get("max_bytes", CPU_MAX_BYTES if device == "cpu" else None)
    return Setup(sweep=sweep, device=device, cfg=cfg, seed=get_int(params, "seed", 0, minimum=0),
                 threads=get_int(params, "threads", 1), warmup=get_int(params, "warmup", defaults.get("warmup", 1),
                                                                      minimum=0),
                 repeats=repeats, max_bytes=None if limit is None else parse_bytes(limit, "max_bytes"))


def _threads(setup: Setup):
    """Fix torch's intra-op thread count on the CPU for the run (restored afterwards)."""
    return intra_op_threads(setup.threads if setup.device == "cpu" else None)


# --- closed forms for one point ---------------------------------------------------------------------------------

def layernorm_stats_itemsize(dtype: str, device: str) -> int:
    """Bytes per element of LayerNorm's saved mean/rstd for ``dtype`` inputs on ``device``, asked of torch
    (torch.native_layer_norm on a 1-element tensor): fp32 for 16-bit inputs on CUDA, the input dtype on CPU."""
    x = torch.zeros(1, 1, dtype=getattr(torch, dtype), device=device)
    return torch.native_layer_norm(x, (1,), None, None, 1e-5)[2].element_size()


def sizes(cfg: ModelConfig, device: str) -> G.GPTSizes:
    """The closed forms' GPTSizes of ``cfg`` run on ``device``."""
    return G.GPTSizes(s=cfg.seq, b=cfg.micro_batch, h=cfg.hidden, a=cfg.heads, v=cfg.vocab,
                      itemsize=G.itemsize(cfg.dtype), stats_itemsize=layernorm_stats_itemsize(cfg.dtype, device),
                      dropout=cfg.dropout > 0)


def plan_units(plan: LayerPolicies) -> tuple[list[G.Unit], str]:
    """(units, mode of the kept layers) of a remat.policies LayerPolicies: a multi-layer group or a "full" layer is a
    checkpointed unit, any other layer a kept one ("selective" if any layer is selective, else "none")."""
    starts = dict(plan.groups)
    units, i = [], 0
    while i < len(plan):
        stop = starts.get(i, i + 1)
        units.append((stop - i, i in starts or plan[i] == "full"))
        i = stop
    return units, "selective" if "selective" in plan.policies else "none"


def model_state_bytes(cfg: ModelConfig) -> int:
    """Bytes alive before a step: parameters and their gradients (2·P·e), the causal-mask buffers
    (L·max_positions², bool) and the step's int64 tokens and targets (16sb)."""
    params = G.param_count(cfg.hidden, cfg.layers, cfg.vocab, cfg.max_positions, cfg.ffn_hidden, cfg.bias)
    return (2 * params * G.itemsize(cfg.dtype) + cfg.layers * cfg.max_positions ** 2
            + 2 * G.INDEX_BYTES * cfg.seq * cfg.micro_batch)


def predicted(cfg: ModelConfig, plan: LayerPolicies, sz: G.GPTSizes) -> dict:
    """Closed-form columns of one point (bytes, FLOPs): saved_bytes_formula, peak_activation_bytes_formula,
    model_state_bytes_formula, peak_bytes_formula, flops_recompute_formula, flops_step_formula (forward +
    backward), flop_overhead_formula."""
    units, mode = plan_units(plan)
    live, state = G.live_peak_bytes(sz, units, mode), model_state_bytes(cfg)
    recompute, step = G.recompute_flops(sz, units, mode), G.step_flops(sz, cfg.layers)
    return {"saved_bytes_formula": G.saved_bytes(sz, units, mode), "peak_activation_bytes_formula": live,
            "model_state_bytes_formula": state, "peak_bytes_formula": state + live,
            "flops_recompute_formula": recompute, "flops_step_formula": step,
            "flop_overhead_formula": recompute / step}


# --- measuring one point ----------------------------------------------------------------------------------------

def _is_oom(exc: BaseException) -> bool:
    return isinstance(exc, torch.OutOfMemoryError) or (
        isinstance(exc, RuntimeError) and "can't allocate memory" in str(exc))


def _release(device: str) -> None:
    gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()


def guarded(setup: Setup, predicted_peak: int | None, measure) -> dict:
    """Run ``measure()`` (-> dict) unless ``predicted_peak`` exceeds setup.max_bytes; returns its dict with
    ``status`` "ok", or {"status": "skipped_too_large"} / {"status": "oom", "error": ...} (out of memory
    caught, memory released: the sweep goes on)."""
    if setup.max_bytes is not None and predicted_peak is not None and predicted_peak > setup.max_bytes:
        return {"status": "skipped_too_large",
                "error": f"predicted peak {predicted_peak} B > max_bytes {setup.max_bytes} B"}
    try:
        out = {**measure(), "status": "ok", "error": None}
    except (torch.OutOfMemoryError, RuntimeError) as exc:
        if not _is_oom(exc):
            raise
        out = {"status": "oom", "error": str(exc).splitlines()[0][:200]}
    _release(setup.device)
    return out


def _count_flops(forward) -> StepFlops:
    """FLOPs of forward() (a scalar loss) and its backward (remat.measure.flops.StepFlopCounter)."""
    counter = StepFlopCounter()
    with counter.forward():
        loss = forward()
    counter.backward(loss)
    return counter.result()


def measure_step(cfg: ModelConfig, plan: LayerPolicies, setup: Setup, timing: bool) -> dict:
    """Measure one training step of ``cfg`` under ``plan`` (protocol in the module docstring).

    Returns int bytes / FLOPs and seconds: saved_bytes (whole model), saved_layer_bytes (per layer, list),
    base_bytes (alive before the step: model state + inputs), peak_bytes, peak_activation_bytes
    (= peak − base), flops_forward / flops_backward / flops_recompute, and, if ``timing``, step_time_s,
    step_time_iqr_s, timing_method. Unlike remat.measure.step.measure, the gradients exist before the
    measured step, so peak − base is what the step adds to a fixed model state. Raises
    torch.OutOfMemoryError when it does not fit.
    """
    device = setup.device
    torch.manual_seed(setup.seed)
    model = build_model(cfg, device)
    apply_plan(model, plan)
    tokens, targets = random_tokens(cfg, device), random_tokens(cfg, device)

    def step():
        lm_loss(model(tokens), targets).backward()

    step()  # allocates every .grad; later steps accumulate into them in place
    model.zero_grad(set_to_none=False)
    counter = StepFlopCounter()
    with PeakMemory(device, model, tokens, targets) as memory:
        base = memory.current_bytes()
        with SavedTensorLog(model) as log, counter.forward():
            loss = lm_loss(model(tokens), targets)
        counter.backward(loss)
        del loss
    flops = counter.result()
    out = {"saved_bytes": log.total_bytes(), "saved_layer_bytes": log.bytes_per_layer(cfg.layers),
           "base_bytes": base, "peak_bytes": memory.peak_bytes, "peak_activation_bytes": memory.peak_bytes - base,
           "peak_method": memory.method, "flops_forward": flops.forward, "flops_backward": flops.backward,
           "flops_recompute": flops.recompute}
    if timing:
        t = time_step(step, device, warmup=setup.warmup, repeats=setup.repeats)
        out.update(step_time_s=t.median_s, step_time_iqr_s=t.iqr_s, timing_method=t.method)
    return out


def point(setup: Setup, cfg: ModelConfig, policy: str, timing: bool) -> dict:
    """One row: the point's sizes, closed forms, measurement (or status) and the measured/closed-form ratios."""
    plan = parse_plan(policy, cfg.layers)
    sz = sizes(cfg, setup.device)
    pred = predicted(cfg, plan, sz)
    row = {"policy": plan.spec, "layers": cfg.layers, "seq": cfg.seq, "micro_batch": cfg.micro_batch,
           "hidden": cfg.hidden, "heads": cfg.heads, "vocab": cfg.vocab, "dropout": cfg.dropout,
           "model": cfg.name, **pred}
    measured = guarded(setup, pred["peak_bytes_formula"], lambda: measure_step(cfg, plan, setup, timing))
    row.update(measured)
    if measured["status"] == "ok":
        layers = row.pop("saved_layer_bytes")
        row["saved_per_layer_bytes"] = sum(layers) / len(layers)
        row["saved_ratio"] = row["saved_bytes"] / row["saved_bytes_formula"]
        row["peak_residual_bytes"] = row["peak_activation_bytes"] - row["peak_activation_bytes_formula"]
        done = row["flops_forward"] + row["flops_backward"]
        row["flop_overhead"] = row["flops_recompute"] / done
    return row


def _log(setup: Setup, i: int, n: int, label: str, row: dict, seconds: float) -> None:
    """One progress line per point on stderr (the rule's log)."""
    parts = [f"[{setup.sweep}] {i}/{n} {label} status={row['status']}"]
    for key in ("saved_bytes", "peak_activation_bytes", "flops_recompute"):
        if row.get(key) is not None and not (isinstance(row[key], float) and math.isnan(row[key])):
            parts.append(f"{key}={int(row[key])}")
    for key in ("step_time_s", "combined_s"):
        if row.get(key) is not None:
            parts.append(f"{key}={row[key]:.4g}")
    parts.append(f"({seconds:.1f} s)")
    print(" ".join(parts), file=sys.stderr, flush=True)


def run_points(setup: Setup, points: list[tuple[str, dict, ModelConfig, str]], timing: bool) -> list[dict]:
    """Measure each (label, extra columns, cfg, policy) in order, logging one line per point."""
    rows = []
    for i, (label, extra, cfg, policy) in enumerate(points, 1):
        start = time.perf_counter()
        row = {**extra, **point(setup, cfg, policy, timing)}
        _log(setup, i, len(points), label, row, time.perf_counter() - start)
        rows.append(row)
    return rows


def frame(setup: Setup, rows: list[dict], **extra) -> pd.DataFrame:
    """The tidy table: rows + sweep, protocol and provenance columns."""
    prov = provenance(device=setup.device, dtype=setup.cfg.dtype, seed=setup.seed)
    protocol = {"sweep": setup.sweep, "threads": setup.threads if setup.device == "cpu" else None,
                "warmup": setup.warmup, "repeats": setup.repeats, "flops_method": FLOPS_NOTE,
                "max_bytes": setup.max_bytes, **extra}
    return pd.DataFrame([{**row, **protocol, **prov} for row in rows])


def _overheads(rows: list[dict], reference: dict | None) -> None:
    """time_overhead (step time / the reference's − 1) and time_per_flop_overhead, in place."""
    ref = reference.get("step_time_s") if reference and reference.get("status") == "ok" else None
    for row in rows:
        t = row.get("step_time_s")
        row["time_overhead"] = t / ref - 1 if (t is not None and ref) else math.nan
        flop = row.get("flop_overhead")
        row["time_per_flop_overhead"] = (row["time_overhead"] / flop if flop and not math.isnan(row["time_overhead"])
                                         else math.nan)


# --- the four sweeps ------------------------------------------------------------------------------------------------

def segment_sweep(params: dict) -> pd.DataFrame:
    """Registry entry ``sweep-segments``: Chen's segments(k) for k in ``ks`` on an L-layer model.

    Row per k: policy "segments:k", saved / peak / recompute FLOPs / step time measured and in closed form,
    k_sqrt (⌈√L⌉), k_opt_formula (integer arg-min of the closed-form live peak), k_star (√(L·y/x)),
    time_overhead vs k = 1 and time_per_flop_overhead. Keys: layers (16), ks ([1..layers]), timing (true),
    and the shared keys. Raises UsageError("ks") for an empty list or some k > layers (before any work).
    """
    setup = _setup(params, "sweep-segments", {"layers", "ks", "timing"}, repeats=10)
    layers = get_int(params, "layers", 16)
    ks = get_int_list(params, "ks", list(range(1, layers + 1)))
    for k in ks:
        if k > layers:
            raise UsageError("ks", f"k = {k} segments > layers = {layers}")
    timing = _bool(params, "timing", True)
    cfg = with_sizes(setup.cfg, layers=layers)
    sz = sizes(cfg, setup.device)
    extra = {"k_sqrt": chen_formulas.sqrt_segments(layers), "k_opt_formula": G.optimal_segments(sz, layers),
             "k_star": G.optimal_segments_approx(sz, layers)}
    with _threads(setup):
        rows = run_points(setup, [(f"k={k}", {"k": k}, cfg, f"segments:{k}") for k in ks], timing)
    _overheads(rows, next((r for r in rows if r["k"] == 1), None))
    return frame(setup, rows, **extra)


def depth_policy(family: str, layers: int) -> tuple[str, int | None]:
    """(policy spec, k) of a depth-sweep family at depth L: none, sqrt (segments:⌈√L⌉), full, selective."""
    if family == "sqrt":
        k = chen_formulas.sqrt_segments(layers)
        return f"segments:{k}", k
    return family, None


def depth_sweep(params: dict) -> pd.DataFrame:
    """Registry entry ``sweep-depth``: peak and saved bytes against depth L for each family in ``policies``
    (none, sqrt = Chen's √L segments, full = per-layer full recompute, selective).

    Row per (L, family): measured and closed-form saved bytes, peak (activation) bytes, recompute FLOPs.
    Keys: depths ([2, 4, 8, 16, 32, 64]), policies (["none", "sqrt", "full"]), timing (false), shared keys.
    Fitted exponents: remat.experiments.sweeps_summary.depth_fits.
    """
    setup = _setup(params, "sweep-depth", {"depths", "policies", "timing"})
    depths = get_int_list(params, "depths", DEFAULT_DEPTHS)
    families = _names(params, "policies", ["none", "sqrt", "full"], DEPTH_FAMILIES)
    timing = _bool(params, "timing", False)
    points = []
    for layers in depths:
        cfg = with_sizes(setup.cfg, layers=layers)
        for family in families:
            spec, k = depth_policy(family, layers)
            points.append((f"L={layers} {family}", {"family": family, "k": k}, cfg, spec))
    with _threads(setup):
        rows = run_points(setup, points, timing)
    return frame(setup, rows)


def layer_columns(cfg: ModelConfig, sz: G.GPTSizes, mode: str) -> dict:
    """Closed forms per layer of a seq/hidden point (bytes): the torch layer (``saved_per_layer_formula`` = the
    §4.1 terms at the run's element size + ``extras_per_layer_bytes``, the LayerNorm statistics); Korthikanti
    Table 2 at the paper's sizes (``table2_per_layer``: 2 B, 1-byte masks) split into its as²b part
    (``as2b_term_formula``, 5as²b for none) and sbh part (``sbh_term_formula``); s* = 34h/(5a)."""
    paper = G.paper_layer_terms(dataclasses.replace(sz, itemsize=K.ACT_BYTES), mode)
    as2b = sum(v for name, v in paper.items() if K.TERM_BY_NAME.get(name) and K.TERM_BY_NAME[name].core_attn)
    extras = sum(G.layer_extra_terms(sz, mode).values())
    return {"mode": mode, "saved_per_layer_formula": sum(G.paper_layer_terms(sz, mode).values()) + extras,
            "extras_per_layer_bytes": extras, "table2_per_layer": sum(paper.values()), "as2b_term_formula": as2b,
            "sbh_term_formula": sum(paper.values()) - as2b,
            "crossover_seq_formula": float(G.crossover_seq(cfg.hidden, cfg.heads, K.ACT_BYTES, sz.dropout))}


def account_columns(cfg: ModelConfig, mode: str, setup: Setup) -> dict:
    """One layer measured by remat.accounting.account_layer (its saved tensors labelled with §4.1 terms):
    ``paper_measured_per_layer`` (counted tensors at the paper's element sizes), its as²b part (the core
    attention terms) and sbh part, ``actual_per_layer`` (every storage kept), and the gap actual − paper,
    itemized (``gap_items``: "item: bytes; ...")."""
    from remat.accounting import account_layer
    acc = account_layer(cfg, mode, tp=1, device=setup.device)
    core = sum(v for name, v in acc.terms().items() if K.TERM_BY_NAME.get(name) and K.TERM_BY_NAME[name].core_attn)
    gap = acc.gap()
    return {"paper_measured_per_layer": acc.bytes_per_layer_measured, "as2b_term_measured": core,
            "sbh_term_measured": acc.bytes_per_layer_measured - core, "actual_per_layer": acc.bytes_per_layer_actual,
            "gap_bytes": sum(gap.values()), "gap_items": "; ".join(f"{k}: {v}" for k, v in gap.items())}


def seq_hidden_sweep(params: dict) -> pd.DataFrame:
    """Registry entry ``sweep-seq-hidden``: none | selective | full per layer, against s (h fixed: the
    model's) and against h (s fixed: ``hiddens_seq``), on a ``layers``-layer model.

    Row per (axis, value, mode): the whole-model columns of every sweep; per-layer saved bytes measured in the
    step (SavedTensorLog, by layer) against the torch layer's closed form (``layer_columns``); and one layer
    through remat.accounting (``account_columns``): the paper-faithful bytes, their as²b and sbh parts and
    the itemized gap, against Table 2 and s* = 34h/(5a). Keys: layers (2), seqs, hiddens, hiddens_seq (128), modes, timing
    (false), shared keys. Raises UsageError naming the key for an empty list or a size the model rejects
    (e.g. "heads" when a does not divide h).
    """
    setup = _setup(params, "sweep-seq-hidden", {"layers", "seqs", "hiddens", "hiddens_seq", "modes", "timing"})
    layers = get_int(params, "layers", 2)
    seqs = get_int_list(params, "seqs", DEFAULT_SEQS)
    hiddens = get_int_list(params, "hiddens", DEFAULT_HIDDENS)
    at_seq = get_int(params, "hiddens_seq", 128)
    modes = _names(params, "modes", ["none", "selective", "full"], G.MODES)
    timing = _bool(params, "timing", False)
    base = with_sizes(setup.cfg, layers=layers)
    configs = [("seq", with_sizes(base, seq=s)) for s in seqs]
    configs += [("hidden", with_sizes(base, seq=at_seq, hidden=h)) for h in hiddens]
    points = [(f"{axis} s={cfg.seq} h={cfg.hidden} {mode}", {"axis": axis}, cfg, mode)
              for axis, cfg in configs for mode in modes]
    with _threads(setup):
        rows = run_points(setup, points, timing)
        for row, (_, _, cfg, mode) in zip(rows, points):
            row.update(layer_columns(cfg, sizes(cfg, setup.device), mode))
            if row["status"] == "ok":
                row["saved_per_layer_ratio"] = row["saved_per_layer_bytes"] / row["saved_per_layer_formula"]
                row.update(guarded(setup, None, lambda: account_columns(cfg, mode, setup)))
    return frame(setup, rows)


@dataclass
class LayerRunner:
    """The layers of one model under one mode, ready to time: ``forward()`` runs them on x [s, b, h] (x
    requires grad, so activations are saved as in training); ``combined()`` runs forward and backward with
    a fixed upstream gradient. ``flops``: StepFlops of one forward + backward (totals for all layers)."""

    forward: object
    combined: object
    flops: StepFlops


def layer_runner(cfg: ModelConfig, mode: str, setup: Setup) -> LayerRunner:
    """Build ``cfg`` under ``mode`` on setup.device (seeded), run one combined step (allocating gradients)
    and count its FLOPs; Transformer.run_layers alone, without embedding, head and loss."""
    device = setup.device
    torch.manual_seed(setup.seed)
    model = build_model(cfg, device)
    apply_plan(model, mode)
    x = torch.randn(cfg.seq, cfg.micro_batch, cfg.hidden, dtype=getattr(torch, cfg.dtype), device=device,
                    requires_grad=True)
    grad = torch.randn_like(x)

    def forward():
        model.run_layers(x)

    def combined():
        model.run_layers(x).backward(grad)

    combined()
    return LayerRunner(forward, combined, _count_flops(lambda: (model.run_layers(x) * grad).sum()))


def _quartiles(samples: list[float]) -> tuple[float, float]:
    """(median, IQR) of pooled samples, as remat.measure.timing.time_step reports them."""
    q25, q50, q75 = np.percentile(samples, [25, 50, 75])
    return float(q50), float(q75 - q25)


def time_runners(runners: dict[str, LayerRunner], setup: Setup, rounds: int) -> dict[str, dict]:
    """Time every runner's forward and combined step in ``rounds`` interleaved rounds (each: time_step with
    setup.repeats repeats; warm-up in the first round), pooling the samples, so that slow drifts of the
    machine fall on every mode alike. Returns mode -> seconds (totals for all layers): forward_s,
    forward_iqr_s, combined_s, combined_iqr_s, timing_method."""
    pooled = {mode: ([], []) for mode in runners}
    method = None
    for r in range(rounds):
        warmup = setup.warmup if r == 0 else 0
        for mode, run in runners.items():
            fwd = time_step(run.forward, setup.device, warmup=warmup, repeats=setup.repeats)
            both = time_step(run.combined, setup.device, warmup=warmup, repeats=setup.repeats)
            pooled[mode][0].extend(fwd.samples_s)
            pooled[mode][1].extend(both.samples_s)
            method = both.method
    out = {}
    for mode, (fwd, both) in pooled.items():
        (f, f_iqr), (c, c_iqr) = _quartiles(fwd), _quartiles(both)
        out[mode] = {"forward_s": f, "forward_iqr_s": f_iqr, "combined_s": c, "combined_iqr_s": c_iqr,
                     "timing_method": method}
    return out


def layer_timing_sweep(params: dict) -> pd.DataFrame:
    """Registry entry ``sweep-layer-timing`` (Korthikanti Table 4): per mode, forward, backward (= combined −
    forward, medians) and combined seconds per layer, and the time overhead (combined / combined of none − 1,
    same run, interleaved rounds) beside the FLOP-predicted overhead: recompute / (forward + backward),
    counted (FlopCounterMode) and from Korthikanti Appendix A (``korthikanti.recompute_flops`` /
    3·``layer_forward_flops``). Keys: layers (1; times and FLOPs are per layer = totals / L), modes
    (["none", "selective", "full"]), rounds (3), warmup (2), repeats (10), shared keys (the CPU model here:
    h = 512, a = 8, s = 256, so that matmuls dominate).
    """
    setup = _setup(params, "sweep-layer-timing", {"layers", "modes", "rounds"}, CPU_TIMING_MODEL,
                   warmup=2, repeats=10)
    layers = get_int(params, "layers", 1)
    modes = _names(params, "modes", ["none", "selective", "full"], G.MODES)
    rounds = get_int(params, "rounds", 3)
    cfg = with_sizes(setup.cfg, layers=layers)
    sz = sizes(cfg, setup.device)
    s, b, h = cfg.seq, cfg.micro_batch, cfg.hidden
    rows, runners = {}, {}
    with _threads(setup):
        for i, mode in enumerate(modes, 1):
            start = time.perf_counter()
            live = G.live_peak_bytes(sz, G.per_layer_units(layers, mode), mode)
            built = guarded(setup, model_state_bytes(cfg) + live, lambda: {"runner": layer_runner(cfg, mode, setup)})
            runner = built.pop("runner", None)
            row = {"mode": mode, "layers": layers, "seq": s, "micro_batch": b, "hidden": h, "heads": cfg.heads,
                   "model": cfg.name, "vocab": cfg.vocab, "dropout": cfg.dropout, **built,
                   "flop_overhead_formula": K.recompute_flops(s, b, h, mode) / (3 * K.layer_forward_flops(s, b, h))}
            if runner is not None:
                runners[mode] = runner
                f = runner.flops
                row.update(flops_forward=f.forward // layers, flops_backward=f.backward // layers,
                           flops_recompute=f.recompute // layers, flop_overhead=f.recompute / (f.forward + f.backward))
            _log(setup, i, len(modes), f"build {mode}", row, time.perf_counter() - start)
            rows[mode] = row
        for mode, times in time_runners(runners, setup, rounds).items():
            rows[mode].update({k: v / layers if k.endswith("_s") else v for k, v in times.items()})
            rows[mode]["backward_s"] = rows[mode]["combined_s"] - rows[mode]["forward_s"]
            _log(setup, list(rows).index(mode) + 1, len(modes), f"timed {mode}", rows[mode], 0.0)
    ref = rows.get("none", {}).get("combined_s")
    for row in rows.values():
        ok = ref is not None and row.get("combined_s") is not None
        row["time_overhead"] = row["combined_s"] / ref - 1 if ok else math.nan
        flop = row.get("flop_overhead")
        row["time_per_flop_overhead"] = row["time_overhead"] / flop if ok and flop else math.nan
    return frame(setup, list(rows.values()), rounds=rounds)
