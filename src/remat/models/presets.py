"""Model presets behind ``from_name`` (gpt-fast style); ``ModelConfig`` and ``validate`` live in config.py.

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
from pathlib import Path

from remat.errors import UsageError
from remat.models.config import ACTIVATIONS, ARCHS, ATTENTIONS, DTYPES, ModelConfig, validate
from remat.models.hf_config import read_hf_config

__all__ = ["ACTIVATIONS", "ARCHS", "ATTENTIONS", "DTYPES", "PRESETS", "ModelConfig", "from_name", "validate"]


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
