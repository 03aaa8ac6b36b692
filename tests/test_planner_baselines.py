"""Baselines: scored by the planner's model; the exact plan is never slower where it fits; torch's sac_milp
runs on the same statistics."""

from __future__ import annotations

import dataclasses

import pytest

from remat.experiments.planner import _budgets
from remat.models.presets import from_name
from remat.planner import make_problem
from remat.planner.baselines import baselines, sac_graph, score_units, segments_units, uniform_units
from remat.planner.problem import plan_from_policies
from remat.planner.solve import solve


@pytest.fixture(scope="module")
def gpt175():
    return make_problem(from_name("gpt3-175b"), sp=True)


def test_plan_is_never_slower_than_a_feasible_baseline_along_the_frontier(gpt175):
    for budget in _budgets(gpt175, 7):
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
    entry = baselines(gpt175, sac_time_limit_s=10)["torch-sac-milp"]
    assert entry["feasible"]
    rescored = plan_from_policies(gpt175, entry["policies"])
    assert (rescored.peak_bytes, rescored.step_time_s) == (entry["peak_bytes"], entry["step_time_s"])
