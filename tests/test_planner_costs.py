"""The planner's cost model against the Korthikanti formulas it is built from, and its bad-input errors."""

from __future__ import annotations

import dataclasses

import pytest

from remat.errors import UsageError
from remat.formulas import korthikanti
from remat.formulas import offload as offload_formulas
from remat.models.presets import from_name
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


def test_times_follow_appendix_a_flops_and_the_break_even_model():
    cfg = from_name("gpt3-175b")
    st = settings(sp=True)
    problem = build_problem(cfg, st)
    s, b, h, t = cfg.seq, cfg.micro_batch, cfg.hidden, cfg.tp
    rate, steps = st.gpu.flops_per_s, step_multiplier(cfg)
    assert steps == 64 + 7 / 3
    fwd = korthikanti.layer_forward_flops(s, b, h) / t / rate
    layer = problem.layers[0]
    assert layer.option("none").time_s == pytest.approx(steps * 3 * fwd)
    assert layer.option("full").time_s == pytest.approx(steps * 4 * fwd)
    assert layer.option("selective").time_s == pytest.approx(
        steps * (3 * fwd + korthikanti.core_attn_forward_flops(s, b, h) / t / rate))
    exposed = offload_formulas.exposed_offload_s(korthikanti.layer_bytes(s, b, h, cfg.heads, t, True, "none"), 14, fwd, 2 * fwd,
                                  st.gpu.link)
    assert layer.option("offload").time_s == pytest.approx(steps * (3 * fwd + exposed))
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
    assert problem.fixed_parts["outside layers (§4.3)"] == sum(korthikanti.outside_layer_bytes(s, b, h, v, t, 1, True).values())
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
    with pytest.raises(UsageError, match="--tp"):   # Llama is planned from measured costs, t = 1 only
        make_problem(from_name("llama-tiny", tp=2))
