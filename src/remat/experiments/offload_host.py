"""Host-memory accounting of the two offloading variants of the offload-steps experiment.

* ``PolicyOffloadAccounting`` — the runtime's ``offload`` policy: the model's remat.offload.OffloadHooks and
  their pinned host pool (each storage copied once, parameters kept on the device).
* ``SaveOnCpuAccounting`` — torch.autograd.graph.save_on_cpu(pin_memory=True) around each layer, with a
  counter of the host tensors it makes (every saved tensor copied, views and parameters included).

Both: ``start()`` begins a step's measurement, ``live_bytes`` (int bytes on the host now), ``row()`` the
table columns (bytes are ints), ``tracked`` (whether a MemTracker measuring a CPU "device" sees the host copies:
torch's save_on_cpu makes them in its sight, remat's offload out of it, remat.offload_pool.host_side).
"""

from __future__ import annotations

import weakref

import torch


class SaveOnCpuAccounting:
    """torch.autograd.graph.save_on_cpu(pin_memory=True) around each layer (via the model's run_layers),
    with host accounting: it copies every saved tensor (views and parameters included) to a new host
    tensor; ``live_bytes`` are those alive now, ``peak_bytes`` the most since ``start()``."""

    tracked = True

    def __init__(self, model):
        self.model, self.live_bytes, self.peak_bytes, self.tensors = model, 0, 0, 0
        self.model.run_layers = self._run_layers  # the documented per-instance hook (models.transformer)

    def start(self) -> None:
        """Start a step: the peak at the bytes live now, no tensors counted."""
        self.peak_bytes, self.tensors = self.live_bytes, 0

    def row(self) -> dict:
        """host_peak_bytes, host_pinned, offloaded_bytes (= the peak), offloaded_tensors since ``start()``."""
        return {"host_peak_bytes": self.peak_bytes, "host_pinned": torch.cuda.is_available(),
                "offloaded_bytes": self.peak_bytes, "offloaded_tensors": self.tensors}

    def _freed(self, nbytes: int) -> None:
        self.live_bytes -= nbytes

    def _context(self):
        ctx = torch.autograd.graph.save_on_cpu(pin_memory=True)
        pack = ctx.pack_hook

        def counting_pack(t):
            device, host = pack(t)
            nbytes = host.numel() * host.element_size()
            self.live_bytes += nbytes
            self.tensors += 1
            self.peak_bytes = max(self.peak_bytes, self.live_bytes)
            weakref.finalize(host, self._freed, nbytes)
            return device, host
        ctx.pack_hook = counting_pack
        return ctx

    def _run_layers(self, x):
        for layer in self.model.layers:
            with self._context():
                x = layer(x)
        return x


class PolicyOffloadAccounting:
    """Host accounting of the ``offload`` policy: the model's remat.offload.OffloadHooks (made by
    remat.policies at the first offloaded forward) and its pool. ``start()`` sets the hooks' threshold to
    ``min_bytes`` (bytes) and needs the hooks made, i.e. one offloaded step run before."""

    tracked = False

    def __init__(self, model, min_bytes: int):
        self.model, self.min_bytes = model, min_bytes

    @property
    def hooks(self):
        return self.model.remat_offload.hooks

    @property
    def live_bytes(self) -> int:
        return self.hooks.pool.live_bytes if self.hooks is not None else 0

    def start(self) -> None:
        """Start a step: threshold set, pool peak and hook counters reset."""
        self.hooks.min_bytes = self.min_bytes
        self.hooks.pool.reset_peak()
        self.hooks.reset_counters()

    def row(self) -> dict:
        """Pool bytes (reserved = pinned on CUDA, peak live), pinned, and the hooks' counters since ``start()``."""
        pool, stats = self.hooks.pool, self.hooks.stats()
        return {"host_reserved_bytes": pool.reserved_bytes, "host_peak_bytes": pool.peak_live_bytes,
                "host_pinned": pool.pin, "offloaded_bytes": stats["offloaded_bytes"],
                "kept_bytes": stats["kept_bytes"], "min_bytes": stats["min_bytes"],
                "offloaded_tensors": stats["copies"]}
