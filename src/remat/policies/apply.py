"""Applying a plan to a model: ``apply_plan`` / ``clear_plan`` (per-layer forwards replaced on the instance,
multi-layer units through the model's ``run_layers``), the offload policy's wrapper (``OffloadStats``), and
``apply_step_plan`` for a model checkpointed over time steps (remat.models.lstm).
"""

from __future__ import annotations

import contextlib
import functools
from dataclasses import dataclass, field
from typing import Callable, Sequence

import torch
from torch import nn

from remat.errors import UsageError
from remat.offload import OffloadHooks
from remat.policies.checkpoint import check_hooks_on, checkpointed, drop_cheap
from remat.policies.plans import STEP_POLICIES, LayerPolicies, parse_plan

# --- offload (synchronous) -------------------------------------------------------------------------------------

@dataclass
class OffloadStats:
    """Bytes the offload hooks copied to host since the last reset (int bytes); simulated on a CPU device.

    ``hooks``: the model's remat.offload.OffloadHooks (one per model: host pool, side stream, prefetch chain;
    its ``pool`` has the host accounting), made at the first offloaded forward; ``tensor_offload``: the
    remat.auto.tensor_offload.TensorOffload of a tensor plan's offloaded op outputs, likewise.
    """

    bytes: int = 0
    tensors: int = 0
    simulated: bool = False
    hooks: object = field(default=None, repr=False, compare=False)
    tensor_offload: object = field(default=None, repr=False, compare=False)

    def reset(self) -> None:
        self.bytes, self.tensors, self.simulated = 0, 0, False

    @contextlib.contextmanager
    def counting(self, device: torch.device, counter: Callable[[], tuple[int, int]]):
        """Context: what ``counter()`` (bytes, storages moved so far) grows by inside it is added to ``bytes`` and
        ``tensors``; a CPU ``device`` makes the counts simulated."""
        before = counter()
        yield
        after = counter()
        self.bytes += after[0] - before[0]
        self.tensors += after[1] - before[1]
        self.simulated = self.simulated or device.type == "cpu"

    def __deepcopy__(self, memo) -> "OffloadStats":
        """A copy of the counts without the hooks (their host pool holds a lock and pinned buffers): a copied
        model (EMA, copy.deepcopy) makes its own hooks at its first offloaded forward."""
        return OffloadStats(self.bytes, self.tensors, self.simulated)

    def __getstate__(self) -> dict:
        """Pickled (torch.save of the model) without the hooks, as ``__deepcopy__``."""
        return {**vars(self), "hooks": None, "tensor_offload": None}


def _offloaded(fn: Callable, module: nn.Module, stats: OffloadStats, name: str = "") -> Callable:
    """``fn`` with its saved activations offloaded asynchronously by the model's shared
    remat.offload.OffloadHooks (pinned host pool, side stream, prefetch of the next layer in backward; views
    of one storage copied once); ``module``'s parameters and buffers stay. min_bytes=0: every activation
    moves. ``stats.bytes``/``tensors`` count the storages copied. Under torch.compile the block runs eagerly (a
    graph break: saved-tensor hooks that copy to the host are not traced), its neighbours compiled."""
    @torch.compiler.disable
    @functools.wraps(fn)
    def run(*args, **kwargs):
        check_hooks_on(name, "offload")
        device = block_device(module, args, kwargs)
        if stats.hooks is None or stats.hooks.device.type != device.type:
            stats.hooks = OffloadHooks(device, min_bytes=0)
        hooks = stats.hooks
        hooks.keep_state(module)
        with stats.counting(device, lambda: (hooks.offloaded_bytes, hooks.copies)), hooks.layer(name):
            return fn(*args, **kwargs)
    return run


