"""chen-resnet / chen-lstm at tiny sizes: the traced graphs planned by every strategy, Algorithm 3's budgets,
the claims table and the figures (the paper's sizes run in the pipeline and benchmarks/bench_chen_memplan.py)."""

from __future__ import annotations

import pandas as pd
import pytest

from remat.experiments import chen_graph

from remat.analysis import chen2016 as chen_summary
from remat.figures import chen as figures
from remat.graph.budget import GRID_POINTS

TINY_RESNET = chen_graph.ResNetParams(depths=[14, 20, 26], batch=2, image=32, width=8, classes=10)
TINY_LSTM = chen_graph.LSTMParams(lengths=[4, 8, 16], layers=2, hidden=16, classes=10, batch=2)


@pytest.fixture(scope="module")
def tables():
    return chen_graph.resnet_memory(TINY_RESNET), chen_graph.lstm_memory(TINY_LSTM)


@pytest.mark.parametrize("which,size", [(0, "depth"), (1, "length")])
def test_every_strategy_and_budget_at_every_size(tables, which, size):
    frame = tables[which]
    for n, part in frame.groupby(size):
        by = part.set_index("strategy")
        single = by.drop(index="budget")
        assert sorted(single.index) == sorted([*chen_graph.strategies.STRATEGIES, "sqrt", "optimal"])
        budgets = part[part["strategy"] == "budget"]
        assert len(budgets) == 1 + 1 + GRID_POINTS                # B = 0, B₀, the grid
        assert by.loc["sublinear", "planned_bytes"] == budgets["planned_bytes"].iloc[1:].min()
        planned = single["planned_bytes"]
        assert planned["no-opt"] > planned["inplace"] > planned["sharing"] > planned["sublinear"]
        assert (single["planned_bytes"] >= single["live_peak_bytes"]).all()
        assert single.loc["sharing", "recompute_flops"] == 0 < single.loc["sublinear", "recompute_flops"]
    assert (frame["other_ops"] == 0).all()


def test_resnet_rows_name_the_built_depth(tables):
    resnet = tables[0]
    assert set(resnet["layers"]) == {14, 20, 26} and set(resnet["blocks"]) >= {"1-1-1-1"}


def test_claims_and_figures_from_the_tables(tables, tmp_path):
    resnet, lstm = tables
    from remat.experiments.chen import DepthParams, depth_sweep

    depth = depth_sweep(DepthParams(depths=[2, 4, 8, 16, 32, 64], width=4))
    table = chen_summary.claims(depth, resnet, lstm)
    assert len(table) == 10 and table["status"].str.match(r"reproduced|differs|not measured").all()
    assert table.loc["sqrt", "status"] == "reproduced"                # √L on the chain
    assert table.loc["sqrt-forwards", "status"] == "reproduced"       # at most one extra forward
    assert table.loc["resnet", "claim"] == "1000-layer ResNet: memory before → with the sublinear plan"
    assert table.loc["resnet", "status"].startswith("not measured")
    assert table.loc["lstm", "claim"] == "LSTM, 64 steps: reduction over the optimised plan"
    assert table.loc["lstm", "status"].startswith("not measured")
    for draw, frame in ((figures.resnet, resnet), (figures.lstm, lstm)):
        fig = draw([frame])
        assert len(fig.axes) == 2 and fig.axes[0].get_legend_handles_labels()[1]


def test_budget_table_lists_every_budget_and_the_comparisons(tables):
    shown = chen_summary.budget_table(tables[0], "depth")
    assert list(shown["plan"]).count("budget") == 2 + GRID_POINTS
    assert {"sublinear", "sqrt", "optimal"} <= set(shown["plan"])
