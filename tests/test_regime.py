"""One model, one answer: the precision / optimizer regime (remat.planner.regime) is one setting on every planning
path, and remat's own Llama layer keeps what transformers' LlamaDecoderLayer keeps.

Expected values are derived by hand in each test (bytes per parameter from the regimes' definitions; parameter
counts from the configs' shapes)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from remat.auto.blocks import find_blocks
from remat.auto.measure import measure_model
from remat.auto.planning import build_problem
from remat.cli import build_parser, main
from remat.models.presets import from_name
from remat.planner import make_problem
from remat.planner.regime import DEFAULT, REGIMES, resolve
from remat.timemodel.gpus import gpu

transformers = pytest.importorskip("transformers")

# Llama-3-8B's block (h 4096, 32 heads, 8 key/value groups, MLP 14336), two blocks and a small vocabulary so that
# both paths build it in seconds; bfloat16 as the published config.json
LLAMA = {"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 2, "num_attention_heads": 32,
         "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 1024, "max_position_embeddings": 8192,
         "rope_theta": 500000.0, "tie_word_embeddings": False, "rms_norm_eps": 1e-5, "torch_dtype": "bfloat16"}


def test_bytes_per_parameter_by_regime():
    # mixed: bf16 weights, fp32 gradient buffer, fp32 master + m + v (Megatron-LM's 18); float32: no master copy
    assert (resolve("mixed", 2).weight, resolve("mixed", 2).grad, resolve("mixed", 2).optimizer) == (2, 4, 12)
    assert resolve("mixed", 2).per_parameter == 18 and resolve("mixed", 2).grads_held_all_step
    assert resolve("mixed", 4).per_parameter == 4 + 4 + 8
    # pure: all in the parameters' dtype, AdamW's two moments zeros_like(param); gradients made by backward
    pure = resolve("pure", 2)
    assert (pure.weight, pure.grad, pure.optimizer, pure.per_parameter) == (2, 2, 4, 8)
    assert not pure.grads_held_all_step
    assert resolve("mixed", 2, grad=2).per_parameter == 16          # ZeRO paper's fp16 gradients
    assert "18 B per parameter" in resolve("mixed", 2).describe()


def test_the_cli_offers_every_regime_and_its_default():
    regime = next(a for a in build_parser()._subparsers._group_actions[0].choices["plan"]._actions
                  if a.dest == "regime")
    assert tuple(regime.choices) == REGIMES and regime.default == DEFAULT


def test_the_cli_imports_no_torch_before_its_interrupt_handler():
    # remat.cli installs its Ctrl-C handler in main(); what it imports before that must not pull torch in
    # (an interrupt during that import died with a traceback: tests/test_workflow_paths.py's interrupt test)
    done = subprocess.run([sys.executable, "-c", "import sys, remat.cli; print('torch' in sys.modules)"],
                          capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


def _plan(capsys, *argv) -> dict:
    code = main(["plan", *argv, "--format", "json", "--no-baselines"])
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)


@pytest.mark.parametrize("regime", ["mixed", "pure"])
@pytest.mark.slow
def test_own_layer_and_transformers_agree_per_block_and_on_the_state(capsys, tmp_path, regime):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(LLAMA))
    common = ("--model", str(path), "--seq", "1024", "--memory", "80GiB", "--regime", regime)
    own, hf = _plan(capsys, *common), _plan(capsys, *common, "--hf")
    phrase = resolve(regime, 2).describe()
    assert own["title"].endswith(phrase) and hf["title"].endswith(phrase)
    # per block, none: two RMSNorms (fp32 input 4sh, 1/rms 4s, bf16 normalised 2sh), the q/k/v input 2sh, SDPA's
    # q 2sh, k and v 2s·1024 each, log-sum-exp 4·32·s, output 2sh, the MLP input 2sh, gate, SiLU, up and their
    # product 4 · 2s·14336 — the hand count transformers' layer and remat's both keep
    s, h, f = 1024, 4096, 14336
    by_hand = 2 * (4 * s * h + 4 * s + 2 * s * h) + 2 * s * h + 2 * s * h + 2 * 2 * s * 1024 + 4 * 32 * s \
        + 2 * s * h + 2 * s * h + 4 * 2 * s * f
    assert own["settings"]["bytes_per_micro_batch"]["none"] == pytest.approx(by_hand, rel=0.02)
    assert [b["policy"] for b in hf["blocks"]] == ["none", "none"]
    assert hf["blocks"][0]["stored_bytes"] == pytest.approx(by_hand, rel=0.02)
    # the model state: the same bytes per parameter on both paths (transformers' parameters also hold RoPE's
    # inv_freq buffer: 64 floats)
    params = 2 * (4096 * (4096 + 2 * 1024) + 4096 * 4096 + 3 * 4096 * f + 2 * 4096) + 2 * 1024 * 4096 + 4096
    r = resolve(regime, 2)
    assert own["memory"]["weights"] == r.weight * params
    assert hf["memory"]["parameters and buffers"] == pytest.approx(r.weight * params, abs=1024)
    assert own["memory"]["optimizer"] == hf["memory"]["optimizer state"] == pytest.approx(r.optimizer * params,
                                                                                           abs=1024)
    if r.grads_held_all_step:
        assert own["memory"]["gradients"] == r.grad * params
        assert hf["memory"]["gradients (held all step)"] == pytest.approx(r.grad * params, abs=1024)


def test_pure_regime_makes_gradients_in_backward_on_remat_s_own_path():
    # llama-tiny (float32; h 64, 4 heads, 2 key/value groups of 16, MLP 176, vocabulary 128, 2 layers, untied):
    # a layer has qkv 64·128 + proj 64·64 + MLP 3·64·176 + two norms 2·64 = 46,208 parameters
    cfg = from_name("llama-tiny")
    mixed, pure = (make_problem(cfg, memory=2**30, regime=r) for r in ("mixed", "pure"))
    layer, head_side, embedding = 46_208 * 4, (64 + 128 * 64) * 4, 128 * 64 * 4
    assert mixed.fixed_parts["gradients"] == 4 * (2 * 46_208 + 2 * 128 * 64 + 64)      # held all step
    assert pure.fixed_parts["gradients"] == head_side       # the final norm's and the head's, before the layers'
    L = len(pure.layers)
    for i, (a, b) in enumerate(zip(mixed.layers, pure.layers)):
        for o, q in zip(a.options, b.options):
            expected = o.transient_bytes + (L - i) * layer           # layers i..L-1 have made their gradients
            if i == 0:                                                # the end: every gradient, the embedding's too
                expected = max(expected, L * layer + embedding - o.stored_bytes)
            assert q.transient_bytes == expected


def test_transformers_path_pure_regime_is_the_eager_measurement():
    # the pure regime on a bf16 model is what an eager step does: the same problem as the measured default
    small = dict(hidden_size=256, intermediate_size=512, num_attention_heads=8, num_key_value_heads=2)
    cfg = transformers.LlamaConfig(**{**{k: v for k, v in LLAMA.items() if k not in ("model_type", "torch_dtype")},
                                      **small})
    with FakeTensorMode(allow_non_fake_inputs=True):
        model = transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16).train()
        ids = torch.randint(0, 1024, (1, 128))
        costs = measure_model(model, (), {"input_ids": ids, "labels": ids}, find_blocks(model), gpu("a100-80gb"),
                              None, ("none", "full"))
    measured, pure = build_problem(costs, 2**34), build_problem(costs, 2**34, regime=resolve("pure", 2))
    assert [lay.options for lay in measured.layers] == [lay.options for lay in pure.layers]
    assert sum(measured.fixed_parts.values()) == sum(pure.fixed_parts.values())
    mixed = build_problem(costs, 2**34, regime=resolve("mixed", 2))
    n = costs.trainable_bytes // 2
    assert mixed.fixed_parts["gradients (held all step)"] == 4 * n and mixed.fixed_parts["optimizer state"] == 12 * n
    # the later blocks' gradients leave the transients (they are in the buffer); the last block has none after it
    for a, b in zip(measured.layers, mixed.layers):
        assert all(q.transient_bytes <= o.transient_bytes for o, q in zip(a.options, b.options))
    assert measured.layers[1].options == mixed.layers[1].options
    assert measured.layers[0].options[0].transient_bytes > mixed.layers[0].options[0].transient_bytes


def _least(err: str) -> int:
    return int(err.split("the smallest budget that works is ", 1)[1].split("(", 1)[1].split(" bytes)", 1)[0])


@pytest.mark.slow
def test_transformers_path_shards_the_state_and_names_what_would_fit(capsys, tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(LLAMA))
    common = ("--model", str(path), "--seq", "1024", "--hf")
    params = 2 * (4096 * (4096 + 2 * 1024) + 4096 * 4096 + 3 * 4096 * 14336 + 2 * 4096) + 2 * 1024 * 4096 + 4096
    sharded = _plan(capsys, *common, "--memory", "80GiB", "--dp", "4", "--zero", "3")
    # ZeRO-3 over 4 ranks: 18 B per parameter (mixed, bf16), each term a quarter (rounded up)
    assert sharded["memory"]["optimizer state"] == pytest.approx(12 * params / 4, abs=1024)
    assert sharded["memory"]["gradients (held all step)"] == pytest.approx(4 * params / 4, abs=1024)
    assert sharded["memory"]["parameters and buffers"] == pytest.approx(2 * params / 4, abs=1024)
    code = main(["plan", *common, "--memory", "6GiB", "--no-baselines"])
    out, err = capsys.readouterr()
    assert (code, out) == (3, "") and len(err.strip().splitlines()) == 1
    assert "s = 1024, b = 1; regime mixed" in err
    least = _least(err)
    # ZeRO-3 over n ranks saves (1 - 1/n) of the 18 B per parameter; the smallest power of two that fits 6 GiB
    n = next(d for d in (2 ** k for k in range(1, 11)) if least - 18 * params * (1 - 1 / d) <= 6 * 2**30)
    assert f"Fits 6.00 GiB with --dp {n} --zero 3 (" in err
    assert "--seq 128 (" in err         # a shorter sequence is measured too; the state alone does not fit 6 GiB
