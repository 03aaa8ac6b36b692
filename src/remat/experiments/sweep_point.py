"""One point of a torch GPT sweep: the shared parameters, the point's closed forms beside its measurement,
the size and out-of-memory guard, the progress line and the sweep's table.

Used by ``remat.experiments.sweeps`` (segments, depth, seq-hidden) and ``remat.experiments.layer_timing``.
A point is a model config (``SweepParams.model_config``) under a plan spec (``remat.policies.parse_plan``):
its closed forms come from ``remat.formulas.torch_gpt`` (``predicted``), its measurement from the package's
one step measurer, ``remat.measure.step.measure`` with ``keep_grads=True`` (the gradients exist before the
measured step, so peak − base is what the step adds above a fixed model state). ``status`` is "ok", "oom"
(an out-of-memory error caught: the sweep goes on) or "skipped_too_large" (closed-form peak > max_bytes:
not run).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import sys
import time
from dataclasses import dataclass
from typing import Annotated, Callable, ClassVar, Literal

import pandas as pd
import torch

from remat.device import is_out_of_memory, release_memory, resolve_device
from remat.errors import UsageError
from remat.experiments.params import Bytes, Count, Ge, NonNegative
from remat.formulas import torch_gpt
from remat.measure import step
from remat.measure.provenance import with_provenance
from remat.measure.timing import MIN_REPEATS, Timing, intra_op_threads, time_steps
from remat.models.presets import ModelConfig, from_name, validate
from remat.models.transformer import build_model, lm_loss, random_tokens
from remat.policies import LayerPolicies, apply_plan, parse_plan
from remat.precision import Precision, precision
from remat.units import GiB

MODEL_FIELDS = ("hidden", "heads", "seq", "micro_batch", "vocab", "dtype", "dropout", "attention")
FLOPS_NOTE = "torch.utils.flop_counter.FlopCounterMode (matmuls); recompute counted inside each recompute"
Repeats = Annotated[int, Ge(MIN_REPEATS)]
DType = Literal["float32", "float64", "bfloat16", "float16", "auto"]


@dataclass(frozen=True)
class SweepParams:
    """The parameters every torch sweep shares: device, model sizes, seed and timing protocol. A model size
    set to None keeps the model's own value; the run is serial on one device (t = p = 1)."""

    NAME: ClassVar[str] = "sweep"
    SECTION: ClassVar[str] = "sweeps"

    device: Literal["cpu", "cuda"] = "cpu"
    """Where the steps run (the pipeline passes config.device)."""
    model: str = "gpt-tiny"
    """A GPT preset or config.json path (remat.models.presets.from_name)."""
    hidden: Count | None = 128
    """h, elements (the MLP width becomes 4h); None: the model's."""
    heads: Count | None = None
    """a, attention heads; None: the model's."""
    seq: Count | None = None
    """s, tokens per sequence; None: the model's."""
    micro_batch: Count | None = None
    """b, sequences per step; None: the model's."""
    vocab: Count | None = 64
    """v, tokens (small, so that the terms outside the layers ∝ sbv stay small next to a layer); None: the
    model's."""
    dtype: DType | None = "auto"
    """Parameter and activation dtype. "auto": the paper's bfloat16 (e = 2 bytes) where the device computes it
    natively, else float32 (a CPU without a bf16 flag emulates bfloat16 many times slower, with another
    forward/backward ratio: remat.precision.precision); None: the model's; a name: that dtype (the row's
    dtype_reason says when it is emulated)."""
    dropout: Annotated[float, Ge(0.0)] | None = None
    """Probability of every dropout, in [0, 1) (masks are saved when > 0); None: the model's."""
    attention: Literal["math", "sdpa"] | None = None
    """"math" materializes softmax(QKᵀ/√d) (the paper's assumption), "sdpa" calls torch's fused kernel;
    None: the model's."""
    seed: NonNegative = 0
    """Seed of the weights and tokens."""
    threads: Count = 1
    """torch intra-op threads during a CPU run (ignored on cuda)."""
    warmup: NonNegative = 1
    """Untimed steps before the timed ones."""
    repeats: Repeats = MIN_REPEATS
    """Timed steps per point (≥ 5)."""
    max_bytes: Bytes | None = 4 * GiB
    """Points whose closed-form peak (bytes) exceeds this are not run (status skipped_too_large); None: every
    point runs and an out-of-memory error becomes status oom. 4 GiB on a CPU; config/gpu.yaml sets null."""

    def __post_init__(self):
        resolve_device(self.device, field=self.field("device"))
        if self.dropout is not None and self.dropout >= 1:
            raise UsageError(self.field("dropout"), f"must be in [0, 1), got {self.dropout}")
        self.model_config()

    def field(self, key: str) -> str:
        """The config path of parameter ``key`` ("sweeps.depth.hidden"), as errors name it."""
        return f"{self.SECTION}.{key}"

    def model_config(self, **changes) -> ModelConfig:
        """The model these parameters describe, then ``changes`` (layers, seq, hidden, ...: ``with_sizes``).
        Raises UsageError("<section>.<field>") for a model or size the GPT model rejects (e.g. heads when
        a does not divide h, model for a Llama preset)."""
        sizes = {k: getattr(self, k) for k in MODEL_FIELDS}
        sizes["dtype"] = None if self.dtype is None else self.precision().dtype
        try:
            base = from_name(self.model)
            if base.arch != "gpt":
                raise UsageError("model", f"the sweeps measure the GPT layer; {base.name} is {base.arch}")
            return with_sizes(with_sizes(base, tp=1, pp=1, interleave=1, **sizes), **changes)
        except UsageError as exc:
            raise UsageError(self.field(exc.field), str(exc).split(": ", 1)[-1]) from None

    def precision(self) -> Precision:
        """The dtype the run computes in and why (remat.precision.precision of ``dtype`` on ``device``; None: the
        model's own dtype, described the same way)."""
        if self.dtype is not None:
            return precision(self.dtype, self.device)
        return precision(from_name(self.model).dtype, self.device, given="the model's")

    def threads_fixed(self) -> contextlib.AbstractContextManager:
        """torch's intra-op thread count fixed to ``threads`` on the CPU for the run (restored after)."""
        return intra_op_threads(self.threads if self.device == "cpu" else None)


