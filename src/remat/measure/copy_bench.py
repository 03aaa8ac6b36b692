"""The copies of the bandwidth benchmark (remat.measure.bandwidth): device and host buffers, copy timing
with torch.cuda.Event on a copy stream (CUDA) or time.perf_counter (CPU), and a concurrent matmul.

Without CUDA the "device" buffer is a second host buffer: every copy is a host memcpy (labelled
``remat.measure.bandwidth.SIMULATED``).
"""

from __future__ import annotations

import contextlib
import threading
import time

import numpy as np
import torch


class CopyBench:
    """Buffers and timers for one device: a device buffer and host buffers (pageable; pinned with CUDA).

    On the CPU the device buffer is a second host buffer, so every copy is a host memcpy (SIMULATED).
    Each copy takes the next slice of an arena of ``arena_bytes`` (a running cursor), so a copy never finds
    its bytes in a CPU cache left warm by the previous one: like a real link, it moves bytes from memory.
    """

    def __init__(self, device: torch.device, arena_bytes: int):
        self.device, self.cuda = device, device.type == "cuda"
        self.arena, self.cursor = arena_bytes, 0
        self.dev = torch.ones(arena_bytes, dtype=torch.uint8, device=device)  # touched: no first-use faults
        self.host = {"pageable": torch.ones(arena_bytes, dtype=torch.uint8)}
        if self.cuda:
            self.host["pinned"] = torch.ones(arena_bytes, dtype=torch.uint8, pin_memory=True)
            self.copy_stream = torch.cuda.Stream(device)
            self.compute_stream = torch.cuda.Stream(device)
            n = 4096
            self.a = torch.randn(n, n, device=device, dtype=torch.bfloat16)
            self.mm_s = self._time_matmul()

    def _pair(self, direction: str, memory: str, nbytes: int):
        """(dst, src) slices for the next copy of ``nbytes`` bytes."""
        if self.cursor + nbytes > self.arena:
            self.cursor = 0
        lo, self.cursor = self.cursor, self.cursor + nbytes
        host, dev = self.host[memory][lo:lo + nbytes], self.dev[lo:lo + nbytes]
        return (dev, host) if direction == "h2d" else (host, dev)

    def _time_matmul(self) -> float:
        """Seconds per 4096² bf16 matmul on the compute stream (CUDA events)."""
        torch.cuda.synchronize(self.device)  # the operand was made on the default stream
        with torch.cuda.stream(self.compute_stream):
            for _ in range(3):
                self.a @ self.a
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(20):
                self.a @ self.a
            end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3 / 20

    def time_copies(self, direction: str, memory: str, nbytes: int, repeats: int, overlap: bool,
                    expect_s: float | None = None) -> list[float]:
        """Seconds per copy of ``nbytes`` bytes, ``repeats`` times, after one warm-up copy.

        CUDA: torch.cuda.Event timing on a copy stream; with ``overlap``, matmuls enough to outlast the
        copies (2x ``expect_s``·repeats) are queued first on a compute stream. CPU: time.perf_counter
        around each memcpy; with ``overlap``, a host thread runs matmuls meanwhile.
        """
        pairs = [self._pair(direction, memory, nbytes) for _ in range(repeats + 1)]
        pairs[0][0].copy_(pairs[0][1])  # warm-up
        if self.cuda:
            return self._time_cuda(pairs[1:], overlap, expect_s)
        with host_matmul_thread(overlap):
            times = []
            for dst, src in pairs[1:]:
                t = time.perf_counter()
                dst.copy_(src)
                times.append(time.perf_counter() - t)
        return times

    def _time_cuda(self, pairs, overlap, expect_s) -> list[float]:
        torch.cuda.synchronize(self.device)
        if overlap:
            n_mm = int(np.ceil(2 * (expect_s or 1e-3) * len(pairs) / self.mm_s)) + 2
            with torch.cuda.stream(self.compute_stream):
                for _ in range(n_mm):
                    self.a @ self.a
        events = []
        with torch.cuda.stream(self.copy_stream):
            for dst, src in pairs:
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                dst.copy_(src, non_blocking=True)
                end.record()
                events.append((start, end))
        torch.cuda.synchronize(self.device)
        return [s.elapsed_time(e) / 1e3 for s, e in events]


@contextlib.contextmanager
def host_matmul_thread(active: bool, n: int = 512):
    """While active: a host thread running n×n float32 matmuls (torch releases the GIL) — the CPU stand-in
    for a concurrent compute stream."""
    if not active:
        yield
        return
    stop = threading.Event()
    a = torch.randn(n, n)

    def spin():
        torch.set_num_threads(1)  # the other core (OpenMP thread counts are per calling thread)
        while not stop.is_set():
            torch.mm(a, a)

    thread = threading.Thread(target=spin, daemon=True)
    thread.start()
    time.sleep(0.01)
    try:
        yield
    finally:
        stop.set()
        thread.join()
