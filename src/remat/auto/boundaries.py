"""Tensors two parties save: one block's output that the next block saves as its input, and a block's input or
output that code outside the blocks (a stem, a head) saves too. Each block measured alone counts what it
saves; summed over the blocks, such a storage would be counted twice.

    links = boundaries(blocks.names, inputs, outputs, log)     # during one plain forward (whole_step)
    costs = shared_once(block_costs, links)                    # each storage counted once
    held += head_shared(...) / loose_shared(...)               # what the whole step's terms hold instead

Where a shared storage is counted (``shared_once``):

* **A block input saved outside the blocks as well** (a stem's ReLU saving the first block's input): it is live
  until the stem's backward, after every block's, whatever the blocks do: the whole step's ``held`` counts it and
  no block option does.
* **A block output saved outside the blocks as well** (a head's norm or linear saving the last block's output):
  the head frees it at the end of its backward, before the blocks' backward. The block's option drops it from
  ``stored`` and adds it to ``transient`` (live in its own backward when it saves it); the whole step's
  ``floor`` (head forward and backward) counts it whatever the block does, ``held`` does not (``head_shared``).
  Exact when the code that saves it runs its backward before the blocks' (a head); code between two blocks that
  saves a block's output is not told apart.
* **A block input that needs no gradient** (position ids, masks, rotary tables: the same tensors reach every
  block) is left out of every block's ``stored``. When the plain step keeps it (a rotary multiply saves its
  table) the whole step's ``held`` counts it; when the plain step frees it after the forward but an option keeps
  it (a checkpoint keeps its inputs), ``loose_shared`` adds it to ``held``, once.
* **Block i's output, block i+1's input** (a residual block ending in a ReLU, which saves its output, followed
  by one whose first convolution or checkpoint saves its input): the consumer counts it. The producer's option
  drops it from ``stored`` and adds it to ``transient`` — it is live in the producer's own backward (which needs
  it), but after the consumer's backward it is freed, which ``stored`` (held from then on to the end of
  backward in the prefix memory model) would not say.
  A consumer option that does not keep it on the device (offload) counts the most any producer option keeps
  of it: an upper bound, exact unless the producer then runs an option that does not save its output (full,
  selective, offload) — over by that storage's bytes. Only adjacent blocks are linked: a storage made by block
  j and saved by block i > j + 1 (a U-Net's skip) is left counted by both (over, never under).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
from torch.utils._pytree import tree_flatten


@dataclass(frozen=True)
class Boundary:
    """One block's shared storages, by position among its tensor inputs (flattened args, kwargs) and tensor
    outputs: ``incoming`` (its input position, the previous block's output position) pairs, ``outgoing`` output
    positions the next block takes as input, ``outside_in`` / ``outside_out`` positions code outside the blocks
    saves."""

    incoming: tuple = ()
    outgoing: frozenset = frozenset()
    outside_in: frozenset = frozenset()
    outside_out: frozenset = frozenset()
    kept_plain: frozenset = frozenset()   # input positions whose storage someone saves in the plain forward


def tensor_leaves(tree) -> list:
    """The tensors of a pytree, in flattening order (the positions ``Boundary`` and ``PolicyCost`` use)."""
    return [t for t in tree_flatten(tree)[0] if isinstance(t, torch.Tensor)]


def storage_id(t: torch.Tensor) -> int:
    return t.untyped_storage()._cdata


def boundaries(names, inputs, outputs, log) -> tuple:
    """Per block, its ``Boundary``: ``inputs[i]`` / ``outputs[i]`` the tensor leaves of block i's first call
    (alive while this runs, so storage ids are unique), ``log`` a remat.measure.saved.SavedTensorLog of the same
    forward (its records name the module that saved each storage)."""
    outside = {r.address for r in log.records if not r.is_parameter and not _inside(r.module, names)}
    saved = {r.address for r in log.records}
    ids_in = [[storage_id(t) for t in x] for x in inputs]
    ids_out = [[storage_id(t) for t in x] for x in outputs]
    out = []
    for i in range(len(names)):
        previous = {s: p for p, s in enumerate(ids_out[i - 1])} if i else {}
        incoming = tuple((q, previous[s]) for q, s in enumerate(ids_in[i])
                         if s in previous and inputs[i][q].requires_grad)
        following = set(ids_in[i + 1]) if i + 1 < len(names) else set()
        out.append(Boundary(
            incoming=incoming,
            outgoing=frozenset(p for p, s in enumerate(ids_out[i]) if s in following),
            outside_in=frozenset(q for q, s in enumerate(ids_in[i]) if s in outside),
            outside_out=frozenset(p for p, s in enumerate(ids_out[i]) if s in outside),
            kept_plain=frozenset(q for q, s in enumerate(ids_in[i]) if s in saved)))
    return tuple(out)


def _inside(module: str, names) -> bool:
    return any(module == n or module.startswith(n + ".") for n in names)


def shared_once(blocks: list, links: tuple) -> list:
    """``blocks`` (remat.auto.measure.BlockCost) with every option's stored and transient bytes moved as the
    module docstring says, so that a storage two parties save is counted once."""
    out = []
    for i, (block, link) in enumerate(zip(blocks, links)):
        producer = blocks[i - 1] if i else None
        upper = {q: max((dict(c.saved_outputs).get(p, 0) for c in _every_cost(producer)), default=0)
                 for q, p in link.incoming}
        fix = lambda c: _counted_once(c, link, upper)
        out.append(replace(block, costs={p: fix(c) for p, c in block.costs.items()},
                           variants={k: v._replace(cost=fix(v.cost)) for k, v in block.variants.items()}))
    return out


def head_shared(blocks: list, links: tuple) -> int:
    """Bytes of block outputs that the block keeps with no recompute and code outside the blocks saves too (a
    head): live in the head's forward and backward whatever the blocks do (module docstring)."""
    return sum(dict(block.costs["none"].saved_outputs).get(p, 0)
               for block, link in zip(blocks, links) for p in link.outside_out)


def loose_shared(blocks: list, links: tuple, inputs: list) -> int:
    """Bytes of the block inputs that need no gradient (position ids, masks: each block gets the same ones, so a
    block's own ``stored`` leaves them out) which the plain step frees after the forward but some block option
    keeps (a checkpoint keeps its inputs): each storage once, counted as held all step whatever the plan. Over by
    those bytes for a plan in which no block keeps them; exact otherwise. ``inputs``: per block its tensor
    inputs (the whole step's captured ones, alive: their storage ids are unique)."""
    loose = {}
    for block, link, tensors in zip(blocks, links, inputs):
        for cost in _every_cost(block):
            for q, nbytes in cost.saved_shared:
                if q not in link.kept_plain:
                    loose[storage_id(tensors[q])] = nbytes
    return sum(loose.values())


def _every_cost(block):
    if block is None:
        return []
    return [*block.costs.values(), *(v.cost for v in block.variants.values())]


def _counted_once(cost, link: Boundary, upper: dict):
    """One option's cost with the shared storages moved (module docstring); ``upper``: per incoming input
    position, the most bytes of it any option of the producer keeps."""
    saved_in, saved_out = dict(cost.saved_inputs), dict(cost.saved_outputs)
    handed = sum(b for p, b in saved_out.items() if p in link.outgoing or p in link.outside_out)
    inside = sum(b for q, b in saved_in.items() if q in link.outside_in)
    taken = sum(upper[q] for q, _ in link.incoming if q not in saved_in and q not in link.outside_in)
    return replace(cost, stored_bytes=cost.stored_bytes - inside - handed + taken,
                   transient_bytes=cost.transient_bytes + handed)
