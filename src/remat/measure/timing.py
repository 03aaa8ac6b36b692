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
Around each call the machine's load is measured (``remat.measure.provenance.Load``: load averages, wall and own
CPU time, the cores other processes kept busy) and carried by every Timing and timed row; a window where others
used over BUSY_CORES cores is ``busy``, and the analysis treats such timings as invalid (remat.analysis.gates.busy).
Not available under FakeTensorMode (nothing runs).
"""

from __future__ import annotations

import contextlib
import math
import time
from dataclasses import dataclass
from typing import Callable, Iterator, Mapping

import torch
from torch.utils.benchmark import Measurement
from torch.utils.benchmark.utils.common import TaskSpec

from remat.measure.provenance import Load, load_since, record_timed, snapshot
from remat.policies.values import recompute_check

MIN_REPEATS = 5
UNMEASURED = Load(math.nan, math.nan, math.nan, math.nan, math.nan)
"""The load of a Timing made without a measured window (a test's fake clock)."""


@dataclass(frozen=True)
class Timing:
    """Seconds per call of one step: median, IQR (75th − 25th percentile), the pooled samples, the warm-up
    calls per visit, the clock ("torch.cuda.Event" or "time.perf_counter"), and the machine's load over the
    ``time_steps`` call that timed it (shared by every step of that call)."""

    median_s: float
    iqr_s: float
    samples_s: tuple[float, ...]
    warmup: int
    method: str
    load: Load = UNMEASURED

    def columns(self, prefix: str = "step_time") -> dict:
        """The table columns every timed row carries: ``<prefix>_s``, ``<prefix>_iqr_s``, ``<prefix>_samples``
        (count), ``timing_method``, and the load over the timing call: ``timing_load_before`` and
        ``timing_load_after`` (1-min load averages), ``timing_wall_s`` and ``timing_cpu_s`` (the call's wall
        time and this process's CPU time, seconds), ``timing_other_cores`` (other processes' CPU seconds per
        wall second, i.e. cores; NaN off Linux) and ``timing_busy`` (over BUSY_CORES)."""
        return {f"{prefix}_s": self.median_s, f"{prefix}_iqr_s": self.iqr_s,
                f"{prefix}_samples": len(self.samples_s), "timing_method": self.method,
                **self.load.columns("timing_"), "timing_busy": self.load.busy}


def time_steps(steps: Mapping[str, Callable[[], object]], device: str | torch.device = "cpu", *,
               rounds: int = 1, repeats: int = MIN_REPEATS, warmup: int = 1,
               setup: Callable[[str], object] | None = None, threads: int | None = None) -> dict[str, Timing]:
    """Time every step of ``steps`` (name -> zero-argument callable) in ``rounds`` interleaved rounds.

    Per round and step: ``setup(name)`` if given, ``warmup`` untimed calls, ``repeats`` (≥ 5) timed calls;
    the visiting order is rotated by one each round. On a CPU the calls run on ``threads`` intra-op threads
    (None keeps torch's setting). Returns name -> Timing over the ``rounds · repeats`` pooled samples
    (seconds), each carrying the load over the whole call (``Timing.load``). Raises ValueError if repeats < 5,
    rounds < 1 or warmup < 0.
    """
    if repeats < MIN_REPEATS:
        raise ValueError(f"repeats must be ≥ {MIN_REPEATS}, got {repeats}")
    if rounds < 1 or warmup < 0:
        raise ValueError(f"rounds must be ≥ 1 and warmup ≥ 0, got {rounds}, {warmup}")
    device = torch.device(device)
    clock = _cuda_time if device.type == "cuda" else _cpu_time
    names = list(steps)
    samples: dict[str, list[float]] = {name: [] for name in names}
    start = snapshot()
    with intra_op_threads(threads if device.type == "cpu" else None), recompute_check("off"):
        for r in range(rounds):
            for name in names[r % len(names):] + names[:r % len(names)]:
                if setup is not None:
                    setup(name)
                for _ in range(warmup):
                    steps[name]()
                samples[name] += [clock(steps[name], device) for _ in range(repeats)]
    load = load_since(start)
    record_timed(load)
    method = "torch.cuda.Event" if device.type == "cuda" else "time.perf_counter"
    return {name: _timing(name, xs, warmup, method, load) for name, xs in samples.items()}


def time_step(step: Callable[[], object], device: str | torch.device = "cpu", warmup: int = 1,
              repeats: int = MIN_REPEATS, threads: int | None = None) -> Timing:
    """One step timed by ``time_steps`` (one round). Raises ValueError if repeats < 5."""
    return time_steps({"step": step}, device, repeats=repeats, warmup=warmup, threads=threads)["step"]


def _timing(name: str, samples: list[float], warmup: int, method: str, load: Load = UNMEASURED) -> Timing:
    """Median and IQR of ``samples`` by torch.utils.benchmark.Measurement (linear-interpolated quantiles)."""
    spec = TaskSpec(stmt=name, setup="", global_setup="", label=None, sub_label=None, description=None,
                    env=None, num_threads=torch.get_num_threads())
    m = Measurement(number_per_run=1, raw_times=list(samples), task_spec=spec)
    return Timing(float(m.median), float(m.iqr), tuple(samples), warmup, method, load)


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
