"""Korthikanti et al. 2022 experiments: one GPT layer per point, measured under FakeTensorMode at the paper's
sizes (a fake process group makes this process rank 0 of t), beside the paper's formulas.

Each function takes its parameters dataclass (config.yaml section ``korthikanti``; unknown keys are errors
naming ``korthikanti.<name>.<key>``) and returns one tidy DataFrame (one row per point) with provenance columns.

    korthikanti-table2  (AccountingParams)
        Table 2: per model × technique (TP baseline, TP+SP, TP+selective, TP+SP+selective, full recompute,
        TP+SP+full; and t = 1: no parallelism, selective, full) the paper-faithful measured bytes, the actual
        bytes, the formula and the relative error; percent of the TP baseline (Figure 7).
    korthikanti-items   (AccountingParams): the reconciliation — one row per saved tensor (module/op, shape,
        dtype, bytes, §4.1 term, paper bytes, the term's formula bytes, note) plus storage slack rows.
    korthikanti-flops   (FlopsParams): FLOPs per layer counted with FlopCounterMode — forward,
        backward, recompute (none / selective / full) — against Appendix A, Eq. 7 and Eq. 8 (as printed and
        as the paper's text describes the recompute).
    korthikanti-memory  (MemoryParams): paper Figure 1 — parameters + optimizer state (first stage, and the
        paper's even share 18·P/(t·p)), first-stage activations (measured bytes per layer × L × interleave
        factor, Eq. 5/6) and the terms outside the layers (§4.3), per GPU, against the memory of a GPU preset
        (remat.timemodel.gpus; default the A100 80GB: 81920 MiB = 80 GiB, the planner's constant too).
    korthikanti-modern  (ModernParams): what the formulas leave out for modern layers — the paper's
        GPT layer, the same with flash attention (SDPA), and the Llama 3 8B layer (RMSNorm, RoPE, GQA,
        SwiGLU), actual saved bytes by module beside sbh(34 + 5as/h).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import pandas as pd

from remat.accounting import LayerAccount, account_layer, build, layer_input, resolve, tensor_mode, tp_group
from remat.experiments.params import Count
from remat.formulas import korthikanti
from remat.measure.flops import StepFlopCounter
from remat.measure.provenance import with_provenance
from remat.models.presets import from_name
from remat.paper import TABLE3_MODELS
from remat.timemodel.gpus import GPUS, check_presets
from remat.units import GiB

# (technique, sp, mode) with tensor parallelism t, then without (t = 1)
TECHNIQUES = [("TP baseline", False, "none"), ("TP+SP", True, "none"), ("TP+selective", False, "selective"),
              ("TP+SP+selective", True, "selective"), ("full recompute", False, "full"),
              ("TP+SP+full", True, "full")]
SERIAL_TECHNIQUES = [("no parallelism", False, "none"), ("selective", False, "selective"),
                     ("full recompute", False, "full")]


# --- parameters ----------------------------------------------------------------------------------------------------

def _paper_models() -> list[str]:
    return list(TABLE3_MODELS)


@dataclass(frozen=True)
class AccountingParams:
    """korthikanti.table2 / korthikanti.items: one layer per model × technique, saved bytes on one TP rank."""

    models: list[str] = field(default_factory=_paper_models)
    """Presets or config.json paths (default: the four models of Table 3)."""
    tp: Count = 8
    """t: tensor-parallel size of the TP techniques."""
    serial: bool = True
    """Also account the t = 1 techniques (no parallelism, selective, full)."""
    device: Literal["fake", "cpu"] = "fake"
    """fake: FakeTensorMode and a fake process group (paper sizes, no memory); cpu: real tensors, one process
    (small sizes only; t > 1 still uses the fake group)."""
    seq: Count | None = None
    """s: sequence length (tokens); None: each preset's."""
    micro_batch: Count | None = None
    """b: micro-batch size (sequences); None: each preset's."""


