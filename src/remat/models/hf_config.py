"""Read a HuggingFace-style ``config.json`` (model_type gpt2, llama, mistral, qwen2, mixtral) into a ModelConfig.

The key names are those of transformers' GPT2Config, LlamaConfig, MistralConfig, Qwen2Config and MixtralConfig
(5.x, and the older names 4.x wrote: ``torch_dtype``, ``rope_theta``, ``rope_scaling``, ``n_ctx``). The training shape
(seq, micro_batch) is not part of a model config: seq defaults to the context length (n_positions /
max_position_embeddings), micro_batch to 1; override them with ``from_name(path, seq=...)``.

Every key is classified per model_type, as data (``READ``, ``REJECTED``, ``IGNORED``):

* READ — honoured: it sets a ModelConfig field, so it changes what is built and planned (a READ key may
  still refuse values the runtime has no layer for, e.g. activation_function "relu"; its entry says so);
* REJECTED — accepted only at the value transformers defaults to (or the stated condition); any other value
  describes a model remat's runtime cannot build (e.g. ``scale_attn_by_inverse_layer_idx: true``,
  ``head_dim`` ≠ hidden_size / num_attention_heads): ``UsageError(<key>)``, one line, exit 2;
* IGNORED — provably changes no shape, parameter count, attention pattern or dtype of the causal LM that
  ``AutoModelForCausalLM.from_config`` builds (tokenizer ids, generation defaults, ``architectures``,
  ``initializer_range``, ``use_cache``, the GPT-2 ``summary_*`` head of the double-heads model, …).

A key in none of the three (a newer transformers', or another model's) is not fatal: ``read_hf_config`` names
such keys in one warning line on stderr and reads the rest. tests/test_hf_config_fields.py pins the tables and
checks, per model_type, that the runtime model has exactly the parameters of transformers' own.
Every malformed or unsupported entry raises ``UsageError(<key>, ...)`` naming the config.json key.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Callable

from remat.errors import UsageError
from remat.models.config import ModelConfig, validate

SUPPORTED = ("gpt2", "llama", "mistral", "qwen2", "mixtral")
_GPT2_ACT = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu": "gelu"}
_GPT2_KEYS = {"hidden": "n_embd", "heads": "n_head", "kv_heads": "n_head", "layers": "n_layer",
              "ffn_hidden": "n_inner", "vocab": "vocab_size", "seq": "n_positions", "max_positions": "n_positions",
              "dropout": "resid_pdrop", "norm_eps": "layer_norm_epsilon", "tie_embeddings": "tie_word_embeddings"}
_LLAMA_KEYS = {"hidden": "hidden_size", "heads": "num_attention_heads", "kv_heads": "num_key_value_heads",
               "layers": "num_hidden_layers", "ffn_hidden": "intermediate_size", "vocab": "vocab_size",
               "seq": "max_position_embeddings", "max_positions": "max_position_embeddings",
               "norm_eps": "rms_norm_eps", "rope_theta": "rope_theta", "sliding_window": "sliding_window",
               "tie_embeddings": "tie_word_embeddings", "experts": "num_local_experts",
               "top_k": "num_experts_per_tok"}
CONTEXT_KEYS = {"gpt": "n_positions", "llama": "max_position_embeddings"}
"""ModelConfig.arch -> the config.json key whose value becomes s when no --seq is given (the context length)."""
_DTYPES = {"float32": "float32", "float16": "float16", "bfloat16": "bfloat16", "float64": "float64"}

# --- the classification (transformers 5.x GPT2Config / LlamaConfig / MistralConfig / Qwen2Config) -----------

Rule = tuple[str, Callable[[object, dict], bool]]
"""A REJECTED key's rule: (what is refused, in words; accepts(value, raw config) -> True if the value is fine)."""

