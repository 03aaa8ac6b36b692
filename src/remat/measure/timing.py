"""The one timing protocol: named steps timed in interleaved rounds; median and IQR per step, in seconds.

Every timed number of the project (sweeps, layer timing, offload steps, planner calibration and validation)
comes from ``time_steps``. Protocol: ``rounds`` rounds; each round visits every step once, in an order
rotated by one per round, and per visit calls ``setup(name)`` (e.g. apply a policy), ``warmup`` untimed
calls, then ``repeats`` timed calls. A load change on a shared machine therefore hits all steps alike, and
samples are pooled over the rounds. CUDA: a pair of ``torch.cuda.Event(enable_timing=True)`` around each call
(device time, synchronized); CPU: ``time.perf_counter``. The statistics are torch.utils.benchmark's
``Measurement`` (median, IQR) over the pooled per-call samples. Its ``Timer`` is not used to run the steps:
``Timer.timeit`` adds max(number // 100, 2) warm-up calls to every measurement (three calls per sample for
seconds-long training steps) and times the host clock, not CUDA events.
Not available under FakeTensorMode (nothing runs).
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from typing import Callable, Iterator, Mapping

import torch
from torch.utils.benchmark import Measurement
from torch.utils.benchmark.utils.common import TaskSpec

MIN_REPEATS = 5


@dataclass(frozen=True)
class Timing:
    """Seconds per call of one step: median, IQR (75th − 25th percentile), the pooled samples, the warm-up
    calls per visit, and the clock ("torch.cuda.Event" or "time.perf_counter")."""

    median_s: float
    iqr_s: float
    samples_s: tuple[float, ...]
    warmup: int
    method: str

    def columns(self, prefix: str = "step_time") -> dict:
        """The table columns every timed row carries: ``<prefix>_s``, ``<prefix>_iqr_s``, ``<prefix>_samples``
        (count) and ``timing_method``."""
        return {f"{prefix}_s": self.median_s, f"{prefix}_iqr_s": self.iqr_s,
                f"{prefix}_samples": len(self.samples_s), "timing_method": self.method}


def time_steps(steps: Mapping[str, Callable[[], object]], device: str | torch.device = "cpu", *,
               rounds: int = 1, repeats: int = MIN_REPEATS, warmup: int = 1,
               setup: Callable[[str], object] | None = None, threads: int | None = None) -> dict[str, Timing]:
    """Time every step of ``steps`` (name -> zero-argument callable) in ``rounds`` interleaved rounds.

    Per round and step: ``setup(name)`` if given, ``warmup`` untimed calls, ``repeats`` (≥ 5) timed calls;
    the visiting order is rotated by one each round. On a CPU the calls run on ``threads`` intra-op threads
    (None keeps torch's setting). Returns name -> Timing over the ``rounds · repeats`` pooled samples
    (seconds). Raises ValueError if repeats < 5, rounds < 1 or warmup < 0.
    """
    if repeats < MIN_REPEATS:
        raise ValueError(f"repeats must be ≥ {MIN_REPEATS}, got {repeats}")
    if rounds < 1 or warmup < 0:
        raise ValueError(f"rounds must be ≥ 1 and warmup ≥ 0, got {rounds}, {warmup}")
    device = torch.device(device)
    clock = _cuda_time if device.type == "cuda" else _cpu_time
    names = list(steps)
    samples: dict[str, list[float]] = {name: [] for name in names}
    with intra_op_threads(threads if device.type == "cpu" else None):
        for r in range(rounds):
            for name in names[r % len(names):] + names[:r % len(names)]:
                if setup is not None:
                    setup(name)
                for _ in range(warmup):
                    steps[name]()
                samples[name] += [clock(steps[name], device) for _ in range(repeats)]
    method = "torch.cuda.Event" if device.type == "cuda" else "time.perf_counter"
    return {name: _timing(name, xs, warmup, method) for name, xs in samples.items()}


def time_step(step: Callable[[], object], device: str | torch.device = "cpu", warmup: int = 1,
              repeats: int = MIN_REPEATS, threads: int | None = None) -> Timing:
    """One step timed by ``time_steps`` (one round). Raises ValueError if repeats < 5."""
    return time_steps({"step": step}, device, repeats=repeats, warmup=warmup, threads=threads)["step"]


def _timing(name: str, samples: list[float], warmup: int, method: str) -> Timing:
    """Median and IQR of ``samples`` by torch.utils.benchmark.Measurement (linear-interpolated quantiles)."""
    spec = TaskSpec(stmt=name, setup="", global_setup="", label=None, sub_label=None, description=None,
                    env=None, num_threads=torch.get_num_threads())
    m = Measurement(number_per_run=1, raw_times=list(samples), task_spec=spec)
    return Timing(float(m.median), float(m.iqr), tuple(samples), warmup, method)


def _cpu_time(step: Callable[[], object], device: torch.device) -> float:
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