@dataclass(frozen=True)
class FlopsParams:
    """korthikanti.flops: FLOPs per layer counted with FlopCounterMode, against Appendix A, Eq. 7 and Eq. 8."""

    models: list[str] = field(default_factory=_paper_models)
    """Presets or config.json paths."""
    tp: list[Count] = field(default_factory=lambda: [1, 8])
    """Tensor-parallel sizes t counted (the table multiplies per-rank FLOPs by t)."""
    seq: Count | None = None
    """s: sequence length (tokens); None: each preset's."""
    micro_batch: Count | None = None
    """b: micro-batch size (sequences); None: each preset's."""


@dataclass(frozen=True)
class MemoryParams:
    """korthikanti.memory: memory per GPU of the first pipeline stage (Figure 1)."""

    models: list[str] = field(default_factory=_paper_models)
    """Presets or config.json paths."""
    tp: Count = 8
    """t: tensor-parallel size."""
    bytes_per_param: Count = korthikanti.BYTES_PER_PARAM
    """Model-state bytes per parameter (18: mixed-precision Adam, see korthikanti.BYTES_PER_PARAM_WHY)."""
    gpu: str = "a100-80gb"
    """GPU preset (remat.timemodel.gpus.GPUS) whose memory the totals are compared with: ``memory_bytes``,
    what the driver reports (A100 80GB, the paper's GPU: 81920 MiB = 80 GiB = 85.9·10⁹ bytes) — the same
    constant the planner budgets with."""

    def __post_init__(self):
        check_presets("korthikanti.memory.gpu", [self.gpu])


@dataclass(frozen=True)
class ModernParams:
    """korthikanti.modern: modern layer variants (flash attention, Llama) beside the paper's formula."""

    seq: Count = 2048
    """s: sequence length (tokens)."""
    micro_batch: Count = 1
    """b: micro-batch size (sequences)."""


def configurations(tp: int, serial: bool = True) -> list[tuple[str, int, bool, str]]:
    """(technique, t, sp, mode) of Table 2: the six TP techniques at ``tp`` and, if ``serial``, t = 1."""
    rows = [(name, tp, sp, mode) for name, sp, mode in TECHNIQUES] if tp > 1 else []
    return rows + ([(name, 1, sp, mode) for name, sp, mode in SERIAL_TECHNIQUES] if serial else [])


def _accounts(p: AccountingParams) -> list[tuple[str, LayerAccount]]:
    return [(technique, account_layer(model, mode, t, sp, p.seq, p.micro_batch, device=p.device))
            for model in p.models for technique, t, sp, mode in configurations(p.tp, p.serial)]


def _frame(rows: list[dict], dtype: str = "bfloat16", device: str = "fake") -> pd.DataFrame:
    """Rows + provenance columns; a row's own "dtype" (the model's activation dtype) wins over the default."""
    return with_provenance(rows, device=device, dtype=dtype)


# --- Table 2 and the reconciliation -----------------------------------------------------------------------------------

def _config(technique: str, acc: LayerAccount) -> dict:
    return {"model": acc.model, "technique": technique, "tp": acc.tp, "sp": acc.sp, "mode": acc.mode,
            "seq": acc.seq, "micro_batch": acc.micro_batch, "hidden": acc.hidden, "heads": acc.heads,
            "dtype": acc.dtype}


