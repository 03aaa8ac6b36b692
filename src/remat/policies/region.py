"""What a checkpointed region's recompute must see: the state its forward saw. The forward and recompute contexts
that remat.policies.checkpointed hands torch.utils.checkpoint (``context_fn``).

Forward (``ForwardWatch``), when the region starts: the values of its small buffers and BatchNorm running
statistics, the states of the ``torch.Generator`` objects its modules own, each module's training flag, the
versions of its parameters and buffers; when it ends: which buffers it wrote, and which tensors its modules hold
(``torch.func.functional_call`` swaps them in only for the forward).

Recompute (``Recompute``), before the region re-runs: a parameter or buffer written in place since the forward
(an optimizer step before backward) or during it (``nn.Embedding(max_norm=...)``) is refused with a
RecomputeError naming it; tensors the forward's modules held are swapped back in; buffers the forward wrote go
back to their values at its start (a spectral norm's power iteration, an EMA statistic read after its update),
owned generators to their states, modules to their training flags; ``recomputing()`` is True and the factories
``observe_recompute`` registered (FLOP counters, op recorders) are entered. Afterwards everything is put back as
it was before the recompute, so a buffer updates once per step. An error raised while the region re-runs is
re-raised as a RecomputeError naming the region.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Callable, Sequence

import torch
from torch import nn
from torch.utils.checkpoint import CheckpointError

from remat.errors import RecomputeError
from remat.units import KiB

SNAPSHOT_BYTES = 256 * KiB
"""Buffers up to this size are copied when a region's forward starts (BatchNorm statistics always): a larger
buffer the forward writes cannot be given back to the recompute, which is refused instead."""

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


def _version(t: torch.Tensor) -> int:
    """Autograd's version counter (0 for an inference tensor, which has none and cannot be written in
    autograd anyway)."""
    return 0 if t.is_inference() else t._version


def _running_stats(modules: Sequence[nn.Module]) -> set[int]:
    """ids of the running statistics of BatchNorm-family modules (updated by their kernel without a version
    bump, never read in training)."""
    return {id(b) for region in modules for m in region.modules()
            if isinstance(m, nn.modules.batchnorm._NormBase) and m.track_running_stats
            for b in (m.running_mean, m.running_var) if b is not None}


def _slots(modules: Sequence[nn.Module]) -> list[tuple[str, nn.Module, dict, str]]:
    """(qualified name, module, its _parameters or _buffers, key) for every tensor slot of the region."""
    slots = []
    for i, region in enumerate(modules):
        prefix = f"[{i}]." if len(modules) > 1 else ""
        for path, module in region.named_modules(remove_duplicate=False):
            for table in (module._parameters, module._buffers):
                for key, t in table.items():
                    if t is not None:
                        slots.append((f"{prefix}{path + '.' if path else ''}{key}", module, table, key))
    return slots


class ForwardWatch:
    """Forward context of one region (module docstring)."""

    def __init__(self, modules: Sequence[nn.Module]):
        self.modules = modules

    def __enter__(self):
        slots, self.stats = _slots(self.modules), _running_stats(self.modules)
        self.start = {(id(table), key): (table[key], _version(table[key])) for _, _, table, key in slots}
        self.copies = {id(t): t.detach().clone() for _, module, table, key in slots for t in [table[key]]
                       if table is module._buffers
                       and (id(t) in self.stats or t.untyped_storage().nbytes() <= SNAPSHOT_BYTES)}
        self.training = [(m, m.training) for region in self.modules for m in region.modules()]
        self.generators = [(g, g.get_state()) for region in self.modules for m in region.modules()
                           for g in vars(m).values() if isinstance(g, torch.Generator)]

    def __exit__(self, *exc):
        """``held``: per slot (name, table, key, the tensor the recompute must see, its version now);
        ``written``: buffers the forward wrote in place; ``changed``: parameters it wrote in place."""
        self.held, self.written, self.changed = [], [], []
        for name, module, table, key in _slots(self.modules):
            t = table[key]
            start, version = self.start.get((id(table), key), (t, _version(t)))
            if start is not t:                      # replaced during the forward: recompute sees the first
                self.held.append((name, table, key, start, _version(start)))
                continue
            self.held.append((name, table, key, t, _version(t)))
            if table is module._buffers and (version != _version(t) or id(t) in self.stats):
                self.written.append((name, t))
            elif version != _version(t):
                self.changed.append(name)


class Recompute:
    """Recompute context of one region (module docstring); ``name``: the region's name in errors."""

    def __init__(self, watch: ForwardWatch, name: str):
        self.watch, self.name, self.factories = watch, name, list(_OBSERVERS)

    def __enter__(self):
        self._check()
        _state.depth = getattr(_state, "depth", 0) + 1
        watch = self.watch
        self.slots = [(table, key, table[key]) for _, table, key, _, _ in watch.held]
        for _, table, key, t, _ in watch.held:      # torch.func.functional_call's tensors, as in forward
            table[key] = t
        with torch.no_grad():
            self.after = [(t, t.detach().clone()) for _, t in watch.written]
            for _, t in watch.written:
                t.copy_(watch.copies[id(t)])
        self.generators = [(g, g.get_state()) for g, _ in watch.generators]
        for g, state in watch.generators:
            g.set_state(state)
        self.modes = [(m, m.training) for m, _ in watch.training]
        for m, training in watch.training:     # model.eval() before backward: recompute as forward ran
            m.training = training
        self.stack = contextlib.ExitStack()
        for factory in self.factories:
            self.stack.enter_context(factory())

    def _check(self) -> None:
        watch = self.watch
        if watch.changed:
            raise RecomputeError(self.name, f"{watch.changed[0]} was written in place during the forward (as "
                                            "nn.Embedding(max_norm=...) renormalises its weight): the recompute "
                                            "would write it again. Give this block policy none or offload")
        moved = [name for name, _, _, t, version in watch.held if _version(t) != version
                 and all(t is not w for _, w in watch.written)]
        if moved:
            raise RecomputeError(self.name, f"{moved[0]} was modified in place between forward and backward "
                                            "(an optimizer step or a weight update before backward?): the "
                                            "recompute would run on the new values and the gradients would "
                                            "differ. Run backward before changing the parameters")
        lost = [name for name, t in watch.written if id(t) not in watch.copies]
        if lost:
            raise RecomputeError(self.name, f"the forward wrote buffer {lost[0]}, larger than the "
                                            f"{SNAPSHOT_BYTES // KiB} KiB copied when a region starts: the recompute "
                                            "cannot start from its value. Give this block policy none or offload")

    def __exit__(self, kind, error, trace):
        self.stack.close()
        with torch.no_grad():
            for t, value in self.after:
                t.copy_(value)
        for table, key, t in self.slots:
            table[key] = t
        for g, state in self.generators:
            g.set_state(state)
        for m, training in self.modes:
            m.training = training
        _state.depth -= 1
        if isinstance(error, RuntimeError) and not isinstance(error, (RecomputeError, CheckpointError)):
            raise RecomputeError(self.name, f"the recompute in backward failed ({error}): the region ran "
                                            "differently than in forward — data-dependent shapes (token routing) "
                                            "or state that is not its inputs. Give it policy none or offload"
                                 ) from error
