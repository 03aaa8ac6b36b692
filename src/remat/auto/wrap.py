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

import copy
import functools
from collections.abc import Iterable, Mapping
from typing import Sequence

import torch
from torch import nn

from remat.auto.blocks import Blocks, find_blocks
from remat.auto.hf import cache_off_in_training, hf_checkpointing
from remat.auto.tensor_offload import offloaded_selective
from remat.drop_cheap import contexts as drop_cheap_contexts
from remat.errors import UsageError
from remat.planner.problem import POLICIES
from remat.policies import OffloadStats, _offloaded, checkpointed, drop_cheap

_ATTR = "_remat_auto"
_HF_TWICE = ("HuggingFace gradient checkpointing is on and would checkpoint every block again (recomputed twice, "
             "not the plan's memory or time): switch it off (model.activation_checkpointing_disable(), 4.x: "
             "gradient_checkpointing_disable())")


def apply(model: nn.Module, plan, blocks: str | Sequence[nn.Module] | None = None) -> tuple[str, ...]:
    """Wrap ``model``'s blocks by ``plan`` (an AutoPlan, or a sequence of policy names, one per block, or one
    name for every block), replacing an earlier ``apply``. Returns the per-block policies applied.

    ``blocks``: as remat.auto.find_blocks (default: the AutoPlan's blocks by name, else found). One module
    object at several depths (shared weights) is one block with one policy. A HuggingFace model trains with
    ``use_cache`` off (remat.auto.hf.CACHE_OFF, warned once), as remat.auto.plan measured it. Raises UsageError
    ("plan") for something else than a plan (None, a plan's JSON); UsageError("policy") for an unknown name, a
    list whose length differs from the blocks, or two policies for one shared module; UsageError("blocks") when
    an AutoPlan's blocks are not this model's; UsageError("model") when
    HuggingFace gradient checkpointing is on (it would checkpoint the blocks a second time).
    A block that recomputes other values than its forward (state outside its inputs, a context of the forward)
    raises one RecomputeError on its first steps (remat.policies.values: ``set_recompute_check``,
    ``recompute_context``; ``recomputing()`` for side effects).
    """
    if hf_checkpointing(model):
        raise UsageError("model", f"{_HF_TWICE} before auto.apply")
    found = find_blocks(model, blocks if blocks is not None else plan_blocks(plan))
    policies = _policies(plan, found)
    clear(model)
    stats = getattr(model, "remat_offload", None) or OffloadStats()
    model.remat_offload = stats
    wrapped = {}
    keeps = getattr(plan, "kept_sets", None) or (None,) * len(policies)
    for module, name, policy, keep in zip(found.modules, found.names, policies, keeps):
        if policy != "none" and id(module) not in wrapped:
            module.forward = _Forward(module, policy, stats, name, module.__dict__.get("forward"), keep)
            wrapped[id(module)] = module
    cache = cache_off_in_training(model)
    setattr(model, _ATTR, (found, policies, list(wrapped.values()), cache))
    return policies


class _Forward:
    """A block's forward under a policy, set on the instance over the forward it had (its class's, or one
    already set on the instance, as accelerate's hooks do; ``clear`` puts that one back). A copy of the model
    (copy.deepcopy: an EMA model, a trainer's copy; pickle, torch.save) gets a _Forward over its own copy of the
    block — a plain closure would keep running, and sending gradients to, the original's."""

    def __init__(self, module: nn.Module, policy: str, stats, name: str, previous=None, keep=None):
        self.module, self.policy, self.stats, self.name, self.previous = module, policy, stats, name, previous
        self.keep = keep
        self.run = wrapper(module, policy, stats, name, previous, keep)

    def __call__(self, *args, **kwargs):
        if getattr(self.module, "gradient_checkpointing", False) is True and self.module.training \
                and torch.is_grad_enabled():    # switched on after apply (transformers' layer flag)
            raise UsageError("model", f"{self.name}: {_HF_TWICE}, or remat.auto.clear(model) to train without "
                                      "the plan")
        return self.run(*args, **kwargs)

    def __deepcopy__(self, memo) -> "_Forward":
        return _Forward(copy.deepcopy(self.module, memo), self.policy, copy.deepcopy(self.stats, memo), self.name,
                        copy.deepcopy(self.previous, memo), self.keep)

    def __getstate__(self) -> dict:
        return {k: v for k, v in vars(self).items() if k != "run"}

    def __setstate__(self, state: dict) -> None:
        vars(self).update(state)
        self.run = wrapper(self.module, self.policy, self.stats, self.name, self.previous, self.keep)


