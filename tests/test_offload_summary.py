"""remat.analysis.offload on hand-made tables: each rule and gate fails a wrong value; each branch's status."""

from __future__ import annotations

import pandas as pd
import pytest

from remat.analysis import offload
from remat.analysis.findings import NOT_REPRODUCED, Findings
from remat.errors import UsageError
from remat.formulas.offload import SIMULATED

MiB = 2**20


def test_rules_are_two_sided_and_fail_a_wrong_value():
    # the fit: predicted ÷ measured within 1 ± 0.10; the model: measured ÷ model within 1 ± 0.25
    assert [offload.FIT_RULE.check(x, 1.0)[0] for x in (0.85, 0.95, 1.05, 1.15)] == [False, True, True, False]
    assert [offload.MODEL_RULE.check(x, 1.0)[0] for x in (0.7, 0.8, 1.2, 1.3)] == [False, True, True, False]


def bandwidth(err_1mib=-0.05, err_2mib=0.02, overlap=True):
    """h2d and d2h alone (GB/s 10 and 5), h2d beside a matmul (8); errors at 512 KiB are 0.5 (ignored)."""
    groups = [("h2d", False, 10.0), ("d2h", False, 5.0)] + ([("h2d", True, 8.0)] if overlap else [])
    return pd.DataFrame([dict(device="cpu", direction=d, memory="pageable", overlap=o, bytes=n, fit_t0_s=2e-6,
                              fit_bw_gb_s=bw, fit_bw_gib_s=bw / 1.074, rel_error=e, link=SIMULATED, device_name="x")
                         for d, o, bw in groups for n, e in ((MiB // 2, 0.5), (MiB, err_1mib), (2 * MiB, err_2mib))])


def test_bandwidth_findings():
    f = Findings(offload._bandwidth(bandwidth()))
    assert f["bandwidth.fit_alone"].status == "reproduced" and f["bandwidth.fit_alone"].ours == "0.95× (−5.0%)"
    assert f["bandwidth.h2d"].ours == "10.00 GB/s (pageable)" and f["bandwidth.overlap_ratio"].ours == "0.80×"
    assert f["bandwidth.h2d"].where == "CPU (a stand-in; simulated: host memcpy)"
    wrong = Findings(offload._bandwidth(bandwidth(err_2mib=0.12, overlap=False)))  # 1.12×; no overlapped copies
    assert wrong["bandwidth.fit_alone"].status == NOT_REPRODUCED and "2.00 MiB" in wrong["bandwidth.fit_alone"].reason
    assert wrong["bandwidth.fit_overlap"].status == wrong["bandwidth.overlap_ratio"].status == "not measured"


def steps(equal=True, live=0, iqr=0.1e-3, full_s=12e-3):
    """One size; none 10 ms, full ``full_s``, the others 12 ms; offload holds 25 of none's 100 bytes."""
    rows = [dict(s=64, h=64, a=4, b=2, L=4, threads=1, variant=v, grads_bitwise_equal=equal or v != "full",
                 step_time_s=10e-3 if v == "none" else full_s if v == "full" else 12e-3, step_time_iqr_s=iqr,
                 device_held_after_forward_bytes=25 if v == "offload" else 100, offloaded_bytes=50,
                 host_live_after_step_bytes=live if v == "offload" else 0, host_reserved_bytes=64, host_peak_bytes=64,
                 host_pinned=False, copy_hidden_share=0.5, link=SIMULATED, device_name="x") for v in offload.VARIANTS]
    return pd.DataFrame(rows)


def test_steps_findings_per_branch():
    f = Findings(offload._steps(steps()))
    assert (f["steps.bitwise"].status, f["steps.pool"].status) == ("reproduced", "reproduced")
    assert f["steps.full"].ours == "+20%" and f["steps.held_share"].ours == "25.0%"
    assert f["steps.hidden"].status == "not reproducible here"           # a CPU: nothing overlaps
    assert f["steps.runs"].ours == "(s, h) = (64, 64); a = 4, b = 2, L = 4, 1 CPU thread"
    bad = Findings(offload._steps(steps(equal=False, live=8)))
    assert bad["steps.bitwise"].status == NOT_REPRODUCED and bad["steps.bitwise"].reason == "not bitwise equal: full"
    assert bad["steps.pool"].status == NOT_REPRODUCED


def test_steps_gates_make_noisy_or_negative_overheads_invalid():
    assert Findings(offload._steps(steps(iqr=6e-3)))["steps.full"].status == "invalid"      # IQR 60 % of none's
    negative = Findings(offload._steps(steps(full_s=8e-3)))["steps.full"]                   # −20 % beyond ±2 %
    assert negative.status == "invalid" and "below zero" in negative.reason


def breakeven(measured_offload_s=2e-3):
    """Two grid points (one the quoted EXAMPLE) on one preset, one measured size whose serial model is 1 ms."""
    grid = [dict(kind="grid", gpu="a100", gpu_name="A100", s=s, h=h, b=1, t=8.0, link_per_gpu_gb_s=10.0,
                 flops_per_s=1e12, breakeven_selective_gb_s=20.0, breakeven_full_gb_s=5.0,
                 cheaper_full=cheap, cheaper_selective="selective") for (s, h), cheap in ((offload.EXAMPLE, "offload"),
                                                                                         ((512, 64), "full"))]
    measured = dict(kind="measured", link=SIMULATED, device_name="x", s=64, h=64, L=1, tensors=5, bw_gb_s=1.0,
                    flops_per_s=1e9, layer_bytes=MiB, freed_offload_bytes=4 * MiB, freed_full_bytes=3 * MiB,
                    freed_selective_bytes=MiB,
                    predicted_offload_serial_s=1e-3, predicted_offload_overlap_s=0.0,
                    measured_offload_s=measured_offload_s, measured_full_s=3e-3, predicted_full_s=2.9e-3,
                    measured_selective_s=1e-3, predicted_selective_s=1e-3)
    return pd.DataFrame(grid + [measured])


def test_breakeven_findings():
    f = Findings(offload._breakeven(breakeven(), None))
    assert f["breakeven.full"].ours == "5.0 GB/s (0.5× that link)" and f["breakeven.cheaper_full"].ours == "offload"
    assert (f["breakeven.wins_full"].ours, f["breakeven.wins_selective"].ours) == ("1 of 2", "0 of 2")
    assert f["breakeven.model_offload"].status == NOT_REPRODUCED              # measured 2 ms ÷ serial model 1 ms = 2×
    assert f["breakeven.model_full"].status == "reproduced"              # 3 / 2.9 = 1.03×
    assert f["breakeven.extra_per_copy"].ours == "+100.0 µs"             # (2 − 1) ms / (1 layer · 2 · 5 copies)
    assert f["breakeven.model_hidden"].ours == "100%"                    # overlapped model 0 of serial 1 ms
    assert f["breakeven.bytes_per_flop"].ours == "100×"                  # (1e9 / 1e9) ÷ (10e9 / 1e12)
    assert Findings(offload._breakeven(breakeven(1.2e-3), None))["breakeven.model_offload"].status == "reproduced"


def test_missing_tables_are_not_measured_and_name_the_target(tmp_path):
    found = offload.findings(tmp_path, device="cpu")
    assert {f.id for f in found} == set(offload.CLAIM) and {f.status for f in found} == {"not measured"}
    assert Findings(found)["steps.pool"].reason == "snakemake results/offload/cpu/steps.csv"


def test_report_device_is_read_from_the_environment():
    assert offload.report_device({}) == "cpu" and offload.report_device({"REMAT_OFFLOAD_DEVICE": "cuda"}) == "cuda"
    with pytest.raises(UsageError, match="REMAT_OFFLOAD_DEVICE"):
        offload.report_device({"REMAT_OFFLOAD_DEVICE": "tpu"})


def test_display_tables_convert_units():
    t = offload.measured_table(breakeven()).set_index("variant").loc["offload (serial model)"]
    assert (t["measured (ms)"], t["freed (MiB)"], t["measured ÷ model"]) == (pytest.approx(2.0), 4, "2.00×")
    assert offload.step_time_display_table(steps()).loc[0, "full (ms)"] == "12.00 (+20%)"
    assert "| 25.0 |" in offload.markdown_table(offload.memory_display_table(steps())).replace("  ", "")
