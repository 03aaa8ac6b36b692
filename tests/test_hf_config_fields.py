"""Every config.json key is READ, REJECTED or IGNORED (remat.models.hf_config), never silently dropped.

The tables are pinned here (a change is a conscious one); the fields are checked with real values: GPT-2's
n_inner and tie_word_embeddings reach the planner's weights, each REJECTED key with a value the runtime cannot
build exits 2 naming it, and for every model_type the runtime model has exactly the parameters of the model
transformers builds from the same config.json (AutoModelForCausalLM.from_config).
"""

from __future__ import annotations

import dataclasses
import inspect
import json
from pathlib import Path

import pytest
from conftest import run_cli as run

from remat.errors import UsageError
from remat.models.hf_config import IGNORED, READ, REJECTED, SUPPORTED, read_hf_config, unknown_keys
from remat.models.presets import from_name

COMMON_READ = ["dtype", "model_type", "tie_word_embeddings", "torch_dtype", "vocab_size"]
LLAMA_LIKE_READ = COMMON_READ + ["hidden_size", "intermediate_size", "max_position_embeddings",
                                 "num_attention_heads", "num_hidden_layers", "num_key_value_heads",
                                 "rms_norm_eps", "rope_parameters", "rope_scaling", "rope_theta"]
EXPECTED_READ = {
    "gpt2": sorted(COMMON_READ + ["activation_function", "attn_pdrop", "embd_pdrop", "layer_norm_epsilon",
                                  "n_embd", "n_head", "n_inner", "n_layer", "n_positions", "resid_pdrop"]),
    "llama": sorted(LLAMA_LIKE_READ),
    "mistral": sorted(LLAMA_LIKE_READ + ["sliding_window"]),
    "qwen2": sorted(LLAMA_LIKE_READ + ["layer_types", "max_window_layers", "sliding_window",
                                       "use_sliding_window"]),
    "mixtral": sorted(LLAMA_LIKE_READ + ["sliding_window", "num_local_experts", "num_experts_per_tok"]),
}
COMMON_REJECTED = ["pruned_heads", "quantization_config"]
EXPECTED_REJECTED = {
    "gpt2": sorted(COMMON_REJECTED + ["add_cross_attention", "n_ctx", "reorder_and_upcast_attn",
                                      "scale_attn_by_inverse_layer_idx", "scale_attn_weights"]),
    "llama": sorted(COMMON_REJECTED + ["attention_bias", "attention_dropout", "head_dim", "hidden_act",
                                       "mlp_bias"]),
    "mistral": sorted(COMMON_REJECTED + ["attention_dropout", "head_dim", "hidden_act"]),
    "qwen2": sorted(COMMON_REJECTED + ["attention_dropout", "head_dim", "hidden_act"]),
    "mixtral": sorted(COMMON_REJECTED + ["attention_dropout", "head_dim", "hidden_act", "output_router_logits",
                                         "router_jitter_noise"]),
}
# a value per REJECTED key that the runtime cannot build (for the small configs below: h = 64, a = 4)
BAD = {"add_cross_attention": True, "n_ctx": 2048, "reorder_and_upcast_attn": True,
       "scale_attn_by_inverse_layer_idx": True, "scale_attn_weights": False, "attention_bias": True,
       "attention_dropout": 0.1, "head_dim": 32, "hidden_act": "gelu", "mlp_bias": True,
       "pruned_heads": {"0": [1]}, "output_router_logits": True, "router_jitter_noise": 0.01,
       "quantization_config": {"quant_method": "bitsandbytes", "load_in_8bit": True}}

SMALL = {  # one small config per model_type (GQA, a non-4h MLP)
    "gpt2": {"model_type": "gpt2", "n_embd": 64, "n_head": 4, "n_layer": 2, "n_positions": 32, "vocab_size": 101},
    "llama": {"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
              "num_hidden_layers": 2, "intermediate_size": 96, "vocab_size": 101, "max_position_embeddings": 32},
}
SMALL["mistral"] = {**SMALL["llama"], "model_type": "mistral", "sliding_window": 8}
SMALL["qwen2"] = {**SMALL["llama"], "model_type": "qwen2"}
SMALL["mixtral"] = {**SMALL["llama"], "model_type": "mixtral", "num_local_experts": 4, "num_experts_per_tok": 2}

