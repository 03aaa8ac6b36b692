"""planner-validate's calibration and baseline specs (remat.experiments.planner) with the timing replaced by given
medians: the re-timing rule (none < selective < full, strictly: recomputation only adds work), the per-layer
seconds of calibrate_torch (T_none/L + (T_X − T_none)/L), and the runtime spec of the √L-segments baseline."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from remat.experiments import planner
from remat.models.presets import from_name


def _fake_timings(monkeypatch, medians):
    """time_plans answering each call with the next (none, selective, full) medians; the rounds asked are kept."""
    seen, it = [], iter(medians)

    def fake(cfg, specs, device, *, rounds, **kw):
        seen.append(rounds)
        return {s: SimpleNamespace(median_s=m) for s, m in zip(specs, next(it))}
    monkeypatch.setattr(planner, "time_plans", fake)
    return seen


@pytest.mark.parametrize("tie", [(1.0, 1.0, 2.0), (1.0, 2.0, 2.0)], ids=["none=selective", "selective=full"])
def test_a_tie_between_policies_is_out_of_order_and_timed_again(monkeypatch, tie):
    # a tie says the recompute's work is under the noise, as an inversion does: timed again with twice the rounds
    seen = _fake_timings(monkeypatch, [tie, (1.0, 2.0, 3.0)])
    steps, rounds = planner._steps_in_order(None, "cpu", repeats=5, rounds=2, threads=1)
    assert seen == [2, 4] and rounds == 4 and steps == {"none": 1.0, "selective": 2.0, "full": 3.0}


def test_medians_strictly_in_order_are_taken_at_once(monkeypatch):
    seen = _fake_timings(monkeypatch, [(1.0, 1.000001, 1.000002)])
    assert planner._steps_in_order(None, "cpu", repeats=5, rounds=2, threads=1) == (
        {"none": 1.0, "selective": 1.000001, "full": 1.000002}, 2) and seen == [2]


def test_calibrated_layer_seconds_split_the_whole_step_over_the_layers(monkeypatch):
    # L = 4 layers; whole steps none 4 s, selective 6 s, full 8 s. A layer under X costs T_none/L + (T_X − T_none)/L:
    # none 4/4 = 1 s, selective 1 + 2/4 = 1.5 s, full 1 + 4/4 = 2 s (a plan of L none layers is the none step)
    cfg = from_name("gpt-tiny", layers=4, seq=16, max_positions=16)
    monkeypatch.setattr(planner, "_steps_in_order", lambda *a: ({"none": 4.0, "selective": 6.0, "full": 8.0}, 3))
    monkeypatch.setattr(planner, "measure", lambda cfg, policy, device, timing: {"peak_bytes": 10**9,
                                                                                  "base_bytes": 0})
    cal, ref, rounds = planner.calibrate_torch(cfg)
    assert cal.layer_seconds == pytest.approx({"none": 1.0, "selective": 1.5, "full": 2.0}, rel=1e-12)
    assert rounds == 3 and set(ref) == {"none", "full"}


def test_sqrt_segments_with_one_segment_runs_as_policy_none():
    # Chen's last segment is kept: one segment checkpoints nothing (parse_plan refuses "segments:1")
    assert planner._spec("sqrt-segments", {"k": 1}) == "none"
    assert planner._spec("sqrt-segments", {"k": 2}) == "segments:2"
