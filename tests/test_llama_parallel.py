"""The TP/SP Llama layer (GQA, SwiGLU, RMSNorm, RoPE): one rank's shapes, real gloo ranks against the serial
layer (outputs and every gradient), and the planner's bytes per layer of Llama-3-70B at t = 8 with SP counted
by hand, tensor by tensor."""

import dataclasses
import json

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch._subclasses.fake_tensor import FakeTensorMode

from remat.cli import main
from remat.errors import UsageError
from remat.models.llama_parallel import ParallelLlamaLayer, build_llama_layer
from remat.models.presets import from_name
from remat.models.tensor_parallel import fake_process_group
from test_tensor_parallel import _check_numerics, _free_port

TINY = dict(dtype="float32", heads=4, kv_heads=2, hidden=64, ffn_hidden=96, seq=16, micro_batch=2)
LLAMA3_70B = {"model_type": "llama", "hidden_size": 8192, "intermediate_size": 28672, "num_attention_heads": 64,
              "num_key_value_heads": 8, "num_hidden_layers": 80, "vocab_size": 128256,
              "max_position_embeddings": 8192, "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
              "torch_dtype": "bfloat16", "tie_word_embeddings": False}


def _tiny():
    return dataclasses.replace(from_name("llama-tiny"), **TINY)


