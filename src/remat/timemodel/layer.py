"""``predict``: one layer's predicted seconds — its ops traced under fake tensors (remat.timemodel.trace),
priced by the per-op roofline (remat.timemodel.roofline). ``remat.timemodel`` exports it (loaded on first use,
so that the GPU presets import no torch).
"""

from __future__ import annotations

from remat.timemodel.roofline import LayerTimes, Rates, layer_times
from remat.timemodel.trace import trace_layer

__all__ = ["LayerTimes", "Rates", "predict"]


def predict(cfg, gpu, mode: str = "none", t: int | None = None, sp: bool = False,
            rates: Rates | None = None) -> LayerTimes:
    """Predicted seconds of one layer of ``cfg`` (ModelConfig; t defaults to cfg.tp) on one TP rank for one
    micro-batch under ``mode`` (none | selective | full), priced at ``gpu``'s rates for cfg.dtype and t
    (``Rates.of``), or at ``rates``.

    Raises UsageError naming the field for a t or SP the layer cannot take (remat.accounting.resolve).
    Source: remat.timemodel.trace + remat.timemodel.roofline."""
    t = cfg.tp if t is None else t
    rates = Rates.of(gpu, t, cfg.dtype) if rates is None else rates
    return layer_times(trace_layer(cfg, t, sp, mode), rates)
