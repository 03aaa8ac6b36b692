"""Korthikanti Table 4 on the torch GPT model: forward, backward and combined time per layer for
none | selective | full, and the time overhead beside the FLOP-predicted overhead.

    remat experiment sweep-layer-timing --params '{"rounds": 1}' --out results/sweeps/layer-timing/cpu.csv

Only the transformer layers run (``Transformer.run_layers`` on x [s, b, h] that requires grad, so
activations are saved as in training), without embedding, head and loss. Every mode's forward and
combined (forward + backward with a fixed upstream gradient) are timed by the package's one timing protocol,
``remat.measure.timing.time_steps``: interleaved rounds, rotated order, warm-up per visit, median and IQR of
the pooled samples. Parameters: ``LayerTimingParams`` (config.yaml section ``sweeps.layer-timing``); the
shared ones and the row machinery are ``remat.experiments.sweep_point``'s.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, ClassVar

import pandas as pd
import torch

from remat.experiments.params import Count, NonNegative
from remat.experiments.sweep_point import Repeats, SweepParams, frame, guarded, log, overheads, sizes
from remat.formulas import korthikanti, torch_gpt
from remat.measure.flops import StepFlops, count_step_flops
from remat.measure.peak import PeakMemory
from remat.measure.timing import time_steps
from remat.models.presets import ModelConfig
from remat.models.transformer import build_model
from remat.policies import apply_plan


@dataclass(frozen=True)
class LayerTimingParams(SweepParams):
    """sweeps.layer-timing: the CPU model here has a layer large enough for its matmuls to dominate."""

    NAME: ClassVar[str] = "sweep-layer-timing"
    SECTION: ClassVar[str] = "sweeps.layer-timing"

    hidden: Count | None = 512
    """h, elements (the MLP width becomes 4h); None: the model's."""
    heads: Count | None = 8
    """a, attention heads; None: the model's."""
    seq: Count | None = 256
    """s, tokens per sequence; None: the model's."""
    warmup: NonNegative = 1
    """Untimed calls per step and round, before its timed ones."""
    repeats: Repeats = 5
    """Timed calls per step and round (≥ 5); 3 rounds pool 15 samples per step."""
    layers: Count = 1
    """L; times and FLOPs are reported per layer (totals / L)."""
    modes: list[torch_gpt.Mode] = field(default_factory=lambda: ["none", "selective", "full"])
    """Per-layer policies timed."""
    rounds: Count = 3
    """Interleaved timing rounds (remat.measure.timing.time_steps)."""


@dataclass
class LayerRunner:
    """The layers of one model under one mode, ready to time: ``forward()`` runs them on x [s, b, h];
    ``combined()`` runs forward and backward with a fixed upstream gradient. ``flops``: StepFlops of one
    forward + backward (totals for all layers, FlopCounterMode)."""

    forward: Callable[[], object]
    combined: Callable[[], object]
    flops: StepFlops
    peak_bytes: int = 0       # measured peak of the first combined step (remat.measure.peak.PeakMemory)
    peak_method: str = ""


def layer_runner(cfg: ModelConfig, mode: str, p: LayerTimingParams) -> LayerRunner:
    """Build ``cfg`` under ``mode`` on p.device (seeded), run one combined step and count its FLOPs
    (remat.measure.flops.count_step_flops). Each combined step sets the gradients to None first, so backward
    writes fresh gradients instead of accumulating (Korthikanti Table 4 times a layer, not accumulation)."""
    torch.manual_seed(p.seed)
    model = build_model(cfg, p.device)
    apply_plan(model, mode)
    x = torch.randn(cfg.seq, cfg.micro_batch, cfg.hidden, dtype=getattr(torch, cfg.dtype), device=p.device,
                    requires_grad=True)
    grad = torch.randn_like(x)

    def forward():
        model.run_layers(x)

    def combined():   # fresh gradients each step: a layer's time, without accumulating into .grad
        model.zero_grad(set_to_none=True)
        x.grad = None
        model.run_layers(x).backward(grad)

    with PeakMemory(p.device, model, x, grad) as mem:
        combined()
    return LayerRunner(forward, combined, count_step_flops(lambda: (model.run_layers(x) * grad).sum()),
                       mem.peak_bytes, mem.method)


