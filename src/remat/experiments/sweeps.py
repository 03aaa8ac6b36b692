"""Memory sweeps on the torch GPT model (``remat.models``), every point beside its closed form:

    sweep-segments      Chen: L layers, segments k = 1..L (remat.formulas.chen.segment_sizes): saved bytes, peak
                        bytes, recompute FLOPs, step time; the measured optimum k against √L
    sweep-depth         peak bytes against depth L for none, √L segments (k = ⌈√L⌉), per-layer full, selective
    sweep-seq-hidden    per-layer saved bytes against s and against h for none | selective | full, around the
                        crossover s* = 34h/(5a) where the 5as/h term overtakes 34 (Korthikanti Eq. 1)

(Korthikanti Table 4, per-layer time: ``remat.experiments.layer_timing``.) Each experiment takes its
parameters dataclass (below; config.yaml section ``sweeps.<name>``, defaults = the CPU sizes: gpt-tiny at
h = 128, v = 64, bfloat16) and returns a tidy DataFrame, one row per point, with provenance columns. A
point is measured and set beside its closed forms by ``remat.experiments.sweep_point`` (closed forms
``remat.formulas.torch_gpt`` on top of ``remat.formulas.korthikanti``; the step measured by
``remat.measure.step.measure``: saved bytes by saved-tensor hooks, peak bytes by the CUDA allocator or
torch's MemTracker, FLOPs by FlopCounterMode with recompute counted inside each recompute). Timed steps
follow the one timing protocol (remat.measure.timing.time_steps: median and IQR, CUDA events on a GPU,
time.perf_counter with the thread count fixed on the CPU); the segment sweep times all its k together in
``rounds`` interleaved rounds (each visits every k once, rotated order, ``warmup`` untimed and ``repeats``
timed steps per visit), so a load change hits every k alike. Time overheads are ratios to the sweep's own
reference point (k = 1) timed in the same rounds. One line per point goes to stderr (the rule's log).
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from typing import ClassVar, Literal

import pandas as pd

from remat.accounting import account_layer
from remat.errors import UsageError
from remat.experiments.params import Count
from remat.experiments.sweep_point import (Repeats, SweepParams, frame, guarded, log, overheads, run_points, sizes,
                                          time_plans)
from remat.formulas import chen as chen_formulas, korthikanti, torch_gpt
from remat.models.presets import ModelConfig

DepthFamily = Literal["none", "sqrt", "full", "selective"]


# --- parameters ---------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class SegmentsParams(SweepParams):
    """sweeps.segments: Chen's segments(k) for k in ``ks`` on an L-layer model."""

    NAME: ClassVar[str] = "sweep-segments"
    SECTION: ClassVar[str] = "sweeps.segments"

    repeats: Repeats = 5
    """Timed steps per k and round (≥ 5)."""
    rounds: Count = 2
    """Interleaved timing rounds: each visits every k once, in rotated order (remat.measure.timing.time_steps);
    2 rounds of 5 pool 10 samples per k, the count each k had when timed on its own."""
    layers: Count = 12
    """L, layers of the model. At the CPU sizes the closed-form optimum k* = √(L·y/x) lies beyond L (y/x ≈ 19:
    k* ≈ 15 at L = 12, 17 at 16), so the measured optimum is k = L either way; L = 12 keeps the step short."""
    ks: list[Count] | None = None
    """Segment counts k to run (each ≤ layers); None: every k in 1..layers."""
    timing: bool = True
    """Also time the step at every k, all k in the same interleaved rounds (seconds; time_overhead against k = 1)."""

    def __post_init__(self):
        super().__post_init__()
        for k in self.ks or []:
            if k > self.layers:
                raise UsageError(self.field("ks"), f"k = {k} segments > layers = {self.layers}")


@dataclass(frozen=True)
class DepthParams(SweepParams):
    """sweeps.depth: peak and saved bytes against depth L, for each policy family."""

    NAME: ClassVar[str] = "sweep-depth"
    SECTION: ClassVar[str] = "sweeps.depth"

    depths: list[Count] = field(default_factory=lambda: [2, 4, 8, 16, 32, 64])
    """Depths L (layers)."""
    policies: list[DepthFamily] = field(default_factory=lambda: ["none", "sqrt", "full"])
    """Families: none, sqrt (Chen's segments:⌈√L⌉), full (per-layer full recompute), selective."""
    timing: bool = False
    """Also time each point's step (seconds)."""