_COMMON_READ = {
    "model_type": "the layer: arch gpt (gpt2) or llama (llama, mistral, qwen2; mixtral with MoE MLPs)",
    "vocab_size": "vocab (v)",
    "tie_word_embeddings": "tie_embeddings (false: the LM head has its own v·h weight)",
    "dtype": "dtype of parameters and activations (null: float32)",
    "torch_dtype": "dtype (transformers 4.x name of dtype)",
}
_COMMON_REJECTED: dict[str, Rule] = {
    "quantization_config": ("present (quantized weights: other parameter dtypes and shapes)",
                            lambda v, raw: v is None),
    "pruned_heads": ("non-empty (pruned heads change the attention shapes)", lambda v, raw: not v),
}
_COMMON_IGNORED = frozenset({
    # PreTrainedConfig (5.x): bookkeeping, output switches, classification-head labels
    "_name_or_path", "architectures", "transformers_version", "output_hidden_states", "output_attentions",
    "return_dict", "id2label", "label2id", "problem_type", "is_encoder_decoder", "chunk_size_feed_forward",
    # 4.x PreTrainedConfig keys a decoder-only causal LM never reads (chunk_size_feed_forward: no GPT-2/Llama
    # module calls apply_chunking_to_forward; attn_implementation: the kernel, not the math — remat's layers
    # choose their own, see ModelConfig.attention)
    "tokenizer_class", "prefix", "finetuning_task", "task_specific_params", "torchscript", "use_bfloat16",
    "tf_legacy_loss", "is_decoder", "tie_encoder_decoder", "cross_attention_hidden_size", "sep_token_id",
    "decoder_start_token_id", "attn_implementation", "_attn_implementation", "_attn_implementation_autoset",
    "_commit_hash", "initializer_range",
    # token ids and generation defaults (GenerationConfig's, which 4.x kept in config.json)
    "bos_token_id", "eos_token_id", "pad_token_id", "use_cache", "max_length", "min_length", "do_sample",
    "early_stopping", "num_beams", "num_beam_groups", "diversity_penalty", "temperature", "top_k", "top_p",
    "typical_p", "repetition_penalty", "encoder_repetition_penalty", "length_penalty", "no_repeat_ngram_size",
    "encoder_no_repeat_ngram_size", "bad_words_ids", "num_return_sequences", "output_scores",
    "return_dict_in_generate", "forced_bos_token_id", "forced_eos_token_id", "remove_invalid_values",
    "exponential_decay_length_penalty", "suppress_tokens", "begin_suppress_tokens", "epsilon_cutoff",
    "eta_cutoff",
})


def _false(v, raw) -> bool:
    return v is None or v is False


def _zero(v, raw) -> bool:
    return v is None or (isinstance(v, (int, float)) and not isinstance(v, bool) and v == 0)


def _head_dim_ok(v, raw) -> bool:
    h, a = raw.get("hidden_size"), raw.get("num_attention_heads")
    return v is None or not (isinstance(h, int) and isinstance(a, int) and a > 0) or v == h // a


_LLAMA_LIKE_READ = {
    "hidden_size": "hidden (h)",
    "num_attention_heads": "heads (a)",
    "num_key_value_heads": "kv_heads (GQA groups; null: a; absent: transformers' default)",
    "num_hidden_layers": "layers (L)",
    "intermediate_size": "ffn_hidden (the SwiGLU width)",
    "max_position_embeddings": "max_positions (the RoPE table) and the default s",
    "rms_norm_eps": "norm_eps",
    "rope_parameters": "rope_theta (its rope_theta); rope_type recorded as rope_scaling (values only: no shape, "
                       "byte or FLOP)",
    "rope_scaling": "4.x name of rope_parameters (transformers takes it first): the same",
    "rope_theta": "rope_theta (4.x key; rope_parameters' own rope_theta wins)",
    **_COMMON_READ,
}
_LLAMA_LIKE_REJECTED: dict[str, Rule] = {
    "hidden_act": ("other than silu (the MLP is SwiGLU with SiLU)", lambda v, raw: v in (None, "silu")),
    "head_dim": ("≠ hidden_size / num_attention_heads (other q/k/v widths)", _head_dim_ok),
    "attention_dropout": ("≠ 0 (the Llama-style layer has no dropout)", _zero),
    **_COMMON_REJECTED,
}

