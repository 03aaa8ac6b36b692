"""Baselines: scored by the planner's model; the exact plan is never slower where it fits; torch's sac_milp
runs on the same statistics."""

from __future__ import annotations

import dataclasses

import pytest

from remat.experiments.planner import budgets
from remat.models.presets import from_name
from remat.planner import make_problem
from remat.planner.baselines import (baselines, sac_graph, sac_milp_baseline, score_units, segments_units,
                                     uniform_units)
from remat.planner.problem import Layer, Option, Problem, plan_from_policies
from remat.planner.solve import solve
from remat.units import GiB


@pytest.fixture(scope="module")
def gpt175():
    return make_problem(from_name("gpt3-175b"), sp=True)


def test_plan_is_never_slower_than_a_feasible_baseline_along_the_frontier(gpt175):
    for budget in budgets(gpt175, 7):
        problem = dataclasses.replace(gpt175, budget_bytes=budget)
        plan = solve(problem)
        assert plan.peak_bytes <= budget
        base = baselines(problem, sac_time_limit_s=10)
        assert set(base) == {"none", "full", "selective", "sqrt-segments", "megatron-uniform",
                             "megatron-block", "torch-sac-milp"}
        for name, entry in base.items():
            if entry["feasible"]:
                assert entry["peak_bytes"] <= budget
                assert plan.step_time_s <= entry["step_time_s"] * (1 + 1e-12), name


def test_single_layer_units_equal_per_layer_full(gpt175):
    L = len(gpt175.layers)
    units = score_units(gpt175, uniform_units(L, 1))
    per_layer = plan_from_policies(gpt175, ["full"] * L)
    assert (units.peak_bytes, units.step_time_s) == (per_layer.peak_bytes, per_layer.step_time_s)
    kept = score_units(gpt175, [(0, L, False)])
    assert kept.peak_bytes == plan_from_policies(gpt175, ["none"] * L).peak_bytes


def test_segments_split_by_the_one_rule():
    # Chen's segments at L = 10, k = 3: [4, 3, 3] (numpy.array_split), the last segment kept
    assert segments_units(10, 3) == [(0, 4, True), (4, 7, True), (7, 10, False)]
    assert uniform_units(5, 2) == [(0, 2, True), (2, 4, True), (4, 5, True)]


def test_segment_unit_holds_its_whole_recompute():
    problem = make_problem(from_name("gpt-22b", layers=8))
    x = problem.layers[0].option("full")
    none = problem.layers[0].option("none")
    plan = score_units(problem, [(0, 4, True), (4, 8, False)])
    # one checkpoint + 4 kept layers stored; the unit's recompute re-creates 4 layers (minus its input)
    assert plan.stored_bytes == x.stored_bytes + 4 * none.stored_bytes
    assert plan.transient_bytes == x.transient_bytes + 3 * none.stored_bytes


def test_sac_milp_graph_carries_the_same_statistics(gpt175):
    graph, r_sel = sac_graph(gpt175)
    assert len(graph.nodes) == len(gpt175.layers) + 1
    layer = gpt175.layers[0]
    node = graph.nodes[1]
    none, sel, full = (layer.option(p) for p in ("none", "selective", "full"))
    assert node["sac_memory"] == none.stored_bytes - full.stored_bytes
    assert node["sac_runtime"] == pytest.approx((full.time_s - none.time_s) * 1e3)
    assert r_sel[0] == pytest.approx((none.stored_bytes - sel.stored_bytes) / node["sac_memory"])
    assert graph.nodes[0]["param_per_module"] == gpt175.fixed_bytes


# four identical layers (GiB, seconds): none keeps 4, selective 2 (+2 transient), full 1 (+3 transient)
STORED = {"none": 4, "selective": 2, "full": 1}
TRANSIENT = {"none": 0, "selective": 2, "full": 3}
SECONDS = {"none": 1.0, "selective": 1.25, "full": 1.5}


def four_layers(budget_gib: int) -> Problem:
    options = tuple(Option(p, STORED[p] * GiB, TRANSIENT[p] * GiB, SECONDS[p], recompute_flops=10 * (p != "none"))
                    for p in STORED)
    return Problem(tuple(Layer(i, options) for i in range(4)), {"weights": 10 * GiB}, budget_gib * GiB,
                   fixed_time_s=0.5)


def test_sac_milp_discards_nothing_when_everything_fits():
    # 40 GiB: all-none needs 10 + 4·4 = 26 GiB; any discard only adds recompute time, so the MILP keeps all
    entry = sac_milp_baseline(four_layers(40), time_limit_s=5)
    assert entry["policies"] == ["none"] * 4
    assert (entry["peak_bytes"], entry["step_time_s"], entry["recompute_flops"]) == (26 * GiB, 4.5, 0)
    assert entry["feasible"]


def test_sac_milp_answer_is_scored_by_the_planners_memory_model():
    # 22 GiB: all-none (26 GiB) does not fit. Whatever sac_milp picks is scored here by hand:
    # peak = weights + Σ stored + the worst transient, time = 0.5 s + Σ seconds
    entry = sac_milp_baseline(four_layers(22), time_limit_s=5)
    chosen = entry["policies"]
    assert chosen != ["none"] * 4
    peak = (10 + sum(STORED[p] for p in chosen) + max(TRANSIENT[p] for p in chosen)) * GiB
    assert entry["peak_bytes"] == peak
    assert entry["step_time_s"] == pytest.approx(0.5 + sum(SECONDS[p] for p in chosen), rel=1e-12)
    assert entry["feasible"] == (peak <= 22 * GiB)


def test_segments_baseline_at_the_paper_sizes_by_hand():
    # gpt-22b (s = 2048, b = 4, h = 6144, a = 64, t = 8, no SP), L = 48 on one GPU (prefix model, one micro-batch):
    # Table 2 none = sbh(10 + 24/t + 5as/(ht)) = sbh·79/3, full = 2sbh. k = round(√48) = 7 -> array_split
    # [7]*6 + [6]: 42 layers in 6 checkpointed units, the last 6 kept. The largest moment is the last unit's
    # recompute: 6 checkpoints + (none − full) + 6·none; all-none peaks at 48·none + the logits' gradient
    # 4sbv/t. Fixed bytes cancel in the difference.
    problem = make_problem(from_name("gpt-22b"))
    sbh = 2048 * 4 * 6144
    none, full, floor = sbh * 79 // 3, 2 * sbh, 4 * 2048 * 4 * 51200 // 8
    segments = baselines(problem, sac=False)["sqrt-segments"]
    all_none = plan_from_policies(problem, ["none"] * 48)
    assert segments["k"] == 7
    assert segments["peak_bytes"] - all_none.peak_bytes == (6 * full + (none - full) + 6 * none) - (48 * none + floor)
    per_layer_extra = (plan_from_policies(problem, ["full"] * 48).step_time_s - all_none.step_time_s) / 48
    assert segments["step_time_s"] == pytest.approx(all_none.step_time_s + 42 * per_layer_extra, rel=1e-12)