def table2(p: AccountingParams) -> pd.DataFrame:
    """Table 2, measured: one row per model × technique (bytes per layer on one TP rank, int).

    Columns: model, technique, tp, sp, mode, seq, micro_batch, hidden, heads, bytes_measured (paper-faithful),
    bytes_actual, bytes_formula, rel_error, gap_bytes (actual − measured), percent_of_baseline and
    percent_of_baseline_formula (vs the TP baseline at the same t; vs no parallelism for t = 1), + provenance.
    """
    rows = []
    for technique, acc in _accounts(p):
        rows.append({**_config(technique, acc), "bytes_measured": acc.bytes_per_layer_measured,
                     "bytes_actual": acc.bytes_per_layer_actual, "bytes_formula": acc.bytes_per_layer_formula,
                     "rel_error": acc.rel_error,
                     "gap_bytes": acc.bytes_per_layer_actual - acc.bytes_per_layer_measured})
    frame = pd.DataFrame(rows)
    base = frame[frame["mode"].eq("none") & ~frame["sp"]].set_index(["model", "tp"])
    key = list(zip(frame["model"], frame["tp"]))
    frame["percent_of_baseline"] = 100 * frame["bytes_measured"] / base.loc[key, "bytes_measured"].to_numpy()
    frame["percent_of_baseline_formula"] = 100 * frame["bytes_formula"] / base.loc[key, "bytes_formula"].to_numpy()
    return _frame(frame.to_dict("records"), device=p.device)


def items(p: AccountingParams) -> pd.DataFrame:
    """The reconciliation: one row per saved tensor of each model × technique, plus one row per storage kept
    beyond (or shared by) its saved views. Columns: the configuration, name ("module/op"), module, op, shape,
    saved_dtype, bytes (actual), paper_term (empty: not counted by the paper), paper_bytes, term_formula_bytes (the
    term's §4.1 bytes for this configuration), note, + provenance."""
    rows = []
    for technique, acc in _accounts(p):
        config = _config(technique, acc)
        for item in acc.items:
            formula = korthikanti.term_bytes(item.paper_term, acc.seq, acc.micro_batch, acc.hidden, acc.heads, acc.tp,
                                   acc.sp) if item.paper_term else None
            rows.append({**config, "name": item.name, "module": item.module, "op": item.op,
                         "shape": "×".join(map(str, item.shape)),
                         "saved_dtype": item.dtype.removeprefix("torch."),
                         "bytes": item.bytes, "paper_term": item.paper_term, "paper_bytes": item.paper_bytes,
                         "term_formula_bytes": formula, "note": item.note})
        for storage, nbytes in acc.slack.items():
            rows.append({**config, "name": "(storage)", "module": "", "op": "", "shape": "", "saved_dtype": "",
                         "bytes": nbytes, "paper_term": None, "paper_bytes": 0, "term_formula_bytes": None,
                         "note": "storage beyond saved views" if nbytes > 0 else "views saved more than once"})
    return _frame(rows, device=p.device)


# --- FLOPs ----------------------------------------------------------------------------------------------------------

def layer_flops(model: str, mode: str, tp: int = 1, sp: bool = False, **sizes) -> dict:
    """FLOPs of one layer's forward, backward (gradient work) and recompute on one TP rank, counted with
    torch.utils.flop_counter (remat.measure.flops.StepFlopCounter) under FakeTensorMode. Returns ints."""
    cfg, t = resolve(model, mode, tp, sp, **sizes)
    counter = StepFlopCounter()
    with tp_group(t, 0, "fake") as group, tensor_mode("fake"):
        container, layer = build(cfg, t, sp, mode, group)
        x = layer_input(cfg, t, sp, "fake")
        with counter.forward():
            loss = container(x).sum()
        counter.backward(loss)
    counts = counter.result()
    return {"forward": counts.forward, "backward": counts.backward, "recompute": counts.recompute, "cfg": cfg}


