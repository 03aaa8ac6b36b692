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

from remat.policies.values import recompute_check

CUDA_METHOD = "torch.cuda.max_memory_allocated"
TRACKER_METHOD = "torch.distributed._tools.mem_tracker.MemTracker"


class PeakMemory:
    """Context manager measuring the peak bytes allocated on ``device`` ("cpu", "cuda[:i]") inside it.

    ``tracked``: modules and tensors that exist before the block (parameters, inputs); the tracker counts
    them from the start (CUDA counts everything anyway). ``follow_modules``: MemTracker's module tracker, which
    labels bytes by module by hooking every module's inputs for backward; off by default, as the totals are the
    same when every module is in ``tracked`` (tested) and it adds about a third to a measured CPU step — and its
    hooks fail where torch's ``autograd.grad(inputs=...)`` meets them on a leaf (torch.distributed.pipelining's
    stage backward). After exit: ``peak_bytes`` (int bytes) and
    ``method`` (which of the two mechanisms measured it). Source: torch.cuda memory statistics;
    torch.distributed._tools.mem_tracker.MemTracker.
    """

    def __init__(self, device: str | torch.device, *tracked: nn.Module | torch.Tensor, follow_modules: bool = False):
        self.device = torch.device(device)
        self.method = CUDA_METHOD if self.device.type == "cuda" else TRACKER_METHOD
        self.tracked = tracked
        self.follow_modules = follow_modules
        self.peak_bytes: int | None = None

    def __enter__(self) -> "PeakMemory":
        self._unchecked = recompute_check("off")      # the value check's checksums are not the model's bytes
        self._unchecked.__enter__()
        if self.method == CUDA_METHOD:
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
        else:
            self._tracker = _totals_tracker()
            if not self.follow_modules:
                self._tracker._mod_tracker = _Unfollowed()
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
        self._unchecked.__exit__(*exc)

    def peak_so_far(self) -> int:
        """The peak bytes since entry or the last ``reset_peak`` (int), inside the block."""
        if self.method == CUDA_METHOD:
            torch.cuda.synchronize(self.device)
            return int(torch.cuda.max_memory_allocated(self.device))
        return self._total(self._tracker.get_tracker_snapshot("peak"))

    def reset_peak(self) -> None:
        """Start a new peak from the bytes live now (the peak of a phase: reset, run it, ``peak_so_far``).
        CUDA: torch.cuda.reset_peak_memory_stats. MemTracker has no public reset: its peak table is set to the
        current snapshot (torch 2.11–2.13 ``_peak_mem`` / ``_peak_mem_snap``); where those attributes are
        missing, RuntimeError — never a silently wrong peak."""
        if self.method == CUDA_METHOD:
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            return
        tracker = self._tracker
        if not (hasattr(tracker, "_peak_mem") and hasattr(tracker, "_peak_mem_snap")):
            raise RuntimeError("this torch's MemTracker has no _peak_mem table: cannot reset its peak")
        snapshot = tracker.get_tracker_snapshot("current")
        tracker._peak_mem = {dev: stats["Total"] for dev, stats in snapshot.items()}
        tracker._peak_mem_snap = snapshot

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


def _totals_tracker():
    """torch's MemTracker without its per-module peak snapshots, which it refreshes for every module seen so
    far on every op (minutes of Python on a 32-layer model's step; we read the device totals only), and without
    gradient hooks on parameters (which fail on frozen ones). The overrides touch the private
    ``_curr_mem_snap`` / ``_peak_mem`` / ``_peak_mem_snap`` / ``_track_module_params_and_buffers`` (torch
    2.11–2.13); where they are missing, the plain MemTracker (slower, same totals, no frozen parameters)."""
    from torch.distributed._tools.mem_tracker import MemTracker

    class TotalsTracker(MemTracker):
        def _track_module_params_and_buffers(self, module, install_grad_hooks: bool = True):
            # no gradient hooks: they only re-label gradients (every tensor made in the block is counted
            # anyway), and registering one on a frozen parameter raises (LoRA, frozen embeddings)
            return super()._track_module_params_and_buffers(module, install_grad_hooks=False)

        def _update_peak_stats(self, peak_state) -> None:
            for dev, snap in self._curr_mem_snap.items():
                if self._peak_mem.get(dev, 0) < snap["Total"]:
                    self._peak_mem[dev] = snap["Total"]
                    self._peak_mem_snap[dev] = dict(snap)

    probe = MemTracker()
    if all(hasattr(probe, a) for a in ("_curr_mem_snap", "_peak_mem", "_peak_mem_snap", "_update_peak_stats",
                                       "_track_module_params_and_buffers")):
        return TotalsTracker()
    return probe


def _Unfollowed():
    """A ModTracker that follows nothing: no global module hooks, no gradient hooks on module inputs."""
    from torch.distributed._tools.mod_tracker import ModTracker

    class Unfollowed(ModTracker):
        def __enter__(self):
            return self

        def __exit__(self, *args):
            return None

    return Unfollowed()
