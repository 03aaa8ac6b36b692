"""The planner's cost model against the Korthikanti formulas it is built from, and its bad-input errors."""

from __future__ import annotations

import dataclasses

import pytest

from remat.errors import UsageError
from remat.formulas import korthikanti
from remat.formulas import offload as offload_formulas
from remat.models.presets import from_name
from remat.models.transformer import build_model
from remat.planner import make_problem
from remat.planner.costs import Settings, build_problem, in_flight, model_state, step_multiplier
from remat.timemodel.gpus import GPUS, gpu


def settings(**kw):
    return Settings(gpu=gpu("a100-80gb"), budget_bytes=80 * 2**30, **kw)


@pytest.mark.parametrize("name", ["gpt-22b", "gpt3-175b", "mt-nlg-530b", "gpt-1t"])
@pytest.mark.parametrize("sp", [False, True])
def test_stored_bytes_are_table2_times_micro_batches_in_flight(name, sp):
    cfg = from_name(name)
    problem = build_problem(cfg, settings(sp=sp))
    s, b, h, a, t = cfg.seq, cfg.micro_batch, cfg.hidden, cfg.heads, cfg.tp
    flight = in_flight(cfg)
    assert len(problem.layers) == cfg.layers // cfg.pp
    for layer, n in zip(problem.layers, flight):
        for mode in ("none", "selective", "full"):
            assert layer.option(mode).stored_bytes == n * korthikanti.layer_bytes(s, b, h, a, t, sp, mode)
        none = korthikanti.layer_bytes(s, b, h, a, t, sp, "none")
        assert layer.option("offload").stored_bytes == 0
        assert layer.option("offload").offload_bytes == n * none
        assert layer.option("full").transient_bytes == none - korthikanti.layer_bytes(s, b, h, a, t, sp, "full")
    # the first stage holds the paper's L·(1 + (p − 1)/(p·m)) layers' worth (Eq. 5 with §4.2.3's factor)
    per_layer = korthikanti.layer_bytes(s, b, h, a, t, sp, "none")
    assert sum(flight) * per_layer == korthikanti.first_stage_bytes(per_layer, cfg.layers, cfg.pp, cfg.interleave)
    assert problem.prefix == (cfg.pp == 1)


def test_interleaved_first_chunk_holds_more_micro_batches():
    cfg = from_name("gpt3-175b")                      # p = 8, m = 3: 12 layers per GPU in 3 chunks of 4
    assert in_flight(cfg) == [15] * 4 + [8] * 8
    assert in_flight(dataclasses.replace(cfg, interleave=1)) == [8] * 12


def test_1f1b_first_stage_holds_min_p_and_n_micro_batches():
    # Megatron-LM forward_backward_pipelining_without_interleaving on pipeline rank 0: min(p − 1, N) warm-up
    # forwards, then one more before the first backward when any is left, so min(p, N) are in flight
    from remat.planner.costs import micro_batches
    cfg = from_name("gpt3-175b", interleave=1)                 # p = 8, b = 1: 96/8 = 12 layers on the GPU
    for global_batch, n in ((1, 1), (2, 2), (7, 7), (8, 8), (9, 8), (64, 8)):
        one = dataclasses.replace(cfg, global_batch=global_batch)
        assert micro_batches(one) == global_batch and in_flight(one) == [n] * 12, global_batch
    assert in_flight(dataclasses.replace(cfg, global_batch=64), dp=32) == [2] * 12   # N = 64/(1·32) = 2
    assert in_flight(dataclasses.replace(cfg, pp=1)) == [1] * 96                    # no pipeline: one at a time
    assert step_multiplier(dataclasses.replace(cfg, global_batch=2)) == 2 + 7      # N + (p − 1)/m


def test_the_issue_command_keeps_two_micro_batches_per_layer(capsys):
    import json

    from conftest import run_cli
    code, out, _ = run_cli(capsys, "plan", "--model", "gpt3-175b", "--tp", "8", "--sp", "--pp", "8",
                           "--interleave", "1", "--micro-batch", "1", "--global-batch", "2", "--memory", "80GiB",
                           "--no-baselines", "--format", "json")
    assert code == 0
    plan = json.loads(out)
    meta = plan["settings"]
    assert (meta["micro_batches"], meta["in_flight"], meta["step_multiplier"]) == (2, [2] * 12, 9.0)
    per_mb = meta["bytes_per_micro_batch"]
    assert plan["memory"]["stored activations (layers)"] == sum(2 * per_mb[layer["policy"]] for layer in plan["layers"])


