"""A Llama-style layer: RMSNorm, RoPE, grouped-query attention (GQA), SwiGLU MLP, SDPA, no dropout.

Sequence-first like the GPT layer ([s, b, h] in and out) and with the same top-level names, so policies and
accounting treat both alike:

    ln_1 (RMSNorm) -> attn.qkv (fused Linear h -> (a + 2·kv)·d, gpt-fast style) -> RoPE on q, k
    -> attn.core (F.scaled_dot_product_attention, causal, GQA) -> attn.proj (h -> h) -> + residual
    ln_2 (RMSNorm) -> mlp.gate, mlp.up (h -> ffn) -> mlp.act (SiLU) · up -> mlp.down (ffn -> h) -> + residual
    (with cfg.experts: mlp.router -> mlp.experts, a top-k mixture of SwiGLU experts, remat.models.moe)

Mistral/Qwen2 sliding-window attention is an additive [s, s] mask when the window is shorter than s, built once
per model (``SDPACore``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from remat.models.moe import SparseMoE
from remat.models.presets import ModelConfig


def rope_tables(positions: int, head_dim: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin tables [positions, head_dim] for rotate-half RoPE (Su et al. 2021; HF Llama layout).

    Frequency i (of d/2) is θ^(−2i/d); both halves of the head dimension share it. Computed in float64,
    returned in the default dtype (build_model sets it to the model dtype).
    """
    inv_freq = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    angles = torch.outer(torch.arange(positions, dtype=torch.float64), inv_freq)  # [positions, d/2]
    angles = torch.cat([angles, angles], dim=-1)
    dtype = torch.get_default_dtype()  # the model dtype while build_model runs
    return angles.cos().to(dtype), angles.sin().to(dtype)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate x [s, b, heads, d] by position: x·cos + rotate_half(x)·sin, cos/sin [s, d]."""
    x1, x2 = x.chunk(2, dim=-1)
    rotated = torch.cat([-x2, x1], dim=-1)
    return x * cos[:, None, None, :] + rotated * sin[:, None, None, :]


class RMSNorm(nn.Module):
    """transformers' LlamaRMSNorm op for op, so the layer saves what the transformers model saves: the input
    cast to float32 (kept by pow and by the scaling mul: 4sbh bytes for a 16-bit model), the float32 1/rms
    (4sb) and the normalised input cast back to the model dtype (kept by the weight mul: 2sbh). torch's
    nn.RMSNorm keeps the float32 normalised tensor instead (4sbh); a fused kernel (Apex, Transformer Engine)
    keeps only the input and 1/rms. x [..., h] -> same shape and dtype."""

    def __init__(self, hidden: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x.float()
        y = y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * y.to(x.dtype)


class SDPACore(nn.Module):
    """Core attention through F.scaled_dot_product_attention (causal, GQA via enable_gqa).

    q [s, b, a, d], k and v [s, b, kv, d] -> context [s, b, a·d]. A sliding window shorter than the step's s
    (cfg.seq) is an additive [s, s] mask in the model dtype (0 inside the window, −inf outside: a boolean mask
    would be converted to one inside every SDPA call and saved per layer) held as a non-persistent buffer,
    built once: ``Transformer`` gives all its layers one storage (as transformers builds the mask once per
    forward), so it is model state, not a saved activation of every layer. (A FlashAttention-2 kernel takes
    the window as an argument and holds no mask; ``Module.to`` copies a shared buffer per layer.)
    """

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.gqa = cfg.kv_heads != cfg.heads
        self.window = cfg.sliding_window
        mask = None
        if self.window is not None and self.window < cfg.seq:
            i = torch.arange(cfg.seq)
            allowed = (i[None, :] <= i[:, None]) & (i[:, None] - i[None, :] < self.window)
            mask = torch.zeros(cfg.seq, cfg.seq).masked_fill(~allowed, float("-inf"))   # the default (model) dtype
        self.register_buffer("window_mask", mask, persistent=False)

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        s, b, a, d = q.shape
        q, k, v = (t.permute(1, 2, 0, 3) for t in (q, k, v))  # [b, heads, s, d]
        if self.window is not None and self.window < s:
            if self.window_mask is None or s > self.window_mask.shape[0]:
                raise ValueError(f"sequence length {s} is longer than the ModelConfig.seq the sliding-window mask "
                                 "was built for")
            ctx = F.scaled_dot_product_attention(q, k, v, attn_mask=self.window_mask[:s, :s], enable_gqa=self.gqa)
        else:
            ctx = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=self.gqa)
        return ctx.permute(2, 0, 1, 3).reshape(s, b, a * d)


class LlamaAttention(nn.Module):
    """qkv (fused) -> RoPE -> core (SDPA, GQA) -> proj. x [s, b, h] -> [s, b, h]."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = cfg.heads, cfg.kv_heads, cfg.head_dim
        self.qkv = nn.Linear(cfg.hidden, cfg.hidden + 2 * cfg.kv_hidden, bias=cfg.qkv_bias)
        self.core = SDPACore(cfg)
        self.proj = nn.Linear(cfg.hidden, cfg.hidden, bias=False)
        self.register_rope(cfg)

    def register_rope(self, cfg: ModelConfig) -> None:
        """The RoPE tables of ``cfg``'s context as non-persistent buffers rope_cos, rope_sin [positions, d]."""
        cos, sin = rope_tables(cfg.max_positions, cfg.head_dim, cfg.rope_theta)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        qkv = self.qkv(x)   # [s, b, (a + 2kv)·d]: the whole sequence (a sequence-parallel qkv all-gathers it)
        s, b, _ = qkv.shape
        d = self.head_dim
        q, k, v = qkv.split([self.heads * d, self.kv_heads * d, self.kv_heads * d], dim=-1)
        cos, sin = self.rope_cos[:s], self.rope_sin[:s]
        q = apply_rope(q.view(s, b, self.heads, d), cos, sin)
        k = apply_rope(k.view(s, b, self.kv_heads, d), cos, sin)
        # v copied out of the fused output (as transformers' separate v_proj makes it), so the SDPA's saved v does
        # not keep the whole [s, b, (a + 2kv)·d] output alive
        return self.proj(self.core(q, k, v.contiguous().view(s, b, self.kv_heads, d)))


class SwiGLU(nn.Module):
    """down(act(gate(x)) · up(x)) with SiLU (Shazeer 2020). x [s, b, h] -> [s, b, h]."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.gate = nn.Linear(cfg.hidden, cfg.ffn_hidden, bias=False)
        self.up = nn.Linear(cfg.hidden, cfg.ffn_hidden, bias=False)
        self.act = nn.SiLU()
        self.down = nn.Linear(cfg.ffn_hidden, cfg.hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(self.act(self.gate(x)) * self.up(x))


class LlamaLayer(nn.Module):
    """Pre-norm Llama layer. x [s, b, h] -> [s, b, h]; residual adds here."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.ln_1 = RMSNorm(cfg.hidden, cfg.norm_eps)
        self.attn = LlamaAttention(cfg)
        self.ln_2 = RMSNorm(cfg.hidden, cfg.norm_eps)
        self.mlp = SparseMoE(cfg) if cfg.experts else SwiGLU(cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class LlamaEmbedding(nn.Module):
    """Token embedding only (positions enter through RoPE). tokens [s, b] -> [s, b, h]."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.tok = nn.Embedding(cfg.vocab, cfg.hidden)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.tok(tokens)
