"""Read a HuggingFace-style ``config.json`` (model_type gpt2, llama, mistral, qwen2) into a ModelConfig.

The key names are those of transformers' GPT2Config, LlamaConfig, MistralConfig and Qwen2Config. The training
shape (seq, micro_batch) is not part of a model config: seq defaults to the context length
(n_positions / max_position_embeddings), micro_batch to 1; override them with ``from_name(path, seq=...)``.
Every malformed or unsupported entry raises ``UsageError(<key>, ...)`` naming the config.json key.
"""

from __future__ import annotations

import json
from pathlib import Path

from remat.errors import UsageError
from remat.models.presets import ModelConfig, validate

SUPPORTED = ("gpt2", "llama", "mistral", "qwen2")
_GPT2_ACT = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu": "gelu"}
_GPT2_KEYS = {"hidden": "n_embd", "heads": "n_head", "kv_heads": "n_head", "layers": "n_layer",
              "ffn_hidden": "n_inner", "vocab": "vocab_size", "seq": "n_positions", "max_positions": "n_positions",
              "dropout": "resid_pdrop", "norm_eps": "layer_norm_epsilon"}
_LLAMA_KEYS = {"hidden": "hidden_size", "heads": "num_attention_heads", "kv_heads": "num_key_value_heads",
               "layers": "num_hidden_layers", "ffn_hidden": "intermediate_size", "vocab": "vocab_size",
               "seq": "max_position_embeddings", "max_positions": "max_position_embeddings",
               "norm_eps": "rms_norm_eps"}
CONTEXT_KEYS = {"gpt": "n_positions", "llama": "max_position_embeddings"}
"""ModelConfig.arch -> the config.json key whose value becomes s when no --seq is given (the context length)."""
_DTYPES = {"float32": "float32", "float16": "float16", "bfloat16": "bfloat16", "float64": "float64"}


def read_hf_config(path: str | Path) -> ModelConfig:
    """Parse ``path`` (a config.json) into a validated ModelConfig.

    Raises UsageError("model") if the file is missing, UsageError("config.json") if it is not a JSON object,
    UsageError("model_type") for an unsupported model type, UsageError(<key>) for a missing or ill-typed key
    or an unsupported feature (e.g. head_dim ≠ hidden_size / num_attention_heads, hidden_act ≠ silu).
    """
    path = Path(path)
    if not path.is_file():
        raise UsageError("model", f"no such config.json: {path}")
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise UsageError("config.json", f"{path} is not valid JSON ({exc})") from None
    if not isinstance(raw, dict):
        raise UsageError("config.json", f"{path} must hold a JSON object")
    model_type = raw.get("model_type")
    if model_type not in SUPPORTED:
        raise UsageError("model_type", f"unsupported {model_type!r} (supported: {', '.join(SUPPORTED)})")
    name = str(raw.get("_name_or_path") or (path.parent.name if path.name == "config.json" else path.stem))
    fields = _gpt2(raw) if model_type == "gpt2" else _llama_like(raw, model_type)
    try:
        return validate(ModelConfig(name=name, source=str(path), micro_batch=1, dtype=_dtype(raw), **fields))
    except UsageError as exc:  # name the config.json key, not the ModelConfig field
        keys = _GPT2_KEYS if model_type == "gpt2" else _LLAMA_KEYS
        raise UsageError(keys.get(exc.field, exc.field), str(exc)[len(exc.field) + 2:]) from None


def _get(raw: dict, key: str, kind=int, default=None, required: bool = True):
    """raw[key] checked to be of ``kind`` (int / float / bool / str); default when absent and not required."""
    if key not in raw or raw[key] is None:
        if required and default is None:
            raise UsageError(key, "missing in config.json")
        return default
    value = raw[key]
    ok = (isinstance(value, bool) if kind is bool else
          isinstance(value, (int, float)) and not isinstance(value, bool) if kind is float else
          isinstance(value, kind) and not isinstance(value, bool))
    if not ok:
        raise UsageError(key, f"must be {kind.__name__}, got {value!r}")
    if kind is int and value < 1:
        raise UsageError(key, f"must be ≥ 1, got {value}")
    return value


