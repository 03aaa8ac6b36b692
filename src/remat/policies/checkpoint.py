"""The package's one checkpoint wrapper (``checkpointed``: non-reentrant torch.utils.checkpoint with a recompute
context) and Chen §4.2's drop-cheap on top of it (``drop_cheap``, ``wrap``, ``unwrap``).

What the region's recompute sees and checks: remat.policies.region (the forward's state given back, or one
RecomputeError naming the region).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import warnings
from typing import Callable, Sequence

import torch
from torch import nn
from torch.utils._pytree import tree_flatten
from torch.utils.checkpoint import checkpoint

from remat.drop_cheap import contexts as drop_cheap_contexts
from remat.errors import RecomputeError
from remat.policies.region import ForwardWatch, Recompute, running_stat_tensors, version_of
from remat.policies.values import Compare, Record, Tally, check_for

# --- the region's contexts (torch.utils.checkpoint context_fn) -----------------------------------------------

def check_hooks_on(name: str, what: str) -> None:
    """RecomputeError naming the block when torch has switched saved-tensor hooks off (inside torch.func.grad,
    vjp, jacrev or hessian), which ``what`` ("recompute": a non-reentrant checkpoint; "offload") runs on: torch's
    own error names no block, and offload's hooks would meet torch.func's wrapped parameters first ("Cannot
    access storage of TensorWrapper"). Source: torch.autograd.graph.disable_saved_tensors_hooks (whether it is
    in force read through torch._C._autograd; a torch without that function: no check)."""
    read = getattr(torch._C._autograd, "_saved_tensors_hooks_get_disabled_error_message", None)
    if read is not None and read() is not None:
        done = "move to the host" if what == "offload" else "be dropped and recomputed in backward"
        raise RecomputeError(name, f"{what} runs on saved-tensor hooks, which torch has switched off here "
                                   f"(torch.func.grad, vjp, jacrev and hessian do), so the block's saved "
                                   f"activations cannot {done}. Give this block policy none while it runs "
                                   "under torch.func, or take the gradients with loss.backward()")


class _Stack:
    """Contexts entered as one, in order, re-enterable (a region recomputed twice: ``retain_graph=True``, a
    gradient penalty). ``inner``: entered last, and with ``once`` only the first time — torch's SAC cache is
    consumed by its first recompute; later recomputes re-run every op, which gives the same values."""

    def __init__(self, outer: Sequence, inner=None, once: bool = False):
        self.outer, self.inner, self.once, self.entries = list(outer), inner, once, 0

    def __enter__(self):
        self.entries += 1
        self.stack = contextlib.ExitStack()
        for context in self.outer:
            self.stack.enter_context(context)
        if self.inner is not None and not (self.once and self.entries > 1):
            self.stack.enter_context(self.inner)

    def __exit__(self, *exc):
        return self.stack.__exit__(*exc)


def _contexts(modules: Sequence[nn.Module], selective, name: str, tally: Tally | None = None) -> tuple:
    """(forward, recompute) contexts of one region: ours (watch, recompute), the value check's modes when this
    forward (``tally``: the region's counts; None: no graph recorded, nothing to recompute) is checked
    (remat.policies.values.check_for), then the selective pair innermost."""
    watch, check, sums = ForwardWatch(modules), check_for(tally), []
    forward, recompute = [watch], [Recompute(watch, name)]
    if check is not None:     # BatchNorm's statistics update again in the recompute, by design (region.py)
        stats = {t.untyped_storage()._cdata for t in running_stat_tensors([m for r in modules for m in r.modules()])}
        forward.append(Record(sums, stats))
        recompute.append(Compare(sums, check, name, stats, tally))
    if selective is None:
        return _Stack(forward), _Stack(recompute)
    sac_forward, sac_recompute = selective()
    return _Stack(forward, sac_forward), _Stack(recompute, sac_recompute, once=True)


SUPPORTED_TORCH = ((2, 11), (2, 13))
"""The torch releases remat runs on, first and last: 2.13 on the CPU (the pinned build, every test), 2.11 on the
GPU nodes (``make gpu``). Outside it a warning (``check_torch``); the one change known in the next release is
pinned below (``legacy_sac_hooks``)."""


def check_torch(version: str | None = None) -> str | None:
    """A warning's text when torch ``version`` (default: the installed one) is outside SUPPORTED_TORCH, else None;
    warns once per process when called without a version (remat.policies's import)."""
    release = tuple(int(part) for part in (version or torch.__version__).split("+")[0].split(".")[:2])
    first, last = SUPPORTED_TORCH
    if first <= release <= last:
        return None
    text = (f"remat supports torch {first[0]}.{first[1]}–{last[0]}.{last[1]}; this is torch "
            f"{version or torch.__version__}: recompute is checked as there, but the memory accounting assumes what "
            "those releases keep")
    if version is None:
        warnings.warn(text, stacklevel=3)
    return text


@functools.cache
def legacy_sac_hooks(run=checkpoint) -> dict:
    """Keyword arguments that keep torch's selective-checkpoint cache out of surrounding saved-tensor hooks where
    ``run`` (torch.utils.checkpoint.checkpoint) can route it through them: torch 2.14's
    ``respect_saved_tensors_hooks`` (pytorch #190581, #191236: a default that will flip). remat's accounting counts
    what the cache keeps apart from what autograd saves (remat.drop_cheap.KeptLog) and offloads only what its own
    hooks see, as torch 2.11–2.13 do; {} where ``run`` has no such argument. Read once per ``run``."""
    return {"respect_saved_tensors_hooks": False} if "respect_saved_tensors_hooks" in inspect.signature(
        run).parameters else {}


def checkpointed(fn: Callable, modules: Sequence[nn.Module], early_stop: bool = False,
                 selective: Callable[..., tuple] | None = None, name: str = "") -> Callable:
    """``fn`` run under non-reentrant torch.utils.checkpoint with the recompute context above.

    ``modules``: the region's modules (their mutated buffers are restored after each recompute; their other
    state must not change between forward and backward). ``selective``: optional factory of a (forward,
    recompute) context pair entered inside ours, e.g. torch.utils.checkpoint.create_selective_checkpoint_contexts
    (remat.drop_cheap.contexts; called with ``compiling=True`` under torch.compile); its recompute mode is the
    innermost, so outputs it serves from its cache never reach the recompute observers (FLOP counters).
    ``name``: the region's name in a RecomputeError. Under torch.compile the region is torch's own (no
    context but the selective pair): the compiled graph replays buffer updates once and checks nothing here.
    Source: torch.utils.checkpoint.checkpoint(use_reentrant=False, context_fn=...).
    """
    tally = Tally()     # forwards that record a graph, recomputes checked: the value check samples by them

    hooks = {} if selective is None else legacy_sac_hooks()   # read here, not where dynamo traces ``run``

    @functools.wraps(fn)
    def run(*args, **kwargs):
        if torch.compiler.is_compiling():   # torch's own region: the traced graph is recomputed as torch plans
            contexts = {} if selective is None else {"context_fn": functools.partial(selective, compiling=True),
                                                     **hooks}
            return checkpoint(fn, *args, use_reentrant=False, preserve_rng_state=True, **contexts, **kwargs)
        grad = torch.is_grad_enabled()
        if grad:
            check_hooks_on(name, "recompute")
            tally.forwards += 1
        inputs = [(t, version_of(t)) for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
        try:
            out = checkpoint(fn, *args, use_reentrant=False, preserve_rng_state=True,
                             context_fn=functools.partial(_contexts, modules, selective, name,
                                                          tally if grad else None),
                             early_stop=early_stop, **hooks, **kwargs)
        except RecomputeError as error:   # raised in forward by the region's guard: name the region
            if error.block or not name:
                raise
            raise RecomputeError(name, error.detail) from None
        if any(version_of(t) != version for t, version in inputs):
            raise RecomputeError(name, "the region writes its input in place (an in-place op such as "
                                       "nn.ReLU(inplace=True) first): the recompute needs the input as it was. "
                                       "Make that op out of place, or give this block policy none or offload")
        return out
    return run


# --- drop-cheap (Chen §4.2): the checkpoint above with remat.drop_cheap's op-level selective policy -------------

def drop_cheap(fn: Callable, modules: Sequence[nn.Module], early_stop: bool = False, name: str = "") -> Callable:
    """``fn`` under drop-cheap: one non-reentrant checkpoint whose recompute re-runs only the cheap ops.

    ``modules``: the modules ``fn`` runs (their BatchNorm running statistics are restored after the
    recompute). Shapes and results are ``fn``'s; gradients equal the plain run's bit for bit on
    deterministic kernels. Source: Chen et al. 2016 §4.2; torch.utils.checkpoint.checkpoint(
    use_reentrant=False, context_fn=create_selective_checkpoint_contexts(remat.drop_cheap.policy)).
    """
    return checkpointed(fn, modules, early_stop, selective=drop_cheap_contexts, name=name)


def wrap(module: nn.Module, early_stop: bool = False) -> nn.Module:
    """``module`` with its forward run under ``drop_cheap`` (instance attribute: parameter names, state
    dicts and hooks unchanged; ``unwrap`` undoes it). Returns the same module."""
    module.forward = drop_cheap(functools.partial(type(module).forward, module), [module], early_stop)
    return module


def unwrap(module: nn.Module) -> nn.Module:
    """Undo ``wrap``: ``module`` back to its class forward."""
    module.__dict__.pop("forward", None)
    return module
