"""Sweeps on the torch GPT model: closed forms (remat.formulas.torch_gpt) against Korthikanti's and against
what a real step saves, the four experiments' rows, bad input, not-run points, summaries and figures."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from fractions import Fraction

import pandas as pd
import pytest
import torch

from remat.errors import UsageError
from remat.experiments import layer_timing, load, sweep_point
from remat.analysis import sweeps_tables as sweeps_summary
from remat.formulas import korthikanti
from remat.formulas import torch_gpt
from remat.measure.timing import Timing
from remat.models.presets import from_name
from remat.models.transformer import build_model
from remat.policies import parse_plan

TINY = {"hidden": 32, "heads": 4, "seq": 16, "micro_batch": 2, "vocab": 32, "dtype": "bfloat16", "warmup": 0}
# Per-layer bytes of that model (gpt-tiny: dropout 0.1; CPU LayerNorm statistics in bf16), by hand from
# Korthikanti Eq. 1 at e = 2: sbh·34 + 5as²b + LayerNorm mean/rstd 2 LNs × 2 × sb × 2 B; full: the input sbh·2.
TINY_NONE_PER_LAYER = 16 * 2 * 32 * 34 + 5 * 4 * 16 * 16 * 2 + 4 * 16 * 2 * 2   # 45 312
TINY_FULL_PER_LAYER = 16 * 2 * 32 * 2                                             # 2 048


# --- closed forms ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", torch_gpt.MODES)
@pytest.mark.parametrize("s,b,h,a", [(2048, 4, 6144, 64), (2048, 1, 12288, 96), (32, 2, 64, 4), (100, 3, 48, 6)])
def test_paper_terms_at_16_bits_are_table2(mode, s, b, h, a):
    sz = torch_gpt.GPTSizes(s=s, b=b, h=h, a=a, v=51200, itemsize=2)
    paper = sum(torch_gpt.paper_layer_terms(sz, mode).values())
    assert paper == korthikanti.layer_bytes(s, b, h, a, recompute=mode) == \
        korthikanti.table2_bytes(s, b, h, a, recompute=mode)
    extras = 0 if mode == "full" else 4 * s * b * sz.stats_itemsize
    assert torch_gpt.layer_saved_bytes(sz, mode) == paper + extras


def test_layer_bytes_general_element_size_and_no_dropout():
    s, b, h, a = 64, 2, 128, 4
    fp32 = torch_gpt.GPTSizes(s=s, b=b, h=h, a=a, v=1, itemsize=4, stats_itemsize=4)
    assert torch_gpt.layer_saved_bytes(fp32, "none") == s * b * h * 66 + a * s * s * b * 9 + 16 * s * b
    plain = torch_gpt.GPTSizes(s=s, b=b, h=h, a=a, v=1, itemsize=2, stats_itemsize=2, dropout=False)
    assert torch_gpt.layer_saved_bytes(plain, "none") == s * b * h * 32 + a * s * s * b * 2 + 8 * s * b


def test_crossover_is_34h_over_5a():
    assert torch_gpt.crossover_seq(6144, 64) == Fraction(34 * 6144, 5 * 64)
    assert torch_gpt.crossover_seq(128, 4, itemsize=4) == Fraction(66 * 128, 9 * 4)


def test_segments_units_by_hand():
    """segments(k) at k not dividing L: the first L mod k segments one layer longer, the last kept."""
    assert torch_gpt.sequential_units(10, 3) == [(4, True), (3, True), (3, False)]
    assert torch_gpt.sequential_units(7, 2) == [(4, True), (3, False)]
    assert torch_gpt.sequential_units(5, 5) == [(1, True)] * 4 + [(1, False)]
    assert torch_gpt.plan_units(parse_plan("segments:3", 10)) == ([(4, True), (3, True)] + [(1, False)] * 3, "none")
    assert torch_gpt.plan_units(parse_plan("full,selective,none", 3)) == ([(1, True), (1, False), (1, False)],
                                                                          "selective")


@pytest.mark.parametrize("layers", range(1, 13))
def test_sequential_units_match_the_policies_split(layers):
    def per_layer(units):  # kept layers one by one (the plan lists them so)
        return [u for n, ckpt in units for u in ([(n, True)] if ckpt else [(1, False)] * n)]

    for k in range(1, layers + 1):   # k = 1: one kept segment, i.e. none (parse_plan rejects "segments:1")
        units, mode = torch_gpt.plan_units(parse_plan(f"segments:{k}" if k > 1 else "none", layers))
        assert per_layer(units) == per_layer(torch_gpt.sequential_units(layers, k)) and mode == "none"
        assert sum(n for n, _ in units) == layers


def test_sequential_units_reject_k_above_layers():
    with pytest.raises(UsageError) as err:
        torch_gpt.sequential_units(4, 5)
    assert err.value.field == "k"


def test_param_count_is_the_models():
    for overrides in ({}, {"hidden": 48, "heads": 6, "layers": 3}, {"vocab": 50, "seq": 80}):
        cfg = sweep_point.with_sizes(from_name("gpt-tiny"), **overrides)
        counted = sum(p.numel() for p in build_model(cfg).parameters())
        assert torch_gpt.param_count(cfg.hidden, cfg.layers, cfg.vocab, cfg.max_positions, cfg.ffn_hidden) == counted


def test_model_bytes_by_hand():
    """One gpt-tiny layer at h = 32 (ffn 128, biases), v = 32, 64 positions, s = 16, b = 2, bf16."""
    cfg = _params().model_config(layers=1)
    layer = 4 * 32 * 32 + 2 * 32 * 128 + 2 * 64 + (3 * 32 + 32 + 128 + 32)     # 12 704 parameters
    params = layer + (32 + 64) * 32 + 64                                        # + embeddings + final LN
    state = torch_gpt.model_bytes(cfg, stats_itemsize=2)
    assert (state.weights, state.gradients, state.layer_gradients) == (2 * params, 2 * params, 2 * layer)
    assert state.head_gradients == 2 * (32 * 32 + 64)                           # tied embedding + final LN
    assert (state.causal_masks, state.inputs) == (64 * 64, 2 * 8 * 16 * 2)
    assert state.state == 4 * params + 64 * 64 + 512 == 67968


# --- measured against the closed forms ----------------------------------------------------------------------------

def _params(**params) -> sweep_point.SweepParams:
    return sweep_point.SweepParams(**{**TINY, **params})


def _run(name: str, **params) -> pd.DataFrame:
    from remat.experiments import resolve
    return resolve(name)(load(name, {**TINY, **params}))


@pytest.fixture(scope="module")
def tables() -> dict[str, pd.DataFrame]:
    """Small runs of three sweeps, shared by the tests below (one measurement each)."""
    return {"sweep-segments": _run("sweep-segments", layers=4, repeats=5, rounds=1),
            "sweep-depth": _run("sweep-depth", depths=[1, 3]),
            "sweep-layer-timing": _run("sweep-layer-timing", repeats=5, rounds=1)}


@pytest.mark.parametrize("dtype,dropout,policies", [
    ("bfloat16", 0.1, ["none", "selective", "full", "segments:2", "uniform:2"]),
    ("float32", 0.0, ["none", "selective"])])
def test_saved_bytes_equal_the_closed_form(dtype, dropout, policies):
    p = _params(dtype=dtype, dropout=dropout)
    cfg = p.model_config(layers=3)
    for policy in policies:
        row = sweep_point.point(p, cfg, policy, timing=False)
        assert row["status"] == "ok"
        assert row["saved_bytes"] == row["saved_bytes_formula"], policy
        assert row["flops_recompute"] == row["flops_recompute_formula"], policy
        assert row["base_bytes"] == row["model_state_bytes_formula"], policy
        assert row["peak_activation_bytes"] >= row["peak_activation_bytes_formula"], policy  # + working set


def test_segment_sweep_rows_optimum_and_overheads(tables):
    frame = tables["sweep-segments"]
    assert list(frame["k"]) == [1, 2, 3, 4] and (frame["status"] == "ok").all()
    assert (frame["saved_ratio"] == 1.0).all()
    assert frame["step_time_s"].gt(0).all() and frame["timing_method"].eq("time.perf_counter").all()
    assert frame["step_time_samples"].eq(5).all()
    assert frame.loc[frame["peak_activation_bytes"].idxmin(), "k"] == frame["k_opt_formula"].iloc[0]
    for column in ("device", "git_commit", "torch_version", "timestamp", "threads", "sweep"):
        assert column in frame


def test_depth_sweep_fits_bytes_per_layer(tables):
    frame = tables["sweep-depth"]
    assert (frame["saved_ratio"] == 1.0).all()
    fits = sweeps_summary.depth_fits(frame).set_index("family")
    assert fits.loc["none", "bytes_per_layer"] == pytest.approx(TINY_NONE_PER_LAYER)
    assert fits.loc["full", "bytes_per_layer"] == pytest.approx(TINY_FULL_PER_LAYER)
    assert list(frame.loc[frame["family"] == "sqrt", "k"]) == [1, 2]


def test_seq_hidden_sweep_crossover_and_gap():
    frame = _run("sweep-seq-hidden", layers=1, seqs=[16, 96], hiddens=[16, 64], hiddens_seq=64, modes=["none"])
    assert (frame["status"] == "ok").all() and (frame["saved_per_layer_ratio"] == 1.0).all()
    assert (frame["paper_measured_per_layer"] == frame["table2_per_layer"]).all()
    assert (frame["gap_bytes"] == frame["extras_per_layer_bytes"]).all()  # LayerNorm statistics, nothing else
    assert sweeps_summary.crossover(frame, "seq")[0] == pytest.approx(34 * 32 / (5 * 4))  # the ratio is linear in s
    assert sweeps_summary.crossover(frame, "hidden")[0] == pytest.approx(5 * 4 * 64 / 34)  # and ∝ 1/h


def test_full_recompute_flop_overhead_is_one_third_per_layer():
    p = load("sweep-layer-timing", TINY)
    cfg = p.model_config(layers=2)
    s, b, h = 16, 2, 32   # selective re-runs QKᵀ and ·V: 4bs²h of the layer's 24bsh² + 4bs²h, over 3× forward
    for mode, expected in (("full", Fraction(1, 3)),
                           ("selective", Fraction(4 * b * s * s * h, 3 * (24 * b * s * h * h + 4 * b * s * s * h)))):
        flops = layer_timing.layer_runner(cfg, mode, p).flops
        assert Fraction(flops.recompute, flops.forward + flops.backward) == expected


def test_layer_timing_rows(tables):
    frame = tables["sweep-layer-timing"]
    assert list(frame["mode"]) == ["none", "selective", "full"] and (frame["status"] == "ok").all()
    by = frame.set_index("mode")
    assert by.loc["full", "flop_overhead"] == pytest.approx(1 / 3) == by.loc["full", "flop_overhead_formula"]
    assert by["forward_samples"].eq(5).all() and by["combined_samples"].eq(5).all()
    assert list(sweeps_summary.layer_table(frame)["mode"]) == ["none", "selective", "full"]


def test_layer_timing_times_every_mode_in_one_run_and_divides_by_layers(monkeypatch):
    """time_steps replaced by a clock with known medians: one call times all six steps (interleaved), and
    the row's per-layer seconds and overheads follow by hand (L = 2)."""
    medians = {"none forward": 1.0, "none combined": 3.0, "selective forward": 1.2, "selective combined": 3.3,
               "full forward": 1.0, "full combined": 4.5}
    calls = []

    def fake_time_steps(steps, device, **kwargs):
        calls.append((sorted(steps), kwargs["rounds"]))
        return {name: Timing(medians[name], 0.1, (medians[name],) * 5, 0, "fake clock") for name in steps}

    monkeypatch.setattr(layer_timing, "time_steps", fake_time_steps)
    by = _run("sweep-layer-timing", layers=2, rounds=2).set_index("mode")
    assert calls == [(sorted(medians), 2)]
    assert by["forward_s"].tolist() == [0.5, 0.6, 0.5] and by["combined_s"].tolist() == [1.5, 1.65, 2.25]
    assert by["backward_s"].tolist() == pytest.approx([1.0, 1.05, 1.75])
    assert by["time_overhead"].tolist() == pytest.approx([0.0, 0.1, 0.5])
    assert by.loc["full", "time_per_flop_overhead"] == pytest.approx(0.5 / (1 / 3))
    assert by["forward_iqr_s"].tolist() == [0.05] * 3 and by["timing_method"].eq("fake clock").all()


