"""The words the Korthikanti report's prose is built from (korthikanti_summary / time_summary wording helpers):
each verdict follows the data in every case — all, none, some (issue 16)."""

from __future__ import annotations

import pandas as pd
import pytest

from remat.analysis import korthikanti2022 as tables
from remat.analysis import times as time_summary


def _table2(measured, formula):
    rows = [{"model": f"m{i}", "technique": "TP baseline", "tp": 8, "bytes_measured": m, "bytes_formula": f,
             "bytes_actual": m, "rel_error": m / f - 1} for i, (m, f) in enumerate(zip(measured, formula))]
    return pd.DataFrame(rows)


def test_table2_agreement_all_exact():
    text = tables.table2_agreement_text(_table2([100, 200, 300], [100, 200, 300]))
    assert text == "The paper-faithful bytes of all 3 model × technique points equal the paper Table 2 formula byte for byte."


def test_table2_agreement_all_within_some_or_none_exact():
    text = tables.table2_agreement_text(_table2([100, 1001], [100, 1000]))
    assert "both model × technique points are within 0.5%" in text and "1 of them byte for byte" in text
    assert "1.0e-03 (m1, TP baseline)" in text
    none = tables.table2_agreement_text(_table2([1001, 2001], [1000, 2000]))
    assert "none of them byte for byte" in none


def test_table2_agreement_some_outside():
    text = tables.table2_agreement_text(_table2([100, 110, 300], [100, 100, 300]))
    assert text.startswith("The paper-faithful bytes of 2 of the 3 model × technique points are within 0.5%")
    assert "(2 byte for byte)" in text and "1.0e-01 (m1, TP baseline)" in text
    assert "none of the 3" in tables.table2_agreement_text(_table2([110, 220, 330], [100, 200, 300]))


def _items(rows):
    cols = ["model", "technique", "tp", "paper_term", "bytes", "paper_bytes", "note"]
    return pd.DataFrame(rows, columns=cols)


NORM = "norm statistics (mean/rstd): the paper ignores them"


def test_uncounted_equal_norm_only_other_and_unexplained():
    table = _table2([100], [100])
    counted = ("m0", "TP baseline", 8, "qkv_input", 100, 100, None)
    assert tables.uncounted_text(table, _items([counted])) == (
        "The actual bytes PyTorch keeps equal the paper-faithful bytes at every point.")
    table = table.assign(bytes_actual=[164])
    norm = tables.uncounted_text(table, _items([counted, ("m0", "TP baseline", 8, None, 64, 0, NORM)]))
    assert norm == ("PyTorch keeps at most 64 bytes per layer more than that (the actual bytes): LayerNorm's mean "
                    "and 1/σ, which the paper ignores.")
    other = tables.uncounted_text(table, _items([counted, ("m0", "TP baseline", 8, None, 64, 0, "causal mask")]))
    assert other.endswith(": causal mask.")
    short = tables.uncounted(table, _items([counted, ("m0", "TP baseline", 8, None, 32, 0, NORM)]))
    assert not short["explained"] and not short["norm_only"]
    assert "do not add up" in tables.uncounted_text(table, _items([counted, ("m0", "TP baseline", 8, None, 32, 0,
                                                                             NORM)]))


def _memory(fits):
    return pd.DataFrame({"model": [f"m{i}" for i in range(len(fits))], "technique": "TP+SP+selective",
                         "fits_gpu": fits, "gpu": "a100-80gb", "gpu_memory_bytes": 80 * 2 ** 30})


@pytest.mark.parametrize("fits,expected", [
    ([True] * 4, "fits in the a100-80gb's 80.0 GiB for all 4 models"),
    ([True, False, True, False], "fits in the a100-80gb's 80.0 GiB for 2 of the 4 models (m0 and m2)"),
    ([False] * 4, "does not fit in the a100-80gb's 80.0 GiB for any of the 4 models"),
    ([False, False], "does not fit in the a100-80gb's 80.0 GiB for either model"),
    ([True], "fits in the a100-80gb's 80.0 GiB for the one model")])
