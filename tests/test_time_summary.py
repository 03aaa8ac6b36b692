"""time_summary: the time-model tables' display frames, their headers with their units."""

from __future__ import annotations

import pandas as pd

from remat.experiments import time_summary


def test_display_headers_name_their_units():
    t5 = pd.DataFrame({"model": ["gpt-22b"], "gpus": [8], "full_s": [1.234], "paper_full_s": [1.42],
                       "present_s": [1.111], "paper_present_s": [1.1], "ratio": [0.9], "paper_ratio": [0.77],
                       "difference_s": [0.12], "paper_difference_s": [0.32], "mfu_pct": [41.23],
                       "paper_mfu_pct": [41.5]})
    assert list(time_summary.table5_display(t5).columns) == [
        "model", "GPUs", "full (s)", "paper full (s)", "SP+selective (s)", "paper SP+selective (s)", "ratio",
        "paper ratio", "difference (s)", "paper difference (s)", "MFU (%)", "paper MFU (%)"]
    tm = pd.DataFrame({"hidden": [256], "seq": [128], "micro_batch": [2], "mode": ["selective"],
                       "phase": ["combined"], "predicted_s": [0.0012], "measured_s": [0.001], "error": [0.2],
                       "predicted_overhead": [0.05], "measured_overhead": [None]})
    shown = time_summary.validation_display(tm)
    assert list(shown.columns) == ["h", "s", "b", "mode", "phase", "predicted (ms)", "measured (ms)", "error (%)",
                                   "overhead predicted (%)", "overhead measured (%)"]
    assert shown.iloc[0]["predicted (ms)"] == 1.2 and shown.iloc[0]["overhead measured (%)"] == ""
