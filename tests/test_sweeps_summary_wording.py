"""The sweeps report's generated sentences (remat.analysis.sweeps wording helpers): every verdict
word follows the numbers, and every case (all / none / some, equal / within / beyond) reads as English."""

from __future__ import annotations

import numpy as np
import pandas as pd

from remat.analysis import sweeps as s
from remat.analysis import times as time_summary
from remat.analysis.times import TIME_MODEL_BAND
from remat.units import percent

ALLOWS = percent(s.SAVED_TOLERANCE, 0)   # the acceptance's tolerance as the sentences show it


def kib(n: float) -> str:
    return f"{n / 1024:.0f} KiB"


def test_not_run_text():
    assert s.not_run_text(0, 8) == "every point ran"
    assert s.not_run_text(2, 8) == "2 of the 8 points did not run (oom or too large)"
    assert s.not_run_text(3, 3) == "no point ran (all 3 points: oom or too large)"


def test_saved_text_says_equal_only_when_exact():
    assert 0.001 < s.SAVED_TOLERANCE < 0.05   # the errors below: one within the tolerance, one beyond it
    assert s.saved_text(0.0, 16, 16) == "the saved bytes equal the closed form at every $k$"
    assert s.saved_text(0.0, 14, 16) == "the saved bytes equal the closed form at each of the 14 $k$ that ran"
    assert s.saved_text(0.001, 5, 5, where="point", wheres="points") == (
        f"the saved bytes match the closed form within 0.100% at every point (the acceptance allows {ALLOWS})")
    assert s.saved_text(0.05, 3, 4, where="point", wheres="points") == (
        "the saved bytes deviate from the closed form by up to 5.000% at each of the 3 points that ran, more than "
        f"the {ALLOWS} the acceptance allows")
    assert s.saved_text(float("nan"), 0, 4).startswith("no $k$ was measured")


def test_optimum_text_does_not_say_not_at_sqrt_l_when_it_is():
    at_sqrt = s.optimum_text(4, 4, 4, "1 MiB", "5 MiB", "1 MiB")
    assert "lowest at Chen's $k = \\sqrt L$ itself, $k$ = 4 (the closed form agrees" in at_sqrt
    assert "not at" not in at_sqrt
    elsewhere = s.optimum_text(16, 12, 4, "1.5 MiB", "5 MiB", "0.8 MiB")
    assert elsewhere.startswith("The measured peak is lowest at $k$ = 16 (closed form: 12), not at Chen's")
    assert "(4, peak 1.5 MiB; no checkpoints: 5 MiB; optimum: 0.8 MiB)" in elsewhere


def test_residual_text_follows_the_sign():
    assert s.residual_text(1024, 2048, kib) == "exceeds the live saved bytes by 1 KiB to 2 KiB at every $k$"
    assert s.residual_text(1024, 1024, kib) == "exceeds the live saved bytes by 1 KiB at every $k$"
    assert s.residual_text(-2048, -1024, kib) == "stays below the live saved bytes, by 1 KiB to 2 KiB, at every $k$"
    assert s.residual_text(-1024, 2048, kib).startswith("differs from the live saved bytes by -1 KiB to 2 KiB")
    assert "no point was measured" in s.residual_text(float("nan"), float("nan"), kib)


def test_time_flop_text():
    assert s.time_flop_text(2.29).startswith("Recomputation costs more time than its FLOPs predict")
    assert s.time_flop_text(0.8).startswith("Recomputation costs less time")
    assert s.time_flop_text(1.0).startswith("Recomputation costs as much time")
    assert "not timed" in s.time_flop_text(float("nan"))


def test_growth_text():
    assert s.growth_text(1024, 4096, kib) == "grows from 1 KiB to 4 KiB"
    assert s.growth_text(4096, 1024, kib) == "shrinks from 4 KiB to 1 KiB"
    assert s.growth_text(1024, 1024, kib) == "stays at 1 KiB"


def test_overhead_text_says_adds_only_for_a_positive_overhead():
    assert s.overhead_text("selective", 0.2214, 0.02564, 8.634, 2) == (
        "selective recompute adds 22.1% to the layer's time for 2.56% more FLOPs (8.63× the FLOP prediction)")
    assert s.overhead_text("full", -0.03, 1 / 3, -0.09).startswith("full recompute measured 3.0% faster than none")
    assert s.overhead_text("full", 0.0, 1 / 3, 0.0) == "full recompute took the same time as none despite 33.3% more FLOPs"


