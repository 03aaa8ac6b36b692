"""Sweeps on the torch GPT model: closed forms (remat.formulas.torch_gpt) against Korthikanti's and against
what a real step saves, the four experiments' rows, bad input, not-run points, summaries and figures."""

from __future__ import annotations

import json
import subprocess
import sys
from fractions import Fraction

import pandas as pd
import pytest
import torch

from remat.errors import UsageError
from remat.experiments import sweeps
from remat.experiments import sweeps_summary as S
from remat.formulas import korthikanti as K
from remat.formulas import torch_gpt as G
from remat.models.presets import from_name
from remat.models.transformer import build_model
from remat.policies import parse_plan

TINY = {"hidden": 32, "heads": 4, "seq": 16, "micro_batch": 2, "vocab": 32, "dtype": "bfloat16", "warmup": 0}


# --- closed forms ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", G.MODES)
@pytest.mark.parametrize("s,b,h,a", [(2048, 4, 6144, 64), (2048, 1, 12288, 96), (32, 2, 64, 4), (100, 3, 48, 6)])
def test_paper_terms_at_16_bits_are_table2(mode, s, b, h, a):
    sz = G.GPTSizes(s=s, b=b, h=h, a=a, v=51200, itemsize=2)
    paper = sum(G.paper_layer_terms(sz, mode).values())
    assert paper == K.layer_bytes(s, b, h, a, recompute=mode) == K.table2_bytes(s, b, h, a, recompute=mode)
    extras = 0 if mode == "full" else 4 * s * b * sz.stats_itemsize
    assert G.layer_saved_bytes(sz, mode) == paper + extras


def test_layer_bytes_general_element_size_and_no_dropout():
    s, b, h, a = 64, 2, 128, 4
    fp32 = G.GPTSizes(s=s, b=b, h=h, a=a, v=1, itemsize=4, stats_itemsize=4)
    assert G.layer_saved_bytes(fp32, "none") == s * b * h * 66 + a * s * s * b * 9 + 16 * s * b
    plain = G.GPTSizes(s=s, b=b, h=h, a=a, v=1, itemsize=2, stats_itemsize=2, dropout=False)
    assert G.layer_saved_bytes(plain, "none") == s * b * h * 32 + a * s * s * b * 2 + 8 * s * b


def test_crossover_is_34h_over_5a():
    assert G.crossover_seq(6144, 64) == Fraction(34 * 6144, 5 * 64)
    assert G.crossover_seq(128, 4, itemsize=4) == Fraction(66 * 128, 9 * 4)


@pytest.mark.parametrize("layers", range(1, 13))
def test_sequential_units_match_the_policies_split(layers):
    def per_layer(units):  # kept layers one by one (the plan lists them so)
        return [u for n, ckpt in units for u in ([(n, True)] if ckpt else [(1, False)] * n)]

    for k in range(1, layers + 1):
        units, mode = sweeps.plan_units(parse_plan(f"segments:{k}", layers))
        assert per_layer(units) == per_layer(G.sequential_units(layers, k)) and mode == "none"
        assert sum(n for n, _ in units) == layers


def test_sequential_units_reject_k_above_layers():
    with pytest.raises(UsageError) as err:
        G.sequential_units(4, 5)
    assert err.value.field == "k"


def test_param_count_is_the_models():
    for overrides in ({}, {"hidden": 48, "heads": 6, "layers": 3}, {"vocab": 50, "seq": 80}):
        cfg = sweeps.with_sizes(from_name("gpt-tiny"), **overrides)
        counted = sum(p.numel() for p in build_model(cfg).parameters())
        assert G.param_count(cfg.hidden, cfg.layers, cfg.vocab, cfg.max_positions, cfg.ffn_hidden) == counted


# --- measured against the closed forms ----------------------------------------------------------------------------

def _setup(**params):
    return sweeps._setup({**TINY, **params}, "test", {"layers"})


@pytest.fixture(scope="module")
def tables() -> dict[str, pd.DataFrame]:
    """Small runs of three sweeps, shared by the tests below (one measurement each)."""
    return {"sweep-segments": sweeps.segment_sweep({**TINY, "layers": 4, "repeats": 5}),
            "sweep-depth": sweeps.depth_sweep({**TINY, "depths": [1, 3]}),
            "sweep-layer-timing": sweeps.layer_timing_sweep({**TINY, "repeats": 5, "rounds": 1})}


@pytest.mark.parametrize("dtype,dropout,policies", [
    ("bfloat16", 0.1, ["none", "selective", "full", "segments:2", "uniform:2"]),
    ("float32", 0.0, ["none", "selective"])])
