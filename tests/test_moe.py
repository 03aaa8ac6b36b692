"""remat's mixture-of-experts layer (remat.models.moe): the same numbers as transformers' MixtralSparseMoeBlock,
FLOPs by hand, one TP rank's shapes and bytes by hand, gloo ranks against the serial layer, expert parallelism's
parameters, state and time by hand, and bad settings named."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch
import torch.nn.functional as F
from torch._subclasses.fake_tensor import FakeTensorMode

from remat.cli import main
from remat.errors import UsageError
from remat.measure.step import measure
from remat.models.config import validate
from remat.models.llama_parallel import build_llama_layer
from remat.models.moe import SparseMoE, grouped_mm_loop
from remat.models.presets import from_name
from remat.models.tensor_parallel import fake_process_group
from remat.planner import measured
from remat.planner.costs import Settings
from remat.planner.regime import resolve
from remat.timemodel.gpus import GPUS
from remat.timemodel.layer import expert_exchange_s
from test_llama_family_bytes import MIXTRAL_8X7B
from test_llama_parallel import gloo_ranks_match_serial

TINY = dict(dtype="float32", heads=4, kv_heads=2, hidden=64, ffn_hidden=32, seq=16, micro_batch=2, experts=4,
            top_k=2)


def _tiny(**changes):
    return dataclasses.replace(from_name("llama-tiny"), **{**TINY, **changes})


def test_moe_block_computes_what_transformers_mixtral_block_computes():
    """Same weights, same input: output, input gradient and every weight gradient equal transformers' block
    (fp32; transformers takes [b, s, h], remat [s, b, h])."""
    transformers = pytest.importorskip("transformers")
    from transformers.models.mixtral.modeling_mixtral import MixtralSparseMoeBlock
    cfg = _tiny()
    torch.manual_seed(0)
    ours = SparseMoE(cfg)
    hf_cfg = transformers.MixtralConfig(hidden_size=64, intermediate_size=32, num_local_experts=4,
                                        num_experts_per_tok=2)
    theirs = MixtralSparseMoeBlock(hf_cfg)
    with torch.no_grad():
        theirs.gate.weight.copy_(ours.router.weight)
        theirs.experts.gate_up_proj.copy_(ours.experts.gate_up_proj)
        theirs.experts.down_proj.copy_(ours.experts.down_proj)
    x = torch.randn(16, 2, 64)
    w = torch.randn(16, 2, 64)
    x_ours, x_theirs = x.clone().requires_grad_(), x.transpose(0, 1).contiguous().requires_grad_()
    y_ours, y_theirs = ours(x_ours), theirs(x_theirs)
    (y_ours * w).sum().backward()
    (y_theirs * w.transpose(0, 1)).sum().backward()
    torch.testing.assert_close(y_ours, y_theirs.transpose(0, 1), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(x_ours.grad, x_theirs.grad.transpose(0, 1), rtol=1e-5, atol=1e-6)
    for a, b in ((ours.router.weight, theirs.gate.weight), (ours.experts.gate_up_proj, theirs.experts.gate_up_proj),
                 (ours.experts.down_proj, theirs.experts.down_proj)):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-5, atol=1e-6)


def test_moe_flops_are_a_dense_swiglu_of_width_k_f_plus_the_router():
    """Each routed row runs one expert's SwiGLU (3 GEMMs of h·f): the k·s·b rows cost what a dense SwiGLU of width
    k·f costs on s·b tokens; the router adds its h·E GEMM: 2·s·b·h·E forward, twice that backward."""
    s, b, h, experts, k, f = 512, 2, 256, 8, 2, 384
    moe = dataclasses.replace(from_name("llama-tiny"), hidden=h, heads=4, kv_heads=2, ffn_hidden=f, experts=experts,
                              top_k=k, seq=s, micro_batch=b, layers=2, dtype="bfloat16", max_positions=s)
    dense = dataclasses.replace(moe, experts=0, top_k=0, ffn_hidden=k * f)
    got, base = (measure(c, "none", "fake", timing=False) for c in (moe, dense))
    router = 2 * s * b * h * experts * 2     # two layers
    assert got["flops_forward_layers"] - base["flops_forward_layers"] == router
    assert got["flops_backward"] - base["flops_backward"] == 2 * router


def test_one_rank_holds_every_experts_slice_and_the_whole_router():
    cfg = _tiny()
    with fake_process_group(2, rank=1) as group, FakeTensorMode():
        layer = build_llama_layer(cfg, group, sp=True)
        assert tuple(layer.mlp.router.weight.shape) == (4, 64)
        assert tuple(layer.mlp.experts.gate_up_proj.shape) == (4, 2 * 32 // 2, 64)
        assert tuple(layer.mlp.experts.down_proj.shape) == (4, 64, 32 // 2)
        assert tuple(layer(torch.randn(16 // 2, 2, 64)).shape) == (8, 2, 64)


@pytest.mark.slow
def test_gloo_ranks_match_the_serial_moe_layer(tmp_path):
    """TP and TP + SP ranks (every policy) give the serial MoE layer's output and gradients."""
    assert gloo_ranks_match_serial(tmp_path, ffn_hidden=32, experts=4, top_k=2)


