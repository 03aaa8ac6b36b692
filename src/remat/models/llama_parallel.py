"""Megatron-style tensor- and sequence-parallel Llama layer: one TP rank's share of ``remat.models.llama.LlamaLayer``.

    TP (sp=False): x [s, b, h] replicated
        ln_1 (RMSNorm) -> attn.qkv (column-parallel: a/t query heads and kv/t key/value groups) -> RoPE
        -> attn.core (SDPA, GQA within the rank) -> attn.proj (row-parallel, all-reduce) -> + x
        ln_2 -> mlp.gate, mlp.up (column-parallel ffn/t) -> SiLU · up -> mlp.down (row-parallel) -> + x
        (an MoE MLP: mlp.router replicated, every expert's ffn/t slice, ``ParallelSparseMoE``)
    TP + SP (sp=True): x [s/t, b, h], this rank's sequence shard; the RMSNorms and residual adds run on the
        shard, the column-parallel linears all-gather it (saving only the shard) and the row-parallel ones
        reduce-scatter back to it (Korthikanti §4.2.2), as in ``remat.models.tensor_parallel``.

The grouped-query split is Megatron-LM's (``num_query_groups`` divisible by the TP size): rank r holds query
heads [r·a/t, (r+1)·a/t) and the kv/t groups they read, so attention needs no communication. t must divide
a, kv and ffn. Submodule names are the serial layer's, so policies (selective = ``attn.core``) and the
accounting treat both alike. Same three ways to run as the GPT layer: fake process group (+ FakeTensorMode),
gloo on CPU, NCCL on GPU.
"""

from __future__ import annotations

import dataclasses

import torch
import torch.distributed as dist
from torch import nn

from remat.errors import UsageError
from remat.models.llama import LlamaAttention, LlamaLayer, RMSNorm, SDPACore, SwiGLU
from remat.models.moe import SparseMoE
from remat.models.presets import ModelConfig
from remat.models.tensor_parallel import (ColumnParallelLinear, RowParallelLinear, _all_gather_seq,
                                          _CopyToTensorParallelRegion, _GatherFromSequenceParallelRegion,
                                          _ReduceFromTensorParallelRegion, _ReduceScatterToSequenceParallelRegion)
from remat.models.transformer import default_dtype


def check_split(cfg: ModelConfig, t: int, sp: bool, fields: tuple[str, str] = ("tp", "sp")) -> None:
    """Raise UsageError(fields[0]) unless t divides the query heads, the key/value groups and the MLP width, and
    UsageError(fields[1]) for SP without TP (``fields``: how the caller names t and SP, e.g. "--tp", "--sp")."""
    for name, size in (("heads", cfg.heads), ("kv_heads", cfg.kv_heads), ("ffn_hidden", cfg.ffn_hidden)):
        if size % t:
            raise UsageError(fields[0], f"t = {t} must divide {name} ({size}) of the Llama-family layer "
                                   "(Megatron-LM splits query heads and key/value groups alike)")
    if sp and t == 1:
        raise UsageError(fields[1], "sequence parallelism needs tensor parallelism (tp ≥ 2)")


class ParallelLlamaAttention(LlamaAttention):
    """attn.qkv (column-parallel, this rank's [q | k | v] heads) -> RoPE -> attn.core -> attn.proj (row-parallel);
    ``LlamaAttention.forward`` unchanged. x: [s, b, h] (TP) or [s/t, b, h] (SP) -> same shape."""

    def __init__(self, cfg: ModelConfig, group=None, sp: bool = False):
        nn.Module.__init__(self)
        t = dist.get_world_size(group)
        self.heads, self.kv_heads, self.head_dim = cfg.heads // t, cfg.kv_heads // t, cfg.head_dim
        self.qkv = ColumnParallelLinear(cfg.hidden, cfg.hidden + 2 * cfg.kv_hidden, cfg.qkv_bias, group, sp)
        self.core = SDPACore(dataclasses.replace(cfg, heads=self.heads, kv_heads=self.kv_heads,
                                                 hidden=self.heads * self.head_dim))
        self.proj = RowParallelLinear(cfg.hidden, cfg.hidden, False, group, sp)
        self.register_rope(cfg)


class ParallelSwiGLU(SwiGLU):
    """mlp.gate, mlp.up (column-parallel h -> ffn/t) -> SiLU · up -> mlp.down (row-parallel ffn/t -> h);
    ``SwiGLU.forward`` unchanged."""

    def __init__(self, cfg: ModelConfig, group=None, sp: bool = False):
        nn.Module.__init__(self)
        self.gate = ColumnParallelLinear(cfg.hidden, cfg.ffn_hidden, False, group, sp)
        self.up = ColumnParallelLinear(cfg.hidden, cfg.ffn_hidden, False, group, sp)
        self.act = nn.SiLU()
        self.down = RowParallelLinear(cfg.ffn_hidden, cfg.hidden, False, group, sp)


