"""Which modules of a model are its blocks: the units a per-block recompute plan chooses a policy for.

    blocks = find_blocks(model)              # the longest nn.ModuleList of modules of one class
    blocks = find_blocks(model, "model.layers")
    blocks.name, blocks.names, blocks.modules

Found automatically: among the model's nn.ModuleList / nn.Sequential containers not nested inside an element of
another such container of two or more (a mixture's experts inside each layer are not the blocks: the layers on the
residual path are), the one holding the most modules of a single class (a HuggingFace model's decoder layers; ties
go to the container met first in ``named_modules`` order). Only that one: the other containers of same-class
modules (a ResNet's other stages, an encoder-decoder's decoder) are listed in ``Blocks.skipped`` and the plan says
they were left out — pass ``blocks=`` a list of modules to plan them together. Or given: the qualified name of a
container, or a list of submodules.
"""

from __future__ import annotations

from dataclasses import dataclass
from collections.abc import Iterable
from typing import Sequence

from torch import nn

from remat.errors import UsageError


@dataclass(frozen=True)
class Blocks:
    """The blocks of a model, in forward order.

    name: qualified name of their container ("" when given as a list); names: each block's qualified name;
    modules: the blocks themselves."""

    name: str
    names: tuple[str, ...]
    modules: tuple[nn.Module, ...]
    skipped: tuple[str, ...] = ()    # other containers of ≥ 2 same-class modules found, not chosen: "name (n)"

    def __len__(self) -> int:
        return len(self.modules)

    def shared(self) -> list[list[int]]:
        """Positions holding one module object (shared weights), in groups of two or more."""
        places: dict[int, list[int]] = {}
        for i, module in enumerate(self.modules):
            places.setdefault(id(module), []).append(i)
        return [p for p in places.values() if len(p) > 1]


def find_blocks(model: nn.Module, blocks: str | Sequence[nn.Module] | None = None) -> Blocks:
    """The blocks of ``model`` (module docstring).

    ``blocks``: None (find them), the qualified name of an nn.ModuleList / nn.Sequential inside ``model``, or a
    sequence of ``model``'s submodules or of their qualified names (an AutoPlan's ``block_names``). A block is
    named by its place in its container ("layers.3"), so one module object at two places (shared weights) has
    both names. Raises UsageError("blocks") when nothing qualifies, a name does not exist or is not a
    container, or a given module is not inside ``model`` or is not a module; UsageError("model") when ``model``
    is not an nn.Module.
    """
    if not isinstance(model, nn.Module):
        raise UsageError("model", f"an nn.Module, not {type(model).__name__}")
    if blocks is not None and not isinstance(blocks, (str, Iterable)):
        raise UsageError("blocks", f"a container's name or a list of modules or names, not {type(blocks).__name__}")
    qualified = {id(m): name for name, m in model.named_modules()}
    if blocks is None:
        return _longest(model)
    if not isinstance(blocks, str) and all(isinstance(b, str) for b in blocks) and len(blocks):
        return Blocks("", tuple(blocks), tuple(_submodule(model, name) for name in blocks))
    if isinstance(blocks, str):
        container = _submodule(model, blocks)
        if not isinstance(container, (nn.ModuleList, nn.Sequential)) or len(container) == 0:
            raise UsageError("blocks", f"{blocks!r} is a {type(container).__name__}, not a non-empty "
                                       "nn.ModuleList or nn.Sequential")
        return Blocks(blocks, tuple(f"{blocks}.{key}" for key in container._modules), tuple(container))
    modules = tuple(blocks)
    missing = [type(m).__name__ for m in modules if id(m) not in qualified]
    if missing or not modules:
        raise UsageError("blocks", f"not submodules of the model: {', '.join(missing)}" if missing
                         else "an empty list of blocks")
    return Blocks("", tuple(qualified[id(m)] for m in modules), modules)


def _submodule(model: nn.Module, name: str) -> nn.Module:
    try:
        return model.get_submodule(name)
    except AttributeError:
        raise UsageError("blocks", f"{type(model).__name__} has no submodule {name!r}") from None


def _longest(model: nn.Module) -> Blocks:
    candidates = [(len(module), name, module) for name, module in model.named_modules()
                  if isinstance(module, (nn.ModuleList, nn.Sequential)) and len(module)
                  and len({type(m) for m in module}) == 1]
    outer = [f"{name}." if name else "" for n, name, _ in candidates if n >= 2]
    # a container inside an element of another (a mixture's experts inside each layer) is not the blocks
    on_path = [c for c in candidates if not any(c[1].startswith(o) and c[1] != o[:-1] for o in outer)]
    best = max(on_path, key=lambda c: c[0], default=None)     # max keeps the first of equal lengths
    candidates = [(n, name) for n, name, _ in candidates]
    if best is None:
        raise UsageError("blocks", f"{type(model).__name__} has no nn.ModuleList / nn.Sequential of modules of "
                                   "one class; pass blocks= (a container's name or a list of modules)")
    _, name, container = best
    prefix = f"{name}." if name else ""
    inside = lambda other: other.startswith(prefix) or name.startswith(f"{other}.")   # nested in or around it
    skipped = tuple(f"{other} ({n})" for n, other in candidates if n >= 2 and other != name and not inside(other))
    return Blocks(name, tuple(f"{prefix}{key}" for key in container._modules), tuple(container), skipped)
