"""The offload report's numbers (remat.analysis.offload) on small hand-made tables, against values
computed by hand from those tables."""

from __future__ import annotations

import re

import pandas as pd
import pytest

from remat.errors import UsageError
from remat.analysis import offload as summary
from remat.measure.bandwidth import SIMULATED
from remat.units import percent

MiB = 2**20
LARGE = f"{summary.FIT_CHECK_BYTES / MiB:g} MiB"       # the copies the fits are judged on, as the sentences say
WITHIN = percent(summary.NOISE_THRESHOLD, 0)           # the error a fit may have there, as the sentences say


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
    assert 0.05 < summary.NOISE_THRESHOLD < 0.12                 # h2d alone (5 %) within it, d2h alone (12 %) not
    assert (facts["alone_ok"], facts["alone_groups"]) == (1, 2)
    assert (facts["h2d_gb_s"], facts["h2d_t0_us"]) == (10.0, pytest.approx(2.0))
    assert facts["h2d_gib_s"] == pytest.approx(9.313225746)
    assert facts["overlap_ratio_min"] == pytest.approx(0.8)  # h2d 8 / 10
    assert facts["overlap_ratio_max"] == pytest.approx(0.9)  # d2h 4.5 / 5
    assert (facts["d2h_gb_s"], facts["h2d_memory"], facts["d2h_memory"]) == (5.0, "pageable", "pageable")
    assert (facts["alone_worst"], facts["overlap_worst"]) == pytest.approx((0.12, 0.3))
    assert facts["overlap_noisiest"] is True  # 0.3 > 0.12
    assert summary.overlap_sentence(facts) == ("With the matmul running, the fitted bandwidth is 0.80–0.90× that "
                                               "of the copy alone; on a shared CPU the overlapped copies are the "
                                               "noisier (largest error 30.0% with the matmul, 12.0% alone)")
    assert summary.alone_fit_sentence(facts) == (
        f"One of the two groups (direction × memory kind) copied alone has every copy of {LARGE} or more within "
        f"{WITHIN} of the fit; the largest error is 12.0%")


def test_alone_fit_sentence_counts_the_groups_within_the_threshold():
    # count_of's every case is tested in tests/test_wording.py; here the sentence around it, verb in the plural
    assert summary.alone_fit_sentence({"alone_ok": 3, "alone_groups": 4, "alone_worst": 0.2}) == (
        f"3 of the 4 groups (direction × memory kind) copied alone have every copy of {LARGE} or more within "
        f"{WITHIN} of the fit; the largest error is 20.0%")


def test_alone_fit_sentence_without_a_large_copy_judges_no_fit():
    facts = {"alone_ok": 0, "alone_groups": 2, "alone_worst": float("nan")}
    assert summary.alone_fit_sentence(facts) == (
        f"Alone, no copy of {LARGE} or more was measured, so the fits are not judged")


def test_overlap_sentence_when_overlapped_copies_are_not_the_noisiest_or_absent():
    bw = _bandwidth(overlap_errors=(0.01, 0.02, 0.03, 0.04))  # worst overlapped 0.04 < 0.12 alone
    facts = summary.link_facts(bw, summary.fit_table(bw))
    assert facts["overlap_noisiest"] is False
    assert summary.overlap_sentence(facts).endswith(
        "the copies alone are the noisier (largest error 4.0% with the matmul, 12.0% alone)")
    assert "scatter as much as those alone" in summary.overlap_sentence({**facts, "overlap_worst": 0.12})
    real = summary.link_facts(bw.assign(simulated=False), summary.fit_table(bw))
    assert "on a shared CPU" not in summary.overlap_sentence({**real, "overlap_noisiest": True})
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
    assert facts["sizes"] == "(s, h) = (32, 64) and (64, 64)"
    assert (facts["a"], facts["b"], facts["L"], facts["threads"], facts["all_equal"]) == (4, 2, 2, 1, True)
    assert (facts["held_ratio_min"], facts["held_ratio_max"]) == (0.125, 0.25)  # 1/8 and 1/4
    assert (facts["host_live_after_step"], facts["host_reserved"], facts["reserved_is_peak"]) == (0, 8192, True)
    gpu = _steps().assign(threads=None, grads_bitwise_equal=lambda d: d["variant"] != "full")
    gpu.loc[gpu["variant"] == "offload", "host_peak_bytes"] = 100
    facts = summary.steps_facts(gpu)
    assert (facts["threads"], facts["all_equal"], facts["reserved_is_peak"]) == (None, False, False)
    assert facts["unequal"] == ["full"] and facts["variants"] == ["selective", "full", "offload", "save_on_cpu"]


