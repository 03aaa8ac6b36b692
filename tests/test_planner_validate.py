"""The plan applied to a real tiny GPT on the CPU: measured peak ≤ budget and within 5 % of predicted.

Calibration (per-layer seconds, two reference steps for the backward workspaces) and then plans at three
budgets, applied with remat.policies and measured with remat.measure (MemTracker peak bytes)."""

from __future__ import annotations

import pytest

from remat.errors import UsageError
from remat.experiments import load
from remat.experiments.planner import TinyModel, ValidateParams, validate


@pytest.fixture(scope="module")
def table():
    return validate(load("planner-validate", {"models": [{"layers": 4, "seq": 64, "micro_batch": 2}], "points": 3,
                                              "rounds": 1}))


def test_applied_plans_fit_and_match_the_prediction(table):
    plans = table[table["method"] == "plan"]
    assert len(plans) == 3 and plans["measured_peak_bytes"].notna().all()
    assert (plans["measured_peak_bytes"] <= plans["budget_bytes"]).all()
    assert (plans["peak_rel_error"].abs() <= 0.05).all()
    assert (plans["predicted_peak_bytes"] <= plans["budget_bytes"]).all()
    # the least budget is the least peak any per-layer plan reaches: the plan there is at that peak
    assert plans.iloc[0]["predicted_peak_bytes"] == plans.iloc[0]["budget_bytes"]


def test_feasible_baselines_fit_when_applied_and_the_plan_is_never_predicted_slower(table):
    feasible = table[table["feasible"].astype(bool) & table["measured_peak_bytes"].notna()]
    assert (feasible["measured_peak_bytes"] <= feasible["budget_bytes"]).all()
    for _, group in table.groupby("budget_bytes"):
        plan = group[group["method"] == "plan"].iloc[0]
        others = group[(group["method"] != "plan") & group["feasible"].astype(bool)]
        assert (plan["predicted_step_time_s"] <= others["predicted_step_time_s"] * (1 + 1e-12)).all()


def test_rows_state_their_calibration(table):
    row = table.iloc[0]
    assert row["layer_workspace_bytes"] >= 0 and row["head_workspace_bytes"] > 0
    assert row["layer_seconds_full"] > 0 and row["layer_seconds_none"] > 0
    measured = table[table["measured_peak_bytes"].notna()]
    assert set(measured["peak_method"]) == {"torch.distributed._tools.mem_tracker.MemTracker"}
    assert {"device", "torch_version", "git_commit"} <= set(table.columns)
    # the settings the rows were made with: the parameters given, the defaults for the rest
    assert (table["rounds"] == 1).all() and (table["points"] == 3).all()
    assert (table["repeats"] == 5).all() and (table["threads"] == 1).all()
    timed = table[table["measured_step_time_s"].notna()]
    assert set(timed["timing_method"]) == {"time.perf_counter"}


def test_params_name_the_bad_field():
    params = load("planner-validate", {"models": [{"layers": 2}], "device": "cpu"})
    assert params.models == [TinyModel(layers=2)] and params.device == "cpu"
    for bad, field in [({"models": [{"layers": 2, "width": 3}]}, "planner.validate.models.width"),
                       ({"models": [{"layers": 0}]}, "planner.validate.models.layers"),
                       ({"models": [{"dropout": 1.0}]}, "planner.validate.models.dropout"),
                       ({"models": ["gpt-tiny"]}, "planner.validate.models"),
                       ({"repeats": 4}, "planner.validate.repeats"),
                       ({"points": 1}, "planner.validate.points"),
                       ({"device": "tpu"}, "planner.validate.device")]:
        with pytest.raises(UsageError) as err:
            load("planner-validate", bad)
        assert err.value.field == field, bad


def test_tiny_model_overrides_the_preset():
    cfg = TinyModel(layers=3, seq=16, hidden=32, heads=2).config()
    assert (cfg.layers, cfg.seq, cfg.max_positions, cfg.hidden, cfg.ffn_hidden, cfg.heads) == (3, 16, 16, 32, 128, 2)
    assert ValidateParams().models[1] == TinyModel(layers=12, seq=64, micro_batch=8, hidden=128, heads=8)


def test_calibration_times_every_policy_under_its_own_plan(monkeypatch):
    # layer_seconds hands time_steps one step per policy and a setup that applies that policy to the layer;
    # fake timings (one per policy) come back unchanged as the medians
    from remat.measure import timing
    from remat.models.presets import from_name
    from remat.planner.calibrate import layer_seconds

    seen = []

    def fake_time_steps(steps, device, *, rounds, repeats, warmup, setup, threads):
        for k, name in enumerate(steps):
            model = setup(name)
            seen.append((name, tuple(model)))
            steps[name]()
        return {name: timing.Timing(0.5 + k, 0.0, (0.5 + k,) * 5, warmup, "fake")
                for k, name in enumerate(steps)}

    monkeypatch.setattr(timing, "time_steps", fake_time_steps)
    out = layer_seconds(from_name("gpt-tiny"), ["none", "full", "selective"], device="cpu", rounds=1)
    assert out == {"none": 0.5, "full": 1.5, "selective": 2.5}
    assert seen == [("none", ("none",)), ("full", ("full",)), ("selective", ("selective",))]
