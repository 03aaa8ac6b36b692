"""planner-paper and planner-frontier: typed parameters (errors name the config field) and rows that state the
settings they were made with (GPU preset values and layout as documented, not re-read from the code)."""

from __future__ import annotations

import pytest

from remat.errors import UsageError
from remat.experiments import load
from remat.experiments.planner import FrontierParams, PaperParams, paper_plans
from remat.units import GiB


@pytest.mark.parametrize("name,params,field", [
    ("planner-paper", {"gpus": ["v100"]}, "planner.paper.gpus"),
    ("planner-paper", {"models": []}, "planner.paper.models"),
    ("planner-paper", {"sac_time_limit_s": 0}, "planner.paper.sac_time_limit_s"),
    ("planner-paper", {"budget": 3}, "planner.paper.budget"),
    ("planner-frontier", {"gpu": "v100"}, "planner.frontier.gpu"),
    ("planner-frontier", {"points": 1}, "planner.frontier.points"),
    ("planner-frontier", {"sp": "yes"}, "planner.frontier.sp"),
    ("planner-frontier", {"sac_time_limit_s": -1.0}, "planner.frontier.sac_time_limit_s"),
])
def test_bad_parameters_name_their_field(name, params, field):
    with pytest.raises(UsageError) as err:
        load(name, params)
    assert err.value.field == field


def test_defaults():
    paper, front = PaperParams(), FrontierParams()
    assert paper.models == ["gpt-22b", "gpt3-175b", "mt-nlg-530b", "gpt-1t"]
    assert (paper.gpus, paper.sac_time_limit_s) == (["a100-80gb", "h100-80gb"], 20.0)
    assert (front.models, front.gpu, front.sp, front.points, front.sac_time_limit_s) == \
        (["gpt3-175b", "mt-nlg-530b"], "a100-80gb", True, 12, 10.0)


def test_paper_rows_state_their_settings():
    table = paper_plans(PaperParams(models=["gpt3-175b"], gpus=["a100-80gb"], sac_time_limit_s=2))
    assert set(table["sp"]) == {False, True} and len(table) == 2 * 8   # plan + 7 baselines per setting
    row = table.iloc[0]
    # Korthikanti Table 3: t = 8, p = 8, m = 3, b = 1, s = 2048; A100 preset: 312 TFLOP/s at 80 % (a large
    # bf16 GEMM, remat.timemodel.gpus), PCIe Gen4 32 GB/s at 80 %, 10 µs per copy, 256 GiB host memory;
    # 2 + 4 + 12 bytes per parameter, 2 GiB reserve
    assert (row["tp"], row["pp"], row["interleave"], row["micro_batch"], row["seq"]) == (8, 8, 3, 1, 2048)
    assert (row["dp"], row["zero"]) == (1, 0)
    assert (row["peak_flops"], row["achievable"], row["link_t0_s"]) == (312e12, 0.8, 10e-6)
    assert row["link_bytes_per_s"] == pytest.approx(25.6e9, rel=1e-15)
    assert (row["weight_bytes"], row["grad_bytes"], row["optimizer_bytes"]) == (2, 4, 12)
    assert (row["reserve_bytes"], row["host_limit_bytes"]) == (2 * GiB, 256 * GiB)
    assert (row["budget_bytes"], row["layers_per_gpu"], row["sac_time_limit_s"]) == (81920 * 2**20, 12, 2.0)


@pytest.mark.parametrize("params, field", [({"gpu": "v100"}, "planner.tensor.gpu"),
                                           ({"points": 1}, "planner.tensor.points"),
                                           ({"models": [{"kind": "rnn"}]}, "planner.tensor.models.kind")])
def test_tensor_plan_parameters_name_their_field(params, field):
    with pytest.raises(UsageError) as err:
        load("planner-tensor", params)
    assert err.value.field == field


@pytest.mark.slow
def test_tensor_plan_rows_are_measured_as_predicted():
    """A small conv net (its blocks end in a ReLU that saves the next block's input) at three budgets: one tensor
    and one per-block row each, peak measured as predicted, within the budget, gradients bitwise."""
    from remat.experiments.tensor_plans import TensorModel, TensorParams, tensor_plans
    frame = tensor_plans(TensorParams(models=[TensorModel("conv", 3, 8, 8, 2)], points=3))
    assert list(frame["granularity"]) == ["tensor", "block"] * 3
    assert (frame["measured_peak_bytes"] == frame["predicted_peak_bytes"]).all()
    assert (frame["measured_peak_bytes"] <= frame["budget_bytes"]).all() and frame["grads_bitwise"].all()


def test_tensor_plans_at_several_budgets_are_auto_plan_at_each():
    """planner-tensor measures a model once per granularity and re-solves it at the other budgets: each re-solved
    plan is what a full auto.plan call at that budget returns (second method: plan from scratch), and the bounds
    are the predicted peaks of every block full and of no recompute on the same measurement."""
    from remat import auto
    from remat.auto.planning import BASELINES
    from remat.experiments.tensor_plans import TensorModel, _Plans, build
    from remat.planner.problem import POLICIES
    model, inputs, loss = build(TensorModel("transformer", 3, 32, 16, 2), "cpu")
    plans = _Plans(model, inputs, loss, "h100-80gb")
    low, high = plans.bounds()
    assert low < high
    mid = (2 * low + high) // 3
    sets = lambda r: [None if k is None else (k.names, k.keep, k.offload) for k in r.kept_sets]
    for granularity, budget in (("tensor", low), ("tensor", mid), ("block", mid)):   # high: nothing recomputed
        got, _ = plans.at(budget, granularity)
        fresh = auto.plan(model, inputs, budget=budget, loss_fn=loss, optimizer_state_bytes=0, choices=POLICIES,
                          granularity=granularity)
        assert (got.policies, sets(got)) == (fresh.policies, sets(fresh))
        assert (got.plan.peak_bytes, got.plan.step_time_s) == (fresh.plan.peak_bytes, fresh.plan.step_time_s)
    every = auto.plan(model, inputs, budget=2**62, loss_fn=loss, optimizer_state_bytes=0, choices=POLICIES)
    name = {policy: name for name, policy in BASELINES.items()}
    assert (low, high) == tuple(every.baselines[name[policy]]["peak_bytes"] for policy in ("full", "none"))
