"""The planner report's numbers (remat.experiments.planner_summary) on small hand-made tables, values computed by
hand."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from remat.experiments import planner_summary
from remat.units import GiB, MiB


def frontier_rows():
    # two budgets: at 10 GiB the plan (2.0 s) is the fastest feasible; at 20 GiB "full" (1.5 s) beats it
    # (2.0 s); an infeasible faster baseline never counts; a plan that does not fit is not a budget
    rows = [
        ("m", 10, "plan", True, 2.0), ("m", 10, "full", True, 2.5), ("m", 10, "none", False, 1.0),
        ("m", 20, "plan", True, 2.0), ("m", 20, "full", True, 1.5),
        ("m", 30, "plan", False, None), ("m", 30, "full", True, 1.0),
        ("m", 40, "plan", True, 1.0), ("m", 40, "none", True, 1.0 * (1 - 1e-15)),   # a tie within round-off
    ]
    return pd.DataFrame(rows, columns=["model", "budget_bytes", "method", "feasible", "step_time_s"])


def test_beaten_counts_feasible_budgets_and_faster_feasible_baselines():
    assert planner_summary.beaten(frontier_rows()) == (3, 1)


def test_counts_of_a_plan_and_of_a_spec():
    assert planner_summary.policy_counts({"none": 0, "selective": 24, "full": 8, "offload": 0}) == "24 selective, 8 full"
    assert planner_summary.spec_counts("full,none,full,selective") == "1 none, 1 selective, 2 full"
    assert planner_summary.spec_counts("selective") == "all selective"


def paper_rows():
    layout = {"tp": 8, "pp": 8, "interleave": 3, "micro_batch": 1}
    plan = {"n_none": 0, "n_selective": 12, "n_full": 0, "n_offload": 0}
    return pd.DataFrame([
        {"model": "a", "gpu": "g", "sp": True, "method": "plan", "feasible": True, "peak_bytes": 3 * GiB,
         "step_time_s": 2.0, **plan, **layout},
        {"model": "a", "gpu": "g", "sp": True, "method": "full", "feasible": True, "peak_bytes": GiB,
         "step_time_s": 2.5, **layout},
        {"model": "a", "gpu": "g", "sp": True, "method": "selective", "feasible": True, "peak_bytes": 3 * GiB,
         "step_time_s": 2.2, **layout},
        {"model": "a", "gpu": "g", "sp": True, "method": "none", "feasible": False, "peak_bytes": 9 * GiB,
         "step_time_s": 1.0, **layout},
        {"model": "b", "gpu": "g", "sp": False, "method": "plan", "feasible": False, **layout,
         "n_none": None, "n_selective": None, "n_full": None, "n_offload": None},
        {"model": "c", "gpu": "g", "sp": False, "method": "plan", "feasible": True, "peak_bytes": GiB // 2,
         "step_time_s": 4.0, "n_none": 2, "n_selective": 0, "n_full": 6, "n_offload": 4, **layout},
    ])


def test_paper_table_takes_the_fastest_feasible_baseline():
    table = planner_summary.paper_table(paper_rows())
    a, b, c = (table.iloc[i] for i in range(3))
    assert (a["plan"], a["peak (GiB)"], a["step (s)"]) == ("12 selective", 3.0, 2.0)
    assert (a["best baseline"], a["baseline step (s)"]) == ("selective", 2.2)   # none is faster but does not fit
    assert a["plan gain"] == pytest.approx(0.1)                                  # 2.2 / 2.0 − 1
    assert (a["t"], a["p"], a["m"], a["b"]) == (8, 8, 3, 1)
    assert b["plan"] == "does not fit" and pd.isna(b["step (s)"])
    assert (c["plan"], c["peak (GiB)"]) == ("2 none, 6 full, 4 offload", 0.5)
    assert c["best baseline"] is None or pd.isna(c["best baseline"])


def test_policy_use_counts_feasible_plans_per_policy():
    assert planner_summary.policy_use(paper_rows()) == {"selective": 1, "full": 1, "offload": 1}


def test_assumptions_are_read_from_the_table_one_row_per_setting():
    base = {"peak_flops": 312e12, "achievable": 0.5, "link_bytes_per_s": 25.6e9, "link_t0_s": 1e-5,
            "weight_bytes": 2, "grad_bytes": 4, "optimizer_bytes": 12, "reserve_bytes": 2 * GiB,
            "host_limit_bytes": 256 * GiB}
    table = pd.DataFrame([{"gpu": "a", **base}, {"gpu": "a", **base},
                          {"gpu": "h", **base, "peak_flops": 989e12, "link_bytes_per_s": 51.2e9}])
    out = planner_summary.assumptions(table)
    assert list(out["gpu"]) == ["a", "h"]
    a, h = out.iloc[0], out.iloc[1]
    assert (a["peak TFLOP/s"], a["link GB/s"], h["peak TFLOP/s"], h["link GB/s"]) == (312, 25.6, 989, 51.2)
    assert a["t0 (µs)"] == pytest.approx(10)
    assert (a["bytes per parameter"], a["reserve"], a["host memory"]) == (18, "2.00 GiB", "256.00 GiB")


def validate_rows():
    common = {"model": "gpt-tiny", "layers": 4, "seq": 64, "micro_batch": 2, "hidden": 64, "heads": 4,
              "device": "cpu", "threads": 1, "rounds": 3, "repeats": 5}
    rows = [
        # method, spec, feasible, budget, predicted peak, measured peak, predicted/measured slowdown, step
        ("plan", "none,full,full,full", True, 100 * MiB, 99 * MiB, 90 * MiB, 1.2, 1.0, 0.12, 0.10),
        ("plan", "none", True, 200 * MiB, 150 * MiB, 160 * MiB, 1.0, 1.25, 0.10, 0.125),
        ("plan", "full", True, 300 * MiB, 100 * MiB, 100 * MiB, 0.7, 1.0, 0.13, 0.10),
        ("full", "full", True, 100 * MiB, 80 * MiB, 101 * MiB, 1.3, 1.3, 0.13, 0.13),
        ("megatron-block", "block:1", True, 100 * MiB, 100 * MiB, 80 * MiB, 1.1, 1.1, 0.11, 0.11),
        ("none", "none", False, 100 * MiB, 150 * MiB, None, 1.0, None, 0.10, None),
    ]
    frame = pd.DataFrame([{**common, "method": m, "spec": s, "feasible": f, "budget_bytes": b,
                           "predicted_peak_bytes": pp, "measured_peak_bytes": mp, "predicted_slowdown": ps,
                           "measured_slowdown": ms, "predicted_step_time_s": pt, "measured_step_time_s": mt}
                          for m, s, f, b, pp, mp, ps, ms, pt, mt in rows])
    frame["peak_rel_error"] = frame["predicted_peak_bytes"] / frame["measured_peak_bytes"] - 1
    frame["slowdown_rel_error"] = frame["predicted_slowdown"] / frame["measured_slowdown"] - 1
    frame["time_rel_error"] = frame["predicted_step_time_s"] / frame["measured_step_time_s"] - 1
    return frame


def test_validation_numbers_by_hand():
    v = planner_summary.validation_numbers(validate_rows())
    assert (v["plans"], v["plans_in_budget"]) == (3, 3)
    assert v["plan_peak_error"] == pytest.approx(0.1)              # 99/90 − 1 = 0.1; |150/160 − 1| = 0.0625; 0
    assert (v["baselines"], v["baselines_in_budget"]) == (2, 1)    # full measured 101 MiB > 100 MiB
    assert v["baseline_peak_error"] == pytest.approx(0.25)         # block: 100/80 − 1
    assert v["worst_baseline"] == "megatron-block"
    # slowdown errors 1.2/1 − 1 = 0.2, |1/1.25 − 1| = 0.2, |0.7/1 − 1| = 0.3;
    # time errors 0.12/0.10 − 1 = 0.2, |0.10/0.125 − 1| = 0.2, |0.13/0.10 − 1| = 0.3
    assert v["slowdown_error"] == pytest.approx((0.2, 0.3))
    assert v["time_error"] == pytest.approx((0.2, 0.3))


def test_validate_settings_and_table():
    frame = validate_rows()
    setup = planner_summary.validate_settings(frame)
    assert setup == {"device": "cpu", "threads": 1, "rounds": 3, "repeats": 5,
                     "models": [{"layers": 4, "seq": 64, "micro_batch": 2, "hidden": 64, "heads": 4}]}
    table = planner_summary.validate_table(frame)
    assert list(table["plan"]) == ["1 none, 3 full", "all none", "all full"]
    assert list(table["budget (MiB)"]) == [100, 200, 300]
    assert list(table["measured peak (MiB)"]) == [90, 160, 100]
    assert math.isclose(table["peak error"].iloc[1], -0.0625)
