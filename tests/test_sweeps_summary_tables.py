"""The sweeps report's tables and the timing comparison (remat.analysis.sweeps): readable headers,
"—" with a reason where a sweep has no such size, and the per-layer timing beside the time-model sweep, the
sentences' verdicts following the numbers."""

from __future__ import annotations

import numpy as np
import pandas as pd

from remat.analysis import sweeps as s


def _lt(dtype="bfloat16", dropout=0.1, none=0.08, sel=0.1, full=0.12):
    rows = [{"mode": m, "status": "ok", "device": "cpu", "hidden": 512, "seq": 256, "micro_batch": 2, "heads": 8,
             "dtype": dtype, "dropout": dropout, "combined_s": t, "time_overhead": t / none - 1}
            for m, t in (("none", none), ("selective", sel), ("full", full))]
    return pd.DataFrame(rows)


def _tm(dtype="float32", dropout=0.0, none=0.18, sel=0.195, full=0.23, hidden=512):
    rows = []
    for h in (256, hidden):
        for m, t in (("none", none), ("selective", sel), ("full", full)):
            for phase in ("forward", "combined"):
                rows.append({"mode": m, "phase": phase, "status": "ok", "device": "cpu", "hidden": h, "seq": 256,
                             "micro_batch": 2, "heads": 8, "dtype": dtype, "dropout": dropout,
                             "measured_s": t if h == hidden else 1.0, "measured_overhead": t / none - 1})
    return pd.DataFrame(rows)


def test_sizes_table_marks_missing_sizes_and_says_why():
    frames = {"layer-timing": _lt().assign(model="gpt-tiny", layers=1, vocab=64, threads=1, warmup=2, repeats=10),
              "time-model": _tm().assign(threads=1, warmup=1, repeats=5)}
    table = s.sizes_table(frames).set_index("sweep")
    assert table.loc["time-model", "model"] == "—" and table.loc["time-model", "vocabulary v"] == "—"
    assert table.loc["time-model", "hidden h"] == "256–512" and table.loc["layer-timing", "layers L"] == "1"
    assert "" not in table.values and not any("_" in c for c in table.columns)
    note = s.sizes_note(frames)
    assert note.startswith("— marks a size a sweep's table does not record. The time-model sweep's table lacks "
                           "model, layers L and vocabulary v: it runs the transformer layers alone")
    full = {"layer-timing": frames["layer-timing"]}
    assert s.sizes_note(full) == "Every sweep records every size."


def test_display_tables_have_readable_headers():
    summary = pd.DataFrame([{"device": "cpu", "layers": 16, "points": 16, "ok": 16, "k_sqrt": 4,
                             "k_opt_measured": 16, "k_opt_formula": 16, "k_star": 17.68, "peak_k1": 5366280.0,
                             "peak_k_sqrt": 1575432.0, "peak_opt": 812040.0, "max_saved_error": 0.0,
                             "residual_min": 188420.0, "residual_max": 237576.0, "time_per_flop_median": 3.739}])
    seg = s.segments_display(summary).iloc[0]
    assert (seg["optimum k, measured"], seg["peak at k = 1 (bytes)"], seg["median time / FLOP overhead (×)"]) == (
        16, "5,366,280", "3.74")
    fits = pd.DataFrame([{"device": "cpu", "family": "none", "points": 6, "L_min": 2, "L_max": 64,
                          "exponent": 0.9151, "exponent_formula": 0.978, "intercept_bytes": 246280.2,
                          "bytes_per_layer": 320000.0}])
    depth = s.depth_display(fits).iloc[0]
    assert (depth["exponent a of L^a, measured"], depth["slope c1 (bytes per layer)"]) == ("0.915", "320,000")
    cross = pd.DataFrame([{"device": "cpu", "h": 128, "a": 4, "s_star_measured": 217.6, "s_star_formula": 217.6,
                           "s_range": "64–512"}])   # no h axis swept
    shown = s.crossover_display(cross).iloc[0]
    assert (shown["crossing s, measured"], shown["crossing h, measured"], shown["h swept"]) == ("217.6", "—", "—")
    for table in (s.segments_display(summary), s.depth_display(fits), s.crossover_display(cross)):
        assert not any("_" in c for c in table.columns)


def test_timing_contrast_explains_a_different_base():
    contrast = s.timing_contrast(_lt(), _tm(), "cpu")
    assert contrast["size"] == {"hidden": 512, "seq": 256, "micro_batch": 2, "heads": 8}
    assert contrast["here"]["none_s"] == 0.18 and np.isclose(contrast["there"]["full"][1], 0.04)
    text = s.timing_contrast_text(contrast)
    assert "selective recompute adds 25.0% in the per-layer timing against 8.3% here and full 50.0% against 27.8%" \
        in text
    assert "the per-layer timing ran bfloat16 with dropout 0.1, this sweep float32 with dropout 0" in text
    assert "80.0 ms in the per-layer timing and 180.0 ms here (2.25× as long)" in text
    assert "most of the difference in the percentages is the base" in text   # added 20/15 ms, 40/50 ms vs 2.25×
    assert text.endswith("Only the per-layer timing has dropout to re-run: selective recompute re-runs the "
                         "attention dropout, full recompute every dropout of the layer.")


