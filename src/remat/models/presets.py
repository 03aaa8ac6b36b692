"""Model configurations: ``ModelConfig`` and the presets behind ``from_name`` (gpt-fast style).

Presets:
    gpt-22b, gpt3-175b, mt-nlg-530b, gpt-1t   Korthikanti et al. 2022, Table 3 (s = 2048, v = 51200, t = 8)
    gpt2-124m                                 Radford et al. 2019 (HF ``gpt2``), float32
    llama3-8b                                 Meta Llama 3 8B (GQA 32/8, SwiGLU 14336, RoPE θ = 500000)
    gpt-tiny, llama-tiny                      CPU-test sizes (seconds)
or a path to a HuggingFace-style ``config.json`` (model_type gpt2, llama, mistral, qwen2; see hf_config.py).

    cfg = from_name("gpt3-175b", layers=1, seq=512)

Symbols follow Korthikanti: s seq, b micro_batch, h hidden, a heads, L layers, v vocab, t tp, p pp,
m interleave. Bad input raises ``remat.errors.UsageError(field, message)``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from remat.errors import UsageError

DTYPES = ("float32", "float64", "bfloat16", "float16")
ARCHS = ("gpt", "llama")
ATTENTIONS = ("math", "sdpa")
ACTIVATIONS = ("gelu", "gelu_tanh", "silu")


@dataclass(frozen=True)
class ModelConfig:
    """One decoder-only transformer and its training shape.

    Sizes are element counts (not bytes). ``arch`` "gpt" is the paper-faithful Korthikanti §4.1 layer
    (pre-LN, fused QKV, dropout, GeLU MLP h→ffn_hidden→h, learned positions); "llama" is RMSNorm + RoPE +
    GQA + SwiGLU + SDPA, no dropout. ``attention`` "math" materializes softmax(QKᵀ/√d) (the paper's
    assumption); "sdpa" calls torch.nn.functional.scaled_dot_product_attention (flash/efficient kernels).
    ``tp``, ``pp``, ``interleave``, ``global_batch`` describe the paper's parallel layout (Table 3); the
    serial runtime ignores them, the accounting and planner read them.
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


def _paper(name: str, a: int, h: int, L: int, p: int, global_batch: int, b: int, m: int) -> ModelConfig:
    """A Korthikanti Table 3 model: s = 2048, v = 51200, t = 8, 16-bit, dropout 0.1, materialized softmax."""
    return ModelConfig(name=name, arch="gpt", hidden=h, heads=a, kv_heads=a, layers=L, ffn_hidden=4 * h,
                       vocab=51200, seq=2048, micro_batch=b, dtype="bfloat16", dropout=0.1, attention="math",
                       tp=8, pp=p, interleave=m, global_batch=global_batch, max_positions=2048)


PRESETS: dict[str, ModelConfig] = {
    # Korthikanti et al. 2022, Table 3 (a, h, L, p, global batch, micro-batch; m = 3 for 175B and 530B).
    "gpt-22b": _paper("gpt-22b", a=64, h=6144, L=48, p=1, global_batch=4, b=4, m=1),
    "gpt3-175b": _paper("gpt3-175b", a=96, h=12288, L=96, p=8, global_batch=64, b=1, m=3),
    "mt-nlg-530b": _paper("mt-nlg-530b", a=128, h=20480, L=105, p=35, global_batch=280, b=1, m=3),
    "gpt-1t": _paper("gpt-1t", a=160, h=25600, L=128, p=64, global_batch=512, b=1, m=1),
    # GPT-2 small as in HF "gpt2": n_embd 768, n_head 12, n_layer 12, n_positions 1024, gelu_new, pdrop 0.1.
    "gpt2-124m": ModelConfig(name="gpt2-124m", arch="gpt", hidden=768, heads=12, kv_heads=12, layers=12,
                             ffn_hidden=3072, vocab=50257, seq=1024, micro_batch=1, dtype="float32",
                             dropout=0.1, attention="math", max_positions=1024, activation="gelu_tanh"),
    # Meta Llama 3 8B (config.json of meta-llama/Meta-Llama-3-8B).
    "llama3-8b": ModelConfig(name="llama3-8b", arch="llama", hidden=4096, heads=32, kv_heads=8, layers=32,
                             ffn_hidden=14336, vocab=128256, seq=8192, micro_batch=1, dtype="bfloat16",
                             dropout=0.0, attention="sdpa", rope_theta=500000.0, max_positions=8192,
                             activation="silu", bias=False, tie_embeddings=False),
    # CPU-test sizes.
    "gpt-tiny": ModelConfig(name="gpt-tiny", arch="gpt", hidden=64, heads=4, kv_heads=4, layers=2,
                            ffn_hidden=256, vocab=128, seq=32, micro_batch=2, dtype="float32", dropout=0.1,
                            attention="math", max_positions=64),
    "llama-tiny": ModelConfig(name="llama-tiny", arch="llama", hidden=64, heads=4, kv_heads=2, layers=2,
                              ffn_hidden=176, vocab=128, seq=32, micro_batch=2, dtype="float32", dropout=0.0,
                              attention="sdpa", max_positions=64, activation="silu", bias=False,
                              tie_embeddings=False),
}