def test_segment_sweep_times_every_k_in_one_interleaved_run(monkeypatch):
    """time_steps replaced by a clock with known medians: one call times every k together (rounds as given,
    the plan applied per visit), and each k's step-time columns and overhead against k = 1 follow."""
    medians = {"none": 2.0, "segments:2": 2.5, "segments:3": 3.0}
    calls = []

    def fake_time_steps(steps, device, **kwargs):
        calls.append((list(steps), kwargs["rounds"], kwargs["repeats"]))
        for name in steps:
            kwargs["setup"](name)
        return {name: Timing(medians[name], 0.1, (medians[name],) * 10, 1, "fake clock") for name in steps}

    monkeypatch.setattr(sweep_point, "time_steps", fake_time_steps)
    by = _run("sweep-segments", layers=3, repeats=5, rounds=2).set_index("k")
    assert calls == [(["none", "segments:2", "segments:3"], 2, 5)]
    assert by["step_time_s"].tolist() == [2.0, 2.5, 3.0] and by["step_time_iqr_s"].tolist() == [0.1] * 3
    assert by["step_time_samples"].eq(10).all() and by["timing_method"].eq("fake clock").all()
    assert by["time_overhead"].tolist() == pytest.approx([0.0, 0.25, 0.5]) and by["rounds"].eq(2).all()