def _dtype(raw: dict) -> str:
    """``torch_dtype`` (or newer ``dtype``) as a ModelConfig dtype; float32 if absent."""
    key = "torch_dtype" if "torch_dtype" in raw else "dtype"
    value = raw.get(key) or "float32"
    if value not in _DTYPES:
        raise UsageError(key, f"unsupported dtype {value!r} (supported: {', '.join(_DTYPES)})")
    return _DTYPES[value]


def _gpt2(raw: dict) -> dict:
    """GPT2Config keys -> ModelConfig fields (arch "gpt", learned positions, tied embeddings)."""
    h = _get(raw, "n_embd")
    positions = _get(raw, "n_positions", default=_get(raw, "n_ctx", required=False) or 1024)
    act = _get(raw, "activation_function", str, default="gelu_new")
    if act not in _GPT2_ACT:
        raise UsageError("activation_function", f"unsupported {act!r} (supported: {', '.join(_GPT2_ACT)})")
    heads = _get(raw, "n_head")
    return dict(arch="gpt", hidden=h, heads=heads, kv_heads=heads, layers=_get(raw, "n_layer"),
                ffn_hidden=_get(raw, "n_inner", default=4 * h), vocab=_get(raw, "vocab_size"),
                seq=positions, max_positions=positions,
                dropout=float(_get(raw, "resid_pdrop", float, default=0.1)),
                norm_eps=float(_get(raw, "layer_norm_epsilon", float, default=1e-5)),
                activation=_GPT2_ACT[act], attention="math", bias=True, tie_embeddings=True)


def _llama_like(raw: dict, model_type: str) -> dict:
    """LlamaConfig / MistralConfig / Qwen2Config keys -> ModelConfig fields (arch "llama")."""
    h, heads = _get(raw, "hidden_size"), _get(raw, "num_attention_heads")
    if raw.get("head_dim") is not None and h % heads == 0 and raw["head_dim"] != h // heads:
        raise UsageError("head_dim", f"{raw['head_dim']} ≠ hidden_size / num_attention_heads = {h // heads} "
                                     "is not supported")
    act = _get(raw, "hidden_act", str, default="silu")
    if act != "silu":
        raise UsageError("hidden_act", f"only silu (SwiGLU) is supported, got {act!r}")
    if raw.get("mlp_bias"):
        raise UsageError("mlp_bias", "MLP biases are not supported")
    if _get(raw, "attention_dropout", float, default=0.0):
        raise UsageError("attention_dropout", "the Llama-style layer has no dropout; must be 0")
    positions = _get(raw, "max_position_embeddings", default=2048)
    window = _get(raw, "sliding_window", required=False)
    if model_type == "qwen2" and not raw.get("use_sliding_window", False):
        window = None
    rope_scaling = raw.get("rope_scaling")
    if rope_scaling is not None and not isinstance(rope_scaling, dict):
        raise UsageError("rope_scaling", f"must be an object or null, got {rope_scaling!r}")
    return dict(arch="llama", hidden=h, heads=heads, kv_heads=_get(raw, "num_key_value_heads", default=heads),
                layers=_get(raw, "num_hidden_layers"), ffn_hidden=_get(raw, "intermediate_size"),
                vocab=_get(raw, "vocab_size"), seq=positions, max_positions=positions,
                dropout=0.0, norm_eps=float(_get(raw, "rms_norm_eps", float, default=1e-6)),
                rope_theta=float(_get(raw, "rope_theta", float, default=10000.0)),
                activation="silu", attention="sdpa", bias=False,
                qkv_bias=model_type == "qwen2" or bool(raw.get("attention_bias", False)),  # Qwen2: always
                tie_embeddings=bool(_get(raw, "tie_word_embeddings", bool, default=False, required=False)),
                sliding_window=window,
                rope_scaling=None if rope_scaling is None else str(rope_scaling.get("rope_type",
                                                                   rope_scaling.get("type", "unknown"))))
