"""The offload report's numbers (remat.experiments.offload_summary) on small hand-made tables, against values
computed by hand from those tables."""

from __future__ import annotations

import pandas as pd
import pytest

from remat.errors import UsageError
from remat.experiments import offload_summary as summary
from remat.measure.bandwidth import SIMULATED

MiB = 2**20


def _bandwidth(overlap_errors=(0.2, -0.3, 0.08, 0.02)) -> pd.DataFrame:
    """Four groups, sizes 512 KiB, 1 MiB, 2 MiB; fits (t0 µs, GB/s): h2d alone (2, 10), h2d overlapped (3, 8),
    d2h alone (4, 5), d2h overlapped (5, 4.5). Relative errors at 1 MiB and 2 MiB: h2d alone −0.02, 0.05;
    d2h alone 0.12, 0.01; overlapped as given (h2d, h2d, d2h, d2h). At 512 KiB every error is 0.5 (ignored:
    under 1 MiB)."""
    groups = {("h2d", False): (2e-6, 10.0, (-0.02, 0.05)), ("h2d", True): (3e-6, 8.0, overlap_errors[:2]),
              ("d2h", False): (4e-6, 5.0, (0.12, 0.01)), ("d2h", True): (5e-6, 4.5, overlap_errors[2:])}
    rows = []
    for (direction, overlap), (t0, bw, errors) in groups.items():
        for nbytes, err in zip((MiB // 2, MiB, 2 * MiB), (0.5, *errors)):
            rows.append({"device": "cpu", "direction": direction, "memory": "pageable", "overlap": overlap,
                         "bytes": nbytes, "fit_t0_s": t0, "fit_bw_gb_s": bw, "fit_bw_gib_s": bw * 1e9 / 2**30,
                         "rel_error": err, "link": SIMULATED, "simulated": True})
    return pd.DataFrame(rows)


def test_report_device_is_read_from_the_environment_not_guessed():
    assert summary.report_device({}) == "cpu"
    assert summary.report_device({"REMAT_OFFLOAD_DEVICE": "cuda"}) == "cuda"
    with pytest.raises(UsageError, match="REMAT_OFFLOAD_DEVICE"):
        summary.report_device({"REMAT_OFFLOAD_DEVICE": "tpu"})


def test_fit_table_one_row_per_group_with_the_worst_error_at_1mib_and_above():
    fits = summary.fit_table(_bandwidth())
    assert list(zip(fits["direction"], fits["overlap"])) == [("d2h", False), ("d2h", True), ("h2d", False),
                                                             ("h2d", True)]
    assert fits["t0_us"].tolist() == pytest.approx([4.0, 5.0, 2.0, 3.0])
    assert fits["bw_gb_s"].tolist() == [5.0, 4.5, 10.0, 8.0]
    assert fits["points"].tolist() == [3, 3, 3, 3]
    assert fits["abs_err"].tolist() == pytest.approx([0.12, 0.08, 0.05, 0.3])


def test_link_facts_and_the_overlap_sentence():
    bw = _bandwidth()
    facts = summary.link_facts(bw, summary.fit_table(bw))
    assert (facts["device"], facts["link"], facts["simulated"], facts["kinds"]) == ("cpu", SIMULATED, True,
                                                                                   "pageable")
    assert (facts["smallest"], facts["largest"]) == ("512.00 KiB", "2.00 MiB")
    assert (facts["alone_ok"], facts["alone_groups"]) == (1, 2)  # h2d (5 %) within 10 %, d2h (12 %) not
    assert (facts["h2d_gb_s"], facts["h2d_t0_us"]) == (10.0, pytest.approx(2.0))
    assert facts["h2d_gib_s"] == pytest.approx(9.313225746)
    assert facts["overlap_ratio_min"] == pytest.approx(0.8)  # h2d 8 / 10
    assert facts["overlap_ratio_max"] == pytest.approx(0.9)  # d2h 4.5 / 5
    assert facts["overlap_noisiest"] is True  # 0.3 > 0.12
    assert summary.overlap_sentence(facts) == ("With the matmul running, the fitted bandwidth is 0.80–0.90 of "
                                               "the copy alone; on a shared CPU the overlapped copies are the "
                                               "noisiest points")


def test_overlap_sentence_when_overlapped_copies_are_not_the_noisiest_or_absent():
    bw = _bandwidth(overlap_errors=(0.01, 0.02, 0.03, 0.04))  # worst overlapped 0.04 < 0.12 alone
    facts = summary.link_facts(bw, summary.fit_table(bw))
    assert facts["overlap_noisiest"] is False
    assert summary.overlap_sentence(facts).endswith("the overlapped copies are not the noisiest points")
    bw = _bandwidth(overlap_errors=(0.13, 0.0, 0.01, 0.0))  # one overlapped group worst (0.13 > 0.12), the other best
    assert summary.link_facts(bw, summary.fit_table(bw))["overlap_noisiest"] is True
    alone = bw[~bw["overlap"]]
    facts = summary.link_facts(alone, summary.fit_table(alone))
    assert facts["overlap_ratio_min"] is None and facts["overlap_noisiest"] is None
    assert summary.overlap_sentence(facts) == "The copies were measured alone only (overlap off)"


def _steps() -> pd.DataFrame:
    """Two sizes, (s, h) = (32, 64) and (64, 64), a = 4, b = 2, L = 2. Held after forward (MiB): none 4 / 8,
    selective 3 / 6, full 2 / 4, offload 1 / 1. Step time (ms): none 10 / 20, selective 11 / 22, full 13 / 26,
    offload 12 / 24, save_on_cpu 15 / 30. Copied per step: hooks 2 MiB, save_on_cpu 3 MiB (both sizes).
    Offload pool: 0 bytes live after the step, reserved = peak = 4096 / 8192 bytes."""
    held = {"none": (4, 8), "selective": (3, 6), "full": (2, 4), "offload": (1, 1), "save_on_cpu": (4, 8)}
    time_ms = {"none": (10, 20), "selective": (11, 22), "full": (13, 26), "offload": (12, 24),
               "save_on_cpu": (15, 30)}
    rows = []
    for i, s in enumerate((32, 64)):
        for variant in held:
            offload = variant == "offload"
            rows.append({"s": s, "h": 64, "a": 4, "b": 2, "L": 2, "variant": variant, "threads": 1,
                         "grads_bitwise_equal": True, "device_held_after_forward_bytes": held[variant][i] * MiB,
                         "step_time_s": time_ms[variant][i] / 1e3,
                         "offloaded_bytes": {"offload": 2 * MiB, "save_on_cpu": 3 * MiB}.get(variant),
                         "host_live_after_step_bytes": 0,
                         "host_reserved_bytes": 4096 * (i + 1) if offload else None,
                         "host_peak_bytes": 4096 * (i + 1) if offload else None})
    return pd.DataFrame(rows)


def test_steps_facts():
    facts = summary.steps_facts(_steps())
    assert facts["sizes"] == "(s, h) = (32, 64), (s, h) = (64, 64)"
    assert (facts["a"], facts["b"], facts["L"], facts["threads"], facts["all_equal"]) == (4, 2, 2, 1, True)
    assert (facts["held_ratio_min"], facts["held_ratio_max"]) == (0.125, 0.25)  # 1/8 and 1/4
    assert (facts["host_live_after_step"], facts["host_reserved"], facts["reserved_is_peak"]) == (0, 8192, True)
    gpu = _steps().assign(threads=None, grads_bitwise_equal=lambda d: d["variant"] != "full")
    gpu.loc[gpu["variant"] == "offload", "host_peak_bytes"] = 100
    facts = summary.steps_facts(gpu)
    assert (facts["threads"], facts["all_equal"], facts["reserved_is_peak"]) == (None, False, False)


def test_step_time_and_memory_tables():
    times = summary.step_time_table(_steps())
    assert list(times.columns) == ["s", "h", "none (ms)", "selective (ms)", "full (ms)", "offload (ms)",
                                   "save_on_cpu (ms)"]
    assert times.iloc[1, 2:].tolist() == pytest.approx([20, 22, 26, 24, 30])
    memory = summary.memory_table(_steps())
    assert list(memory.columns) == ["s", "h", "held: none", "held: selective", "held: full", "held: offload",
                                    "offload / none", "copied: hooks", "copied: save_on_cpu"]
    assert memory.iloc[0, 2:].tolist() == pytest.approx([4, 3, 2, 1, 0.25, 2, 3])
    assert memory.iloc[1, 2:].tolist() == pytest.approx([8, 6, 4, 1, 0.125, 2, 3])


def _breakeven(seqs=(512, 1024, 2048)) -> pd.DataFrame:
    """Grid over seqs × h in {4096, 8192} × {1, 3, 6}·10^14 FLOP/s (b = 1, 9 copies, t0 = 10 µs); the point
    (2048, 8192, 3·10^14) breaks even at 12.34 GB/s (full) and 45.67 GB/s (selective), every other at 1.
    Two measured sizes: 2 and 3 GFLOP/s; link 1.5 GB/s; overlapped model 0 and 1 ms; offload measured
    5 and 8 ms over serial model 3 and 4 ms, L = 2, 10 copies per layer (-> 2 ms / 40 copies = 50 µs and
    4 ms / 40 copies = 100 µs, mean 75 µs); cheapest measured: offload, then full."""
    rows = [{"kind": "grid", "s": s, "h": h, "flops_per_s": f, "b": 1, "tensors": 9, "t0_s": 1e-5,
             "breakeven_full_gb_s": 12.34 if (s, h, f) == (2048, 8192, 3e14) else 1.0,
             "breakeven_selective_gb_s": 45.67 if (s, h, f) == (2048, 8192, 3e14) else 1.0}
            for s in seqs for h in (4096, 8192) for f in (1e14, 3e14, 6e14)]
    for i, (rate, overlap, measured, serial, best) in enumerate([(2e9, 0.0, 0.005, 0.003, "offload"),
                                                                  (3e9, 0.001, 0.008, 0.004, "full")]):
        rows.append({"kind": "measured", "s": 32 * (i + 1), "h": 64, "flops_per_s": rate, "bw_gb_s": 1.5,
                     "L": 2, "tensors": 10, "layer_bytes": 2 * MiB, "predicted_offload_overlap_s": overlap,
                     "predicted_offload_serial_s": serial, "measured_offload_s": measured,
                     "predicted_full_s": 0.002, "measured_full_s": 0.004, "predicted_selective_s": 0.0005,
                     "measured_selective_s": 0.006, "best_measured": best, "breakeven_full_gb_s": 3.5})
    return pd.DataFrame(rows)


def test_grid_example_prefers_s_2048_largest_h_middle_rate():  # 2048 is not the middle of 512, 1024, 2048
    ex = summary.grid_example(_breakeven())
    assert ex == {"s": 2048, "h": 8192, "tflops": 300, "full_gb_s": 12.3, "selective_gb_s": 45.7, "b": 1,
                  "tensors": 9, "t0_us": 10.0}
    assert summary.grid_example(_breakeven(seqs=(512, 1024, 4096)))["s"] == 1024  # no 2048: the middle s


def test_measured_facts_and_sentences():
    facts = summary.measured_facts(_breakeven())
    assert (facts["gflops_min"], facts["gflops_max"], facts["link_gb_s"]) == (2.0, 3.0, 1.5)
    assert (facts["hidden"], facts["sizes"], facts["offload_best"]) == (1, 2, 1)
    assert facts["extra_per_copy_us"] == pytest.approx(75.0)
    assert summary.overlap_model_sentence(facts, simulated=True).endswith(
        "hides every copy at 1 of 2 sizes, describes a GPU.")
    assert summary.overlap_model_sentence(facts, simulated=False) == ("The copies run on a side stream: the "
                                                                       "overlapped model applies.")
    assert summary.extra_sentence(facts).startswith("The measured offload overhead exceeds the serial model by "
                                                    "75.0 µs per copy")
    assert summary.extra_sentence({**facts, "extra_per_copy_us": -2.5}) == (
        "The measured offload overhead is 2.5 µs per copy below the serial model on average.")


def test_measured_table_converts_seconds_to_ms_and_keeps_gb_s():
    t = summary.measured_table(_breakeven())
    first = t.iloc[0]
    assert (first["s"], first["MiB/layer"], first["copies/layer"]) == (32, 2.0, 10)
    assert first["offload, serial (model)"] == pytest.approx(3.0)  # 0.003 s
    assert first["offload (measured)"] == pytest.approx(5.0)
    assert first["selective (model)"] == pytest.approx(0.5)
    assert first["break-even vs full (GB/s)"] == 3.5  # a bandwidth: not scaled
    assert first["cheapest measured"] == "offload" and len(t) == 2
