"""Per-rank plans run on real gloo ranks (remat.experiments.pipeline_ranks): torch.distributed.pipelining's
schedules on this CPU, each rank its own plan. Gradients equal the unsplit model's bit for bit; the peak each rank
reaches is the prediction's within what this machine measured when the accounting was last changed (2 ranks,
s = 128, h = 128, b = 2, N = 8, float32; the layers' backward workspace and RoPE tables counted: 1F1B within 0.17 MB
either way, GPipe 3.3–3.9 MB over-predicted, not yet explained), and within its budget."""

from __future__ import annotations

import pytest

from remat.experiments.pipeline_ranks import PipelineParams, pipeline

MB = 10**6


@pytest.fixture(scope="module")
def table():
    return pipeline(PipelineParams(sizes=[2], schedules=["GPipe", "1F1B"]))


@pytest.mark.slow
def test_each_rank_trains_exactly_as_the_unsplit_model(table):
    assert len(table) == 4 and set(table["rank"]) == {0, 1}
    assert (table["grads_max_rel_error"] == 0).all() and (table["grads_missing"] == 0).all()
    assert table.groupby("schedule")["plan"].apply(lambda p: p.str.contains("none|selective|full").all()).all()


@pytest.mark.slow
def test_each_ranks_peak_is_its_prediction_within_what_was_measured(table):
    err = table.set_index("schedule")["peak_error_bytes"]
    assert err["1F1B"].between(-0.5 * MB, 0.5 * MB).all()
    assert err["GPipe"].between(0, 4.5 * MB).all()             # over-predicted, not yet explained
    assert (table["measured_peak_bytes"] <= table["budget_bytes"]).all()
    assert (table["measured_peak_bytes"] > 0).all() and set(table["peak_method"]) == {"torch.distributed._tools."
                                                                                      "mem_tracker.MemTracker"}