def time_runners(runners: dict[str, LayerRunner], p: LayerTimingParams) -> dict[str, dict]:
    """Time every runner's forward and combined step together (remat.measure.timing.time_steps: p.rounds
    interleaved rounds of p.warmup untimed and p.repeats timed calls per step). Returns mode -> columns
    (seconds, totals for all layers): forward_s, forward_iqr_s, forward_samples, combined_s,
    combined_iqr_s, combined_samples, timing_method."""
    if not runners:
        return {}
    steps = {}
    for mode, run in runners.items():
        steps[f"{mode} forward"], steps[f"{mode} combined"] = run.forward, run.combined
    times = time_steps(steps, p.device, rounds=p.rounds, repeats=p.repeats, warmup=p.warmup, threads=p.threads)
    return {mode: {**times[f"{mode} forward"].columns("forward"), **times[f"{mode} combined"].columns("combined")}
            for mode in runners}


def layer_timing_sweep(p: LayerTimingParams) -> pd.DataFrame:
    """Registry entry ``sweep-layer-timing`` (Korthikanti Table 4): per mode, forward, backward (= combined −
    forward, medians) and combined seconds per layer, and the time overhead (combined / combined of none − 1,
    same run, interleaved rounds) beside the FLOP-predicted overhead: recompute / (forward + backward),
    counted (FlopCounterMode) and from Korthikanti Appendix A (``korthikanti.recompute_flops`` /
    3·``layer_forward_flops``). Times and FLOPs are per layer (totals / L). Memory: the measured peak of one
    combined step of the L layers (``peak_bytes``: torch.cuda.max_memory_allocated on a GPU, MemTracker on a
    CPU; ``peak_method``) beside the accounting's (``peak_bytes_accounted``: model state +
    ``torch_gpt.live_peak_bytes``, the budget ``guarded`` checks).
    """
    cfg = p.model_config(layers=p.layers)
    sz, L = sizes(cfg, p.device), p.layers
    s, b, h = cfg.seq, cfg.micro_batch, cfg.hidden
    state = torch_gpt.model_bytes(cfg, sz.stats_itemsize).state
    rows, runners = {}, {}
    with p.threads_fixed():
        for i, mode in enumerate(p.modes, 1):
            start = time.perf_counter()
            live = torch_gpt.live_peak_bytes(sz, torch_gpt.per_layer_units(L, mode), mode)
            built = guarded(p, state + live, lambda: {"runner": layer_runner(cfg, mode, p)})
            runner = built.pop("runner", None)
            row = {"mode": mode, "layers": L, "seq": s, "micro_batch": b, "hidden": h, "heads": cfg.heads,
                   "model": cfg.name, "vocab": cfg.vocab, "dropout": cfg.dropout, **built,
                   "flop_overhead_formula": korthikanti.recompute_flops(s, b, h, mode)
                                            / (3 * korthikanti.layer_forward_flops(s, b, h))}
            row["peak_bytes_accounted"] = state + live
            if runner is not None:
                runners[mode] = runner
                row.update(peak_bytes=runner.peak_bytes, peak_method=runner.peak_method)
                f = runner.flops
                row.update(flops_forward=f.forward // L, flops_backward=f.backward // L,
                           flops_recompute=f.recompute // L, flop_overhead=f.recompute / (f.forward + f.backward))
            log(p, i, len(p.modes), f"build {mode}", row, time.perf_counter() - start)
            rows[mode] = row
        for i, (mode, times) in enumerate(time_runners(runners, p).items(), 1):
            rows[mode].update({k: v / L if k.endswith("_s") else v for k, v in times.items()})
            rows[mode]["backward_s"] = rows[mode]["combined_s"] - rows[mode]["forward_s"]
            log(p, i, len(runners), f"timed {mode}", rows[mode], 0.0)
    overheads(list(rows.values()), rows.get("none"), column="combined_s")
    return frame(p, list(rows.values()), rounds=p.rounds)
