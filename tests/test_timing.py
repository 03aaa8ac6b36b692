"""The one timing protocol (remat.measure.timing.time_steps): interleaving, warm-up, pooled statistics."""

import math
import subprocess
import sys
import time

import numpy as np
import pytest

from remat.measure import provenance, timing


def test_rounds_visit_every_step_in_rotated_order_with_setup_and_warmup():
    log = []
    steps = {name: (lambda n=name: log.append(("call", n))) for name in ("a", "b", "c")}
    result = timing.time_steps(steps, rounds=3, repeats=5, warmup=2, setup=lambda n: log.append(("setup", n)))
    visits = [n for kind, n in log if kind == "setup"]
    assert visits == ["a", "b", "c", "b", "c", "a", "c", "a", "b"]
    # each visit: setup, then 2 warm-up + 5 timed calls of that step and no other
    for i in range(9):
        block = log[i * 8:(i + 1) * 8]
        assert block[0] == ("setup", visits[i]) and block[1:] == [("call", visits[i])] * 7
    assert {n: len(t.samples_s) for n, t in result.items()} == {"a": 15, "b": 15, "c": 15}
    assert all(t.warmup == 2 and t.method == "time.perf_counter" for t in result.values())


def test_median_and_iqr_are_the_linear_quartiles_of_the_pooled_samples(monkeypatch):
    clock = iter([1.0, 2.0, 3.0, 4.0, 10.0, 6.0, 7.0, 8.0, 9.0, 5.0])
    monkeypatch.setattr(timing, "_cpu_time", lambda step, device: next(clock))
    t = timing.time_steps({"x": lambda: None}, rounds=2, repeats=5, warmup=0)["x"]
    # samples 1..10: median 5.5, quartiles 3.25 and 7.75 (linear interpolation, as numpy.percentile)
    assert t.samples_s == (1.0, 2.0, 3.0, 4.0, 10.0, 6.0, 7.0, 8.0, 9.0, 5.0)
    assert t.median_s == 5.5 and t.iqr_s == pytest.approx(4.5, abs=1e-12)
    q25, q75 = np.percentile(t.samples_s, [25, 75])
    assert t.iqr_s == pytest.approx(q75 - q25, abs=1e-12)
    cols = t.columns()
    assert {k: cols[k] for k in ("step_time_s", "step_time_iqr_s", "step_time_samples", "timing_method")} == {
        "step_time_s": 5.5, "step_time_iqr_s": t.iqr_s, "step_time_samples": 10, "timing_method": "time.perf_counter"}


@pytest.mark.parametrize("kwargs", [{"repeats": 4}, {"rounds": 0}, {"warmup": -1}])
def test_bad_protocol_settings_raise(kwargs):
    with pytest.raises(ValueError):
        timing.time_steps({"x": lambda: None}, **kwargs)


def test_threads_are_set_inside_and_restored_after():
    import torch
    before = torch.get_num_threads()
    seen = []
    timing.time_steps({"x": lambda: seen.append(torch.get_num_threads())}, threads=1, warmup=0)
    assert set(seen) == {1} and torch.get_num_threads() == before


LOAD_COLUMNS = ["timing_load_before", "timing_load_after", "timing_wall_s", "timing_cpu_s", "timing_other_cores",
                "timing_busy"]


def _spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def test_every_timing_records_the_load_around_its_call():
    t = timing.time_steps({"a": lambda: _spin(0.01), "b": lambda: _spin(0.01)}, repeats=5, warmup=0)
    assert t["a"].load is t["b"].load                                   # one window per time_steps call
    cols = t["a"].columns("forward")
    assert list(cols)[4:] == LOAD_COLUMNS
    assert cols["timing_wall_s"] >= 0.1 and 0 < cols["timing_cpu_s"] <= cols["timing_wall_s"] + 0.02   # one thread
    assert cols["timing_load_before"] >= 0 and cols["timing_load_after"] >= 0
    if sys.platform == "linux":
        assert cols["timing_other_cores"] >= 0
    assert cols["timing_busy"] is False                                 # a 0.1 s window is too short to tell
    # a Timing made without a window (a fake clock) carries NaN and is not marked busy
    fake = timing.Timing(1.0, 0.0, (1.0,) * 5, 0, "fake").columns()
    assert math.isnan(fake["timing_other_cores"]) and fake["timing_busy"] is False


@pytest.mark.skipif(sys.platform != "linux", reason="others' CPU time is read from /proc/stat")
def test_a_busy_loop_beside_the_timing_marks_it_busy():
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.2)                                                 # let it start spinning
        t = timing.time_step(lambda: time.sleep(0.3), repeats=5, warmup=0)
    finally:
        spinner.kill()
        spinner.wait()
    assert t.load.other_cores > 0.5 and t.load.busy and t.columns()["timing_busy"]


def test_run_columns_stamp_the_run_and_its_busiest_timing_window():
    start = provenance.snapshot()
    timing.time_step(lambda: None, repeats=5, warmup=0)
    run = provenance.run_columns(start)
    assert set(run) == {"run_load_before", "run_load_after", "run_wall_s", "run_cpu_s", "run_other_cores",
                        "run_cores", "run_timed_other_cores", "run_timed_busy"}
    assert run["run_wall_s"] > 0 and run["run_cores"] >= 1
    untimed = provenance.run_columns(provenance.snapshot())
    assert math.isnan(untimed["run_timed_other_cores"]) and untimed["run_timed_busy"] is False
