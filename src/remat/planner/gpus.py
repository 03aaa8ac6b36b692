"""GPU presets for the planner: memory, peak 16-bit tensor FLOP/s, achievable fraction, host link.

Every value can be overridden from the command line (``remat plan --peak-tflops --achievable
--link-gbps --link-t0-us --memory``). Sources, as publicly documented by NVIDIA (dense, no sparsity):

* a100-80gb  — A100 SXM4 80GB: 312 TFLOP/s BF16; 80 GiB HBM2e (nvidia-smi: 81920 MiB); host link PCIe
  Gen4 ×16, 32 GB/s per direction nominal.
* h100-80gb  — H100 SXM5 80GB: 989 TFLOP/s BF16 (1979 with sparsity); 80 GB HBM3 (nvidia-smi: 81559 MiB);
  PCIe Gen5 ×16, 64 GB/s per direction nominal.
* h200-141gb — H200 SXM 141GB: the H100's compute (989 TFLOP/s BF16); 141 GB HBM3e (nvidia-smi:
  143771 MiB); PCIe Gen5 ×16, 64 GB/s per direction nominal.

Defaults that are assumptions, not specifications (say so wherever a plan is shown): the achievable fraction
of peak (0.5 — Korthikanti et al. report 52–56 % hardware FLOPs utilization on A100 for their models), the
achieved link bandwidth (80 % of nominal, pinned host memory) and the per-copy latency t0 (10 µs). Measure
your own link with ``remat bandwidth --device cuda`` and pass ``--link-gbps`` / ``--link-t0-us``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from remat.errors import UsageError
from remat.formulas.offload import Link
from remat.units import GiB, MiB


@dataclass(frozen=True)
class GPU:
    """One accelerator as the planner sees it (bytes, FLOP/s, bytes/s, seconds)."""

    name: str
    memory_bytes: int
    peak_flops: float          # dense 16-bit tensor-core FLOP/s
    achievable: float          # fraction of peak a transformer layer reaches
    link_bytes_per_s: float    # host link, per direction, achieved (bytes/s; GB/s = 1e9)
    link_t0_s: float           # fixed cost per copy (seconds)
    host_memory_bytes: int     # host memory available to this GPU for offload
    source: str = ""

    @property
    def flops_per_s(self) -> float:
        """Achievable FLOP/s = peak × achievable fraction."""
        return self.peak_flops * self.achievable

    @property
    def link(self) -> Link:
        """The host link for the break-even model (same bandwidth both ways)."""
        return Link.symmetric(self.link_bytes_per_s, self.link_t0_s)


_HOST = 256 * GiB   # DGX-class nodes: 2 TiB host memory for 8 GPUs
GPUS: dict[str, GPU] = {
    "a100-80gb": GPU("a100-80gb", 81920 * MiB, 312e12, 0.5, 0.8 * 32e9, 10e-6, _HOST,
                     "A100 SXM4 80GB: 312 TFLOP/s BF16 dense; PCIe Gen4 x16 (32 GB/s nominal)"),
    "h100-80gb": GPU("h100-80gb", 81559 * MiB, 989e12, 0.5, 0.8 * 64e9, 10e-6, _HOST,
                     "H100 SXM5 80GB: 989 TFLOP/s BF16 dense; PCIe Gen5 x16 (64 GB/s nominal)"),
    "h200-141gb": GPU("h200-141gb", 143771 * MiB, 989e12, 0.5, 0.8 * 64e9, 10e-6, _HOST,
                      "H200 SXM 141GB: 989 TFLOP/s BF16 dense; PCIe Gen5 x16 (64 GB/s nominal)"),
}


def gpu(name: str, **overrides) -> GPU:
    """The preset ``name`` with fields overridden (None values ignored).

    Raises UsageError("--gpu") for an unknown preset, UsageError(<field>) for a non-positive value or an
    achievable fraction outside (0, 1]."""
    if name not in GPUS:
        raise UsageError("--gpu", f"unknown GPU preset {name!r} (presets: {', '.join(GPUS)})")
    changes = {k: v for k, v in overrides.items() if v is not None}
    out = replace(GPUS[name], **changes)
    for field in ("memory_bytes", "peak_flops", "link_bytes_per_s", "host_memory_bytes"):
        if not getattr(out, field) > 0:
            raise UsageError(field, f"must be > 0, got {getattr(out, field)!r}")
    if not 0 < out.achievable <= 1:
        raise UsageError("achievable", f"must be in (0, 1], got {out.achievable!r}")
    if not out.link_t0_s >= 0:
        raise UsageError("link_t0_s", f"must be ≥ 0, got {out.link_t0_s!r}")
    return out