GPT2_SMALL = {"model_type": "gpt2", "n_embd": 768, "n_head": 12, "n_layer": 12, "n_positions": 1024,
              "vocab_size": 50257}  # GPT-2 124M (openai-community/gpt2)


def write(tmp_path, raw: dict, name: str = "config.json") -> str:
    folder = tmp_path / f"m{len(list(tmp_path.iterdir()))}"
    folder.mkdir()
    (folder / name).write_text(json.dumps(raw))
    return str(folder / name)


def plan_json(capsys, path: str, *flags: str) -> dict:
    code, out, err = run(capsys, "plan", "--model", path, "--memory", "24GiB", "--no-baselines", "--format",
                         "json", *flags)
    assert code == 0, err
    return json.loads(out)


def fake_param_count(cfg) -> int:
    """Parameters of remat's runtime model of ``cfg``, built under FakeTensorMode (as remat.planner.measured)."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from remat.models.transformer import build_model
    with FakeTensorMode():
        return sum(p.numel() for p in build_model(cfg).parameters())


# --- the tables -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("model_type", SUPPORTED)
def test_read_and_rejected_tables_are_the_expected_ones(model_type):
    assert sorted(READ[model_type]) == EXPECTED_READ[model_type]
    assert sorted(REJECTED[model_type]) == EXPECTED_REJECTED[model_type]
    classes = (set(READ[model_type]), set(REJECTED[model_type]), set(IGNORED[model_type]))
    assert all(not (a & b) for i, a in enumerate(classes) for b in classes[i + 1:])  # one class per key
    assert set(BAD) >= set(REJECTED[model_type])  # every rejection is exercised below


@pytest.mark.parametrize("model_type", SUPPORTED)
def test_every_key_transformers_knows_is_classified(model_type):
    """Each key of the installed transformers' config class (to_dict and __init__) is READ, REJECTED or
    IGNORED: none would be reported unknown, none silently dropped."""
    transformers = pytest.importorskip("transformers")
    cls = transformers.AutoConfig.for_model(model_type).__class__
    keys = set(cls().to_dict()) | set(inspect.signature(cls.__init__).parameters) - {"self", "kwargs"}
    assert unknown_keys(dict.fromkeys(keys), model_type) == []


# --- GPT-2: n_inner and tie_word_embeddings reach the planner -------------------------------------------------

def test_gpt2_n_inner_sets_the_planned_weights(capsys, tmp_path):
    raw = {**GPT2_SMALL, "n_inner": 6144}
    cfg = from_name(write(tmp_path, raw))
    params = fake_param_count(cfg)
    # 12 layers × (4h² + 2h·6144 + 6144 + 9h) + v·h + 1024·h + 2h, h = 768, v = 50257
    assert cfg.ffn_hidden == 6144 and params == 181_099_776
    weights = plan_json(capsys, cfg.source)["memory"]["weights"]
    default = plan_json(capsys, write(tmp_path, {**GPT2_SMALL, "n_inner": None}))["memory"]["weights"]
    # GPT-2's config.json has no torch_dtype: float32 weights, 4 bytes each
    assert weights == params * 4 and default == 124_439_808 * 4 != weights
    assert default == fake_param_count(from_name(write(tmp_path, GPT2_SMALL))) * 4


def test_gpt2_untied_head_adds_v_times_h(capsys, tmp_path):
    tied = from_name(write(tmp_path, GPT2_SMALL))
    untied = from_name(write(tmp_path, {**GPT2_SMALL, "tie_word_embeddings": False}))
    assert (tied.tie_embeddings, untied.tie_embeddings) == (True, False)
    assert fake_param_count(untied) - fake_param_count(tied) == 50257 * 768 == 38_597_376
    weights = {c.tie_embeddings: plan_json(capsys, c.source)["memory"]["weights"] for c in (tied, untied)}
    assert weights[False] - weights[True] == 4 * 38_597_376     # float32 weights


def test_gpt2_non_4h_layer_bytes_scale_the_mlp_terms(tmp_path):
    """The closed form's GeLU and fc2 inputs are 2sb·ffn bytes each (8sbh at the paper's 4h)."""
    from remat.formulas import korthikanti
    from remat.planner.costs import layer_bytes
    wide = from_name(write(tmp_path, {**GPT2_SMALL, "n_inner": 6144}), seq=128)
    plain = dataclasses.replace(wide, ffn_hidden=4 * 768)
    s, b, h = 128, 1, 768
    grow = layer_bytes(wide, sp=False)["none"] - layer_bytes(plain, sp=False)["none"]
    assert grow == 2 * 2 * s * b * (6144 - 4 * h)
    assert layer_bytes(plain, sp=False)["none"] == korthikanti.table2_bytes(s, b, h, 12)
    assert layer_bytes(wide, sp=False)["full"] == 2 * s * b * h  # the layer input only


# --- REJECTED keys and refused READ values: exit 2, one line naming the key, nothing written ------------------

REJECTIONS = sorted({(t, k) for t in SUPPORTED for k in REJECTED[t]})
REFUSED_READ = [  # READ keys whose value the runtime has no layer for
    ("gpt2", {"attn_pdrop": 0.0}, "attn_pdrop"),
    ("gpt2", {"embd_pdrop": 0.2}, "embd_pdrop"),
    ("gpt2", {"activation_function": "relu"}, "activation_function"),
    ("qwen2", {"use_sliding_window": True, "max_window_layers": 1}, "max_window_layers"),
    ("qwen2", {"use_sliding_window": True, "sliding_window": 8,
               "layer_types": ["full_attention", "sliding_attention"]}, "layer_types"),
]


@pytest.mark.parametrize("model_type, key", REJECTIONS)
def test_rejected_key_exits_2_naming_it(capsys, tmp_path, model_type, key):
    path = write(tmp_path, {**SMALL[model_type], key: BAD[key]})
    out_file = tmp_path / "plan.md"
    code, out, err = run(capsys, "plan", "--model", path, "--memory", "24GiB", "--out", str(out_file))
    assert (code, out) == (2, "") and len(err.strip().splitlines()) == 1, err
    assert err.startswith(f"remat plan: error: {key}: ") and not out_file.exists()


@pytest.mark.parametrize("model_type, changes, key", REFUSED_READ)
def test_refused_read_value_exits_2_naming_it(capsys, tmp_path, model_type, changes, key):
    path = write(tmp_path, {**SMALL[model_type], **changes})
    out_file = tmp_path / "plan.md"
    code, out, err = run(capsys, "plan", "--model", path, "--memory", "24GiB", "--out", str(out_file))
    assert (code, out) == (2, "") and len(err.strip().splitlines()) == 1, err
    assert err.startswith(f"remat plan: error: {key}: ") and not out_file.exists()


@pytest.mark.parametrize("model_type, key", REJECTIONS)
def test_rejected_key_at_its_default_is_accepted(tmp_path, model_type, key):
    transformers = pytest.importorskip("transformers")
    default = transformers.AutoConfig.for_model(**SMALL[model_type]).to_dict().get(key)
    path = write(tmp_path, {**SMALL[model_type], key: default})
    without = read_hf_config(write(tmp_path, SMALL[model_type]), warn=False)
    assert read_hf_config(path, warn=False) == dataclasses.replace(without, name=Path(path).parent.name, source=path)


def test_unknown_key_is_one_warning_line_not_fatal(capsys, tmp_path):
    path = write(tmp_path, {**SMALL["gpt2"], "some_future_key": 3, "another_one": None})
    cfg = read_hf_config(path)
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "another_one, some_future_key" in err and "warning" in err
    plain = read_hf_config(write(tmp_path, SMALL["gpt2"]), warn=False)
    assert cfg == dataclasses.replace(plain, name=cfg.name, source=path)
    with pytest.raises(UsageError) as exc:  # unknown keys never hide a rejected one
        read_hf_config(write(tmp_path, {**SMALL["gpt2"], "some_future_key": 3, "add_cross_attention": True}))
    assert exc.value.field == "add_cross_attention"


# --- the runtime model equals transformers' model ---------------------------------------------------------------

VARIANTS = [
    ("gpt2", {}),
    ("gpt2", {"n_inner": 96, "tie_word_embeddings": False}),
    ("gpt2", {"activation_function": "gelu", "resid_pdrop": 0.0, "attn_pdrop": 0.0, "embd_pdrop": 0.0}),
    ("llama", {}),
    ("llama", {"tie_word_embeddings": True, "num_key_value_heads": None}),
    ("mistral", {}),
    ("mistral", {"sliding_window": None, "tie_word_embeddings": True}),
    ("qwen2", {}),
    ("qwen2", {"use_sliding_window": True, "sliding_window": 8, "max_window_layers": 0,
               "tie_word_embeddings": True}),
    ("mixtral", {}),
    ("mixtral", {"sliding_window": 8, "num_local_experts": 3, "num_experts_per_tok": 1}),
]


@pytest.mark.parametrize("model_type, changes", VARIANTS)
def test_runtime_model_has_transformers_parameter_count(tmp_path, model_type, changes):
    """remat's model (under fake tensors) and AutoModelForCausalLM.from_config(AutoConfig.for_model(**raw))
    (real CPU tensors, tiny) have the same parameters; so does the config transformers writes back in full
    (every key, defaults included), which reads to the same ModelConfig with no unknown key."""
    transformers = pytest.importorskip("transformers")
    raw = {**SMALL[model_type], **changes}
    cfg = read_hf_config(write(tmp_path, raw), warn=False)
    hf_cfg = transformers.AutoConfig.for_model(**raw)
    hf = transformers.AutoModelForCausalLM.from_config(hf_cfg)
    assert fake_param_count(cfg) == sum(p.numel() for p in hf.parameters())
    full = json.loads(hf_cfg.to_json_string(use_diff=False))
    assert unknown_keys(full, model_type) == []
    again = read_hf_config(write(tmp_path, full), warn=False)
    assert dataclasses.replace(again, name=cfg.name, source=cfg.source) == cfg
    # the attention pattern: the window transformers applies on every layer (none = full causal)
    types = getattr(hf_cfg, "layer_types", None)
    hf_window = getattr(hf_cfg, "sliding_window", None)
    if types is not None:
        hf_window = hf_window if set(types) == {"sliding_attention"} else None
    assert cfg.sliding_window == (hf_window if model_type != "llama" else None)
    assert cfg.tie_embeddings == hf_cfg.tie_word_embeddings


# --- the generalised closed forms (MLP width, untied head) against the runtime model ----------------------------

@pytest.mark.parametrize("ffn, tied", [(None, True), (96, True), (96, False), (256, False)])
def test_params_formula_counts_the_runtime_model(ffn, tied):
    """korthikanti.params_total / params_per_gpu (t = p = 1) with the MLP width and an untied head equal the
    parameters of remat's GPT model; ffn None is the paper's 4h."""
    from remat.formulas import korthikanti
    cfg = dataclasses.replace(from_name("gpt-tiny"), ffn_hidden=ffn or 4 * 64, tie_embeddings=tied)
    h, L, v, s = cfg.hidden, cfg.layers, cfg.vocab, cfg.max_positions
    assert korthikanti.params_total(h, L, v, s, ffn, tied) == fake_param_count(cfg)
    assert korthikanti.params_per_gpu(h, L, v, s, 1, 1, ffn, tied) == fake_param_count(cfg)


@pytest.mark.parametrize("ffn", [256, 96])
def test_layer_forward_flops_with_the_mlp_width_match_flop_counter(ffn):
    """8bsh² + 4bsh·ffn + 4bs²h = the GEMM FLOPs torch counts for remat's GPT layer (24bsh² + 4bs²h at 4h)."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode
    from remat.formulas import korthikanti
    from remat.models.gpt import GPTLayer
    cfg = dataclasses.replace(from_name("gpt-tiny"), ffn_hidden=ffn)
    with FlopCounterMode(display=False) as counter:
        GPTLayer(cfg)(torch.randn(cfg.seq, cfg.micro_batch, cfg.hidden))
    assert counter.get_total_flops() == korthikanti.layer_forward_flops(cfg.seq, cfg.micro_batch, cfg.hidden, ffn)


@pytest.mark.parametrize("changes, rope_type, theta", [
    ({"rope_parameters": {"rope_type": "llama3", "rope_theta": 5e5, "factor": 8.0}}, "llama3", 5e5),
    ({"rope_scaling": {"type": "linear", "factor": 2.0}}, "linear", 10000.0),
])
def test_rope_scaling_recorded_not_refused(tmp_path, changes, rope_type, theta):
    """Llama 3.1-style RoPE scaling changes the rotary tables' values only (no shape, byte, FLOP or attention
    pattern): the config plans, the type is recorded, θ is read."""
    cfg = read_hf_config(write(tmp_path, {**SMALL["llama"], **changes}))
    assert (cfg.rope_scaling, cfg.rope_theta) == (rope_type, theta)
