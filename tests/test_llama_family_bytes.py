"""Bytes per layer of the Llama-family models people train, derived by hand term by term, against the plan's
(remat's own layer under fake tensors, t = 1; Mixtral: also the transformers model, remat.auto). Llama-3-70B at TP = 8
with SP: tests/test_llama_parallel.py.

The layer keeps what transformers' LlamaDecoderLayer keeps with SDPA (FlashAttention-style: no s × s
probabilities), per micro-batch of b = 1, with e the bytes of the model dtype:

* each of the two RMSNorms: its input in fp32 (4sh), the fp32 1/rms per token (4s), the normalised input in the
  model dtype for the weight's gradient (e·sh);
* attention: the q/k/v projections' input (e·sh); SDPA's q (e·s·a·d), k and v (e·s·kv·d each: key/value groups,
  not repeated), its output (e·s·a·d, also the output projection's input) and log-sum-exp (4·a·s, fp32);
* MLP: the gate/up input (e·sh), the gate output (SiLU's input), SiLU's output, the up output and their product
  (the down projection's input): 4 · e·s·f.
"""

from __future__ import annotations

import json

import pytest

from remat.auto.planning import LOOSE
from remat.cli import main
from remat.models.presets import from_name
from remat.planner import make_problem


def by_hand(s: int, h: int, a: int, kv: int, d: int, f: int, e: int) -> dict[str, int]:
    norm = 4 * s * h + 4 * s + e * s * h
    return {"two RMSNorms": 2 * norm, "q/k/v input": e * s * h, "q": e * s * a * d, "k": e * s * kv * d,
            "v": e * s * kv * d, "attention output": e * s * a * d, "log-sum-exp": 4 * a * s,
            "gate/up input": e * s * h, "gate, SiLU, up, product": 4 * e * s * f}


def _problem(tmp_path, raw: dict, seq: int):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(raw))
    return make_problem(from_name(str(path), seq=seq), memory=80 * 2**30)


LLAMA3_8B = {"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
             "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 128256,
             "max_position_embeddings": 8192, "rope_theta": 500000.0, "tie_word_embeddings": False,
             "rms_norm_eps": 1e-5, "torch_dtype": "bfloat16"}
MISTRAL_7B = {"model_type": "mistral", "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
              "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 32000,
              "max_position_embeddings": 32768, "sliding_window": 4096, "tie_word_embeddings": False,
              "rms_norm_eps": 1e-5, "torch_dtype": "bfloat16"}
QWEN2_7B = {"model_type": "qwen2", "hidden_size": 3584, "num_hidden_layers": 28, "num_attention_heads": 28,
            "num_key_value_heads": 4, "intermediate_size": 18944, "vocab_size": 152064,
            "max_position_embeddings": 32768, "rope_theta": 1000000.0, "tie_word_embeddings": False,
            "use_sliding_window": False, "sliding_window": 131072, "rms_norm_eps": 1e-6, "torch_dtype": "bfloat16"}


@pytest.mark.parametrize("name, raw, seq, dims", [
    ("Llama-3-8B", LLAMA3_8B, 8192, (4096, 32, 8, 128, 14336)),
    ("Mistral-7B", MISTRAL_7B, 32768, (4096, 32, 8, 128, 14336)),
    ("Qwen2-7B", QWEN2_7B, 8192, (3584, 28, 4, 128, 18944)),       # q/k/v biases keep no extra tensor
])
def test_bytes_per_layer_by_hand(tmp_path, name, raw, seq, dims):
    problem = _problem(tmp_path, raw, seq)
    terms = by_hand(seq, *dims, e=2)
    assert problem.meta["bytes_per_micro_batch"]["none"] == pytest.approx(sum(terms.values()), rel=0.02), name
    # full recompute keeps the layer's input only
    assert problem.meta["bytes_per_micro_batch"]["full"] == 2 * seq * dims[0]


def test_mistral_sliding_window_mask_is_one_buffer_not_one_per_layer(tmp_path):
    # s = 32768 with a 4096 window: one additive [s, s] mask in bf16 (2 GiB) for the whole model, outside the
    # layers; a layer keeps no mask (test_bytes_per_layer_by_hand: a per-layer mask would put Mistral's layer
    # 2 GiB, 25 %, over the hand count)
    s = 32768
    problem = _problem(tmp_path, MISTRAL_7B, s)
    assert problem.meta["outside_terms"]["sliding-window mask (one [s, s] buffer for every layer)"] == 2 * s * s


