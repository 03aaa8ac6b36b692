"""The sweeps report's generated sentences (remat.experiments.sweeps_summary wording helpers): every verdict
word follows the numbers, and every case (all / none / some, equal / within / beyond) reads as English."""

from __future__ import annotations

import pandas as pd

from remat.experiments import sweeps_summary as s
from remat.experiments import time_summary
from remat.experiments.time_summary import TIME_MODEL_BAND


def kib(n: float) -> str:
    return f"{n / 1024:.0f} KiB"


def test_not_run_text():
    assert s.not_run_text(0, 8) == "every point ran"
    assert s.not_run_text(2, 8) == "2 of the 8 points did not run (oom or too large)"
    assert s.not_run_text(3, 3) == "no point ran (all 3 points: oom or too large)"


def test_saved_text_says_equal_only_when_exact():
    assert s.saved_text(0.0, 16, 16) == "the saved bytes equal the closed form at every $k$"
    assert s.saved_text(0.0, 14, 16) == "the saved bytes equal the closed form at each of the 14 $k$ that ran"
    assert s.saved_text(0.001, 5, 5, where="point", wheres="points") == (
        "the saved bytes match the closed form within 0.100% at every point (the acceptance allows 2%)")
    assert s.saved_text(0.05, 3, 4, where="point", wheres="points") == (
        "the saved bytes deviate from the closed form by up to 5.000% at each of the 3 points that ran, more than "
        "the 2% the acceptance allows")
    assert s.saved_text(float("nan"), 0, 4).startswith("no $k$ was measured")


def test_optimum_text_does_not_say_not_at_sqrt_l_when_it_is():
    at_sqrt = s.optimum_text(4, 4, 4, "1 MiB", "5 MiB", "1 MiB")
    assert "lowest at Chen's $k = \\sqrt L$ itself, $k$ = 4 (the closed form agrees" in at_sqrt
    assert "not at" not in at_sqrt
    elsewhere = s.optimum_text(16, 12, 4, "1.5 MiB", "5 MiB", "0.8 MiB")
    assert elsewhere.startswith("The measured peak is lowest at $k$ = 16 (closed form: 12), not at Chen's")
    assert "(4, peak 1.5 MiB; no checkpoints: 5 MiB; optimum: 0.8 MiB)" in elsewhere


def test_residual_text_follows_the_sign():
    assert s.residual_text(1024, 2048, kib) == "exceeds the live saved bytes by 1 KiB to 2 KiB at every $k$"
    assert s.residual_text(1024, 1024, kib) == "exceeds the live saved bytes by 1 KiB at every $k$"
    assert s.residual_text(-2048, -1024, kib) == "stays below the live saved bytes, by 1 KiB to 2 KiB, at every $k$"
    assert s.residual_text(-1024, 2048, kib).startswith("differs from the live saved bytes by -1 KiB to 2 KiB")
    assert "no point was measured" in s.residual_text(float("nan"), float("nan"), kib)


def test_time_flop_text():
    assert s.time_flop_text(2.29).startswith("Recomputation costs more time than its FLOPs predict")
    assert s.time_flop_text(0.8).startswith("Recomputation costs less time")
    assert s.time_flop_text(1.0).startswith("Recomputation costs as much time")
    assert "not timed" in s.time_flop_text(float("nan"))


def test_growth_text():
    assert s.growth_text(1024, 4096, kib) == "grows from 1 KiB to 4 KiB"
    assert s.growth_text(4096, 1024, kib) == "shrinks from 4 KiB to 1 KiB"
    assert s.growth_text(1024, 1024, kib) == "stays at 1 KiB"


def test_overhead_text_says_adds_only_for_a_positive_overhead():
    assert s.overhead_text("selective", 0.2214, 0.02564, 8.634, 2) == (
        "selective recompute adds 22.1% to the layer's time for 2.56% more FLOPs (8.63× the FLOP prediction)")
    assert s.overhead_text("full", -0.03, 1 / 3, -0.09).startswith("full recompute measured 3.0% faster than none")
    assert s.overhead_text("full", 0.0, 1 / 3, 0.0) == "full recompute took the same time as none despite 33.3% more FLOPs"


def test_intercept_text():
    assert "pulls the log–log slopes below" in s.intercept_text(2048, 0.9, kib)
    assert s.intercept_text(-1024, 1.0, kib) == "The intercept is $c_0$ = -1 KiB (head, loss, the backward working set)."


def test_gap_text_names_the_modes_that_keep_more():
    modes = pd.Series(["none", "selective", "full"])
    assert "under none and selective; the difference is LayerNorm mean and rstd alone" in s.gap_text(
        pd.Series([8, 8, 0]), pd.Series([8, 8, 0]), modes)
    assert "under every mode; the difference is itemized" in s.gap_text(pd.Series([8, 9, 1]), pd.Series([8, 8, 0]),
                                                                      modes)
    assert s.gap_text(pd.Series([0, 0, 0]), pd.Series([0, 0, 0]), modes) == (
        "The torch layer keeps exactly what the paper counts at every point.")


def test_within_band_and_selective_model_text():
    frame = pd.DataFrame({"error": [0.1, -0.3, 0.25, -0.25]})
    assert s.within_band(frame, 0.25) == (3, 4)
    assert s.selective_model_text([(256, 0.05, 0.46), (512, 0.03, 0.09)]).startswith(
        "the measured selective overhead is larger than predicted at every size ($h$ = 256: predicted 5.0%, "
        "measured 46.0%")
    assert s.selective_model_text([(256, 0.05, 0.04)]).startswith(
        "the measured selective overhead is at most the prediction at the one size")
    assert s.selective_model_text([(256, 0.05, 0.46), (512, 0.03, 0.02), (1024, 0.02, 0.01)]).startswith(
        "the measured selective overhead is larger than predicted at 1 of the 3 sizes")
    assert s.selective_model_text([]) == "No selective overhead was measured."


def test_validation_checks_share_within_the_time_model_band():
    frame = pd.DataFrame({"phase": ["forward", "backward", "combined", "combined"],
                          "mode": ["none"] * 3 + ["selective"],
                          "error": [0.1, -0.3, 0.25, -0.2], "flops_per_s": 1e9, "memory_bytes_per_s": 1e9,
                          "op_overhead_s": 1e-6, "hidden": 64, "predicted_overhead": 0.1, "measured_overhead": 0.2})
    checks = time_summary.validation_checks(frame)
    assert checks["band"] == TIME_MODEL_BAND == 0.25 and checks["within_band"] == 0.75
    assert checks["within_band"] == s.within_band(frame, TIME_MODEL_BAND)[0] / len(frame)
    assert time_summary.validation_checks(frame, band=0.1)["within_band"] == 0.25
    assert checks["selective"] == [(64, 0.1, 0.2)]


def test_acceptance_text():
    acc = pd.DataFrame({"device": ["cpu"] * 3, "check": ["a", "b", "c"], "met": ["yes", "yes", "yes"]})
    assert s.acceptance_text(acc) == "all 3 checks are met"
    assert s.acceptance_text(acc.iloc[:1]) == "the one check is met"
    acc.loc[1, "met"] = "NO"
    assert s.acceptance_text(acc) == "1 of the 3 checks is NOT met (cpu: b)"
    assert s.acceptance_text(acc.iloc[:2]) == "one of the two checks is NOT met (cpu: b)"
    assert s.acceptance_text(acc.iloc[:0]) == "there are no checks yet (no sweep table)"