READ: dict[str, dict[str, str]] = {
    "gpt2": {
        "n_embd": "hidden (h)",
        "n_head": "heads (a) and kv_heads",
        "n_layer": "layers (L)",
        "n_inner": "ffn_hidden (null: 4h)",
        "n_positions": "max_positions (the learned position table) and the default s",
        "activation_function": "activation: gelu_new / gelu_pytorch_tanh -> gelu_tanh, gelu -> gelu; others "
                               "refused",
        "resid_pdrop": "dropout (every dropout of the layer; its masks are saved bytes)",
        "attn_pdrop": "dropout: must equal resid_pdrop (the layer has one dropout probability)",
        "embd_pdrop": "dropout: must equal resid_pdrop",
        "layer_norm_epsilon": "norm_eps",
        **_COMMON_READ,
    },
    "llama": dict(_LLAMA_LIKE_READ),
    "mistral": {**_LLAMA_LIKE_READ, "sliding_window": "sliding_window of every layer (null: full causal)"},
    "qwen2": {**_LLAMA_LIKE_READ,
              "use_sliding_window": "whether sliding_window applies (false: full causal)",
              "sliding_window": "sliding_window of the sliding layers",
              "max_window_layers": "layers from this index on slide; only all-or-none is accepted",
              "layer_types": "per-layer full/sliding attention; only all-or-none sliding is accepted"},
    "mixtral": {**_LLAMA_LIKE_READ, "sliding_window": "sliding_window of every layer (null: full causal)",
                "intermediate_size": "ffn_hidden (each expert's SwiGLU width)",
                "num_local_experts": "experts (E)", "num_experts_per_tok": "top_k (k)"},
}
"""model_type -> {key: the ModelConfig field it sets, and the values it refuses}."""

REJECTED: dict[str, dict[str, Rule]] = {
    "gpt2": {
        "scale_attn_by_inverse_layer_idx": ("true (scores scaled by 1/(layer index + 1))", _false),
        "reorder_and_upcast_attn": ("true (attention scores upcast to fp32: other saved dtypes)", _false),
        "add_cross_attention": ("true (adds cross-attention blocks)", _false),
        "scale_attn_weights": ("false (QKᵀ not scaled by 1/√d)", lambda v, raw: v is None or v is True),
        "n_ctx": ("≠ n_positions (transformers builds n_positions positions; n_ctx is 4.x's unused copy)",
                  lambda v, raw: v is None or v == (raw.get("n_positions") or 1024)),
        **_COMMON_REJECTED,
    },
    "llama": {**_LLAMA_LIKE_REJECTED,
              "attention_bias": ("true (biases on q, k, v and o; remat's layer has q/k/v biases for qwen2 only)",
                                 _false),
              "mlp_bias": ("true (biases on the SwiGLU projections)", _false)},
    "mistral": dict(_LLAMA_LIKE_REJECTED),
    "qwen2": dict(_LLAMA_LIKE_REJECTED),
    "mixtral": {**_LLAMA_LIKE_REJECTED,
                "router_jitter_noise": ("≠ 0 (multiplies the MoE input by noise in training: one more saved "
                                        "tensor)", _zero),
                "output_router_logits": ("true (the auxiliary load-balancing loss keeps every layer's router "
                                         "logits)", _false)},
}
"""model_type -> {key: (the refused values, in words; accepts(value, raw))}."""

IGNORED: dict[str, frozenset[str]] = {
    "gpt2": _COMMON_IGNORED | {"summary_type", "summary_use_proj", "summary_activation",
                               "summary_proj_to_labels", "summary_first_dropout"},  # GPT2DoubleHeadsModel's head
    "llama": _COMMON_IGNORED | {"pretraining_tp"},  # 4.x: a numerically equal split of the matmuls; 5.x: unused
    "mistral": _COMMON_IGNORED,
    "qwen2": _COMMON_IGNORED,
    "mixtral": _COMMON_IGNORED | {"router_aux_loss_coef"},  # read only with output_router_logits (REJECTED)
}
"""model_type -> keys that change no shape, parameter count, attention pattern or dtype."""

