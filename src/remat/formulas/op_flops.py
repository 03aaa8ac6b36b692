"""Per-op FLOP formulas: torch.utils.flop_counter's registry plus the CPU fused-attention kernels it misses.

Fused attention is counted on every device: torch's registry lists the CUDA SDPA kernels (flash, efficient,
cuDNN) but not the CPU one, ``aten._scaled_dot_product_flash_attention_for_cpu`` (and its backward), which
is what ``F.scaled_dot_product_attention`` runs on the CPU and under FakeTensorMode. ``FORMULAS`` maps the CPU
kernels to torch's own formulas for the flash kernels (QKᵀ and ·V over the full s × s, 4bs²h forward —
Korthikanti's convention, no causal halving), without changing torch's global registry. Grouped GEMMs (the
experts of a mixture of experts: ``aten._grouped_mm``, which the registry misses too, and remat's
``remat::grouped_mm``, registered by remat.models.moe) count 2 FLOPs per multiply-add, ``grouped_mm_flops``. The scope is matmul-like ops only (mm, addmm,
bmm, baddbmm, SDPA, grouped GEMMs, convolution), as in Korthikanti Appendix A.

Used by the step counters (remat.measure.flops), the graph tracers (remat.graph.trace,
remat.timemodel.trace) and drop-cheap's choice of kept ops (remat.drop_cheap.is_kept).
"""

from __future__ import annotations

import math

import torch
from torch.utils.flop_counter import flop_registry, shape_wrapper

_aten = torch.ops.aten


def grouped_mm_flops(a_shape, b_shape, *args, out_shape=None, **kwargs) -> int:
    """2·M·K·N of a grouped GEMM whatever splits the groups: a [M, K] · b [G, K, N] (rows of a split) ->
    [M, N]; a [K, M] · b [M, N] (M split, a weight gradient) -> [G, K, N]; a [G, M, K] · b [G, K, N] (batched);
    a [G, M, K] · b [K, N] (N split) -> [M, N]."""
    if len(a_shape) == 3 and len(b_shape) == 2:
        return 2 * a_shape[1] * a_shape[2] * b_shape[1]
    return 2 * math.prod(a_shape) * b_shape[-1]


FORMULAS = {
    _aten._scaled_dot_product_flash_attention_for_cpu: flop_registry[_aten._scaled_dot_product_flash_attention],
    _aten._scaled_dot_product_flash_attention_for_cpu_backward:
        flop_registry[_aten._scaled_dot_product_flash_attention_backward],
    _aten._grouped_mm: shape_wrapper(grouped_mm_flops),
}
"""Op packet -> FLOP formula for the ops torch's registry misses (the CPU fused-attention kernels, grouped GEMMs).
A model layer that defines its own op adds its formula here (remat.models.moe: ``remat::grouped_mm``)."""


def flop_count(func, args, kwargs, out) -> int:
    """FLOPs of one dispatched op (int; 0 for ops outside the registry's matmul-like scope).
    Source: torch.utils.flop_counter.flop_registry, plus ``FORMULAS``."""
    formula = FORMULAS.get(func.overloadpacket) or flop_registry.get(func.overloadpacket)
    return 0 if formula is None else int(formula(*args, **(kwargs or {}), out_val=out))
