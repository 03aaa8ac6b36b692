"""Offload single op outputs of a tensor plan: outputs the selective-checkpoint cache keeps, on the host between a
block's forward and its backward.

    run = offloaded_selective(forward, module, kept, stats, name)   # kept: a KeptSet with ``offload`` ops

Why not saved-tensor hooks (remat.offload): torch's selective checkpoint keeps a MUST_SAVE output in its own
cache, which no saved-tensor hook sees. So an offloaded op output is kept (MUST_SAVE) and its storage emptied in
place. When the block's forward ends, each such storage is copied into a host buffer (remat.offload_pool: pinned
pool, side stream after the compute stream's work, ``Tensor.record_stream`` so the allocator does not reuse the
memory before the copy has read it) and resized to 0 bytes: every alias of it, the cache's included, holds
nothing on the device. When the block's recompute starts, its storages are resized back and filled from the host.
The copy is storage to storage, so autograd's version counter does not move and the cache's own check still
refuses a kept output written in place; the values are the same bytes, so gradients are bitwise unchanged.

Prefetch: the recompute of a block also fetches the offloaded outputs of the block before it (the next one
backward visits), when they take no more bytes than this block's own. That is the allowance the plan's memory
model gives a block's backward (remat.auto.measure.tensor_variants: its transient counts its offloaded bytes
twice, its own and the neighbour's), so the measured peak never exceeds the predicted one; a larger neighbour is
fetched when its own recompute starts (its copy back then exposed, not hidden).

Without CUDA the "device" is the CPU: the host copy is a host memcpy (remat.formulas.offload.SIMULATED), never
called PCIe, made with torch's dispatch modes off (``host_side``), so that torch's MemTracker (which sees the
device storages resized in place) measures the device side of the simulation: the peak a GPU would show, not its
copy times. Under torch.compile the block runs eagerly (a graph break, as remat's offload
policy): a storage emptied in place cannot be traced.
"""

from __future__ import annotations

import contextlib
import functools
import weakref

import torch
from torch._subclasses.fake_tensor import is_fake
from torch.utils._pytree import tree_flatten

from remat.drop_cheap import contexts as drop_cheap_contexts
from remat.offload_pool import HostBufferPool, Sync, host_side
from remat.policies import checkpointed
from remat.policies.apply import block_device


class _Group:
    """One call of one block: the storages it offloads, their host buffers and copy events."""

    def __init__(self, name: str):
        self.name, self.nbytes = name, 0       # nbytes: moved to the host in forward (the prefetch allowance)
        self.outputs: list = []                # op outputs to move (a tensor or a tuple), until forward ends
        self.moved: list = []                  # [storage, host buffer, event] while on the host
        self.ready: list = []                  # events of the copies back
        self.fetched = False


