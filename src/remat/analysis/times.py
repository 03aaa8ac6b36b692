"""Time-model tables -> what the reports show (nothing measured or predicted here): paper Table 4, Figure 8
and Table 5 beside the roofline model (``korthikanti-table4/figure8/table5``), and the model against this
machine's measurement (``sweep-time-model``), with the numbers the prose quotes.
"""

from __future__ import annotations

import math

import pandas as pd

from remat.report.phrases import count_of, join_words

from remat.units import ceil_text, span_text


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


# --- paper Table 4: where the predicted time goes, in words ---------------------------------------------------------

FORWARD_SHARE_BACKWARD_TWICE = 1 / (1 + 2)
"""What re-running the forward adds when backward takes twice the forward (the paper's reasoning beside paper
Table 4: one forward over a forward and a backward twice as long, "a third"), as a fraction."""

MEMORY_BOUND_SHARE = 0.5
"""A recompute is called mostly memory-bound when more than this share of its predicted time sits on the
bandwidth roof (the larger part), mostly compute-bound otherwise."""

MS_PRINTED = 0.005
"""Half the last digit of a time the prose prints in ms to two decimals (0.01 ms): two times closer than this
print alike, so the prose calls them equal ("all of it" on the bandwidth roof, "as much" as the paper's saving)."""


def _ratio_errors(frame: pd.DataFrame) -> pd.Series:
    """|relative error| of each experiment's combined time over the baseline's, model against paper (the ratio
    that cancels a factor common to every experiment), per experiment but the baseline."""
    by = frame.set_index("experiment")
    base = by.index[(by["mode"] == "none") & ~by["sp"].astype(bool)][0]
    model = by["combined_ms"] / by.loc[base, "combined_ms"]
    paper = by["paper_combined_ms"] / by.loc[base, "paper_combined_ms"]
    return (model / paper - 1).abs().drop(base)


def core_attn_flop_only_ms(frame: pd.DataFrame) -> float:
    """ms that core attention's forward FLOPs (4bs²h/t, Appendix A: what selective recompute re-runs) take at
    the GEMM rate of the table's GPU preset (``Rates.of``): what a FLOP-only model charges for selective
    recompute. The model's sizes and t are its preset's. Input: a ``korthikanti-table4`` table."""
    from remat.formulas import korthikanti                      # imported here: the roofline imports torch
    from remat.models.presets import from_name
    from remat.timemodel.gpus import gpu
    from remat.timemodel.roofline import Rates

    row = frame.iloc[0]
    cfg = from_name(str(row["model"]))
    rates = Rates.of(gpu(str(row["gpu"])), cfg.tp, str(row.get("dtype", "bfloat16")))
    return 1e3 * korthikanti.core_attn_forward_flops(cfg.seq, cfg.micro_batch, cfg.hidden) / cfg.tp / rates.flops_per_s


def _full_recompute_bullet(by: pd.DataFrame) -> str:
    base, full = by.loc["baseline"], by.loc["full recompute"]
    fwd, bwd = float(base["forward_compute_ms"]), float(base["backward_compute_ms"])
    share = 100 * fwd / (fwd + bwd)
    over, paper = float(full["overhead_pct"]), float(full["paper_overhead_pct"])
    more = over > share
    vs = "more than" if more else "less than" if over < share else "as much as"
    exposed, base_ms = float(full["recompute_exposed_comm_ms"]), float(base["combined_ms"])
    hidden, total = float(base["backward_exposed_comm_ms"]), float(base["backward_comm_ms"])
    hide = ("hide entirely behind the weight-gradient GEMMs" if hidden == 0 else
            f"hide behind the weight-gradient GEMMs for all but {hidden:.2f} ms of {total:.2f}")
    comm = (f"with the forward's two all-reduces ({exposed:.2f} ms, {100 * exposed / base_ms:.1f}% of the baseline "
            f"layer) exposed, while in the baseline backward the all-reduces {hide}")
    paper_text = (f" The paper's text beside paper Table 4 gives the same reason for its measured {paper:.0f}% "
                  f"instead of a third (one forward over a forward and a backward twice as long)."
                  if more and paper > 100 * FORWARD_SHARE_BACKWARD_TWICE else "")
    return (f"**Full recompute costs {over:.1f}%, {vs} the {share:.0f}% its GEMMs alone would add.** Backward's "
            f"GEMMs take {bwd / fwd:.1f} times forward's, so re-running the forward's GEMMs adds {share:.0f}% of the "
            f"layer's GEMM time; {'but ' if more else ''}the recompute is a whole forward, "
            f"{float(full['recompute_ms']):.2f} ms, {comm}.{paper_text}")


def _selective_bullet(by: pd.DataFrame, flop_only_ms: float) -> str:
    sel = by.loc["selective recompute"]
    total, memory, compute = (float(sel[c]) for c in ("recompute_ms", "recompute_memory_ms", "recompute_compute_ms"))
    share = memory / total if total else 0.0
    all_memory = total > 0 and compute < MS_PRINTED and abs(memory - total) < MS_PRINTED
    bound = ("memory-bound" if all_memory else
             "mostly memory-bound" if share > MEMORY_BOUND_SHARE else "mostly compute-bound")
    where = ("all of it sits on the bandwidth roof — the elementwise ops and the two matmuls too, whose inner "
             "dimension ($d = h/a$) is too small to reach the FLOP roof" if all_memory else
             f"{memory:.2f} ms of it sit on the bandwidth roof and {compute:.2f} ms on the FLOP roof")
    paper_more = float(sel["paper_backward_ms"] - by.loc["baseline", "paper_backward_ms"])
    return (f"**Selective recompute is {bound}.** Its {total:.2f} ms re-run QKᵀ, the fused mask + softmax, the "
            f"softmax dropout and ·V over the $(a/t) \\cdot s^2 b$ scores; {where}. Its $4bs^2h/t$ FLOPs alone "
            f"(Appendix A) take {flop_only_ms:.2f} ms at the same GEMM rate — what a FLOP-only model charges; the "
            f"paper measured {paper_more:.1f} ms more backward than its baseline.")