def test_overheads_by_hand():
    rows = [{"status": "ok", "step_time_s": 2.0, "flop_overhead": 0.0},
            {"status": "ok", "step_time_s": 3.0, "flop_overhead": 0.25},
            {"status": "oom"}]
    sweep_point.overheads(rows, rows[0])
    assert [r["time_overhead"] for r in rows[:2]] == [0.0, 0.5] and math.isnan(rows[2]["time_overhead"])
    assert math.isnan(rows[0]["time_per_flop_overhead"]) and rows[1]["time_per_flop_overhead"] == 2.0
    sweep_point.overheads(rows, {"status": "oom", "step_time_s": 1.0})   # a failed reference is none
    assert all(math.isnan(r["time_overhead"]) for r in rows)


# --- bad input, points that do not fit ---------------------------------------------------------------------------

@pytest.mark.parametrize("params,field", [
    ({"ks": []}, "ks"), ({"layers": 4, "ks": [1, 5]}, "ks"), ({"bogus": 1}, "bogus"),
    ({"device": "tpu"}, "device"), ({"hidden": 30}, "heads"), ({"model": "llama-tiny"}, "model"),
    ({"max_bytes": "lots"}, "max_bytes"), ({"repeats": 2}, "repeats"), ({"timing": "yes"}, "timing"),
    ({"dropout": 1.0}, "dropout"), ({"dtype": "int8"}, "dtype")])
