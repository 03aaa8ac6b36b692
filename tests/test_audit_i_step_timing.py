"""A pipeline step timed from the ranks' plans (remat.planner.ranks.step_seconds, _phases, plan_pipeline's fallback to
the uniform plan): the stage's forward is its layers' forward (layers per stage × one layer's), the weight-gradient
step half a layer's backward, a calibrated ``none`` scales both, and the plans reported are those whose step is
reported. Expected values by hand from the schedule's definition (remat.planner.schedules' docstring)."""

from __future__ import annotations

import dataclasses

import pytest

from remat.models.presets import from_name
from remat.planner import ranks
from remat.planner.make import make_settings
from remat.planner.ranks import RankPlan, Setup, evaluate, plan_pipeline, setup, step_seconds
from remat.planner.schedules import timeline


def _setup(per_stage: int, phases: tuple[float, float]) -> Setup:
    # 1F1B, p = 2 ranks, N = 2 micro-batches, one stage per rank; no layer options (step_seconds reads none)
    return Setup("1F1B", 1, 2, 2, per_stage, timeline("1F1B", 2, 2, 1), (), (), phases)


def test_a_stages_forward_is_its_layers_forward_and_the_rest_its_backward():
    # two layers per stage, a layer's forward 0.5 s: each stage's forward f = 1 s. Stage 0 takes t0 = 7 s per
    # micro-batch (b0 = 6), stage 1 t1 = 3 s (b1 = 2). 1F1B, p = 2, N = 2:
    #   rank 0: F0 [0, 1], F1 [1, 2]; rank 1: F0 [1, 2], B0 [2, 4], F1 [4, 5], B1 [5, 7]
    #   rank 0: B0 once rank 1's B0 is done: [4, 10]; B1 (rank 1's B1 done at 7): [10, 16]
    # the step is 16 s = t1 + 2·t0 − f: the slow first rank waits for its own forward of micro-batch 1 (with f
    # taken as one layer's 0.5 s it would be 16.5; with the forward left in the backward, 2 + 3 + 2·7 = 19)
    su = _setup(2, (0.5, 0.25))
    plans = [RankPlan(0, (0,), ("x", "x"), 0, 0, 7.0, 2, (7.0,)), RankPlan(1, (1,), ("x", "x"), 0, 0, 3.0, 1, (3.0,))]
    assert step_seconds(su, plans) == pytest.approx(16.0)


@pytest.fixture(scope="module")
def tiny():
    cfg = dataclasses.replace(from_name("gpt-tiny"), layers=4, pp=2, interleave=1, global_batch=8)
    return cfg, make_settings(cfg, "a100-80gb", sp=False)


def test_the_weight_gradient_step_is_half_a_layers_backward(tiny):
    # under none a layer's seconds are its forward and its backward (no recompute); the split backward's weight
    # step is half the backward (one of each GEMM's two gradient products): 2·w = time(none) − forward
    cfg, st = tiny
    su = setup(cfg, st, "1F1B")
    layer = evaluate(su, ("none",) * su.per_stage)[0].stage_seconds[0] / su.per_stage
    forward, weight = su.phases
    assert 0 < forward < layer and 2 * weight == pytest.approx(layer - forward, rel=1e-9)


def test_a_calibrated_none_scales_the_forward_and_the_weight_step_alike(tiny):
    # calibration: none takes 3 s per layer. Both phases scale by the same factor, so the forward and the two
    # halves of the backward add up to the calibrated 3 s, in the roofline's proportions
    cfg, st = tiny
    raw, cal = (setup(cfg, s, "1F1B").phases for s in (st, dataclasses.replace(st, calibration={"none": 3.0})))
    assert cal[0] + 2 * cal[1] == pytest.approx(3.0, rel=1e-9)
    assert cal[0] / cal[1] == pytest.approx(raw[0] / raw[1], rel=1e-9)


def test_where_the_uniform_plans_step_is_shorter_every_rank_runs_the_uniform_plan(tiny, monkeypatch):
    # a budget between rank 1's all-none peak and rank 0's (1F1B: rank 0 holds 2 micro-batches, rank 1 one) makes
    # rank 0 recompute and leaves rank 1 none: per-rank plans differ from the uniform one. A step time that makes
    # the plans that differ slower (2 s) than one plan for every rank (1 s): the plan reports the uniform plan on
    # every rank with its step, never the per-rank plans with the uniform plan's step
    cfg, st = tiny
    su = setup(cfg, st, "1F1B")
    peaks = [r.peak_bytes for r in evaluate(su, ("none",) * su.per_stage)]
    assert peaks[0] > peaks[1]
    at = dataclasses.replace(st, budget_bytes=(peaks[0] + peaks[1]) // 2)
    monkeypatch.setattr(ranks, "step_seconds", lambda su, plans: 1.0 if len({p.policies for p in plans}) == 1 else 2.0)
    plan = plan_pipeline(cfg, at, "1F1B")
    assert plan.step_time_s == plan.uniform_step_time_s == 1.0
    assert [r.policies for r in plan.ranks] == [u.policies for u in plan.uniform]
    assert all(r.peak_bytes <= at.budget_bytes for r in plan.ranks)