def test_saved_bytes_equal_the_closed_form(dtype, dropout, policies):
    setup = _setup(dtype=dtype, dropout=dropout)
    cfg = sweeps.with_sizes(setup.cfg, layers=3)
    for policy in policies:
        row = sweeps.point(setup, cfg, policy, timing=False)
        assert row["status"] == "ok"
        assert row["saved_bytes"] == row["saved_bytes_formula"], policy
        assert row["flops_recompute"] == row["flops_recompute_formula"], policy
        assert row["base_bytes"] == row["model_state_bytes_formula"], policy
        assert row["peak_activation_bytes"] >= row["peak_activation_bytes_formula"], policy  # + working set


def test_segment_sweep_rows_optimum_and_overheads(tables):
    frame = tables["sweep-segments"]
    assert list(frame["k"]) == [1, 2, 3, 4] and (frame["status"] == "ok").all()
    assert (frame["saved_ratio"] == 1.0).all()
    assert frame.loc[frame["k"] == 1, "time_overhead"].iloc[0] == 0.0
    assert frame["step_time_s"].gt(0).all() and frame["timing_method"].eq("time.perf_counter").all()
    summary = S.segments_summary(frame).iloc[0]
    assert summary["k_opt_measured"] == summary["k_opt_formula"]
    for column in ("device", "git_commit", "torch_version", "timestamp", "threads", "sweep"):
        assert column in frame


def test_depth_sweep_fits_bytes_per_layer(tables):
    frame = tables["sweep-depth"]
    assert (frame["saved_ratio"] == 1.0).all()
    fits = S.depth_fits(frame).set_index("family")
    sz = sweeps.sizes(_setup().cfg, "cpu")
    assert fits.loc["none", "bytes_per_layer"] == pytest.approx(G.layer_saved_bytes(sz, "none"))
    assert fits.loc["full", "bytes_per_layer"] == pytest.approx(sz.sbh * sz.itemsize)
    assert list(frame.loc[frame["family"] == "sqrt", "k"]) == [1, 2]


def test_seq_hidden_sweep_crossover_and_gap():
    frame = sweeps.seq_hidden_sweep({**TINY, "layers": 1, "seqs": [16, 96], "hiddens": [16, 64],
                                     "hiddens_seq": 64, "modes": ["none"]})
    assert (frame["status"] == "ok").all() and (frame["saved_per_layer_ratio"] == 1.0).all()
    assert (frame["paper_measured_per_layer"] == frame["table2_per_layer"]).all()
    assert (frame["gap_bytes"] == frame["extras_per_layer_bytes"]).all()  # LayerNorm statistics, nothing else
    cross = S.crossover(frame).iloc[0]
    assert cross["s_star_measured"] == pytest.approx(34 * 32 / (5 * 4))  # the ratio is linear in s
    assert cross["h_star_measured"] == pytest.approx(5 * 4 * 64 / 34)    # and ∝ 1/h


def test_full_recompute_flop_overhead_is_one_third_per_layer():
    setup = sweeps._setup(TINY, "test", set())
    cfg = sweeps.with_sizes(setup.cfg, layers=2)
    for mode, expected in (("full", Fraction(1, 3)), ("selective", Fraction(
            K.recompute_flops(16, 2, 32, "selective"), 3 * K.layer_forward_flops(16, 2, 32)))):
        flops = sweeps.layer_runner(cfg, mode, setup).flops
        assert Fraction(flops.recompute, flops.forward + flops.backward) == expected


def test_layer_timing_rows(tables):
    frame = tables["sweep-layer-timing"]
    assert list(frame["mode"]) == ["none", "selective", "full"] and (frame["status"] == "ok").all()
    by = frame.set_index("mode")
    assert by.loc["full", "flop_overhead"] == pytest.approx(1 / 3) == by.loc["full", "flop_overhead_formula"]
    assert by.loc["none", "time_overhead"] == 0.0
    assert (by["backward_s"] == by["combined_s"] - by["forward_s"]).all()
    assert list(S.layer_table(frame)["mode"]) == ["none", "selective", "full"]


# --- bad input, points that do not fit ---------------------------------------------------------------------------

@pytest.mark.parametrize("params,field", [
    ({"ks": []}, "ks"), ({"layers": 4, "ks": [1, 5]}, "ks"), ({"bogus": 1}, "sweep-segments.bogus"),
    ({"device": "tpu"}, "device"), ({"hidden": 30}, "heads"), ({"model": "llama-tiny"}, "model"),
    ({"max_bytes": "lots"}, "max_bytes"), ({"repeats": 2}, "repeats"), ({"timing": "yes"}, "timing")])