for _t in SUPPORTED:  # each key in one class only
    assert not (set(READ[_t]) & set(REJECTED[_t]) or set(READ[_t]) & IGNORED[_t] or set(REJECTED[_t]) & IGNORED[_t])


def unknown_keys(raw: dict, model_type: str) -> list[str]:
    """Keys of ``raw`` (a parsed config.json of ``model_type``) in none of READ, REJECTED, IGNORED, sorted."""
    known = set(READ[model_type]) | set(REJECTED[model_type]) | IGNORED[model_type]
    return sorted(k for k in raw if k not in known)


def check_rejected(raw: dict, model_type: str) -> None:
    """UsageError(<key>) for the first REJECTED key (in table order) whose value the runtime cannot model."""
    for key, (refused, accepts) in REJECTED[model_type].items():
        if key in raw and not accepts(raw[key], raw):
            shown = repr(raw[key])
            shown = shown if len(shown) <= 60 else shown[:57] + "..."
            raise UsageError(key, f"{shown} is not supported: remat's {model_type} runtime cannot build a model "
                                  f"with {key} {refused}; plan transformers' own model with --hf")


def read_json_object(path: str | Path) -> dict:
    """The JSON object in ``path`` (a config.json). Raises UsageError("model") if the file is missing,
    UsageError("config.json") if it is not valid JSON or not an object."""
    path = Path(path)
    if not path.is_file():
        raise UsageError("model", f"no such config.json: {path}")
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise UsageError("config.json", f"{path} is not valid JSON ({exc})") from None
    if not isinstance(raw, dict):
        raise UsageError("config.json", f"{path} must hold a JSON object")
    return raw


def read_hf_config(path: str | Path, warn: bool = True) -> ModelConfig:
    """Parse ``path`` (a config.json) into a validated ModelConfig.

    Raises UsageError("model") if the file is missing, UsageError("config.json") if it is not a JSON object,
    UsageError("model_type") for an unsupported model type, UsageError(<key>) for a missing or ill-typed key,
    a REJECTED key with a value the runtime cannot model, or a READ key's refused value (e.g. head_dim ≠
    hidden_size / num_attention_heads, hidden_act ≠ silu, mixed sliding/full layers).
    With ``warn``, keys in none of READ / REJECTED / IGNORED are named in one line on stderr (not fatal).
    """
    path = Path(path)
    raw = read_json_object(path)
    model_type = raw.get("model_type")
    if model_type is None:
        raise UsageError("model_type", f"missing from {path} (supported: {', '.join(SUPPORTED)})")
    if model_type not in SUPPORTED:
        raise UsageError("model_type", f"unsupported {model_type!r} (supported: {', '.join(SUPPORTED)})")
    check_rejected(raw, model_type)
    name = str(raw.get("_name_or_path") or (path.parent.name if path.name == "config.json" else path.stem))
    fields = _gpt2(raw) if model_type == "gpt2" else _llama_like(raw, model_type)
    try:
        cfg = validate(ModelConfig(name=name, source=str(path), micro_batch=1, dtype=_dtype(raw), **fields))
    except UsageError as exc:  # name the config.json key, not the ModelConfig field
        keys = _GPT2_KEYS if model_type == "gpt2" else _LLAMA_KEYS
        raise UsageError(keys.get(exc.field, exc.field), str(exc)[len(exc.field) + 2:]) from None
    unknown = unknown_keys(raw, model_type)
    if warn and unknown:
        print(f"remat: warning: {path}: not read (unknown to remat's {model_type} reader; check they change no "
              f"shapes): {', '.join(unknown)}", file=sys.stderr)
    return cfg


def config_value(raw: dict, key: str, kind=int, default=None, required: bool = True):
    """raw[key] checked to be of ``kind`` (int / float / bool / str; an int ≥ 1); default when absent and not
    required. UsageError(key) otherwise."""
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
    """``dtype`` (or 4.x ``torch_dtype``) as a ModelConfig dtype; float32 if absent."""
    key = "dtype" if raw.get("dtype") is not None else "torch_dtype"
    value = raw.get(key) or "float32"
    if value not in _DTYPES:
        raise UsageError(key, f"unsupported dtype {value!r} (supported: {', '.join(_DTYPES)})")
    return _DTYPES[value]