def test_steps_sentences_for_equal_and_unequal_gradients_and_the_host_pool():
    facts = summary.steps_facts(_steps())
    assert summary.equal_sentence(facts) == ("loss and every gradient are bitwise equal to those of `none` for every "
                                             "variant (`selective`, `full`, `offload`, `save_on_cpu`)")
    assert summary.equal_sentence({**facts, "unequal": ["full"]}) == (
        "the gradients are NOT bitwise equal to those of `none` for `full` (they are for `selective`, `offload`, "
        "`save_on_cpu`)")
    assert summary.held_text(facts) == "12.5%–25.0%"
    assert summary.held_text({**facts, "held_ratio_max": 0.125}) == "12.5%"
    assert summary.host_pool_sentence(facts) == (
        "After every step the host pool holds no live bytes: it is back at its baseline. It reserves 8.00 KiB at "
        "most (pageable), exactly the peak host bytes of one step, so it does not grow past what a step needs")
    other = summary.host_pool_sentence({**facts, "host_live_after_step": 4096, "reserved_is_peak": False,
                                        "host_pinned": True})
    assert other.startswith("After a step the host pool still holds up to 4.00 KiB live: it is not back")
    assert "(pinned), not exactly the peak host bytes of one step at every size" in other


def test_fit_display_table_reads_in_words_yes_no_and_percent():
    t = summary.fit_display_table(summary.fit_table(_bandwidth()))
    assert list(t.columns) == ["Direction", "Host memory", "With a matmul", "t0 (µs)", "BW (GB/s)", "BW (GiB/s)",
                               "Sizes measured", f"Largest error ≥ {LARGE} (%)"]
    assert t["Direction"].tolist() == ["device → host", "device → host", "host → device", "host → device"]
    assert t["With a matmul"].tolist() == ["no", "yes", "no", "yes"]
    assert t[f"Largest error ≥ {LARGE} (%)"].tolist() == ["12.0", "8.0", "5.0", "30.0"]  # as the text quotes them
    assert t.iloc[2, 3:7].tolist() == ["2.00", "10.00", "9.31", "3"]
    markdown = summary.markdown_table(t).splitlines()
    assert markdown[1].startswith("|:--") and markdown[1].endswith("--:|")  # words left, numbers right
    assert markdown[2].rstrip(" |").endswith(" 12.0") and "12.000" not in markdown[2]  # not re-parsed
    assert "True" not in "\n".join(markdown) and "False" not in "\n".join(markdown)


def test_step_time_and_memory_tables():
    times = summary.step_time_table(_steps())
    assert list(times.columns) == ["s", "h", "none (ms)", "selective (ms)", "full (ms)", "offload (ms)",
                                   "save_on_cpu (ms)"]
    assert times.iloc[1, 2:].tolist() == pytest.approx([20, 22, 26, 24, 30])
    shown = summary.step_time_display_table(_steps())
    assert list(shown.columns) == list(times.columns)
    assert shown.iloc[0].tolist() == ["32", "64", "10.00", "11.00 (+10%)", "13.00 (+30%)", "12.00 (+20%)",
                                      "15.00 (+50%)"]
    memory = summary.memory_table(_steps())
    assert list(memory.columns) == ["s", "h", "held: none (MiB)", "held: selective (MiB)", "held: full (MiB)",
                                    "held: offload (MiB)", "offload ÷ none (%)", "copied: hooks (MiB)",
                                    "copied: save_on_cpu (MiB)"]
    assert memory.iloc[0, 2:].tolist() == pytest.approx([4, 3, 2, 1, 25, 2, 3])
    assert memory.iloc[1, 2:].tolist() == pytest.approx([8, 6, 4, 1, 12.5, 2, 3])
    shown = summary.memory_display_table(_steps())
    assert shown.iloc[1].tolist() == ["64", "64", "8.000", "6.000", "4.000", "1.000", "12.5", "2.000", "3.000"]
    assert re.search(r"\| +12\.5 \|", summary.markdown_table(shown))  # kept as shown: not re-parsed into 12.500


