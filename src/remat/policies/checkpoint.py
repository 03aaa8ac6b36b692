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
from torch.utils.checkpoint import CheckpointError, checkpoint

from remat.drop_cheap import contexts as drop_cheap_contexts
from remat.errors import RecomputeError
from remat.policies.values import Compare, Record, active_check

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
    """Forward context: notes which buffers of the region the forward mutates, the versions of the rest of its
    state (parameters and other buffers) when the forward ends, and each module's training flag.

    A buffer counts as mutated if its version counter moved (any in-place op through autograd) or if it is a
    BatchNorm-family running statistic.
    """

    def __init__(self, modules: Sequence[nn.Module]):
        self.modules, self.mutated, self.state = modules, [], []

    def __enter__(self):
        self.buffers = [b for m in self.modules for b in m.buffers()]
        self.versions = [b._version for b in self.buffers]
        self.training = [(m, m.training) for region in self.modules for m in region.modules()]

    def __exit__(self, *exc):
        moved = [b for b, v in zip(self.buffers, self.versions) if b._version != v]
        ids = {id(b) for b in moved}
        self.mutated = moved + [b for b in _running_stats(self.modules) if id(b) not in ids]
        ids |= {id(b) for b in self.mutated}
        self.state = [(name, t, t._version) for name, t in _named_state(self.modules) if id(t) not in ids]


def _named_state(modules: Sequence[nn.Module]) -> list[tuple[str, torch.Tensor]]:
    """(name, tensor) of every parameter and buffer of the region's modules, each tensor once."""
    seen, named = set(), []
    for i, module in enumerate(modules):
        prefix = f"[{i}]." if len(modules) > 1 else ""
        for name, t in [*module.named_parameters(), *module.named_buffers()]:
            if id(t) not in seen:
                seen.add(id(t))
                named.append((prefix + name, t))
    return named


class _Recompute:
    """Recompute context: checks the region's state is the forward's, sets recomputing(), runs the modules in
    the training mode they had in forward, restores mutated buffers and modes afterwards, enters observers, and
    names the region in an error raised while it re-runs."""

    def __init__(self, watch: _ForwardWatch, name: str):
        self.watch, self.name, self.factories = watch, name, list(_OBSERVERS)

    def __enter__(self):
        changed = [name for name, t, version in self.watch.state if t._version != version]
        if changed:
            raise RecomputeError(self.name, f"{changed[0]} was modified in place between forward and backward "
                                            "(an optimizer step or a weight update before backward?): the "
                                            "recompute would run on the new values and the gradients would "
                                            "differ. Run backward before changing the parameters")
        _state.depth = getattr(_state, "depth", 0) + 1
        self.saved = [b.detach().clone() for b in self.watch.mutated]
        self.modes = [(m, m.training) for m, _ in self.watch.training]
        for m, training in self.watch.training:     # model.eval() before backward: recompute as forward ran
            m.training = training
        self.stack = contextlib.ExitStack()
        for factory in self.factories:
            self.stack.enter_context(factory())

    def __exit__(self, kind, error, trace):
        self.stack.close()
        with torch.no_grad():
            for buffer, value in zip(self.watch.mutated, self.saved):
                buffer.copy_(value)
        for m, training in self.modes:
            m.training = training
        _state.depth -= 1
        if isinstance(error, RuntimeError) and not isinstance(error, (RecomputeError, CheckpointError)):
            raise RecomputeError(self.name, f"the recompute in backward failed ({error}): the region ran "
                                            "differently than in forward — data-dependent shapes (token routing) "
                                            "or state that is not its inputs. Give it policy none or offload"
                                 ) from error


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


def _contexts(modules: Sequence[nn.Module], selective, name: str) -> tuple:
    """(forward, recompute) contexts of one region: ours (watch, recompute), a ValueCheck's modes when one is
    active (remat.policies.values), then the selective pair innermost."""
    watch, check, sums = _ForwardWatch(modules), active_check(), []
    forward, recompute = [watch], [_Recompute(watch, name)]
    if check is not None:
        forward.append(Record(sums))
        recompute.append(Compare(sums, check, name))
    if selective is None:
        return _Stack(forward), _Stack(recompute)
    sac_forward, sac_recompute = selective()
    return _Stack(forward, sac_forward), _Stack(recompute, sac_recompute, once=True)


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
    @functools.wraps(fn)
    def run(*args, **kwargs):
        if torch.compiler.is_compiling():   # torch's own region: the traced graph is recomputed as torch plans
            contexts = {} if selective is None else {"context_fn": functools.partial(selective, compiling=True)}
            return checkpoint(fn, *args, use_reentrant=False, preserve_rng_state=True, **contexts, **kwargs)
        try:
            return checkpoint(fn, *args, use_reentrant=False, preserve_rng_state=True,
                              context_fn=functools.partial(_contexts, modules, selective, name),
                              early_stop=early_stop, **kwargs)
        except RecomputeError as error:   # raised in forward by the region's guard: name the region
            if error.block or not name:
                raise
            raise RecomputeError(name, error.detail) from None
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