def with_sizes(cfg: ModelConfig, **changes) -> ModelConfig:
    """``cfg`` with field changes (None ignored), validated: a new hidden size also sets the MLP width to
    4·hidden (the GPT layer, Korthikanti §4.1), new heads the KV heads, a longer sequence the position table.
    Raises UsageError naming the field (e.g. "heads" if a does not divide h)."""
    changes = {k: v for k, v in changes.items() if v is not None}
    if isinstance(changes.get("hidden"), int):
        changes.setdefault("ffn_hidden", 4 * changes["hidden"])
    if "heads" in changes:
        changes.setdefault("kv_heads", changes["heads"])  # the GPT layer: one KV head per head
    if isinstance(changes.get("seq"), int):
        changes.setdefault("max_positions", max(cfg.max_positions, changes["seq"]))
    return validate(dataclasses.replace(cfg, **changes))


# --- closed forms of one point ------------------------------------------------------------------------------------

def sizes(cfg: ModelConfig, device: str) -> torch_gpt.GPTSizes:
    """``torch_gpt.sizes_of`` ``cfg`` with the LayerNorm statistics' element size torch uses on ``device``."""
    return torch_gpt.sizes_of(cfg, step.layernorm_stats_itemsize(cfg.dtype, device))


def predicted(cfg: ModelConfig, plan: LayerPolicies, sz: torch_gpt.GPTSizes) -> dict:
    """Closed-form columns of one point (bytes, FLOPs): saved_bytes_formula, peak_activation_bytes_formula,
    model_state_bytes_formula (weights, gradients, mask buffers, inputs: ``torch_gpt.ModelBytes.state``),
    peak_bytes_formula, flops_recompute_formula, flops_step_formula (forward + backward),
    flop_overhead_formula."""
    units, mode = torch_gpt.plan_units(plan)
    live = torch_gpt.live_peak_bytes(sz, units, mode)
    state = torch_gpt.model_bytes(cfg, sz.stats_itemsize).state
    recompute, total = torch_gpt.recompute_flops(sz, units, mode), torch_gpt.step_flops(sz, cfg.layers)
    return {"saved_bytes_formula": torch_gpt.saved_bytes(sz, units, mode), "peak_activation_bytes_formula": live,
            "model_state_bytes_formula": state, "peak_bytes_formula": state + live,
            "flops_recompute_formula": recompute, "flops_step_formula": total,
            "flop_overhead_formula": recompute / total}