def plan_blocks(plan):
    """The blocks an AutoPlan was made for: its container's name, or its blocks' qualified names (a plan made
    with ``blocks=[...]``); None for a plain list of policies."""
    return getattr(plan, "blocks", None) or getattr(plan, "block_names", None) or None


def wrapper(module: nn.Module, policy: str, stats=None, name: str = "", forward=None, keep=None):
    """``forward`` (default: ``module``'s class forward) run under ``policy`` (module docstring) — a callable to
    set as its forward. ``stats``: the remat.policies.OffloadStats that offload counts into (a new one when
    None); ``name``: the block's qualified name, in errors; ``keep``: for ``selective``, a
    remat.auto.tensors.KeptSet (a tensor plan's kept op outputs, and offloaded ones: remat.auto.tensor_offload)
    instead of drop-cheap's matmul outputs."""
    own = forward if forward is not None else functools.partial(type(module).forward, module)
    if policy == "full":
        return checkpointed(own, [module], name=name)
    if policy == "selective" and keep is not None and keep.offload:
        return offloaded_selective(own, module, keep, stats if stats is not None else OffloadStats(), name)
    if policy == "selective" and keep is not None:
        return checkpointed(own, [module], selective=lambda compiling=False: drop_cheap_contexts(
            compiling, keep.policy()), name=name)
    if policy == "selective":
        return drop_cheap(own, [module], name=name)
    if policy == "offload":
        return _offloaded(own, module, stats if stats is not None else OffloadStats(), name)
    raise UsageError("policy", f"unknown policy {policy!r} (known: {', '.join(POLICIES)})")


def clear(model: nn.Module) -> None:
    """Undo ``apply``: every wrapped block back to the forward it had (its class's, or one set on the instance)."""
    _, _, wrapped, cache = getattr(model, _ATTR, (None, None, [], None))
    for module in wrapped:
        current = module.__dict__.pop("forward", None)
        if isinstance(current, _Forward) and current.previous is not None:
            module.forward = current.previous
    if cache is not None:
        cache.remove()
    for name in (_ATTR, "remat_offload"):
        if name in model.__dict__:
            delattr(model, name)


def applied(model: nn.Module) -> tuple[Blocks, tuple[str, ...]] | None:
    """(blocks, policies) of the last ``apply`` on ``model``, or None."""
    state = getattr(model, _ATTR, None)
    return None if state is None else state[:2]


def _policies(plan, found: Blocks) -> tuple[str, ...]:
    names = getattr(plan, "policies", plan)
    if isinstance(names, str) and names not in POLICIES:
        shown = names if len(names) <= 40 else names[:40] + "…"
        raise UsageError("plan", f"{shown!r} is no policy (known: {', '.join(POLICIES)}); a plan's JSON text is not "
                                 "a plan: pass auto.plan's result, or its apply.policies")
    if isinstance(names, str):
        names = [names] * len(found)
    if isinstance(names, Mapping) or not isinstance(names, Iterable):
        raise UsageError("plan", f"an AutoPlan (auto.plan's result), a list of policy names or one name, not "
                                 f"{type(plan).__name__}" + (" (a plan's JSON? its apply.policies is the list)"
                                                             if isinstance(plan, Mapping) else ""))
    names = tuple(names)
    unknown = [n for n in names if n not in POLICIES]
    if unknown:
        raise UsageError("policy", f"unknown policy {unknown[0]!r} (known: {', '.join(POLICIES)})")
    expected = getattr(plan, "block_names", None)
    if expected is not None and tuple(expected) != found.names:
        raise UsageError("blocks", f"the plan is for blocks {_difference(tuple(expected), found.names)}")
    if len(names) != len(found):
        raise UsageError("policy", f"{len(names)} policies for {len(found)} blocks ({found.name or 'given'})")
    for group in found.shared():
        j, differing = group[0], [i for i in group if names[i] != names[group[0]]]
        if differing:
            i = differing[0]
            raise UsageError("policy", f"{found.names[j]} and {found.names[i]} are one module object (shared "
                                       f"weights) given {names[j]} and {names[i]}: a shared block takes one policy")
    return names


def _difference(expected: tuple, found: tuple) -> str:
    """Where two lists of block names part: "…, this model's are …" with the first position that differs."""
    if len(expected) != len(found):
        return f"{len(expected)} blocks ({expected[0]}…{expected[-1]}), this model has {len(found)}"
    i = next(i for i, (a, b) in enumerate(zip(expected, found)) if a != b)
    return (f"{expected[0]}…{expected[-1]}, this model's differ at position {i}: {expected[i]} in the plan, "
            f"{found[i]} here")