@dataclass(frozen=True)
class SeqHiddenParams(SweepParams):
    """sweeps.seq-hidden: per-layer saved bytes against s (h = the model's) and against h (s = hiddens_seq)."""

    NAME: ClassVar[str] = "sweep-seq-hidden"
    SECTION: ClassVar[str] = "sweeps.seq-hidden"

    layers: Count = 2
    """L, layers of the model."""
    seqs: list[Count] = field(default_factory=lambda: [64, 128, 192, 256, 384, 512])
    """Sequence lengths s (tokens) of the s axis."""
    hiddens: list[Count] = field(default_factory=lambda: [32, 64, 128, 256])
    """Hidden sizes h (elements) of the h axis; heads must divide each."""
    hiddens_seq: Count = 128
    """s (tokens) of the h axis."""
    modes: list[torch_gpt.Mode] = field(default_factory=lambda: ["none", "selective", "full"])
    """Per-layer policies measured at each point."""
    timing: bool = False
    """Also time each point's step (seconds)."""

    def configs(self) -> list[tuple[str, ModelConfig]]:
        """(axis, model config) of every point: the s axis, then the h axis. Raises UsageError naming the
        field for a size the model rejects (e.g. heads when a does not divide h)."""
        return ([("seq", self.model_config(layers=self.layers, seq=s)) for s in self.seqs]
                + [("hidden", self.model_config(layers=self.layers, seq=self.hiddens_seq, hidden=h))
                   for h in self.hiddens])

    def __post_init__(self):
        super().__post_init__()
        self.configs()


# --- the sweeps -----------------------------------------------------------------------------------------------------

def segment_sweep(p: SegmentsParams) -> pd.DataFrame:
    """Registry entry ``sweep-segments``: Chen's segments(k) for k in ``p.ks`` on an L-layer model.

    Row per k: policy "segments:k", saved / peak / recompute FLOPs / step time measured and in closed form,
    k_sqrt (⌈√L⌉), k_opt_formula (integer arg-min of the closed-form live peak), k_star (√(L·y/x)),
    time_overhead vs k = 1 and time_per_flop_overhead (bytes, FLOPs, seconds).
    """
    cfg = p.model_config(layers=p.layers)
    sz = sizes(cfg, p.device)
    extra = {"k_sqrt": chen_formulas.sqrt_segments(p.layers), "k_opt_formula": torch_gpt.optimal_segments(sz, p.layers),
             "k_star": torch_gpt.optimal_segments_approx(sz, p.layers)}
    ks = p.ks or list(range(1, p.layers + 1))
    with p.threads_fixed():
        rows = run_points(p, [(f"k={k}", {"k": k}, cfg, segments_spec(k)) for k in ks], timing=False)
        if p.timing:
            _time_segments(p, cfg, rows)
    overheads(rows, next((r for r in rows if r["k"] == 1), None))
    return frame(p, rows, **extra, **({"rounds": p.rounds} if p.timing else {}))


def _time_segments(p: SegmentsParams, cfg: ModelConfig, rows: list[dict]) -> None:
    """In place: the step-time columns (Timing.columns: step_time_s, step_time_iqr_s, step_time_samples,
    timing_method; seconds) of every measured k, all k of the model timed together in ``p.rounds`` interleaved
    rounds (sweep_point.time_plans: one model, the plan applied per visit, gradients kept as in the measured
    step), so a load change hits every k alike instead of one k's point."""
    specs = {segments_spec(r["k"]): r for r in rows if r["status"] == "ok"}
    start = time.perf_counter()
    times = time_plans(cfg, list(specs), p.device, rounds=p.rounds, repeats=p.repeats, warmup=p.warmup,
                       threads=p.threads if p.device == "cpu" else None, seed=p.seed, keep_grads=True)
    for i, (spec, row) in enumerate(specs.items(), 1):
        row.update(times[spec].columns())
        log(p, i, len(specs), f"timed k={row['k']}", row, time.perf_counter() - start if i == len(specs) else 0.0)


def segments_spec(k: int) -> str:
    """The remat.policies spec of Chen's segments(k): "segments:k", and "none" for k = 1 (one segment is the
    last, kept: nothing checkpointed — parse_plan rejects "segments:1" as a user's trap)."""
    return f"segments:{k}" if k > 1 else "none"


def depth_policy(family: str, layers: int) -> tuple[str, int | None]:
    """(policy spec, k) of a depth-sweep family at depth L: none, sqrt (segments:⌈√L⌉), full, selective."""
    if family == "sqrt":
        k = chen_formulas.sqrt_segments(layers)
        return segments_spec(k), k
    return family, None


