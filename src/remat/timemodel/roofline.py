"""Per-op roofline time of a traced layer: forward, backward and recompute seconds on one GPU.

    rates = Rates.of(gpu("a100-80gb"))
    times = layer_times(trace_layer(from_name("gpt-22b"), 8, False, "selective"), rates)
    times.forward_s, times.backward_s, times.recompute_s

Per op (``remat.timemodel.trace.Op``), the roofline: time = max(FLOPs / achievable FLOP/s, bytes /
achievable memory bandwidth) + a fixed per-op overhead (0 on GPUs, where kernels queue asynchronously;
measured on the CPU). Fused rates (``Rates.fused``, a model trained under torch.compile): an op with no counted
FLOPs (elementwise, normalisation, softmax: priced by its bytes) runs inside the kernel beside it — inductor
fuses such ops in forward, backward and recompute alike — so it launches nothing and writes nothing (its output
stays in registers for the op it feeds), but it still reads its inputs once: it costs its input bytes at the
memory bandwidth (``moved_bytes``). It is the optimistic end of fusion (a chain of such ops reads its
intermediates again here) and makes recomputing them cheap, not free: a plan at a budget with room to spare keeps
them rather than re-reading what they are made from, where pricing them at 0 would tie every kept set of the
same GEMMs (inductor's min-cut partitioner also recomputes fusible ops, to save bytes, when a budget asks).

Tensor-parallel collectives over t ranks, ring algorithms (Patarasuk & Yuan 2009;
NCCL's bus-bandwidth convention): all-reduce 2(t − 1)/t · S / B, all-gather and reduce-scatter
(t − 1)/t · S / B, S the operation's size in bytes, B the achieved link bandwidth per direction.

What overlaps (Korthikanti et al. 2022 §5, Table 4's text; Megatron-LM's
LinearWithGradAccumulationAndAsyncCommunication): in BACKWARD the collectives inside a column-parallel
linear's backward run beside one of its GEMMs — the all-reduce of the input gradient (TP) beside the
weight-gradient GEMM, and with SP the all-gather of the saved input shard beside the input-gradient GEMM and
the reduce-scatter of the input gradient beside the weight-gradient GEMM; only what the GEMM does not cover
is exposed. Everything else is serial: forward collectives, the recompute's (full recompute re-runs the
forward's all-reduces with nothing to hide them — why the paper's full recompute costs 39 %, not 33 %), and
the SP all-gather of the output gradient.
"""

from __future__ import annotations

from dataclasses import dataclass

from remat.timemodel.trace import LayerTrace, Op

OVERLAPPED_NODES = ("_CopyToTensorParallelRegionBackward", "_SequenceGatherLinearBackward")
"""Autograd nodes of a column-parallel linear's backward, whose collectives Megatron overlaps with a GEMM."""
RING_FACTOR = {"all_reduce": 2.0, "all_gather": 1.0, "reduce_scatter": 1.0}
TIME_SOURCE = "roofline model (remat.timemodel)"
"""How a plan priced by this model names its time source."""


@dataclass(frozen=True)
class Rates:
    """What the roofline prices with: achievable GEMM FLOP/s, memory bytes/s, collective link bytes/s (per
    direction), seconds of fixed cost per op."""

    flops_per_s: float
    memory_bytes_per_s: float
    link_bytes_per_s: float
    op_overhead_s: float = 0.0
    source: str = ""
    fused: bool = False    # ops priced by their bytes alone read their inputs once (module docstring: torch.compile)

    @classmethod
    def of(cls, gpu, t: int = 1, dtype: str = "bfloat16") -> "Rates":
        """A GPU preset's rates (remat.timemodel.gpus.GPU) for ``dtype`` matmuls and a TP group of t GPUs:
        the dtype's peak × achievable (``GPU.peak_for``: 16-bit tensor cores, else the FP32 / FP64 rate),
        memory bandwidth × memory efficiency, and the collectives' link × NVLink efficiency — NVLink when the t
        GPUs fit in one NVLink domain (``GPU.nvlink_domain``), else the per-GPU scale-out link
        (``GPU.scaleout_bytes_per_s``: the node's network, or PCIe where a bridge joins only a pair)."""
        link = gpu.nvlink_bytes_per_s if t <= gpu.nvlink_domain else gpu.scaleout_bytes_per_s
        return cls(gpu.peak_for(dtype) * gpu.achievable, gpu.memory_bandwidth * gpu.memory_efficiency,
                   link * gpu.nvlink_efficiency, 0.0, gpu.name)


@dataclass(frozen=True)
class PhaseTime:
    """Seconds of one phase and its parts: compute_s (ops on the FLOP roof: FLOPs / rate ≥ bytes / bandwidth),
    memory_s (ops on the bandwidth roof — elementwise ops, and matmuls too small in k to reach the FLOP roof,
    such as QKᵀ and ·V), overhead_s (per-op fixed cost), comm_s (collectives, all of it), exposed_comm_s
    (what no GEMM hides)."""

    total_s: float
    compute_s: float
    memory_s: float
    overhead_s: float
    comm_s: float
    exposed_comm_s: float


