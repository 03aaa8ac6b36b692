"""FLOPs of a training step — forward, backward, recompute — counted with torch.utils.flop_counter.

    counts = count_step_flops(lambda: lm_loss(model(tokens), targets))

Method: one FlopCounterMode around the forward, one around ``loss.backward()``, and, through
``remat.policies.observe_recompute``, a fresh FlopCounterMode entered inside every recompute that the
policies' checkpoints run in backward ("count inside recompute": torch.utils.checkpoint's context_fn
recompute context). ``backward`` is the gradient work alone (backward total minus recompute), so
hardware FLOPs = forward + backward + recompute and model FLOPs = forward + backward.
FlopCounterMode counts matmul-like ops only (mm, addmm, bmm, baddbmm, SDPA, convolution) — the same scope
as Korthikanti Appendix A.
"""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass, field
from typing import Callable

import torch
from torch.utils.flop_counter import FlopCounterMode

from remat.policies import observe_recompute

@dataclass
class StepFlops:
    """FLOPs of one step (ints). forward_by_module: FlopCounterMode's per-module forward totals, keyed by
    qualified name relative to the model ("layers.0.attn.core"; "" = whole model)."""

    forward: int
    backward: int
    recompute: int
    forward_by_module: dict[str, int] = field(default_factory=dict)

    def forward_layers(self) -> int:
        """Forward FLOPs inside the transformer layers (``layers.<i>``), i.e. without the LM head."""
        return sum(v for k, v in self.forward_by_module.items() if re.fullmatch(r"layers\.\d+", k))


class _RecomputeTally:
    """Factory for observe_recompute: a FlopCounterMode per recompute, summed into ``total``."""

    def __init__(self):
        self.total = 0

    @contextlib.contextmanager
    def __call__(self):
        with FlopCounterMode(display=False) as mode:
            yield
        self.total += int(mode.get_total_flops())


def _by_module(mode: FlopCounterMode) -> dict[str, int]:
    """Per-module totals, names relative to the root ("Transformer.layers.0" -> "layers.0", root -> "")."""
    out = {}
    for name, counts in mode.get_flop_counts().items():
        if name != "Global":
            out[name.split(".", 1)[1] if "." in name else ""] = int(sum(counts.values()))
    return out


class StepFlopCounter:
    """Counts one step in two phases: ``with counter.forward(): loss = ...`` then ``counter.backward(loss)``.

    ``result()`` -> StepFlops. Composes with other dispatch modes (SavedTensorLog, MemTracker).
    """

    def __init__(self):
        self._tally = _RecomputeTally()
        self._fwd = FlopCounterMode(display=False)
        self._bwd_total = 0

    @contextlib.contextmanager
    def forward(self):
        with observe_recompute(self._tally), self._fwd:
            yield

    def backward(self, loss: torch.Tensor) -> None:
        with FlopCounterMode(display=False) as bwd:
            loss.backward()
        self._bwd_total = int(bwd.get_total_flops())

    def result(self) -> StepFlops:
        return StepFlops(forward=int(self._fwd.get_total_flops()), backward=self._bwd_total - self._tally.total,
                         recompute=self._tally.total, forward_by_module=_by_module(self._fwd))


def count_step_flops(forward: Callable[[], torch.Tensor]) -> StepFlops:
    """Run ``forward()`` (returns a scalar loss) and its backward, counting FLOPs; returns StepFlops.

    Works with real tensors and under FakeTensorMode. Gradients accumulate into ``.grad`` as in a normal
    step. Source: torch.utils.flop_counter.FlopCounterMode; remat.policies.observe_recompute.
    """
    counter = StepFlopCounter()
    with counter.forward():
        loss = forward()
    counter.backward(loss)
    return counter.result()
