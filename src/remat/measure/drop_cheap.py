"""Measuring Chen §4.2's drop-cheap (remat.drop_cheap) like the other policies: saved bytes with its
selective-checkpoint cache, and the cheap work its recompute re-runs.

* ``saved_bytes`` — what autograd saves (remat.measure.saved.SavedTensorLog: the checkpoint inputs and
  everything saved outside checkpointed regions) plus what the SAC cache keeps (remat.drop_cheap.KeptLog),
  each storage once (int bytes).
* ``ElementwiseOps`` / ``RecomputedElementwise`` — the cheap work recomputed, by a stated convention: one FLOP
  per floating-point output element of every op outside the FLOP registry (views excluded). A count, not a
  roofline.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from remat.drop_cheap import KeptLog, cache_bytes, is_kept
from remat.measure.flops import RecomputeTally
from remat.measure.saved import SavedTensorLog


# --- saved bytes -----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class SavedBytes:
    """Bytes held for backward after a forward (ints): ``autograd`` (SavedTensorLog: saved-tensor hooks,
    checkpoint inputs included, parameters excluded), ``kept`` (KeptLog: the SAC cache, storages not already
    in ``autograd``) and ``total`` = autograd + kept."""

    autograd: int
    kept: int

    @property
    def total(self) -> int:
        return self.autograd + self.kept


def saved_bytes(model: nn.Module, forward: Callable[[], torch.Tensor]) -> tuple[SavedBytes, torch.Tensor]:
    """Run ``forward()`` under SavedTensorLog(model) and KeptLog; returns (SavedBytes, its result).

    Every storage is counted once: a kept output that autograd also saves outside the region counts in
    ``autograd`` only. Call ``backward`` on the result afterwards as usual. Works under FakeTensorMode.
    """
    with SavedTensorLog(model) as log, KeptLog() as kept:
        out = forward()
    return SavedBytes(autograd=log.total_bytes(), kept=cache_bytes(log, kept)), out


# --- recomputed cheap work -------------------------------------------------------------------------------------

def elementwise_flops(func, out) -> int:
    """The cheap-op FLOP convention: floating-point output elements of an op outside torch's FLOP registry
    (1 FLOP per element written); 0 for ``is_kept`` ops, view ops and non-float outputs (int)."""
    if is_kept(func) or getattr(func, "is_view", False):
        return 0
    return sum(t.numel() for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor) and t.is_floating_point())


class ElementwiseOps(TorchDispatchMode):
    """Dispatch mode summing ``elementwise_flops`` of every op run inside it into ``total`` (int)."""

    def __init__(self):
        super().__init__()
        self.total = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.total += elementwise_flops(func, out)
        return out


class RecomputedElementwise(RecomputeTally):
    """``with RecomputedElementwise() as r:`` around a forward: ``r.total`` sums ``elementwise_flops`` over
    every recompute that forward's checkpoints run later in backward (remat.measure.flops.RecomputeTally)."""

    def __init__(self):
        super().__init__(ElementwiseOps)