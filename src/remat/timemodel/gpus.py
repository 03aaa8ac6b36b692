"""GPU presets for the time model and the planner: memory, peak dense 16-bit tensor FLOP/s, memory (HBM/GDDR)
bandwidth, GPU-to-GPU link (NVLink) and host link.

    gpu("rtx4090-24gb").memory_bytes      # 24564 MiB in bytes
    gpu("a100-80gb", achievable=0.4)      # a preset with a field overridden

Every value can be overridden from the command line (``remat plan --peak-tflops --achievable --link-gbps
--link-t0-us --memory --host-memory``). Sources — the vendor's published datasheets, DENSE numbers (NVIDIA
lists 16-bit tensor throughput "with sparsity", 2× the dense value, marked with an asterisk; the planner uses
the dense value; memory BW is the device memory's, HBM or GDDR — what the roofline prices elementwise ops by):

preset          card                   BF16 TFLOP/s      memory BW   link  document
                                       dense (sparse)
a100-40gb       A100 SXM4 40GB         312 (624)         1,555 GB/s  Gen4  NVIDIA A100 Tensor Core GPU Datasheet
a100-80gb       A100 SXM4 80GB         312 (624)         2,039 GB/s  Gen4  (same)
h100-pcie-80gb  H100 PCIe 80GB         756 (1,513)       2.0 TB/s    Gen5  NVIDIA H100 Tensor Core GPU Datasheet
h100-80gb       H100 SXM5 80GB         989 (1,979)       3.35 TB/s   Gen5  (same)
h200-141gb      H200 SXM 141GB         989 (1,979)       4.8 TB/s    Gen5  NVIDIA H200 Tensor Core GPU Datasheet
rtx4090-24gb    GeForce RTX 4090 24GB  165.2 (330.4)     1,008 GB/s  Gen4  NVIDIA Ada Lovelace GPU Architecture
                                                                           whitepaper v2.1, Appendix A
rtx-a6000-48gb  RTX A6000 48GB         154.8 (309.7)     768 GB/s    Gen4  NVIDIA Ampere GA102 GPU Architecture
                                                                           whitepaper; RTX A6000 datasheet
l40s-48gb       L40S 48GB              362.05 (733)      864 GB/s    Gen4  NVIDIA L40S Datasheet

The GeForce RTX 4090 and RTX A6000 figures are "BF16 Tensor TFLOPS with FP32 accumulate" (what mixed-precision
training uses; the RTX 4090's FP16-accumulate rate is twice that). Link: the host link, PCIe ×16, nominal 32 GB/s per
direction for Gen4 and 64 GB/s for Gen5 (the datasheets' 64 / 128 GB/s are both directions together).

Memory (``memory_bytes``) is what the driver reports as total (``nvidia-smi`` memory.total, MiB = 2^20 bytes),
not the marketing number: a card sold as "80GB" is not 80 GB or 80 GiB in general. A100 80GB: 81920 MiB
(= 80 GiB exactly); A100 40GB: 40960 MiB (= 40 GiB); H100 80GB (SXM5 and PCIe): 81559 MiB (79.65 GiB: part
of the 80 GiB is reserved); H200: 143771 MiB (140.4 GiB); RTX 4090: 24564 MiB (23.99 GiB); RTX A6000:
49140 MiB (ECC off, the workstation default); L40S: 46068 MiB (ECC on, the data-centre default). PyTorch can
allocate somewhat less (the CUDA context takes a few hundred MiB): the planner's stated workspace reserve
(``--reserve``, default 2 GiB) covers it.

Tensor parallelism beyond one NVLink domain (``nvlink_domain``: 8 GPUs on an HGX baseboard's NVSwitches, 2 on
a bridge, 1 without NVLink) runs its collectives over the per-GPU scale-out link (``scaleout_bytes_per_s``:
the node's InfiniBand port per GPU, or PCIe) — the ring is as slow as its slowest hop (``_SCALE`` names the
sources). Matmuls in float32 / float64 run at ``fp32_flops`` / ``fp64_flops`` (``GPU.peak_for``), not at the
16-bit tensor-core peak.

GPU-to-GPU link (``nvlink_bytes_per_s``, per direction; the tensor-parallel collectives' link): A100 SXM4
NVLink 3 600 GB/s total = 300 GB/s per direction; H100/H200 SXM NVLink 4 900 GB/s = 450; H100 PCIe with
NVLink bridge 600 GB/s = 300; RTX A6000 NVLink bridge 112.5 GB/s = 56.25; RTX 4090 and L40S have no NVLink:
their collectives go over PCIe (the host link's nominal per-direction rate).

Achievable fractions — assumptions with a stated source, never fitted to the papers' timings (the time
model is compared against them, remat.timemodel):

* ``achievable`` (0.8): the fraction of the dense peak a large 16-bit GEMM reaches. Large bf16 GEMMs with
  cuBLAS/CUTLASS reach about 75–85 % of the dense Tensor Core peak (e.g. 780 of 989 TFLOP/s on H100 SXM in
  H. He's public torch.mm benchmark, gist Chillee/2ec89696…; NVIDIA's Matrix Multiplication Background
  User's Guide, DU-09799-001, §2.3, shows large GEMMs near peak with the efficiency falling for small tiles).
* ``memory_efficiency`` (0.85): the fraction of the datasheet memory bandwidth a streaming kernel reaches —
  about 88 % is the best measured on A100 80GB (1.80 of 2.04 TB/s, NVIDIA Developer Forums thread
  "Trouble to reach peak bandwidth of A100", 2025, which cites ≈ 90 % as the most any kernel reached);
  framework elementwise kernels reach a little less.
* ``nvlink_efficiency`` (0.7): NCCL's achieved bus bandwidth over the per-direction NVLink rate — about
  200–230 GB/s of 300 on 8 × A100 SXM (nccl-tests issues #149 and #178: all_reduce busbw ≈ 200–208 GB/s).

Other assumptions (say so wherever a plan is shown): the achieved host-link bandwidth (80 % of nominal,
pinned host memory), the per-copy latency t0 (10 µs) and the host memory available to one GPU for offload
(256 GiB on a data-centre node, 64 GiB on a workstation).

Host side of offload (``gpus_per_host_link``, ``host_source``; the last fields, added for the offload break-even):

* ``gpus_per_host_link``: how many GPUs copy through ONE host-link uplink at the same time. Offload copies
  every layer on every GPU at once, so each GPU gets ``link_bytes_per_s / gpus_per_host_link`` (``GPU.link``,
  what the planner and the break-even price offload with; ``link_bytes_per_s`` stays the link's own rate).
  a100-40gb / a100-80gb: 2 — NVIDIA DGX A100 System Architecture whitepaper (WP-10083-001, §2 "System
  Architecture" and §6 "First Accelerated System With All PCIe Gen4"): 8 GPUs behind 4 PCIe Gen4 switches,
  two GPUs (and two ConnectX-6 NICs) per switch, one ×16 Gen4 uplink per switch to a CPU. Every other
  preset: 1 — an assumption, not a datasheet value: a PCIe card in its own ×16 slot on a CPU root port (the
  workstation layout), and for H100/H200 SXM no NVIDIA document in our sources states how HGX H100/H200
  boards share uplinks (if ``nvidia-smi topo -m`` shows two GPUs as PIX, they share a switch: pass 2).
  Override: ``remat plan --gpus-per-host-link N``; offload.breakeven.gpus_per_host_link.
* ``host_memory_bytes`` per GPU is the node's memory ÷ its GPUs: DGX A100 640GB and DGX H100/H200 ship 2 TB
  for 8 GPUs -> 256 GiB each, reading 2 TB as 2 TiB (NVIDIA DGX A100 / DGX H100 / DGX H200 datasheets). The
  DGX A100 320GB (40 GB GPUs) ships 1 TB, i.e. 128 GiB per GPU; the a100-40gb preset keeps 256 GiB (a node
  with the larger memory option): pass ``--host-memory 128GiB`` for that system. Workstations (RTX 4090,
  RTX A6000): 64 GiB, an assumed desktop. H100 PCIe, L40S: 256 GiB, assumed DGX-like. The OS and the
  framework take part of it; none is reserved here. ``host_source`` states this per preset.

Measure your own link with ``remat bandwidth --device cuda`` (one GPU copying alone: the link's own rate,
before sharing) and pass ``--link-gbps`` / ``--link-t0-us``. Before the roofline model, ``achievable`` was
0.5 of peak for ALL of a layer's FLOPs (Korthikanti et al.'s 52–56 % hardware FLOPs utilization), which
priced memory-bound work — selective recompute's softmax and dropout — as if it were GEMMs.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from remat.errors import UsageError
from remat.formulas.offload import Link
from remat.units import GB, GiB, MiB


@dataclass(frozen=True)
class GPU:
    """One accelerator as the planner sees it (bytes, FLOP/s, bytes/s, seconds)."""

    name: str                  # preset key, e.g. "a100-80gb"
    memory_bytes: int          # device memory the driver reports (nvidia-smi memory.total), bytes
    peak_flops: float          # dense 16-bit tensor-core FLOP/s (no sparsity)
    achievable: float          # fraction of peak a transformer layer reaches
    link_bytes_per_s: float    # host link, per direction, achieved (bytes/s; GB/s = 1e9)
    link_t0_s: float           # fixed cost per copy (seconds)
    host_memory_bytes: int     # host memory available to this GPU for offload
    source: str = ""           # the datasheet the numbers come from
    full_name: str = ""        # the card, e.g. "NVIDIA A100 SXM4 80GB"
    memory_bandwidth: float = 0.0  # device memory (HBM / GDDR) bandwidth, bytes/s (datasheet)
    nvlink_bytes_per_s: float = 0.0  # GPU-to-GPU link per direction, bytes/s (datasheet; PCIe if no NVLink)
    memory_efficiency: float = 0.85  # fraction of memory_bandwidth a streaming kernel reaches
    nvlink_efficiency: float = 0.7   # NCCL bus bandwidth / nvlink_bytes_per_s
    gpus_per_host_link: int = 1      # GPUs copying through one host-link uplink at once (module docstring)
    host_source: str = ""            # where gpus_per_host_link and host_memory_bytes come from
    nvlink_domain: int = 1           # GPUs one NVLink domain joins (NVSwitch baseboard 8, bridge 2, none 1)
    scaleout_bytes_per_s: float = 0.0  # per-GPU link beyond the NVLink domain, per direction (network/PCIe)
    fp32_flops: float = 0.0          # dense FP32 FLOP/s (non-tensor; PyTorch's default fp32 matmul, TF32 off)
    fp64_flops: float = 0.0          # dense FP64 FLOP/s (tensor cores where the card has them)
    scale_source: str = ""           # where nvlink_domain, scaleout and the FP32/FP64 rates come from

    def peak_for(self, dtype: str) -> float:
        """Dense peak FLOP/s of a ``dtype`` matmul: 16-bit → ``peak_flops`` (tensor cores), float32 →
        ``fp32_flops``, float64 → ``fp64_flops``. Raises UsageError("dtype") for another dtype."""
        peaks = {"bfloat16": self.peak_flops, "float16": self.peak_flops, "float32": self.fp32_flops,
                 "float64": self.fp64_flops}
        if dtype not in peaks:
            raise UsageError("dtype", f"no peak FLOP/s for {dtype!r} (known: {', '.join(peaks)})")
        return peaks[dtype]

    @property
    def flops_per_s(self) -> float:
        """Achievable FLOP/s = peak × achievable fraction."""
        return self.peak_flops * self.achievable

    @property
    def link_per_gpu_bytes_per_s(self) -> float:
        """Host-link bytes/s per direction one GPU gets while every GPU sharing the uplink copies at once:
        link_bytes_per_s / gpus_per_host_link (e.g. a100-80gb: 25.6e9 / 2 = 12.8e9)."""
        return self.link_bytes_per_s / self.gpus_per_host_link

    @property
    def link(self) -> Link:
        """The host link one GPU gets for offload (same bandwidth both ways): ``link_per_gpu_bytes_per_s``,
        i.e. the uplink shared by ``gpus_per_host_link`` GPUs, and the per-copy latency ``link_t0_s``."""
        return Link.symmetric(self.link_per_gpu_bytes_per_s, self.link_t0_s)


_NODE, _WORKSTATION = 256 * GiB, 64 * GiB   # DGX-class: 2 TiB host memory for 8 GPUs; a desktop: 64 GiB
_GEN4, _GEN5 = 32 * GB, 64 * GB              # PCIe ×16 nominal bytes/s per direction
_ACHIEVABLE, _LINK_FRACTION, _T0 = 0.8, 0.8, 10e-6


def _card(name: str, full_name: str, mib: int, tflops: float, memory_gb_s: int, pcie: float, host: int,
          source: str, nvlink_gb_s: float | None = None) -> GPU:
    """A preset from datasheet units: memory in MiB, dense TFLOP/s, memory GB/s, nominal link bytes/s,
    NVLink GB/s per direction (None: no NVLink, collectives over PCIe at the nominal rate)."""
    nvlink = pcie if nvlink_gb_s is None else nvlink_gb_s * 1e9
    return GPU(name, mib * MiB, tflops * 1e12, _ACHIEVABLE, _LINK_FRACTION * pcie, _T0, host, source,
               full_name, memory_gb_s * 1e9, nvlink)


_A100 = "NVIDIA A100 Tensor Core GPU Datasheet: BF16 312 TFLOP/s dense (624 with sparsity)"
_H100 = "NVIDIA H100 Tensor Core GPU Datasheet"
_CARDS = (   # datasheet rates; completed by the host and scale tables below
    _card("a100-40gb", "NVIDIA A100 SXM4 40GB", 40960, 312, 1555, _GEN4, _NODE,
          f"{_A100}; HBM2 1,555 GB/s; NVLink 600 GB/s", 300),
    _card("a100-80gb", "NVIDIA A100 SXM4 80GB", 81920, 312, 2039, _GEN4, _NODE,
          f"{_A100}; HBM2e 2,039 GB/s; NVLink 600 GB/s", 300),
    _card("h100-pcie-80gb", "NVIDIA H100 PCIe 80GB", 81559, 756, 2000, _GEN5, _NODE,
          f"{_H100}, H100 PCIe: BF16 1,513 TFLOP/s with sparsity (756 dense); HBM2e 2 TB/s; NVLink bridge "
          "600 GB/s", 300),
    _card("h100-80gb", "NVIDIA H100 SXM5 80GB", 81559, 989, 3350, _GEN5, _NODE,
          f"{_H100}, H100 SXM: BF16 1,979 TFLOP/s with sparsity (989 dense); HBM3 3.35 TB/s; NVLink 900 GB/s", 450),
    _card("h200-141gb", "NVIDIA H200 SXM 141GB", 143771, 989, 4800, _GEN5, _NODE,
          "NVIDIA H200 Tensor Core GPU Datasheet, H200 SXM: BF16 1,979 TFLOP/s with sparsity (989 dense); "
          "HBM3e 4.8 TB/s; NVLink 900 GB/s", 450),
    _card("rtx4090-24gb", "NVIDIA GeForce RTX 4090 24GB", 24564, 165.2, 1008, _GEN4, _WORKSTATION,
          "NVIDIA Ada Lovelace GPU Architecture whitepaper v2.1, Appendix A: BF16 tensor with FP32 accumulate "
          "165.2 TFLOP/s dense (330.4 with sparsity); GDDR6X 1,008 GB/s"),
    _card("rtx-a6000-48gb", "NVIDIA RTX A6000 48GB", 49140, 154.8, 768, _GEN4, _WORKSTATION,
          "NVIDIA Ampere GA102 GPU Architecture whitepaper v2.0 and RTX A6000 datasheet: BF16 tensor with FP32 "
          "accumulate 154.8 TFLOP/s dense (309.7 with sparsity); GDDR6 768 GB/s; NVLink bridge 112.5 GB/s", 56.25),
    _card("l40s-48gb", "NVIDIA L40S 48GB", 46068, 362.05, 864, _GEN4, _NODE,
          "NVIDIA L40S Datasheet: BF16 tensor 362.05 TFLOP/s dense (733 with sparsity); GDDR6 864 GB/s"),
)

_DGX_A100 = ("NVIDIA DGX A100 System Architecture whitepaper (WP-10083-001): 8 GPUs on 4 PCIe Gen4 switches, "
             "2 GPUs per x16 uplink")
_HOST: dict[str, tuple[int, str]] = {   # preset -> (gpus_per_host_link, host_source); module docstring
    "a100-40gb": (2, f"{_DGX_A100}; host memory: 2 TB / 8 GPUs (DGX A100 640GB; the 320GB system has 1 TB: "
                     "128 GiB per GPU)"),
    "a100-80gb": (2, f"{_DGX_A100}; host memory: DGX A100 640GB datasheet, 2 TB / 8 GPUs"),
    "h100-pcie-80gb": (1, "assumed: own x16 Gen5 slot; host memory assumed 256 GiB (DGX-like)"),
    "h100-80gb": (1, "assumed: own x16 Gen5 uplink (not stated for HGX H100); host memory: DGX H100 datasheet, "
                     "2 TB / 8 GPUs"),
    "h200-141gb": (1, "assumed: own x16 Gen5 uplink (not stated for HGX H200); host memory: DGX H200 datasheet, "
                      "2 TB / 8 GPUs"),
    "rtx4090-24gb": (1, "assumed: a workstation, own x16 Gen4 slot, 64 GiB host memory"),
    "rtx-a6000-48gb": (1, "assumed: a workstation, own x16 Gen4 slot, 64 GiB host memory"),
    "l40s-48gb": (1, "assumed: own x16 Gen4 slot; host memory assumed 256 GiB (DGX-like)"),
}
_A100_SCALE = (8, 25, 19.5, 19.5, "HGX A100 NVSwitch: 8 GPUs; DGX A100: one 200 Gb/s HDR InfiniBand port per GPU = "
                                  "25 GB/s; A100 datasheet: FP32 19.5, FP64 Tensor Core 19.5 TFLOP/s")
_SCALE: dict[str, tuple[int, float, float, float, str]] = {  # preset -> (NVLink domain, scale-out GB/s,
    # FP32 TFLOP/s, FP64 TFLOP/s, source); module docstring
    "a100-40gb": _A100_SCALE,
    "a100-80gb": _A100_SCALE,
    "h100-pcie-80gb": (2, 64, 51, 51, "NVLink bridge joins a pair; beyond it PCIe Gen5 ×16 (64 GB/s nominal); "
                                      "H100 datasheet (PCIe): FP32 51, FP64 Tensor Core 51 TFLOP/s"),
    "h100-80gb": (8, 50, 67, 67, "HGX H100 NVSwitch: 8 GPUs; DGX H100: one 400 Gb/s NDR InfiniBand port per GPU = "
                                 "50 GB/s; H100 datasheet (SXM): FP32 67, FP64 Tensor Core 67 TFLOP/s"),
    "h200-141gb": (8, 50, 67, 67, "HGX H200 NVSwitch: 8 GPUs; 400 Gb/s NDR per GPU = 50 GB/s (as DGX H100); H200 "
                                  "datasheet: FP32 67, FP64 Tensor Core 67 TFLOP/s"),
    "rtx4090-24gb": (1, 32, 82.6, 1.29, "no NVLink: PCIe Gen4 ×16 (32 GB/s nominal); Ada whitepaper: FP32 82.6 "
                                        "TFLOP/s, FP64 1/64 of FP32"),
    "rtx-a6000-48gb": (2, 32, 38.7, 0.6, "NVLink bridge joins a pair; beyond it PCIe Gen4 ×16; RTX A6000 "
                                         "datasheet: FP32 38.7 TFLOP/s; GA102 whitepaper: FP64 1/64 of FP32"),
    "l40s-48gb": (1, 32, 91.6, 1.43, "no NVLink: PCIe Gen4 ×16 (32 GB/s nominal); L40S datasheet: FP32 91.6 "
                                     "TFLOP/s; Ada: FP64 1/64 of FP32"),
}


def _complete(card: GPU) -> GPU:
    """A card with its host-side (``_HOST``) and scale-out / FP32 / FP64 (``_SCALE``) fields."""
    per_link, host_source = _HOST[card.name]
    domain, scaleout_gb_s, fp32_tflops, fp64_tflops, scale_source = _SCALE[card.name]
    return replace(card, gpus_per_host_link=per_link, host_source=host_source, nvlink_domain=domain,
                   scaleout_bytes_per_s=scaleout_gb_s * 1e9, fp32_flops=fp32_tflops * 1e12,
                   fp64_flops=fp64_tflops * 1e12, scale_source=scale_source)


GPUS: dict[str, GPU] = {card.name: _complete(card) for card in _CARDS}
"""Preset key -> GPU; the config schema's ``$defs.gpu`` enum lists the same keys (tests check it)."""