def test_fit_text(fits, expected):
    assert tables.fit_text(_memory(fits), "TP+SP+selective") == expected


def test_fit_text_without_gpu():
    assert tables.fit_text(_memory([False] * 3), "TP+SP+selective", name_gpu=False) == (
        "does not fit for any of the 3 models")


def _table4(scale):
    frame = pd.DataFrame({"experiment": ["baseline", "full recompute"]})
    for i, phase in enumerate(("forward", "backward", "combined")):
        frame[f"paper_{phase}_ms"] = [10.0, 20.0]
        frame[f"{phase}_ms"] = [10.0 * scale[0], 20.0 * scale[1]]
    return frame


@pytest.mark.parametrize("scale,expected", [
    ((0.9, 0.86), "every phase is predicted low, at 86–90% of the paper's time"),
    ((1.1, 1.1), "every phase is predicted high, at 110% of the paper's time"),
    ((0.9, 1.1), "phases are predicted both low and high, at 90–110% of the paper's time")])
def test_table4_bias_text(scale, expected):
    assert time_summary.table4_bias_text(_table4(scale)) == expected


def test_figure8_agreement_text():
    frame = pd.DataFrame({"model": ["a", "b"], "variant": ["full", "present"], "recompute_pct": [40.0, 6.0],
                          "paper_recompute_pct": [41.0, 7.04]})
    assert time_summary.figure8_agreement_text(frame) == (
        "the recompute share of every bar is within 1.1 percentage points of paper Figure 8 "
        "(largest difference: b, present)")
    same = frame.assign(paper_recompute_pct=[40.0, 6.01])
    assert "matches paper Figure 8 to a tenth of a percentage point" in time_summary.figure8_agreement_text(same)


@pytest.mark.parametrize("values,expected", [
    ({"a": 6.0, "b": 2.8, "c": 1.3}, "falls"), ({"a": 1.0, "b": 2.0, "c": 3.0}, "rises"),
    ({"a": 1.0, "b": 3.0, "c": 2.0}, "does not move one way")])
def test_falls_with(values, expected):
    assert time_summary.falls_with(values, {"c": 30, "a": 10, "b": 20}) == expected


def _flops(measured, recompute=(1.0, 1.0), text=(1.0, 1.0), models=("gpt3-175b", "mt-nlg-530b")):
    """Selective rows of a korthikanti-flops table: measured overhead (fraction) per model, recompute FLOPs
    counted and as the paper's text describes them."""
    return pd.DataFrame({"model": list(models), "tp": 8, "mode": "selective", "overhead_eq8": 0.03,
                         "overhead_measured": list(measured), "flops_recompute": list(recompute),
                         "recompute_text": list(text)})


def test_quoted_overhead_text_third_agree_other_and_none():
    third = tables.quoted_overhead_text(_flops([0.00898, 0.00545]))
    assert third == ("The paper's text quotes selective recompute's FLOPs overhead as 2.7% and 1.6% for gpt3-175b "
                     "and mt-nlg-530b — Eq. 8 as printed; our counts (FlopCounterMode, per layer), 0.90% and "
                     "0.55%, are about a third of them: they count the recompute the text describes, QKᵀ and ·V "
                     "once, which Eq. 8 counts three times.")
    agree = tables.quoted_overhead_text(_flops([0.027, 0.016]))
    assert agree == "The paper's text quotes 2.7% and 1.6% for gpt3-175b and mt-nlg-530b; our counts agree (2.70% and 1.60%)."
    other = tables.quoted_overhead_text(_flops([0.0135, 0.008], recompute=(2.0, 2.0)))
    assert "are 0.50 times them." in other and "describes" not in other
    assert tables.quoted_overhead_text(_flops([0.01, 0.01], models=("gpt-22b", "gpt-1t"))) == (
        "The paper's text quotes selective recompute's FLOPs overhead for none of these models.")