@dataclass(frozen=True)
class LayerTimes:
    """One layer, one micro-batch, one TP rank: forward, backward (gradient work) and recompute seconds."""

    forward: PhaseTime
    backward: PhaseTime
    recompute: PhaseTime

    @property
    def forward_s(self) -> float:
        return self.forward.total_s

    @property
    def backward_s(self) -> float:
        """Backward as a profiler sees it: gradient work + the recompute it triggers (Table 4's column)."""
        return self.backward.total_s + self.recompute.total_s

    @property
    def recompute_s(self) -> float:
        return self.recompute.total_s

    @property
    def combined_s(self) -> float:
        return self.forward_s + self.backward_s

    def to_ms(self) -> dict[str, float]:
        """Milliseconds: forward, backward (with the recompute), recompute, combined, and the parts of each
        phase (``<phase>_compute_ms``, ``_memory_ms``, ``_comm_ms``, ``_exposed_comm_ms``)."""
        out = {"forward_ms": 1e3 * self.forward_s, "backward_ms": 1e3 * self.backward_s,
               "recompute_ms": 1e3 * self.recompute_s, "combined_ms": 1e3 * self.combined_s}
        for phase in ("forward", "backward", "recompute"):
            part = getattr(self, phase)
            out.update({f"{phase}_compute_ms": 1e3 * part.compute_s, f"{phase}_memory_ms": 1e3 * part.memory_s,
                        f"{phase}_comm_ms": 1e3 * part.comm_s,
                        f"{phase}_exposed_comm_ms": 1e3 * part.exposed_comm_s})
        return out


def fused_away(op: Op, rates: Rates) -> bool:
    """Whether ``op`` runs inside a neighbour's kernel at ``rates`` (fused rates, no FLOPs: module docstring)."""
    return rates.fused and not op.flops and not op.collective


def moved_bytes(op: Op, rates: Rates) -> int:
    """The bytes ``op`` moves at ``rates``: what it reads and writes, or, fused away, its inputs read once."""
    return max(0, op.bytes - sum(size for _, size in op.writes)) if fused_away(op, rates) else op.bytes


def op_seconds(op: Op, rates: Rates, t: int) -> float:
    """One op's seconds: the roofline (module docstring) or, for a collective over t ranks, the ring time. An op
    fused away pays no per-op overhead (it launches nothing)."""
    if op.collective:
        return RING_FACTOR[op.collective] * (t - 1) / t * op.comm_bytes / rates.link_bytes_per_s if t > 1 else 0.0
    overhead = 0.0 if fused_away(op, rates) else rates.op_overhead_s
    return max(op.flops / rates.flops_per_s, moved_bytes(op, rates) / rates.memory_bytes_per_s) + overhead


def _hiding_gemm(ops: tuple[Op, ...], i: int) -> int | None:
    """The GEMM that collective ``ops[i]`` runs beside (module docstring), or None: the next GEMM of the
    same autograd node, else the weight-gradient GEMM just before it."""
    for j in range(i + 1, len(ops)):
        if ops[j].node != ops[i].node:
            break
        if ops[j].kind == "gemm":
            return j
    for j in range(i - 1, -1, -1):
        if ops[j].kind == "gemm":
            return j if ops[j].wgrad else None
    return None


def phase_time(ops: tuple[Op, ...], rates: Rates, t: int, overlap: bool) -> PhaseTime:
    """Seconds of one phase's ops in order; ``overlap``: collectives of OVERLAPPED_NODES hide behind a GEMM
    (each GEMM hides at most one collective)."""
    seconds = [op_seconds(op, rates, t) for op in ops]
    exposed, used = 0.0, set()
    for i, op in enumerate(ops):
        if not op.collective:
            continue
        j = _hiding_gemm(ops, i) if overlap and op.node in OVERLAPPED_NODES else None
        if j is not None and j not in used:
            used.add(j)
            exposed += max(0.0, seconds[i] - seconds[j])
        else:
            exposed += seconds[i]
    kernels = [op for op in ops if not op.collective]
    flop_s = [op.flops / rates.flops_per_s for op in kernels]
    byte_s = [moved_bytes(op, rates) / rates.memory_bytes_per_s for op in kernels]
    compute = sum(f for f, b in zip(flop_s, byte_s) if f >= b)
    memory = sum(b for f, b in zip(flop_s, byte_s) if f < b)
    overhead = rates.op_overhead_s * sum(not fused_away(op, rates) for op in kernels)
    comm = sum(s for op, s in zip(ops, seconds) if op.collective)
    return PhaseTime(compute + memory + overhead + exposed, compute, memory, overhead, comm, exposed)


def layer_times(trace: LayerTrace, rates: Rates) -> LayerTimes:
    """Forward, backward and recompute seconds of a traced layer at ``rates`` (module docstring)."""
    return LayerTimes(phase_time(trace.phase("forward"), rates, trace.t, overlap=False),
                      phase_time(trace.phase("backward"), rates, trace.t, overlap=True),
                      phase_time(trace.phase("recompute"), rates, trace.t, overlap=False))