@pytest.mark.parametrize("p, m, global_batch, expected", [
    # Megatron-LM forward_backward_pipelining_with_interleaving, rank 0: N = p runs all N·m forwards first (p per
    # chunk); otherwise 2(p − 1) + (m − 1)p warm-up forwards + 1, forward k going to chunk (k mod pm) // p
    (8, 3, 8, [8, 8, 8]),            # N = p: every chunk holds its 8
    (8, 3, 16, [15, 8, 8]),          # 14 + 16 + 1 = 31 forwards: 8, 8, 8 then 7 more in chunk 0
    (8, 3, 64, [15, 8, 8]),          # the paper's 2p − 1, p, p
    (4, 2, 4, [4, 4]),               # N = p
    (4, 2, 8, [7, 4]),               # 6 + 4 + 1 = 11 forwards: 4, 4, then 3 in chunk 0
    (2, 2, 2, [2, 2]),               # N = p = 2 (2p − 1 = 3 would exceed N)
    (2, 2, 4, [3, 2]),               # 2 + 2 + 1 = 5 forwards: 2, 2, 1
])
def test_interleaved_counts_by_hand_and_capped_by_n(p, m, global_batch, expected):
    cfg = from_name("gpt3-175b", pp=p, interleave=m, global_batch=global_batch)    # b = 1: N = global batch
    per_chunk = 96 // p // m
    assert in_flight(cfg) == [n for n in expected for _ in range(per_chunk)]
    per_layer = korthikanti.layer_bytes(cfg.seq, 1, cfg.hidden, cfg.heads, cfg.tp, True, "none")
    if global_batch >= 2 * p:        # the paper's factor L·(1 + (p − 1)/(p·m)) once N ≥ 2p
        assert sum(in_flight(cfg)) * per_layer == korthikanti.first_stage_bytes(per_layer, 96, p, m)


@pytest.mark.parametrize("pp, interleave, global_batch, dp", [(8, 3, 2, 1), (8, 3, 12, 1), (8, 3, 64, 16)])
def test_interleaved_schedule_needs_micro_batches_a_multiple_of_p(pp, interleave, global_batch, dp):
    cfg = from_name("gpt3-175b", pp=pp, interleave=interleave, global_batch=global_batch)
    with pytest.raises(UsageError) as err:
        build_problem(cfg, settings(dp=dp))
    assert err.value.field == "--global-batch" and "\n" not in str(err.value)
    for flag in ("--interleave", "--pp", "--micro-batch", "--dp", "num_microbatches % pipeline_model_parallel_size"):
        assert flag in str(err.value)
    build_problem(dataclasses.replace(cfg, interleave=1), settings(dp=dp))      # 1F1B takes any N


def test_interleaved_n_not_a_multiple_of_p_exits_2_with_one_line(capsys):
    from conftest import run_cli
    code, out, err = run_cli(capsys, "plan", "--model", "gpt3-175b", "--sp", "--global-batch", "2",
                             "--memory", "80GiB", "--no-baselines")
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert "--global-batch" in err and "--interleave 3" in err and "--pp 8" in err


def test_first_stage_parameters_by_hand():
    # Megatron's sharding on one GPU of the first stage, t = 8 (korthikanti.params_per_layer / params_per_gpu):
    # per layer QKV (3h² + 3h)/t, projection h²/t + h (bias replicated), fc1 (4h² + 4h)/t, fc2 4h²/t + h,
    # two LayerNorms 2·2h (replicated) = (12h² + 7h)/t + 6h; word embedding v·h/t (vocabulary-parallel),
    # position embedding s·h (replicated, first stage only); the final LayerNorm 2h only when p = 1 (it sits on
    # the last stage); the output layer shares the word embedding.
    # GPT-3 175B (Table 3: h = 12288, L = 96, p = 8, s = 2048, v = 51200): 12 layers on the first stage
    per_layer = (12 * 12288**2 + 7 * 12288) // 8 + 6 * 12288
    assert per_layer == 226_503_168 + 73_728 == 226_576_896
    total = 12 * per_layer + 51200 * 12288 // 8 + 2048 * 12288
    assert total == 2_718_922_752 + 78_643_200 + 25_165_824 == 2_822_731_776
    assert korthikanti.params_per_gpu(12288, 96, 51200, 2048, 8, 8) == 2_822_731_776
    assert model_state(from_name("gpt3-175b"), settings())["weights"] == 2 * 2_822_731_776
    # 22B (h = 6144, L = 48, p = 1): all 48 layers, both embeddings and the final LayerNorm
    per_layer = (12 * 6144**2 + 7 * 6144) // 8 + 6 * 6144
    assert per_layer == 56_628_480 + 36_864 == 56_665_344
    total = 48 * per_layer + 51200 * 6144 // 8 + 2048 * 6144 + 2 * 6144
    assert total == 2_719_936_512 + 39_321_600 + 12_582_912 + 12_288 == 2_771_853_312
    assert korthikanti.params_per_gpu(6144, 48, 51200, 2048, 8, 1) == 2_771_853_312
    assert model_state(from_name("gpt-22b"), settings())["weights"] == 2 * 2_771_853_312


