"""Megatron-style tensor- and sequence-parallel GPT layer (Korthikanti et al. 2022 §4.2, Shoeybi et al. 2019).

One TP rank's share of ``remat.models.gpt.GPTLayer``, written with torch.distributed collectives:

    TP (sp=False): x [s, b, h] replicated
        ln_1 -> copy_to_tp_region -> attn.qkv (column-parallel, h -> 3h/t) -> attn.core (a/t heads)
        -> attn.proj (row-parallel, h/t -> h) -> all-reduce -> attn.dropout -> + x ;  same for the MLP
        (mlp.fc1 column-parallel h -> 4h/t, mlp.act, mlp.fc2 row-parallel 4h/t -> h, all-reduce).
    TP + SP (sp=True): x [s/t, b, h], the sequence shard of this rank
        ln_1 on the shard -> all-gather (inside attn.qkv, which saves only the shard and all-gathers it
        again in backward, as Megatron's LinearWithGradAccumulationAndAsyncCommunication does) -> ... ->
        attn.proj -> reduce-scatter -> attn.dropout on the shard -> + x ;  same for the MLP.

Submodule names are the serial layer's (ln_1, attn.qkv, attn.core, attn.proj, attn.dropout, ln_2, mlp.fc1,
mlp.act, mlp.fc2, mlp.dropout) and ``attn.core`` IS the serial ``CoreAttention`` (with a/t heads), so
selective recompute targets it and the accounting labels saved tensors the same way.

Runs (a) in one process as rank r of a fake process group (``fake_process_group``; with FakeTensorMode at the
paper's sizes), (b) as real gloo processes on CPU, (c) with NCCL on GPU nodes — the code is the same.

Limits: dropout uses torch's default generator on every rank (no Megatron model-parallel RNG tracker): with
equal seeds the replicated-region masks agree across ranks, as they must, but the masks inside the TP region
(softmax dropout) repeat across ranks instead of being independent. This does not change shapes, saved bytes
or FLOPs. Under SP, the replicated parameters (LayerNorms, row-parallel biases) see only the local sequence
shard: call ``allreduce_sequence_parallel_grads`` after backward (Megatron does the same).
"""

from __future__ import annotations

import dataclasses
from contextlib import contextmanager
from typing import Iterator

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from remat.errors import UsageError
from remat.models.gpt import MLP, CoreAttention, Dropout, GPTLayer, SelfAttention
from remat.models.presets import ModelConfig
from remat.models.transformer import default_dtype


# --- process groups ----------------------------------------------------------------------------------------------

@contextmanager
def fake_process_group(world_size: int, rank: int = 0) -> Iterator[dist.ProcessGroup]:
    """Act as rank ``rank`` of a ``world_size``-rank default process group in this one process.

    Collectives return without communicating (outputs are left as allocated), which is all shape, byte and
    FLOP accounting needs; pair with FakeTensorMode for paper sizes. Wraps torch's fake backend
    (torch.testing._internal.distributed.fake_pg: FakeStore + backend "fake"). Raises RuntimeError if a
    default process group already exists. ``sys.excepthook`` is restored on exit (``init_process_group``
    wraps it to prefix "[rank0]:" on every call, so a process that accounts many layers would print a
    traceback with the prefix repeated once per layer).
    """
    import sys

    from torch.testing._internal.distributed.fake_pg import FakeStore
    if dist.is_initialized():
        raise RuntimeError("a default process group is already initialized")
    hook = sys.excepthook
    dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=world_size)
    try:
        yield dist.group.WORLD
    finally:
        dist.destroy_process_group()
        sys.excepthook = hook


def _world(group) -> int:
    return dist.get_world_size(group)


# --- collectives along the sequence (dim 0 of [s, b, h]) ---------------------------------------------------------

def _all_gather_seq(x: torch.Tensor, group) -> torch.Tensor:
    """[s/t, b, ...] on each rank -> [s, b, ...] (rank order). torch.distributed.all_gather_single."""
    out = x.new_empty((x.shape[0] * _world(group), *x.shape[1:]))
    dist.all_gather_single(out, x.contiguous(), group=group)
    return out