def test_intercept_text():
    assert "pulls the log–log slopes below" in s.intercept_text(2048, 0.9, kib)
    assert s.intercept_text(-1024, 1.0, kib) == "The intercept is $c_0$ = -1 KiB (head, loss, the backward working set)."


def test_gap_text_names_the_modes_that_keep_more():
    modes = pd.Series(["none", "selective", "full"])
    assert "under none and selective; the difference is LayerNorm mean and rstd alone" in s.gap_text(
        pd.Series([8, 8, 0]), pd.Series([8, 8, 0]), modes)
    assert "under every mode; the difference is itemized" in s.gap_text(pd.Series([8, 9, 1]), pd.Series([8, 8, 0]),
                                                                      modes)
    assert s.gap_text(pd.Series([0, 0, 0]), pd.Series([0, 0, 0]), modes) == (
        "The torch layer keeps exactly what the paper counts at every point.")


def test_within_band_and_selective_model_text():
    frame = pd.DataFrame({"error": [0.1, -0.3, 0.25, -0.25]})
    assert s.within_band(frame, 0.25) == (3, 4)
    assert s.selective_model_text([(256, 0.05, 0.46), (512, 0.03, 0.09)]).startswith(
        "the measured selective overhead is larger than predicted at every size ($h$ = 256: predicted 5.0%, "
        "measured 46.0%")
    assert s.selective_model_text([(256, 0.05, 0.04)]).startswith(
        "the measured selective overhead is at most the prediction at the one size")
    assert s.selective_model_text([(256, 0.05, 0.46), (512, 0.03, 0.02), (1024, 0.02, 0.01)]).startswith(
        "the measured selective overhead is larger than predicted at 1 of the 3 sizes")
    assert s.selective_model_text([]) == "no selective overhead was measured"   # a clause, as every case


def test_validation_checks_share_within_the_time_model_band():
    band = TIME_MODEL_BAND   # errors relative to it: inside, beyond, on its edge (within), inside
    frame = pd.DataFrame({"phase": ["forward", "backward", "combined", "combined"],
                          "mode": ["none"] * 3 + ["selective"],
                          "error": [0.4 * band, -1.2 * band, band, -0.8 * band], "flops_per_s": 1e9,
                          "memory_bytes_per_s": 1e9, "op_overhead_s": 1e-6, "hidden": 64, "predicted_overhead": 0.1,
                          "measured_overhead": 0.2})
    checks = time_summary.validation_checks(frame)
    assert checks["band"] == TIME_MODEL_BAND and checks["within_band"] == 0.75
    assert checks["within_band"] == s.within_band(frame, TIME_MODEL_BAND)[0] / len(frame)
    assert time_summary.validation_checks(frame, band=0.4 * band)["within_band"] == 0.25
    assert checks["selective"] == [(64, 0.1, 0.2)]


def test_acceptance_text():
    acc = pd.DataFrame({"device": ["cpu"] * 3, "check": ["a", "b", "c"], "met": ["yes", "yes", "yes"]})
    assert s.acceptance_text(acc) == "all 3 checks are met"
    acc.loc[1, "met"] = "NO"
    assert s.acceptance_text(acc) == "1 of the 3 checks is NOT met (cpu: b)"
    assert s.acceptance_text(acc.iloc[:0]) == "there are no checks yet (no sweep table)"


def _time_model(device="cpu", errors=(0.1, -0.5, 0.35, -0.2), threads=1, dropout=0.0):
    """A time-model table on one device: two sizes (h = 256 first), one error per phase and mode as given."""
    rows = [{"device": device, "hidden": h, "phase": phase, "mode": "none", "error": e, "threads": threads,
             "dropout": dropout}
            for h, (phase, e) in zip((256, 256, 512, 512), zip(("forward", "backward", "combined", "combined"),
                                                               errors))]
    return pd.DataFrame(rows)


CHECKS = {"max_error": {"forward": 0.5, "backward": 0.51, "combined": 0.354}, "flops_per_s": 69.6e9,
          "memory_bytes_per_s": 15.4e9, "op_overhead_s": 2.8e-6,
          "selective": [(256, 0.058, 0.462), (512, 0.029, 0.086)]}


