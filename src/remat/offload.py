"""Activation offload at run time: a pinned host buffer pool and asynchronous offload saved-tensor hooks.

Two parts, one concept (moving saved activations off the device and back during a training step):

* ``HostBufferPool`` — host buffers reused across steps, pinned when CUDA is present (page-locked memory is
  what lets a device->host copy run asynchronously); it accounts bytes reserved (pinned), live and peak.
* ``OffloadHooks`` — ``torch.autograd.graph.saved_tensors_hooks`` that, during forward, copy each saved
  activation's storage into the pool on a side stream, and during backward bring a layer's storages back and
  prefetch the next layer's (the previous one in forward order) on that stream. Views of one storage are
  copied once; storages under ``min_bytes`` and leaf storages (parameters, inputs) stay on the device, as do
  tensors with no storage of their own (``torch.func``'s wrapped tensors and zero tangents: kept as autograd keeps
  them).
  ``torch.autograd.graph.save_on_cpu`` is the synchronous reference it is compared with.

Without CUDA the "device" is the CPU: offload copies into a separate host buffer, labelled
``remat.formulas.offload.SIMULATED`` and never called PCIe. Streams and events exist only with CUDA; on
the CPU the same code runs with no-op synchronization. What the copies cost (the link's bandwidth and the
fit t = t0 + bytes/BW) is measured by ``remat.measure.bandwidth``.

Used by the runtime's ``offload`` policy (``remat.policies``) and by ``remat experiment offload-steps``.
"""

from __future__ import annotations

import contextlib
import weakref
from dataclasses import dataclass

import torch
from torch._subclasses.fake_tensor import is_fake
from torch.autograd.graph import saved_tensors_hooks
from torch.multiprocessing.reductions import StorageWeakRef

from remat.device import resolve_device
from remat.errors import RecomputeError, UsageError
from remat.formulas.offload import link_label
from remat.offload_pool import HostBufferPool, Sync, host_side
from remat.units import KiB

DEFAULT_MIN_BYTES = 64 * KiB  # storages below this stay on the device (per-copy latency t0 dominates)


# --- offload saved-tensor hooks ------------------------------------------------------------------------------------

def storageless(tensor: torch.Tensor) -> bool:
    """Whether ``tensor`` has no storage of its own to copy: one of torch.func's wrappers (vmap's BatchedTensor,
    grad's and jvp's TensorWrapper; reading its storage raises) or a ZeroTensor (forward-mode AD's zero tangent,
    ``torch.func.jvp``'s; its storage has no data, and copying it crashes the process)."""
    return torch._C._functorch.is_functorch_wrapped_tensor(tensor) or tensor._is_zerotensor()


class _Stored:
    """One device storage moved to the host: its bytes in a pool buffer, and (after a fetch) back on device."""

    __slots__ = ("nbytes", "group", "name", "version", "host", "host_event", "device_bytes", "ready", "cell",
                 "fake_mode", "pending", "source", "modified", "__weakref__")

    def __init__(self, nbytes: int, group: int, tensor: torch.Tensor, name: str = ""):
        self.nbytes, self.group, self.name, self.version = nbytes, group, name, tensor._version
        self.host = self.host_event = self.device_bytes = self.ready = self.fake_mode = None
        self.pending = tensor              # held until its group's forward ends, then copied
        self.source = weakref.ref(tensor)  # the saved tensor, to check its version at unpack
        self.modified = False              # written in place between saving and the copy
        self.cell = [None]  # [(host buffer, event)] while the host copy is held; shared with the finalizer


def _give_back(pool: HostBufferPool, cell: list) -> None:
    """Finalizer of a _Stored never fetched (its saved tensors died unused): return its host buffer."""
    if cell[0] is not None:
        pool.release(*cell[0])
        cell[0] = None


@dataclass
class _Kept:
    """What autograd keeps for a saved tensor left on the device: the tensor and its version when saved."""

    tensor: torch.Tensor
    version: int
    name: str = ""


@dataclass
class _Packed:
    """What autograd keeps for one offloaded saved tensor: the layout of the view and its stored storage."""

    stored: _Stored
    dtype: torch.dtype
    size: tuple
    stride: tuple
    offset: int


def _check_version(modified: bool, shape: tuple, dtype: torch.dtype, name: str) -> None:
    """Autograd's own check, which saved-tensor hooks bypass: a saved tensor written in place after it was saved
    is refused (without offload, autograd raises "modified by an inplace operation" here)."""
    if modified:
        raise RecomputeError(name, f"a tensor saved for backward ({shape} {dtype}) was "
                                   "modified by an in-place operation after it was saved (an optimizer step, a "
                                   "weight update or an in-place op before backward?); without offload autograd "
                                   "refuses it too. Run backward before changing it, or make the op out of place")


