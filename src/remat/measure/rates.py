"""The roofline's three rates measured on this machine: matmul FLOP/s, memory bandwidth and per-op overhead.

    steps, to_rates = rate_steps("cpu", "float32")
    rates = to_rates(time_steps({**steps, **my_steps}, "cpu", rounds=3))   # remat.timemodel.roofline.Rates

Three microbenchmarks, timed by the package's one timing protocol (``time_steps``) in the same interleaved
rounds as the caller's own steps (a load change on the machine hits both alike):

* matmul: ``torch.mm`` of two n × n matrices, 2n³ FLOPs (FLOP/s = 2n³ / median seconds);
* memory: ``dst.copy_(src)`` of a buffer well beyond the last-level cache, reading and writing it
  (bytes/s = 2 × buffer bytes / median seconds) — STREAM's "copy" kernel;
* overhead: ``torch.add`` of two one-element tensors — the fixed cost of dispatching one op (on a CPU it is
  paid by every op; on a GPU kernels queue asynchronously and it is hidden, so GPU presets use 0).

No collectives: a single device has no tensor-parallel link (``link_bytes_per_s`` is infinite, every
collective costs 0 — the CPU validation runs t = 1).
"""

from __future__ import annotations

from typing import Callable

import torch

from remat.timemodel.roofline import Rates
from remat.units import MiB


def rate_steps(device: str = "cpu", dtype: str = "float32", n: int = 1024, buffer_bytes: int = 256 * MiB
               ) -> tuple[dict, Callable[[dict], Rates]]:
    """The three microbenchmarks as named steps for ``time_steps`` (so a caller can interleave them with its
    own steps), and the function turning their Timings into Rates (FLOP/s, bytes/s, seconds per op)."""
    dev, dt = torch.device(device), getattr(torch, dtype)
    a, b = torch.randn(n, n, dtype=dt, device=dev), torch.randn(n, n, dtype=dt, device=dev)
    numel = buffer_bytes // torch.tensor([], dtype=dt).element_size()
    src, dst = torch.randn(numel, dtype=dt, device=dev), torch.empty(numel, dtype=dt, device=dev)
    tiny = torch.ones(1, dtype=dt, device=dev)
    steps = {"rate: matmul": lambda: torch.mm(a, b), "rate: copy": lambda: dst.copy_(src),
             "rate: overhead": lambda: torch.add(tiny, tiny)}

    def to_rates(times: dict) -> Rates:
        return Rates(2 * n**3 / times["rate: matmul"].median_s,
                     2 * numel * src.element_size() / times["rate: copy"].median_s, float("inf"),
                     times["rate: overhead"].median_s,
                     f"measured on {device} ({dtype}): mm {n}³, copy {buffer_bytes // MiB} MiB, add of 1 element")
    return steps, to_rates