# --- measuring one point -------------------------------------------------------------------------------------------

def guarded(p: SweepParams, predicted_peak: int | None, measure: Callable[[], dict]) -> dict:
    """Run ``measure()`` (-> dict) unless ``predicted_peak`` exceeds p.max_bytes; returns its dict with
    ``status`` "ok", or {"status": "skipped_too_large", "error": ...} / {"status": "oom", "error": ...}
    (remat.device.is_out_of_memory caught, memory released: the sweep goes on). Other errors propagate."""
    if p.max_bytes is not None and predicted_peak is not None and predicted_peak > p.max_bytes:
        return {"status": "skipped_too_large",
                "error": f"predicted peak {predicted_peak} B > max_bytes {p.max_bytes} B"}
    try:
        out = {**measure(), "status": "ok", "error": None}
    except Exception as exc:
        if not is_out_of_memory(exc):
            raise
        out = {"status": "oom", "error": str(exc).splitlines()[0][:200]}
    release_memory(p.device)
    return out


def measured(p: SweepParams, cfg: ModelConfig, policy: str, timing: bool) -> dict:
    """One step of ``cfg`` under ``policy`` by remat.measure.step.measure (gradients kept): saved_bytes,
    saved_per_layer_bytes (mean over the layers), base_bytes, peak_bytes, peak_activation_bytes, peak_method,
    flops_forward / flops_backward / flops_recompute and, if ``timing``, the step-time columns (seconds)."""
    row = step.measure(cfg, policy, p.device, seed=p.seed, warmup=p.warmup, repeats=p.repeats, timing=timing,
                       keep_grads=True)
    layers = row["activation_bytes_per_layer"]
    out = {"saved_bytes": row["activation_bytes"], "saved_per_layer_bytes": sum(layers) / len(layers),
           **{k: row[k] for k in ("base_bytes", "peak_bytes", "peak_activation_bytes", "peak_method",
                                  "flops_forward", "flops_backward", "flops_recompute")}}
    if timing:
        out.update(step_time_s=row["step_time_s"], step_time_iqr_s=row["step_time_iqr_s"],
                   step_time_samples=len(row["step_time_samples"]), timing_method=row["timing_method"])
    return out


def time_plans(cfg: ModelConfig, specs, device: str = "cpu", *, rounds: int = 3, repeats: int = MIN_REPEATS,
               warmup: int = 1, threads: int | None = 1, seed: int = 0, keep_grads: bool = False) -> dict[str, Timing]:
    """spec -> ``remat.measure.timing.Timing`` (seconds) of a training step (forward, fp32 loss, backward) of one
    seeded ``cfg`` model under each plan (a ``remat.policies.parse_plan`` spec, applied per visit):
    ``time_steps`` over all specs at once, ``rounds`` interleaved rounds of ``warmup`` untimed and ``repeats``
    timed steps per visit, so a load change on a shared machine hits every plan alike. ``keep_grads``: the
    gradients are zeroed in place and kept (``remat.measure.step.measure``'s keep_grads), else set to None."""
    torch.manual_seed(seed)
    model = build_model(cfg, device)
    tokens, targets = random_tokens(cfg, device), random_tokens(cfg, device)

    def train_step():
        model.zero_grad(set_to_none=not keep_grads)
        lm_loss(model(tokens), targets).backward()

    return time_steps({spec: train_step for spec in dict.fromkeys(specs)}, device, rounds=rounds, repeats=repeats,
                      warmup=warmup, setup=lambda spec: apply_plan(model, spec), threads=threads)