class OffloadHooks:
    """Asynchronous activation offload through ``torch.autograd.graph.saved_tensors_hooks``.

    Usage (one object per model, shared by its offloaded layers; a layer's saved tensors form one group)::

        hooks = OffloadHooks("cuda")
        for layer in layers:
            with hooks.layer():           # saved tensors of this call are offloaded as one group
                x = layer(x)
        loss.backward()                   # groups come back in reverse order, the next one prefetched

    Forward (pack): for each saved tensor of a device storage ≥ ``min_bytes`` bytes that is not a leaf's
    (parameters and inputs stay: they are alive anyway), the whole untyped storage is copied once (views
    of one storage share the copy) into a ``HostBufferPool`` buffer on a side stream, after the current
    stream's work (stream wait); ``Tensor.record_stream`` keeps the allocator from reusing the device memory
    before the copy has read it. Backward (unpack): the first unpack of a group issues its host->device copies
    on the side stream (if not prefetched), the current stream waits on their event, and the previous group
    (the next layer backward visits) is prefetched. Host buffers go back to the pool when their copy back is
    issued; a group's device copies are freed when autograd drops the saved tensors.

    On the CPU the "device" is host memory: copies are synchronous host memcpys into the pool (labelled
    ``remat.measure.bandwidth.SIMULATED``), made with torch's dispatch modes off (``host_side``: a MemTracker
    measures the device side only), and the stream operations are no-ops — the same code with ``device`` a
    parameter.

    Args: device ("cpu" | "cuda[:i]"); min_bytes (int bytes, storages smaller stay on device); pool (a
    HostBufferPool; default: a new one, pinned on CUDA); prefetch (bool); keep (an nn.Module whose
    parameters' and buffers' storages stay, like leaves: model state, not activations).
    Attributes (int bytes, unique storages, since ``reset_counters()``): ``fetches`` (list of (group,
    "demand" | "prefetch") in the order the copies back were issued), ``offloaded_bytes`` (copied to the
    host), ``kept_bytes`` (non-leaf storages left on the device: under ``min_bytes``, or not strided/plain);
    leaf storages (parameters, inputs) are not counted, as in remat.measure.saved.
    Raises UsageError("device") for a device that is not cpu/cuda (a cuda device without CUDA is accepted:
    fake CUDA tensors need none), UsageError("min_bytes") for a negative threshold.
    Source: torch.autograd.graph.saved_tensors_hooks; torch.cuda.Stream/Event; Tensor.record_stream.
    """

    def __init__(self, device: str | torch.device = "cpu", min_bytes: int = DEFAULT_MIN_BYTES,
                 pool: HostBufferPool | None = None, prefetch: bool = True,
                 keep: torch.nn.Module | None = None):
        if isinstance(min_bytes, bool) or not isinstance(min_bytes, int) or min_bytes < 0:
            raise UsageError("min_bytes", f"must be an integer ≥ 0, got {min_bytes!r}")
        self.device = resolve_device(device, need_cuda=False)  # fake CUDA tensors need no CUDA
        self.min_bytes = min_bytes
        self.pool = pool if pool is not None else HostBufferPool(pin=self.device.type == "cuda")
        self.prefetch = prefetch
        self.sync = Sync(self.device)
        self._groups: list[list] = []  # per group: weakrefs to its _Stored not yet fetched
        self._visited: set[int] = set()  # groups whose backward has started (their successor prefetched)
        self._by_storage: dict[int, tuple[StorageWeakRef, weakref.ref]] = {}
        self._kept: dict[int, StorageWeakRef] = {}
        self.keep: dict[int, StorageWeakRef] = {}
        self._kept_modules: weakref.WeakSet = weakref.WeakSet()
        if keep is not None:
            self.keep_state(keep)
        self.reset_counters()

    def keep_state(self, module: torch.nn.Module) -> None:
        """Keep ``module``'s parameters and buffers on the device when saved (model state, not activations).

        Registered once per module (cheap to call every forward); parameters that require grad stay anyway
        (leaves), so a buffer replaced later is at worst copied, never wrong.
        """
        if module in self._kept_modules:
            return
        self._kept_modules.add(module)
        for t in [*module.parameters(), *module.buffers()]:
            if storageless(t):    # torch.func.functional_call's tensors under vmap: no storage to name
                continue
            storage = t.untyped_storage()
            ref = self.keep.get(storage._cdata)
            if ref is None or ref.expired():
                self.keep[storage._cdata] = StorageWeakRef(storage)

    # counters ---------------------------------------------------------------------------------------------------
    def reset_counters(self) -> None:
        """Zero ``kept_bytes``, ``offloaded_bytes`` and ``copies`` (unique storages)."""
        self.kept_bytes = self.offloaded_bytes = self.copies = 0
        self.fetches: list[tuple[int, str]] = []  # (group, "demand" | "prefetch") in the order issued
        self._kept.clear()

    def stats(self) -> dict:
        """Counters and pool accounting in one flat dict (bytes are ints)."""
        return {"offloaded_bytes": self.offloaded_bytes, "kept_bytes": self.kept_bytes, "copies": self.copies,
                "min_bytes": self.min_bytes, "link": link_label(self.device),
                **{f"host_{k}": v for k, v in self.pool.stats().items()}}

    # contexts ---------------------------------------------------------------------------------------------------
    @contextlib.contextmanager
    def layer(self, name: str = ""):
        """Context manager: tensors saved inside form one new group (one layer call, ``name`` in errors); their
        copies to the host are issued when it exits — a kernel may fill a tensor after autograd saved it
        (``rrelu_with_noise``'s noise, pytorch#193671), so a copy at save time could read it unfilled."""
        self._prune()
        self._groups.append([])
        group = len(self._groups) - 1
        try:
            with saved_tensors_hooks(self._pack_into(group, name), self._unpack):
                yield
        finally:
            self._flush(group)

    def _flush(self, group: int) -> None:
        """Copy to the host every storage of ``group`` still held on the device, noting any written in place
        since it was saved (autograd's version counter moved)."""
        for ref in self._groups[group]:
            stored = ref()
            if stored is None or stored.pending is None:
                continue
            tensor, stored.pending = stored.pending, None
            stored.modified = tensor._version != stored.version
            if stored.fake_mode is None:
                self._copy_to_host(stored, tensor.untyped_storage())

    def _prune(self) -> None:
        """Forget expired storages; start group numbering afresh once no group holds a host copy (new step)."""
        if not any(ref() is not None for group in self._groups for ref in group):
            self._groups.clear()
            self._visited.clear()
        for key in [k for k, (ref, _) in self._by_storage.items() if ref.expired()]:
            del self._by_storage[key]

    # pack -------------------------------------------------------------------------------------------------------
    def _keep_reason(self, tensor: torch.Tensor) -> str | None:
        """Why ``tensor`` stays on the device ("leaf", "small", "other", "wrapped"), or None when it is offloaded."""
        if tensor.device != self.device or tensor.layout != torch.strided:
            return "other"
        if storageless(tensor):
            return "wrapped"  # torch.func's: kept as autograd keeps it (exact), not counted (no storage to name)
        if type(tensor) not in (torch.Tensor, torch.nn.Parameter) and not is_fake(tensor):
            return "other"  # tensor subclasses (DTensor, ...)
        base = tensor._base if tensor._base is not None else tensor
        if base.is_leaf and base.requires_grad:
            return "leaf"  # a parameter or an input: alive anyway, nothing to gain
        ref = self.keep.get(tensor.untyped_storage()._cdata)
        if ref is not None and not ref.expired():
            return "leaf"  # a parameter or buffer of ``keep`` (model state, e.g. a causal-mask buffer)
        return "small" if tensor.untyped_storage().nbytes() < max(self.min_bytes, 1) else None

    def _pack_into(self, group: int, name: str = ""):
        def pack(tensor: torch.Tensor):
            reason = self._keep_reason(tensor)
            if reason is not None:
                if reason != "wrapped":
                    self._count_kept(tensor.untyped_storage(), reason)
                return _Kept(tensor, tensor._version, name)
            stored = self._offload(tensor, group, name)
            return _Packed(stored, tensor.dtype, tuple(tensor.size()), tuple(tensor.stride()),
                           tensor.storage_offset())
        return pack

    def _count_kept(self, storage: torch.UntypedStorage, reason: str) -> None:
        ref = self._kept.get(storage._cdata)
        if ref is None or ref.expired():
            self._kept[storage._cdata] = StorageWeakRef(storage)
            if reason != "leaf":
                self.kept_bytes += storage.nbytes()

    def _offload(self, tensor: torch.Tensor, group: int, name: str = "") -> _Stored:
        """The _Stored for ``tensor``'s storage: an earlier copy of the same live storage, or a new async copy.

        A fake tensor (FakeTensorMode) is accounted like a real one but not copied: its _Stored keeps the
        fake mode, and the fetch makes a fresh fake storage on the device (shapes and bytes only).
        """
        storage = tensor.untyped_storage()
        key = storage._cdata  # the StorageImpl: one key for every view of it (real or fake)
        hit = self._by_storage.get(key)
        if hit is not None and not hit[0].expired() and hit[1]() is not None \
                and hit[1]().version == tensor._version:  # same bytes: not modified in place since
            return hit[1]()
        stored = _Stored(storage.nbytes(), group, tensor, name)
        if is_fake(tensor):
            stored.fake_mode = tensor.fake_mode  # nothing to copy, nothing on the host
        self._by_storage[key] = (StorageWeakRef(storage), weakref.ref(stored))
        self._groups[group].append(weakref.ref(stored))
        self.offloaded_bytes += stored.nbytes
        self.copies += 1
        return stored

    def _copy_to_host(self, stored: _Stored, storage: torch.UntypedStorage) -> None:
        """Device storage -> a pool buffer, on the side stream after the current stream's work."""
        with host_side(self.device):
            host = self.pool.acquire(stored.nbytes)
            device_bytes = torch.empty(0, dtype=torch.uint8, device=self.device).set_(storage)
            with torch.no_grad(), self.sync.on_side():
                host.copy_(device_bytes, non_blocking=self.pool.pin)
                stored.host_event = self.sync.record()
        self.sync.used_on_side(device_bytes)  # the allocator must not reuse it before the copy has read it
        stored.host = host
        stored.cell[0] = (host, stored.host_event)
        weakref.finalize(stored, _give_back, self.pool, stored.cell)

    # unpack -----------------------------------------------------------------------------------------------------
    def _fetch(self, group: int, why: str) -> None:
        """Issue the host->device copies of every not-yet-fetched storage of ``group`` on the side stream."""
        refs, self._groups[group] = self._groups[group], []
        self.fetches.append((group, why))
        for ref in refs:
            stored = ref()
            if stored is not None and stored.device_bytes is None:
                self._fetch_one(stored)

    def _fetch_one(self, stored: _Stored) -> None:
        if stored.fake_mode is not None:  # fake: a fresh fake storage, no copy
            with stored.fake_mode:
                stored.device_bytes = torch.empty(stored.nbytes, dtype=torch.uint8, device=self.device)
            return
        device_bytes = torch.empty(stored.nbytes, dtype=torch.uint8, device=self.device)
        with torch.no_grad(), self.sync.on_side(), host_side(self.device):
            device_bytes.copy_(stored.host, non_blocking=self.pool.pin)
            stored.ready = self.sync.record()
        self.sync.used_on_side(device_bytes)
        stored.device_bytes = device_bytes
        self.pool.release(stored.host, stored.ready)
        stored.host, stored.cell[0] = None, None

    def _unpack(self, packed):
        if isinstance(packed, _Kept):  # left on the device
            _check_version(packed.tensor._version != packed.version, tuple(packed.tensor.shape), packed.tensor.dtype,
                           packed.name)
            return packed.tensor
        stored = packed.stored
        source = stored.source()
        _check_version(stored.modified or (source is not None and source._version != stored.version),
                       packed.size, packed.dtype, stored.name)
        if stored.pending is not None:  # backward before the group's forward ended: still on the device
            return stored.pending.detach().as_strided(packed.size, packed.stride, packed.offset)
        if stored.device_bytes is None:
            self._fetch(stored.group, "demand")
            if stored.device_bytes is None:  # deduplicated into a group fetched earlier, then re-saved
                self._fetch_one(stored)
        if self.prefetch and stored.group not in self._visited:
            self._visited.add(stored.group)  # backward entered this layer: bring the next one back
            self._prefetch_before(stored.group)
        self.sync.wait(stored.ready)
        with stored.fake_mode or contextlib.nullcontext():
            return torch.empty(0, dtype=packed.dtype, device=self.device).set_(
                stored.device_bytes.untyped_storage(), packed.offset, packed.size, packed.stride)

    def _prefetch_before(self, group: int) -> None:
        """Prefetch the nearest earlier group that still has storages on the host (backward's next layer)."""
        for earlier in range(group - 1, -1, -1):
            if any(ref() is not None for ref in self._groups[earlier]):
                self._fetch(earlier, "prefetch")
                return