def _against_paper_bullet(frame: pd.DataFrame, by: pd.DataFrame) -> str:
    low = bool((table4_ratios(frame) < 1).to_numpy().all())
    why = ("The model has no kernel-launch gaps, no LayerNorm or GeLU kernel below its bandwidth roof and no GEMM "
           "below its tile-quantized rate." if low else
           "Missing kernel-launch gaps and slow kernels would make it low everywhere; where it is high, its rates "
           "are above what the GPU reached.")
    phase = (table4_ratios(frame) - 1).abs().to_numpy().ravel()
    worst, closest, farthest = float(_ratio_errors(frame).max()), float(phase.min()), float(phase.max())
    within = (f"every experiment's combined time over the baseline's is within {ceil_text(100 * worst, 1)}% of the "
              f"paper's")
    if worst < closest:   # the closest phase rounded down: a bound that stays true once shown
        ratios = (f"The ratios between experiments, which cancel a common factor, are what it predicts best: "
                  f"{within}, every phase at least {math.floor(round(1000 * closest, 9)) / 10:.1f}% off.")
    elif worst < farthest:
        ratios = (f"The ratios between experiments, which cancel a common factor, it predicts better than its "
                  f"worst phase: {within}, the worst phase {ceil_text(100 * farthest, 1)}% off.")
    else:
        ratios = (f"The ratios between experiments it predicts no better than the phases: {within}, every phase "
                  f"within {ceil_text(100 * farthest, 1)}%.")
    base = by.loc["baseline"]
    return (f"**Against the paper, {table4_bias_text(frame)}** ({float(base['combined_ms']):.1f} ms combined for "
            f"the baseline against {float(base['paper_combined_ms']):.1f} ms). {why} {ratios}")


def _sequence_parallel_bullet(by: pd.DataFrame) -> str:
    base, sp, spsel = by.loc["baseline"], by.loc["sequence parallel"], by.loc["selective + sequence parallel"]
    save = float(base["forward_ms"] - sp["forward_ms"])
    paper_save = float(base["paper_forward_ms"] - sp["paper_forward_ms"])
    vs = "more" if save > paper_save + MS_PRINTED else "less" if save < paper_save - MS_PRINTED else "as much"
    ours, paper = float(spsel["overhead_pct"]), float(spsel["paper_overhead_pct"])
    above = (f" — part of why the paper's selective + SP overhead ({paper:.0f}%) is above the model's ({ours:.1f}%)"
             if paper > ours else "")
    return (f"**Sequence parallelism** saves {save:.2f} ms of forward in the model, {vs} than the {paper_save:.1f} ms "
            f"the paper measured, and costs {float(sp['backward_exposed_comm_ms']):.2f} ms of exposed all-gather in "
            f"backward (the output gradient's, which Megatron does not overlap). The model prices a reduce-scatter "
            f"plus an all-gather exactly like one all-reduce (same bytes on the ring); the paper's text beside paper "
            f"Table 4 says they are slower than one all-reduce, which the model does not capture{above}.")


def table4_parts_text(frame: pd.DataFrame, flop_only_ms: float | None = None) -> str:
    """Where paper Table 4's predicted time goes, as four markdown bullets (one a line, each verdict from the
    data): full recompute against the share its GEMMs alone would add (and why: the forward's exposed
    all-reduces); selective recompute memory- or compute-bound (the matmuls named on the bandwidth roof only
    when no recompute time sits on the FLOP roof) beside the FLOP-only charge ``flop_only_ms`` (None:
    ``core_attn_flop_only_ms``); the bias against the paper and whether the ratios between experiments are
    predicted better than the phases; sequence parallelism's saving and exposed all-gather. Input: a
    ``korthikanti-table4`` table (experiments baseline, sequence parallel, full recompute, selective
    recompute, selective + sequence parallel)."""
    by = frame.set_index("experiment")
    flop_only_ms = core_attn_flop_only_ms(frame) if flop_only_ms is None else flop_only_ms
    bullets = (_full_recompute_bullet(by), _selective_bullet(by, flop_only_ms), _against_paper_bullet(frame, by),
               _sequence_parallel_bullet(by))
    return "\n".join(f"* {b}" for b in bullets)


def figure8_present_text(frame: pd.DataFrame) -> str:
    """SP + selective's recompute share across the models of a ``korthikanti-figure8`` table, as a sentence:
    "With SP + selective the recompute costs 6.0%, … of the baseline layer for a, … (paper: 7.0%, …): the share
    falls as h grows at fixed s — …" (the trend by each model's hidden size, ``falls_with``; the reason only for
    a falling share)."""
    from remat.models.presets import from_name

    present = frame[frame["variant"] == "present"].set_index("model")
    pcts = lambda col: join_words(f"{present.loc[m, col]:.1f}%" for m in present.index)
    trend = falls_with(present["recompute_pct"].to_dict(), {m: from_name(m).hidden for m in present.index})
    why = {"falls": "falls as h grows at fixed s — the attention work, quadratic in s, shrinks relative to the "
                    "GEMMs, quadratic in h",
           "rises": "rises as h grows at fixed s",
           "does not move one way": "does not move one way as h grows at fixed s"}[trend]
    return (f"With SP + selective the recompute costs {pcts('recompute_pct')} of the baseline layer for "
            f"{join_words(present.index)} (paper: {pcts('paper_recompute_pct')}): the share {why}.")