def _reduce_scatter_seq(x: torch.Tensor, group) -> torch.Tensor:
    """[s, b, ...] partial sums on each rank -> this rank's [s/t, b, ...] of the sum.
    torch.distributed.reduce_scatter_single."""
    out = x.new_empty((x.shape[0] // _world(group), *x.shape[1:]))
    dist.reduce_scatter_single(out, x.contiguous(), group=group)
    return out


def _all_reduce(x: torch.Tensor, group) -> torch.Tensor:
    dist.all_reduce(x, group=group)
    return x


# --- Megatron's region mappings (megatron/core/tensor_parallel/mappings.py) -----------------------------------------

class _CopyToTensorParallelRegion(torch.autograd.Function):
    """Forward: identity. Backward: all-reduce the gradient (the input feeds every rank's shard)."""

    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return _all_reduce(grad.clone(), ctx.group), None


class _ReduceFromTensorParallelRegion(torch.autograd.Function):
    """Forward: all-reduce the partial sums (in place). Backward: identity."""

    @staticmethod
    def forward(ctx, x, group):
        ctx.mark_dirty(x)
        return _all_reduce(x, group)

    @staticmethod
    def backward(ctx, grad):
        return grad, None


class _ReduceScatterToSequenceParallelRegion(torch.autograd.Function):
    """Forward: reduce-scatter partial sums along the sequence. Backward: all-gather the gradient."""

    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return _reduce_scatter_seq(x, group)

    @staticmethod
    def backward(ctx, grad):
        return _all_gather_seq(grad, ctx.group), None


class _GatherFromSequenceParallelRegion(torch.autograd.Function):
    """Forward: all-gather the sequence shards. Backward: reduce-scatter the gradient (each rank's share of
    the gathered tensor fed partial sums)."""

    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return _all_gather_seq(x, group)

    @staticmethod
    def backward(ctx, grad):
        return _reduce_scatter_seq(grad, ctx.group), None


class _SequenceGatherLinear(torch.autograd.Function):
    """y = all_gather_seq(x_shard) @ Wᵀ + b, saving only x_shard (Korthikanti §4.2.2: "we only store the
    sequence-parallel shard and perform an extra all-gather in backward"). Backward: all-gather x again for
    the weight gradient; the input gradient is reduce-scattered back to the shard. Megatron's
    LinearWithGradAccumulationAndAsyncCommunication with sequence_parallel=True, without the async overlap."""

    @staticmethod
    def forward(ctx, x_shard, weight, bias, group):
        ctx.save_for_backward(x_shard, weight)
        ctx.group, ctx.has_bias = group, bias is not None
        return F.linear(_all_gather_seq(x_shard, group), weight, bias)

    @staticmethod
    def backward(ctx, grad):
        x_shard, weight = ctx.saved_tensors
        x = _all_gather_seq(x_shard, ctx.group)
        grad_x = _reduce_scatter_seq(grad.matmul(weight), ctx.group)
        grad_w = grad.reshape(-1, grad.shape[-1]).t().mm(x.reshape(-1, x.shape[-1]))
        grad_b = grad.reshape(-1, grad.shape[-1]).sum(0) if ctx.has_bias else None
        return grad_x, grad_w, grad_b, None


# --- parallel linears -------------------------------------------------------------------------------------------------

class ColumnParallelLinear(nn.Linear):
    """Linear in -> out split along the output: this rank holds rows of W [out/t, in] and b [out/t].

    x: [s, b, in] (TP) or the sequence shard [s/t, b, in] (SP) -> [s, b, out/t]. Megatron's
    ColumnParallelLinear (gather_output=False).
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, group=None, sp: bool = False):
        self.group, self.sp = group, sp
        super().__init__(in_features, out_features // _world(group), bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.sp:
            return _SequenceGatherLinear.apply(x, self.weight, self.bias, self.group)
        return F.linear(_CopyToTensorParallelRegion.apply(x, self.group), self.weight, self.bias)


class RowParallelLinear(nn.Linear):
    """Linear in -> out split along the input: this rank holds columns of W [out, in/t]; b [out] replicated.

    x: [s, b, in/t] -> [s, b, out] all-reduced (TP) or [s/t, b, out] reduce-scattered (SP); the bias is added
    after the reduction. Megatron's RowParallelLinear (input_is_parallel=True).
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, group=None, sp: bool = False):
        self.group, self.sp = group, sp
        super().__init__(in_features // _world(group), out_features, bias=bias)
        if sp and self.bias is not None:
            self.bias.sequence_parallel = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        partial = F.linear(x, self.weight)
        reduce = _ReduceScatterToSequenceParallelRegion if self.sp else _ReduceFromTensorParallelRegion
        y = reduce.apply(partial, self.group)
        return y if self.bias is None else y + self.bias


# --- the layer --------------------------------------------------------------------------------------------------------

def local_config(cfg: ModelConfig, t: int) -> ModelConfig:
    """The per-rank view of ``cfg`` for core attention: a/t heads and h/t hidden (same head_dim d).
    Raises UsageError("tp") when t does not divide heads or hidden."""
    if cfg.heads % t or cfg.hidden % t:
        raise UsageError("tp", f"t = {t} must divide heads ({cfg.heads}) and hidden ({cfg.hidden})")
    return dataclasses.replace(cfg, heads=cfg.heads // t, kv_heads=cfg.kv_heads // t, hidden=cfg.hidden // t,
                               ffn_hidden=cfg.ffn_hidden // t, tp=1)


class ParallelSelfAttention(SelfAttention):
    """attn.qkv (column-parallel h -> 3h/t) -> attn.core (serial CoreAttention, a/t heads) -> attn.proj
    (row-parallel h/t -> h, all-reduce or reduce-scatter) -> attn.dropout; ``SelfAttention.forward`` unchanged.

    x: [s, b, h] (TP) or [s/t, b, h] (SP) -> same shape.
    """

    def __init__(self, cfg: ModelConfig, group=None, sp: bool = False):
        nn.Module.__init__(self)
        t = _world(group)
        self.heads, self.head_dim = cfg.heads // t, cfg.head_dim
        self.qkv = ColumnParallelLinear(cfg.hidden, 3 * cfg.hidden, cfg.bias, group, sp)
        self.core = CoreAttention(local_config(cfg, t))
        self.proj = RowParallelLinear(cfg.hidden, cfg.hidden, cfg.bias, group, sp)
        self.dropout = Dropout(cfg.dropout)


class ParallelMLP(MLP):
    """mlp.fc1 (column-parallel h -> 4h/t) -> mlp.act (GeLU) -> mlp.fc2 (row-parallel 4h/t -> h) ->
    mlp.dropout; ``MLP.forward`` unchanged. x: [s, b, h] (TP) or [s/t, b, h] (SP) -> same shape."""

    def __init__(self, cfg: ModelConfig, group=None, sp: bool = False):
        nn.Module.__init__(self)
        self.fc1 = ColumnParallelLinear(cfg.hidden, cfg.ffn_hidden, cfg.bias, group, sp)
        self.act = nn.GELU(approximate="tanh" if cfg.activation == "gelu_tanh" else "none")  # as MLP
        self.fc2 = RowParallelLinear(cfg.ffn_hidden, cfg.hidden, cfg.bias, group, sp)
        self.dropout = Dropout(cfg.dropout)


class ParallelGPTLayer(GPTLayer):
    """One TP rank of the GPT layer; ``GPTLayer.forward`` (pre-LN, residual adds) unchanged.

    cfg: the whole layer's config (h, a, dropout, ...); group: the TP process group (default: WORLD), its
    size is t; sp: sequence parallelism. x: [s, b, h] replicated (sp=False) or this rank's sequence shard
    [s/t, b, h] (sp=True) -> same shape. Raises UsageError("tp") if t does not divide a, h or ffn_hidden,
    UsageError("sp") for SP with t = 1.
    """

    def __init__(self, cfg: ModelConfig, group=None, sp: bool = False):
        nn.Module.__init__(self)
        t = _world(group)
        if cfg.ffn_hidden % t:
            raise UsageError("tp", f"t = {t} must divide ffn_hidden ({cfg.ffn_hidden})")
        if sp and t == 1:
            raise UsageError("sp", "sequence parallelism needs tensor parallelism (tp ≥ 2)")
        self.tp, self.sp, self.group = t, sp, group
        self.ln_1 = nn.LayerNorm(cfg.hidden, eps=cfg.norm_eps, bias=cfg.bias)
        self.attn = ParallelSelfAttention(cfg, group, sp)
        self.ln_2 = nn.LayerNorm(cfg.hidden, eps=cfg.norm_eps, bias=cfg.bias)
        self.mlp = ParallelMLP(cfg, group, sp)
        if sp:
            for ln in (self.ln_1, self.ln_2):
                for p in ln.parameters():
                    p.sequence_parallel = True

    @torch.no_grad()
    def load_serial(self, serial: GPTLayer, rank: int | None = None) -> "ParallelGPTLayer":
        """Copy this rank's shard of a serial ``GPTLayer``'s weights (same cfg) into this layer; returns self.

        qkv: the heads [r·a/t, (r+1)·a/t) of Megatron's per-head [q k v] layout; proj and fc2: the matching
        input columns; fc1: output rows; LayerNorms and row-parallel biases: copied whole.
        """
        r = dist.get_rank(self.group) if rank is None else rank
        t = self.tp
        heads = self.attn.heads * t
        qkv_w = serial.attn.qkv.weight.view(heads, -1, serial.attn.qkv.in_features)
        self.attn.qkv.weight.copy_(qkv_w.chunk(t, 0)[r].reshape_as(self.attn.qkv.weight))
        if self.attn.qkv.bias is not None:
            self.attn.qkv.bias.copy_(serial.attn.qkv.bias.view(heads, -1).chunk(t, 0)[r].reshape(-1))
        self.attn.proj.weight.copy_(serial.attn.proj.weight.chunk(t, 1)[r])
        self.mlp.fc1.weight.copy_(serial.mlp.fc1.weight.chunk(t, 0)[r])
        self.mlp.fc2.weight.copy_(serial.mlp.fc2.weight.chunk(t, 1)[r])
        replicated = [(self.ln_1, serial.ln_1), (self.ln_2, serial.ln_2)]
        for mine, theirs in replicated:
            for p, q in zip(mine.parameters(), theirs.parameters()):
                p.copy_(q)
        for mine, theirs in ((self.attn.proj, serial.attn.proj), (self.mlp.fc2, serial.mlp.fc2)):
            if mine.bias is not None:
                mine.bias.copy_(theirs.bias)
        if self.mlp.fc1.bias is not None:
            self.mlp.fc1.bias.copy_(serial.mlp.fc1.bias.chunk(t, 0)[r])
        return self


def allreduce_sequence_parallel_grads(module: nn.Module, group=None) -> None:
    """Sum over the TP group the gradients of parameters marked ``sequence_parallel`` (LayerNorms and
    row-parallel biases under SP, which each rank computes from its sequence shard only). In place.
    Megatron: ``finalize_model_grads`` / ``_allreduce_layernorm_grads``."""
    for p in module.parameters():
        if getattr(p, "sequence_parallel", False) and p.grad is not None:
            dist.all_reduce(p.grad, group=group)


def build_layer(cfg: ModelConfig, group=None, sp: bool = False, device: str | torch.device = "cpu") -> GPTLayer:
    """One GPT layer in ``cfg.dtype`` on ``device``, training mode: the serial ``GPTLayer`` when ``group`` is
    None, else this rank's ``ParallelGPTLayer`` of the TP group. Works under FakeTensorMode (fake parameters).
    """
    with torch.device(device), default_dtype(getattr(torch, cfg.dtype)):
        layer = GPTLayer(cfg) if group is None else ParallelGPTLayer(cfg, group, sp)
    return layer.train()


def shard_sequence(x: torch.Tensor, group=None) -> torch.Tensor:
    """This rank's block of the sequence dimension (dim 0) of x [s, b, ...] -> [s/t, b, ...] (a view)."""
    return x.chunk(_world(group), 0)[dist.get_rank(group)]