class ParallelSparseMoE(SparseMoE):
    """The MoE MLP on one TP rank (remat.models.moe, its docstring): the router replicated (on the full sequence,
    or on this rank's shard under SP), every expert's f/t slice; ``SparseMoE`` naming. x as the layer's."""

    def __init__(self, cfg: ModelConfig, group=None, sp: bool = False):
        super().__init__(cfg, cfg.ffn_hidden // dist.get_world_size(group))
        self.group, self.sp = group, sp
        if sp:
            self.router.weight.sequence_parallel = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s, b, h = x.shape
        weights, ids = self.router(x.reshape(-1, h))
        weights, ids = weights.view(s, b, -1), ids.view(s, b, -1)
        if self.sp:     # the experts see the whole sequence: gather the rows and their routing
            x = _GatherFromSequenceParallelRegion.apply(x, self.group)
            weights = _GatherFromSequenceParallelRegion.apply(weights, self.group)
            ids = _all_gather_seq(ids, self.group)
        else:           # each rank's expert slice adds a partial gradient to the rows and their weights
            x = _CopyToTensorParallelRegion.apply(x, self.group)
            weights = _CopyToTensorParallelRegion.apply(weights, self.group)
        k = ids.shape[-1]
        partial = self.experts(x.reshape(-1, h), weights.reshape(-1, k), ids.reshape(-1, k)).view(x.shape)
        reduce = _ReduceScatterToSequenceParallelRegion if self.sp else _ReduceFromTensorParallelRegion
        return reduce.apply(partial, self.group)

    @torch.no_grad()
    def load_serial(self, serial: SparseMoE, rank: int, t: int) -> None:
        """Copy rank ``rank``'s share of a serial MoE MLP: the router whole, each expert's gate and up rows and
        down columns of its f/t slice."""
        self.router.weight.copy_(serial.router.weight)
        gate, up = serial.experts.gate_up_proj.chunk(2, dim=1)
        self.experts.gate_up_proj.copy_(torch.cat([gate.chunk(t, 1)[rank], up.chunk(t, 1)[rank]], dim=1))
        self.experts.down_proj.copy_(serial.experts.down_proj.chunk(t, 2)[rank])


class ParallelLlamaLayer(LlamaLayer):
    """One TP rank of the Llama layer; ``LlamaLayer.forward`` (pre-norm, residual adds) unchanged.

    group: the TP process group (size t); sp: sequence parallelism. x: [s, b, h] (sp=False) or this rank's
    sequence shard [s/t, b, h] (sp=True) -> same shape. Raises UsageError (``check_split``)."""

    def __init__(self, cfg: ModelConfig, group=None, sp: bool = False):
        nn.Module.__init__(self)
        t = dist.get_world_size(group)
        check_split(cfg, t, sp)
        self.tp, self.sp, self.group = t, sp, group
        self.ln_1 = RMSNorm(cfg.hidden, cfg.norm_eps)
        self.attn = ParallelLlamaAttention(cfg, group, sp)
        self.ln_2 = RMSNorm(cfg.hidden, cfg.norm_eps)
        self.mlp = ParallelSparseMoE(cfg, group, sp) if cfg.experts else ParallelSwiGLU(cfg, group, sp)
        if sp:
            for ln in (self.ln_1, self.ln_2):
                ln.weight.sequence_parallel = True

    @torch.no_grad()
    def load_serial(self, serial: LlamaLayer, rank: int | None = None) -> "ParallelLlamaLayer":
        """Copy this rank's shard of a serial ``LlamaLayer``'s weights (same cfg) into this layer; returns self.
        qkv: rows of this rank's query heads, then of its key and value groups; gate/up: output rows; proj and
        down: the matching input columns (an MoE: ``ParallelSparseMoE.load_serial``); the RMSNorm weights whole."""
        r = dist.get_rank(self.group) if rank is None else rank
        t, d = self.tp, self.attn.head_dim
        a, kv = self.attn.heads * t, self.attn.kv_heads * t
        for name in ("weight", "bias"):
            whole = getattr(serial.attn.qkv, name)
            if whole is None:
                continue
            q, k, v = whole.split([a * d, kv * d, kv * d], dim=0)
            getattr(self.attn.qkv, name).copy_(torch.cat([part.chunk(t, 0)[r] for part in (q, k, v)]))
        self.attn.proj.weight.copy_(serial.attn.proj.weight.chunk(t, 1)[r])
        if isinstance(self.mlp, ParallelSparseMoE):
            self.mlp.load_serial(serial.mlp, r, t)
        else:
            self.mlp.gate.weight.copy_(serial.mlp.gate.weight.chunk(t, 0)[r])
            self.mlp.up.weight.copy_(serial.mlp.up.weight.chunk(t, 0)[r])
            self.mlp.down.weight.copy_(serial.mlp.down.weight.chunk(t, 1)[r])
        self.ln_1.weight.copy_(serial.ln_1.weight)
        self.ln_2.weight.copy_(serial.ln_2.weight)
        return self


def build_llama_layer(cfg: ModelConfig, group=None, sp: bool = False,
                      device: str | torch.device = "cpu") -> LlamaLayer:
    """One Llama layer in ``cfg.dtype`` on ``device``, training mode: the serial ``LlamaLayer`` when ``group`` is
    None, else this rank's ``ParallelLlamaLayer``. Works under FakeTensorMode (fake parameters)."""
    with torch.device(device), default_dtype(getattr(torch, cfg.dtype)):
        layer = LlamaLayer(cfg) if group is None else ParallelLlamaLayer(cfg, group, sp)
    return layer.train()
