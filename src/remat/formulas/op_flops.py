"""Per-op FLOP formulas: torch.utils.flop_counter's registry plus the CPU fused-attention kernels it misses.

Fused attention is counted on every device: torch's registry lists the CUDA SDPA kernels (flash, efficient,
cuDNN) but not the CPU one, ``aten._scaled_dot_product_flash_attention_for_cpu`` (and its backward), which
is what ``F.scaled_dot_product_attention`` runs on the CPU and under FakeTensorMode. ``FORMULAS`` maps the CPU
kernels to torch's own formulas for the flash kernels (QKᵀ and ·V over the full s × s, 4bs²h forward —
Korthikanti's convention, no causal halving), without changing torch's global registry. Grouped GEMMs (the
experts of a mixture of experts: ``aten._grouped_mm``, which the registry misses too, and remat's
``remat::grouped_mm``, registered by remat.models.moe) count 2 FLOPs per multiply-add, ``grouped_mm_flops``.
The scope is matmul-like ops only (mm, addmm, bmm, baddbmm, SDPA, grouped GEMMs, convolution), as in
Korthikanti Appendix A.

Used by the step counters (remat.measure.flops), the graph tracers (remat.graph.trace,
remat.timemodel.trace) and drop-cheap's choice of kept ops (remat.drop_cheap.is_kept). The time model prices
what a FlashAttention kernel computes: ``attention_share`` scales a fused causal kernel's FLOPs by the share of
query–key pairs it attends (about half; s·w of s² for a sliding window w), while the counts stay Korthikanti's.
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


FUSED_ATTENTION = frozenset(f"_scaled_dot_product_{kernel}{suffix}" for suffix in ("", "_backward") for kernel in
                            ("flash_attention", "efficient_attention", "cudnn_attention", "flash_attention_for_cpu"))
"""Aten packet names of the fused attention kernels (forward and backward) whose FLOPs ``flop_count`` counts over
the full s × s."""


def attended_fraction(s: int, window: int | None = None) -> float:
    """Share of the s × s query–key pairs a causal attention computes: the pairs (i, j) with i − w < j ≤ i, for a
    window w (None: w = s, plain causal, (s + 1)/2s). A FlashAttention kernel skips the tiles above the diagonal
    (and, given the window, those outside it), so its FLOPs scale by this share; tiles cut by the diagonal are
    counted by their unmasked pairs (a tile-granular kernel does slightly more)."""
    w = s if window is None else min(window, s)
    return (w * (w + 1) // 2 + (s - w) * w) / (s * s)


def attention_share(func, args, kwargs, window: int | None = None) -> float:
    """The ``attended_fraction`` of one fused-attention op (``FUSED_ATTENTION``): is_causal -> causal; a mask or
    bias with a known sliding ``window`` -> that window; any other mask, or none, -> 1 (every pair)."""
    bound = {**dict(zip((a.name for a in func._schema.arguments), args)), **(kwargs or {})}
    s = bound["query"].shape[-2]
    if bound.get("attn_mask") is not None or bound.get("attn_bias") is not None:
        return 1.0 if window is None else attended_fraction(s, window)
    return attended_fraction(s) if bound.get("is_causal") else 1.0


def flop_count(func, args, kwargs, out) -> int:
    """FLOPs of one dispatched op (int; 0 for ops outside the registry's matmul-like scope).
    Source: torch.utils.flop_counter.flop_registry, plus ``FORMULAS``."""
    formula = FORMULAS.get(func.overloadpacket) or flop_registry.get(func.overloadpacket)
    return 0 if formula is None else int(formula(*args, **(kwargs or {}), out_val=out))