MIXTRAL_8X7B = {"model_type": "mixtral", "hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32,
                "num_key_value_heads": 8, "num_hidden_layers": 2, "num_local_experts": 8, "num_experts_per_tok": 2,
                "vocab_size": 1024, "max_position_embeddings": 32768, "rms_norm_eps": 1e-5, "rope_theta": 1e6,
                "sliding_window": None, "tie_word_embeddings": False, "torch_dtype": "bfloat16"}


def mixtral_by_hand(s: int, h: int, a: int, kv: int, d: int, f: int, experts: int, k: int) -> dict[str, int]:
    """One Mixtral block as transformers 5.24 runs it (top-k routing, grouped_mm experts), bf16, b = 1: the Llama
    terms of the attention half, then the router and the experts at the routed token count r = k·s."""
    r = k * s
    terms = {key: v for key, v in by_hand(s, h, a, kv, d, f, e=2).items() if key not in
             ("gate/up input", "gate, SiLU, up, product")}
    terms |= {
        "router input (the normalised hidden state)": 2 * s * h,
        "router softmax (fp32, per token and expert)": 4 * s * experts,
        "top-k expert ids (int64)": 8 * s * k,
        "top-k weight sum and normalised weights (fp32)": 4 * s + 4 * s * k,
        "token and expert indices of the routed rows (3 int64 vectors)": 3 * 8 * r,
        "grouped_mm offsets (int32, per expert)": 4 * experts,
        "routed input rows": 2 * r * h,
        "fused gate/up output (SiLU's input and up)": 2 * r * 2 * f,
        "SiLU output": 2 * r * f,
        "SiLU · up (the down projection's input)": 2 * r * f,
        "routing weight per row (fp32)": 4 * r,
        "down output, weighted by the routing weight": 2 * r * h,
    }
    return terms


@pytest.mark.parametrize("path_flags", [[], ["--hf"]], ids=["remat's layer", "transformers' model"])
@pytest.mark.slow
def test_mixtral_block_bytes_by_hand(capsys, tmp_path, path_flags):
    """One answer per model: remat's MoE layer (remat.models.moe) and transformers' MixtralDecoderLayer keep the
    bytes counted by hand."""
    if path_flags:
        pytest.importorskip("transformers")
    path = tmp_path / "config.json"
    path.write_text(json.dumps(MIXTRAL_8X7B))
    code = main(["plan", "--model", str(path), "--seq", "4096", "--memory", "141GiB", "--gpu", "h200-141gb",
                 "--format", "json", "--no-baselines", *path_flags])
    out, err = capsys.readouterr()
    assert code == 0, err
    doc = json.loads(out)
    expected = sum(mixtral_by_hand(4096, 4096, 32, 8, 128, 14336, experts=8, k=2).values())
    if path_flags:
        assert [b["policy"] for b in doc["blocks"]] == ["none", "none"]
        got = doc["blocks"][1]["stored_bytes"]
    else:
        assert [layer["policy"] for layer in doc["layers"]] == ["none", "none"]
        got = doc["settings"]["bytes_per_micro_batch"]["none"]
    assert got == pytest.approx(expected, rel=0.02)


def _plan_json(capsys, tmp_path, raw: dict, *flags: str, memory: str = "80GiB") -> dict:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(raw))
    code = main(["plan", "--model", str(path), "--seq", "8192", "--memory", memory, "--format", "json", *flags])
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)


