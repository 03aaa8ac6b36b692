"""Chen et al. 2016 §4.2 "drop cheap ops" as a torch op-level selective-checkpoint policy.

    forward = remat.policies.drop_cheap(module.forward, [module])   # any callable over any modules
    remat.policies.wrap(module)                                      # or: module.forward replaced on the instance
    apply_plan(gpt, "drop-cheap")                                    # or: per layer, through remat.policies

Chen §4.2: keep the results of the expensive operators (convolutions, matrix products) and drop the cheap
ones (batch norm, activations, pooling), recomputing them in backward. Here an op is *kept* exactly when torch's
FLOP counter counts it (``is_kept``: the scope of remat.formulas.op_flops — convolution, mm, addmm, bmm,
baddbmm, the attention kernels): torch.utils.checkpoint.create_selective_checkpoint_contexts caches its outputs
(CheckpointPolicy.MUST_SAVE); every other op is PREFER_RECOMPUTE. This module is the policy (``policy``,
``contexts``); the region runs under the package's one checkpoint wrapper (remat.policies.checkpointed:
non-reentrant, RNG replayed, BatchNorm running statistics restored after the recompute so they update once per
step), which ``remat.policies.drop_cheap`` combines with it.

Measuring it like the other policies:
* saved bytes — SAC keeps its outputs in its own cache, which saved-tensor hooks never see. ``KeptLog``
  records them from the policy function (``ctx.op_output``): unique storages, int bytes. ``cache_bytes`` is
  what it keeps beyond autograd's saved tensors; remat.measure.drop_cheap.saved_bytes adds the two.
* recompute FLOPs — remat.measure.flops counts matmul-like ops only; drop-cheap recomputes none of them
  (the cache serves them, below the FLOP counter), so its registry count is 0. The cheap work that is
  recomputed is counted by remat.measure.drop_cheap (one FLOP per floating-point output element of every op
  outside the FLOP registry, views excluded): a count, not a roofline.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.utils._pytree import tree_flatten
from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts
from torch.utils.flop_counter import flop_registry

from remat.errors import RecomputeError
from remat.formulas.op_flops import FORMULAS

_LOGS: list["KeptLog"] = []


def is_kept(func) -> bool:
    """True for the ops drop-cheap keeps: those torch's FLOP counter counts (torch.utils.flop_counter's
    registry plus remat.formulas.op_flops.FORMULAS — convolution, mm, addmm, bmm, baddbmm, SDPA kernels)."""
    packet = getattr(func, "overloadpacket", func)
    return packet in flop_registry or packet in FORMULAS


def policy(ctx, func, *args, **kwargs) -> CheckpointPolicy:
    """The selective-checkpoint policy (torch.utils.checkpoint.create_selective_checkpoint_contexts'
    policy_fn): MUST_SAVE for ``is_kept`` ops, whose outputs active KeptLogs record, PREFER_RECOMPUTE else."""
    if not is_kept(func):
        return CheckpointPolicy.PREFER_RECOMPUTE
    record_kept(func, ctx)
    return CheckpointPolicy.MUST_SAVE


def record_kept(func, ctx) -> None:
    """Tell the active KeptLogs that the SAC cache keeps ``ctx.op_output`` (the output of ``func``): every
    policy that returns MUST_SAVE in forward calls this, so its kept bytes can be measured. The context is read
    only while a KeptLog measures (a policy may be called with none, as remat.planner.trainers' check does)."""
    for log in _LOGS:
        log.record(func, ctx.op_output)


KEPT_WATCHERS: list = []
"""Callables told, in forward, of each op output a guarded cache keeps (the innermost only): the recompute serves it
from the cache and runs no op for it (remat.policies.values.Record drops it from what the recompute is matched
against)."""


class _Guarded:
    """``decide`` (default ``policy``; any policy_fn that calls ``record_kept`` for what it keeps) for one
    checkpointed region, refusing an in-place write into a kept output.

    SAC keeps a MUST_SAVE output by reference and serves it back in the recompute. An op that later writes
    into its storage in forward (``nn.ReLU(inplace=True)`` after a Linear, ``torch.selu_(x @ w)``) makes the
    recompute read the written values: torch's own check compares version counters and so misses a write
    through an ``_unsafe_view`` of a 3-D matmul (silently wrong gradients), and otherwise raises at backward
    without naming the op. This guard compares storages instead, at the write, in forward (the policy sees
    every op after it ran; a write into a kept storage is an op whose schema marks an argument written).
    """

    def __init__(self, decide=policy):
        self.decide = decide
        self.kept: dict[int, str] = {}   # storage key -> the op whose output it is

    def __call__(self, ctx, func, *args, **kwargs) -> CheckpointPolicy:
        if not ctx.is_recompute and self.kept and func._schema.is_mutable:
            self._check_writes(func, args, kwargs)
        decision = self.decide(ctx, func, *args, **kwargs)
        if decision == CheckpointPolicy.MUST_SAVE:
            if not ctx.is_recompute and KEPT_WATCHERS:
                KEPT_WATCHERS[-1](ctx.op_output)
            for t in tree_flatten(ctx.op_output)[0]:
                if isinstance(t, torch.Tensor):
                    self.kept[t.untyped_storage()._cdata] = func.overloadpacket.__name__
        return decision

    def _check_writes(self, func, args, kwargs) -> None:
        schema = func._schema
        values = dict(zip((a.name for a in schema.arguments), args)) | kwargs
        for arg in schema.arguments:
            value = values.get(arg.name)
            if arg.alias_info is None or not arg.alias_info.is_write or not isinstance(value, torch.Tensor):
                continue
            kept = self.kept.get(value.untyped_storage()._cdata)
            if kept is not None:
                raise RecomputeError("", f"selective recompute keeps the output of aten.{kept}, and "
                                         f"aten.{func.overloadpacket.__name__} then writes into it in place: the "
                                         "recompute would read the written values. Make that op out of place "
                                         "(inplace=False) or give this block policy full, offload or none")


def contexts(compiling: bool = False, decide=None) -> tuple:
    """A fresh (forward, recompute) context pair of torch's selective checkpointing under ``decide`` (default
    ``policy``; a factory's fresh policy_fn per region, e.g. remat.auto.tensors.KeptSet.policy()), guarded for
    one region (``_Guarded``: raises RecomputeError on an in-place write into a kept output). Under
    torch.compile (``compiling``) the plain policy: the traced graph is functional, so a write makes a new
    tensor and the kept one stays as it was."""
    decide = decide or policy
    return create_selective_checkpoint_contexts(decide if compiling else _Guarded(decide))


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


def cache_bytes(log, kept: "KeptLog") -> int:
    """Bytes of the selective-checkpoint cache (``kept``) in storages the SavedTensorLog ``log`` did not
    already count: what SAC keeps beyond autograd's saved tensors."""
    autograd = {r.address for r in log.activations()}
    return sum(r.nbytes for r in kept.records if r.storage not in autograd)
