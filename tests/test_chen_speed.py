"""Chen §5.4 speed experiment (remat.experiments.chen_speed): a tiny run's table and its parameter errors."""

from __future__ import annotations

import pytest

from remat.errors import UsageError
from remat.experiments import load, resolve
from remat.experiments.chen_speed import SpeedParams, strategy_spec

TINY = dict(resnet_blocks=[2, 1, 1, 1], resnet_width=4, resnet_image=32, resnet_batch=2, resnet_classes=10,
            lstm_layers=1, lstm_hidden=8, lstm_input=4, lstm_classes=6, lstm_steps=9, lstm_batch=2,
            rounds=1, repeats=5, warmup=0)
COLUMNS = {"net", "strategy", "plan", "units", "segments", "saved_bytes", "saved_bytes_autograd",
           "saved_bytes_kept", "peak_bytes", "flops_forward", "flops_backward", "flops_recompute",
           "flops_recompute_elementwise", "recompute_ratio", "overhead_flops", "step_time_s", "step_time_iqr_s",
           "step_time_samples", "timing_method", "overhead", "device", "torch_version", "git_commit", "seed"}


def test_tiny_run_rows_and_columns():
    table = resolve("chen-speed")(load("chen-speed", TINY))
    assert COLUMNS <= set(table.columns)
    assert list(zip(table.net, table.strategy)) == [(net, s) for net in ("resnet", "lstm")
                                                    for s in ("none", "sublinear", "drop-cheap")]
    rows = table.set_index(["net", "strategy"])
    assert rows.loc[("resnet", "sublinear"), "plan"] == "segments:3"
    assert rows.loc[("lstm", "sublinear"), "segments"] == 3
    assert (rows.step_time_s > 0).all() and (rows.step_time_samples == 5).all()
    for net in ("resnet", "lstm"):
        none, sub, drop = (rows.loc[(net, s)] for s in ("none", "sublinear", "drop-cheap"))
        assert none.overhead == 0 and none.flops_recompute == 0 == none.flops_recompute_elementwise
        assert sub.saved_bytes < none.saved_bytes and sub.flops_recompute > 0
        assert drop.saved_bytes_kept > 0 and drop.flops_recompute == 0 < drop.flops_recompute_elementwise
    lstm_sub = rows.loc[("lstm", "sublinear")]  # segments 3+3+3: the first two are recomputed, 2/3 of the steps
    assert lstm_sub.flops_recompute == pytest.approx(lstm_sub.flops_forward * 2 / 3)


def test_sublinear_is_sqrt_segments():
    assert strategy_spec("sublinear", 16) == "segments:4" and strategy_spec("sublinear", 332) == "segments:19"
    assert strategy_spec("none", 5) == "none" and strategy_spec("drop-cheap", 5) == "drop-cheap"


@pytest.mark.parametrize("params, field", [
    ({"resnet_depth": 0}, "chen.speed.resnet_depth"),
    ({"resnet_depth": 13}, "chen.speed.resnet_depth"),
    ({"resnet_blocks": [3, 4, 6]}, "chen.speed.resnet_blocks"),
    ({"lstm_steps": 0}, "chen.speed.lstm_steps"),
    ({"lstm_steps": -3}, "chen.speed.lstm_steps"),
    ({"strategies": ["none", "recursive"]}, "chen.speed.strategies"),
    ({"strategies": ["none", "none"]}, "chen.speed.strategies"),
    ({"nets": ["vgg"]}, "chen.speed.nets"),
    ({"repeats": 3}, "chen.speed.repeats"),
    ({"device": "tpu"}, "chen.speed.device"),
])
def test_bad_params_name_the_field(params, field):
    with pytest.raises(UsageError) as err:
        load("chen-speed", params)
    assert err.value.field == field


@pytest.mark.parametrize("params, field", [
    ({"resnet_depth": 0}, "chen.speed.resnet_depth"),
    ({"lstm_steps": 0}, "chen.speed.lstm_steps"),
    ({"strategies": ["fast"]}, "chen.speed.strategies"),
])
def test_direct_construction_checks_too(params, field):
    with pytest.raises(UsageError) as err:
        SpeedParams(**params)
    assert err.value.field == field
