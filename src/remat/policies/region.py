"""What a checkpointed region's recompute must see: the state its forward saw. The forward and recompute contexts
that remat.policies.checkpointed hands torch.utils.checkpoint (``context_fn``).

Forward (``ForwardWatch``), when the region starts: autocast's cache of weight casts emptied (the recompute runs
in an autocast region of its own, which casts every weight again; a forward served from the cache — a second
micro-batch in one region — would run fewer ops, and torch's selective cache finds what it kept by counting
them); the values of its small persistent buffers (``_copied``), the states of the ``torch.Generator`` objects
its modules own and of Python's ``random`` and numpy's global generator, each module's training flag, the
versions of its parameters and buffers; when it ends: which buffers it wrote, and which tensors its modules hold
(``torch.func.functional_call`` swaps them in only for the forward).

Recompute (``Recompute``), before the region re-runs: a parameter or buffer written in place since the forward
(an optimizer step before backward) or during it (``nn.Embedding(max_norm=...)``) is refused with a
RecomputeError naming it; tensors the forward's modules held are swapped back in; buffers the forward wrote go
back to their values at its start (a spectral norm's power iteration, an EMA statistic read after its update),
owned generators, ``random`` and numpy's generator to their states (the recompute draws what the forward drew),
modules to their training flags; ``recomputing()`` is True, the factories ``observe_recompute`` registered (FLOP
counters, op recorders) and the contexts ``recompute_context`` captured are entered. Afterwards everything is
put back as it was before the recompute, so a buffer updates once per step and the program's later random draws
are as if no recompute ran. An error raised while the region re-runs (a RuntimeError from torch, an IndexError
from user code that runs differently there) is re-raised as a RecomputeError naming the region, the error its
cause (``_PASSED`` excepted).
"""

from __future__ import annotations

import contextlib
import random
import threading
from typing import Callable, Sequence

import numpy as np
import torch
from torch import nn
from torch.utils.checkpoint import _StopRecomputationError

from remat.device import is_out_of_memory
from remat.errors import RecomputeError, UsageError
from remat.units import KiB

SNAPSHOT_BYTES = 256 * KiB
"""Persistent buffers up to this size are copied when a region's forward starts (``_copied``): a buffer the
forward writes in place without such a copy (BatchNorm's statistics excepted) is refused at recompute."""

_PASSED = (RecomputeError, UsageError, _StopRecomputationError)
"""Errors a recompute lets through unwrapped: remat's own (naming the region already) and the one torch raises to
stop a recompute early (``early_stop``); torch.utils.checkpoint's CheckpointError is wrapped (it names no region)."""
_state = threading.local()
_OBSERVERS: list[Callable[[], contextlib.AbstractContextManager]] = []
_REPLAYS: list[Callable[[], contextlib.AbstractContextManager]] = []


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


@contextlib.contextmanager
def recompute_context(capture: Callable[[], contextlib.AbstractContextManager]):
    """While active, every checkpointed region calls ``capture()`` when its forward runs and enters the context it
    returns around that region's recompute in backward, so a context active in forward is active again when
    backward re-runs it (TransformerEngine's checkpoint does this for fp8_autocast; Megatron-LM #7538 is what
    happens without it). For example ``recompute_context(lambda: fp8_autocast(enabled=fp8_enabled()))``.
    Entered anew for each recompute of the region (``retain_graph``): return a context that can be re-entered
    when a region is recomputed twice. torch.autocast needs nothing: torch.utils.checkpoint replays it."""
    _REPLAYS.append(capture)
    try:
        yield
    finally:
        _REPLAYS.remove(capture)


def version_of(t: torch.Tensor) -> int:
    """Autograd's version counter (0 for an inference tensor, which has none and cannot be written in
    autograd anyway)."""
    return 0 if t.is_inference() else t._version


def _running_stats(modules: Sequence[nn.Module]) -> set[int]:
    """ids of the running statistics of BatchNorm-family modules (updated by their kernel without a version
    bump, never read by a forward in training: given back after the recompute, not before)."""
    return {id(b) for b in running_stat_tensors(modules)}


