"""Break-even model of activation offload against recompute, per layer.

Offloading a layer's saved activations moves ``nbytes`` in ``tensors`` copies device→host during forward
and host→device during backward. Each direction costs

    transfer = t0 · tensors + nbytes / BW                                  (seconds; the copy-time fit
                                                                           t = t0 + bytes/BW of
                                                                           remat.offload, per tensor)

and runs on a copy stream beside the compute, so it is free while it fits under the compute it can overlap
(forward: the layer's forward; backward: the layer's backward, during which the prefetch runs); only the
excess is exposed:

    exposed = max(0, transfer_d2h − forward_s) + max(0, transfer_h2d − backward_s)

Recompute instead costs the re-run forward: the whole layer (full) or core attention (selective),
FLOPs / achievable FLOP/s (Korthikanti Appendix A FLOPs). Offload wins where exposed < recompute; the
break-even bandwidth is the BW at which the two are equal (``breakeven_bandwidth``).

Units: bytes (int), seconds (float), bandwidth in bytes/s (GB/s = 10⁹ B/s, never GiB/s unless named),
FLOP/s. Sources: the overlap model of ZeRO-Offload (Ren et al. 2021) and Beaumont et al. 2021 (offload
vs recompute for chains), applied per layer; FLOP counts from Korthikanti et al. 2022, Appendix A.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from remat.errors import UsageError
from remat.formulas import korthikanti


@dataclass(frozen=True)
class Link:
    """A host link: bandwidth per direction (bytes/s) and the fixed cost per copy t0 (seconds)."""

    bw_d2h: float
    bw_h2d: float
    t0_s: float = 0.0

    def __post_init__(self):
        for name in ("bw_d2h", "bw_h2d"):
            value = getattr(self, name)
            if not value > 0:
                raise UsageError(name, f"bandwidth must be > 0 bytes/s, got {value!r}")
        if not self.t0_s >= 0:
            raise UsageError("t0_s", f"per-copy latency must be ≥ 0 s, got {self.t0_s!r}")

    @classmethod
    def symmetric(cls, bw: float, t0_s: float = 0.0) -> "Link":
        """The same bandwidth (bytes/s) both ways."""
        return cls(bw, bw, t0_s)


def transfer_s(nbytes: int, tensors: int, bw: float, t0_s: float = 0.0) -> float:
    """Seconds to copy ``nbytes`` in ``tensors`` copies one way: t0·tensors + nbytes/bw.

    Raises UsageError for negative sizes or a non-positive bandwidth."""
    if nbytes < 0 or tensors < 0:
        raise UsageError("nbytes" if nbytes < 0 else "tensors", "must not be negative")
    if not bw > 0:
        raise UsageError("bandwidth", f"must be > 0 bytes/s, got {bw!r}")
    return t0_s * tensors + nbytes / bw


@dataclass(frozen=True)
class OffloadCost:
    """One layer's offload, both directions (seconds)."""

    transfer_d2h_s: float
    transfer_h2d_s: float
    exposed_forward_s: float
    exposed_backward_s: float

    @property
    def exposed_s(self) -> float:
        """Seconds the step gets longer: the part of the copies no compute hides."""
        return self.exposed_forward_s + self.exposed_backward_s

    @property
    def hidden(self) -> bool:
        return self.exposed_s == 0.0


def offload_cost(nbytes: int, tensors: int, forward_s: float, backward_s: float, link: Link) -> OffloadCost:
    """Break-even cost of offloading one layer: copies (t0·tensors + nbytes/BW each way) overlapped with the
    layer's forward (device→host) and backward (host→device prefetch); the excess is exposed (seconds)."""
    if forward_s < 0 or backward_s < 0:
        raise UsageError("forward_s" if forward_s < 0 else "backward_s", "compute time must be ≥ 0 s")
    d2h = transfer_s(nbytes, tensors, link.bw_d2h, link.t0_s)
    h2d = transfer_s(nbytes, tensors, link.bw_h2d, link.t0_s)
    return OffloadCost(d2h, h2d, max(0.0, d2h - forward_s), max(0.0, h2d - backward_s))


def exposed_offload_s(nbytes: int, tensors: int, forward_s: float, backward_s: float, link: Link) -> float:
    """Seconds of offload transfer not hidden under the layer's compute (``offload_cost(...).exposed_s``)."""
    return offload_cost(nbytes, tensors, forward_s, backward_s, link).exposed_s


def compute_s(flops: int, flops_per_s: float) -> float:
    """Seconds for ``flops`` at an achievable rate (FLOP/s = peak × achievable fraction)."""
    if flops < 0:
        raise UsageError("flops", "must not be negative")
    if not flops_per_s > 0:
        raise UsageError("flops_per_s", f"must be > 0, got {flops_per_s!r}")
    return flops / flops_per_s


def layer_compute_s(s: int, b: int, h: int, flops_per_s: float, t: int = 1) -> dict[str, float]:
    """Seconds of one GPT layer on one of t tensor-parallel GPUs (Appendix A FLOPs / t / rate):
    forward (24bsh² + 4bs²h), backward (2× forward), and the recompute of full (a forward) and selective
    (core attention forward, 4bs²h)."""
    fwd = compute_s(korthikanti.layer_forward_flops(s, b, h) // t, flops_per_s)
    return {"forward_s": fwd, "backward_s": 2 * fwd,
            "full_recompute_s": fwd,
            "selective_recompute_s": compute_s(korthikanti.core_attn_forward_flops(s, b, h) // t, flops_per_s)}


def breakeven_bandwidth(nbytes: int, tensors: int, forward_s: float, backward_s: float,
                        recompute_s: float, t0_s: float = 0.0) -> float:
    """The symmetric link bandwidth (bytes/s) at which offloading a layer costs exactly ``recompute_s``.

    Offload beats that recompute for any faster link. exposed(T) with T = t0·tensors + nbytes/BW is
    0 up to T = a₁ = min(fwd, bwd), T − a₁ up to a₂ = max(fwd, bwd), then 2T − a₁ − a₂; solving
    exposed(T*) = recompute_s gives T*, and BW* = nbytes / (T* − t0·tensors). Returns 0.0 when nothing is
    moved, +inf when the per-copy latency alone already costs more than recomputing.
    """
    if nbytes < 0 or tensors < 0 or recompute_s < 0:
        raise UsageError("nbytes", "sizes and times must not be negative")
    a1, a2 = sorted((forward_s, backward_s))
    t_star = a1 + recompute_s if a1 + recompute_s <= a2 else (recompute_s + a1 + a2) / 2
    room = t_star - t0_s * tensors
    if nbytes == 0:
        return 0.0
    return math.inf if room <= 0 else nbytes / room
