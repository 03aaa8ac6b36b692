"""Chen et al. 2016 §4.2 "drop cheap ops" as a torch op-level selective-checkpoint policy.

    forward = drop_cheap(module.forward, [module])         # any callable over any modules
    wrap(module)                                           # or: module.forward replaced on the instance
    apply_plan(gpt, "drop-cheap")                          # or: per layer, through remat.policies

Chen §4.2: keep the results of the expensive operators (convolutions, matrix products) and drop the cheap
ones (batch norm, activations, pooling), recomputing them in backward. Here an op is *kept* exactly when torch's
FLOP counter counts it (``is_kept``: the scope of remat.measure.flops — convolution, mm, addmm, bmm, baddbmm,
the attention kernels): torch.utils.checkpoint.create_selective_checkpoint_contexts caches its outputs
(CheckpointPolicy.MUST_SAVE); every other op is PREFER_RECOMPUTE. The region runs under the package's one
checkpoint wrapper (remat.policies.checkpointed: non-reentrant, RNG replayed, BatchNorm running statistics
restored after the recompute so they update once per step).

Measuring it like the other policies:
* saved bytes — SAC keeps its outputs in its own cache, which saved-tensor hooks never see. ``KeptLog``
  records them from the policy function (``ctx.op_output``): unique storages, int bytes. ``saved_bytes``
  adds them to what autograd saves (remat.measure.saved.SavedTensorLog: the checkpoint inputs and everything
  saved outside checkpointed regions), each storage once.
* recompute FLOPs — remat.measure.flops counts matmul-like ops only; drop-cheap recomputes none of them
  (the cache serves them, below the FLOP counter), so its registry count is 0. ``ElementwiseOps`` counts
  the cheap work that is recomputed, by a stated convention: one FLOP per floating-point output element of
  every op outside the FLOP registry (views excluded). It is a count, not a roofline.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Callable, Sequence

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts
from torch.utils.flop_counter import flop_registry

from remat.measure.flops import FORMULAS, RecomputeTally
from remat.policies import checkpointed

_LOGS: list["KeptLog"] = []


def is_kept(func) -> bool:
    """True for the ops drop-cheap keeps: those torch's FLOP counter counts (torch.utils.flop_counter's
    registry plus remat.measure.flops.FORMULAS — convolution, mm, addmm, bmm, baddbmm, SDPA kernels)."""
    packet = getattr(func, "overloadpacket", func)
    return packet in flop_registry or packet in FORMULAS


def policy(ctx, func, *args, **kwargs) -> CheckpointPolicy:
    """The selective-checkpoint policy (torch.utils.checkpoint.create_selective_checkpoint_contexts'
    policy_fn): MUST_SAVE for ``is_kept`` ops, whose outputs active KeptLogs record, PREFER_RECOMPUTE else."""
    if not is_kept(func):
        return CheckpointPolicy.PREFER_RECOMPUTE
    for log in _LOGS:
        log.record(func, ctx.op_output)
    return CheckpointPolicy.MUST_SAVE


def contexts() -> tuple:
    """A fresh (forward, recompute) context pair of torch's selective checkpointing under ``policy``."""
    return create_selective_checkpoint_contexts(policy)


def drop_cheap(fn: Callable, modules: Sequence[nn.Module], early_stop: bool = False) -> Callable:
    """``fn`` under drop-cheap: one non-reentrant checkpoint whose recompute re-runs only the cheap ops.

    ``modules``: the modules ``fn`` runs (their BatchNorm running statistics are restored after the
    recompute). Shapes and results are ``fn``'s; gradients equal the plain run's bit for bit on
    deterministic kernels. Source: Chen et al. 2016 §4.2; torch.utils.checkpoint.checkpoint(
    use_reentrant=False, context_fn=create_selective_checkpoint_contexts(policy)).
    """
    return checkpointed(fn, modules, early_stop, selective=contexts)


def wrap(module: nn.Module, early_stop: bool = False) -> nn.Module:
    """``module`` with its forward run under ``drop_cheap`` (instance attribute: parameter names, state
    dicts and hooks unchanged; ``unwrap`` undoes it). Returns the same module."""
    module.forward = drop_cheap(functools.partial(type(module).forward, module), [module], early_stop)
    return module


def unwrap(module: nn.Module) -> nn.Module:
    """Undo ``wrap``: ``module`` back to its class forward."""
    module.__dict__.pop("forward", None)
    return module


# --- saved bytes -----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class KeptRecord:
    """One output kept by the SAC cache: the op ("convolution", "addmm", ...), shape, dtype, storage bytes."""

    op: str
    shape: tuple
    dtype: str
    storage: int
    nbytes: int


class KeptLog:
    """Context manager recording every tensor drop-cheap's SAC cache keeps while it is active.

    ``records``: one KeptRecord per unique storage (int bytes of the whole storage, like SavedTensorLog);
    ``total_bytes()``: their sum. Works with real and fake tensors. Source: torch.utils.checkpoint's
    SelectiveCheckpointContext.op_output (the policy sees each op's output as it is cached).
    """

    def __init__(self):
        self.records: list[KeptRecord] = []
        self._seen: set[int] = set()

    def __enter__(self) -> "KeptLog":
        _LOGS.append(self)
        return self

    def __exit__(self, *exc) -> None:
        _LOGS.remove(self)

    def record(self, func, out) -> None:
        for t in tree_flatten(out)[0]:
            if not isinstance(t, torch.Tensor):
                continue
            storage = t.untyped_storage()
            if storage._cdata in self._seen:
                continue
            self._seen.add(storage._cdata)
            self.records.append(KeptRecord(func.overloadpacket.__name__, tuple(int(d) for d in t.shape),
                                           str(t.dtype), storage._cdata, int(storage.nbytes())))

    def total_bytes(self) -> int:
        """Bytes kept by the SAC cache: each storage once (int bytes)."""
        return sum(r.nbytes for r in self.records)


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
    from remat.measure.saved import SavedTensorLog
    with SavedTensorLog(model) as log, KeptLog() as kept:
        out = forward()
    return SavedBytes(autograd=log.total_bytes(), kept=cache_bytes(log, kept)), out


def cache_bytes(log, kept: "KeptLog") -> int:
    """Bytes of the selective-checkpoint cache (``kept``) in storages the SavedTensorLog ``log`` did not
    already count: what SAC keeps beyond autograd's saved tensors."""
    autograd = {r.address for r in log.activations()}
    return sum(r.nbytes for r in kept.records if r.storage not in autograd)


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