def test_time_model_intro_and_summary_quote_one_largest_error():
    band = TIME_MODEL_BAND
    frame = _time_model(errors=(0.4 * band, -1.2 * band, band, -2 * band))   # 2 of the 4 rows within the band
    assert s.band_text(0.25) == "±25%" and s.band_text(0.1) == "±10%"
    assert s.time_model_intro(frame, CHECKS, band) == (
        "On cpu the rates measured beside the layers (at $h$ = 256, the first size) were 69.6 GFLOP/s for torch.mm, "
        "15.4 GB/s for a copy and 2.8 µs per op. The largest error is 50% in forward, 51% in backward and 35% "
        f"combined; 2 of the 4 rows are within {s.band_text(band)}.")
    assert s.time_model_summary(frame, CHECKS, band) == (
        f"At the rates measured on cpu (a CPU stand-in, not a GPU measurement), the roofline predicts the layer's "
        f"time within {s.band_text(band)} in 2 of the 4 rows (largest combined error 35%)")
    assert s.time_model_summary(frame.assign(device="cuda"), CHECKS, band).startswith(
        "At the rates measured on cuda (measured on cuda), the roofline")
    assert s.time_model_intro(frame.iloc[:0], None, band) == "No `sweep-time-model` table yet."
    assert s.time_model_summary(frame.iloc[:0], None, band) == "The time model has no table yet"


def test_selective_model_note_explains_only_an_under_prediction():
    optimistic = "the roofline's memory roof is optimistic for the elementwise ops that selective recompute re-runs"
    gpu = " On a GPU these ops are bandwidth-bound"
    every = s.selective_model_note(_time_model(), "cpu", CHECKS)
    assert every.startswith("The measured selective overhead is larger than predicted at every size ($h$ = 256: "
                            "predicted 5.8%, measured 46.2%; $h$ = 512: predicted 2.9%, measured 8.6%). On a CPU "
                            f"{optimistic}: softmax, GeLU and the masked fill compute exponentials and comparisons "
                            "element by element on 1 thread, slower per element than the copy bandwidth allows.")
    assert "(Dropout is off in this sweep" in every and gpu in every
    some = s.selective_model_note(_time_model(threads=4), "cpu",
                                  {**CHECKS, "selective": [(256, 0.058, 0.462), (512, 0.029, 0.01)]})
    assert some.startswith("The measured selective overhead is larger than predicted at one of the two sizes")
    assert f"Where it is larger, {optimistic}: " in some and "on 4 threads" in some
    assert "at the other sizes the prediction covers the measured overhead." in some
    none = s.selective_model_note(_time_model(dropout=0.1), "cpu", {**CHECKS, "selective": [(256, 0.058, 0.04)]})
    assert none.startswith("The measured selective overhead is at most the prediction at the one size ($h$ = 256: "
                           "predicted 5.8%, measured 4.0%): on 1 thread the roofline's memory roof is not optimistic "
                           "for the elementwise ops that selective recompute re-runs.")
    assert "Dropout is off" not in none and optimistic not in none
    empty = s.selective_model_note(_time_model().iloc[:0], "cpu", None)
    assert empty.startswith("No selective overhead was measured, so the roofline's price of the elementwise ops "
                            "that selective recompute re-runs is not checked on this CPU.")
    assert "Dropout is off" not in empty and "Here" not in empty
    assert s.selective_model_note(_time_model("cuda"), "cuda", CHECKS).startswith(
        "On cuda, the measured selective overhead is larger than predicted at every size")
    assert s.selective_model_note(_time_model("cuda"), "cuda", {**CHECKS, "selective": []}) == (
        "On cuda, no selective overhead was measured.")


def _segments(device="cuda"):
    """L = 4 on one device: k = 1, 2 measured (saved bytes 1% off the closed form at k = 2), k = 4 out of memory."""
    rows = [{"device": device, "k": k, "status": status, "layers": 4, "k_sqrt": 2, "k_opt_formula": 2,
             "k_star": 2.5, "peak_activation_bytes": peak, "saved_ratio": ratio, "peak_residual_bytes": 10.0,
             "time_per_flop_overhead": np.nan}
            for k, status, peak, ratio in ((1, "ok", 400.0, 1.0), (2, "ok", 300.0, 1.01), (4, "oom", np.nan, np.nan))]
    return pd.DataFrame(rows)


