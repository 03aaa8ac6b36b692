"""HuggingFace transformers models for remat.auto: built from a config with random weights, nothing downloaded.

    built = build("path/to/config.json", device="fake", seq=4096)      # or a model folder, or a preset name
    with built.mode:                                                     # FakeTensorMode (no memory) or nullcontext
        result = auto.plan(built.model, (), built.kwargs, budget="80GiB")

transformers is an optional extra (``pip install -e '.[hf]'``); without it ``build`` raises UsageError naming the
extra. The config is read by transformers' own classes (``AutoConfig.for_model``), so every field of every
model_type it knows is understood the way the model's authors meant it; the model is
``AutoModelForCausalLM.from_config`` in the config's dtype (``torch_dtype`` / ``dtype``; float32 when absent), in
training mode (dropout on, as in a training step) with ``use_cache`` off. Example inputs: ``input_ids`` of shape [b, s]
and ``labels`` equal to them, so the output carries the causal-LM loss.

device "fake": built under FakeTensorMode (any size: an 8B model takes seconds, no memory); "cpu": real
tensors, for the small instances that check a plan by measurement.
"""

from __future__ import annotations

import contextlib
import math
import re
import sys
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils.flop_counter import shape_wrapper

from remat.errors import UsageError
from remat.formulas.op_flops import FORMULAS, grouped_mm_flops
from remat.models.hf_config import config_value, read_json_object
from remat.models.presets import from_name

EXTRA = "pip install -e '.[hf]'"
DEVICES = ("fake", "cpu")


@dataclass
class Built:
    """A built model and what to run it with. mode: the FakeTensorMode it lives in (device "fake") or a null
    context; kwargs: example inputs (input_ids, labels: int64 [b, s]); config: its transformers config;
    source: what it was built from; seq, micro_batch: s and b of the example inputs."""

    model: object
    kwargs: dict
    config: object
    source: str
    seq: int
    micro_batch: int
    mode: object = field(default_factory=contextlib.nullcontext)


def hf_checkpointing(model) -> bool:
    """True when transformers' own gradient checkpointing is on for ``model`` (``is_activation_checkpointing``
    in transformers 5, ``is_gradient_checkpointing`` before; False for other modules)."""
    for name in ("is_activation_checkpointing", "is_gradient_checkpointing"):
        if name in dir(type(model)):
            return bool(getattr(model, name))
    return False


CACHE_OFF = ("use_cache off in training, as HuggingFace gradient checkpointing does: a recomputed block would "
             "append its keys and values to the KV cache again, and the cache would keep on the device what offload "
             "moves")


def cache_off_in_training(model, warn: bool = True):
    """For a model with ``config.use_cache`` (HuggingFace): a forward pre-hook that passes ``use_cache=False``
    to every training call with grad on, warning once (``CACHE_OFF``); returns its handle, or None for other
    models. remat.auto.plan measures (``warn`` False: its plan says so) and remat.auto.apply runs with the same
    hook, so they agree."""
    if not hasattr(getattr(model, "config", None), "use_cache"):
        return None
    return model.register_forward_pre_hook(_CacheOff(warn), with_kwargs=True)


class _CacheOff:
    """The pre-hook of ``cache_off_in_training`` (a class, so a model holding it still pickles)."""

    def __init__(self, warn: bool):
        self.warned = not warn

    def __call__(self, module, args, kwargs):
        if not (module.training and torch.is_grad_enabled()):
            return None
        if not kwargs.get("use_cache", module.config.use_cache):
            return None
        if not self.warned:
            self.warned = True
            warnings.warn(f"remat.auto: {CACHE_OFF}", stacklevel=3)
        return args, {**kwargs, "use_cache": False}


def set_hf_checkpointing(model, on: bool, use_reentrant: bool = False) -> None:
    """Switch transformers' own gradient checkpointing (every decoder layer full) on or off:
    ``activation_checkpointing_enable/_disable`` (transformers 5), else the 4.x ``gradient_checkpointing_*``."""
    if hasattr(model, "activation_checkpointing_enable"):
        if on:
            model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": use_reentrant})
        else:
            model.activation_checkpointing_disable()
    elif on:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": use_reentrant})
    else:
        model.gradient_checkpointing_disable()


def available() -> bool:
    """True when transformers can be imported."""
    try:
        import transformers  # noqa: F401  (the probe: transformers is an optional extra)
    except ImportError:
        return False
    return True


