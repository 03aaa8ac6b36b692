"""Time-model tables -> what the reports show (nothing measured or predicted here): paper Table 4, Figure 8
and Table 5 beside the roofline model (``korthikanti-table4/figure8/table5``), and the model against this
machine's measurement (``sweep-time-model``), with the numbers the prose quotes.
"""

from __future__ import annotations

import pandas as pd

from remat.report.wording import ceil_text, count_of, join_words, span_text


def _pair(model, paper, digits: int = 2) -> pd.Series:
    """"model / paper" strings, the model's value rounded to ``digits``."""
    return model.round(digits).astype(str) + " / " + paper.astype(str)


def table4_display(frame: pd.DataFrame) -> pd.DataFrame:
    """Per experiment: forward, backward and combined ms and the overhead %, each "model / paper Table 4",
    and the largest relative error of the three phases (%). Input: a ``korthikanti-table4`` table."""
    errors = pd.concat([(frame[f"{p}_ms"] / frame[f"paper_{p}_ms"] - 1) for p in ("forward", "backward", "combined")],
                       axis=1)
    worst = errors.abs().idxmax(axis=1)
    return pd.DataFrame({
        "experiment": frame["experiment"],
        **{f"{p} ms (model / paper)": _pair(frame[f"{p}_ms"], frame[f"paper_{p}_ms"])
           for p in ("forward", "backward", "combined")},
        "largest error %": [round(100 * errors.loc[i, c], 1) for i, c in worst.items()],
        "overhead % (model / paper)": _pair(frame["overhead_pct"], frame["paper_overhead_pct"], 1)})


def table4_parts(frame: pd.DataFrame) -> pd.DataFrame:
    """Where each experiment's predicted time goes, ms: per phase the compute-bound and memory-bound kernels
    and the collectives ("exposed of total" in backward, where GEMMs hide some). Input: ``korthikanti-table4``."""
    fmt = lambda col: frame[col].round(2).astype(str)
    return pd.DataFrame({
        "experiment": frame["experiment"],
        "forward: compute + memory + comm": fmt("forward_compute_ms") + " + " + fmt("forward_memory_ms") + " + "
        + fmt("forward_exposed_comm_ms"),
        "backward: compute + memory + comm exposed (of)": fmt("backward_compute_ms") + " + "
        + fmt("backward_memory_ms") + " + " + fmt("backward_exposed_comm_ms") + " (" + fmt("backward_comm_ms") + ")",
        "recompute: compute + memory + comm": fmt("recompute_compute_ms") + " + " + fmt("recompute_memory_ms")
        + " + " + fmt("recompute_exposed_comm_ms")})


def table4_checks(frame: pd.DataFrame) -> dict:
    """The acceptance numbers: the largest |relative error| of any phase (fraction), the largest |overhead
    difference| (percentage points), and per experiment the overhead predicted and printed (%)."""
    errors = [abs(frame[f"{p}_ms"] / frame[f"paper_{p}_ms"] - 1).max() for p in ("forward", "backward", "combined")]
    by = frame.set_index("experiment")
    return {"max_phase_error": float(max(errors)),
            "max_overhead_pp": float((frame["overhead_pct"] - frame["paper_overhead_pct"]).abs().max()),
            "overhead": by["overhead_pct"].to_dict(), "paper_overhead": by["paper_overhead_pct"].to_dict(),
            "recompute_ms": by["recompute_ms"].to_dict(),
            "backward_ms": by["backward_ms"].to_dict(), "paper_backward_ms": by["paper_backward_ms"].to_dict()}


def figure8_display(frame: pd.DataFrame) -> pd.DataFrame:
    """Per model and variant: forward, forward + backward, total and recompute % of the baseline layer time,
    predicted beside paper Figure 8, and the recompute share's difference (pp). Input: ``korthikanti-figure8``."""
    out = pd.DataFrame({"model": frame["model"], "variant": frame["variant"]})
    for name, col in (("forward", "forward_pct"), ("fwd + bwd", "forward_backward_pct"), ("total", "total_pct"),
                      ("recompute", "recompute_pct")):
        out[f"{name} %"] = frame[col].round(1)
        out[f"paper {name} %"] = frame[f"paper_{col}"]
    out["recompute Δ pp"] = (frame["recompute_pct"] - frame["paper_recompute_pct"]).round(1)
    return out