def running_stat_tensors(modules: Sequence[nn.Module]) -> list[torch.Tensor]:
    """The running statistics (running_mean, running_var, num_batches_tracked) of the BatchNorm-family modules
    among ``modules`` that track them."""
    return [b for m in modules if isinstance(m, nn.modules.batchnorm._NormBase) and m.track_running_stats
            for b in (m.running_mean, m.running_var, m.num_batches_tracked) if b is not None]


def _copied(module: nn.Module, table: dict, key: str, stats: set[int]) -> bool:
    """Whether a buffer is copied when its region's forward starts: state (persistent: in the state_dict, as a
    spectral norm's vectors or an EMA statistic) up to SNAPSHOT_BYTES, BatchNorm's statistics excepted. Masks
    and tables (non-persistent: derived, not state) are not, so they cost no memory."""
    t = table[key]
    return (table is module._buffers and id(t) not in stats and key not in module._non_persistent_buffers_set
            and t.untyped_storage().nbytes() <= SNAPSHOT_BYTES)


def _name(regions: Sequence[nn.Module], module: nn.Module, key: str) -> str:
    """The qualified name of ``module``'s tensor ``key`` within the region (for errors only: it walks names)."""
    for i, region in enumerate(regions):
        prefix = f"[{i}]." if len(regions) > 1 else ""
        for path, m in region.named_modules(remove_duplicate=False):
            if m is module:
                return f"{prefix}{path + '.' if path else ''}{key}"
    return key


def _host_rng() -> tuple:
    """The states of Python's ``random`` and numpy's global generator: a recompute draws what its forward drew, and
    the program's later draws are as if it had not run (torch's own generators: preserve_rng_state)."""
    return random.getstate(), np.random.get_state()


def _set_host_rng(state: tuple) -> None:
    random.setstate(state[0])
    np.random.set_state(state[1])


def _autocasting() -> bool:
    """Whether autocast is on for the CPU or the accelerator torch would use."""
    accelerator = torch.accelerator.current_accelerator() if torch.accelerator.is_available() else None
    return torch.is_autocast_enabled("cpu") or (accelerator is not None and torch.is_autocast_enabled(accelerator.type))


class ForwardWatch:
    """Forward context of one region (module docstring)."""

    def __init__(self, modules: Sequence[nn.Module]):
        self.modules = modules

    def __enter__(self):
        if _autocasting():
            torch.clear_autocast_cache()
        self.all = [m for region in self.modules for m in region.modules()]
        self.stats = _running_stats(self.all)
        self.slots = [(m, table, key) for m in self.all for table in (m._parameters, m._buffers)
                      for key, t in table.items() if t is not None]
        self.start = [(table[key], version_of(table[key])) for _, table, key in self.slots]
        self.copies = {id(table[key]): table[key].detach().clone() for m, table, key in self.slots
                       if _copied(m, table, key, self.stats)}
        self.training = [(m, m.training) for m in self.all]
        self.generators = [(g, g.get_state()) for m in self.all for g in vars(m).values()
                           if type(g) is torch.Generator]
        self.host_rng = _host_rng()
        self.replays = [capture() for capture in _REPLAYS]

    def __exit__(self, *exc):
        """``held``: per slot (module, table, key, the tensor the recompute must see, its version now);
        ``written``: (module, key, buffer) the forward wrote in place; ``changed``: (module, key) of parameters
        it wrote in place."""
        self.held, self.written, self.changed = [], [], []
        for (module, table, key), (start, version) in zip(self.slots, self.start):
            t = table.get(key)
            if t is None or start is not t:         # replaced during the forward: recompute sees the first
                self.held.append((module, table, key, start, version_of(start)))
                continue
            now = version_of(t)
            self.held.append((module, table, key, t, now))
            if table is module._buffers and (version != now or id(t) in self.stats):
                self.written.append((module, key, t))
            elif version != now:
                self.changed.append((module, key))

    def name(self, module: nn.Module, key: str) -> str:
        return _name(self.modules, module, key)