def test_times_follow_the_roofline_model_and_the_break_even_model():
    """Per-layer seconds are the roofline's (remat.timemodel.predict) × the step multiplier; the roofline is
    never below the FLOP-only time (Appendix A FLOPs at the achievable rate), and selective costs more than
    its FLOP share because softmax and dropout are memory-bound."""
    from remat.timemodel import predict
    cfg = from_name("gpt3-175b")
    st = settings(sp=True)
    problem = build_problem(cfg, st)
    assert problem.meta["time_source"] == "roofline model (remat.timemodel)"
    s, b, h, t = cfg.seq, cfg.micro_batch, cfg.hidden, cfg.tp
    rate, steps = st.gpu.flops_per_s, step_multiplier(cfg)
    assert steps == 64 + 7 / 3
    times = {mode: predict(cfg, st.gpu, mode, t, True) for mode in ("none", "selective", "full")}
    layer = problem.layers[0]
    for mode, lt in times.items():
        assert layer.option(mode).time_s == pytest.approx(steps * lt.combined_s)
    fwd = korthikanti.layer_forward_flops(s, b, h) / t / rate
    assert times["none"].combined_s > 3 * fwd
    flop_share = korthikanti.core_attn_forward_flops(s, b, h) / t / rate
    assert times["selective"].recompute_s > 2 * flop_share
    none = times["none"]
    exposed = offload_formulas.exposed_offload_s(korthikanti.layer_bytes(s, b, h, cfg.heads, t, True, "none"), 14,
                                                 none.forward_s, none.backward_s, st.gpu.link)
    assert layer.option("offload").time_s == pytest.approx(steps * (none.combined_s + exposed))
    assert layer.option("full").recompute_flops == 64 * korthikanti.layer_forward_flops(s, b, h) // t


def test_model_state_bytes_and_zero_sharding():
    cfg = from_name("gpt3-175b")
    n = korthikanti.params_per_gpu(cfg.hidden, cfg.layers, cfg.vocab, cfg.seq, cfg.tp, cfg.pp)
    plain = model_state(cfg, settings())
    assert sum(plain.values()) == n * korthikanti.BYTES_PER_PARAM
    zero3 = model_state(cfg, settings(zero=3, dp=8))
    assert zero3 == {k: -(-v // 8) for k, v in plain.items()}
    zero1 = model_state(cfg, settings(zero=1, dp=8))
    assert zero1["weights"] == plain["weights"] and zero1["optimizer"] == -(-plain["optimizer"] // 8)


def test_outside_terms_and_head_floor_only_on_a_single_stage():
    cfg = from_name("gpt-22b")                         # p = 1: the head is on this GPU
    problem = build_problem(cfg, settings(sp=True))
    s, b, h, v, t = cfg.seq, cfg.micro_batch, cfg.hidden, cfg.vocab, cfg.tp
    assert problem.fixed_parts["outside layers (§4.3)"] == \
        sum(korthikanti.outside_layer_bytes(s, b, h, v, t, 1, True).values())
    assert problem.transient_floor_bytes == 4 * s * b * v // t
    assert build_problem(from_name("gpt3-175b"), settings()).transient_floor_bytes == 0


def test_gpu_presets_and_overrides():
    assert {"a100-80gb", "h100-80gb", "h200-141gb", "a100-40gb", "h100-pcie-80gb", "rtx4090-24gb"} <= set(GPUS)
    g = gpu("h100-80gb", achievable=0.4, link_bytes_per_s=10e9)
    assert g.flops_per_s == pytest.approx(989e12 * 0.4) and g.link.bw_d2h == 10e9
    with pytest.raises(UsageError, match="--gpu"):
        gpu("v100")
    with pytest.raises(UsageError, match="achievable"):
        gpu("a100-80gb", achievable=1.5)


@pytest.mark.parametrize("kwargs, field", [
    (dict(zero=4), "zero"), (dict(dp=0), "dp"), (dict(reserve_bytes=-1), "reserve_bytes"),
    (dict(policies=("none", "recompute")), "policies"),
])
def test_bad_settings_name_the_field(kwargs, field):
    with pytest.raises(UsageError, match=field):
        build_problem(from_name("gpt3-175b"), settings(**kwargs))


def test_bad_models_name_the_field():
    with pytest.raises(UsageError, match="pp"):
        build_problem(from_name("gpt3-175b", pp=5), settings())
    with pytest.raises(UsageError, match="--tp.*kv_heads"):   # t = 4 cannot split llama-tiny's 2 kv groups
        make_problem(from_name("llama-tiny", tp=4))


def test_model_state_counts_the_position_table_not_the_trained_length():
    """gpt-tiny trained at s = 16 holds its whole 64-row position table: the weights are 2 bytes per parameter
    the torch model really has (a second method: counting them), whatever s is."""
    cfg = from_name("gpt-tiny", seq=16)
    assert cfg.seq < cfg.max_positions
    counted = sum(p.numel() for p in build_model(cfg).parameters())
    state = model_state(cfg, settings())
    assert (state["weights"], state["gradients"], state["optimizer"]) == (2 * counted, 4 * counted, 12 * counted)