class TensorOffload:
    """The offloaded op outputs of a model's tensor plan (module docstring): one per model and device.

    ``bytes`` / ``tensors``: storages moved to the host since made (ints); ``fetches``: (block name, "demand" |
    "prefetch") in the order the copies back were issued; ``pool``: the HostBufferPool (its host accounting)."""

    def __init__(self, device: torch.device):
        self.device = device
        self.pool = HostBufferPool(pin=device.type == "cuda")
        self.sync = Sync(device)
        self.groups: list[weakref.ref] = []    # groups on the host, not yet fetched, in forward order
        self.bytes = self.tensors = 0
        self.fetches: list[tuple[str, str]] = []

    def contexts(self, kept, name: str) -> tuple:
        """The (forward, recompute) context pair of one checkpointed call of a block with kept set ``kept``
        (remat.auto.tensors.KeptSet): torch's selective checkpoint (remat.drop_cheap.contexts) with the moves
        around it."""
        group = _Group(name)
        forward, recompute = drop_cheap_contexts(False, kept.policy(on_offload=group.outputs.append))
        return self._forward(forward, group), self._recompute(recompute, group)

    @contextlib.contextmanager
    def _forward(self, forward, group: _Group):
        with forward:
            yield
        self._move_out(group)

    @contextlib.contextmanager
    def _recompute(self, recompute, group: _Group):
        if not group.fetched:
            self._fetch(group, "demand")
        earlier = self._before(group)
        if earlier is not None and earlier.nbytes <= group.nbytes:
            self._fetch(earlier, "prefetch")
        for event in group.ready:
            self.sync.wait(event)
        with recompute:
            yield

    def _move_out(self, group: _Group) -> None:
        """Copy each output's storage to a host buffer and empty it on the device (module docstring)."""
        seen = set()
        outputs, group.outputs = group.outputs, []
        for t in (t for t in tree_flatten(outputs)[0] if isinstance(t, torch.Tensor)):
            storage = t.untyped_storage()
            if is_fake(t) or storage._cdata in seen or storage.nbytes() == 0:
                continue
            seen.add(storage._cdata)
            device_bytes = torch.empty(0, dtype=torch.uint8, device=t.device).set_(storage)
            with torch.no_grad(), self.sync.on_side(), host_side(self.device):
                host = self.pool.acquire(storage.nbytes())
                host.copy_(device_bytes, non_blocking=self.pool.pin)
                event = self.sync.record()
            self.sync.used_on_side(device_bytes)
            del device_bytes
            storage.resize_(0)
            group.moved.append([storage, host, event])
            group.nbytes += host.numel()
            self.bytes += host.numel()
            self.tensors += 1
        if group.moved:
            weakref.finalize(group, _give_back, self.pool, group.moved)
            self.groups = [ref for ref in self.groups if ref() is not None] + [weakref.ref(group)]
        else:
            group.fetched = True

    def _fetch(self, group: _Group, why: str) -> None:
        """Resize each storage back and issue its copy from the host (side stream); the host buffer goes back
        to the pool once that copy has read it."""
        group.fetched = True
        self.groups = [ref for ref in self.groups if ref() is not None and ref() is not group]
        self.fetches.append((group.name, why))
        moved = list(group.moved)
        group.moved.clear()       # in place: the finalizer's list, so nothing is given back twice
        for storage, host, event in moved:
            storage.resize_(host.numel())
            device_bytes = torch.empty(0, dtype=torch.uint8, device=self.device).set_(storage)
            self.sync.wait(event)
            with torch.no_grad(), self.sync.on_side(), host_side(self.device):
                device_bytes.copy_(host, non_blocking=self.pool.pin)
                ready = self.sync.record()
            self.sync.used_on_side(device_bytes)
            group.ready.append(ready)
            self.pool.release(host, ready)

    def _before(self, group: _Group) -> _Group | None:
        """The latest group still on the host made before ``group`` (the next block backward visits)."""
        live = [ref() for ref in self.groups]
        return next((g for g in reversed(live) if g is not None and g is not group), None)


def _give_back(pool: HostBufferPool, moved: list) -> None:
    """Finalizer of a group never fetched (its backward never ran): its host buffers go back to the pool."""
    for _, host, event in moved:
        pool.release(host, event)
    moved.clear()


def offloaded_selective(forward, module, kept, stats, name: str = ""):
    """``forward`` under a tensor plan's kept set ``kept`` with offloaded op outputs (module docstring): a
    callable to set as the block's forward. ``stats``: the model's remat.policies.OffloadStats (its
    ``tensor_offload`` is made at the first call, per device; its bytes and tensors count the moves)."""
    region = checkpointed(forward, [module], name=name,
                          selective=lambda compiling=False: stats.tensor_offload.contexts(kept, name))

    @torch.compiler.disable
    @functools.wraps(forward)
    def run(*args, **kwargs):
        device = block_device(module, args, kwargs)
        if stats.tensor_offload is None or stats.tensor_offload.device != device:
            stats.tensor_offload = TensorOffload(device)
        manager = stats.tensor_offload
        with stats.counting(device, lambda: (manager.bytes, manager.tensors)):
            return region(*args, **kwargs)
    return run


__all__ = ["TensorOffload", "offloaded_selective"]