def _gpt2(raw: dict) -> dict:
    """GPT2Config keys -> ModelConfig fields (arch "gpt", learned positions, biases; defaults: GPT2Config's)."""
    h = config_value(raw, "n_embd")
    positions = config_value(raw, "n_positions", default=1024)
    act = config_value(raw, "activation_function", str, default="gelu_new")
    if act not in _GPT2_ACT:
        raise UsageError("activation_function", f"unsupported {act!r} (supported: {', '.join(_GPT2_ACT)})")
    dropout = float(config_value(raw, "resid_pdrop", float, default=0.1))
    for key in ("attn_pdrop", "embd_pdrop"):
        other = float(config_value(raw, key, float, default=0.1))
        if other != dropout:
            raise UsageError(key, f"{other} ≠ resid_pdrop {dropout}: remat's GPT layer has one dropout probability "
                                  "for the embedding, attention and residual dropouts; make them equal")
    heads = config_value(raw, "n_head")
    return dict(arch="gpt", hidden=h, heads=heads, kv_heads=heads, layers=config_value(raw, "n_layer"),
                ffn_hidden=config_value(raw, "n_inner", default=4 * h), vocab=config_value(raw, "vocab_size"),
                seq=positions, max_positions=positions, dropout=dropout,
                norm_eps=float(config_value(raw, "layer_norm_epsilon", float, default=1e-5)),
                activation=_GPT2_ACT[act], attention="math", bias=True,
                tie_embeddings=config_value(raw, "tie_word_embeddings", bool, default=True, required=False))


# transformers' defaults where the model types differ (absent key; null means "= heads" for kv heads)
_KV_HEADS_DEFAULT = {"llama": None, "mistral": 8, "qwen2": 32, "mixtral": 8}
_NORM_EPS_DEFAULT = {"mixtral": 1e-5}      # the config classes' defaults where they are not 1e-6 / 10000
_THETA_DEFAULT = {"mixtral": 1e6}
_POSITIONS_DEFAULT = {"llama": 2048, "mistral": 4096 * 32, "qwen2": 32768, "mixtral": 4096 * 32}


def _llama_like(raw: dict, model_type: str) -> dict:
    """LlamaConfig / MistralConfig / Qwen2Config / MixtralConfig keys -> ModelConfig fields (arch "llama")."""
    h, heads = config_value(raw, "hidden_size"), config_value(raw, "num_attention_heads")
    layers = config_value(raw, "num_hidden_layers")
    kv = raw["num_key_value_heads"] if "num_key_value_heads" in raw else _KV_HEADS_DEFAULT[model_type]
    kv = heads if kv is None else config_value({"num_key_value_heads": kv}, "num_key_value_heads")
    positions = config_value(raw, "max_position_embeddings", default=_POSITIONS_DEFAULT[model_type])
    window = _window(raw, model_type, layers)
    return dict(arch="llama", hidden=h, heads=heads, kv_heads=kv, layers=layers,
                ffn_hidden=config_value(raw, "intermediate_size"), vocab=config_value(raw, "vocab_size"),
                seq=positions, max_positions=positions, dropout=0.0,
                norm_eps=float(config_value(raw, "rms_norm_eps", float,
                                            default=_NORM_EPS_DEFAULT.get(model_type, 1e-6))),
                rope_theta=_rope_theta(raw, _THETA_DEFAULT.get(model_type, 10000.0)),
                activation="silu", attention="sdpa", bias=False,
                qkv_bias=model_type == "qwen2",  # Qwen2: always (q/k/v only); Llama's attention_bias is REJECTED
                tie_embeddings=config_value(raw, "tie_word_embeddings", bool, default=False, required=False),
                sliding_window=window, rope_scaling=_rope_type(raw), **_experts(raw, model_type))