def test_reconciliation_display_orders_compared_columns_first_in_mib():
    frame = pd.DataFrame({"term": ["LayerNorm 1 input [ln1_input]", "not counted: norm statistics (mean/rstd): "
                                   "the paper ignores them"],
                          "tensors": ["ln_1/native_layer_norm"] * 2, "shape": ["2048×12288", "2048×1"],
                          "dtype": ["bfloat16"] * 2, "actual_bytes": [50331648, 4096],
                          "measured_bytes": [50331648, 0], "formula_bytes": [3 * 2 ** 19, 0]})
    shown = tables.reconciliation_display(frame)
    assert list(shown.columns)[:4] == ["§4.1 term", "measured MiB", "formula MiB", "actual MiB"]
    assert shown["§4.1 term"].tolist() == ["LayerNorm 1 input", "not counted: norm statistics (mean/rstd)"]
    assert shown["measured MiB"].tolist() == ["48", "0"]
    assert shown["formula MiB"].tolist() == ["1.5", "0"]
    assert shown["actual MiB"].tolist() == ["48", "0.0039"]


def test_memory_summary_fits_reads_yes_no():
    frame = pd.DataFrame({"model": ["m0", "m1"], "technique": "TP+SP", "model_state_bytes": 2 ** 30,
                          "model_state_even_bytes": 2 ** 30, "activations_layers": 2 ** 30,
                          "activations_outside": 0, "total_gib": [2.0, 90.0], "fits_gpu": [True, False],
                          "gpu": "a100-80gb", "gpu_memory_bytes": 80 * 2 ** 30})
    assert tables.memory_summary(frame)["fits a100-80gb (80.0 GiB)"].tolist() == ["yes", "no"]


def _overheads(model, paper, sp=(False, True, False, False, True)):
    return pd.DataFrame({"experiment": ["baseline", "sequence parallel", "full recompute", "selective recompute",
                                        "selective + sequence parallel"],
                         "mode": ["none", "none", "full", "selective", "selective"], "sp": list(sp),
                         "overhead_pct": model, "paper_overhead_pct": paper})


def test_table4_overhead_text_all_some_none():
    paper = [0.0, -3.0, 39.0, 7.0, 4.0]
    text = time_summary.table4_overhead_text(_overheads([0.0, -5.2, 40.46, 5.96, 0.76], paper), 3.0)
    assert text == (
        "the overheads over the baseline, model against paper, are sequence parallel −5.2% against −3%, full "
        "recompute 40.5% against 39%, selective recompute 6.0% against 7% and selective + sequence parallel 0.8% "
        "against 4%: 3 of the 4 overheads are within the index scorecard's 3 percentage points; selective + "
        "sequence parallel is not (“differs”) — the model prices a reduce-scatter plus an all-gather like one "
        "all-reduce (the same bytes on the ring), while the paper's text says the pair is slower")
    close = time_summary.table4_overhead_text(_overheads([0.0, -3.5, 39.5, 7.5, 3.5], paper), 3.0)
    assert close.endswith(": all 4 overheads are within the index scorecard's 3 percentage points")
    full_off = time_summary.table4_overhead_text(_overheads([0.0, -3.0, 50.0, 7.0, 4.0], paper), 3.0)
    assert full_off.endswith("; full recompute is not (“differs”)")
    none = time_summary.table4_overhead_text(_overheads([0.0, 10.0, 10.0, 20.0, 20.0], paper), 3.0)
    assert ": none of the 4 overheads is within the index scorecard's 3 percentage points (“differs”) — " in none


