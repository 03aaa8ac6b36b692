"""The roofline time model checked against measurement on this machine: the torch GPT layer's forward and
backward time, predicted from its trace and three measured rates, beside the time measured.

    remat experiment sweep-time-model --params '{"hiddens": [256]}' --out results/sweeps/time-model/cpu.csv

Per size (h in ``hiddens``, s, b) and mode (none / selective / full):

* predicted — the layer traced under FakeTensorMode at these sizes and dtype (``remat.timemodel.trace``),
  priced by the roofline (``remat.timemodel.roofline``) at rates measured here first
  (``remat.measure.rates``: torch.mm FLOP/s, copy bandwidth, per-op dispatch overhead);
* measured — the same layers run for real (``remat.experiments.layer_timing.layer_runner``): forward, and
  forward + backward with a fixed upstream gradient, timed by the one timing protocol in the same
  interleaved rounds as the rate microbenchmarks (a load change hits both alike); backward = combined −
  forward (medians).

One row per size × mode × phase (forward, backward, combined): predicted_s, measured_s, error
(predicted / measured − 1), and the recompute overhead (combined / combined of none − 1) predicted and
measured. Parameters: ``TimeModelParams`` (config.yaml ``sweeps.time-model``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Annotated, ClassVar

import pandas as pd

from remat.experiments.layer_timing import LayerTimingParams, layer_runner
from remat.experiments.params import Count, Ge, NonNegative
from remat.experiments.sweep_point import Repeats, frame
from remat.measure.rates import rate_steps
from remat.measure.timing import time_steps
from remat.timemodel.roofline import layer_times
from remat.timemodel.trace import trace_layer

PHASES = ("forward", "backward", "combined")


@dataclass(frozen=True)
class TimeModelParams(LayerTimingParams):
    """sweeps.time-model: the layer-timing setup at several hidden sizes, plus the rate microbenchmarks."""

    NAME: ClassVar[str] = "sweep-time-model"
    SECTION: ClassVar[str] = "sweeps.time-model"

    hiddens: list[Count] = field(default_factory=lambda: [256, 384])
    """h values, elements (one size per value)."""
    hidden: Count | None = None
    """Ignored: ``hiddens`` sets h."""
    warmup: NonNegative = 1
    """Untimed calls per step and round, before its timed ones."""
    repeats: Repeats = 5
    """Timed calls per step and round (≥ 5)."""
    rounds: Count = 2
    """Interleaved timing rounds (remat.measure.timing.time_steps): 2 of 5 pool 10 samples per step."""
    dropout: Annotated[float, Ge(0.0)] | None = 0.0
    """Dropout probability. 0 by default: on the CPU, dropout is ``bernoulli_`` (a random-number generator,
    compute-bound at a few ns per element) + ``mul`` — not a bandwidth-bound kernel as the fused Philox
    dropout on a GPU is — so a two-rate roofline cannot price it; set 0.1 to see the difference."""


def _predicted(cfg, mode: str, rates) -> dict[str, float]:
    lt = layer_times(trace_layer(cfg, 1, False, mode), rates)
    return {"forward": lt.forward_s, "backward": lt.backward_s, "combined": lt.combined_s}


def _measured(cfg, p: TimeModelParams):
    """(mode -> phase -> seconds per layer, mode -> phase -> IQR seconds per layer, Rates): the layers and the
    rate microbenchmarks timed in one interleaved run, so a load change on the machine hits both alike. Backward
    is combined − forward: a derived phase with no IQR of its own (NaN)."""
    steps, to_rates = rate_steps(p.device, cfg.dtype)
    for mode in p.modes:
        run = layer_runner(cfg, mode, p)
        steps[f"{mode} forward"], steps[f"{mode} combined"] = run.forward, run.combined
    t = time_steps(steps, p.device, rounds=p.rounds, repeats=p.repeats, warmup=p.warmup, threads=p.threads)
    per_layer = lambda name: t[name].median_s / p.layers
    measured = {mode: {"forward": per_layer(f"{mode} forward"), "combined": per_layer(f"{mode} combined"),
                       "backward": per_layer(f"{mode} combined") - per_layer(f"{mode} forward")}
                for mode in p.modes}
    iqr = {mode: {"forward": t[f"{mode} forward"].iqr_s / p.layers, "backward": float("nan"),
                  "combined": t[f"{mode} combined"].iqr_s / p.layers} for mode in p.modes}
    return measured, iqr, to_rates(t)


def time_model_sweep(p: TimeModelParams) -> pd.DataFrame:
    """Registry entry ``sweep-time-model`` (module docstring); seconds per layer."""
    start, rows = time.perf_counter(), []
    with p.threads_fixed():
        for h in p.hiddens:
            cfg = p.model_config(hidden=h, layers=p.layers)
            measured, iqr, rates = _measured(cfg, p)
            for mode in p.modes:
                predicted = _predicted(cfg, mode, rates)
                for phase in PHASES:
                    rows.append({"hidden": h, "seq": cfg.seq, "micro_batch": cfg.micro_batch, "heads": cfg.heads,
                                 "dropout": cfg.dropout, "mode": mode, "phase": phase, "status": "ok",
                                 "predicted_s": predicted[phase], "measured_s": measured[mode][phase],
                                 "measured_iqr_s": iqr[mode][phase],
                                 "error": predicted[phase] / measured[mode][phase] - 1,
                                 "flops_per_s": rates.flops_per_s, "memory_bytes_per_s": rates.memory_bytes_per_s,
                                 "op_overhead_s": rates.op_overhead_s, "rates_source": rates.source})
            print(f"[{p.NAME}] h={h} done ({time.perf_counter() - start:.1f} s)", flush=True)
    _overheads(rows)
    return frame(p, rows, rounds=p.rounds)


def _overheads(rows: list[dict]) -> None:
    """In place: predicted/measured overhead = combined / combined of none (same size) − 1, on the combined rows."""
    none = {r["hidden"]: r for r in rows if r["mode"] == "none" and r["phase"] == "combined"}
    for r in rows:
        ref = none.get(r["hidden"]) if r["phase"] == "combined" else None
        r["predicted_overhead"] = r["predicted_s"] / ref["predicted_s"] - 1 if ref else float("nan")
        r["measured_overhead"] = r["measured_s"] / ref["measured_s"] - 1 if ref else float("nan")
