"""Per-op FLOP formulas: torch.utils.flop_counter's registry plus the CPU fused-attention kernels it misses.

Fused attention is counted on every device: torch's registry lists the CUDA SDPA kernels (flash, efficient,
cuDNN) but not the CPU one, ``aten._scaled_dot_product_flash_attention_for_cpu`` (and its backward), which
is what ``F.scaled_dot_product_attention`` runs on the CPU and under FakeTensorMode. ``FORMULAS`` maps the CPU
kernels to torch's own formulas for the flash kernels (QKᵀ and ·V over the full s × s, 4bs²h forward —
Korthikanti's convention, no causal halving), without changing torch's global registry. The scope is
matmul-like ops only (mm, addmm, bmm, baddbmm, SDPA, convolution), as in Korthikanti Appendix A.

Used by the step counters (remat.measure.flops), the graph tracers (remat.graph.trace,
remat.timemodel.trace) and drop-cheap's choice of kept ops (remat.drop_cheap.is_kept).
"""

from __future__ import annotations

import torch
from torch.utils.flop_counter import flop_registry

_aten = torch.ops.aten
FORMULAS = {
    _aten._scaled_dot_product_flash_attention_for_cpu: flop_registry[_aten._scaled_dot_product_flash_attention],
    _aten._scaled_dot_product_flash_attention_for_cpu_backward:
        flop_registry[_aten._scaled_dot_product_flash_attention_backward],
}
"""Op packet -> FLOP formula for the ops torch's registry misses (the CPU fused-attention kernels)."""


def flop_count(func, args, kwargs, out) -> int:
    """FLOPs of one dispatched op (int; 0 for ops outside the registry's matmul-like scope).
    Source: torch.utils.flop_counter.flop_registry, plus ``FORMULAS``."""
    formula = FORMULAS.get(func.overloadpacket) or flop_registry.get(func.overloadpacket)
    return 0 if formula is None else int(formula(*args, **(kwargs or {}), out_val=out))