def flops(p: FlopsParams) -> pd.DataFrame:
    """FLOPs per layer (all TP ranks together = per-rank count × t) beside Appendix A, Eq. 7 and Eq. 8.

    Columns: model, tp, mode, seq, micro_batch, hidden, flops_forward, flops_backward, flops_recompute (measured),
    formula_forward (24bsh² + 4bs²h), formula_backward (2× forward), recompute_text (what the paper's text
    says is recomputed: 4bs²h for selective, one forward for full), recompute_eq8 (the per-layer recompute
    Eq. 8 as printed implies: Eq. 8 − Eq. 7 = 12bs²h, selective only), hardware_measured (forward + backward +
    recompute), model_eq7 = 72bsh²(1 + s/(6h)), hardware_eq8 = 72bsh²(1 + s/(3h)) (selective), hardware_text
    = model_eq7 + recompute_text, overhead_measured / overhead_text / overhead_eq8 (recompute ÷ model FLOPs),
    + provenance. Per layer: the logits (2bshv forward) are outside the layers and never recomputed.
    """
    sizes = {k: v for k, v in (("seq", p.seq), ("micro_batch", p.micro_batch)) if v is not None}
    rows = []
    for model in p.models:
        for t in p.tp:
            for mode in korthikanti.RECOMPUTE:
                got = layer_flops(model, mode, t, **sizes)
                cfg = got.pop("cfg")
                s, b, h = cfg.seq, cfg.micro_batch, cfg.hidden
                fwd = korthikanti.layer_forward_flops(s, b, h)
                model_eq7 = 3 * fwd
                text = korthikanti.recompute_flops(s, b, h, mode)
                eq8 = 3 * korthikanti.core_attn_forward_flops(s, b, h) if mode == "selective" else None
                measured = {f"flops_{k}": v * t for k, v in got.items()}
                rows.append({
                    "model": cfg.name, "tp": t, "mode": mode, "seq": s, "micro_batch": b, "hidden": h, **measured,
                    "formula_forward": fwd, "formula_backward": 2 * fwd, "recompute_text": text,
                    "recompute_eq8": eq8,
                    "hardware_measured": sum(measured.values()), "model_eq7": model_eq7,
                    "hardware_eq8": model_eq7 + eq8 if eq8 is not None else None,
                    "hardware_text": model_eq7 + text,
                    "overhead_measured": measured["flops_recompute"] / (measured["flops_forward"]
                                                                        + measured["flops_backward"]),
                    "overhead_text": text / model_eq7, "overhead_eq8": eq8 / model_eq7 if eq8 is not None else None})
    return _frame(rows)


# --- Figure 1: memory per GPU -----------------------------------------------------------------------------------------

def memory(p: MemoryParams) -> pd.DataFrame:
    """Whole-model memory on one GPU of the first pipeline stage (paper Figure 1), one row per model × technique.

    Columns: model, technique, tp, sp, mode, pp, interleave, layers, interleave_factor, params_per_gpu (first
    stage: korthikanti.params_per_gpu), params_total (P), bytes_per_param, model_state_bytes (params_per_gpu ×
    bytes_per_param; see korthikanti.BYTES_PER_PARAM_WHY), model_state_even_bytes (the paper's bars:
    bytes_per_param·P/(t·p), rounded), excess_<part>_bytes (model_state_bytes − model_state_even_bytes by
    cause, korthikanti.first_stage_params_excess × bytes_per_param, rounded: word_embedding,
    position_embedding, replicated_in_layers, uneven_layers, final_layernorm), per_layer_measured,
    per_layer_formula, activations_layers (measured per layer × L × interleave factor, Eq. 5/6),
    activations_layers_formula, activations_outside (§4.3), total_bytes, total_gib, gpu (preset),
    gpu_memory_bytes (GPUS[gpu].memory_bytes), fits_gpu (total_bytes ≤ gpu_memory_bytes), + provenance.
    Bytes are int; GiB = 2**30 bytes.
    """
    tp, bpp = p.tp, p.bytes_per_param
    capacity = GPUS[p.gpu].memory_bytes
    rows = []
    for model in p.models:
        cfg = from_name(model)
        s, b, h, v, L, pp, m = cfg.seq, cfg.micro_batch, cfg.hidden, cfg.vocab, cfg.layers, cfg.pp, cfg.interleave
        n_params = korthikanti.params_per_gpu(h, L, v, s, tp, pp)
        even = korthikanti.params_even_share(h, L, v, s, tp, pp)
        excess = {f"excess_{part}_bytes": round(bpp * n)
                  for part, n in korthikanti.first_stage_params_excess(h, L, v, s, tp, pp).items()}
        for technique, sp, mode in TECHNIQUES:
            acc = account_layer(model, mode, tp, sp)
            layers = korthikanti.first_stage_bytes(acc.bytes_per_layer_measured, L, pp, m)
            outside = sum(korthikanti.outside_layer_bytes(s, b, h, v, tp, pp, sp).values())
            state = korthikanti.model_state_bytes(n_params, bpp)
            total = state + layers + outside
            rows.append({"model": model, "technique": technique, "tp": tp, "sp": sp, "mode": mode, "pp": pp,
                         "interleave": m, "layers": L, "interleave_factor": float(korthikanti.interleave_factor(pp, m)),
                         "params_per_gpu": n_params, "params_total": korthikanti.params_total(h, L, v, s),
                         "bytes_per_param": bpp, "model_state_bytes": state,
                         "model_state_even_bytes": round(bpp * even), **excess,
                         "per_layer_measured": acc.bytes_per_layer_measured,
                         "per_layer_formula": acc.bytes_per_layer_formula, "activations_layers": layers,
                         "activations_layers_formula": korthikanti.first_stage_bytes(acc.bytes_per_layer_formula,
                                                                                     L, pp, m),
                         "activations_outside": outside, "total_bytes": total, "total_gib": total / GiB,
                         "gpu": p.gpu, "gpu_memory_bytes": capacity, "fits_gpu": total <= capacity})
    return _frame(rows)