def test_figure7_agreement_text_exact_only_at_zero():
    frame = pd.DataFrame({"percent_of_baseline": [100.0, 66.77, 49.37],
                          "percent_of_baseline_formula": [100.0, 66.77, 49.37]})
    assert tables.figure7_agreement_text(frame) == "every measured ratio equals the formula's"
    tiny = frame.assign(percent_of_baseline=[100.0, 66.77, 49.37 + 1e-12])
    assert tables.figure7_agreement_text(tiny) == (
        "every measured ratio equals the formula's to a hundredth of a percentage point")
    off = frame.assign(percent_of_baseline=[100.0, 66.805, 49.37])
    assert tables.figure7_agreement_text(off) == (
        "every measured ratio is within 0.04 percentage points of the formula's")


def test_tp_text():
    assert tables.tp_text(pd.DataFrame({"tp": [8, 1, 8, 1]})) == "1 and 8"
    assert tables.tp_text(pd.DataFrame({"tp": [8]})) == "8"


def test_interleave_text(monkeypatch):
    assert tables.interleave_text(["gpt-22b", "gpt3-175b", "mt-nlg-530b", "gpt-1t"]) == (
        "m = 3 for gpt3-175b and mt-nlg-530b, m = 1 for the others")
    assert tables.interleave_text(["gpt-22b"]) == "m = 1 for every model here"
    factors = {"a": 3, "b": 2, "c": 1, "d": 3}
    monkeypatch.setattr(tables, "from_name", lambda m: type("Cfg", (), {"interleave": factors[m]}))
    assert tables.interleave_text(["a", "b", "c", "d"]) == "m = 3 for a and d; m = 2 for b, m = 1 for the others"


@pytest.mark.parametrize("share,coda", [
    (0.005, "The bound holds. "),
    (0.57, "The share is below 1%, a fraction below 0.01: the bound holds if its \"0.01\" is a fraction, not a "
           "percent. "),
    (1.5, "The bound does not hold, read as a percent or as a fraction. ")])
def test_outside_share_text(monkeypatch, share, coda):
    summary = pd.DataFrame({"model": ["gpt-22b"], "p": [1], "% of Eq. 5 (formula)": [share],
                            "% of Eq. 5 (measured)": [share], "% of Eq. 6 (formula)": [2.35],
                            "logits % of outside": [87.0]})
    monkeypatch.setattr(tables, "outside_share_summary", lambda frame: summary)
    monkeypatch.setattr(tables, "PAPER_OUTSIDE_SHARE_CLAIM_PCT", {"gpt-22b": 0.01})
    text = tables.outside_share_text(None)
    assert text.startswith("§4.3 adds to Eq. 5 the embedding-dropout mask $sbhp/t$")
    assert "for the gpt-22b model these extra terms are less than 0.01% of the activations" in text
    assert f"Its own terms give {share:.2f}% (" in text and "with $p = 1$; the fp32 logits are 87% of" in text
    assert text.endswith(coda + "With selective recompute the layers shrink to Eq. 6 and the same terms are 2.35% "
                                "of them.")
    assert ("2 times below the stated bound" if share < 0.01 else f"{share / 0.01:.0f} times the stated bound") in text
    # the fraction reading follows the claim, not a typed 1% / "0.01"
    monkeypatch.setattr(tables, "PAPER_OUTSIDE_SHARE_CLAIM_PCT", {"gpt-22b": 0.02})
    if share == 1.5:
        assert "The share is below 2%, a fraction below 0.02" in tables.outside_share_text(None)
    monkeypatch.setattr(tables, "PAPER_OUTSIDE_SHARE_CLAIM_PCT", {"gpt-1t": 0.01})
    assert tables.outside_share_text(None).startswith("§4.3 states its bound for the 22B model, which is not among")


def test_mlp_sbh_coefficients():
    assert tables.gelu_mlp_sbh() == 2 + 8 + 8                # fc1 input, GeLU input, fc2 input (§4.1)
    assert tables.swiglu_mlp_sbh(3.5) == 2 + 8 * 3.5          # Llama 3 8B: ffn = 14336 = 3.5h
    assert tables.swiglu_mlp_sbh(4.0) == 34
