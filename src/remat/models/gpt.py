"""The paper-faithful GPT layer of Korthikanti et al. 2022 §4.1 (Megatron-LM's ParallelTransformerLayer, t = 1).

Sequence-first like Megatron: input and output [s, b, h]. Submodule names are fixed (the accounting labels
saved tensors by them and selective recompute targets ``attn.core``):

    ln_1 (LayerNorm) -> attn.qkv (Linear h->3h, fused) -> attn.core (QKᵀ/√d, causal mask, softmax,
    softmax dropout, ·V: Megatron's core_attn) -> attn.proj (Linear h->h) -> attn.dropout -> + residual
    ln_2 (LayerNorm) -> mlp.fc1 (h->4h) -> mlp.act (GeLU) -> mlp.fc2 (4h->h) -> mlp.dropout -> + residual

What autograd saves, per layer, with element size e (2 for 16-bit) and 1-byte dropout masks:
    ln_1 input sbh·e, qkv input sbh·e, Q K V 3sbh·e (views of one qkv output), softmax output as²b·e,
    softmax-dropout mask as²b, dropout output as²b·e, proj input sbh·e, attn dropout mask sbh, ln_2 input
    sbh·e, fc1 input sbh·e, GeLU input 4sbh·e, fc2 input 4sbh·e, mlp dropout mask sbh
  = sbh(16e + 2) + as²b(2e + 1)  — for e = 2 the paper's sbh(34 + 5as/h) (Eq. 1) — plus what the paper
    ignores: LayerNorm mean and rstd (4 tensors of sb elements; fp32 on CUDA, the input dtype on the CPU).
    The causal mask is a buffer (model state, not an activation).

Dropout is ``torch.native_dropout`` (the op CUDA's nn.Dropout uses), so the saved mask is a 1-byte bool on
every device, as in the paper (on CPU, nn.Dropout would save a mask in the activation dtype).
Q, K, V use Megatron's per-head [q k v] layout so that they are strided views of the qkv output and
``torch.baddbmm`` / ``torch.bmm`` save those views (no copies), as Megatron's core attention does.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from remat.models.presets import ModelConfig


class Dropout(nn.Module):
    """Dropout through ``torch.native_dropout``: saves a bool mask (1 byte/element) for backward.

    x: any shape -> same shape. Identity when not training or p = 0. Uses the default generator, so
    torch.utils.checkpoint's RNG-state replay reproduces the mask bit for bit.
    """

    def __init__(self, p: float):
        super().__init__()
        self.p = float(p)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0.0:
            return x
        return torch.native_dropout(x, self.p, True)[0]

    def extra_repr(self) -> str:
        return f"p={self.p}"


class CoreAttention(nn.Module):
    """Megatron's core_attn: softmax(QKᵀ/√d + causal mask) with dropout, times V.

    q, k, v: [s, b, a, d] (views of the fused qkv output) -> context [s, b, h] (contiguous).
    ``attention`` "math" materializes the [b·a, s, s] scores (the paper's assumption); "sdpa" calls
    F.scaled_dot_product_attention(is_causal=True) instead (flash/efficient kernels, no s² activations).
    """

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.attention = cfg.attention
        self.scale = 1.0 / math.sqrt(cfg.head_dim)
        self.dropout = Dropout(cfg.dropout)
        mask = torch.ones(cfg.max_positions, cfg.max_positions, dtype=torch.bool).triu_(1)
        self.register_buffer("causal_mask", mask, persistent=False)  # True above the diagonal = masked

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        s, b, a, d = q.shape
        if self.attention == "sdpa":
            ctx = F.scaled_dot_product_attention(  # [b, a, s, d]
                q.permute(1, 2, 0, 3), k.permute(1, 2, 0, 3), v.permute(1, 2, 0, 3),
                dropout_p=self.dropout.p if self.training else 0.0, is_causal=True)
            return ctx.permute(2, 0, 1, 3).reshape(s, b, a * d)
        q = q.reshape(s, b * a, d).transpose(0, 1)           # [b·a, s, d] view
        k = k.reshape(s, b * a, d).permute(1, 2, 0)          # [b·a, d, s] view
        v = v.reshape(s, b * a, d).transpose(0, 1)           # [b·a, s, d] view
        zero = q.new_zeros(())
        scores = torch.baddbmm(zero, q, k, beta=0.0, alpha=self.scale)  # [b·a, s, s]
        scores = scores.masked_fill(self.causal_mask[:s, :s], float("-inf"))
        probs = self.dropout(torch.softmax(scores, dim=-1))  # [b·a, s, s]
        ctx = torch.bmm(probs, v)                             # [b·a, s, d]
        return ctx.view(b, a, s, d).permute(2, 0, 1, 3).reshape(s, b, a * d)


class SelfAttention(nn.Module):
    """qkv (fused Linear h->3h) -> core (core attention) -> proj (Linear h->h) -> dropout.

    x: [s, b, h] -> [s, b, h].
    """

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.heads, self.head_dim = cfg.heads, cfg.head_dim
        self.qkv = nn.Linear(cfg.hidden, 3 * cfg.hidden, bias=cfg.bias)
        self.core = CoreAttention(cfg)
        self.proj = nn.Linear(cfg.hidden, cfg.hidden, bias=cfg.bias)
        self.dropout = Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        qkv = self.qkv(x)                       # [s, b, 3h]; s read here: under SP x is a sequence shard
        s, b, _ = qkv.shape
        qkv = qkv.view(s, b, self.heads, 3 * self.head_dim)          # Megatron layout: per head [q k v]
        q, k, v = qkv.split(self.head_dim, dim=-1)                   # 3 × [s, b, a, d] views
        return self.dropout(self.proj(self.core(q, k, v)))


class MLP(nn.Module):
    """fc1 (h->ffn) -> act (GeLU) -> fc2 (ffn->h) -> dropout. x: [s, b, h] -> [s, b, h]."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.fc1 = nn.Linear(cfg.hidden, cfg.ffn_hidden, bias=cfg.bias)
        self.act = nn.GELU(approximate="tanh" if cfg.activation == "gelu_tanh" else "none")
        self.fc2 = nn.Linear(cfg.ffn_hidden, cfg.hidden, bias=cfg.bias)
        self.dropout = Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.fc2(self.act(self.fc1(x))))


class GPTLayer(nn.Module):
    """Pre-LN transformer layer (Korthikanti §4.1). x: [s, b, h] -> [s, b, h]; residual adds here."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.hidden, eps=cfg.norm_eps, bias=cfg.bias)
        self.attn = SelfAttention(cfg)
        self.ln_2 = nn.LayerNorm(cfg.hidden, eps=cfg.norm_eps, bias=cfg.bias)
        self.mlp = MLP(cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPTEmbedding(nn.Module):
    """Token + learned position embedding + dropout (Megatron's Embedding). tokens [s, b] -> [s, b, h]."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.tok = nn.Embedding(cfg.vocab, cfg.hidden)
        self.pos = nn.Embedding(cfg.max_positions, cfg.hidden)
        self.dropout = Dropout(cfg.dropout)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(tokens.shape[0], device=tokens.device)
        return self.dropout(self.tok(tokens) + self.pos(positions)[:, None, :])

