"""Presets, overrides and HuggingFace config.json reading (remat.models.presets, remat.models.hf_config)."""

from __future__ import annotations

import json

import pytest

from remat.errors import UsageError
from remat.models.presets import PRESETS, from_name

# Korthikanti et al. 2022, Table 3: a, h, L, p, global batch, micro-batch, interleave m.
TABLE3 = {
    "gpt-22b": (64, 6144, 48, 1, 4, 4, 1),
    "gpt3-175b": (96, 12288, 96, 8, 64, 1, 3),
    "mt-nlg-530b": (128, 20480, 105, 35, 280, 1, 3),
    "gpt-1t": (160, 25600, 128, 64, 512, 1, 1),
}

LLAMA3_8B_JSON = {  # config.json of meta-llama/Meta-Llama-3-8B
    "architectures": ["LlamaForCausalLM"], "attention_bias": False, "bos_token_id": 128000,
    "eos_token_id": 128001, "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02,
    "intermediate_size": 14336, "max_position_embeddings": 8192, "model_type": "llama",
    "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8, "pretraining_tp": 1,
    "rms_norm_eps": 1e-05, "rope_scaling": None, "rope_theta": 500000.0, "tie_word_embeddings": False,
    "torch_dtype": "bfloat16", "transformers_version": "4.40.0.dev0", "use_cache": True, "vocab_size": 128256,
}
GPT2_JSON = {  # config.json of openai-community/gpt2 (keys that matter)
    "activation_function": "gelu_new", "attn_pdrop": 0.1, "embd_pdrop": 0.1, "layer_norm_epsilon": 1e-05,
    "model_type": "gpt2", "n_ctx": 1024, "n_embd": 768, "n_head": 12, "n_layer": 12, "n_positions": 1024,
    "resid_pdrop": 0.1, "vocab_size": 50257,
}


def write(tmp_path, obj, name="config.json"):
    path = tmp_path / name
    path.write_text(obj if isinstance(obj, str) else json.dumps(obj))
    return str(path)


@pytest.mark.parametrize("name", sorted(TABLE3))
def test_paper_presets_match_table3(name):
    cfg = from_name(name)
    a, h, L, p, gb, b, m = TABLE3[name]
    assert (cfg.heads, cfg.hidden, cfg.layers, cfg.pp, cfg.global_batch, cfg.micro_batch, cfg.interleave) == \
        (a, h, L, p, gb, b, m)
    assert (cfg.seq, cfg.vocab, cfg.tp, cfg.ffn_hidden, cfg.arch, cfg.attention) == \
        (2048, 51200, 8, 4 * h, "gpt", "math")
    assert cfg.dtype in ("bfloat16", "float16") and cfg.dropout > 0


def test_every_preset_validates_and_overrides_apply():
    for name in PRESETS:
        cfg = from_name(name, layers=1, seq=16, micro_batch=3, dtype="float64")
        assert (cfg.layers, cfg.seq, cfg.micro_batch, cfg.dtype) == (1, 16, 3, "float64")
    assert from_name("gpt3-175b", layers=1).pp == 1  # one layer cannot span 8 stages
    assert from_name("gpt-tiny", seq=None).seq == PRESETS["gpt-tiny"].seq  # None = not given


def test_hf_llama3_equals_the_preset(tmp_path):
    cfg = from_name(write(tmp_path, LLAMA3_8B_JSON))
    preset = PRESETS["llama3-8b"]
    for field in ("arch", "hidden", "heads", "kv_heads", "layers", "ffn_hidden", "vocab", "seq", "dtype",
                  "rope_theta", "norm_eps", "tie_embeddings", "bias", "activation", "attention"):
        assert getattr(cfg, field) == getattr(preset, field), field


def test_hf_gpt2_equals_the_preset(tmp_path):
    cfg = from_name(write(tmp_path, GPT2_JSON), seq=256)
    preset = from_name("gpt2-124m", seq=256)
    for field in ("arch", "hidden", "heads", "layers", "ffn_hidden", "vocab", "seq", "dropout", "activation",
                  "max_positions", "tie_embeddings"):
        assert getattr(cfg, field) == getattr(preset, field), field


@pytest.mark.parametrize("model_type, extra, expect", [
    ("mistral", {"sliding_window": 4096}, {"sliding_window": 4096, "qkv_bias": False}),
    ("qwen2", {"sliding_window": 4096, "use_sliding_window": False}, {"sliding_window": None, "qkv_bias": True}),
])
def test_hf_mistral_qwen2(tmp_path, model_type, extra, expect):
    raw = {**LLAMA3_8B_JSON, "model_type": model_type, **extra}
    cfg = from_name(write(tmp_path, raw))
    for key, value in expect.items():
        assert getattr(cfg, key) == value


@pytest.mark.parametrize("raw, field", [
    ("{not json", "config.json"),
    ([1, 2], "config.json"),
    ({**GPT2_JSON, "model_type": "bert"}, "model_type"),
    ({k: v for k, v in GPT2_JSON.items() if k != "n_embd"}, "n_embd"),
    ({**GPT2_JSON, "n_head": 7}, "n_head"),
    ({**LLAMA3_8B_JSON, "num_key_value_heads": 5}, "num_key_value_heads"),
    ({**LLAMA3_8B_JSON, "hidden_act": "gelu"}, "hidden_act"),
    ({**LLAMA3_8B_JSON, "head_dim": 64}, "head_dim"),
    ({**LLAMA3_8B_JSON, "num_hidden_layers": "32"}, "num_hidden_layers"),
    ({**LLAMA3_8B_JSON, "torch_dtype": "int8"}, "torch_dtype"),
])
def test_bad_config_json_names_the_key(tmp_path, raw, field):
    path = write(tmp_path, raw if isinstance(raw, str) else json.dumps(raw))
    with pytest.raises(UsageError) as exc:
        from_name(path)
    assert exc.value.field == field


@pytest.mark.parametrize("overrides, field", [
    ({"heads": 5}, "heads"), ({"kv_heads": 3}, "kv_heads"), ({"seq": 0}, "seq"), ({"seq": -4}, "seq"),
    ({"micro_batch": 0}, "micro_batch"), ({"dtype": "int8"}, "dtype"), ({"dropout": 1.0}, "dropout"),
    ({"tp": 3}, "tp"), ({"no_such_field": 1}, "no_such_field"),
])
def test_bad_overrides_name_the_field(overrides, field):
    with pytest.raises(UsageError) as exc:
        from_name("llama-tiny" if "kv_heads" in overrides else "gpt-tiny", **overrides)
    assert exc.value.field == field


def test_unknown_preset_and_missing_file():
    for name in ("gpt-9000", "missing/config.json"):
        with pytest.raises(UsageError) as exc:
            from_name(name)
        assert exc.value.field == "model"