def read_config(source: str | Path):
    """A transformers config from a config.json path or a folder holding one (transformers' AutoConfig).

    Raises UsageError("model") when the file is missing or transformers is not installed, UsageError
    ("config.json") when it is not a JSON object or its sizes disagree, UsageError("model_type") for a model_type
    transformers does not know, UsageError(<field>) for a field of the wrong type."""
    if not available():
        raise UsageError("model", f"reading a HuggingFace config needs transformers: {EXTRA}")
    from transformers import AutoConfig  # optional extra, checked by available() above
    path = Path(source)
    path = path / "config.json" if path.is_dir() else path
    raw = read_json_object(path)
    if not isinstance(raw.get("model_type"), str):
        raise UsageError("model_type", f"{path} has no model_type" if "model_type" not in raw else
                         f"{path}: a transformers model type's name, not {raw['model_type']!r}")
    model_type = raw.pop("model_type")
    if "torch_dtype" in raw and "dtype" not in raw:     # transformers 5's name for it (the old one logs a warning)
        raw["dtype"] = raw.pop("torch_dtype")
    dtype = raw.get("dtype")
    if isinstance(dtype, str) and dtype != "auto" and not isinstance(getattr(torch, dtype, None), torch.dtype):
        raise UsageError("torch_dtype", f"{path}: {dtype!r} is not a torch dtype")
    _check_values(raw)
    try:
        config = AutoConfig.for_model(model_type, **raw)
    except (ValueError, KeyError):
        import transformers  # optional extra (EXTRA), present: checked above
        raise UsageError("model_type", f"transformers {transformers.__version__} does not know {model_type!r}") \
            from None
    except _strict_errors() as exc:     # transformers 5 checks each field's type and the sizes' consistency
        cause = exc.__cause__ or exc
        named = re.search(r"[Ff]ield '(\w+)'", str(exc))
        raise UsageError(named.group(1) if named else "config.json", f"{path}: {cause}") from None
    config.name_or_path = str(raw.get("_name_or_path") or (path.parent.name if path.name == "config.json"
                                                           else path.stem))
    _check_sizes(config, raw)
    return config


_SIZES = ("hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size")
"""Sizes a config.json must give (under its family's names: gpt2's n_embd …): a transformers default for a
missing one is a different model."""


def _check_sizes(config, raw: dict) -> None:
    """UsageError naming the config.json field: a size of ``_SIZES`` missing or not a positive integer, key/value
    heads that do not divide the heads, an activation transformers does not have — what it accepts and the model
    would fail on later."""
    from transformers.activations import ACT2FN  # optional extra, present: read_config checked it
    names = dict(getattr(config, "attribute_map", {}))    # hidden_size -> n_embd (gpt2)
    for size in (s for s in _SIZES if hasattr(config, s)):
        config_value(raw, size if size in raw else names.get(size, size))   # as remat's own reader checks it
    heads, kv = getattr(config, "num_attention_heads", None), getattr(config, "num_key_value_heads", None)
    hidden = getattr(config, "hidden_size", None)
    if heads and hidden and hidden % heads and not getattr(config, "head_dim", None):
        raise UsageError(names.get("num_attention_heads", "num_attention_heads"),
                         f"{heads} does not divide {names.get('hidden_size', 'hidden_size')} = {hidden}")
    if heads and kv and (not isinstance(kv, int) or kv <= 0 or heads % kv):
        raise UsageError("num_key_value_heads", f"{kv!r} does not divide num_attention_heads = {heads}")
    act = getattr(config, "hidden_act", None)
    if isinstance(act, str) and act not in ACT2FN:
        raise UsageError("hidden_act", f"{act!r} is not an activation transformers knows")


_EPSILONS = ("rms_norm_eps", "layer_norm_eps", "layer_norm_epsilon")
_POSITIONS = ("max_position_embeddings", "n_positions")
_ROPE = ("rope_scaling", "rope_parameters")


def _check_values(raw: dict) -> None:
    """UsageError naming the config.json field transformers takes and the model fails on or computes NaN from: a
    context length not a positive integer, a normalisation epsilon not a finite number > 0, a RoPE type
    transformers has no initialiser for (a KeyError deep in the model's constructor otherwise)."""
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS  # optional extra, present (read_config)
    for key in (k for k in _POSITIONS if k in raw):
        config_value(raw, key)
    for key in (k for k in _EPSILONS if raw.get(k) is not None):
        value = config_value(raw, key, float)
        if not (math.isfinite(value) and value > 0):
            raise UsageError(key, f"must be a finite number > 0, got {value!r}")
    for key in (k for k in _ROPE if raw.get(k) is not None):
        value = raw[key]
        if not isinstance(value, dict):
            raise UsageError(key, f"must be a mapping (rope_type, factor, ...), got {value!r}")
        nested = [v for v in value.values() if isinstance(v, dict)]      # per attention type (Gemma 3)
        for params in ([value] if "rope_type" in value or "type" in value or not nested else nested):
            kind = params.get("rope_type", params.get("type", "default"))
            if kind != "default" and kind not in ROPE_INIT_FUNCTIONS:
                raise UsageError(f"{key}.rope_type", f"{kind!r} is not a RoPE type transformers knows (default, "
                                                     f"{', '.join(ROPE_INIT_FUNCTIONS)})")


