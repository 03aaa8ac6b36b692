"""The package's one checkpoint wrapper (``checkpointed``: non-reentrant torch.utils.checkpoint with a recompute
context) and Chen §4.2's drop-cheap on top of it (``drop_cheap``, ``wrap``, ``unwrap``).

The recompute context sets ``recomputing()``, restores buffers the region mutated in forward (BatchNorm
running statistics) after each recompute, and enters the factories ``observe_recompute`` registered (FLOP
counters, op recorders) around every recompute.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from typing import Callable, Sequence

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from remat.drop_cheap import contexts as drop_cheap_contexts

# --- recompute context (torch.utils.checkpoint context_fn) ----------------------------------------------------

_state = threading.local()
_OBSERVERS: list[Callable[[], contextlib.AbstractContextManager]] = []


def recomputing() -> bool:
    """True while torch re-runs a checkpointed forward in backward (guard Python side effects with it)."""
    return getattr(_state, "depth", 0) > 0


@contextlib.contextmanager
def observe_recompute(factory: Callable[[], contextlib.AbstractContextManager]):
    """While active, every checkpoint a policy starts enters ``factory()`` around its recompute.

    Used by remat.measure.flops to count recompute FLOPs (a FlopCounterMode per recompute). The factory is
    captured when the checkpointed forward runs, so the recompute in backward uses it even if backward runs
    after this block ends.
    """
    _OBSERVERS.append(factory)
    try:
        yield
    finally:
        _OBSERVERS.remove(factory)


def _running_stats(modules: Sequence[nn.Module]) -> list[torch.Tensor]:
    """Running statistics of BatchNorm-family modules (their kernel updates them without a version bump)."""
    return [b for region in modules for m in region.modules()
            if isinstance(m, nn.modules.batchnorm._NormBase) and m.track_running_stats
            for b in (m.running_mean, m.running_var) if b is not None]


class _ForwardWatch:
    """Forward context: notes which buffers of the region the forward mutates.

    A buffer counts as mutated if its version counter moved (any in-place op through autograd) or if it is a
    BatchNorm-family running statistic.
    """

    def __init__(self, modules: Sequence[nn.Module]):
        self.modules, self.mutated = modules, []

    def __enter__(self):
        self.buffers = [b for m in self.modules for b in m.buffers()]
        self.versions = [b._version for b in self.buffers]

    def __exit__(self, *exc):
        moved = [b for b, v in zip(self.buffers, self.versions) if b._version != v]
        ids = {id(b) for b in moved}
        self.mutated = moved + [b for b in _running_stats(self.modules) if id(b) not in ids]


class _Recompute:
    """Recompute context: sets recomputing(), restores mutated buffers afterwards, enters observers."""

    def __init__(self, watch: _ForwardWatch):
        self.watch, self.factories = watch, list(_OBSERVERS)

    def __enter__(self):
        _state.depth = getattr(_state, "depth", 0) + 1
        self.saved = [b.detach().clone() for b in self.watch.mutated]
        self.stack = contextlib.ExitStack()
        for factory in self.factories:
            self.stack.enter_context(factory())

    def __exit__(self, *exc):
        self.stack.close()
        with torch.no_grad():
            for buffer, value in zip(self.watch.mutated, self.saved):
                buffer.copy_(value)
        _state.depth -= 1


def checkpointed(fn: Callable, modules: Sequence[nn.Module], early_stop: bool = False,
                 selective: Callable[[], tuple] | None = None) -> Callable:
    """``fn`` run under non-reentrant torch.utils.checkpoint with the recompute context above.

    ``modules``: the region's modules (their mutated buffers are restored after each recompute).
    ``selective``: optional factory of a (forward, recompute) context pair entered inside ours, e.g.
    torch.utils.checkpoint.create_selective_checkpoint_contexts (remat.drop_cheap); its recompute mode is the
    innermost, so outputs it serves from its cache never reach the recompute observers (FLOP counters).
    Source: torch.utils.checkpoint.checkpoint(use_reentrant=False, context_fn=...).
    """
    def contexts():
        watch = _ForwardWatch(modules)
        if selective is None:
            return watch, _Recompute(watch)
        forward, recompute = selective()
        return _nested(watch, forward), _nested(_Recompute(watch), recompute)

    @functools.wraps(fn)
    def run(*args, **kwargs):
        return checkpoint(fn, *args, use_reentrant=False, preserve_rng_state=True, context_fn=contexts,
                          early_stop=early_stop, **kwargs)
    return run


@contextlib.contextmanager
def _nested(outer: contextlib.AbstractContextManager, inner: contextlib.AbstractContextManager):
    with outer, inner:
        yield


# --- drop-cheap (Chen §4.2): the checkpoint above with remat.drop_cheap's op-level selective policy -------------

def drop_cheap(fn: Callable, modules: Sequence[nn.Module], early_stop: bool = False) -> Callable:
    """``fn`` under drop-cheap: one non-reentrant checkpoint whose recompute re-runs only the cheap ops.

    ``modules``: the modules ``fn`` runs (their BatchNorm running statistics are restored after the
    recompute). Shapes and results are ``fn``'s; gradients equal the plain run's bit for bit on
    deterministic kernels. Source: Chen et al. 2016 §4.2; torch.utils.checkpoint.checkpoint(
    use_reentrant=False, context_fn=create_selective_checkpoint_contexts(remat.drop_cheap.policy)).
    """
    return checkpointed(fn, modules, early_stop, selective=drop_cheap_contexts)


def wrap(module: nn.Module, early_stop: bool = False) -> nn.Module:
    """``module`` with its forward run under ``drop_cheap`` (instance attribute: parameter names, state
    dicts and hooks unchanged; ``unwrap`` undoes it). Returns the same module."""
    module.forward = drop_cheap(functools.partial(type(module).forward, module), [module], early_stop)
    return module


def unwrap(module: nn.Module) -> nn.Module:
    """Undo ``wrap``: ``module`` back to its class forward."""
    module.__dict__.pop("forward", None)
    return module
