"""Apply a per-block plan to any nn.Module in place: each block's ``forward`` replaced on the instance.

    auto.apply(model, result)                          # an AutoPlan from remat.auto.plan
    auto.apply(model, ["full"] * 10 + ["none"] * 14)   # or one policy name per block
    auto.clear(model)                                  # every block back to its class forward

Per block (the planner's POLICIES):
* ``none``      — untouched.
* ``full``      — the block under non-reentrant ``torch.utils.checkpoint`` (remat.policies.checkpointed): only
                  its inputs are kept, its forward re-runs in backward.
* ``selective`` — op-level selective checkpointing (torch's ``create_selective_checkpoint_contexts``,
                  remat.drop_cheap's policy): outputs of matmuls, convolutions and attention kernels are kept,
                  normalisation, activations and other pointwise ops are recomputed in backward.
* ``offload``   — the block's saved activations go to host memory through remat.offload.OffloadHooks
                  (pinned pool, side stream, prefetch); on a CPU device a host memcpy ("simulated").

Why this handles what real blocks take and return: non-reentrant checkpoint passes keyword arguments
(``attention_mask``, ``position_ids``, ``position_embeddings``, caches) through, returns any output structure
(tensors, tuples, dicts, dataclasses), works when no input requires grad (parameters still get gradients),
replays the dropout RNG (preserve_rng_state) and restores the autocast state in the recompute. Parameter
names, ``state_dict`` and module hooks are unchanged: nothing is wrapped in a new module.
"""

from __future__ import annotations

import functools
from typing import Sequence

from torch import nn

from remat.auto.blocks import Blocks, find_blocks
from remat.auto.hf import hf_checkpointing
from remat.errors import UsageError
from remat.planner.problem import POLICIES
from remat.policies import OffloadStats, _offloaded, checkpointed, drop_cheap

_ATTR = "_remat_auto"


def apply(model: nn.Module, plan, blocks: str | Sequence[nn.Module] | None = None) -> tuple[str, ...]:
    """Wrap ``model``'s blocks by ``plan`` (an AutoPlan, or a sequence of policy names, one per block, or one
    name for every block), replacing an earlier ``apply``. Returns the per-block policies applied.

    ``blocks``: as remat.auto.find_blocks (default: the AutoPlan's blocks, else found). Raises UsageError
    ("policy") for an unknown name or a plan whose length differs from the blocks, UsageError("blocks") when
    an AutoPlan's blocks are not this model's, UsageError("model") when HuggingFace gradient checkpointing is
    on (it would checkpoint the blocks a second time).
    """
    if hf_checkpointing(model):
        raise UsageError("model", "HuggingFace gradient checkpointing is on and would checkpoint every block "
                                  "again: switch it off (model.activation_checkpointing_disable(), 4.x: "
                                  "gradient_checkpointing_disable()) before auto.apply")
    found = find_blocks(model, blocks if blocks is not None else getattr(plan, "blocks", None))
    policies = _policies(plan, found)
    clear(model)
    stats = getattr(model, "remat_offload", None) or OffloadStats()
    model.remat_offload = stats
    wrapped = []
    for module, policy in zip(found.modules, policies):
        if policy != "none":
            module.forward = wrapper(module, policy, stats)
            wrapped.append(module)
    setattr(model, _ATTR, (found, policies, wrapped))
    return policies


def wrapper(module: nn.Module, policy: str, stats=None):
    """``module``'s class forward run under ``policy`` (module docstring) — a callable to set as its forward.
    ``stats``: the remat.policies.OffloadStats that offload counts into (a new one when None)."""
    own = functools.partial(type(module).forward, module)
    if policy == "full":
        return checkpointed(own, [module])
    if policy == "selective":
        return drop_cheap(own, [module])
    if policy == "offload":
        return _offloaded(own, module, stats if stats is not None else OffloadStats())
    raise UsageError("policy", f"unknown policy {policy!r} (known: {', '.join(POLICIES)})")


def clear(model: nn.Module) -> None:
    """Undo ``apply``: every wrapped block back to its class forward."""
    _, _, wrapped = getattr(model, _ATTR, (None, None, []))
    for module in wrapped:
        module.__dict__.pop("forward", None)
    for name in (_ATTR, "remat_offload"):
        if name in model.__dict__:
            delattr(model, name)


def applied(model: nn.Module) -> tuple[Blocks, tuple[str, ...]] | None:
    """(blocks, policies) of the last ``apply`` on ``model``, or None."""
    state = getattr(model, _ATTR, None)
    return None if state is None else state[:2]


def _policies(plan, found: Blocks) -> tuple[str, ...]:
    names = getattr(plan, "policies", plan)
    if isinstance(names, str):
        names = [names] * len(found)
    names = tuple(names)
    unknown = [n for n in names if n not in POLICIES]
    if unknown:
        raise UsageError("policy", f"unknown policy {unknown[0]!r} (known: {', '.join(POLICIES)})")
    if len(names) != len(found):
        raise UsageError("policy", f"{len(names)} policies for {len(found)} blocks ({found.name or 'given'})")
    expected = getattr(plan, "block_names", None)
    if expected is not None and tuple(expected) != found.names:
        raise UsageError("blocks", f"the plan is for blocks {expected[0]}…{expected[-1]}, this model's are "
                                   f"{found.names[0]}…{found.names[-1]}")
    return names
