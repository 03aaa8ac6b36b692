"""``predict``: one layer's predicted seconds — its ops traced under fake tensors (remat.timemodel.trace),
priced by the per-op roofline (remat.timemodel.roofline). ``remat.timemodel`` exports it (loaded on first use,
so that the GPU presets import no torch).
"""

from __future__ import annotations

import dataclasses

from remat.formulas.torch_gpt import itemsize
from remat.timemodel.roofline import LayerTimes, Rates, layer_times
from remat.timemodel.trace import trace_layer

__all__ = ["LayerTimes", "Rates", "expert_exchange_s", "predict"]


def predict(cfg, gpu, mode: str = "none", t: int | None = None, sp: bool = False,
            rates: Rates | None = None) -> LayerTimes:
    """Predicted seconds of one layer of ``cfg`` (ModelConfig; t defaults to cfg.tp) on one TP rank for one
    micro-batch under ``mode`` (none | selective | full), priced at ``gpu``'s rates for cfg.dtype and t
    (``Rates.of``), or at ``rates``.

    An MoE layer with expert parallelism (cfg.ep > 1) adds its all-to-all exchange (``expert_exchange_s``) to
    the forward, the backward and a full recompute, exposed (the experts wait for their rows).

    Raises UsageError naming the field for a t or SP the layer cannot take (remat.accounting.resolve).
    Source: remat.timemodel.trace + remat.timemodel.roofline."""
    t = cfg.tp if t is None else t
    times = layer_times(trace_layer(cfg, t, sp, mode), Rates.of(gpu, t, cfg.dtype) if rates is None else rates)
    if cfg.ep == 1:
        return times
    exchange = expert_exchange_s(cfg, gpu, t)
    add = lambda phase: dataclasses.replace(phase, total_s=phase.total_s + exchange, comm_s=phase.comm_s + exchange,
                                            exposed_comm_s=phase.exposed_comm_s + exchange)
    return LayerTimes(add(times.forward), add(times.backward),
                      add(times.recompute) if mode == "full" else times.recompute)


def expert_exchange_s(cfg, gpu, t: int = 1) -> float:
    """Seconds of one pass's expert-parallel exchange on one rank: the dispatch and the combine all-to-all of
    the k·s·b routed rows (h elements each, the model dtype), of which (ep − 1)/ep leave the rank, over NVLink
    when the t·ep GPUs fit one NVLink domain, else the scale-out link (``Rates.of``'s link, NCCL efficiency).
    Balanced routing is assumed (every rank sends and receives the same rows). A backward pass runs the same
    two all-to-alls on the gradients."""
    rows = cfg.top_k * cfg.seq * cfg.micro_batch
    message = rows * cfg.hidden * itemsize(cfg.dtype) * (cfg.ep - 1) / cfg.ep
    return 2 * message / Rates.of(gpu, t * cfg.ep, cfg.dtype).link_bytes_per_s