GiB = 2**30
GPUS = {  # name: (full name, link GB/s, GPUs sharing it, achievable FLOP/s, host source)
    "a100-80gb": ("NVIDIA A100 SXM4 80GB", 25.6, 2, 249.6e12, "DGX A100 whitepaper"),
    "h100-80gb": ("NVIDIA H100 SXM5 80GB", 51.2, 1, 791.2e12, "assumed"),
}


def _breakeven(seqs=(1024, 2048), hiddens=(4096, 12288)) -> pd.DataFrame:
    """Grid over the two GPUS × seqs × hiddens (b = 1, t = 8, t0 = 10 µs, 256 GiB host per GPU). At (2048,
    12288) on a100-80gb: selective frees 240 MiB (3 copies) for 0.4 ms, offloading it exposes 25 ms and breaks
    even at 44.8 GB/s = 3.5 × 12.8; full frees 504 MiB (13 copies) for 5 ms, offload exposes 70 ms, breaks
    even at 64 GB/s = 5 × 12.8; 256 GiB / 504 MiB = 520 layers. Every other point breaks even at 1 GB/s; on
    h100-80gb at s = 1024, offload is the cheaper against selective (2 points: both h), nowhere against full.
    Two measured sizes: 2 and 3 GFLOP/s; link 1.5 GB/s; overlapped model 0 and 1 ms; offload measured 5 and
    8 ms over serial model 3 and 4 ms, L = 2, 10 copies per layer (-> 2 ms / 40 copies = 50 µs and 4 ms / 40
    copies = 100 µs, mean 75 µs); full measured 6 and 4 ms (offload below full at the first size only);
    offload freed 2.1 MiB and full 2 MiB per step at both (ratio 1.05)."""
    rows = []
    for gpu, (name, link, share, rate, source) in GPUS.items():
        for s in seqs:
            for h in hiddens:
                point = (gpu, s, h) == ("a100-80gb", 2048, 12288)
                rows.append({
                    "kind": "grid", "gpu": gpu, "gpu_name": name, "s": s, "h": h, "a": h // 128, "b": 1, "t": 8,
                    "link_gb_s": link, "gpus_per_host_link": share, "link_per_gpu_gb_s": link / share, "t0_s": 1e-5,
                    "host_memory_bytes": 256 * GiB, "host_source": source, "flops_per_s": rate,
                    "freed_selective_bytes": 240 * MiB, "copies_selective": 3, "selective_recompute_s": 0.0004,
                    "offload_selective_exposed_s": 0.025, "breakeven_selective_gb_s": 44.8 if point else 1.0,
                    "cheaper_selective": "offload" if (gpu, s) == ("h100-80gb", 1024) else "selective",
                    "freed_full_bytes": 504 * MiB, "copies_full": 13, "full_recompute_s": 0.005,
                    "offload_full_exposed_s": 0.07, "breakeven_full_gb_s": 64.0 if point else 1.0,
                    "cheaper_full": "full", "host_layers_full": 256 * GiB // (504 * MiB)})
    for i, (rate, overlap, measured, serial, full) in enumerate([(2e9, 0.0, 0.005, 0.003, 0.006),
                                                                  (3e9, 0.001, 0.008, 0.004, 0.004)]):
        rows.append({"kind": "measured", "s": 32 * (i + 1), "h": 64, "flops_per_s": rate, "bw_gb_s": 1.5,
                     "L": 2, "tensors": 10, "layer_bytes": 2 * MiB, "predicted_offload_overlap_s": overlap,
                     "predicted_offload_serial_s": serial, "measured_offload_s": measured,
                     "predicted_full_s": 0.002, "measured_full_s": full, "predicted_selective_s": 0.0005,
                     "measured_selective_s": 0.006, "predicted_offload_selective_bytes_serial_s": 0.0001,
                     "freed_offload_bytes": 2.1 * MiB, "freed_full_bytes": 2 * MiB, "freed_selective_bytes": MiB,
                     "breakeven_full_gb_s": 3.5, "breakeven_selective_gb_s": 0.25})
    return pd.DataFrame(rows)


def test_grid_point_prefers_the_175b_layer_then_s_2048_largest_h():
    assert summary.grid_point(_breakeven()) == (2048, 12288)
    assert summary.grid_point(_breakeven(hiddens=(4096, 8192))) == (2048, 8192)
    assert summary.grid_point(_breakeven(seqs=(512, 1024, 4096), hiddens=(4096,))) == (1024, 4096)


def test_grid_example_at_equal_freed_bytes():
    ex = summary.grid_example(_breakeven())
    assert (ex["s"], ex["h"], ex["a"], ex["b"], ex["t"], ex["gpu"]) == (2048, 12288, 96, 1, 8, "a100-80gb")
    assert (ex["link_gb_s"], ex["gpus_per_host_link"], ex["link_per_gpu_gb_s"], ex["host_gib"]) == (25.6, 2, 12.8, 256)
    assert (ex["freed_selective_mib"], ex["copies_selective"]) == (240, 3)
    assert (ex["freed_full_mib"], ex["copies_full"]) == (504, 13)
    assert ex["selective_recompute_ms"] == pytest.approx(0.4) and ex["offload_full_exposed_ms"] == pytest.approx(70)
    assert ex["over_link_selective"] == pytest.approx(3.5) and ex["over_link_full"] == pytest.approx(5.0)
    assert (ex["points"], ex["offload_wins_selective"], ex["offload_wins_full"]) == (8, 2, 0)
    assert ex["gpus"] == "a100-80gb, h100-80gb" and ex["t0_us"] == pytest.approx(10.0)
    text = summary.grid_sentences(ex)
    assert "the layer of GPT-3 175B" in text
    assert "selective recomputation frees 240 MiB per layer for 0.40 ms of recompute" in text
    assert "over the 12.8 GB/s one GPU gets exposes 25.0 ms; it breaks even at 44.8 GB/s, 3.5× that link" in text
    assert "Full recomputation frees 504 MiB for 5.00 ms; offloading those bytes exposes 70.0 ms and breaks even " \
           "at 64.0 GB/s (5.0× the link)" in text
    assert text.endswith("Over the whole grid (8 points on a100-80gb, h100-80gb), offload is the cheaper at equal "
                         "bytes at 2 of the 8 points against selective recomputation and at none of the 8 points "
                         "against full.")


def test_wins_sentence_for_none_all_and_some():
    ex = {"points": 2, "gpus": "a100-80gb", "offload_wins_selective": 0, "offload_wins_full": 0}
    assert summary.wins_sentence(ex) == ("Over the whole grid (2 points on a100-80gb), recomputation is the cheaper "
                                         "at equal bytes everywhere, selective and full alike.")
    assert "offload is the cheaper at equal bytes everywhere" in summary.wins_sentence(
        {**ex, "offload_wins_selective": 2, "offload_wins_full": 2})
    assert summary.wins_sentence({**ex, "offload_wins_selective": 1}).endswith(
        "at one of the two points against selective recomputation and at neither point against full.")


def test_breakeven_summary_names_the_cheaper_choice():
    ex = summary.grid_example(_breakeven())
    text = summary.breakeven_summary(ex)
    assert text.startswith("At $s$ = 2048, $h$ = 12288 on the NVIDIA A100 SXM4 80GB, offloading what selective "
                           "recomputation frees breaks even at 44.8 GB/s and offloading what full recomputation "
                           "frees at 64.0 GB/s, against the 12.8 GB/s of host link one GPU gets")
    assert text.endswith("against the 12.8 GB/s of host link one GPU gets: recomputation beats offload in both cases")
    sel = {**ex, "cheaper_selective": "offload"}
    assert summary.breakeven_summary(sel).endswith(
        ": offload beats selective recomputation, but full recomputation beats offload")
    assert summary.breakeven_summary({**ex, "cheaper_full": "offload"}).endswith(
        ": selective recomputation beats offload, but offload beats full recomputation")
    assert summary.breakeven_summary({**sel, "cheaper_full": "offload"}).endswith(
        ": offload beats recomputation in both cases")


def test_grid_table_one_row_per_gpu_in_display_units():
    t = summary.grid_table(_breakeven())
    assert t["GPU"].tolist() == ["a100-80gb", "h100-80gb"]
    a100 = t.iloc[0]
    assert (a100["GPUs per link"], a100["link per GPU (GB/s)"], a100["host memory per GPU (GiB)"]) == (2, 12.8, 256)
    assert not any("_" in c for c in t.columns)  # readable headers, no snake_case
    assert (a100["sel.: freed (MiB)"], a100["full: freed (MiB)"], a100["full: layers in host"]) == (240, 504, 520)
    assert a100["sel.: recompute (ms)"] == pytest.approx(0.4) and a100["sel.: offload (ms)"] == pytest.approx(25)
    assert (a100["sel.: cheaper"], a100["full: cheaper"]) == ("selective", "full")


def test_host_assumptions_state_sharing_memory_and_source():
    lines = summary.host_assumptions(_breakeven()).splitlines()
    assert lines == [
        "- NVIDIA A100 SXM4 80GB (`a100-80gb`): host link 25.6 GB/s per direction shared by 2 GPUs → 12.8 GB/s "
        "per GPU, $t_0$ = 10 µs; host memory 256 GiB per GPU. Source: DGX A100 whitepaper.",
        "- NVIDIA H100 SXM5 80GB (`h100-80gb`): host link 51.2 GB/s per direction shared by 1 GPU → 51.2 GB/s "
        "per GPU, $t_0$ = 10 µs; host memory 256 GiB per GPU. Source: assumed."]


def test_measured_facts_and_sentences():
    facts = summary.measured_facts(_breakeven())
    assert (facts["gflops_min"], facts["gflops_max"], facts["link_gb_s"]) == (2.0, 3.0, 1.5)
    assert (facts["hidden"], facts["sizes"], facts["offload_below_full"]) == (1, 2, 1)
    assert facts["extra_per_copy_us"] == pytest.approx(75.0)
    assert facts["freed_ratio_min"] == pytest.approx(1.05) and facts["freed_ratio_max"] == pytest.approx(1.05)
    assert facts["bytes_per_flop"] == pytest.approx(1.5e9 / 2.5e9)
    cpu = summary.overlap_model_sentence(facts, simulated=True)
    assert "priced with this CPU's compute rates and memcpy link, hides every copy at one of the two sizes" in cpu
    assert cpu.endswith("a CPU stand-in for copies beside the compute, not a measurement and not a GPU result.")
    assert "describes a GPU" not in cpu
    assert (facts["model_hidden_min"], facts["model_hidden_max"]) == pytest.approx((0.75, 1.0))  # 1 − 1/4, 1 − 0/3
    assert summary.overlap_model_sentence(facts, simulated=False) == ("The copies run on a side stream: the "
                                                                       "overlapped model applies.")
    assert summary.extra_sentence(facts).startswith("The measured offload overhead exceeds the serial model by "
                                                    "75.0 µs per copy")
    assert summary.extra_sentence({**facts, "extra_per_copy_us": -2.5}) == (
        "The measured offload overhead is 2.5 µs per copy below the serial model on average.")


def test_measured_comparison_is_qualified_on_a_simulated_link():
    """No "cheapest choice was offload" on a host memcpy: the sentence says simulated, what that means, and
    sets its bytes per FLOP (1.5 GB/s ÷ 2.5 GFLOP/s = 0.6) beside the A100's per-GPU link (12.8 GB/s ÷
    249.6 TFLOP/s = 5.13e-05): 0.6 / 5.128e-05 = 11,700× fewer on the GPU."""
    table = _breakeven()
    facts, ex = summary.measured_facts(table), summary.grid_example(table)
    text = summary.measured_comparison_sentence(facts, True, ex)
    assert text.startswith("On this simulated link the measured offload overhead was below full recomputation's "
                           "at one of the two sizes, offload freeing 1.05× the bytes full recompute freed")
    assert "host memcpy" in text and "no PCIe" in text and "cheapest" not in text
    assert "moves 0.6 bytes per FLOP of achieved compute, 11,700× as many as the NVIDIA A100 SXM4 80GB's " \
           "per-GPU link (5.1e-05 bytes per FLOP)" in text
    assert text.endswith("It says nothing about which choice wins on a GPU; the equal-bytes break-even above does.")
    real = summary.measured_comparison_sentence(facts, False, ex)
    assert real.startswith("Over the measured host link (one GPU copying alone), the measured offload overhead")
    assert "simulated" not in real


def test_no_report_text_calls_a_simulated_offload_the_cheapest_choice(root):
    for path in ("reports/offload.qmd", "src/remat/experiments/offload_summary.py"):
        text = (root / path).read_text().lower()
        assert "cheapest measured" not in text and "best_measured" not in text, path


def test_measured_table_converts_seconds_to_ms_and_bytes_to_mib():
    t = summary.measured_table(_breakeven())
    first = t.iloc[0]
    assert (first["s"], first["offloaded per layer (MiB)"], first["copies per layer"]) == ("32", 2.0, "10")
    assert (first["freed: offload (MiB)"], first["freed: full (MiB)"], first["freed: selective (MiB)"]) == \
        pytest.approx((2.1, 2.0, 1.0))
    assert first["offload, serial: model (ms)"] == pytest.approx(3.0)  # 0.003 s
    assert first["offload: measured (ms)"] == pytest.approx(5.0)
    assert first["selective: model (ms)"] == pytest.approx(0.5)
    assert first["offload sel. bytes, serial: model (ms)"] == pytest.approx(0.1)
    assert all(c in ("s", "h", "copies per layer") or "(" in c for c in t.columns)  # values say their unit
    assert first["break-even vs full (GB/s)"] == 3.5 and first["break-even vs sel. (GB/s)"] == 0.25  # not scaled
    assert "cheapest measured" not in t.columns and len(t) == 2


def test_opening_summary_labels_a_cpu_link_a_stand_in_and_quotes_the_hidden_share():
    bw = _bandwidth()
    facts = summary.link_facts(bw, summary.fit_table(bw))
    text = summary.link_summary(facts)
    assert text.startswith("Copies alone reach 10.0 GB/s host-to-device (pageable) and 5.0 GB/s device-to-host")
    assert "a CPU stand-in" in text and "not PCIe" in text
    real = summary.link_summary({**facts, "simulated": False, "link": "PCIe 4.0 x16"})
    assert real.endswith("over PCIe 4.0 x16") and "stand-in" not in real
    run = summary.steps_facts(_steps())
    measured = summary.measured_facts(_breakeven())
    cpu = summary.overlap_summary(run, measured, simulated=True)
    assert cpu == ("On the CPU nothing overlaps (no copy engine, no streams), so no hidden share is measured here. "
                   "As a CPU stand-in, not a GPU result: the overlapped model with this CPU's compute rates (2–3 "
                   "GFLOP/s) and its memcpy link (1.5 GB/s) hides 75%–100% of the copy time at the measured sizes")
    assert "on a GPU" not in cpu
    every = {**measured, "model_hidden_min": 1.0, "model_hidden_max": 1.0}
    assert summary.overlap_summary(run, every, True).endswith("memcpy link (1.5 GB/s) hides all of the copy time at "
                                                              "the measured sizes")
    none = {**measured, "model_hidden_min": None, "model_hidden_max": None}
    assert summary.overlap_summary(run, none, True).endswith("(1.5 GB/s) has no measured size to price")
    gpu = summary.overlap_summary({**run, "hidden_share_min": 0.6, "hidden_share_max": 0.9}, measured, False)
    assert gpu.startswith("The hooks hide 60%–90% of the copy time that the synchronous save_on_cpu exposes")
    assert "not measurable" in summary.overlap_summary({**run, "hidden_share_min": None}, measured, False)
