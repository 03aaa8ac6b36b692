"""Step time: warm-up, then repeats; median and interquartile range, in seconds.

CUDA: a pair of ``torch.cuda.Event(enable_timing=True)`` around each repeat (device time, synchronized);
CPU: ``time.perf_counter``. Not available under FakeTensorMode (nothing runs).
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from typing import Callable, Iterator

import numpy as np
import torch

MIN_REPEATS = 5


@dataclass(frozen=True)
class Timing:
    """Seconds per step: median, IQR (75th − 25th percentile), the samples, and how they were taken."""

    median_s: float
    iqr_s: float
    samples_s: tuple[float, ...]
    warmup: int
    method: str


def time_step(step: Callable[[], object], device: str | torch.device = "cpu", warmup: int = 1,
              repeats: int = MIN_REPEATS) -> Timing:
    """Time ``step()``: ``warmup`` untimed calls, then ``repeats`` (≥ 5) timed ones.

    Raises ValueError if repeats < 5. Source: torch.cuda.Event elapsed_time (ms, converted to s) on CUDA,
    time.perf_counter on CPU; numpy.percentile for the quartiles.
    """
    if repeats < MIN_REPEATS:
        raise ValueError(f"repeats must be ≥ {MIN_REPEATS}, got {repeats}")
    device = torch.device(device)
    for _ in range(warmup):
        step()
    samples = [_cuda_time(step, device) if device.type == "cuda" else _cpu_time(step) for _ in range(repeats)]
    q25, q50, q75 = np.percentile(samples, [25, 50, 75])
    method = "torch.cuda.Event" if device.type == "cuda" else "time.perf_counter"
    return Timing(float(q50), float(q75 - q25), tuple(samples), warmup, method)


def _cpu_time(step: Callable[[], object]) -> float:
    start = time.perf_counter()
    step()
    return time.perf_counter() - start


def _cuda_time(step: Callable[[], object], device: torch.device) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize(device)
    start.record()
    step()
    end.record()
    torch.cuda.synchronize(device)
    return start.elapsed_time(end) / 1000.0


@contextlib.contextmanager
def intra_op_threads(n: int | None) -> Iterator[None]:
    """torch.set_num_threads(n) inside the block, the previous count restored after; None changes nothing.

    The timing protocol fixes the thread count on the CPU so that timed runs on a shared machine compare
    like with like (and a copy or step does not wait for the busier core)."""
    before = torch.get_num_threads()
    if n is not None:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)