class Recompute:
    """Recompute context of one region (module docstring); ``name``: the region's name in errors."""

    def __init__(self, watch: ForwardWatch, name: str):
        self.watch, self.name, self.factories = watch, name, list(_OBSERVERS)

    def __enter__(self):
        self._check()
        self.stack = self._replayed()
        _state.depth = getattr(_state, "depth", 0) + 1
        watch = self.watch
        self.slots = []                              # torch.func.functional_call's tensors, as in forward
        for _, table, key, t, _ in watch.held:
            if table.get(key) is not t:
                self.slots.append((table, key, table.get(key)))
                table[key] = t
        with torch.no_grad():
            self.after = [(t, t.detach().clone()) for _, _, t in watch.written]
            for _, _, t in watch.written:
                if id(t) in watch.copies:
                    t.copy_(watch.copies[id(t)])
        self.generators = [(g, g.get_state()) for g, _ in watch.generators]
        for g, state in watch.generators:
            g.set_state(state)
        self.host_rng = _host_rng()
        _set_host_rng(watch.host_rng)
        self.modes = [(m, m.training) for m, training in watch.training if m.training != training]
        for m, _ in self.modes:                      # model.eval() before backward: recompute as forward ran
            m.__dict__["training"] = not m.training
        for factory in self.factories:
            self.stack.enter_context(factory())

    def _replayed(self) -> contextlib.ExitStack:
        """The contexts ``recompute_context`` captured in forward, entered (first, so that one which cannot be
        entered changes nothing); one that was entered before (a second recompute of the region) and cannot be
        again is a RecomputeError saying so."""
        stack = contextlib.ExitStack()
        try:
            for context in self.watch.replays:
                stack.enter_context(context)
        except Exception as error:
            stack.close()
            raise RecomputeError(self.name, f"the context recompute_context captured in forward could not be "
                                            f"entered for this recompute ({type(error).__name__}: {error}): the "
                                            "region is recomputed again (retain_graph, a gradient penalty) and a "
                                            "@contextmanager context enters once. Return a context that can be "
                                            "entered again (a class with __enter__ and __exit__)") from error
        return stack

    def _check(self) -> None:
        watch = self.watch
        if watch.changed:
            raise RecomputeError(self.name, f"{watch.name(*watch.changed[0])} was written in place during the "
                                            "forward (as nn.Embedding(max_norm=...) renormalises its weight): the "
                                            "recompute would write it again. Give this block policy none or offload")
        written = {id(t) for _, _, t in watch.written}
        moved = [(m, key) for m, _, key, t, version in watch.held if version_of(t) != version and id(t) not in written]
        if moved:
            raise RecomputeError(self.name, f"{watch.name(*moved[0])} was modified in place between forward and "
                                            "backward (an optimizer step or a weight update before backward?): the "
                                            "recompute would run on the new values and the gradients would "
                                            "differ. Run backward before changing the parameters")
        lost = [(m, key) for m, key, t in watch.written if id(t) not in watch.copies and id(t) not in watch.stats]
        if lost:
            raise RecomputeError(self.name, f"the forward wrote buffer {watch.name(*lost[0])} in place, which is "
                                            f"not copied when a region starts (non-persistent, or over "
                                            f"{SNAPSHOT_BYTES // KiB} KiB): the recompute cannot start from its "
                                            "value. Give this block policy none or offload")

    def __exit__(self, kind, error, trace):
        self.stack.close()
        with torch.no_grad():
            for t, value in self.after:
                t.copy_(value)
        for table, key, t in self.slots:
            table[key] = t
        for g, state in self.generators:
            g.set_state(state)
        _set_host_rng(self.host_rng)
        for m, training in self.modes:
            m.__dict__["training"] = training
        _state.depth -= 1
        if isinstance(error, Exception) and not isinstance(error, _PASSED):
            first = (str(error).strip().splitlines() or [""])[0]      # the whole message stays the cause's
            what = first if type(error) is RuntimeError else f"{type(error).__name__}: {first}"
            if is_out_of_memory(error):
                raise RecomputeError(self.name, f"the recompute in backward ran out of memory ({what}): it "
                                                "rebuilds the region's activations at the peak of backward. Give it "
                                                "policy none or offload, or plan with a smaller budget (remat.auto."
                                                "plan) so the recompute fits") from error
            raise RecomputeError(self.name, f"the recompute in backward failed ({what}): the region ran "
                                            "differently than in forward — data-dependent shapes (token routing), "
                                            "state that is not its inputs, or a context of the forward that "
                                            "backward lacks (fp8_autocast: remat.policies.recompute_context "
                                            "re-enters it). Give it policy none or offload") from error