def mixtral_rank_by_hand(s: int, t: int) -> dict[str, int]:
    """Bytes one TP rank's Mixtral-8x7B layer keeps with SP, bf16, b = 1, each term named: the attention half as
    Llama's (tests/test_llama_parallel.py), the router on the sequence shard, then the experts on the whole
    gathered sequence (r = k·s routed rows) with every expert's f/t slice."""
    h, a, kv, d, f, experts, k = 4096, 32, 8, 128, 14336, 8, 2
    shard, r = s // t, k * s
    norm = 4 * shard * h + 4 * shard + 2 * shard * h
    return {
        "two RMSNorms (fp32 input, fp32 1/rms, bf16 normalised)": 2 * norm,
        "attn.qkv input (the sequence shard)": 2 * shard * h,
        "q, k, v after RoPE (a/t heads, kv/t groups, whole sequence)": 2 * s * (a + 2 * kv) // t * d,
        "attention output and log-sum-exp (fp32)": 2 * s * a // t * d + 4 * a // t * s,
        "router input (the shard)": 2 * shard * h,
        "router softmax (fp32) on the shard": 4 * shard * experts,
        "top-k ids (int64) and weights' sum and normalised weights (fp32) on the shard": 8 * shard * k
        + 4 * shard + 4 * shard * k,
        "three int64 index vectors of the routed rows": 3 * 8 * r,
        "grouped_mm offsets (int32)": 4 * experts,
        "routed input rows": 2 * r * h,
        "gate/up output (f/t each)": 2 * r * 2 * f // t,
        "SiLU and SiLU · up": 2 * 2 * r * f // t,
        "routing weight per row (fp32)": 4 * r,
        "down output (partial sums, h wide)": 2 * r * h,
    }


@pytest.mark.slow
def test_mixtral_at_tp8_sp_plans_the_bytes_counted_by_hand(capsys, tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**MIXTRAL_8X7B, "num_hidden_layers": 32, "vocab_size": 32000}))
    code = main(["plan", "--model", str(path), "--tp", "8", "--sp", "--pp", "4", "--seq", "4096",
                 "--memory", "80GiB", "--gpu", "h100-80gb", "--format", "json", "--no-baselines"])
    out, err = capsys.readouterr()
    assert code == 0, err
    got = json.loads(out)["settings"]["bytes_per_micro_batch"]["none"]
    assert got == pytest.approx(sum(mixtral_rank_by_hand(4096, 8).values()), rel=0.02)


def _plan(capsys, tmp_path, *flags) -> dict:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**MIXTRAL_8X7B, "num_hidden_layers": 4}))
    code = main(["plan", "--model", str(path), "--seq", "4096", "--memory", "400GiB", "--gpu", "h100-80gb",
                 "--format", "json", "--no-baselines", *flags])
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)


