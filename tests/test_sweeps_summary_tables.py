"""The sweeps findings (remat.analysis.sweeps) and the timing gates they rest on (remat.analysis.sweeps_tables):
each gate fails a hand-made bad timing, and each branch of a finding's status on small hand-made frames."""

from __future__ import annotations

import pandas as pd
import pytest

from remat.analysis import findings as fd, sweeps, sweeps_tables as st


def _lt(device="cpu", ms=None, iqr=1.0):
    """A sweep-layer-timing table: mode -> (forward ms, combined ms); IQRs ``iqr`` ms."""
    ms = ms or {"none": (18.0, 40.0), "selective": (18.5, 43.0), "full": (18.2, 55.6)}
    none = ms["none"][1]
    return pd.DataFrame([{"device": device, "mode": m, "status": "ok", "hidden": 512, "seq": 256, "micro_batch": 2,
                          "heads": 8, "forward_s": f / 1e3, "forward_iqr_s": iqr / 1e3, "combined_s": c / 1e3,
                          "combined_iqr_s": iqr / 1e3, "backward_s": (c - f) / 1e3, "time_overhead": c / none - 1,
                          "flop_overhead": {"none": 0, "selective": 0.0256, "full": 1 / 3}[m],
                          "flop_overhead_formula": {"none": 0, "selective": 0.0256, "full": 1 / 3}[m],
                          "time_per_flop_overhead": float("nan")} for m, (f, c) in ms.items()])


@pytest.mark.parametrize("ms, iqr, why", [
    # the time-model row quoted as "h = 512 … measured −56.1 %": full's forward 64.5 ms against none's 236.4 ms for
    # the same computation
    ({"none": (236.4, 795.6), "selective": (236.0, 800.0), "full": (64.5, 349.3)}, 1.0, "timed twice: 236.4 vs 64.5"),
    ({"none": (18.0, 40.0), "selective": (18.0, 30.0), "full": (18.0, 55.0)}, 1.0, "below zero beyond the noise"),
    (None, 30.0, "IQR is"),
    (None, 1.0, ""),                                          # valid timings pass every gate
])
def test_layer_timing_gates(ms, iqr, why):
    found = st.validity("layer-timing", _lt(ms=ms, iqr=iqr))
    assert set(found) == {found[0]} and why in found[0] and bool(found[0]) == bool(why)   # one reason for all modes


def test_gate_time_model_per_size():
    rows = [{"device": "cpu", "hidden": 512, "seq": 256, "micro_batch": 2, "heads": 8, "status": "ok", "mode": m,
             "phase": p, "measured_s": t, "measured_iqr_s": 0.002, "measured_overhead": o}
            for m, fwd, comb, o in (("none", 0.2364, 0.7956, 0.0), ("full", 0.0645, 0.3493, -0.561))
            for p, t in (("forward", fwd), ("combined", comb))]
    why = st.validity("time-model", pd.DataFrame(rows))
    assert why.str.contains("timed twice: 236.4 vs 64.5").all()       # every phase of the size


def test_gate_segments_per_point():
    seg = pd.DataFrame({"device": "cpu", "status": "ok", "k": [1, 2, 3], "step_time_s": [1.0, 1.2, 0.5],
                        "step_time_iqr_s": [0.01, 0.01, 0.01], "time_overhead": [0.0, 0.2, -0.5]})
    assert list(st.validity("segments", seg) != "") == [False, False, True]


@pytest.mark.parametrize("device, ms, status", [
    ("cuda", {"none": (18.0, 40.0), "selective": (18.2, 42.8), "full": (18.1, 55.6)}, fd.REPRODUCED),  # 7 %, 39 %
    ("cuda", {"none": (18.0, 40.0), "selective": (18.2, 50.0), "full": (18.1, 55.6)}, fd.NOT_REPRODUCED),     # 25 %
    ("cpu", {"none": (18.0, 40.0), "selective": (18.2, 42.8), "full": (18.1, 55.6)}, fd.NOT_REPRODUCIBLE),
    ("cuda", {"none": (236.4, 795.6), "selective": (230.0, 800.0), "full": (64.5, 349.3)}, fd.INVALID),
])
def test_timing_findings_per_branch(device, ms, status):
    found = sweeps._timing(_lt(device, ms), device, device, {})
    by = {f.id: f.status for f in found}
    assert by[f"timing.selective.{device}"] == status
    assert by[f"timing.flops.full.{device}"] == fd.REPRODUCED   # 33.3 % against 33 % ± 0.5 pp
    table4 = sweeps._table4(found, [device])
    assert table4.id == "table4-measured" and table4.scorecard and table4.link == "sweeps.html#sec-timing"
    assert table4.status in (status, fd.NOT_REPRODUCED if status == fd.REPRODUCED else status)


def test_missing_tables_are_not_measured(tmp_path):
    found = sweeps.findings(tmp_path)
    assert {f.status for f in found} == {fd.NOT_MEASURED}
    by = {f.id: f for f in found}
    assert "results/sweeps/layer-timing/cpu.csv" in by["timing.full.cpu"].reason
    assert by["table4-measured"].status == fd.NOT_MEASURED


def test_a_point_that_did_not_run_is_not_measured(tmp_path):
    folder = tmp_path / "results" / "sweeps" / "layer-timing"
    folder.mkdir(parents=True)
    _lt("cuda").query("mode != 'full'").to_csv(folder / "cuda.csv", index=False)
    by = {f.id: f for f in sweeps.findings(tmp_path)}
    assert by["timing.selective.cuda"].status == fd.NOT_MEASURED and "did not run" in by["timing.selective.cuda"].reason


def test_seq_hidden_findings_judge_the_crossover_and_the_kept_share():
    rows = [{"device": "cpu", "status": "ok", "axis": "seq", "mode": m, "seq": s, "hidden": 128, "heads": 4,
             "as2b_term_measured": 5 * 4 * s * s, "sbh_term_measured": 34 * s * 128, "gap_bytes": 8,
             "extras_per_layer_bytes": 8, "saved_per_layer_bytes": (34 * 128 + 20 * s) * s / (1 if m == "none"
                                                                                             else 2 + s / 64)}
            for s in (64, 128, 256, 512) for m in ("none", "selective")]
    found = {f.id: f for f in sweeps._seq_hidden(pd.DataFrame(rows), "cpu", "cpu", {})}
    assert found["crossover.seq.cpu"].status == fd.REPRODUCED
    assert found["crossover.seq.cpu"].value == pytest.approx(34 * 128 / (5 * 4))
    assert found["selective.keep.cpu"].status == fd.REPRODUCED and found["seq-hidden.stats.cpu"].status == fd.REPRODUCED
    assert found["crossover.hidden.cpu"].status == fd.NOT_MEASURED      # no h axis swept
    odd = sweeps._seq_hidden(pd.DataFrame(rows).assign(gap_bytes=[8] * 7 + [1032]), "cpu", "cpu", {})[2]   # 1 KiB more
    assert odd.status == fd.NOT_REPRODUCED and "1 of 8 points" in odd.reason and "KiB (selective, s = 512" in odd.reason
    # a float32 run stores 4 B where Eq. 1 counts 2 B: that item is the run's element size, not an extra tensor
    wide = pd.DataFrame(rows).assign(gap_bytes=[8] * 7 + [1032], gap_items=[""] * 7 + ["element size (x): 1024"])
    assert sweeps._seq_hidden(wide, "cpu", "cpu", {})[2].status == fd.REPRODUCED