def _strict_errors() -> tuple:
    """huggingface_hub's validation errors of a config's fields (transformers 5's strict dataclasses); () with
    an older huggingface_hub, which has none."""
    try:
        from huggingface_hub.errors import StrictDataclassError  # a transformers dependency (the hf extra)
    except ImportError:
        return ()
    return (StrictDataclassError,)


def config_of(source: str | Path):
    """A transformers config for ``source``: a config.json, a model folder, or a remat preset name
    (remat.models.presets; "gpt" presets as GPT2Config, "llama" presets as LlamaConfig)."""
    path = Path(source)
    if path.suffix == ".json" or path.is_dir() or path.exists():
        return read_config(path)
    return preset_config(from_name(str(source)))


def preset_config(cfg):
    """A transformers config with the sizes of a remat ModelConfig (arch "gpt" -> GPT2Config, "llama" ->
    LlamaConfig). Raises UsageError("model") without transformers."""
    if not available():
        raise UsageError("model", f"building a HuggingFace model needs transformers: {EXTRA}")
    from transformers import GPT2Config, LlamaConfig  # optional extra, checked by available() above
    if cfg.arch == "gpt":
        config = GPT2Config(n_embd=cfg.hidden, n_head=cfg.heads, n_layer=cfg.layers, n_inner=cfg.ffn_hidden,
                            vocab_size=cfg.vocab, n_positions=cfg.max_positions, resid_pdrop=cfg.dropout,
                            embd_pdrop=cfg.dropout, attn_pdrop=cfg.dropout, layer_norm_epsilon=cfg.norm_eps,
                            tie_word_embeddings=cfg.tie_embeddings, bos_token_id=None, eos_token_id=None)
        # GPT-2's 50256 lies outside a preset's vocabulary (transformers warns); a preset has no special tokens
    else:
        config = LlamaConfig(hidden_size=cfg.hidden, num_attention_heads=cfg.heads,
                             num_key_value_heads=cfg.kv_heads, num_hidden_layers=cfg.layers,
                             intermediate_size=cfg.ffn_hidden, vocab_size=cfg.vocab,
                             max_position_embeddings=cfg.max_positions, rms_norm_eps=cfg.norm_eps,
                             rope_theta=cfg.rope_theta, tie_word_embeddings=cfg.tie_embeddings,
                             attention_bias=cfg.qkv_bias)
    config.dtype = cfg.dtype
    config.name_or_path = cfg.name
    return config


def context_length(config) -> int:
    """The config's context length (max_position_embeddings, n_positions, …); 2048 when it names none."""
    for key in ("max_position_embeddings", "n_positions", "seq_length", "max_sequence_length"):
        value = getattr(config, key, None)
        if isinstance(value, int) and value > 0:
            return value
    return 2048