def test_bad_input_names_the_field(params, field):
    with pytest.raises(UsageError) as err:
        sweeps.segment_sweep({**TINY, **params})
    assert err.value.field == field


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error raised without CUDA")
def test_cuda_without_cuda_is_a_usage_error():
    with pytest.raises(UsageError) as err:
        sweeps.depth_sweep({"device": "cuda"})
    assert err.value.field == "device"


def test_too_large_point_is_skipped_and_the_sweep_goes_on():
    setup = _setup()
    small = sweeps.predicted(sweeps.with_sizes(setup.cfg, layers=1), parse_plan("none", 1),
                             sweeps.sizes(setup.cfg, "cpu"))["peak_bytes_formula"]
    frame = sweeps.depth_sweep({**TINY, "depths": [1, 8], "policies": ["none"], "max_bytes": small})
    assert list(frame["status"]) == ["ok", "skipped_too_large"]
    assert pd.isna(frame["saved_bytes"].iloc[1]) and frame["saved_bytes_formula"].iloc[1] > 0
    assert S.depth_fits(frame)["points"].tolist() == [1]


def test_out_of_memory_is_a_row(monkeypatch):
    real = sweeps.measure_step

    def fails_when_deep(cfg, plan, setup, timing):
        if cfg.layers > 2:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return real(cfg, plan, setup, timing)

    monkeypatch.setattr(sweeps, "measure_step", fails_when_deep)
    frame = sweeps.depth_sweep({**TINY, "depths": [3, 1], "policies": ["none"]})
    assert list(frame["status"]) == ["oom", "ok"]
    assert frame["error"].iloc[0].startswith("CUDA out of memory") and pd.isna(frame["saved_bytes"].iloc[0])


def test_cli_bad_params_exit_2_and_write_nothing(tmp_path):
    out = tmp_path / "cpu.csv"
    done = subprocess.run([sys.executable, "-m", "remat", "experiment", "sweep-segments", "--params",
                           json.dumps({"layers": 4, "ks": [2, 9]}), "--out", str(out)],
                          capture_output=True, text=True)
    assert done.returncode == 2 and "ks" in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert not out.exists()


# --- summaries and figures ---------------------------------------------------------------------------------------

def test_crossing_interpolates_linearly_and_in_reciprocal():
    assert S._crossing([100, 200, 300], [0.5, 1.0, 1.5]) == 200.0
    assert S._crossing([100, 300], [0.5, 1.5]) == pytest.approx(200.0)
    assert S._crossing([50, 100], [2.0, 1.0 / 1.0 * 1.0]) == 100.0
    assert S._crossing([40, 160], [2.0, 0.5], reciprocal=True) == pytest.approx(80.0)  # ratio ∝ 1/h
    assert pd.isna(S._crossing([1, 2], [0.2, 0.4]))


def test_read_sweep_orders_devices(tmp_path):
    folder = tmp_path / "depth"
    folder.mkdir()
    for device in ("cuda", "cpu"):
        pd.DataFrame({"device": [device], "status": ["ok"]}).to_csv(folder / f"{device}.csv", index=False)
    assert list(S.read_sweep("depth", tmp_path)["device"]) == ["cpu", "cuda"]
    assert S.read_sweep("segments", tmp_path).empty
    with pytest.raises(ValueError):
        S.read_sweep("nope", tmp_path)


def test_figures_draw_from_tables(tables, tmp_path):
    from remat.figures import draw
    for name, frame in tables.items():
        csv = tmp_path / f"{name}.csv"
        frame.to_csv(csv, index=False)
        draw(name, [str(csv)], str(tmp_path / f"{name}.png"))
        assert (tmp_path / f"{name}.png").stat().st_size > 0 and (tmp_path / f"{name}.svg").exists()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_saved_bytes_and_oom_row():
    frame = sweeps.segment_sweep({**TINY, "device": "cuda", "layers": 4, "repeats": 5})
    assert (frame["status"] == "ok").all() and (frame["saved_ratio"] == 1.0).all()
    assert sweeps.layernorm_stats_itemsize("bfloat16", "cuda") == 4
    huge = sweeps.depth_sweep({"device": "cuda", "hidden": 131072, "heads": 64, "depths": [1, 2],
                               "policies": ["full"], "timing": False})
    assert set(huge["status"]) == {"oom"}