def test_timing_contrast_when_the_added_time_differs_too_or_nothing_matches():
    text = s.timing_contrast_text(s.timing_contrast(_lt(), _tm(sel=0.36, full=0.5), "cpu"))
    assert "the re-run itself costs differently, not only its share" in text
    same = s.timing_contrast_text(s.timing_contrast(_lt(), _tm(dtype="bfloat16", dropout=0.1), "cpu"))
    assert "both ran bfloat16 with dropout 0.1, so the difference is between runs" in same
    assert "has dropout to re-run" not in same
    assert s.timing_contrast(_lt(), _tm(hidden=1024), "cpu") is None
    assert s.timing_contrast_text(None).startswith("The time-model sweep measured no size of the per-layer timing's")
    assert s.timing_contrast(_lt(), pd.DataFrame(), "cpu") is None


def test_layer_table_headers_and_dash_for_none():
    table = s.layer_table(_lt().assign(forward_s=0.03, backward_s=0.05, combined_iqr_s=0.001, flop_overhead=0.0,
                                       flop_overhead_formula=0.0, time_per_flop_overhead=np.nan))
    assert table.iloc[0]["time / FLOP overhead (×)"] == "—"
    assert not any("_" in c for c in table.columns)


def test_timing_contrast_pointer_says_other_overheads_only_when_they_differ():
    other = s.timing_contrast_pointer(s.timing_contrast(_lt(), _tm(), "cpu"))   # 25.0% / 50.0% against 8.3% / 27.8%
    assert other == ("The time-model sweep measures this layer size too, in float32 with dropout 0, and finds other "
                     "overheads; the reason is worked out with it")
    same = s.timing_contrast(_lt(), _tm(none=0.18, sel=0.225, full=0.27), "cpu")   # 25.0% and 50.0% both
    assert s.timing_contrast_pointer(same) == ("The time-model sweep measures this layer size too, in float32 with "
                                               "dropout 0, and finds the same overheads")
    assert s.timing_contrast_pointer({**same, "modes": []}).endswith("but under none of the recompute modes timed here")
    assert s.timing_contrast_pointer(None) == ("The time-model sweep has no measurement at this layer size to set "
                                               "beside these overheads")


def test_checkpoint_bytes_is_the_closed_forms_x():
    from remat.formulas.torch_gpt import GPTSizes
    row = {"seq": 256, "micro_batch": 2, "hidden": 512, "dtype": "bfloat16"}
    assert s.checkpoint_bytes(row) == 256 * 2 * 512 * 2
    sz = GPTSizes(s=256, b=2, h=512, a=8, v=64, itemsize=4)
    assert s.checkpoint_bytes({**row, "dtype": "float32"}) == sz.sbh * sz.itemsize
    assert s.checkpoint_bytes(pd.Series(row)) == 256 * 2 * 512 * 2     # a frame's row too


def _seq_axis(keep_short=0.75, keep_long=0.3, device="cpu"):
    """Per-layer saved bytes along s (h = 128) under none and selective at s = 64 and 512, an h-axis point and a
    point that did not run (both ignored)."""
    rows = []
    for s_, keep in ((64, keep_short), (512, keep_long)):
        rows += [{"device": device, "axis": "seq", "status": "ok", "seq": s_, "hidden": 128, "mode": "none",
                  "saved_per_layer_bytes": 1000.0 * s_},
                 {"device": device, "axis": "seq", "status": "ok", "seq": s_, "hidden": 128, "mode": "selective",
                  "saved_per_layer_bytes": 1000.0 * s_ * keep}]
    rows += [{"device": device, "axis": "hidden", "status": "ok", "seq": 1024, "hidden": 64, "mode": "selective",
              "saved_per_layer_bytes": 1.0},
             {"device": device, "axis": "seq", "status": "oom", "seq": 2048, "hidden": 128, "mode": "selective",
              "saved_per_layer_bytes": np.nan}]
    return pd.DataFrame(rows)


def test_selective_keep_and_its_sentence_follow_the_shares():
    keep = s.selective_keep(_seq_axis(), "cpu")
    assert keep == {"s_short": 64, "s_long": 512, "keep_short": 0.75, "keep_long": 0.3, "h": 128}
    assert s.selective_keep_text(keep) == (
        "It keeps 30.0% of a layer's saved bytes at $s$ = 512 (75.0% at $s$ = 64; $h$ = 128): the $5as^2b$ part it "
        "drops grows faster with $s$ than the rest of the layer.")
    flat = s.selective_keep_text(s.selective_keep(_seq_axis(keep_short=0.3), "cpu"))
    assert flat.endswith("(30.0% at $s$ = 64; $h$ = 128): the share it keeps does not fall as $s$ grows over the "
                         "swept range.") and "5as^2b" not in flat
    one = _seq_axis()
    assert s.selective_keep_text(s.selective_keep(one[one["seq"] != 64], "cpu")) == (
        "It keeps 30.0% of a layer's saved bytes at $s$ = 512 ($h$ = 128); one sequence length does not show how "
        "that share moves with $s$.")
    assert s.selective_keep(_seq_axis(), "cuda") is None
    assert s.selective_keep(one[one["mode"] == "none"], "cpu") is None
    assert s.selective_keep_text(None).startswith("Its saving is not measured")


def test_fit_value_reads_one_fit_or_nan():
    fits = pd.DataFrame([{"device": "cpu", "family": "none", "exponent": 0.9, "intercept_bytes": 10.0}])
    assert s.fit_value(fits, "cpu", "none") == 0.9 and s.fit_value(fits, "cpu", "none", "intercept_bytes") == 10.0
    assert np.isnan(s.fit_value(fits, "cpu", "sqrt")) and np.isnan(s.fit_value(fits, "cuda", "none"))