def point(p: SweepParams, cfg: ModelConfig, policy: str, timing: bool) -> dict:
    """One row: the point's sizes, closed forms, measurement (or status) and the measured/closed-form ratios."""
    plan = parse_plan(policy, cfg.layers)
    pred = predicted(cfg, plan, sizes(cfg, p.device))
    row = {"policy": plan.spec, "layers": cfg.layers, "seq": cfg.seq, "micro_batch": cfg.micro_batch,
           "hidden": cfg.hidden, "heads": cfg.heads, "vocab": cfg.vocab, "dropout": cfg.dropout,
           "model": cfg.name, **pred}
    row.update(guarded(p, pred["peak_bytes_formula"], lambda: measured(p, cfg, policy, timing)))
    if row["status"] == "ok":
        row["saved_ratio"] = row["saved_bytes"] / row["saved_bytes_formula"]
        row["peak_residual_bytes"] = row["peak_activation_bytes"] - row["peak_activation_bytes_formula"]
        row["flop_overhead"] = row["flops_recompute"] / (row["flops_forward"] + row["flops_backward"])
    return row


def log(p: SweepParams, i: int, n: int, label: str, row: dict, seconds: float) -> None:
    """One progress line per point on stderr (the rule's log)."""
    parts = [f"[{p.NAME}] {i}/{n} {label} status={row['status']}"]
    for key in ("saved_bytes", "peak_activation_bytes", "flops_recompute"):
        if row.get(key) is not None and not (isinstance(row[key], float) and math.isnan(row[key])):
            parts.append(f"{key}={int(row[key])}")
    for key in ("step_time_s", "combined_s"):
        if row.get(key) is not None:
            parts.append(f"{key}={row[key]:.4g}")
    parts.append(f"({seconds:.1f} s)")
    print(" ".join(parts), file=sys.stderr, flush=True)


def run_points(p: SweepParams, points: list[tuple[str, dict, ModelConfig, str]], timing: bool) -> list[dict]:
    """Measure each (label, extra columns, cfg, policy) in order, logging one line per point."""
    rows = []
    for i, (label, extra, cfg, policy) in enumerate(points, 1):
        start = time.perf_counter()
        row = {**extra, **point(p, cfg, policy, timing)}
        log(p, i, len(points), label, row, time.perf_counter() - start)
        rows.append(row)
    return rows


def frame(p: SweepParams, rows: list[dict], **extra) -> pd.DataFrame:
    """The tidy table: rows + sweep and protocol columns (``extra`` too) + provenance (with_provenance)."""
    protocol = {"sweep": p.NAME, "threads": p.threads if p.device == "cpu" else None, "warmup": p.warmup,
                "repeats": p.repeats, "flops_method": FLOPS_NOTE, "max_bytes": p.max_bytes, **extra}
    return with_provenance([{**row, **protocol} for row in rows], device=p.device, precision=p.precision(), seed=p.seed)


def overheads(rows: list[dict], reference: dict | None, column: str = "step_time_s") -> None:
    """In place: time_overhead (``column`` / the reference row's − 1; NaN where either is missing) and
    time_per_flop_overhead (time_overhead / flop_overhead; NaN where flop_overhead is 0 or missing)."""
    ref = reference.get(column) if reference and reference.get("status") == "ok" else None
    for row in rows:
        t = row.get(column)
        row["time_overhead"] = t / ref - 1 if (t is not None and ref) else math.nan
        flop = row.get("flop_overhead")
        row["time_per_flop_overhead"] = (row["time_overhead"] / flop if flop and not math.isnan(row["time_overhead"])
                                         else math.nan)
