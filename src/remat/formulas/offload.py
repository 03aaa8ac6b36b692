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

Recompute instead costs the re-run forward: the whole layer (full) or core attention (selective) —
seconds from the per-op roofline (remat.timemodel.predict) at GPU sizes, or FLOPs / an achieved FLOP/s
(``layer_compute_s``, Korthikanti Appendix A FLOPs) for a measured run. Offload wins where
exposed < recompute; the break-even bandwidth is the BW at which the two are equal (``breakeven_bandwidth``).

Equal freed bytes (``freed_bytes``, ``freed_copies``, ``equal_bytes``): a recompute mode and the offload it is
compared with must free the same device bytes, or the comparison is meaningless. Per layer and TP rank
(Korthikanti §4.1 itemization, ``remat.formulas.korthikanti``):

    selective frees the 3 core-attention tensors, 5as²b/t bytes (the 5as/h term of Eq. 1: sbh·5as/h = 5as²b)
        -> compared with offloading exactly those tensors (3 copies each way);
    full frees everything but the layer input it checkpoints, none − 2sbh (t = 1: sbh(32 + 5as/h))
        -> compared with offloading those 13 tensors (the whole layer, sbh(34 + 5as/h) at t = 1, less the
           2sbh input that full recompute keeps too).

The link is the one a GPU gets when every GPU on its host-link uplink copies at once
(remat.timemodel.gpus.GPU.link: link bytes/s ÷ gpus_per_host_link).

The link a copy crosses is named by ``link_label``: ``SIMULATED`` on the CPU (a host memcpy stands in for it),
never PCIe.

Units: bytes (int), seconds (float), bandwidth in bytes/s (GB/s = 10⁹ B/s, never GiB/s unless named),
FLOP/s. Sources: the overlap model of ZeRO-Offload (Ren et al. 2021) and Beaumont et al. 2021 (offload
vs recompute for chains), applied per layer; FLOP counts from Korthikanti et al. 2022, Appendix A.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from remat.errors import UsageError
from remat.formulas import korthikanti


SIMULATED = "simulated: host memcpy"
"""The label of every copy measured without CUDA: a host memcpy standing in for the host<->device link."""


def device_kind(device) -> str:
    """"cpu" or "cuda" of a device name or torch.device ("cuda:1" -> "cuda"), without importing torch."""
    return str(getattr(device, "type", device)).split(":", 1)[0]


def link_label(device) -> str:
    """What a copy from/to ``device`` (a name or torch.device) crosses: ``SIMULATED`` on the CPU, the
    host<->CUDA link otherwise."""
    return SIMULATED if device_kind(device) == "cpu" else "host<->device copy (cuda)"


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


# --- equal freed bytes --------------------------------------------------------------------------------------------

EQUAL_BYTES = ("selective", "full")
"""The recompute modes an offload is compared with, each at the bytes that mode frees."""


def freed_bytes(s: int, b: int, h: int, a: int, t: int = 1, sp: bool = False, recompute: str = "selective") -> int:
    """Device bytes one layer on one TP rank stops holding under ``recompute`` (selective | full) compared
    with none: none − recompute (Korthikanti §4.1, Table 2). selective: the core-attention terms,
    5as²b/t (softmax output 2as²b, its dropout mask as²b, the dropout output 2as²b); full: all but the layer
    input, none − 2sbh (2sbh/t under SP). Raises UsageError (mode, tp, sp, seq) via korthikanti."""
    if recompute not in EQUAL_BYTES:
        raise UsageError("mode", f"must be one of {', '.join(EQUAL_BYTES)}, got {recompute!r}")
    return (korthikanti.layer_bytes(s, b, h, a, t, sp, "none")
            - korthikanti.layer_bytes(s, b, h, a, t, sp, recompute))


def freed_copies(recompute: str) -> int:
    """Tensors (= copies each way) an offload of what ``recompute`` frees moves per layer: the §4.1 terms
    stored under none but not under ``recompute`` (selective: 3, full: 13). Raises UsageError("mode")."""
    if recompute not in EQUAL_BYTES:
        raise UsageError("mode", f"must be one of {', '.join(EQUAL_BYTES)}, got {recompute!r}")
    # full stores one term, the layer input (= LayerNorm 1's input, a term under none too)
    return len(korthikanti.stored_terms("none")) - len(korthikanti.stored_terms(recompute))


@dataclass(frozen=True)
class EqualBytes:
    """Offload against recompute at equal freed bytes, one layer, one micro-batch, one TP rank.

    nbytes: freed by both (bytes); copies: tensors offloaded each way; recompute_s / offload_exposed_s:
    seconds each adds to the step; breakeven_bytes_per_s: the link (per direction, bytes/s) above which
    offload costs less (``breakeven_bandwidth``; inf when the per-copy latency alone costs more)."""

    recompute: str
    nbytes: int
    copies: int
    recompute_s: float
    offload_exposed_s: float
    breakeven_bytes_per_s: float

    @property
    def cheaper(self) -> str:
        """"offload" when its exposed copies cost less than the recompute, else the recompute mode (a tie
        goes to recompute: it needs no host memory)."""
        return "offload" if self.offload_exposed_s < self.recompute_s else self.recompute


def equal_bytes(recompute: str, nbytes: int, copies: int, forward_s: float, backward_s: float, recompute_s: float,
                link: Link) -> EqualBytes:
    """Offloading ``nbytes`` in ``copies`` copies each way (overlapped with the layer's ``forward_s`` and
    ``backward_s``, seconds) on ``link`` against recomputing with ``recompute_s`` seconds, where both free
    ``nbytes``. The break-even assumes the link's t0 and a symmetric bandwidth."""
    if recompute_s < 0:
        raise UsageError("recompute_s", f"must be ≥ 0 s, got {recompute_s!r}")
    return EqualBytes(recompute, nbytes, copies, recompute_s,
                      exposed_offload_s(nbytes, copies, forward_s, backward_s, link),
                      breakeven_bandwidth(nbytes, copies, forward_s, backward_s, recompute_s, link.t0_s))
