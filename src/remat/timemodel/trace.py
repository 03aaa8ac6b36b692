"""One layer's operators, traced: per op its FLOPs, the device-memory bytes it reads and writes, and for
collectives the message bytes — forward, backward and the recompute of a policy, under FakeTensorMode (any
size, no memory, no GPU).

    trace = trace_layer(from_name("gpt-22b"), t=8, sp=False, mode="selective")
    trace.phase("recompute")          # the ops selective recompute re-runs in backward

What is counted per op (``Op``):

* FLOPs: ``remat.formulas.op_flops.flop_count`` (torch's FLOP registry: mm, addmm, bmm, baddbmm, grouped GEMMs,
  fused attention on every device); a fused attention kernel's scaled by the share of query–key pairs a
  FlashAttention kernel computes (``attention_share``: about half when causal, s·w of s² with a sliding window w —
  the GPT layer's materialized "math" attention keeps Korthikanti's full 4bs²h). Elementwise ops (LayerNorm,
  softmax, GeLU, dropout, adds) count 0 FLOPs: they are priced by their bytes.
* bytes: every tensor input read once and every output written once, a tensor's bytes being numel ×
  element size (a strided view counts the elements it covers, not its whole storage). View and allocation
  ops (view, t, split, detach, empty) move nothing and are dropped.
* collectives (torch.distributed c10d ops of the fake process group): kind (all_reduce, all_gather,
  reduce_scatter) and message bytes — the all-reduced tensor, the gathered output, the scattered input —
  i.e. what NCCL's tests call the size S of the operation.
* the autograd node running each backward op (``torch._C._current_autograd_node``), which says whether a
  collective sits inside a column-parallel linear's backward (the one Megatron overlaps with a GEMM).

Fusion (``fuse_ops=True``): Megatron-LM runs some elementwise chains as one kernel — FusedScaleMaskSoftmax
(causal mask + softmax, and its backward), bias-dropout-add (bias + dropout + residual add). ``FUSED`` lists
those producer → consumer pairs; a pair fuses when the producer's output is read by exactly one later op,
the next one, so the intermediate is neither written nor read back. The pairs are fixed (the kernels do
not change with the policy): a checkpointed forward, whose softmax output is not saved, still runs softmax
and dropout as two kernels, as Megatron does.

Not layer work, dropped: AccumulateGrad copies (the traced layer's input is a leaf; weight gradients
accumulate inside the GEMM in Megatron, gradient_accumulation_fusion).

Phases: "forward"; "backward" (gradient work); "recompute" (the ops a checkpoint re-runs inside backward,
found through ``remat.policies.observe_recompute``).
"""

from __future__ import annotations

import contextlib
import functools
from dataclasses import dataclass, field, replace

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from remat.accounting import build, layer_input, resolve, tensor_mode, tp_group
from remat.formulas.op_flops import FUSED_ATTENTION, attention_share, flop_count
from remat.models.presets import ModelConfig
from remat.policies import observe_recompute

COLLECTIVES = {"allreduce_": "all_reduce", "_allgather_base_": "all_gather",
               "_reduce_scatter_base_": "reduce_scatter"}
"""c10d op packet -> collective kind."""
FUSED = {("masked_fill", "_softmax"), ("_softmax_backward_data", "masked_fill"), ("add", "native_dropout"),
         ("native_dropout", "add")}
"""(producer, consumer) aten packets Megatron-LM runs as one kernel (module docstring)."""
_ALLOCATIONS = {"empty", "new_empty", "empty_like", "empty_strided", "new_empty_strided", "_unsafe_view",
                "lift_fresh"}   # move no data (with the view ops)
_FACTORIES = {"new_zeros", "new_ones", "new_full", "zeros_like", "ones_like", "full_like", "fill"}  # read nothing


@dataclass(frozen=True)
class Op:
    """One operator of the trace.

    phase: forward | backward | recompute; name: aten/c10d packet ("mm", "_softmax", "allreduce_");
    flops: FLOPs (int); bytes: device-memory bytes read + written (int); collective: "" or all_reduce |
    all_gather | reduce_scatter; comm_bytes: the collective's size S in bytes; node: the autograd node
    running it in backward ("" in forward); wgrad: a backward GEMM whose output has a parameter's shape
    (a weight gradient)."""

    phase: str
    name: str
    flops: int
    bytes: int
    collective: str = ""
    comm_bytes: int = 0
    node: str = ""
    wgrad: bool = False
    reads: tuple = field(default=(), compare=False, repr=False)    # storage keys of the tensor inputs
    writes: tuple = field(default=(), compare=False, repr=False)   # (storage key, bytes) of the outputs

    @property
    def kind(self) -> str:
        """gemm (counted FLOPs) | collective | memory (elementwise, priced by bytes)."""
        return "collective" if self.collective else "gemm" if self.flops else "memory"


@dataclass(frozen=True)
class LayerTrace:
    """The ops of one layer on one TP rank, in execution order, for one micro-batch."""

    ops: tuple[Op, ...]
    model: str
    mode: str
    t: int
    sp: bool
    fused: bool

    def phase(self, name: str) -> tuple[Op, ...]:
        """The ops of one phase (forward | backward | recompute)."""
        return tuple(op for op in self.ops if op.phase == name)

    def totals(self, name: str) -> dict[str, int]:
        """FLOPs, bytes and collective bytes of one phase (ints)."""
        ops = self.phase(name)
        return {"flops": sum(o.flops for o in ops), "bytes": sum(o.bytes for o in ops),
                "comm_bytes": sum(o.comm_bytes for o in ops)}


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def _key(t: torch.Tensor):
    return (t.untyped_storage()._cdata, t.storage_offset(), tuple(t.shape), t.stride())