def check_presets(field: str, names) -> None:
    """Raise UsageError(field) naming the first of ``names`` that is not a preset key (and listing them)."""
    for name in names:
        if name not in GPUS:
            raise UsageError(field, f"unknown GPU preset {name!r} (presets: {', '.join(GPUS)})")


def gpu(name: str, field: str = "--gpu", **overrides) -> GPU:
    """The preset ``name`` with fields overridden (None values ignored).

    Raises UsageError(``field``: the flag or argument that named it) for an unknown preset, UsageError(<field>)
    for a non-positive value or an achievable fraction outside (0, 1]."""
    check_presets(field, [name])
    changes = {k: v for k, v in overrides.items() if v is not None}
    out = replace(GPUS[name], **changes)
    for field in ("memory_bytes", "peak_flops", "link_bytes_per_s", "host_memory_bytes", "memory_bandwidth",
                  "nvlink_bytes_per_s"):
        if not getattr(out, field) > 0:
            raise UsageError(field, f"must be > 0, got {getattr(out, field)!r}")
    for field in ("achievable", "memory_efficiency", "nvlink_efficiency"):
        if not 0 < getattr(out, field) <= 1:
            raise UsageError(field, f"must be in (0, 1], got {getattr(out, field)!r}")
    if not out.link_t0_s >= 0:
        raise UsageError("link_t0_s", f"must be ≥ 0, got {out.link_t0_s!r}")
    if isinstance(out.gpus_per_host_link, bool) or not isinstance(out.gpus_per_host_link, int) \
            or out.gpus_per_host_link < 1:
        raise UsageError("gpus_per_host_link", f"must be an integer ≥ 1, got {out.gpus_per_host_link!r}")
    return out