def depth_sweep(p: DepthParams) -> pd.DataFrame:
    """Registry entry ``sweep-depth``: peak and saved bytes against depth L for each family in
    ``p.policies``. Row per (L, family): measured and closed-form saved bytes, peak (activation) bytes,
    recompute FLOPs. Fitted exponents: remat.analysis.sweeps.depth_fits."""
    points = []
    for layers in p.depths:
        cfg = p.model_config(layers=layers)
        for family in p.policies:
            spec, k = depth_policy(family, layers)
            points.append((f"L={layers} {family}", {"family": family, "k": k}, cfg, spec))
    with p.threads_fixed():
        rows = run_points(p, points, p.timing)
    return frame(p, rows)


def _core_attention(terms: dict[str, int]) -> int:
    """Bytes of the core-attention (as²b) terms among §4.1 ``terms``."""
    return sum(v for name, v in terms.items()
               if korthikanti.TERM_BY_NAME.get(name) and korthikanti.TERM_BY_NAME[name].core_attn)


def layer_columns(cfg: ModelConfig, sz: torch_gpt.GPTSizes, mode: str) -> dict:
    """Closed forms per layer of a seq/hidden point (bytes): the torch layer (``saved_per_layer_formula`` = the
    §4.1 terms at the run's element size + ``extras_per_layer_bytes``, the LayerNorm statistics); Korthikanti
    Table 2 at the paper's sizes (``table2_per_layer``: 2 B, 1-byte masks) split into its as²b part
    (``as2b_term_formula``, 5as²b for none) and sbh part (``sbh_term_formula``); s* = 34h/(5a)."""
    paper = torch_gpt.paper_layer_terms(dataclasses.replace(sz, itemsize=korthikanti.ACT_BYTES), mode)
    as2b = _core_attention(paper)
    extras = sum(torch_gpt.layer_extra_terms(sz, mode).values())
    return {"mode": mode, "saved_per_layer_formula": sum(torch_gpt.paper_layer_terms(sz, mode).values()) + extras,
            "extras_per_layer_bytes": extras, "table2_per_layer": sum(paper.values()), "as2b_term_formula": as2b,
            "sbh_term_formula": sum(paper.values()) - as2b,
            "crossover_seq_formula": float(torch_gpt.crossover_seq(cfg.hidden, cfg.heads, korthikanti.ACT_BYTES,
                                                                   sz.dropout))}


def account_columns(cfg: ModelConfig, mode: str, device: str) -> dict:
    """One layer measured by remat.accounting.account_layer (its saved tensors labelled with §4.1 terms):
    ``paper_measured_per_layer`` (counted tensors at the paper's element sizes), its as²b part (the core
    attention terms) and sbh part, ``actual_per_layer`` (every storage kept), and the gap actual − paper,
    itemized (``gap_items``: "item: bytes; ...")."""
    acc = account_layer(cfg, mode, tp=1, device=device)
    core = _core_attention(acc.terms())
    gap = acc.gap()
    return {"paper_measured_per_layer": acc.bytes_per_layer_measured, "as2b_term_measured": core,
            "sbh_term_measured": acc.bytes_per_layer_measured - core, "actual_per_layer": acc.bytes_per_layer_actual,
            "gap_bytes": sum(gap.values()), "gap_items": "; ".join(f"{k}: {v}" for k, v in gap.items())}


def seq_hidden_sweep(p: SeqHiddenParams) -> pd.DataFrame:
    """Registry entry ``sweep-seq-hidden``: none | selective | full per layer, against s (h fixed: the
    model's) and against h (s fixed: ``p.hiddens_seq``), on a ``p.layers``-layer model.

    Row per (axis, value, mode): the whole-model columns of every sweep; per-layer saved bytes measured in the
    step (by layer) against the torch layer's closed form (``layer_columns``); and one layer through
    remat.accounting (``account_columns``): the paper-faithful bytes, their as²b and sbh parts and the
    itemized gap, against Table 2 and s* = 34h/(5a).
    """
    points = [(f"{axis} s={cfg.seq} h={cfg.hidden} {mode}", {"axis": axis}, cfg, mode)
              for axis, cfg in p.configs() for mode in p.modes]
    with p.threads_fixed():
        rows = run_points(p, points, p.timing)
        for row, (_, _, cfg, mode) in zip(rows, points):
            row.update(layer_columns(cfg, sizes(cfg, p.device), mode))
            if row["status"] == "ok":
                row["saved_per_layer_ratio"] = row["saved_per_layer_bytes"] / row["saved_per_layer_formula"]
                row.update(guarded(p, None, lambda: account_columns(cfg, mode, p.device)))
    return frame(p, rows)
