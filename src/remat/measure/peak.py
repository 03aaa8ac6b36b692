"""Peak bytes of a training step: CUDA's allocator statistics on a GPU, torch's MemTracker elsewhere.

    with PeakMemory("cpu", model, tokens, targets) as mem:
        step()
    mem.peak_bytes, mem.method

* cuda: ``torch.cuda.reset_peak_memory_stats`` on entry, ``torch.cuda.max_memory_allocated`` on exit
  (bytes held by live tensors, allocator-rounded; everything on the device, parameters included).
* cpu and FakeTensorMode: ``torch.distributed._tools.mem_tracker.MemTracker``, a dispatch mode that follows
  every tensor storage made inside it (plus the modules/tensors passed, registered with track_external)
  and keeps the running and peak totals; under FakeTensorMode no memory is used at all.
``current_bytes()`` gives the live total at any point inside the block (for before/after deltas).
"""

from __future__ import annotations

import torch
from torch import nn

CUDA_METHOD = "torch.cuda.max_memory_allocated"
TRACKER_METHOD = "torch.distributed._tools.mem_tracker.MemTracker"


class PeakMemory:
    """Context manager measuring the peak bytes allocated on ``device`` ("cpu", "cuda[:i]") inside it.

    ``tracked``: modules and tensors that exist before the block (parameters, inputs); the tracker counts
    them from the start (CUDA counts everything anyway). After exit: ``peak_bytes`` (int bytes) and
    ``method`` (which of the two mechanisms measured it). Source: torch.cuda memory statistics;
    torch.distributed._tools.mem_tracker.MemTracker.
    """

    def __init__(self, device: str | torch.device, *tracked: nn.Module | torch.Tensor):
        self.device = torch.device(device)
        self.method = CUDA_METHOD if self.device.type == "cuda" else TRACKER_METHOD
        self.tracked = tracked
        self.peak_bytes: int | None = None

    def __enter__(self) -> "PeakMemory":
        if self.method == CUDA_METHOD:
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
        else:
            from torch.distributed._tools.mem_tracker import MemTracker
            self._tracker = MemTracker()
            self._tracker.track_external(*self.tracked)
            self._tracker.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        if self.method == CUDA_METHOD:
            torch.cuda.synchronize(self.device)
            self.peak_bytes = int(torch.cuda.max_memory_allocated(self.device))
        else:
            self._tracker.__exit__(*exc)
            self.peak_bytes = self._total(self._tracker.get_tracker_snapshot("peak"))

    def current_bytes(self) -> int:
        """Bytes live on the device now (int)."""
        if self.method == CUDA_METHOD:
            torch.cuda.synchronize(self.device)
            return int(torch.cuda.memory_allocated(self.device))
        return self._total(self._tracker.get_tracker_snapshot("current"))

    def _total(self, snapshot: dict) -> int:
        for device, stats in snapshot.items():
            if torch.device(device).type == self.device.type:
                return int(stats["Total"])
        return 0