def test_segments_line_and_others_text():
    frame = _segments()
    assert s.not_run(frame, "cuda") == 1 and s.not_run(frame, "cpu") == 0 and s.not_run(pd.DataFrame(), "cpu") == 0
    assert s.segments_line(frame, "cuda") == (
        "On cuda ($L$ = 4; 1 of the 3 points did not run (oom or too large)) the measured optimum is $k$ = 2 "
        "(closed form 2, $k^*$ = 2.5) and the saved bytes match the closed form within 1.000% at each of the 2 $k$ "
        f"that ran (the acceptance allows {ALLOWS}).")
    assert s.segments_line(frame, "cpu") == "On cpu no segment point ran."
    assert s.others_text("segments", frame, ["cuda", "cpu"]) == (
        f"{s.segments_line(frame, 'cuda')} On cpu no segment point ran.")
    assert s.others_text("segments", frame, []) == ""


def test_depth_line():
    rows = [{"device": "cuda", "family": f, "layers": L, "status": "ok", "peak_activation_bytes": c * L ** a,
             "peak_activation_bytes_formula": c * L ** a}
            for f, a in (("none", 1.0), ("sqrt", 0.5), ("full", 0.25)) for L, c in ((4, 100.0), (16, 100.0))]
    frame = pd.DataFrame(rows + [{**rows[0], "layers": 64, "status": "oom"}])
    assert s.depth_line(frame, "cuda") == (
        "On cuda: $a$ = 1.000, 0.500 and 0.250 over the points that ran (1 of the 7 points did not run (oom or too "
        "large)).")
    assert s.depth_line(frame, "cpu") == "On cpu no depth point ran."


def test_crossover_line():
    rows = [{"device": "cuda", "mode": "none", "status": "ok", "axis": "seq", "seq": q, "hidden": 128, "heads": 4,
             "sbh_term_measured": 34.0 * q, "as2b_term_measured": 5 * 4 * q * q / 128,
             "crossover_seq_formula": 34 * 128 / 20} for q in (64, 512)]
    rows += [{"device": "cuda", "mode": "none", "status": "ok", "axis": "hidden", "seq": 256, "hidden": h, "heads": 4,
              "sbh_term_measured": 34.0 * h, "as2b_term_measured": 5 * 4 * 256.0, "crossover_seq_formula": np.nan}
             for h in (64, 512)]
    line = s.crossover_line(pd.DataFrame(rows), "cuda")
    assert line.startswith("On cuda ($h$ = 128, $a$ = 4): $s^*$ = ")
    assert "217.6 closed form; $h^*$ = " in line and line.endswith("against 150.6 at $s$ = 256.")
    assert s.crossover_line(pd.DataFrame(rows), "cpu") == "On cpu no sequence/hidden point ran."


def test_layer_overhead_text_and_timing_line():
    frame = pd.DataFrame([{"device": "cuda", "mode": m, "status": "ok", "time_overhead": t, "flop_overhead": f,
                           "time_per_flop_overhead": t / f if f else np.nan}
                          for m, t, f in (("none", 0.0, 0.0), ("selective", 0.05, 0.0256), ("full", 0.4, 1 / 3))])
    assert s.layer_overhead_text(frame, "cuda", "selective", 2) == s.overhead_text("selective", 0.05, 0.0256,
                                                                                   0.05 / 0.0256, 2)
    assert s.timing_line(frame, "cuda") == (
        f"On cuda, {s.overhead_text('full', 0.4, 1 / 3, 1.2)}; {s.layer_overhead_text(frame, 'cuda', 'selective', 2)}.")
    assert s.layer_overhead_text(frame, "cuda", "none") == "none recompute was not measured against none"
    assert s.layer_overhead_text(frame[frame["mode"] != "none"], "cuda", "full") == (
        "full recompute was not measured against none")
    assert s.layer_overhead_text(frame, "cpu", "full") == "full recompute was not measured against none"


def test_all_saved_text_counts_every_point_of_the_device():
    seg = _segments("cpu")
    other = pd.DataFrame([{"device": "cpu", "status": "ok", "saved_ratio": 0.995},
                          {"device": "cuda", "status": "ok", "saved_ratio": 2.0}])   # another device: left out
    assert s.all_saved_text((seg, other, pd.DataFrame()), "cpu") == (
        "the saved bytes match the closed form within 1.000% at each of the 3 points that ran (the acceptance "
        f"allows {ALLOWS})")
    assert s.all_saved_text((seg,), "tpu").startswith("no point was measured")


def test_stand_in_text():
    assert s.stand_in_text("cpu") == "a CPU stand-in, not a GPU measurement"
    assert s.stand_in_text("cuda") == "measured on cuda"
