"""`remat check` passes on the real schedules and names a broken one (exit 1); the Chen experiments reject
bad parameters with one line naming the key (exit 2, nothing written) and feed `remat figure`."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from remat import cli, schedules
from remat.experiments import chen as experiments
from remat.schedules import Backward, Schedule


def _broken(layers: int) -> Schedule:
    """The plain backward minus the last Backward: layer 0 never gets its gradient."""
    ops = schedules.none(layers).ops
    assert isinstance(ops[-1], Backward)
    return Schedule("broken-skips-layer-0", "broken", None, layers, ops[:-1])


def test_check_passes(capsys):
    assert cli.main(["check", "--layers", "6", "--width", "4", "--json"]) == 0
    found = json.loads(capsys.readouterr().out)
    rows, plans = found["schedules"], found["memory_plans"]
    names = {row["schedule"] for row in rows}
    assert {"none", "sqrt", "recursive(1)", "revolve(1)", "segments(6)"} <= names
    assert all(row["passed"] and row["bitwise_equal"] and row["formula_match"] for row in rows)
    assert {"graph:residual_net/sublinear", "graph:lstm_net/drop-cheap"} <= {p["schedule"] for p in plans}
    assert all(p["passed"] and p["bitwise_equal"] for p in plans)


def test_check_names_a_wrong_memory_plan(monkeypatch, capsys):
    """A planner that lets every value share one storage tag: `remat check` fails naming the plans."""
    import dataclasses

    from remat.graph import memory, strategies

    real = memory.plan_memory

    def one_tag(program, strategy="sharing"):
        plan = real(program, strategy)
        return dataclasses.replace(plan, tag_of={v: 0 for v in plan.tag_of}, tag_bytes=(max(plan.tag_bytes),))

    monkeypatch.setattr(strategies, "plan_memory", one_tag)
    assert cli.main(["check", "--layers", "3", "--width", "3"]) == 1
    captured = capsys.readouterr()
    assert "FAILED schedules: graph:mlp_chain/no-opt" in captured.err


def test_check_names_a_broken_schedule(monkeypatch, capsys):
    real = schedules.catalogue

    def with_broken(layers, slots=None):
        return {**real(layers, slots), "broken-skips-layer-0": _broken(layers)}

    monkeypatch.setattr(schedules, "catalogue", with_broken)
    assert cli.main(["check", "--layers", "5", "--width", "3"]) == 1
    captured = capsys.readouterr()
    assert "FAILED schedules: broken-skips-layer-0" in captured.err
    assert "never back-propagated" in captured.out


def test_gradient_check_flags_wrong_memory_accounting():
    # a schedule labelled segments(2) that in fact keeps everything: gradients fine, bytes not the formula
    disguised = Schedule("segments(2)-disguised", "segments", 2, 6, schedules.none(6).ops)
    table = experiments.gradient_check(layers=6, width=3, extra={disguised.name: disguised}).set_index("schedule")
    row = table.loc["segments(2)-disguised"]
    assert row["bitwise_equal"] and row["fd_rel_error"] < 1e-6
    assert not row["formula_match"] and not row["passed"]
    assert table.drop(index="segments(2)-disguised")["passed"].all()


@pytest.mark.parametrize("name,params,field", [
    ("chen-segments", {"layers": 4, "ks": [2, 5]}, "chen.segments.ks"),
    ("chen-segments", {"layers": 0}, "chen.segments.layers"),
    ("chen-segments", {"bogus": 1}, "chen.segments.bogus"),
    ("chen-depth", {"depths": []}, "chen.depth.depths"),
    ("chen-depth", {"depths": [2, 4], "revolve_slots": 0}, "chen.depth.revolve_slots"),
    ("chen-depth", {"depths": [2, 4], "revolve_slots": "cubic"}, "chen.depth.revolve_slots"),
    ("chen-revolve", {"steps": [3], "slots": [0]}, "chen.revolve.slots"),
    ("chen-check", {"width": "8"}, "chen.check.width"),
    ("chen-segments", {"dtype": "int8", "layers": 3}, "chen.segments.dtype"),
    ("chen-resnet", {"depths": [10]}, "chen.resnet.depths"),
    ("chen-resnet", {"depths": [50, 50]}, "chen.resnet.depths"),
    ("chen-resnet", {"strategies": ["sharing"]}, "chen.resnet.strategies"),
    ("chen-resnet", {"grid_points": 0}, "chen.resnet.grid_points"),
    ("chen-lstm", {"lengths": [0]}, "chen.lstm.lengths"),
    ("chen-lstm", {"lengths": []}, "chen.lstm.lengths"),
    ("chen-lstm", {"lengths": [8]}, "chen.lstm.lengths"),
    ("chen-graph-check", {"blocks": 0}, "chen.graph-check.blocks"),
])
def test_bad_parameters_exit_2_naming_the_key(tmp_path, capsys, name, params, field):
    out = tmp_path / "out.csv"
    assert cli.main(["experiment", name, "--params", json.dumps(params), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"error: {field}:" in err and err.count("\n") == 1
    assert not out.exists() and not list(tmp_path.iterdir())


@pytest.mark.slow
def test_experiments_and_figures_through_the_cli(tmp_path):
    runs = {"segments": {"layers": 9, "width": 4, "batch": 2}, "depth": {"depths": [2, 4, 8, 16], "width": 4},
            "revolve": {"steps": [2, 5, 10], "slots": [1, 2]}, "check": {"layers": 4, "width": 3}}
    for sweep, params in runs.items():
        out = tmp_path / f"{sweep}.csv"
        assert cli.main(["experiment", f"chen-{sweep}", "--params", json.dumps(params), "--out", str(out)]) == 0
        frame = pd.read_csv(out)
        assert {"git_commit", "numpy_version", "device", "dtype", "seed", "timestamp"} <= set(frame.columns)
    segments = pd.read_csv(tmp_path / "segments.csv")
    assert list(segments["k"]) == list(range(1, 10))
    assert (segments["peak_bytes"] == segments["peak_bytes_formula"]).all()
    revolve = pd.read_csv(tmp_path / "revolve.csv")
    assert revolve.loc[(revolve["steps"] == 10) & (revolve["slots"] == 2), "extra_forwards"].item() == 20
    assert (revolve["extra_forwards"] == revolve["extra_forwards_formula"]).all()
    for sweep in ("segments", "depth"):
        png = tmp_path / f"chen_{sweep}.png"
        assert cli.main(["figure", f"chen-{sweep}", "--inputs", str(tmp_path / f"{sweep}.csv"),
                         "--out", str(png)]) == 0
        assert png.stat().st_size > 10_000 and png.with_suffix(".svg").stat().st_size > 10_000
