"""chen-resnet / chen-lstm at tiny sizes: the traced graphs planned by every strategy, Algorithm 3's budgets,
the findings and the figures (the paper's sizes run in the pipeline and benchmarks/bench_chen_memplan.py)."""

from __future__ import annotations

import pytest

from remat.experiments import chen_graph

from remat.analysis import catalog, chen2016 as chen_summary
from remat.analysis.findings import MEASURED, NOT_MEASURED, REPRODUCED
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


def test_findings_and_figures_from_the_tables(tables, tmp_path):
    resnet, lstm = tables
    from remat.experiments.chen import DepthParams, depth_sweep

    depth = depth_sweep(DepthParams(depths=[2, 4, 8, 16, 32, 64], width=4))
    for table, frame in (("depth", depth), ("resnet", resnet), ("lstm", lstm)):
        path = catalog.path(f"chen.{table}", root=tmp_path)
        path.parent.mkdir(parents=True, exist_ok=True)
        frame.to_csv(path, index=False)
    found = {f.id: f for f in chen_summary.findings(tmp_path)}
    assert found["sqrt"].status == REPRODUCED                          # √L on the chain
    assert found["resnet"].claim == "1,000-layer ResNet: memory reduction of the sublinear plan"
    assert found["resnet"].status == found["lstm"].status == NOT_MEASURED    # depth 1000, 64 steps not swept
    assert found["speed"].reason == "snakemake results/chen/speed/cpu.csv"
    assert found["budget.resnet"].status == MEASURED
    for draw, frame in ((figures.resnet, resnet), (figures.lstm, lstm)):
        fig = draw([frame])
        assert len(fig.axes) == 2 and fig.axes[0].get_legend_handles_labels()[1]
