"""FLOPs of a training step — forward, backward, recompute — counted with torch.utils.flop_counter.

    counts = count_step_flops(lambda: lm_loss(model(tokens), targets))

Method: FlopCounterMode around the forward (per-module totals), torch's FLOP registry (the formulas
FlopCounterMode uses, ``RegistryFlops``) around ``loss.backward()`` and, through
``remat.policies.observe_recompute``, inside every recompute that the policies' checkpoints run in backward
("count inside recompute": torch.utils.checkpoint's context_fn recompute context). ``backward`` is the gradient work
alone (backward total minus recompute), so hardware FLOPs = forward + backward + recompute and model FLOPs = forward +
backward. FlopCounterMode counts matmul-like ops only (mm, addmm, bmm, baddbmm, SDPA, convolution) — the same scope
as Korthikanti Appendix A.

Fused attention is counted on every device: torch's registry misses the CPU SDPA kernel (so a Llama layer's
attention counted 0 FLOPs there); remat.formulas.op_flops.FORMULAS adds it, and every counter here
(``flop_count``, ``RegistryFlops``, the forward's FlopCounterMode) uses it, without changing torch's global
registry.
"""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass, field
from typing import Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode

from remat.formulas.op_flops import FORMULAS, flop_count
from remat.policies import observe_recompute

__all__ = ["FORMULAS", "RecomputeTally", "RegistryFlops", "StepFlopCounter", "StepFlops", "count_step_flops",
           "flop_count", "flop_counter_mode"]


def flop_counter_mode() -> FlopCounterMode:
    """torch's FlopCounterMode (per-module totals, no display) that also counts ``FORMULAS`` (its
    custom_mapping wraps plain shape formulas; ours are already wrapped, so they are passed unwrapped)."""
    return FlopCounterMode(display=False, custom_mapping={op: f.__wrapped__ for op, f in FORMULAS.items()})


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


class RegistryFlops(TorchDispatchMode):
    """Sums the FLOPs of every op in torch.utils.flop_counter's registry (exactly what FlopCounterMode
    counts) into ``total``, without FlopCounterMode's module tracker: that tracker registers grad hooks on
    every module input/output it sees, which during a recompute in backward keeps the recomputed activations
    alive until backward ends — it would change the peak being measured. Used for backward and recompute.
    """

    def __init__(self):
        super().__init__()
        self.total = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        self.total += flop_count(func, args, kwargs, out)
        return out


class RecomputeTally:
    """Sums ``mode_factory()``'s ``total`` (default RegistryFlops: FLOPs) over every recompute the policies'
    checkpoints run in backward: pass it to remat.policies.observe_recompute as the factory, or use
    ``with RecomputeTally(...) as r:`` around a forward and read ``r.total`` after its backward."""

    def __init__(self, mode_factory: Callable[[], TorchDispatchMode] | None = None):
        self.mode_factory = mode_factory or RegistryFlops
        self.total = 0

    @contextlib.contextmanager
    def __call__(self):
        with self.mode_factory() as mode:
            yield
        self.total += mode.total

    def __enter__(self) -> "RecomputeTally":
        self._observe = observe_recompute(self)
        self._observe.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._observe.__exit__(*exc)


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
        self._tally = RecomputeTally()
        self._fwd = flop_counter_mode()
        self._bwd_total = 0

    @contextlib.contextmanager
    def forward(self):
        with observe_recompute(self._tally), self._fwd:
            yield

    def backward(self, loss: torch.Tensor) -> None:
        with RegistryFlops() as bwd:
            loss.backward()
        self._bwd_total = bwd.total

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