def table5_display(frame: pd.DataFrame) -> pd.DataFrame:
    """Per model: predicted iteration seconds with full recompute and with SP + selective, their ratio and
    difference, and the MFU, beside paper Table 5's; headers name the unit in parentheses ("full (s)",
    "MFU (%)"). Input: a ``korthikanti-table5`` table."""
    return pd.DataFrame({
        "model": frame["model"], "GPUs": frame["gpus"],
        "full (s)": frame["full_s"].round(2), "paper full (s)": frame["paper_full_s"],
        "SP+selective (s)": frame["present_s"].round(2), "paper SP+selective (s)": frame["paper_present_s"],
        "ratio": frame["ratio"].round(3), "paper ratio": frame["paper_ratio"].round(3),
        "difference (s)": frame["difference_s"].round(2),
        "paper difference (s)": frame["paper_difference_s"].round(2),
        "MFU (%)": frame["mfu_pct"].round(1), "paper MFU (%)": frame["paper_mfu_pct"]})


def validation_display(frame: pd.DataFrame) -> pd.DataFrame:
    """This machine: per size, mode and phase, predicted and measured ms and the relative error (%), with the
    recompute overhead (%) predicted and measured on the combined rows; headers name the unit in parentheses
    ("predicted (ms)", "error (%)"). Input: a ``sweep-time-model`` table."""
    out = pd.DataFrame({"h": frame["hidden"], "s": frame["seq"], "b": frame["micro_batch"], "mode": frame["mode"],
                        "phase": frame["phase"], "predicted (ms)": (1e3 * frame["predicted_s"]).round(2),
                        "measured (ms)": (1e3 * frame["measured_s"]).round(2),
                        "error (%)": (100 * frame["error"]).round(1),
                        "overhead predicted (%)": (100 * frame["predicted_overhead"]).round(1),
                        "overhead measured (%)": (100 * frame["measured_overhead"]).round(1)})
    return out.fillna("")


TIME_MODEL_BAND = 0.25
"""Half-width (relative) of the band around predicted = measured that the time model's validation is judged by
(±25 %): the grey band of the time-model figure (figures.sweeps), the rows the sweeps report counts inside it
(sweeps_summary.within_band) and ``validation_checks``' share."""


def validation_checks(frame: pd.DataFrame, band: float = TIME_MODEL_BAND) -> dict:
    """The CPU validation's numbers: |error| per phase (largest, fraction), the share of rows with |error| at
    most ``band`` (``within_band``, with ``band``), the measured rates (first row), and per size the selective
    overhead predicted and measured."""
    combined = frame[(frame["phase"] == "combined") & (frame["mode"] == "selective")]
    return {"max_error": {p: float(frame.loc[frame["phase"] == p, "error"].abs().max())
                          for p in ("forward", "backward", "combined")},
            "band": band, "within_band": float((frame["error"].abs() <= band).mean()),
            "flops_per_s": float(frame["flops_per_s"].iloc[0]),
            "memory_bytes_per_s": float(frame["memory_bytes_per_s"].iloc[0]),
            "op_overhead_s": float(frame["op_overhead_s"].iloc[0]),
            "selective": [(int(r.hidden), float(r.predicted_overhead), float(r.measured_overhead))
                          for r in combined.itertuples()]}


# --- wording for the report's prose (tables in, words out; every verdict follows the data) ---------------------------

_PHASES = ("forward", "backward", "combined")


def table4_ratios(frame: pd.DataFrame) -> pd.DataFrame:
    """Predicted / paper ms per experiment (rows) and phase (columns forward, backward, combined).
    Input: a ``korthikanti-table4`` table."""
    return pd.DataFrame({p: (frame[f"{p}_ms"] / frame[f"paper_{p}_ms"]).to_numpy() for p in _PHASES},
                        index=frame["experiment"])