@pytest.mark.slow
def test_both_paths_price_a_llama_step_alike(capsys, tmp_path):
    """One model, one answer: Llama-3-8B (4 layers, s = 8192) through remat's own layers and through transformers'
    model (--hf) — the same bytes per block, the same head peak, the same no-recompute and every-block-full
    peaks within 0.2 % and their step times within 2 %. What remains is named term by term (hand count):
    * parameters and buffers: transformers' RoPE keeps inv_freq and original_inv_freq, 2 · d/2 fp32 = 512 B;
    * held outside the blocks: transformers' step holds the last block's output gradient when that block's
      backward starts (2·s·h, the own path counts it in the layer's transient) and its one pair of RoPE cos/sin
      tables (2 · e·s·d), where remat's runtime layer keeps a pair per layer (4 · 2 · e·s·d), beside the token
      ids both count, within 64 B (the loss's scalars);
    * inputs without gradient a checkpoint keeps: the position ids every block takes (int64 [1, s]: 8·s), which
      the plain step frees after the forward."""
    pytest.importorskip("transformers")
    s, h, d = 8192, 4096, 128
    raw = {**LLAMA3_8B, "num_hidden_layers": 4}
    own, hf = _plan_json(capsys, tmp_path, raw), _plan_json(capsys, tmp_path, raw, "--hf")
    per_block = own["settings"]["bytes_per_micro_batch"]
    assert per_block["none"] == pytest.approx(sum(by_hand(s, h, 32, 8, d, 14336, e=2).values()), rel=0.02)
    assert own["memory"]["transient at the peak"] == hf["memory"]["transient at the peak"]   # the head's peak
    pairs = {"none": "no recompute", "full": "every block full (HF gradient_checkpointing_enable)"}
    for ours, theirs in pairs.items():
        assert own["baselines"][ours]["peak_bytes"] == pytest.approx(hf["baselines"][theirs]["peak_bytes"],
                                                                    rel=0.002)
        # time: the same roofline over every op; the head's fp32 softmax and cross-entropy priced on both paths
        assert own["baselines"][ours]["step_time_s"] == pytest.approx(hf["baselines"][theirs]["step_time_s"],
                                                                     rel=0.02)
    assert hf["memory"]["parameters and buffers"] - own["memory"]["weights"] == 2 * (d // 2) * 4
    held = hf["memory"]["held outside the blocks (measured)"] - own["memory"]["outside layers (measured)"]
    assert abs(held - (2 * s * h + 2 * 2 * s * d - 4 * 2 * 2 * s * d)) <= 64
    assert hf["memory"][LOOSE] == 8 * s
    assert [(b["policy"], b["stored_bytes"]) for b in hf["blocks"]] == [("none", per_block["none"])] * 4


@pytest.mark.slow
def test_both_paths_give_one_plan(capsys, tmp_path):
    """One model, one plan: at 50 GB, between every block full (48.8 GB) and none (55.1 GB), remat's layers and
    transformers' model choose the same policies, selective meaning op-level in both (fused attention)."""
    pytest.importorskip("transformers")
    raw = {**LLAMA3_8B, "num_hidden_layers": 4}
    own = _plan_json(capsys, tmp_path, raw, "--no-baselines", memory="50GB")
    hf = _plan_json(capsys, tmp_path, raw, "--no-baselines", "--hf", memory="50GB")
    assert own["counts"] == hf["counts"] and "selective" in own["counts"] and "full" in own["counts"]
    assert own["apply"]["python_list"] == hf["apply"]["python_list"]
    assert own["predicted"]["stored_bytes"] == hf["predicted"]["stored_bytes"]


def test_the_plan_states_the_attention_it_accounts(tmp_path):
    """Mistral's fused kernel with its window; the paper's GPT-3 materialises softmax (Korthikanti's s × s terms)."""
    assert _problem(tmp_path, MISTRAL_7B, 4096).meta["attention"] == ("fused SDPA (no s × s kept; causal, sliding "
                                                                      "window 4096: time of a FlashAttention kernel "
                                                                      "over the attended pairs)")
    assert make_problem(from_name("gpt3-175b"), memory=80 * 2**30).meta["attention"] == \
        "materialised softmax (s × s kept)"


@pytest.mark.slow
def test_mistral_paths_differ_by_the_named_per_layer_mask_terms(capsys, tmp_path):
    """Mistral-7B at s = 8192 (window 4096): transformers' block keeps, beyond remat's layer, the additive mask torch
    makes from the boolean one in every SDPA call (e·b·s²) and the key/value groups repeated to every head (2·e·b·s·
    (a − kv)·d) — by hand, exactly; the --hf plan names both."""
    pytest.importorskip("transformers")
    s, e, a, kv, d = 8192, 2, 32, 8, 128
    raw = {**MISTRAL_7B, "num_hidden_layers": 2}
    own = _plan_json(capsys, tmp_path, raw, "--no-baselines")
    hf = _plan_json(capsys, tmp_path, raw, "--no-baselines", "--hf")
    assert [b["policy"] for b in hf["blocks"]] == ["none", "none"]
    named = e * s * s + 2 * e * s * (a - kv) * d
    assert hf["blocks"][0]["stored_bytes"] - own["settings"]["bytes_per_micro_batch"]["none"] == named
    assert any("additive sliding-window mask 128.00 MiB" in note for note in hf["apply"]["notes"])


@pytest.mark.slow
def test_a_sequence_beyond_the_models_positions_is_planned_with_a_warning(capsys, tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4,
                                "num_hidden_layers": 2, "intermediate_size": 128, "vocab_size": 128,
                                "max_position_embeddings": 64}))
    base = ["plan", "--model", str(path), "--memory", "4GiB", "--no-baselines"]
    assert main([*base, "--seq", "128"]) == 0
    err = capsys.readouterr().err
    assert "warning: s = 128 exceeds the model's 64 positions" in err and len(err.strip().splitlines()) == 1
    assert main([*base, "--seq", "64"]) == 0
    assert capsys.readouterr().err == ""
