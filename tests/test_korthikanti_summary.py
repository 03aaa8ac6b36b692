"""Korthikanti report tables and figures: the GPU memory constant, paper Figure 1's two parameter bars, §4.3's
share, the text's selective overhead against Eq. 8, HFU, and "paper Table N" naming (issue 12)."""

from __future__ import annotations

import re

import pytest

from remat.errors import UsageError
from remat.experiments import korthikanti as experiment
from remat.analysis import korthikanti2022 as tables
from remat.figures import korthikanti as figures
from remat.timemodel.gpus import GPUS
from remat.units import GB, GiB


@pytest.fixture(scope="module")
def memory():
    return experiment.memory(experiment.MemoryParams(models=["gpt-22b", "gpt3-175b"]))


@pytest.fixture(scope="module")
def flops():
    return experiment.flops(experiment.FlopsParams(models=["gpt3-175b", "mt-nlg-530b"], tp=[8]))


def _row(frame, model, technique):
    return frame[(frame["model"] == model) & (frame["technique"] == technique)].iloc[0]


def test_memory_is_compared_with_the_gpu_presets_memory(memory):
    # one constant: the A100 80GB preset, 81920 MiB = 80 GiB (the planner's budget), not 80·10⁹ bytes
    capacity = GPUS["a100-80gb"].memory_bytes
    assert capacity == 80 * GiB
    assert (memory["gpu"] == "a100-80gb").all() and (memory["gpu_memory_bytes"] == capacity).all()
    assert (memory["fits_gpu"] == (memory["total_bytes"] <= capacity)).all()
    # gpt-22b TP+selective: 76.1 GiB fits in 80 GiB although it is above 80·10⁹ bytes (74.5 GiB)
    row = _row(memory, "gpt-22b", "TP+selective")
    assert round(row["total_gib"], 1) == 76.1
    assert row["fits_gpu"] and row["total_bytes"] > 80 * GB
    assert not _row(memory, "gpt3-175b", "TP+selective")["fits_gpu"]  # 85.3 GiB


def test_memory_gpu_is_a_parameter_and_checked():
    params = experiment.MemoryParams(gpu="h100-80gb")
    assert GPUS[params.gpu].memory_bytes == 81559 * 2 ** 20
    with pytest.raises(UsageError) as exc:
        experiment.MemoryParams(gpu="a100-80GB")
    assert exc.value.field == "korthikanti.memory.gpu"


def test_both_parameter_bars_and_why_they_differ(memory):
    state = tables.model_state_summary(memory).set_index("model")
    assert state.loc["gpt-22b", "paper 18·P/(t·p) GiB"] == 46.26
    assert state.loc["gpt-22b", "first stage GiB"] == 46.47
    assert state.loc["gpt3-175b", "paper 18·P/(t·p) GiB"] == 45.74
    assert state.loc["gpt3-175b", "first stage GiB"] == 47.32
    # the causes add up to the difference (bytes; each part rounded to an int on its own)
    for _, row in memory.groupby("model").first().iterrows():
        parts = sum(row[f"excess_{part}_bytes"] for part in tables.EXCESS_PARTS)
        assert abs(parts - (row["model_state_bytes"] - row["model_state_even_bytes"])) <= len(tables.EXCESS_PARTS)
    # 175B (p = 8): the word embedding on the first stage is most of the 1.58 GiB
    assert state.loc["gpt3-175b", "word embedding GiB"] == 1.154
    assert state.loc["gpt-22b", "word embedding GiB"] == 0.0
    shown = tables.memory_summary(memory)
    assert {"params+optimizer GiB (first stage)", "params+optimizer GiB (paper: 18·P/(t·p))",
            "fits a100-80gb (80.0 GiB)"} <= set(shown.columns)