def table4_bias_text(frame: pd.DataFrame) -> str:
    """Which way the model misses paper Table 4, as a clause: "every phase is predicted low, at 86–93% of the
    paper's time", "... high, at ...", or "phases are predicted both low and high, at ..." (percent of the
    paper's ms, rounded). Input: a ``korthikanti-table4`` table."""
    r = 100 * table4_ratios(frame).to_numpy().ravel()
    span = span_text(r, 0, "%")
    if (r < 100).all():
        return f"every phase is predicted low, at {span} of the paper's time"
    if (r > 100).all():
        return f"every phase is predicted high, at {span} of the paper's time"
    return f"phases are predicted both low and high, at {span} of the paper's time"


def table4_overhead_text(frame: pd.DataFrame, tolerance_pp: float) -> str:
    """The predicted overheads against paper Table 4's, as a clause: every experiment but the baseline as
    "model% against paper%", then how many are within ``tolerance_pp`` percentage points (the index
    scorecard's tolerance for paper Table 4), the others named with the scorecard's verdict (“differs”) and,
    when one of those runs sequence parallelism, the reason the model gives for it. Input: a
    ``korthikanti-table4`` table (columns experiment, mode, sp, overhead_pct, paper_overhead_pct)."""
    rows = frame[(frame["mode"] != "none") | frame["sp"].astype(bool)]
    if not len(rows):
        return "paper Table 4 has no experiment besides its baseline here"
    delta = (rows["overhead_pct"] - rows["paper_overhead_pct"]).abs()
    pct = lambda value, spec: f"{value:{spec}}%".replace("-", "−")   # a minus sign, not a hyphen
    pairs = join_words(f"{r.experiment} {pct(r.overhead_pct, '.1f')} against {pct(r.paper_overhead_pct, 'g')}"
                       for r in rows.itertuples())
    off = rows[delta > tolerance_pp]
    n, k = len(rows), len(rows) - len(off)
    head = (f"the overheads over the baseline, model against paper, are {pairs}: "
            f"{count_of(k, n, 'overhead', verb=('is', 'are'))} within the index scorecard's {tolerance_pp:g} "
            f"percentage points")
    if not len(off):
        return head
    tail = "" if k == 0 else f"; {join_words(off['experiment'])} {'is' if len(off) == 1 else 'are'} not"
    why = (" — the model prices a reduce-scatter plus an all-gather like one all-reduce (the same bytes on the "
           "ring), while the paper's text says the pair is slower" if off["sp"].astype(bool).any() else "")
    return f"{head}{tail} (“differs”){why}"  # typographic quotes: an inline value with both ' and " is escaped


def figure8_agreement_text(frame: pd.DataFrame) -> str:
    """The recompute share against paper Figure 8, as a clause: "the recompute share of every bar is within
    1.2 percentage points of paper Figure 8 (largest difference: gpt3-175b, full)" (the bound rounded up to a
    tenth), or "matches paper Figure 8 to the
    rounding of its bars" when no bar differs by more than 0.05 points. Input: a ``korthikanti-figure8`` table."""
    delta = (frame["recompute_pct"] - frame["paper_recompute_pct"]).abs()
    if delta.max() < 0.05:
        return "the recompute share of every bar matches paper Figure 8 to a tenth of a percentage point"
    worst = frame.loc[delta.idxmax()]
    return (f"the recompute share of every bar is within {ceil_text(delta.max(), 1)} percentage points of paper "
            f"Figure 8 (largest difference: {worst['model']}, {worst['variant']})")


def falls_with(values: dict, keys: dict) -> str:
    """"falls", "rises" or "does not move one way" as ``keys`` (e.g. the hidden size per model) grows: how the
    ``values`` (same keys, e.g. a percent per model) change when ordered by ``keys``."""
    ordered = [values[m] for m in sorted(values, key=lambda m: keys[m])]
    steps = [b - a for a, b in zip(ordered, ordered[1:])]
    if steps and all(s < 0 for s in steps):
        return "falls"
    if steps and all(s > 0 for s in steps):
        return "rises"
    return "does not move one way"