def build(source, device: str = "fake", layers: int | None = None, seq: int | None = None,
          micro_batch: int | None = None) -> Built:
    """Build a causal LM from ``source`` (``config_of``, or a transformers config object) with random weights.

    layers: override the number of blocks (num_hidden_layers); seq: s (default the context length);
    micro_batch: b (default 1). Raises UsageError naming the field for bad input; UsageError("model") without
    transformers. Source: transformers AutoModelForCausalLM.from_config."""
    from transformers import AutoModelForCausalLM  # optional extra (EXTRA)

    if device not in DEVICES:
        raise UsageError("--device", f"must be one of {', '.join(DEVICES)}, got {device!r}")
    config = source if hasattr(source, "to_dict") else config_of(source)
    for name, value in (("--layers", layers), ("--seq", seq), ("--micro-batch", micro_batch)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise UsageError(name, f"must be a positive integer, got {value!r}")
    if layers is not None:
        config.num_hidden_layers = layers
    config.use_cache = False            # training: no key/value cache (HF's gradient checkpointing does the same)
    s, b = seq or context_length(config), micro_batch or 1
    dtype = config_dtype(config)
    mode = contextlib.nullcontext()
    if device == "fake":
        mode = FakeTensorMode(allow_non_fake_inputs=True)
    with mode:
        try:
            model = AutoModelForCausalLM.from_config(config, dtype=dtype)
        except ValueError:
            raise UsageError("model_type", f"{config.model_type!r} has no causal-LM class in transformers (an "
                                           "encoder or encoder-decoder): build the model yourself and call "
                                           "remat.auto.plan(model, example_args, example_kwargs, blocks=...)") from None
        model.train()
        ids = torch.randint(0, config.vocab_size, (b, s))
    return Built(model, {"input_ids": ids, "labels": ids}, config, str(getattr(config, "name_or_path", source)),
                 s, b, mode)


def config_dtype(config):
    """The torch dtype a transformers config asks for (``dtype`` / ``torch_dtype``; float32 when absent). Raises
    UsageError("torch_dtype") for one torch does not have."""
    name = "dtype" if hasattr(config, "dtype") else "torch_dtype"   # transformers 5 warns on reading the old name
    value = getattr(config, name, None) or "float32"
    if isinstance(value, str):
        value = getattr(torch, value, None)
    if not isinstance(value, torch.dtype):
        raise UsageError("torch_dtype", f"unsupported dtype {value!r}")
    return value


@contextlib.contextmanager
def unpacked_masks():
    """While planning under FakeTensorMode: transformers' masks as a real unpadded step gets them.

    transformers chooses the attention mask from tensor VALUES (masking_utils: are sequences packed along the
    batch — ``find_packed_sequence_indices`` —, is any token padded); fake tensors have none, so it builds a
    full [b, 1, s, s] mask and expands the key/value heads (GQA), which a real step without padding never
    does (it runs SDPA with is_causal and GQA inside the kernel). Inside this context the packed-sequence
    check answers "not packed" — true for example inputs without position_ids and attention_mask, one
    sequence per row. With an attention_mask given, transformers still builds the mask (as it does on a real
    GPU). A no-op when transformers is absent or has no such function."""
    masking = sys.modules.get("transformers.masking_utils")
    original = getattr(masking, "find_packed_sequence_indices", None)
    if original is None:
        yield
        return
    masking.find_packed_sequence_indices = lambda position_ids: None
    try:
        yield
    finally:
        masking.find_packed_sequence_indices = original


@contextlib.contextmanager
def fallback_grouped_mm():
    """While planning under FakeTensorMode: MoE experts whose weights are not bfloat16 run through transformers'
    grouped_mm fallback op instead of torch's grouped_mm.

    torch's meta kernel for grouped_mm takes bfloat16 only (torch 2.13: "Expected inputs of BF16 type"), so a
    float32 Mixtral could not be measured at all. The fallback (``transformers.integrations.moe``, a custom op
    with a fake implementation) takes the same inputs, returns the same output and saves the same tensors for
    backward (the routed tokens and the expert weights), so the bytes are a grouped_mm's. Its FLOPs are a grouped
    GEMM's too (registered in remat.formulas.op_flops.FORMULAS, forward and backward), so drop-cheap keeps its
    output under fake tensors as it keeps torch's grouped_mm in the real step. A no-op when transformers has no
    such function."""
    moe = sys.modules.get("transformers.integrations.moe")
    original = getattr(moe, "_can_use_grouped_mm", None)
    if original is None:
        yield
        return
    ops = torch.ops.transformers
    FORMULAS.setdefault(ops.grouped_mm_fallback, FORMULAS[torch.ops.aten._grouped_mm])
    FORMULAS.setdefault(ops.grouped_mm_fallback_backward, shape_wrapper(_fallback_backward_flops))
    moe._can_use_grouped_mm = lambda input, weight, offs: weight.dtype == torch.bfloat16 and original(input, weight,
                                                                                                       offs)
    try:
        yield
    finally:
        moe._can_use_grouped_mm = original


def _fallback_backward_flops(input_shape, weight_shape, offs_shape, grad_shape, out_shape=None, **kwargs) -> int:
    """transformers' grouped_mm_fallback_backward: the input's gradient and the weights' gradient, two grouped GEMMs
    of the forward's size."""
    return 2 * grouped_mm_flops(input_shape, weight_shape)


def per_layer_mask_terms(config, seq: int, micro_batch: int, itemsize: int) -> dict[str, int]:
    """Bytes each layer of a transformers model keeps that remat's own layer does not, when its SDPA attention gets
    an explicit mask (a sliding window shorter than the sequence): torch converts the boolean mask to an additive
    [b, 1, s, s] one in the model dtype in every call and keeps it for backward, and with a mask transformers repeats
    the key/value groups to every query head before SDPA (both measured: Mistral-7B at s = 8192, 128 MiB and
    2 × 48 MiB per layer). Empty for any other model or attention implementation."""
    window = getattr(config, "sliding_window", None)
    if getattr(config, "_attn_implementation", None) != "sdpa" or not window or window >= seq:
        return {}
    s, b, heads = seq, micro_batch, config.num_attention_heads
    groups = getattr(config, "num_key_value_heads", None) or heads
    d = getattr(config, "head_dim", None) or config.hidden_size // heads
    return {"additive sliding-window mask": itemsize * b * s * s,
            "keys and values repeated to every head": 2 * itemsize * b * s * (heads - groups) * d}