def test_bad_input_names_the_field(params, field):
    with pytest.raises(UsageError) as err:
        load("sweep-segments", {**TINY, **params})
    assert err.value.field == f"sweeps.segments.{field}"


def test_seq_hidden_checks_every_point_before_any_work():
    with pytest.raises(UsageError) as err:   # 4 heads do not divide h = 30 of the h axis
        load("sweep-seq-hidden", {**TINY, "hiddens": [32, 30]})
    assert err.value.field == "sweeps.seq-hidden.heads"


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error raised without CUDA")
def test_cuda_without_cuda_is_a_usage_error():
    with pytest.raises(UsageError) as err:
        load("sweep-depth", {"device": "cuda"})
    assert err.value.field == "sweeps.depth.device"


def test_too_large_point_is_skipped_and_the_sweep_goes_on():
    limit = 500_000     # between the two points' closed-form peaks (model state + live saved bytes)
    frame = _run("sweep-depth", depths=[1, 8], policies=["none"], max_bytes=limit)
    assert frame["peak_bytes_formula"].iloc[0] < limit < frame["peak_bytes_formula"].iloc[1]
    assert list(frame["status"]) == ["ok", "skipped_too_large"]
    assert pd.isna(frame["saved_bytes"].iloc[1]) and frame["saved_bytes_formula"].iloc[1] > 0
    assert sweeps_summary.depth_fits(frame)["points"].tolist() == [1]


