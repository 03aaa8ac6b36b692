"""Per-layer activation policies and plans: none | selective | full | offload, and Megatron/Chen shorthands.

    plan = parse_plan("selective", layers=12)        # or "full", "offload", "uniform:2", "block:4",
    apply_plan(model, plan)                           #    "segments:3", "full,none,selective,..."

Policies (one per layer):
* ``none``      — autograd keeps everything it saves.
* ``full``      — the whole layer under ``torch.utils.checkpoint.checkpoint(use_reentrant=False)``: only its
                  input is kept; the layer's forward is re-run in backward (Korthikanti "full recompute").
* ``selective`` — only ``attn.core`` (Megatron's core_attn: QKᵀ, softmax, softmax dropout, ·V) is
                  checkpointed, so its inputs Q, K, V are kept and softmax output, dropout mask and dropout
                  output are not (exactly Korthikanti's selective saving, sbh·34 per layer at 16 bits).
                  Why not ``create_selective_checkpoint_contexts`` around the layer: what SAC keeps
                  (MUST_SAVE outputs) lives in its own cache, invisible to saved-tensor hooks, so the
                  accounting could not measure it; checkpointing the core module keeps exactly its inputs,
                  saved through autograd like any other tensor.
* ``offload``   — the layer runs under saved-tensor hooks that copy each saved activation (not parameters)
                  to a host buffer at pack time and back at unpack time: asynchronously, through the model's
                  remat.offload.OffloadHooks (pinned pool, side stream, prefetch). On a CPU device this is a
                  host memcpy: "simulated", not PCIe.
* ``drop-cheap`` — Chen 2016 §4.2: the layer under a checkpoint with an op-level selective policy
                  (``create_selective_checkpoint_contexts``, remat.drop_cheap): the outputs of matmul-like ops
                  (convolution, mm, addmm, bmm, baddbmm, attention kernels) are kept, every other op (norms,
                  activations, pooling, softmax, dropout, elementwise) is recomputed in backward. Runtime only:
                  the planner's options stay POLICIES (without drop-cheap), and what SAC keeps is invisible to
                  saved-tensor hooks, so its bytes are measured by remat.drop_cheap.KeptLog.

Shorthands (Megatron-LM recompute_method, Chen 2016):
* ``uniform:N``  — layers split into chunks of N, each chunk checkpointed as one unit (N = 1: per-layer full).
* ``block:N``    — the first N layers full, the rest none.
* ``segments:k`` — Chen's segments (``remat.formulas.chen.segment_sizes``: the first L mod k one layer
                   longer), every segment but the last checkpointed as one unit; k ≥ 2 (``segments:1`` would
                   checkpoint nothing and is a UsageError).

Recompute changes nothing: dropout RNG is replayed (preserve_rng_state), autocast state is restored by
checkpoint, buffers a region mutated in forward (BatchNorm running statistics) are restored after each
recompute, so they update once per step, and ``recomputing()`` lets forward code skip Python side effects
while torch re-runs it.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from dataclasses import dataclass, field
from typing import Callable, Iterator, Literal, Sequence, get_args

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from remat.errors import UsageError
from remat.formulas.chen import segment_bounds

Policy = Literal["none", "selective", "full", "offload"]
"""The per-layer recompute policies the planner chooses among (runtime and CLI accept RUNTIME_POLICIES)."""
POLICIES: tuple[str, ...] = get_args(Policy)
RUNTIME_POLICIES: tuple[str, ...] = POLICIES + ("drop-cheap",)
"""What ``parse_plan``/``apply_plan`` accept: POLICIES (the planner's options) plus Chen §4.2's drop-cheap."""
SHORTHANDS = ("uniform", "block", "segments")


# --- plans ---------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class LayerPolicies:
    """A model's per-layer policies, plus multi-layer checkpoint units: what ``apply_plan`` applies (the
    planner's solved plan, with its costs, is ``remat.planner.Plan``).

    policies: one of RUNTIME_POLICIES per layer; groups: half-open layer ranges [start, stop) of ≥ 2 layers
    checkpointed as one unit (their layers read "full"); spec: the text it was parsed from.
    Iterates, indexes and compares like the list of per-layer policies.
    """

    policies: tuple[str, ...]
    groups: tuple[tuple[int, int], ...] = ()
    spec: str = ""

    def __len__(self) -> int:
        return len(self.policies)

    def __iter__(self) -> Iterator[str]:
        return iter(self.policies)

    def __getitem__(self, i):
        return self.policies[i]

    def grouped(self) -> set[int]:
        """Indices of layers inside a multi-layer unit."""
        return {i for start, stop in self.groups for i in range(start, stop)}


def _count(text: str, lo: int, hi: int) -> int:
    """The N of "kind:N" as an int in [lo, hi]; UsageError("policy") otherwise."""
    try:
        n = int(text)
    except ValueError:
        raise UsageError("policy", f"{text!r} is not an integer") from None
    if not lo <= n <= hi:
        raise UsageError("policy", f"must be in [{lo}, {hi}] for a model of {hi} layers, got {n}")
    return n


def _units(layers: int, bounds: list[tuple[int, int]], spec: str) -> LayerPolicies:
    """LayerPolicies checkpointing each [start, stop) of ``bounds`` as one unit; the other layers none."""
    policies = ["none"] * layers
    for start, stop in bounds:
        policies[start:stop] = ["full"] * (stop - start)
    return LayerPolicies(tuple(policies), tuple(b for b in bounds if b[1] - b[0] > 1), spec)


def parse_plan(spec: str | Sequence[str], layers: int) -> LayerPolicies:
    """Parse a policy spec for a model of ``layers`` layers into a LayerPolicies.

    spec: a policy name (all layers), "uniform:N", "block:N", "segments:k", a comma-separated list of one
    policy per layer, or a sequence of policy names. Raises UsageError("policy") for an unknown name, a bad
    count (``segments:1``, which checkpoints nothing, included), or a list whose length is not ``layers``.
    Sources: Megatron-LM TransformerConfig.recompute_method (uniform, block); Chen et al. 2016 Alg. 1
    (segments, split by remat.formulas.chen.segment_sizes).
    """
    if isinstance(spec, LayerPolicies):
        return spec
    if not isinstance(spec, str):
        spec = ",".join(spec)
    text = spec.strip()
    kind, _, arg = text.partition(":")
    if kind in SHORTHANDS and arg:
        if kind == "block":    # Megatron block: the first N layers recomputed, one by one
            n = _count(arg, 0, layers)
            return LayerPolicies(tuple(["full"] * n + ["none"] * (layers - n)), (), text)
        if kind == "uniform":  # Megatron uniform: every chunk of N layers recomputed as one unit
            n = _count(arg, 1, layers)
            return _units(layers, [(s, min(s + n, layers)) for s in range(0, layers, n)], text)
        k = _count(arg, 1, layers)  # Chen segments (remat.formulas.chen.segment_bounds); the last one kept
        if k == 1:                  # one segment is the last one, kept: nothing would be checkpointed
            raise UsageError("policy", "segments:1 checkpoints nothing (Chen's last segment is kept, so one "
                                       "segment is policy none): use \"full\" to recompute every layer, or "
                                       "segments:k with k ≥ 2")
        return _units(layers, segment_bounds(layers, k)[:-1], text)
    names = [t.strip() for t in text.split(",")]
    for name in names:
        if name not in RUNTIME_POLICIES:
            raise UsageError("policy", f"unknown policy {name!r} (policies: {', '.join(RUNTIME_POLICIES)}; "
                                       "shorthands: uniform:N, block:N, segments:k)")
    if len(names) == 1:
        names = names * layers
    if len(names) != layers:
        raise UsageError("policy", f"{len(names)} per-layer policies for {layers} layers")
    return LayerPolicies(tuple(names), (), text)


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


# --- offload (synchronous) -------------------------------------------------------------------------------------

@dataclass
class OffloadStats:
    """Bytes the offload hooks copied to host since the last reset (int bytes); simulated on a CPU device.

    ``hooks``: the model's remat.offload.OffloadHooks (one per model: host pool, side stream, prefetch chain;
    its ``pool`` has the host accounting), made at the first offloaded forward.
    """

    bytes: int = 0
    tensors: int = 0
    simulated: bool = False
    hooks: object = field(default=None, repr=False, compare=False)

    def reset(self) -> None:
        self.bytes, self.tensors, self.simulated = 0, 0, False

    def __deepcopy__(self, memo) -> "OffloadStats":
        """A copy of the counts without the hooks (their host pool holds a lock and pinned buffers): a copied
        model (EMA, copy.deepcopy) makes its own hooks at its first offloaded forward."""
        return OffloadStats(self.bytes, self.tensors, self.simulated)


def _offloaded(fn: Callable, module: nn.Module, stats: OffloadStats) -> Callable:
    """``fn`` with its saved activations offloaded asynchronously by the model's shared
    remat.offload.OffloadHooks (pinned host pool, side stream, prefetch of the next layer in backward; views
    of one storage copied once); ``module``'s parameters and buffers stay. min_bytes=0: every activation
    moves. ``stats.bytes``/``tensors`` count the storages copied."""
    @functools.wraps(fn)
    def run(*args, **kwargs):
        from remat.offload import OffloadHooks
        device = next(module.parameters()).device
        if stats.hooks is None or stats.hooks.device.type != device.type:
            stats.hooks = OffloadHooks(device, min_bytes=0)
        hooks = stats.hooks
        hooks.keep_state(module)
        before = hooks.offloaded_bytes, hooks.copies
        with hooks.layer():
            out = fn(*args, **kwargs)
        stats.bytes += hooks.offloaded_bytes - before[0]
        stats.tensors += hooks.copies - before[1]
        stats.simulated = stats.simulated or device.type == "cpu"
        return out
    return run


# --- apply -----------------------------------------------------------------------------------------------------

def _own_forward(module: nn.Module) -> Callable:
    return functools.partial(type(module).forward, module)


def _core(layer: nn.Module) -> nn.Module:
    core = getattr(getattr(layer, "attn", None), "core", None)
    if not isinstance(core, nn.Module):
        raise UsageError("policy", f"selective recompute needs an attn.core submodule in {type(layer).__name__}")
    return core


def _set_forward(model: nn.Module, module: nn.Module, fn: Callable) -> None:
    module.forward = fn  # instance attribute: nn.Module.__call__ (and its hooks) stay in place
    model._remat_wrapped.append(module)


def clear_plan(model: nn.Module) -> None:
    """Undo apply_plan: every layer back to its class forward (policy none everywhere)."""
    for module in getattr(model, "_remat_wrapped", []):
        module.__dict__.pop("forward", None)
    model._remat_wrapped = []
    model.__dict__.pop("run_layers", None)
    model.remat_plan = None


def apply_plan(model: nn.Module, plan: LayerPolicies | Sequence[str] | str, early_stop: bool = False) -> LayerPolicies:
    """Apply ``plan`` to ``model.layers`` (an nn.ModuleList), replacing any earlier plan; returns the LayerPolicies.

    ``early_stop`` is torch.utils.checkpoint's: when True, a recompute stops as soon as the last saved
    tensor is rebuilt (for selective this skips the ·V matmul: 2bs²h instead of 4bs²h recomputed per layer).
    The default False re-runs each checkpointed region whole, as Megatron-LM does and as Korthikanti's
    hardware-FLOP accounting assumes.

    Per-layer policies replace the layer's (or, for selective, its attn.core's) ``forward`` on the instance,
    so parameter names, state dicts and module hooks are unchanged. Multi-layer units replace the model's
    ``run_layers`` (the loop over layers; see remat.models.transformer). ``model.remat_offload`` holds the
    OffloadStats of the offload hooks. Raises UsageError("policy") for a plan that does not fit the model.
    """
    layers = model.layers
    plan = parse_plan(plan, len(layers))
    if len(plan) != len(layers):
        raise UsageError("policy", f"plan has {len(plan)} entries for {len(layers)} layers")
    clear_plan(model)
    model.remat_offload = getattr(model, "remat_offload", None) or OffloadStats()
    grouped = plan.grouped()
    for i, (layer, policy) in enumerate(zip(layers, plan)):
        if i in grouped or policy == "none":
            continue
        if policy == "full":
            _set_forward(model, layer, checkpointed(_own_forward(layer), [layer], early_stop))
        elif policy == "selective":
            core = _core(layer)
            _set_forward(model, core, checkpointed(_own_forward(core), [core], early_stop))
        elif policy == "offload":
            _set_forward(model, layer, _offloaded(_own_forward(layer), layer, model.remat_offload))
        elif policy == "drop-cheap":
            from remat.drop_cheap import drop_cheap
            _set_forward(model, layer, drop_cheap(_own_forward(layer), [layer], early_stop))
    if plan.groups:
        model.run_layers = _grouped_runner(model, plan, early_stop)
    model.remat_plan = plan
    return plan


def _grouped_runner(model: nn.Module, plan: LayerPolicies, early_stop: bool) -> Callable:
    """run_layers replacement: each multi-layer unit under one checkpoint, other layers called as usual."""
    starts = {start: stop for start, stop in plan.groups}

    def run_layers(x: torch.Tensor) -> torch.Tensor:
        layers, i = model.layers, 0
        while i < len(layers):
            if i in starts:
                unit = list(layers[i:starts[i]])
                x = checkpointed(functools.partial(_run_sequence, unit), unit, early_stop)(x)
                i = starts[i]
            else:
                x = layers[i](x)
                i += 1
        return x
    return run_layers


def _run_sequence(modules: Sequence[nn.Module], x: torch.Tensor) -> torch.Tensor:
    for module in modules:
        x = module(x)
    return x