def block_device(module: nn.Module, args: tuple, kwargs: dict) -> torch.device:
    """Where a block runs: the device of its first parameter or buffer, else of its first tensor argument
    (CPU when it has none)."""
    return next((t.device for t in [*module.parameters(), *module.buffers(), *args, *kwargs.values()]
                 if isinstance(t, torch.Tensor)), torch.device("cpu"))


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
    OffloadStats of the offload hooks. Raises UsageError("policy") for a plan that does not fit the model, or that
    gives one layer object at several places (shared weights) two policies.
    """
    layers = model.layers
    plan = parse_plan(plan, len(layers))
    if len(plan) != len(layers):
        raise UsageError("policy", f"plan has {len(plan)} entries for {len(layers)} layers")
    _check_shared(layers, plan)
    clear_plan(model)
    model.remat_offload = getattr(model, "remat_offload", None) or OffloadStats()
    grouped = plan.grouped()
    for i, (layer, policy) in enumerate(zip(layers, plan)):
        if i in grouped or policy == "none":
            continue
        if policy == "full":
            _set_forward(model, layer, checkpointed(_own_forward(layer), [layer], early_stop, name=f"layers.{i}"))
        elif policy == "selective":
            core = _core(layer)
            _set_forward(model, core, checkpointed(_own_forward(core), [core], early_stop,
                                                   name=f"layers.{i}.attn.core"))
        elif policy == "offload":
            _set_forward(model, layer, _offloaded(_own_forward(layer), layer, model.remat_offload, f"layers.{i}"))
        elif policy == "drop-cheap":
            _set_forward(model, layer, drop_cheap(_own_forward(layer), [layer], early_stop, name=f"layers.{i}"))
    if plan.groups:
        model.run_layers = _grouped_runner(model, plan, early_stop)
    model.remat_plan = plan
    return plan


def _check_shared(layers: Sequence[nn.Module], plan: LayerPolicies) -> None:
    """UsageError("policy") when one layer object at several places (shared weights) is given two policies: its
    forward is replaced once, so every place would run the last one (a layer inside a multi-layer unit runs its
    own forward, as policy none does)."""
    units = {i: (start, stop) for start, stop in plan.groups for i in range(start, stop)}
    own = lambda i: "none" if i in units else plan[i]
    label = lambda i: f"full (in the unit layers.{units[i][0]}–{units[i][1] - 1})" if i in units else plan[i]
    first: dict[int, int] = {}
    for i, layer in enumerate(layers):
        j = first.setdefault(id(layer), i)
        if own(j) != own(i):
            raise UsageError("policy", f"layers.{j} and layers.{i} are one module object (shared weights) given "
                                       f"{label(j)} and {label(i)}: a shared layer takes one policy")


def _grouped_runner(model: nn.Module, plan: LayerPolicies, early_stop: bool) -> Callable:
    """run_layers replacement: each multi-layer unit under one checkpoint, other layers called as usual."""
    starts = {start: stop for start, stop in plan.groups}

    def run_layers(x: torch.Tensor) -> torch.Tensor:
        layers, i = model.layers, 0
        while i < len(layers):
            if i in starts:
                unit = list(layers[i:starts[i]])
                x = checkpointed(functools.partial(_run_sequence, unit), unit, early_stop,
                                 name=f"layers.{i}–{starts[i] - 1}")(x)
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


# --- plans over time steps (remat.models.lstm) ------------------------------------------------------------------

def apply_step_plan(model: nn.Module, spec, early_stop: bool = False) -> LayerPolicies:
    """Parse ``spec`` (``parse_plan`` over the ``model.cfg.steps`` time steps) and set ``model.units`` to the
    [start, stop) runs of steps with the wrapper each runs under: every multi-step group one checkpointed
    unit, else the step's policy ("full": ``checkpointed``, "drop-cheap": ``drop_cheap``, "none": no wrapper).
    ``model``: a step-wise model (remat.models.lstm.StackedLSTM: ``cfg.steps``, ``units``). Returns the
    LayerPolicies. Raises UsageError("policy") for a bad spec or a per-step policy outside STEP_POLICIES.
    """
    plan = parse_plan(spec, model.cfg.steps)
    bad = sorted(set(plan) - set(STEP_POLICIES))
    if bad:
        raise UsageError("policy", f"{', '.join(bad)}: not a per-step LSTM policy "
                                   f"(use {', '.join(STEP_POLICIES)})")
    groups = {start: stop for start, stop in plan.groups}
    units, t = [], 0
    while t < model.cfg.steps:
        stop = groups.get(t, t + 1)
        policy = "full" if stop - t > 1 else plan[t]
        units.append((t, stop, _step_wrapper(model, policy, early_stop)))
        t = stop
    model.units = units
    return plan


def _step_wrapper(model: nn.Module, policy: str, early_stop: bool) -> Callable | None:
    """What a unit of steps runs under: a function of the unit's runner, or None (policy none)."""
    if policy == "full":
        return lambda run: checkpointed(run, [model], early_stop)
    if policy == "drop-cheap":
        return lambda run: drop_cheap(run, [model], early_stop)
    return None