@pytest.mark.parametrize("error", [torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"),
                                   RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried ..."),
                                   MemoryError("out of memory")])
def test_out_of_memory_is_a_row(monkeypatch, error):
    from remat.measure import step
    real = step.measure

    def fails_when_deep(cfg, *args, **kwargs):
        if cfg.layers > 2:
            raise error
        return real(cfg, *args, **kwargs)

    monkeypatch.setattr(step, "measure", fails_when_deep)
    frame = _run("sweep-depth", depths=[3, 1], policies=["none"])
    assert list(frame["status"]) == ["oom", "ok"]
    assert frame["error"].iloc[0] == str(error).splitlines()[0] and pd.isna(frame["saved_bytes"].iloc[0])


def test_other_errors_are_not_swallowed(monkeypatch):
    from remat.measure import step

    def broken(*args, **kwargs):
        raise RuntimeError("shape mismatch")

    monkeypatch.setattr(step, "measure", broken)
    with pytest.raises(RuntimeError, match="shape mismatch"):
        _run("sweep-depth", depths=[1], policies=["none"])


@pytest.mark.slow
def test_cli_bad_params_exit_2_and_write_nothing(tmp_path):
    out = tmp_path / "cpu.csv"
    done = subprocess.run([sys.executable, "-m", "remat", "experiment", "sweep-segments", "--params",
                           json.dumps({"layers": 4, "ks": [2, 9]}), "--out", str(out)],
                          capture_output=True, text=True)
    assert done.returncode == 2 and "ks" in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert not out.exists()


# --- summaries and figures ---------------------------------------------------------------------------------------

def test_crossing_interpolates_linearly_and_in_reciprocal():
    assert sweeps_summary._crossing([100, 200, 300], [0.5, 1.0, 1.5]) == 200.0
    assert sweeps_summary._crossing([100, 300], [0.5, 1.5]) == pytest.approx(200.0)
    assert sweeps_summary._crossing([50, 100], [2.0, 1.0 / 1.0 * 1.0]) == 100.0
    assert sweeps_summary._crossing([40, 160], [2.0, 0.5], reciprocal=True) == pytest.approx(80.0)  # ratio ∝ 1/h
    assert pd.isna(sweeps_summary._crossing([1, 2], [0.2, 0.4]))


def test_figures_draw_from_tables(tables, tmp_path):
    from remat.figures import draw
    for name, frame in tables.items():
        csv = tmp_path / f"{name}.csv"
        frame.to_csv(csv, index=False)
        draw(name, [str(csv)], str(tmp_path / f"{name}.png"))
        assert (tmp_path / f"{name}.png").stat().st_size > 0 and (tmp_path / f"{name}.svg").exists()


@pytest.mark.gpu
def test_cuda_saved_bytes_and_oom_row():
    from remat.measure.step import layernorm_stats_itemsize
    frame = _run("sweep-segments", device="cuda", layers=4, repeats=5)
    assert (frame["status"] == "ok").all() and (frame["saved_ratio"] == 1.0).all()
    assert layernorm_stats_itemsize("bfloat16", "cuda") == 4
    huge = _run("sweep-depth", device="cuda", hidden=131072, heads=64, depths=[1, 2], policies=["full"],
                timing=False, max_bytes=None)
    assert set(huge["status"]) == {"oom"}
