"""The planner report's numbers (remat.analysis.planner) on small hand-made tables, values computed by
hand."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from remat.analysis import planner as planner_summary
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
    base = {"peak_flops": 312e12, "achievable": 0.8, "memory_bytes_per_s": 1733e9, "nvlink_bytes_per_s": 210e9,
            "link_bytes_per_s": 25.6e9, "gpus_per_host_link": 2, "link_t0_s": 1e-5,
            "weight_bytes": 2, "grad_bytes": 4, "optimizer_bytes": 12, "reserve_bytes": 2 * GiB,
            "host_limit_bytes": 256 * GiB}
    table = pd.DataFrame([{"gpu": "a", **base}, {"gpu": "a", **base},
                          {"gpu": "h", **base, "peak_flops": 989e12, "link_bytes_per_s": 51.2e9}])
    out = planner_summary.assumptions(table)
    assert list(out["gpu"]) == ["a", "h"]
    a, h = out.iloc[0], out.iloc[1]
    assert (a["peak TFLOP/s"], a["link GB/s"], h["peak TFLOP/s"], h["link GB/s"]) == (312, 25.6, 989, 51.2)
    assert a["t0 (µs)"] == pytest.approx(10)
    assert (a["HBM GB/s achieved"], a["NVLink GB/s achieved"], a["GPUs per link"]) == (1733, 210, 2)
    assert (a["bytes per parameter"], a["reserve"], a["host memory"]) == (18, "2.00 GiB", "256.00 GiB")


def validate_rows():
    common = {"model": "gpt-tiny", "layers": 4, "seq": 64, "micro_batch": 2, "hidden": 64, "heads": 4,
              "device": "cpu", "threads": 1, "rounds": 3, "repeats": 5, "points": 4,
              "predicted_base_bytes": 1000, "measured_base_bytes": 1024}
    rows = [
        # method, spec, feasible, calibration point, budget, predicted peak, measured peak (MiB),
        # predicted/measured slowdown, predicted/measured step (s)
        ("plan", "none,full,full,full", True, False, 100, 99, 90, 1.2, 1.0, 0.12, 0.10),
        ("plan", "none,none,full,full", True, False, 200, 150, 150, 1.0, 1.25, 0.10, 0.125),
        ("plan", "full", True, True, 300, 100, 100, 2.0, 1.0, 1.0, 0.10),       # fitted: left out
        ("plan", "selective", True, False, 400, 150, 160, 0.7, 1.0, 0.13, 0.10),
        ("full", "full", True, True, 100, 100, 100, 1.3, 1.3, 0.13, 0.13),
        ("megatron-block", "block:1", True, False, 100, 100, 80, 1.1, 1.1, 0.11, 0.11),
        ("none", "none", False, True, 100, 150, None, 1.0, None, 0.10, None),
        ("megatron-block", "none,none,full,full", True, False, 200, 150, 150, 1.0, 1.25, 0.10, 0.125),
        ("megatron-uniform", "uniform:2", True, False, 200, 195, 201, 1.0, 1.0, 0.10, 0.10),
    ]
    frame = pd.DataFrame([{**common, "method": m, "spec": s, "feasible": f, "reference": r, "budget_bytes": b * MiB,
                           "predicted_peak_bytes": pp * MiB, "measured_peak_bytes": None if mp is None else mp * MiB,
                           "predicted_slowdown": ps, "measured_slowdown": ms, "predicted_step_time_s": pt,
                           "measured_step_time_s": mt}
                          for m, s, f, r, b, pp, mp, ps, ms, pt, mt in rows])
    frame["peak_error_bytes"] = frame["predicted_peak_bytes"] - frame["measured_peak_bytes"]
    frame["peak_rel_error"] = frame["predicted_peak_bytes"] / frame["measured_peak_bytes"] - 1
    frame["slowdown_rel_error"] = frame["predicted_slowdown"] / frame["measured_slowdown"] - 1
    frame["time_rel_error"] = frame["predicted_step_time_s"] / frame["measured_step_time_s"] - 1
    return frame


def test_validation_numbers_by_hand():
    v = planner_summary.validation_numbers(validate_rows())
    # predictions only: the plan "full" and the baseline "full" are calibration points (the none row is not applied)
    assert (v["plans"], v["plans_in_budget"], v["plans_exact"], v["references"]) == (3, 3, 1, 2)
    assert v["plan_peak_error"] == pytest.approx(0.1)              # 99/90 − 1 = 0.1; 0; |150/160 − 1| = 0.0625
    # block:1 (80 MiB ≤ 100), none,none,full,full (150 ≤ 200, exact), uniform:2 (201 MiB > 200 MiB)
    assert (v["baselines"], v["baselines_in_budget"], v["baselines_exact"]) == (3, 2, 1)
    assert v["baseline_peak_error"] == pytest.approx(0.25)         # block: 100/80 − 1
    assert v["worst_baseline"] == "megatron-block"
    # over-predicted: none,full,full,full (+0.1) and block:1 (+0.25); under: selective, uniform:2
    assert v["over"][0] == 2 and v["over"][1] == pytest.approx(0.25) and v["over"][2] == "block:1"
    assert v["under"] == 2 and v["base_error_bytes"] == 24
    # slowdown errors 1.2/1 − 1 = 0.2, |1/1.25 − 1| = 0.2, |0.7/1 − 1| = 0.3 (the fitted plan's 1.0 left out);
    # time errors 0.12/0.10 − 1 = 0.2, |0.10/0.125 − 1| = 0.2, |0.13/0.10 − 1| = 0.3
    assert v["slowdown_error"] == pytest.approx((0.2, 0.3))
    assert v["time_error"] == pytest.approx((0.2, 0.3))


def test_validate_settings_and_table():
    frame = validate_rows()
    setup = planner_summary.validate_settings(frame)
    assert setup == {"device": "cpu", "threads": 1, "rounds": 3, "repeats": 5, "points": 4,
                     "models": [{"layers": 4, "seq": 64, "micro_batch": 2, "hidden": 64, "heads": 4}]}
    table = planner_summary.validate_table(frame)
    assert list(table["plan"]) == ["1 none, 3 full", "2 none, 2 full", "all full", "all selective"]
    assert list(table["budget (MiB)"]) == [100, 200, 300, 400]
    assert list(table["measured peak (MiB)"]) == [90, 150, 100, 160]
    assert list(table["peak error (bytes)"]) == [9 * MiB, 0, 0, -10 * MiB]
    assert list(table["calibration point"]) == [False, False, True, False]
    assert math.isclose(table["peak error"].iloc[3], -0.0625)


def test_peak_errors_list_every_applied_plan_once():
    table = planner_summary.peak_errors(validate_rows())
    assert list(table["plan"]) == ["selective", "uniform:2", "full", "none,none,full,full", "none,full,full,full",
                                   "block:1"]
    assert list(table["error (bytes)"]) == [-10 * MiB, -6 * MiB, 0, 0, 9 * MiB, 20 * MiB]
    assert list(table["chosen by"])[2:4] == ["plan, full", "plan, megatron-block"]
    assert list(table["calibration point"]) == [False, False, True, False, False, False]
    assert table["error"].iloc[5] == pytest.approx(0.25)


def test_error_by_kind_groups_the_predicted_plans():
    assert planner_summary.plan_kind("none,full,full,none", 4) == "none and full layers"
    assert planner_summary.plan_kind("block:2", 4) == "none and full layers"
    assert planner_summary.plan_kind("uniform:1", 4) == "none and full layers"
    assert planner_summary.plan_kind("full,selective,none,none", 4) == "with selective layers"
    assert planner_summary.plan_kind("segments:2", 4) == "multi-layer checkpoint units"
    table = planner_summary.error_by_kind(validate_rows()).set_index("plans")
    # none,full,full,full (+0.1), none,none,full,full (exact, twice: counted once), block:1 (+0.25);
    # selective (−0.0625); uniform:2 (195/201 − 1); the two fitted "full" rows are left out
    assert list(table.index) == ["none and full layers", "with selective layers", "multi-layer checkpoint units"]
    assert list(table["applied"]) == [3, 1, 1] and list(table["exact to the byte"]) == [1, 0, 0]
    assert table.loc["none and full layers", "largest over"] == pytest.approx(0.25)
    assert table.loc["none and full layers", "largest under"] == 0
    assert table.loc["with selective layers", "largest under"] == pytest.approx(-0.0625)
    assert table.loc["multi-layer checkpoint units", "largest under"] == pytest.approx(195 / 201 - 1)


# --- wording: each sentence reads right for all, none and some ---------------------------------------------------

def two_settings(plan_s: float, base_s: float) -> pd.DataFrame:
    layout = {"tp": 1, "pp": 1, "interleave": 1, "micro_batch": 1, "peak_bytes": GiB,
              "n_none": 1, "n_selective": 1, "n_full": 0, "n_offload": 0}
    rows = []
    for model in ("a", "b"):
        rows += [{"model": model, "gpu": "g", "sp": True, "method": "plan", "feasible": True,
                  "step_time_s": plan_s, **layout},
                 {"model": model, "gpu": "g", "sp": True, "method": "full", "feasible": True,
                  "step_time_s": base_s, **layout}]
    return pd.DataFrame(rows)


def test_uniform_gain_and_its_wording():
    gain = planner_summary.uniform_gain(paper_rows())      # a: selective 2.2 / 2.0; b, c: nothing to compare
    assert gain["settings"] == 1 and gain["largest"] == pytest.approx(0.1) and gain["slower"] == 0
    assert gain["faster"] == 1 and gain["ties"] == 0
    assert planner_summary.uniform_text(gain) == (
        "faster than the fastest uniform policy (none, selective or full on every layer) in the one setting "
        "where both fit (by 10.00%)")
    ties = planner_summary.uniform_gain(two_settings(1.0, 1.0))
    assert planner_summary.uniform_text(ties).startswith("as fast as the fastest uniform policy")
    assert planner_summary.uniform_text(ties).endswith("in both settings where both fit")
    assert planner_summary.uniform_text({"settings": 0}).startswith("never compared")


@pytest.mark.parametrize("gain, text", [
    ({"settings": 16, "faster": 12, "ties": 4, "slower": 0, "largest": 0.244, "smallest": 0.0},
     "faster than X in 12 of the 16 settings where both fit (by up to 24.40%) and as fast in the other 4"),
    ({"settings": 16, "faster": 16, "ties": 0, "slower": 0, "largest": 0.0675, "smallest": 0.001},
     "faster than X in all 16 settings where both fit (by up to 6.75%)"),
    ({"settings": 5, "faster": 2, "ties": 1, "slower": 2, "largest": 0.1, "smallest": -0.05},
     "faster than X in 2 of the 5 settings where both fit (by up to 10.00%), as fast in 1 and slower in the "
     "other 2 (by up to 5.00%)"),
    ({"settings": 3, "faster": 0, "ties": 2, "slower": 1, "largest": 0.0, "smallest": -0.02},
     "as fast as X in 2 of the 3 settings where both fit and slower in the other 1 (by 2.00%)"),
])
def test_versus_text_reads_right_for_every_outcome(gain, text):
    assert planner_summary.versus_text(gain, "X") == text


def test_baseline_gain_counts_every_baseline_and_is_at_most_the_uniform_gain():
    rows = paper_rows()
    rows = pd.concat([rows, rows.iloc[[1]].assign(method="megatron-block", step_time_s=2.1)], ignore_index=True)
    best, uniform = planner_summary.baseline_gain(rows), planner_summary.uniform_gain(rows)
    assert best["largest"] == pytest.approx(0.05) and uniform["largest"] == pytest.approx(0.1)   # 2.1 / 2.0, 2.2 / 2.0
    table = planner_summary.paper_table(rows).iloc[0]
    assert (table["fastest uniform"], table["uniform step (s)"]) == ("selective", 2.2)
    assert table["uniform gain"] == pytest.approx(0.1)
    assert (table["best baseline"], table["plan gain"]) == ("megatron-block", pytest.approx(0.05))
    assert planner_summary.baseline_names(rows) == (4, "the 3 uniform policies and Megatron block")


def test_paper_display_words_and_units():
    shown = planner_summary.paper_display(planner_summary.paper_table(paper_rows()))
    assert list(shown["SP"]) == ["yes", "no", "no"]
    a, b, c = (shown.iloc[i] for i in range(3))
    assert (a["gain over uniform (%)"], a["gain over fastest baseline (%)"]) == ("10.00", "10.00")
    assert (b["plan (layers per policy)"], b["step (s)"], b["fastest baseline"]) == ("does not fit", "—", "—")
    assert (c["fastest uniform policy"], c["gain over uniform (%)"]) == ("—", "—")
    assert not any("_" in h for h in shown.columns)


def test_time_limit_text():
    assert planner_summary.time_limit_text(10, "budget", 20, "setting", "paper-model plans") == (
        "10 s per budget; the paper-model plans gave it 20 s per setting")
    assert planner_summary.time_limit_text(20.0, "setting", 20, "budget", "frontier") == (
        "20 s per setting, the same limit as the frontier")


def test_validation_displays_use_yes_no_and_signed_percent():
    frame = validate_rows()
    shown = planner_summary.validate_display(planner_summary.validate_table(frame))
    assert set(shown["calibration point"]) <= {"yes", "no"} and "yes" in set(shown["calibration point"])
    assert list(shown["peak error (%)"])[:2] == ["+10.00", "0.00"]
    assert list(shown["peak error (bytes)"])[:2] == [f"+{9 * MiB:,}", "0"]
    errors = planner_summary.errors_display(planner_summary.peak_errors(frame))
    assert set(errors["calibration point"]) == {"yes", "no"} and "0.00" in set(errors["error (%)"])
    kinds = planner_summary.kinds_display(planner_summary.error_by_kind(frame))
    assert kinds.iloc[0]["largest over-prediction (%)"] == "+25.00"
    assert kinds.iloc[0]["largest under-prediction (%)"] == "0.00"
    assert kinds.iloc[1]["largest under-prediction (%)"] == "−6.25"   # true minus (wording.signed_percent)
    under = [v for v in errors["error (bytes)"] if v[:1] in "-−"]
    assert under and all(v.startswith("−") for v in under)          # the bytes column signs alike
    for table in (shown, errors, kinds):
        assert not any("_" in h for h in table.columns)


def test_use_text():
    assert planner_summary.use_text(paper_rows()) == (
        "recomputes core attention (selective) in 1, runs full recompute in 1 and offloads in 1")


@pytest.mark.parametrize("n, worse, text", [
    (24, 0, "No baseline is predicted faster than the plan at any of the 24 budgets."),
    (2, 0, "No baseline is predicted faster than the plan at either budget."),
    (1, 0, "No baseline is predicted faster than the plan at the one budget."),
    (24, 3, "A baseline is predicted faster than the plan at 3 of the 24 budgets."),
    (0, 0, "The plan fits at no budget."),
])
def test_beaten_text(n, worse, text):
    assert planner_summary.beaten_text(n, worse) == text


def test_validation_text_by_hand():
    v = planner_summary.validation_numbers(validate_rows())
    assert planner_summary.plans_text(v) == (
        "All 3 plans stay within budget when applied, and 1 is predicted to the byte; the largest error is "
        "10.00%.")
    assert planner_summary.baselines_text(v) == (
        "Of the feasible baselines applied, 2 of the 3 rows fit within budget, and 1 is predicted to the byte; "
        "the largest error is 25.00% (megatron-block).")
    assert planner_summary.under_text(v) == "2 of the 6 rows are predicted below the measured peak."


@pytest.mark.parametrize("k, n, text", [
    (36, 36, "All 36 plans stay within budget when applied, and every one is predicted to the byte."),
    (2, 2, "Both plans stay within budget when applied, and both are predicted to the byte."),
    (1, 1, "The one plan stays within budget when applied, and it is predicted to the byte."),
])
def test_plans_text_when_all_are_exact(k, n, text):
    v = {"plans": n, "plans_in_budget": k, "plans_exact": k, "plan_peak_error": 0.0}
    assert planner_summary.plans_text(v) == text


@pytest.mark.parametrize("exact, n, who", [(0, 5, "none is"), (0, 2, "neither is"), (0, 1, "it is not"),
                                            (1, 5, "1 is"), (3, 5, "3 are")])
def test_plans_text_when_some_or_none_are_exact(exact, n, who):
    v = {"plans": n, "plans_in_budget": n, "plans_exact": exact, "plan_peak_error": 0.0123}
    assert planner_summary.plans_text(v).endswith(f"{who} predicted to the byte; the largest error is 1.23%.")


def test_plans_and_baselines_text_when_none_was_applied():
    assert planner_summary.plans_text({"plans": 0}) == "No plan was applied."
    assert planner_summary.baselines_text({"baselines": 0}) == "No feasible baseline was applied."


def test_noise_text_sets_the_worst_slowdown_error_against_the_worst_peak_error():
    v = planner_summary.validation_numbers(validate_rows())
    assert v["slowdown_error"][1] == pytest.approx(0.3) and v["plan_peak_error"] == pytest.approx(0.1)  # 0.7/1 − 1
    assert planner_summary.noise_text(v) == (
        "Times on this machine are noisier than bytes (the largest peak error is 10.00%):")
    # like with like: a median slowdown error under the worst peak error does not make times the closer ones
    closer = {"slowdown_error": (0.05, 0.08), "plan_peak_error": 0.1}
    assert planner_summary.noise_text(closer) == (
        "Times agree at least as closely as bytes here (the largest peak error is 10.00%):")
    assert planner_summary.noise_text({"slowdown_error": (0.05, 0.2), "plan_peak_error": 0.1}).startswith(
        "Times on this machine are noisier than bytes")
    assert planner_summary.noise_text({"slowdown_error": (0.0, 0.0), "plan_peak_error": 0.0}) == (
        "Times agree at least as closely as bytes here (every peak is predicted to the byte):")
    for broken in ({"slowdown_error": (0.1, 0.2), "plan_peak_error": float("nan")},
                   {"slowdown_error": (float("nan"), float("nan")), "plan_peak_error": 0.1}):
        assert planner_summary.noise_text(broken).startswith("Times are not set against bytes here")


def test_kinds_text_and_small_sentences():
    kinds = planner_summary.error_by_kind(validate_rows())
    assert planner_summary.kinds_text(kinds) == (
        "none and full layers: 1 of the 3 plans exact to the byte, over-predicted by up to 25.00%; "
        "with selective layers: not exact to the byte, under-predicted by up to 6.25%; "
        f"multi-layer checkpoint units: not exact to the byte, under-predicted by up to {1 - 195 / 201:.2%}")
    assert planner_summary.kinds_text(kinds.iloc[:0]) == "no plan was applied"
    assert planner_summary.under_text({"plans": 3, "baselines": 0, "under": 0}) == \
        "No row is predicted below its measured peak."
    assert planner_summary.base_text(0) == "to the byte"
    assert planner_summary.base_text(1) == "within 1 byte"
    assert planner_summary.base_text(4096) == "within 4,096 bytes"


def test_references_and_timing_text():
    assert planner_summary.references_text(validate_rows()) == (
        "Applied rows that are a calibration step after all (2 here, chosen by plan, full) are left out of the "
        "errors below.")
    frame = validate_rows()
    frame = frame[frame["spec"] != "full"].assign(reference=False)
    assert planner_summary.references_text(frame).startswith("No applied row is a calibration step")
    setup = planner_summary.validate_settings(validate_rows())
    assert planner_summary.timing_text(setup) == "3 interleaved rounds of 5 timed steps per plan, on 1 intra-op " \
                                                 "thread of the CPU"
    assert planner_summary.timing_text({**setup, "device": "cuda", "rounds": 1}) == \
        "1 interleaved round of 5 timed steps per plan, on cuda"


def table5_rows(ratios=(1.39, 1.38), paper=(1.29, 1.32), present=(0.8, 11.0)):
    return pd.DataFrame({"model": ["a", "b"], "ratio": ratios, "paper_ratio": paper,
                         "difference_s": [0.34, 4.27], "paper_difference_s": [0.32, 4.38],
                         "present_s": present, "paper_present_s": [1.0, 13.75]})


def test_table5_text_follows_the_data():
    text = planner_summary.table5_text(table5_rows())
    assert "a 1.39 (paper 1.29), b 1.38 (paper 1.32)" in text
    assert f"{0.34 / 0.32 - 1:.1%} from the paper's at most" in text
    assert "80%, 80% of the paper's, below them because" in text
    assert "so the predicted ratio is above it for every model" in text
    assert "not above the paper's for any model" in planner_summary.table5_text(table5_rows(ratios=(1.2, 1.3)))
    assert "above the paper's for one of the two models" in planner_summary.table5_text(table5_rows(ratios=(1.2, 1.4)))
    assert "although the model leaves out" in planner_summary.table5_text(table5_rows(present=(1.1, 11.0)))
    assert planner_summary.table5_range(table5_rows()) == "1.38–1.39× (paper 1.29–1.32×)"
    assert planner_summary.table5_range(table5_rows(ratios=(1.3, 1.3), paper=(1.3, 1.3))) == "1.30× (paper 1.30×)"


def test_assumptions_display_headers_carry_units():
    table = pd.DataFrame([{"gpu": "a", "peak_flops": 312e12, "achievable": 0.8, "memory_bytes_per_s": 1733e9,
                           "nvlink_bytes_per_s": 210e9, "link_bytes_per_s": 25.6e9, "gpus_per_host_link": 2,
                           "link_t0_s": 1e-5, "weight_bytes": 2, "grad_bytes": 4, "optimizer_bytes": 12,
                           "reserve_bytes": 2 * GiB, "host_limit_bytes": 256 * GiB}])
    shown = planner_summary.assumptions_display(planner_summary.assumptions(table))
    assert shown.iloc[0]["GPU"] == "a" and shown.iloc[0]["latency per copy (µs)"] == pytest.approx(10)
    assert shown.iloc[0]["model-state bytes / parameter"] == 18
