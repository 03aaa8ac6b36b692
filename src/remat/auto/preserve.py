"""What remat.auto.explain leaves as it found it: the model's buffers (BatchNorm running statistics), gradients,
its modules' plain attributes (tensors, counters a hook keeps) and the values of their plain tensors up to
SNAPSHOT_BYTES each (FP8 scaling state in a dict), the states of the torch.Generator objects they hold, and the
global RNG state; and the tensors a block keeps on itself. Parameters are not copied (that would double the
model's memory): a forward that writes one in place (``nn.Embedding(max_norm=...)``), or a larger plain tensor,
is warned about.

    with ModelState(model) as state:
        output = model(x)                    # one step, watched
        stashed = state.stashed(blocks)      # tensors the forward left on the blocks' modules
    # buffers, .grad, attributes and RNG state are back as they were

A block that keeps a tensor on itself (``self.last_h = h``, a list it appends to) keeps it alive until the next
step replaces it, outside autograd's saved tensors — the Megatron-LM#3221 kind of leak. explain reports those
tensors with their bytes (``Stashed``); re-running a block would overwrite them, so they are read right after the
step's forward.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import torch
from torch import nn
from torch.utils._pytree import tree_flatten

from remat.policies.region import SNAPSHOT_BYTES, version_of


@dataclass(frozen=True)
class Stashed:
    """A tensor attribute a block's forward set or grew: the block, the attribute's qualified name, its bytes
    (storages not among the model's parameters and buffers, each once)."""

    block: str
    attribute: str
    nbytes: int
    storages: frozenset = frozenset()


@dataclass(frozen=True)
class SideEffect:
    """Forward code of a block that runs again when the block recomputes: a hook on one of its modules, or a
    plain attribute (a counter, a flag) its forward changed. ``what``: the qualified name and which."""

    block: str
    what: str


_SCALARS = (bool, int, float, str)
_INTERNAL = frozenset(vars(nn.Module()))   # _parameters, _buffers, _modules, hook dicts, training, ...


def _tensor_attributes(module: nn.Module) -> dict:
    """Plain attributes of ``module`` holding tensors (directly or in a list, tuple or dict): name -> value."""
    return {name: value for name, value in vars(module).items() if name not in _INTERNAL
            and any(isinstance(t, torch.Tensor) for t in tree_flatten(value)[0])}


def _ids(value) -> set:
    return {id(t) for t in tree_flatten(value)[0] if isinstance(t, torch.Tensor)}


class ModelState:
    """Context manager: snapshot on entry, restore on exit (module docstring). Inside it the model has no
    ``.grad`` (the step makes its own; the caller's come back on exit)."""

    def __init__(self, model: nn.Module):
        self.model = model

    def __enter__(self) -> "ModelState":
        self.buffers = [(b, b.detach().clone()) for b in self.model.buffers()]
        self.grads = [(p, p.grad) for p in self.model.parameters()]
        for p, _ in self.grads:
            p.grad = None
        self.attributes = {}
        for module in self.model.modules():
            found = {k: v for k, v in vars(module).items() if k not in _INTERNAL}
            self.attributes[id(module)] = (module, {k: (v, _shallow(v)) for k, v in found.items()})
        self.versions = [(name, p, version_of(p)) for name, p in self.model.named_parameters()]
        self.plain = _plain_state(self.model)
        self.hooks = {id(m): len(m._forward_hooks) + len(m._forward_pre_hooks) for m in self.model.modules()}
        self.rng = torch.random.fork_rng(devices=self._cuda_devices())
        self.rng.__enter__()
        return self

    def _cuda_devices(self) -> list:
        return sorted({p.device.index or 0 for p in self.model.parameters() if p.device.type == "cuda"})

    def stashed(self, names, modules) -> list[Stashed]:
        """Tensors the forward set or grew on each block's modules (``names``/``modules``: the blocks)."""
        owned = {t.untyped_storage()._cdata for t in [*self.model.parameters(), *self.model.buffers()]}
        found = []
        for name, block in zip(names, modules):
            for sub, module in block.named_modules():
                before = self.attributes.get(id(module), (module, {}))[1]
                for attr, value in _tensor_attributes(module).items():
                    new = _ids(value) - (_ids(before[attr][1]) if attr in before else set())
                    storages = {t.untyped_storage()._cdata: t.untyped_storage().nbytes()
                                for t in tree_flatten(value)[0] if isinstance(t, torch.Tensor) and id(t) in new}
                    mine = {s: b for s, b in storages.items() if s not in owned}
                    if mine:
                        found.append(Stashed(name, f"{name}.{sub + '.' if sub else ''}{attr}",
                                             sum(mine.values()), frozenset(mine)))
        return found

    @staticmethod
    def scalars(modules) -> dict:
        """The plain scalar attributes (bool, int, float, str) of ``modules`` and everything below them:
        (module id, name) -> value; taken before backward, compared after it by ``side_effects``."""
        return {(id(m), attr): value for block in modules for m in block.modules()
                for attr, value in vars(m).items() if isinstance(value, _SCALARS) and attr not in _INTERNAL}

    def side_effects(self, names, modules, before_backward: dict) -> list[SideEffect]:
        """What each block's forward does besides computing (``names``/``modules``: the blocks), read after
        backward: hooks the user registered on its modules below the block (a recompute calls them again; the
        block's own hooks run around its forward once) and plain attributes the recompute changed since
        ``before_backward`` (``scalars``): a counter a guard (``remat.policies.recomputing()``) does not skip."""
        found = []
        for name, block in zip(names, modules):
            for sub, module in block.named_modules():
                where = f"{name}.{sub}" if sub else name
                if sub and self.hooks.get(id(module)):
                    found.append(SideEffect(name, f"{where} (forward hook)"))
                found += [SideEffect(name, f"{where}.{attr} (changed again by the recompute)")
                          for attr, value in vars(module).items() if (id(module), attr) in before_backward
                          and before_backward[id(module), attr] != value]
        return found

    def __exit__(self, *exc):
        with torch.no_grad():
            for buffer, value in self.buffers:
                buffer.copy_(value)
        for p, grad in self.grads:
            p.grad = grad
        for module, before in self.attributes.values():
            for attr in {k for k in vars(module) if k not in _INTERNAL} - set(before):
                delattr(module, attr)
            for attr, (value, content) in before.items():
                _restore(module, attr, value, content)
        self.rng.__exit__(*exc)
        written = [name for name, p, version in self.versions if version_of(p) != version]
        written += _restore_plain(self.plain)
        if written:
            warnings.warn(f"remat.auto.explain: the model's forward wrote {len(written)} parameter(s) or large "
                          f"plain tensor(s) in place ({written[0]}; e.g. nn.Embedding(max_norm=...)); explain does "
                          f"not copy parameters or plain tensors over {SNAPSHOT_BYTES} bytes to undo that",
                          stacklevel=3)


def _shallow(value):
    """A copy of a list's or dict's items (the step may append to the very object), else the value."""
    return list(value) if isinstance(value, list) else dict(value) if isinstance(value, dict) else value


def _restore(module: nn.Module, attr: str, value, content) -> None:
    if isinstance(value, list):
        value[:] = content
    elif isinstance(value, dict):
        value.clear()
        value.update(content)
    setattr(module, attr, value)


def _plain_state(model: nn.Module) -> list:
    """Each plain tensor of the modules' attributes (not a parameter or buffer; in a list, tuple or dict too) once:
    (name, tensor, version, a copy of its values up to SNAPSHOT_BYTES else None); and each torch.Generator
    there: (name, generator, its state)."""
    owned = {id(t) for t in [*model.parameters(), *model.buffers()]}
    found, seen = [], set(owned)
    for where, module in model.named_modules():
        for attr, value in vars(module).items():
            if attr in _INTERNAL:
                continue
            for item in tree_flatten(value)[0]:
                name = f"{where}.{attr}" if where else attr
                if isinstance(item, torch.Generator) and id(item) not in seen:
                    found.append((name, item, item.get_state()))
                elif isinstance(item, torch.Tensor) and id(item) not in seen and not item.is_inference():
                    small = item.untyped_storage().nbytes() <= SNAPSHOT_BYTES
                    found.append((name, item, item._version, item.detach().clone() if small else None))
                seen.add(id(item))
    return found


def _restore_plain(plain: list) -> list[str]:
    """Put back what ``_plain_state`` copied; the names of larger tensors written in place (not restored)."""
    lost = []
    for name, item, *before in plain:
        if isinstance(item, torch.Generator):
            item.set_state(before[0])
        elif item._version != before[0]:
            if before[1] is None:
                lost.append(name)
                continue
            with torch.no_grad():
                item.copy_(before[1])
    return lost
