"""Time, predicted: a per-op roofline model of a layer's forward, backward and recompute, the tensor-parallel
collectives, and the GPU presets (datasheet numbers) they are priced with.

    times = predict(from_name("gpt-22b"), gpu("a100-80gb"), mode="selective", t=8)
    times.forward_s, times.backward_s, times.recompute_s      # seconds, one layer, one micro-batch

Modules: ``gpus`` (presets: memory, peak FLOP/s, HBM, NVLink and host-link bandwidth, achievable fractions,
each with its source), ``trace`` (one layer's ops under FakeTensorMode: FLOPs, bytes, collectives),
``roofline`` (op seconds, Megatron's communication overlap, per-phase totals), ``layer`` (``predict``: trace +
roofline), ``paper`` (Korthikanti et al.
2022 Table 4, Figure 8 and Table 5: the paper's values and the model's predictions beside them).
"""

from __future__ import annotations

import typing

if typing.TYPE_CHECKING:
    from remat.timemodel.layer import predict
    from remat.timemodel.roofline import LayerTimes, Rates

__all__ = ["predict", "LayerTimes", "Rates"]


def __getattr__(name: str):
    """predict, LayerTimes and Rates on first use (remat.timemodel.layer)."""
    if name in ("predict", "LayerTimes", "Rates"):
        # lazy: importing remat.timemodel.gpus (the CLI's --gpu choices, the reports) must not import torch
        from remat.timemodel import layer
        return getattr(layer, name)
    raise AttributeError(f"module 'remat.timemodel' has no attribute {name!r}")