def test_one_rank_holds_its_heads_groups_and_mlp_columns():
    cfg = _tiny()
    with fake_process_group(2, rank=1) as group, FakeTensorMode():
        layer = build_llama_layer(cfg, group, sp=True)
        d = 64 // 4
        assert tuple(layer.attn.qkv.weight.shape) == ((4 // 2 + 2 * 2 // 2) * d, 64)   # 2 q heads + 1 k + 1 v
        assert tuple(layer.attn.proj.weight.shape) == (64, 64 // 2)
        assert tuple(layer.mlp.gate.weight.shape) == tuple(layer.mlp.up.weight.shape) == (96 // 2, 64)
        assert tuple(layer.mlp.down.weight.shape) == (64, 96 // 2)
        assert tuple(layer(torch.randn(16 // 2, 2, 64)).shape) == (8, 2, 64)


def test_a_split_the_layer_cannot_take_names_the_field():
    with fake_process_group(4) as group:   # 2 key/value groups cannot be split over 4 ranks
        with pytest.raises(UsageError) as exc:
            ParallelLlamaLayer(_tiny(), group)
    assert exc.value.field == "tp" and "kv_heads" in str(exc.value)


def _worker(rank: int, world: int, port: int, outdir: str, changes: dict) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        _check_numerics(world, rank, build=build_llama_layer, cfg=dataclasses.replace(_tiny(), **changes))
        with open(f"{outdir}/rank{rank}.json", "w") as f:
            json.dump({"ok": True}, f)
    finally:
        dist.destroy_process_group()


def gloo_ranks_match_serial(tmp_path, **changes) -> bool:
    """Two gloo ranks of the tiny Llama layer (``changes`` to its config) against the serial layer, under TP and
    TP + SP with every policy (test_tensor_parallel._check_numerics)."""
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["torch", "torch.distributed", "torch.utils.checkpoint", "torch._dynamo",
                                "remat.accounting", "remat.policies", "remat.models.llama_parallel"])
    mp.start_processes(_worker, args=(2, _free_port(), str(tmp_path), changes), nprocs=2, join=True,
                       start_method="forkserver")
    return all(json.loads((tmp_path / f"rank{r}.json").read_text())["ok"] for r in range(2))


@pytest.mark.slow
def test_gloo_ranks_match_the_serial_layer(tmp_path):
    assert gloo_ranks_match_serial(tmp_path)


def _llama3_70b_by_hand(t: int = 8) -> dict[str, int]:
    """Bytes one rank's Llama-3-70B layer keeps at s = 8192, b = 1, bf16, TP = t with SP, each term named.

    Sizes: h = 8192, a = 64 query heads and kv = 8 groups of d = 128, ffn f = 28672. The sequence shard is
    s/t tokens. The RMSNorm is transformers' LlamaRMSNorm: it saves its input upcast to fp32, the fp32 per-token
    rstd and the normalised input cast back to bf16 (for the weight's gradient)."""
    s, h, a, kv, d, f = 8192, 8192, 64, 8, 128, 28672
    shard = s // t * h
    norm = {"fp32 input": 4 * shard, "rstd": 4 * s // t, "bf16 normalised": 2 * shard}
    terms = {f"ln_{i}: {k}": v for i in (1, 2) for k, v in norm.items()}
    terms |= {
        "attn.qkv input (the sequence shard, all-gathered again in backward)": 2 * shard,
        "q after RoPE (a/t heads, whole sequence)": 2 * s * a // t * d,
        "k after RoPE (kv/t groups)": 2 * s * kv // t * d,
        "v (kv/t groups, copied out of the fused qkv output)": 2 * s * kv // t * d,
        "attention log-sum-exp (fp32, per head and token)": 4 * a // t * s,
        "attention output (= attn.proj's input)": 2 * s * a // t * d,
        "mlp.gate/up input (one sequence shard)": 2 * shard,
        "gate output (SiLU's input)": 2 * s * f // t,
        "SiLU output": 2 * s * f // t,
        "up output": 2 * s * f // t,
        "SiLU · up (mlp.down's input)": 2 * s * f // t,
    }
    return terms


@pytest.mark.slow
def test_llama3_70b_at_tp8_sp_plans_the_bytes_counted_by_hand(capsys, tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(LLAMA3_70B))
    code = main(["plan", "--model", str(path), "--tp", "8", "--sp", "--pp", "4", "--seq", "8192",
                 "--memory", "80GiB", "--format", "json", "--no-baselines"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    got = out["settings"]["bytes_per_micro_batch"]
    terms = _llama3_70b_by_hand()
    none = sum(terms.values())
    assert got["none"] == pytest.approx(none, rel=0.02)
    # selective is op-level (a fused-attention layer): the checkpoint keeps the layer's input shard and torch's
    # selective-checkpoint cache every matmul and attention output, under SP the row-parallel partial sums over the
    # whole sequence before each reduce-scatter too — more than none keeps, so the plan never picks it here
    s, h, a, kv, d, f, t = 8192, 8192, 64, 8, 128, 28672, 8
    op_level = {"layer input shard": 2 * s // t * h, "fused qkv output": 2 * s * (a + 2 * kv) // t * d,
                "attention output": 2 * s * a // t * d, "attention log-sum-exp": 4 * a // t * s,
                "attn.proj partial sum (whole sequence)": 2 * s * h, "gate/up output": 2 * s * 2 * f // t,
                "mlp.down partial sum (whole sequence)": 2 * s * h}
    assert got["selective"] == sum(op_level.values()) > got["none"]
    assert out["counts"] == {"none": 20}
    assert got["full"] == 2 * 8192 // 8 * 8192          # the layer's input shard
    # one rank's parameters on the first of p = 4 stages: 20 layers of qkv h·(h + 2·kv·d)/t, proj h²/t,
    # gate/up/down 3·h·f/t and two norms of h; the vocabulary-parallel embedding v·h/t; 2 bytes each
    h, f, v = 8192, 28672, 128256
    per_layer = (h * (h + 2 * 8 * 128) + h * h + 3 * h * f) // 8 + 2 * h
    assert out["memory"]["weights"] == 2 * (20 * per_layer + v * h // 8)
    # the first stage holds no head: outside the layers the token ids, 4 micro-batches in flight, and the RoPE
    # tables remat's runtime layer keeps per layer: cos and sin [8192 positions, d = 128] in bf16, 20 layers
    assert out["settings"]["outside_terms"] == {"embedding (measured)": 4 * 8 * 8192,
                                                "the layers' buffers (RoPE tables of remat's runtime layer)":
                                                    20 * 2 * 8192 * 128 * 2}
