"""The planner's measured cost path (non-GPT models, remat.planner.measured): validated against the closed
forms on the GPT layer, and `remat plan` for Llama models."""

from __future__ import annotations

import json

import pytest

from conftest import run_cli
from remat.formulas import korthikanti
from remat.models.presets import from_name
from remat.planner.costs import Settings, build_problem
from remat.timemodel.gpus import gpu
from remat.planner.measured import measured_costs


def settings(**kw):
    return Settings(gpu=gpu("a100-80gb"), budget_bytes=80 * 2**30, **kw)


def run(capsys, *argv):
    return run_cli(capsys, "plan", *argv)


def test_measured_gpt_layer_equals_table2_plus_layernorm_statistics():
    """gpt-tiny at 16 bits: the measured per-layer bytes are Korthikanti's (Table 2, as the closed-form path
    uses them) plus the LayerNorm mean and rstd the paper ignores: 2 LayerNorms × 2 × sb elements (bf16 on
    the CPU); full keeps the layer input only (2sbh). FLOPs are Appendix A's."""
    cfg = from_name("gpt-tiny", dtype="bfloat16")
    s, b, h, a = cfg.seq, cfg.micro_batch, cfg.hidden, cfg.heads
    st = settings()
    closed = build_problem(cfg, st)
    assert closed.meta["cost_source"] == "closed form (Korthikanti Table 2)"
    measured = measured_costs(cfg, st)
    ln_stats = 2 * 2 * s * b * 2
    extra = {"none": ln_stats, "selective": ln_stats, "full": 0}
    for mode in ("none", "selective", "full"):
        formula = closed.meta["bytes_per_micro_batch"][mode]
        assert formula == korthikanti.layer_bytes(s, b, h, a, 1, False, mode)
        assert measured["per_micro_batch"][mode]["stored"] == formula + extra[mode]
    assert measured["per_micro_batch"]["offload"]["host"] == korthikanti.layer_bytes(s, b, h, a) + ln_stats
    assert measured["per_micro_batch"]["full"]["flops"] == korthikanti.recompute_flops(s, b, h, "full")
    assert measured["per_micro_batch"]["selective"]["flops"] == korthikanti.recompute_flops(s, b, h, "selective")
    assert measured["per_micro_batch"]["none"]["time"] == closed.layers[0].option("none").time_s  # one roofline
    assert measured["params"]["per_layer"] == korthikanti.params_per_layer(h)


def test_llama_tiny_plan_is_feasible_and_measured(capsys):
    code, out, _ = run(capsys, "--model", "llama-tiny", "--memory", "3GiB", "--format", "json",
                       "--no-baselines")
    assert code == 0
    doc = json.loads(out)
    assert doc["feasible"] is True and len(doc["layers"]) == 2
    assert doc["predicted"]["peak_bytes"] <= doc["budget_bytes"]
    assert sum(doc["memory"].values()) == doc["predicted"]["peak_bytes"]
    assert doc["settings"]["cost_source"] == "measured (fake tensors)"
    per_layer = doc["settings"]["bytes_per_micro_batch"]
    assert per_layer["none"] >= per_layer["selective"] > per_layer["full"] > 0


@pytest.mark.slow
def test_llama_tensor_parallelism_it_cannot_split_is_refused(capsys):
    # llama-tiny has 2 key/value groups: t = 4 cannot split them (Megatron-LM's rule), t = 2 can
    code, out, err = run(capsys, "--model", "llama-tiny", "--tp", "4", "--memory", "3GiB")
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and "--tp" in err and "kv_heads" in err
    code, _, err = run(capsys, "--model", "llama-tiny", "--sp", "--memory", "3GiB")
    assert code == 2 and "--sp" in err
    code, out, _ = run(capsys, "--model", "llama-tiny", "--tp", "2", "--sp", "--memory", "3GiB", "--format", "json",
                       "--no-baselines")
    doc = json.loads(out)
    assert code == 0 and doc["settings"]["t"] == 2
    # one rank's parameters by hand (h 64, 4 heads and 2 kv groups of d 16, ffn 176, v 128, 2 layers, untied):
    # per layer qkv 64·(64 + 2·32)/2 + proj 64·64/2 + gate/up/down 3·64·176/2 + two norms 64 = 23,168; the
    # vocabulary-parallel embedding and head 128·64/2 each, the final norm 64 whole; 4 bytes per weight (a float32
    # preset)
    assert doc["memory"]["weights"] == 4 * (2 * 23168 + 4096 + 64 + 4096)


@pytest.mark.slow
def test_llama3_8b_plans(capsys):
    # one GPU without ZeRO: 18 bytes per parameter alone exceed 80 GiB -> infeasible (exit 3) with the minimum
    code, _, err = run(capsys, "--model", "llama3-8b", "--memory", "80GiB", "--format", "json",
                       "--no-baselines")
    assert code == 3 and "smallest budget" in err
    code, out, _ = run(capsys, "--model", "llama3-8b", "--memory", "80GiB", "--dp", "8", "--zero", "1",
                       "--format", "json", "--no-baselines")
    assert code == 0
    doc = json.loads(out)
    assert doc["feasible"] and doc["predicted"]["peak_bytes"] <= doc["budget_bytes"]
    assert len(doc["layers"]) == 32