# --- modern layers ---------------------------------------------------------------------------------------------------

MODERN_VARIANTS = [  # (variant, preset, overrides)
    ("GPT (paper)", "gpt-22b", {}),                                   # materialized softmax, dropout 0.1
    ("GPT + SDPA", "gpt-22b", {"attention": "sdpa", "dropout": 0.0}),  # flash kernel; no dropout on CPU
    ("Llama 3 8B", "llama3-8b", {}),                                   # RMSNorm, RoPE, GQA 32/8, SwiGLU, SDPA
]


def modern(p: ModernParams) -> pd.DataFrame:
    """Actual saved bytes per layer by module for modern layer variants (t = 1, FakeTensorMode on the CPU),
    beside the paper's sbh(34 + 5as/h) at the same s, b, h, a. One row per variant × module/op.

    Columns: variant, model, seq, micro_batch, hidden, heads, kv_heads, ffn_hidden, module, op, tensors,
    bytes (actual, this module/op), layer_bytes_actual, layer_bytes_formula, + provenance.
    """
    s, b = p.seq, p.micro_batch
    rows = []
    for variant, model, overrides in MODERN_VARIANTS:
        acc = account_layer(model, "none", 1, False, seq=s, micro_batch=b, **overrides)
        cfg, _ = resolve(model, "none", 1, False, seq=s, micro_batch=b, **overrides)
        groups: dict[tuple[str, str], list[int]] = {}
        for item in acc.items:
            groups.setdefault((item.module, item.op), []).append(item.bytes)
        shared = sum(acc.slack.values())  # < 0: one storage saved by several ops (actual counts it once)
        if shared:
            groups[("(shared storages counted once)", "—")] = [shared]
        for (module, op), sizes in groups.items():
            rows.append({"variant": variant, "model": model, "seq": s, "micro_batch": b, "hidden": cfg.hidden,
                         "heads": cfg.heads, "kv_heads": cfg.kv_heads, "ffn_hidden": cfg.ffn_hidden,
                         "module": module, "op": op, "tensors": len(sizes), "bytes": sum(sizes),
                         "layer_bytes_actual": acc.bytes_per_layer_actual,
                         "layer_bytes_formula": acc.bytes_per_layer_formula})
    return _frame(rows)
