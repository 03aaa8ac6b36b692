"""The chen2016 report's wording helpers (remat.analysis.chen2016): every sentence reads right whether all,
none or some of the things counted agree (small hand-made tables)."""

from __future__ import annotations

import pandas as pd

from remat.analysis import chen2016 as chen


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


def test_sqrt_extra_text_states_the_deepest_and_the_largest_share():
    depth = pd.DataFrame({"family": ["sqrt"] * 3 + ["none"], "layers": [2, 64, 512, 512],
                          "extra_forwards": [1, 56, 490, 0]})
    assert chen.sqrt_extra_text(depth) == (
        "490 extra layer forwards at L = 512, 0.96 of a forward pass, the most over the sweep (L = 2…512)")
    higher = depth.assign(extra_forwards=[1, 62, 460, 0])
    assert chen.sqrt_extra_text(higher) == (
        "460 extra layer forwards at L = 512, 0.90 of a forward pass; at most 0.97 over the sweep "
        "(L = 2…512, at L = 64)")


def test_decimal_unit_and_size_text_one_unit_per_net():
    assert chen.decimal_unit([134.6e9, 3.19e9]) == ("GB", 1e9)
    assert chen.decimal_unit([3.52e9, 148.7e6, 0]) == ("MB", 1e6)
    assert chen.decimal_unit([512]) == ("B", 1.0)
    assert chen.size_text(37_166_000_000, ("GB", 1e9)) == "37.17 GB"
    assert chen.size_text(148_710_000, ("MB", 1e6)) == "148.71 MB"


def test_depth_fits_table_has_readable_headers():
    fits = pd.DataFrame({"family": ["recursive"], "exponent": [0.19315], "bytes_per_doubling": [256.0],
                         "r2_log2": [0.999994], "forwards_exponent": [1.2262]})
    shown = chen.depth_fits_table(fits)
    assert list(shown.columns) == ["schedule", "peak bytes: log–log exponent", "peak bytes per doubling of L",
                                   "r² of peak ≈ a + b·log₂ L", "forwards: log–log exponent"]
    assert shown.iloc[0].tolist() == ["recursive", 0.193, 256.0, 1.0, 1.226]
    assert chen.depth_fits_table(fits.set_index("family")).equals(shown)
