"""A Mixtral-style mixture-of-experts MLP for the Llama layer: a top-k router and E SwiGLU experts run as two
grouped GEMMs, op for op as transformers 5 runs ``MixtralSparseMoeBlock`` with its default ``grouped_mm``
experts (``transformers.integrations.moe.grouped_mm_experts_forward``), so it saves what that model saves:

    x [s, b, h] -> router: logits = x·Wᵣᵀ, probs = softmax(fp32 logits), top-k (ids, weights), weights /= Σ
    -> sort the k·s·b (token, expert) rows by expert, gather the token rows -> grouped GEMM x·[gate | up]ᵀ
    -> SiLU(gate) · up -> grouped GEMM ·downᵀ -> × routing weight -> back to token order -> Σ over k

Saved per micro-batch (r = k·s·b routed rows, E experts, f the expert width): the router's input (s·b·h),
fp32 probs (s·b·E), int64 ids (s·b·k), the weights' sum and the normalised weights (fp32); three int64 index
vectors of r, the int32 offsets (E), the routed input rows (r·h), the gate/up output (r·2f), SiLU (r·f), SiLU·up
(r·f), the fp32 routing weight per row (r) and the down output (r·h). The count of rows is k·s·b whatever the
routing: a balanced or an unbalanced router moves the same rows, only the per-expert split changes.

Tensor parallelism (``group``; Megatron-Core's experts with expert-tensor-parallel size = t and the all-gather
token dispatcher): every rank holds every expert's f/t slice (gate/up rows, down columns). Without SP the
router runs replicated on the full sequence; with SP on this rank's shard, and the hidden rows, routing ids and
weights are all-gathered along the sequence before the experts, whose partial output is reduce-scattered back
(without SP: all-reduced). Expert parallelism (``ModelConfig.ep``) is accounted by the planner, not built here.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from remat.formulas.op_flops import FORMULAS
from remat.models.config import ModelConfig

INIT_STD = 0.02
"""The experts' and the router's initial weights are N(0, 0.02), as every Linear of remat's models."""


@torch.library.custom_op("remat::grouped_mm", mutates_args=())
def grouped_mm(a: torch.Tensor, b: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
    """torch's grouped GEMM (``F.grouped_mm``) as one op with a fake kernel for every dtype: torch's meta kernel
    takes bfloat16 only, so a float32 model could not be measured under fake tensors. a [M, K] · b [E, K, N]
    (rows of a split by the int32 cumulative ``offs``) -> [M, N]; a [K, M] · b [M, N] (M split) -> [E, K, N].
    torch's CUDA kernel takes bfloat16 only: other dtypes on a GPU run ``grouped_mm_loop``."""
    if a.device.type == "cuda" and a.dtype != torch.bfloat16:
        return grouped_mm_loop(a, b, offs)
    return F.grouped_mm(a, b, offs=offs)


def grouped_mm_loop(a: torch.Tensor, b: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
    """``grouped_mm`` as one matmul per group (the groups' bounds read from ``offs``); rows past the last group
    are zero (the grouped kernel leaves them unwritten)."""
    bounds = [0, *offs.tolist()]
    if b.dim() == 3:
        out = a.new_zeros(a.shape[0], b.shape[-1])
        for g, (start, end) in enumerate(zip(bounds, bounds[1:])):
            out[start:end] = a[start:end] @ b[g]
        return out
    return torch.stack([a[:, start:end] @ b[start:end] for start, end in zip(bounds, bounds[1:])])


@grouped_mm.register_fake
def _grouped_mm_fake(a, b, offs):
    if b.dim() == 3:
        return a.new_empty(a.shape[0], b.shape[-1])
    return a.new_empty(offs.shape[0], a.shape[0], b.shape[-1])


def _grouped_mm_context(ctx, inputs, output):
    a, b, offs = inputs
    ctx.save_for_backward(a, b, offs)


def _grouped_mm_backward(ctx, grad):
    a, b, offs = ctx.saved_tensors      # the 2-D × 3-D form only (the forward of the experts)
    return grouped_mm(grad, b.transpose(-2, -1), offs), grouped_mm(a.t(), grad, offs), None


grouped_mm.register_autograd(_grouped_mm_backward, setup_context=_grouped_mm_context)
FORMULAS[torch.ops.remat.grouped_mm] = FORMULAS[torch.ops.aten._grouped_mm]   # its FLOPs are aten's grouped GEMM's


class TopKRouter(nn.Module):
    """transformers' MixtralTopKRouter: x [n, h] -> (weights [n, k] fp32, normalised to sum 1; ids [n, k])."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.top_k = cfg.top_k
        self.weight = nn.Parameter(torch.empty(cfg.experts, cfg.hidden).normal_(0.0, INIT_STD))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        probs = F.softmax(F.linear(x, self.weight).float(), dim=-1)
        weights, ids = torch.topk(probs, self.top_k, dim=-1)
        weights /= weights.sum(dim=-1, keepdim=True)
        return weights, ids


class Experts(nn.Module):
    """E SwiGLU experts as stacked weights gate_up_proj [E, 2f, h] and down_proj [E, h, f] (transformers'
    MixtralExperts layout; under TP f is this rank's f/t). x [n, h], weights and ids [n, k] -> [n, h]."""

    def __init__(self, cfg: ModelConfig, width: int):
        super().__init__()
        self.num_experts = cfg.experts
        self.gate_up_proj = nn.Parameter(torch.empty(cfg.experts, 2 * width, cfg.hidden).normal_(0.0, INIT_STD))
        self.down_proj = nn.Parameter(torch.empty(cfg.experts, cfg.hidden, width).normal_(0.0, INIT_STD))

    def forward(self, x: torch.Tensor, weights: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        n, k = ids.shape
        sorted_ids, perm = torch.sort(ids.reshape(-1))
        rows = x[perm // k]                                        # [r, h], grouped by expert
        row_weights = weights.reshape(-1)[perm]
        counts = torch.histc(sorted_ids.float(), bins=self.num_experts, min=0, max=self.num_experts - 1)
        offs = torch.cumsum(counts, dim=0, dtype=torch.int32)
        gate, up = grouped_mm(rows, self.gate_up_proj.transpose(-2, -1), offs).chunk(2, dim=-1)
        out = grouped_mm(F.silu(gate) * up, self.down_proj.transpose(-2, -1), offs) * row_weights.unsqueeze(-1)
        inverse = torch.empty_like(perm)
        inverse[perm] = torch.arange(perm.shape[0], device=perm.device)
        return out[inverse].view(n, k, -1).sum(dim=1).to(x.dtype)


class SparseMoE(nn.Module):
    """The MoE MLP of one Llama layer (module docstring): ``router``, ``experts`` (each ``width`` wide: default
    the config's ffn_hidden; a TP rank's f/t). x [s, b, h] -> [s, b, h]."""

    def __init__(self, cfg: ModelConfig, width: int | None = None):
        super().__init__()
        self.router = TopKRouter(cfg)
        self.experts = Experts(cfg, cfg.ffn_hidden if width is None else width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, x.shape[-1])
        weights, ids = self.router(flat)
        return self.experts(flat, weights, ids).view_as(x)
