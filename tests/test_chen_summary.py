"""The chen2016 report's wording helpers (remat.experiments.chen_summary): every sentence reads right whether all,
none or some of the things counted agree (small hand-made tables)."""

from __future__ import annotations

import pandas as pd

from remat.experiments import chen_summary as chen


def check_rows(bitwise=(True, True, True), diff=0.0, passed=(True, True, True)):
    return pd.DataFrame({"bitwise_equal": bitwise, "max_abs_diff_vs_naive": [0.0, diff, 0.0], "passed": passed})


def test_check_text():
    assert chen.check_text(check_rows()).startswith(
        "All 3 schedules passed, and every gradient equals the plain backward's bit for bit: recomputation")
    assert chen.check_text(check_rows(bitwise=(True, False, True), diff=1e-7, passed=(True, False, True))) == (
        "2 of the 3 schedules passed; 2 of the 3 schedules give gradients bitwise equal to the plain backward's, "
        "and the largest difference from it is 1.0e-07")


def test_agree_and_segments_exact():
    frame = pd.DataFrame({"peak_bytes": [1, 2, 3], "peak_bytes_formula": [1, 2, 4], "forwards": [5, 6, 7],
                          "forwards_formula": [5, 6, 7]})
    assert chen.segments_exact(frame) == 2
    assert chen.agree_text(2, 3, "value") == "only at 2 of the 3 values"
    assert chen.agree_text(3, 3, "value") == "at all 3 values"
    assert chen.agree_text(0, 3, "value") == "at none of the 3 values"
    assert chen.agree_text(2, 2, "pair") == "at both pairs"


def test_graph_check_and_unknown_ops_text():
    frame = pd.DataFrame({"bitwise_equal": [True] * 45})
    assert chen.graph_check_text(frame) == "all 45 plans give"
    assert chen.graph_check_text(frame.assign(bitwise_equal=[False] + [True] * 44)) == "44 of the 45 plans give"
    assert chen.unknown_ops_text(0) == "no op of either net fell"
    assert chen.unknown_ops_text(1) == "1 op of the two nets fell"
    assert chen.unknown_ops_text(3) == "3 ops of the two nets fell"


def test_above_and_xy_text():
    assert chen.above_text(0, 2) == "the measured overhead stays at or below it"
    assert chen.above_text(0, 0) == "no net was measured with the sublinear plan"
    assert chen.above_text(2, 2).startswith("the measured overhead is above it for both nets — ")
    assert chen.above_text(1, 2).startswith("the measured overhead is above it for one of the two nets — ")
    assert chen.xy_text([]) == "Here the optimum of x + y plans no more bytes than the grid's best."
    assert chen.xy_text(["ResNet", "LSTM"]).startswith("On the ResNet and the LSTM the optimum of x + y plans more")
