"""``ModelConfig``: one decoder-only transformer and its training shape, and ``validate`` (its consistency checks).

The shared definition under presets.py (named models) and hf_config.py (HuggingFace config.json files); it
imports no torch. Symbols follow Korthikanti: s seq, b micro_batch, h hidden, a heads, L layers, v vocab,
t tp, p pp, m interleave. Bad input raises ``remat.errors.UsageError(field, message)``.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from remat.errors import UsageError

DTYPES = ("float32", "float64", "bfloat16", "float16")
ARCHS = ("gpt", "llama")
ATTENTIONS = ("math", "sdpa")
ACTIVATIONS = ("gelu", "gelu_tanh", "silu")
MAX_LAYERS = 1024   # a sanity bound on L: the exact search is sized for real models (80 layers plan in seconds)


@dataclass(frozen=True)
class ModelConfig:
    """One decoder-only transformer and its training shape.

    Sizes are element counts (not bytes). ``arch`` "gpt" is the paper-faithful Korthikanti §4.1 layer
    (pre-LN, fused QKV, dropout, GeLU MLP h→ffn_hidden→h, learned positions); "llama" is RMSNorm + RoPE +
    GQA + SwiGLU + SDPA, no dropout. ``attention`` "math" materializes softmax(QKᵀ/√d) (the paper's
    assumption); "sdpa" calls torch.nn.functional.scaled_dot_product_attention (flash/efficient kernels).
    ``tp``, ``pp``, ``interleave``, ``global_batch`` describe the paper's parallel layout (Table 3); the
    serial runtime ignores them, the accounting and planner read them. ``experts`` > 0 (Llama only) makes the
    MLP a top-``top_k`` mixture of SwiGLU experts (``remat.models.moe``); ``ep`` spreads them over ranks.
    """

    name: str
    arch: str                 # "gpt" | "llama"
    hidden: int               # h
    heads: int                # a
    kv_heads: int             # KV groups (GQA); = heads for GPT
    layers: int               # L
    ffn_hidden: int           # MLP inner width (4h for GPT)
    vocab: int                # v
    seq: int                  # s
    micro_batch: int          # b
    dtype: str = "bfloat16"   # parameter and activation dtype (16-bit in the paper)
    dropout: float = 0.0      # every dropout of the GPT layer (softmax, attention output, MLP, embedding)
    attention: str = "math"   # "math" | "sdpa"
    norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    tp: int = 1               # t
    pp: int = 1               # p
    interleave: int = 1       # m
    global_batch: int = 1     # B
    max_positions: int = 2048  # learned-position table (GPT); RoPE context (Llama)
    activation: str = "gelu"  # "gelu" (erf) | "gelu_tanh" (GPT-2 gelu_new) | "silu" (SwiGLU gate)
    bias: bool = True         # biases on the GPT linears and LayerNorms
    qkv_bias: bool = False    # bias on Llama-style q/k/v projections (Qwen2)
    tie_embeddings: bool = True
    sliding_window: int | None = None  # Mistral/Qwen2 sliding-window attention (None = full causal)
    experts: int = 0          # E: a Mixtral-style MoE MLP of E SwiGLU experts (0 = the dense SwiGLU)
    top_k: int = 0            # k: experts per token (the routed rows are k·s·b)
    ep: int = 1               # expert parallelism: E/ep experts per rank, tokens exchanged all-to-all
    rope_scaling: str | None = None    # recorded from config.json; frequencies are not rescaled (no effect
    #                                    on shapes, saved bytes or FLOPs)
    source: str = "preset"    # "preset" or the config.json path

    @property
    def head_dim(self) -> int:
        """d = h / a."""
        return self.hidden // self.heads

    @property
    def kv_hidden(self) -> int:
        """Width of K (and of V): kv_heads · d."""
        return self.kv_heads * self.head_dim

    def to_dict(self) -> dict:
        """Plain dict of every field (JSON-ready)."""
        return dataclasses.asdict(self)


def _check_int(cfg: ModelConfig, field: str, minimum: int = 1) -> None:
    value = getattr(cfg, field)
    if isinstance(value, bool) or not isinstance(value, int):
        raise UsageError(field, f"must be an integer, got {value!r}")
    if value < minimum:
        raise UsageError(field, f"must be ≥ {minimum}, got {value}")


def _check_choice(cfg: ModelConfig, field: str, choices: tuple[str, ...]) -> None:
    if getattr(cfg, field) not in choices:
        raise UsageError(field, f"must be one of {', '.join(choices)}, got {getattr(cfg, field)!r}")


def validate(cfg: ModelConfig) -> ModelConfig:
    """Return ``cfg`` if consistent; raise UsageError naming the first bad field otherwise.

    Checks: positive integer sizes; h divisible by a; a divisible by kv_heads (GQA groups); GPT has
    kv_heads = a; Llama attention = sdpa (its layer has no materialized-softmax path); even head_dim for
    RoPE; t divides a and h; s ≤ max_positions for learned positions; 0 ≤ dropout < 1; at most MAX_LAYERS
    layers; known dtype / arch / attention / activation; positive finite norm_eps
    and rope_theta; an MoE (experts ≥ 2,
    Llama only) routes each token to 1 ≤ top_k ≤ experts experts, and ep divides experts (top_k 0 without).
    """
    for field in ("hidden", "heads", "kv_heads", "layers", "ffn_hidden", "vocab", "seq", "micro_batch",
                  "tp", "pp", "interleave", "global_batch", "max_positions"):
        _check_int(cfg, field)
    _check_choice(cfg, "arch", ARCHS)
    _check_choice(cfg, "dtype", DTYPES)
    _check_choice(cfg, "attention", ATTENTIONS)
    _check_choice(cfg, "activation", ACTIVATIONS)
    if cfg.hidden % cfg.heads:
        raise UsageError("heads", f"{cfg.heads} heads do not divide hidden size {cfg.hidden}")
    if cfg.heads % cfg.kv_heads:
        raise UsageError("kv_heads", f"{cfg.kv_heads} KV groups do not divide {cfg.heads} heads")
    if cfg.arch == "gpt" and cfg.kv_heads != cfg.heads:
        raise UsageError("kv_heads", f"the GPT layer has one KV head per head ({cfg.heads}), got {cfg.kv_heads}")
    if cfg.arch == "llama" and cfg.attention != "sdpa":
        raise UsageError("attention", f"{cfg.attention!r} is not available for the Llama-style layer ({cfg.name}), "
                                      "which always calls scaled_dot_product_attention: use sdpa or leave "
                                      "--attention unset")
    if cfg.arch == "llama" and cfg.head_dim % 2:
        raise UsageError("heads", f"RoPE needs an even head dimension, got {cfg.head_dim}")
    if cfg.heads % cfg.tp or cfg.hidden % cfg.tp:
        raise UsageError("tp", f"t = {cfg.tp} must divide heads ({cfg.heads}) and hidden ({cfg.hidden})")
    if cfg.arch == "gpt" and cfg.seq > cfg.max_positions:
        raise UsageError("seq", f"{cfg.seq} exceeds the {cfg.max_positions} learned positions of {cfg.name}")
    if not isinstance(cfg.dropout, (int, float)) or not 0.0 <= cfg.dropout < 1.0:
        raise UsageError("dropout", f"must be in [0, 1), got {cfg.dropout!r}")
    for field in ("norm_eps", "rope_theta"):
        value = getattr(cfg, field)
        if not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
            raise UsageError(field, f"must be a positive finite number, got {value!r}")
    if cfg.layers > MAX_LAYERS:
        raise UsageError("layers", f"{cfg.layers} layers: at most {MAX_LAYERS} (the deepest published models have "
                                   "about 130)")
    if cfg.sliding_window is not None:
        _check_int(cfg, "sliding_window")
    _check_moe(cfg)
    return cfg


def _check_moe(cfg: ModelConfig) -> None:
    """UsageError naming the first MoE field (experts, top_k, ep) ``validate`` refuses (its docstring)."""
    for field in ("experts", "top_k"):
        _check_int(cfg, field, minimum=0)
    _check_int(cfg, "ep")
    if not cfg.experts:
        if cfg.top_k or cfg.ep > 1:
            raise UsageError("top_k" if cfg.top_k else "ep", "needs a mixture of experts (experts ≥ 2)")
        return
    if cfg.arch != "llama" or cfg.experts < 2:
        raise UsageError("experts", f"a mixture of experts needs the Llama-style layer and ≥ 2 experts, got "
                                    f"{cfg.experts} on {cfg.arch}")
    if not 1 <= cfg.top_k <= cfg.experts:
        raise UsageError("top_k", f"must be in 1..{cfg.experts} (the experts), got {cfg.top_k}")
    if cfg.experts % cfg.ep:
        raise UsageError("ep", f"expert parallelism {cfg.ep} must divide the {cfg.experts} experts")