class _Recorder(TorchDispatchMode):
    """Records every op that moves data (module docstring) into ``ops``, tagged with ``phase``."""

    def __init__(self, weight_shapes: set, window: int | None = None):
        super().__init__()
        self.window = window
        self.ops: list[Op] = []
        self.keep: list[torch.Tensor] = []   # every output stays alive: no storage is reused, keys stay unique
        self.phase = "forward"
        self.weight_shapes = weight_shapes

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        node = torch._C._current_autograd_node()
        node_name = node.name() if node is not None and self.phase != "forward" else ""
        op = priced(func, args, kwargs, out, self.phase, node_name, self.window, self.weight_shapes)
        if op is not None:
            self.keep.extend(t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor))
            if "AccumulateGrad" not in node_name:
                self.ops.append(op)
        return out


def priced(func, args, kwargs, out, phase: str = "forward", node: str = "", window: int | None = None,
           weight_shapes: frozenset | set = frozenset()) -> Op | None:
    """One dispatched op as an ``Op`` (module docstring: FLOPs, bytes read + written, collective size), or None
    for an op that moves no data (a view, an allocation) or has no tensor output. ``node``: the autograd node
    running it; ``window``: the model's sliding window (a fused attention given a mask); ``weight_shapes``: the
    2-D parameters' shapes (a backward GEMM writing one is a weight gradient)."""
    name = func.overloadpacket.__name__
    if func.is_view or name in _ALLOCATIONS:
        return None
    inputs = [x for x in tree_flatten((args, kwargs))[0] if isinstance(x, torch.Tensor)]
    outputs = [x for x in tree_flatten(out)[0] if isinstance(x, torch.Tensor)]
    if not outputs:
        return None
    if name in _FACTORIES:
        inputs = []
    if name in COLLECTIVES:
        kind = COLLECTIVES[name]
        size = _nbytes(inputs[-1] if kind == "reduce_scatter" else inputs[0])
        return Op(phase, name, 0, 0, kind, size, node)
    flops = flop_count(func, args, kwargs, out)
    if name in FUSED_ATTENTION:     # what a FlashAttention kernel computes (causal / windowed pairs only)
        flops = round(flops * attention_share(func, args, kwargs, window))
    wgrad = bool(flops) and phase != "forward" and tuple(outputs[0].shape) in weight_shapes
    return Op(phase, name, flops, sum(map(_nbytes, inputs)) + sum(map(_nbytes, outputs)), node=node,
              wgrad=wgrad, reads=tuple(map(_key, inputs)), writes=tuple((_key(o), _nbytes(o)) for o in outputs))


def fuse(ops: list[Op]) -> list[Op]:
    """Megatron's fused kernels (module docstring, ``FUSED``): drop the write and the read-back of an
    intermediate whose only reader is the next op. Returns new Ops (same order)."""
    readers: dict = {}
    for i, op in enumerate(ops):
        for key in op.reads:
            readers.setdefault(key, []).append(i)
    out = list(ops)
    for i in range(len(ops) - 1):
        a, b = ops[i], ops[i + 1]
        if (a.name, b.name) not in FUSED or a.phase != b.phase:
            continue
        for key, size in a.writes:
            if readers.get(key) == [i + 1]:
                out[i] = replace(out[i], bytes=out[i].bytes - size)
                out[i + 1] = replace(out[i + 1], bytes=out[i + 1].bytes - size)
    return out


@contextlib.contextmanager
def recording(weight_shapes: set, window: int | None = None):
    """Record every op run inside (``_Recorder``): phase "forward" until the caller sets ``recorder.phase =
    "backward"``; ops inside a recompute of the policies' checkpoints (remat.policies.observe_recompute) are
    tagged "recompute". ``weight_shapes``: shapes of the traced module's 2-D parameters (weight-gradient
    GEMMs); ``window``: the model's sliding window, for a fused attention given a mask. Yields the recorder; its
    ``ops`` is the list of Op."""
    recorder = _Recorder(weight_shapes, window)

    @contextlib.contextmanager
    def recompute():
        recorder.phase = "recompute"
        try:
            yield
        finally:
            recorder.phase = "backward"

    with observe_recompute(recompute), recorder:
        yield recorder


@functools.lru_cache(maxsize=64)
def trace_layer(cfg: ModelConfig, t: int = 1, sp: bool = False, mode: str = "none", fuse_ops: bool = True
                ) -> LayerTrace:
    """Trace one layer of ``cfg`` (the TP/SP layer of its architecture on rank 0 of a fake group of t) for one
    micro-batch under ``mode`` (none | selective | full), under
    FakeTensorMode: forward, then backward with an upstream gradient of the output's shape.

    Returns a LayerTrace (cached per arguments). Raises UsageError (via remat.accounting.resolve) for a t
    that does not divide heads/hidden or an SP layer whose s is not divisible by t.
    Source: the layer of remat.models (Korthikanti §4.1, Megatron's TP/SP mappings); ops as dispatched."""

    cfg, t = resolve(cfg, mode, t, sp)
    with tp_group(t, 0, "fake") as group, tensor_mode("fake"):
        container, layer = build(cfg, t, sp, mode, group, "fake")
        x = layer_input(cfg, t, sp, "fake")
        with recording({tuple(p.shape) for p in layer.parameters() if p.dim() == 2}, cfg.sliding_window) as recorder:
            y = container(x)
            grad = torch.empty_like(y)
            recorder.phase = "backward"
            y.backward(grad)
    ops = fuse(recorder.ops) if fuse_ops else recorder.ops
    return LayerTrace(tuple(ops), cfg.name, mode, t, sp, fuse_ops)