def test_outside_share_checks_section_4_3(memory):
    out = tables.outside_share_summary(memory).set_index("model")
    assert out.loc["gpt-22b", "% of Eq. 5 (formula)"] == 0.568
    assert out.loc["gpt-22b", "% of Eq. 5 (measured)"] == 0.568
    assert out.loc["gpt-22b", "% of Eq. 6 (formula)"] == 2.349
    assert out.loc["gpt-22b", "paper §4.3 claim %"] == "< 0.01"
    assert out.loc["gpt-22b", "% of Eq. 5 (formula)"] > 50 * tables.PAPER_OUTSIDE_SHARE_CLAIM_PCT["gpt-22b"]
    assert out.loc["gpt3-175b", "% of Eq. 5 (formula)"] == 0.057


def test_selective_overhead_quoted_is_eq8(flops):
    over = tables.selective_overhead_summary(flops).set_index("model")
    for model, quoted in tables.PAPER_SELECTIVE_OVERHEAD_PCT.items():
        assert round(over.loc[model, "Eq. 8 % (iteration)"], 1) == quoted
        assert round(over.loc[model, "text 4Bs²h % (iteration)"], 1) != quoted
    assert over.loc["gpt3-175b", "Eq. 8 % (iteration)"] == 2.693
    assert over.loc["gpt3-175b", "text 4Bs²h % (iteration)"] == 0.898
    assert over.loc["mt-nlg-530b", "measured % (layer)"] == 0.546  # FlopCounterMode agrees with the text
    assert over.loc["gpt3-175b", "paper (text) %"] == "2.7"


def test_utilization_eq8_reproduces_table5_and_the_text_gives_less():
    util = tables.utilization_summary(list(tables.PAPER_TABLE5)).set_index("model")
    assert list(util.index) == list(tables.PAPER_TABLE5)
    assert ((util["MFU % (Eq. 7)"] - util["MFU % (paper)"]).abs() < 0.2).all()
    assert ((util["HFU % (Eq. 8)"] - util["HFU % (paper)"]).abs() < 0.2).all()
    assert util["HFU % (text)"].tolist() == [42.37, 51.85, 56.35, 56.51]
    assert (util["MFU % (Eq. 7)"] < util["HFU % (text)"]).all()
    assert (util["HFU % (text)"] < util["HFU % (Eq. 8)"]).all()
    assert tables.utilization_summary(["gpt2-124m"]).empty


def test_memory_figure_draws_the_preset_line_and_the_even_share(memory):
    fig = figures.memory([memory])
    ax = fig.axes[0]
    labels = ax.get_legend_handles_labels()[1]
    assert "a100-80gb: 80.0 GiB = 85.9 GB" in labels
    assert "params + optimizer, paper: 18·P/(t·p)" in labels
    line = [ln for ln in ax.get_lines() if ln.get_label().startswith("a100-80gb")][0]
    assert line.get_ydata()[0] == pytest.approx(80.0)
    assert "paper Figure 1" in ax.get_title()


def test_table2_formula_column_is_named_a_formula():
    frame = experiment.table2(experiment.AccountingParams(models=["gpt-22b"], serial=False))
    shown = tables.table2_summary(frame)
    assert "formula (paper Table 2) MiB" in shown.columns and "Table 2 MiB" not in shown.columns
    assert "formula (paper Table 2)" in figures.percent([frame]).axes[0].get_legend_handles_labels()[1]


def test_reports_name_the_papers_tables_and_figures_as_paper(root):
    """In reports/*.qmd "Table N" / "Figure N" is the report's own; the paper's is "paper Table N"."""
    unprefixed = re.compile(r"(?<![Pp]aper)\s+(?:Table|Figure)\s+\d")
    for qmd in sorted((root / "reports").glob("*.qmd")):
        text = qmd.read_text()
        hits = [text[max(0, m.start() - 30):m.end()] for m in unprefixed.finditer(text)]
        assert not hits, f"{qmd.name}: {hits}"
        assert "Table 2 MiB" not in text