@pytest.mark.slow
def test_expert_parallelism_divides_the_experts_and_their_state(capsys, tmp_path):
    """--ep 4 --dp 8 --zero 1: each rank holds 2 of the 8 experts; the optimizer state of the experts is sharded
    over the dp/ep = 2 ranks that hold the same experts, the rest over all 8 (hand count, 4 layers)."""
    h, f, experts, v, kv_width, layers = 4096, 14336, 8, 1024, 8 * 128, 4
    expert = 3 * h * f
    dense_layer = h * (h + 2 * kv_width) + h * h + h * experts + 2 * h       # attention, router, two norms
    outside = 2 * v * h + h                                                   # embedding, untied head, final norm
    doc = _plan(capsys, tmp_path, "--ep", "4", "--dp", "8", "--zero", "1")
    weights = layers * (dense_layer + experts // 4 * expert) + outside
    assert doc["memory"]["weights"] == 2 * weights
    assert doc["memory"]["gradients"] == 4 * weights
    dense = layers * dense_layer + outside
    assert doc["memory"]["optimizer"] == -(-12 * dense // 8) + 12 * layers * experts // 4 * expert // 2


def test_expert_state_is_sharded_over_the_ranks_holding_the_same_experts(monkeypatch):
    """The tiny MoE (h 64, 4 heads and 2 kv groups of d 16, E 4 experts of f 32, 2 layers, v 128, untied) at --ep 2
    --dp 4, mixed regime (2 B weights, 4 B gradients, 12 B optimizer): each rank holds E/ep = 2 experts, whose state
    ZeRO shards over dp/ep = 2 ranks (the expert-data-parallel group), the rest over all 4. Parameters by hand: per
    layer attention 64·64 + 2·64·32 + 64·64 = 12,288, router 64·4, two norms 2·64 (12,672 dense), an expert
    3·64·32 = 6,144; outside, embedding and head 128·64 each and the final norm 64. So dense 2·12,672 + 16,448 =
    41,792 and experts 2 layers × 2 × 6,144 = 24,576 on this GPU. The layer's pricing is stubbed: only the
    parameters are counted (remat.planner.measured._facts, under fake tensors)."""
    monkeypatch.setattr(measured, "measure_layer", lambda cfg: {**measured._facts(dataclasses.replace(cfg, layers=1)),
                                                                "stored": None, "recompute_flops": None})
    for name in ("layer_seconds", "op_level_transient", "backward_workspace", "head_floor", "outside_seconds"):
        monkeypatch.setattr(measured, name, lambda *args, **kwargs: None)
    for name in ("policy_costs", "outside"):
        monkeypatch.setattr(measured, name, lambda *args, **kwargs: {})
    expected = {3: {"weights": 2 * 41792 // 4 + 2 * 24576 // 2,         # 20,896 + 24,576
                    "gradients": 4 * 41792 // 4 + 4 * 24576 // 2,       # 41,792 + 49,152
                    "optimizer": 12 * 41792 // 4 + 12 * 24576 // 2},    # 125,376 + 147,456
                1: {"weights": 2 * 66368, "gradients": 4 * 66368, "optimizer": 12 * 41792 // 4 + 12 * 24576 // 2}}
    for zero, state in expected.items():
        st = Settings(gpu=GPUS["a100-80gb"], budget_bytes=80 * 2**30, dp=4, zero=zero, regime=resolve("mixed", 2))
        got = measured.measured_costs(_tiny(layers=2, ep=2), st)
        assert got["params"]["on_this_gpu"] == 41792 + 24576
        assert got["model_state"] == state


@pytest.mark.slow
def test_expert_parallel_exchange_is_priced_by_hand(capsys, tmp_path):
    """Two all-to-alls per pass of the k·s·b routed rows, (ep − 1)/ep of them leaving the rank, over NVLink within
    the node; forward and backward both pay it."""
    cfg = from_name("llama-tiny", hidden=4096, heads=32, kv_heads=8, ffn_hidden=14336, experts=8, top_k=2, seq=4096,
                    micro_batch=1, ep=4, dtype="bfloat16", max_positions=4096)
    gpu = GPUS["h100-80gb"]
    rows_bytes = 2 * 4096 * 4096 * 2
    assert expert_exchange_s(cfg, gpu) == pytest.approx(
        2 * rows_bytes * 3 / 4 / (gpu.nvlink_bytes_per_s * gpu.nvlink_efficiency))
    with_ep = _plan(capsys, tmp_path, "--ep", "4", "--dp", "4")
    without = _plan(capsys, tmp_path, "--dp", "4")
    step = lambda doc: doc["predicted"]["step_time_s"]
    micro_batches = with_ep["settings"]["micro_batches"]
    assert step(with_ep) - step(without) == pytest.approx(2 * 4 * micro_batches * expert_exchange_s(cfg, gpu),
                                                          rel=1e-6)


@pytest.mark.parametrize("changes, field", [
    (dict(top_k=5), "top_k"), (dict(top_k=0), "top_k"), (dict(experts=1), "experts"), (dict(ep=3), "ep"),
    (dict(experts=0, top_k=0, ep=2), "ep"),
])
def test_a_moe_the_layer_cannot_take_names_the_field(changes, field):
    with pytest.raises(UsageError) as exc:
        validate(_tiny(**changes))
    assert exc.value.field == field


def test_ep_must_divide_dp(capsys, tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(MIXTRAL_8X7B))
    code = main(["plan", "--model", str(path), "--ep", "4", "--dp", "2", "--memory", "80GiB"])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("remat plan: error: --ep: ") and len(err.strip().splitlines()) == 1


@pytest.mark.slow      # 20 s: the message weighs every lever (--dp, --tp, --ep, --seq), each planned again
def test_an_infeasible_moe_plan_names_the_expert_parallelism_that_would_help(capsys, tmp_path):
    """Mixtral-8x7B (32 layers) at 80 GiB with --dp 8 --zero 1 does not fit; the message gives --ep 8 with the budget
    it needs, and planning with --ep 8 itself (second method) has that smallest budget."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**MIXTRAL_8X7B, "num_hidden_layers": 32}))
    flags = ["plan", "--model", str(path), "--seq", "4096", "--dp", "8", "--zero", "1", "--no-baselines"]
    assert main([*flags, "--memory", "80GiB"]) == 3
    err = capsys.readouterr().err
    need = err.split("--ep 8 (", 1)[1].split(")", 1)[0]
    assert main([*flags, "--ep", "8", "--memory", "1GiB"]) == 3
    err = capsys.readouterr().err
    assert f"the smallest budget that works is {need}" in err


def test_the_per_group_loop_equals_torchs_grouped_gemm():
    """The loop a float32 model runs on a GPU (torch's CUDA grouped GEMM is bfloat16-only) against torch's kernel
    on the CPU, for both layouts the experts use (forward rows split; weight gradient M split), an empty group
    included."""
    a, b = torch.randn(12, 16), torch.randn(3, 16, 8)
    offs = torch.tensor([5, 5, 12], dtype=torch.int32)
    torch.testing.assert_close(grouped_mm_loop(a, b, offs), F.grouped_mm(a, b, offs=offs))
    a2, b2 = torch.randn(16, 12), torch.randn(12, 8)
    torch.testing.assert_close(grouped_mm_loop(a2, b2, offs), F.grouped_mm(a2, b2, offs=offs))
