"""The host side of activation offload (remat.offload): a pinned host buffer pool reused across steps, and the
CUDA side stream and events the copies run on (no-ops on the CPU).
"""

from __future__ import annotations

import contextlib
import threading

import torch
from torch.utils._python_dispatch import _disable_current_modes


def host_side(device: torch.device):
    """Context for the host buffers' allocations and copies. On a CPU "device" they run with torch's dispatch
    modes switched off, so that a MemTracker measuring the device (remat.measure.peak) does not count the
    simulated host memory as device memory (the device storages it still sees). On CUDA nothing to do: pinned
    host memory is not the device's."""
    return _disable_current_modes() if device.type == "cpu" else contextlib.nullcontext()


# --- synchronization: CUDA streams and events, or no-ops on the CPU ---------------------------------------------

class Sync:
    """A side stream and events on CUDA (torch.cuda.Stream / torch.cuda.Event); every method a no-op on CPU."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda" and torch.cuda.is_available()  # else CPU, or fake CUDA tensors
        self.side = torch.cuda.Stream(device) if self.cuda else None

    def on_side(self):
        """Context: work issued inside runs on the side stream, after all work already on the current stream."""
        if not self.cuda:
            return contextlib.nullcontext()
        self.side.wait_stream(torch.cuda.current_stream(self.side.device))
        return torch.cuda.stream(self.side)

    def record(self):
        """An event recorded on the current stream (None on CPU)."""
        if not self.cuda:
            return None
        event = torch.cuda.Event()
        event.record()
        return event

    def used_on_side(self, tensor: torch.Tensor) -> None:
        """Tell the caching allocator ``tensor`` is in use on the side stream (Tensor.record_stream)."""
        if self.cuda:
            tensor.record_stream(self.side)

    def wait(self, event) -> None:
        """Make the current stream wait for ``event`` (no-op for None)."""
        if event is not None:
            torch.cuda.current_stream(self.side.device).wait_event(event)


# --- the host buffer pool ------------------------------------------------------------------------------------------

class HostBufferPool:
    """Host byte buffers reused across steps; pinned (page-locked) when ``pin`` and CUDA is present.

    ``acquire(nbytes)`` returns a 1-D uint8 tensor of exactly ``nbytes`` bytes, reusing a free buffer of that
    size when there is one (a training step saves the same sizes every step, so after the first step the pool
    stops growing). ``release(buf, event)`` returns it; a buffer released with a CUDA event (a copy still
    reading it) is reused only after that event completes.

    Accounting (int bytes): ``reserved_bytes`` — all buffers the pool holds (the bytes pinned when pinned);
    ``live_bytes`` — buffers handed out now; ``peak_live_bytes`` — the most live at once since the last
    ``reset_peak()``. ``clear()`` frees the cached buffers (reserved back to the live bytes).
    Pinned memory: torch.empty(..., pin_memory=True) (CUDA's caching host allocator).
    """

    def __init__(self, pin: bool = False):
        self.pin = bool(pin) and torch.cuda.is_available()
        self._free: dict[int, list[tuple[torch.Tensor, object]]] = {}
        self._lock = threading.Lock()
        self.reserved_bytes = 0
        self.live_bytes = 0
        self.peak_live_bytes = 0
        self.allocations = 0

    def acquire(self, nbytes: int) -> torch.Tensor:
        """A uint8 host buffer of ``nbytes`` bytes (reused or newly allocated)."""
        with self._lock:
            free = self._free.get(nbytes)
            buf, event = free.pop() if free else (None, None)
            self.live_bytes += nbytes
            self.peak_live_bytes = max(self.peak_live_bytes, self.live_bytes)
            if buf is None:
                self.reserved_bytes += nbytes
                self.allocations += 1
        if event is not None:
            event.synchronize()  # a device copy may still be reading the buffer
        if buf is None:
            buf = torch.empty(nbytes, dtype=torch.uint8, pin_memory=self.pin)
        return buf

    def release(self, buf: torch.Tensor, event=None) -> None:
        """Give ``buf`` back; ``event`` (CUDA) marks when the last copy using it is done."""
        with self._lock:
            self.live_bytes -= buf.numel()
            self._free.setdefault(buf.numel(), []).append((buf, event))

    def reset_peak(self) -> None:
        """Start a new peak measurement at the current live bytes."""
        self.peak_live_bytes = self.live_bytes

    def clear(self) -> None:
        """Free every cached (not live) buffer."""
        with self._lock:
            for bufs in self._free.values():
                for buf, event in bufs:
                    if event is not None:
                        event.synchronize()
                    self.reserved_bytes -= buf.numel()
            self._free.clear()

    def stats(self) -> dict:
        """{'pinned': bool, 'reserved_bytes', 'live_bytes', 'peak_live_bytes', 'allocations'} (bytes, ints)."""
        return {"pinned": self.pin, "reserved_bytes": self.reserved_bytes, "live_bytes": self.live_bytes,
                "peak_live_bytes": self.peak_live_bytes, "allocations": self.allocations}