def _experts(raw: dict, model_type: str) -> dict:
    """Mixtral's MoE fields (MixtralConfig's defaults: 8 experts, top 2); none for the dense model types."""
    if model_type != "mixtral":
        return {}
    return {"experts": config_value(raw, "num_local_experts", default=8),
            "top_k": config_value(raw, "num_experts_per_tok", default=2)}


def _rope_type(raw: dict) -> str | None:
    """The RoPE scaling type (llama3, linear, yarn, …) or None for default RoPE. Recorded, not implemented:
    it changes the rotary tables' values only — no shape, byte, FLOP or attention pattern — so the plan is the
    same (remat's layer runs default RoPE; ``remat.models.llama.rope_tables``)."""
    key = "rope_scaling" if raw.get("rope_scaling") else "rope_parameters"
    params = raw.get(key) or {}
    rope_type = params.get("rope_type", params.get("type", "default")) if isinstance(params, dict) else None
    return None if rope_type in (None, "default") else str(rope_type)


def _rope_theta(raw: dict, default: float) -> float:
    """RoPE θ as transformers 5 standardizes it: ``rope_scaling or rope_parameters`` (a flat dict) holds
    rope_type and rope_theta; the 4.x top-level ``rope_theta`` fills in; the config class's default if none
    (10000; Mixtral 10⁶). The rope_type is recorded by ``_rope_type``."""
    key = "rope_scaling" if raw.get("rope_scaling") else "rope_parameters"
    params = raw.get(key) or {}
    if not isinstance(params, dict):
        raise UsageError(key, f"must be an object or null, got {params!r}")
    if any(isinstance(v, dict) for v in params.values()):
        raise UsageError(key, "per-layer-type RoPE parameters are not supported")
    if "rope_theta" in params:
        return float(config_value(params, "rope_theta", float))
    return float(config_value(raw, "rope_theta", float, default=default))


def _window(raw: dict, model_type: str, layers: int) -> int | None:
    """The sliding window of every layer (None: full causal attention), as transformers builds it:
    Llama none; Mistral ``sliding_window`` on every layer (absent: 4096, MistralConfig's default); Qwen2
    ``sliding_window`` (absent: 4096) if ``use_sliding_window``, on the layers ``layer_types`` marks
    "sliding_attention" (absent: those from ``max_window_layers`` on). remat's layer has one pattern for all
    layers, so a mix of full and sliding layers raises UsageError(layer_types / max_window_layers)."""
    if model_type == "llama":
        return None
    if model_type == "mixtral":   # absent or null: none (MixtralConfig's default)
        return config_value(raw, "sliding_window", default=None, required=False)
    # absent: 4096 (the configs' default); null: none
    window = config_value({"sliding_window": raw.get("sliding_window", 4096)}, "sliding_window", required=False)
    if model_type == "mistral":
        return window
    if not config_value(raw, "use_sliding_window", bool, default=False, required=False):
        window = None
    types = raw.get("layer_types")
    if types is None:
        first = raw.get("max_window_layers", 28)
        if isinstance(first, bool) or not isinstance(first, int) or first < 0:
            raise UsageError("max_window_layers", f"must be an integer ≥ 0, got {first!r}")
        if window is None or first >= layers:
            return None
        if first > 0:
            raise UsageError("max_window_layers", f"{first}: layers {first}..{layers - 1} of {layers} slide and the "
                                                  "others do not; remat's layer has one attention pattern for all "
                                                  "layers (use max_window_layers 0 or ≥ num_hidden_layers)")
        return window
    kinds = ("full_attention", "sliding_attention")
    if not isinstance(types, list) or len(types) != layers or any(t not in kinds for t in types):
        raise UsageError("layer_types", f"must be a list of {layers} entries from {', '.join(kinds)}")
    sliding = {t == "sliding_attention" for t in types}
    if sliding == {False}:
        return None
    if window is None:
        raise UsageError("layer_types", "sliding_attention layers need use_sliding_window true and a sliding_window")
    if sliding == {True, False}:
        raise UsageError("layer_types", "mixes full_attention and sliding_attention layers; remat's layer has one "
                                        "attention pattern for all layers")
    return window