def from_name(name_or_path: str, **overrides) -> ModelConfig:
    """A preset by name, or a HuggingFace-style config.json by path (or its model folder), with field overrides.

    ``overrides`` are ModelConfig fields (e.g. ``layers=1, seq=512, micro_batch=2, dtype="float32"``);
    ``None`` values are ignored (convenient for unset CLI flags). The result is validated.

    Raises UsageError("model") for an unknown preset or a missing file, UsageError(<config.json key>) for a
    malformed or unsupported config.json, UsageError(<field>) for an unknown override or an invalid value
    (heads not dividing hidden, kv_heads not dividing heads, seq ≤ 0, …).
    Source: presets from Korthikanti et al. 2022 Table 3, HF model cards; pattern from gpt-fast's from_name.
    """
    if name_or_path in PRESETS:
        cfg = PRESETS[name_or_path]
    elif Path(name_or_path).is_dir():   # a HuggingFace model folder: its config.json
        if not (Path(name_or_path) / "config.json").is_file():
            raise UsageError("model", f"{name_or_path} is a folder without a config.json")
        return from_name(str(Path(name_or_path) / "config.json"), **overrides)
    elif str(name_or_path).endswith(".json") or Path(name_or_path).is_file():
        from remat.models.hf_config import read_hf_config
        cfg = read_hf_config(name_or_path)
    else:
        raise UsageError("model", f"unknown preset {name_or_path!r} (presets: {', '.join(PRESETS)}; "
                                  "or a path to a config.json)")
    known = {f.name for f in dataclasses.fields(ModelConfig)}
    changes = {k: v for k, v in overrides.items() if v is not None}
    for key in changes:
        if key not in known:
            raise UsageError(key, f"not a model config field (fields: {', '.join(sorted(known))})")
    if "layers" in changes and changes.get("pp") is None and cfg.pp > changes["layers"]:
        changes["pp"] = 1  # fewer layers than stages: a single-stage model (e.g. one 175B layer)
    if cfg.arch == "gpt" and "heads" in changes and "kv_heads" not in changes:
        changes["kv_heads"] = changes["heads"]  # the GPT layer has one KV head per head
    if "seq" in changes and "max_positions" not in changes and isinstance(changes["seq"], int):
        changes["max_positions"] = max(cfg.max_positions, changes["seq"])  # grow the position table
    return validate(dataclasses.replace(cfg, **changes))


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
    RoPE; t divides a and h; s ≤ max_positions for learned positions; 0 ≤ dropout < 1;
    known dtype / arch / attention / activation; positive norm_eps and rope_theta.
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
        if not isinstance(value, (int, float)) or value <= 0:
            raise UsageError(field, f"must be a positive number, got {value!r}")
    if cfg.sliding_window is not None:
        _check_int(cfg, "sliding_window")
    return cfg
