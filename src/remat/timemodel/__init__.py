"""Time, predicted: a per-op roofline model of a layer's forward, backward and recompute, the tensor-parallel
collectives, and the GPU presets (datasheet numbers) they are priced with.

    times = predict(from_name("gpt-22b"), gpu("a100-80gb"), mode="selective", t=8)
    times.forward_s, times.backward_s, times.recompute_s      # seconds, one layer, one micro-batch

Modules: ``gpus`` (presets: memory, peak FLOP/s, HBM, NVLink and host-link bandwidth, achievable fractions,
each with its source), ``trace`` (one layer's ops under FakeTensorMode: FLOPs, bytes, collectives),
``roofline`` (op seconds, Megatron's communication overlap, per-phase totals), ``paper`` (Korthikanti et al.
2022 Table 4, Figure 8 and Table 5: the paper's values and the model's predictions beside them).
"""

from __future__ import annotations

import typing

if typing.TYPE_CHECKING:
    from remat.timemodel.roofline import LayerTimes, Rates

__all__ = ["predict", "LayerTimes", "Rates"]


def __getattr__(name: str):
    """LayerTimes and Rates on first use: importing ``remat.timemodel.gpus`` (the CLI's --gpu choices) must not
    import torch."""
    if name in ("LayerTimes", "Rates"):
        from remat.timemodel import roofline
        return getattr(roofline, name)
    raise AttributeError(f"module 'remat.timemodel' has no attribute {name!r}")


def predict(cfg, gpu, mode: str = "none", t: int | None = None, sp: bool = False,
            rates: "Rates | None" = None) -> "LayerTimes":
    """Predicted seconds of one layer of ``cfg`` (ModelConfig; t defaults to cfg.tp) on one TP rank for one
    micro-batch under ``mode`` (none | selective | full), priced at ``gpu``'s rates for cfg.dtype and t
    (``Rates.of``), or at ``rates``.

    Raises UsageError naming the field for a t or SP the layer cannot take (remat.accounting.resolve).
    Source: remat.timemodel.trace + remat.timemodel.roofline."""
    from remat.timemodel.roofline import Rates, layer_times
    from remat.timemodel.trace import trace_layer

    t = cfg.tp if t is None else t
    rates = Rates.of(gpu, t, cfg.dtype) if rates is None else rates
    return layer_times(trace_layer(cfg, t, sp, mode), rates)
