"""Time-model tables -> display tables and findings (GROUPS: korthikanti2022's): paper Table 4, Figure 8 and Table 5
beside the roofline (``korthikanti.table4/figure8/table5``), and the model against this machine (``sweeps.time-model``).
"""

from __future__ import annotations

from dataclasses import replace

import pandas as pd

from remat.analysis import catalog
from remat.analysis.findings import (REPRODUCED, Finding, holds, judge, load, not_measured, within_abs,
                                     within_abs_or_rel)
from remat.analysis.tolerances import (KORTHIKANTI_CUT_PP, KORTHIKANTI_TIME_FLOOR_PP, KORTHIKANTI_TIME_PP,
                                      KORTHIKANTI_TIME_REL, MINOR)
from remat.formulas import korthikanti
from remat.models.presets import from_name
from remat.paper import KORTHIKANTI, PAPER, PAPER_FIGURE8_PERCENT, PAPER_TABLE4_OVERHEAD, PaperValue
from remat.timemodel.gpus import gpu as gpu_preset
from remat.units import MINUS, ceil_text, span_text

_PHASES = ("forward", "backward", "combined")


def _pair(model, paper, digits: int = 2) -> pd.Series:
    """"model / paper" strings, the model's value rounded to ``digits``."""
    return model.round(digits).astype(str) + " / " + paper.astype(str)


def table4_display(frame: pd.DataFrame) -> pd.DataFrame:
    """Per experiment: each phase's ms and the overhead %, "model / paper Table 4", and the largest error (%)."""
    errors = pd.concat([(frame[f"{p}_ms"] / frame[f"paper_{p}_ms"] - 1) for p in _PHASES], axis=1)
    worst = errors.abs().idxmax(axis=1)
    return pd.DataFrame({
        "experiment": frame["experiment"],
        **{f"{p} ms (model / paper)": _pair(frame[f"{p}_ms"], frame[f"paper_{p}_ms"]) for p in _PHASES},
        "largest error %": [round(100 * errors.loc[i, c], 1) for i, c in worst.items()],
        "overhead % (model / paper)": _pair(frame["overhead_pct"], frame["paper_overhead_pct"], 1)})


def table4_parts(frame: pd.DataFrame) -> pd.DataFrame:
    """Per experiment and phase, ms: compute-bound + memory-bound kernels + collectives (exposed, in backward)."""
    ms = lambda phase, *parts: frame[[f"{phase}_{p}_ms" for p in parts]].round(2).astype(str).agg(" + ".join, axis=1)
    return pd.DataFrame({
        "experiment": frame["experiment"],
        "forward: compute + memory + comm": ms("forward", "compute", "memory", "exposed_comm"),
        "backward: compute + memory + comm exposed (of)": ms("backward", "compute", "memory", "exposed_comm")
        + " (" + ms("backward", "comm") + ")",
        "recompute: compute + memory + comm": ms("recompute", "compute", "memory", "exposed_comm")})


def figure8_display(frame: pd.DataFrame) -> pd.DataFrame:
    """Per model and variant: % of the baseline layer time, "model / paper Figure 8", and the differences (pp)."""
    parts = {"forward": "forward", "fwd + bwd": "forward_backward", "total": "total", "recompute": "recompute"}
    return pd.DataFrame({"model": frame["model"], "variant": frame["variant"],
                         **{f"{n} % (model / paper)": _pair(frame[f"{c}_pct"], frame[f"paper_{c}_pct"], 1)
                            for n, c in parts.items()},
                         **{f"{c} Δ pp": (frame[f"{c}_pct"] - frame[f"paper_{c}_pct"]).round(1)
                            for c in ("total", "recompute")}})


def table5_display(frame: pd.DataFrame) -> pd.DataFrame:
    """Per model: predicted iteration seconds, their ratio and difference, and the MFU, "model / paper Table 5"."""
    return pd.DataFrame({
        "model": frame["model"], "GPUs": frame["gpus"],
        "full s (model / paper)": _pair(frame["full_s"], frame["paper_full_s"]),
        "SP+selective s (model / paper)": _pair(frame["present_s"], frame["paper_present_s"]),
        "ratio (model / paper)": _pair(frame["ratio"], frame["paper_ratio"].round(3), 3),
        "difference s (model / paper)": _pair(frame["difference_s"], frame["paper_difference_s"].round(2)),
        "MFU % (model / paper)": _pair(frame["mfu_pct"], frame["paper_mfu_pct"], 1)})


def validation_display(frame: pd.DataFrame) -> pd.DataFrame:
    """``sweeps.time-model``: per size, mode and phase, predicted against measured (IQR where recorded)."""
    ms, pct = (lambda col: (1e3 * frame[col]).round(2)), (lambda col: (100 * frame[col]).round(1))
    return pd.DataFrame({
        "h": frame["hidden"], "s": frame["seq"], "b": frame["micro_batch"], "mode": frame["mode"],
        "phase": frame["phase"], "pred. ms": ms("predicted_s"), "meas. ms": ms("measured_s"),
        "IQR ms": ms("measured_iqr_s"), "error %": pct("error"), "ovh. % pred.": pct("predicted_overhead"),
        "ovh. % meas.": pct("measured_overhead")}).fillna("")


# --- findings: paper Table 4 and Figure 8 predicted, the abstract's "over 90 %" --------------------------------

SECTION = "korthikanti2022.html#sec-time"
_EXPERIMENTS = {"sequence parallel": "table4.sp", "full recompute": "table4.full",
                "selective recompute": "table4.selective", "selective + sequence parallel": "table4.selective_sp"}
CLAIMS = {  # id -> (claim, link when the index's scorecard lists it)
    "table4": ("One 22B layer: time overhead (predicted)", SECTION),
    **{id: (f"{e.capitalize()}: time overhead, one 22B layer (predicted)", "") for e, id in _EXPERIMENTS.items()},
    "table4.phases": ("Largest |relative error| of a predicted phase against paper Table 4 (not judged)", ""),
    "table4.bias": ("Predicted phases as a percent of the paper's times", ""),
    "table4.ratios": ("Largest |relative error| of an experiment's combined time over the baseline's", ""),
    "table4.full_exposed": ("Full recompute: the forward's all-reduces, exposed in the recompute", ""),
    "table4.selective_recompute": ("Selective recompute: recompute time, of it on the bandwidth roof", ""),
    "table4.flop_only": ("Core attention's forward FLOPs (4bs²h/t) alone at the GEMM rate", ""),
    "figure8": ("Recompute share and total of the baseline layer time, four models", SECTION),
    "figure8.recompute": ("Figure 8: recompute share of every bar (predicted)", ""),
    "over-ninety": ("Recompute time overhead cut by SP + selective", SECTION),
    "time.rates": ("The GPU preset's rates the roofline prices with", ""),
}


def claimed(claims: dict, id: str, value: float, paper: PaperValue | None = None, rule=None, **kw) -> Finding:
    """``judge`` with the claim (and a scorecard claim's paper and link) from ``claims``."""
    claim, link = claims[id]
    extra = dict(scorecard=KORTHIKANTI, link=link) if link else {}
    return judge(id, claim, value, paper, rule, **extra, **kw)


def _printed(value: float, source: str, text: str | None = None) -> PaperValue:
    return PaperValue(float(value), source, text or f"{value:g} %".replace("-", MINUS))


TABLE4_RULE = within_abs_or_rel(KORTHIKANTI_TIME_FLOOR_PP, KORTHIKANTI_TIME_REL, KORTHIKANTI_TIME_PP)
"""Table 4's overheads (−3 … 39 %), predicted and measured (remat.analysis.sweeps)."""


def _table4_findings(t4: pd.DataFrame) -> list[Finding]:
    by, rule = t4.set_index("experiment"), TABLE4_RULE
    ours = by["overhead_pct"]
    f = [claimed(CLAIMS, id, ours[e], _printed(PAPER_TABLE4_OVERHEAD[e], "Table 4"), rule, where="predicted",
                 text=f"{ours[e]:.1f} %".replace("-", MINUS)) for e, id in _EXPERIMENTS.items()]
    sp = "; the model prices reduce-scatter + all-gather like one all-reduce, which the paper measured slower"
    missed = [f"{e}: {x.reason}" for e, x in zip(_EXPERIMENTS, f) if x.status != REPRODUCED]
    sp = sp if any(x.id.endswith("sp") and x.status != REPRODUCED for x in f) else ""
    paper = PaperValue(float("nan"), "Table 4", ", ".join(
        f"{e} {PAPER_TABLE4_OVERHEAD[e]:g} %".replace("-", MINUS) for e in _EXPERIMENTS))
    f.append(claimed(CLAIMS, "table4", 1 - len(missed) / len(f), paper, holds(f"each experiment {rule.text}",
                     rule.why), where="predicted", text="; ".join(f"{e} {x.ours}" for e, x in zip(_EXPERIMENTS, f)),
                     reason="; ".join(missed) + sp))
    return f + _table4_parts(t4, by)


def _table4_parts(t4: pd.DataFrame, by: pd.DataFrame) -> list[Finding]:
    ratio = pd.concat([t4[f"{p}_ms"] / t4[f"paper_{p}_ms"] for p in _PHASES])
    base, full, sel = by.loc["baseline"], by.loc["full recompute"], by.loc["selective recompute"]
    rel = (by["combined_ms"] / base["combined_ms"]) / (by["paper_combined_ms"] / base["paper_combined_ms"]) - 1
    cfg, preset = from_name(str(base["model"])), gpu_preset(str(base["gpu"]))
    flop_only = (1e3 * korthikanti.core_attn_forward_flops(cfg.seq, cfg.micro_batch, cfg.hidden) / cfg.tp
                 / (preset.peak_for(str(base.get("dtype", "bfloat16"))) * preset.achievable))
    exposed = full["recompute_exposed_comm_ms"]
    values = {
        "table4.phases": (100 * (ratio - 1).abs().max(), f"{ceil_text(100 * (ratio - 1).abs().max(), 1)} %"),
        "table4.bias": (100 * ratio.min(), span_text(100 * ratio, 0, " %")),
        "table4.ratios": (100 * rel.abs().max(), f"{ceil_text(100 * rel.abs().max(), 1)} %"),
        "table4.full_exposed": (exposed, f"{exposed:.2f} ms, {100 * exposed / base['combined_ms']:.1f} % of the "
                                         "baseline layer"),
        "table4.selective_recompute": (sel["recompute_ms"], f"{sel['recompute_ms']:.2f} ms, "
                                       f"{sel['recompute_memory_ms']:.2f} ms of it on the bandwidth roof"),
        "table4.flop_only": (flop_only, f"{flop_only:.2f} ms")}
    return [claimed(CLAIMS, id, v, where="predicted", text=t) for id, (v, t) in values.items()]


def _figure8_findings(f8: pd.DataFrame) -> list[Finding]:
    rule, present = within_abs(KORTHIKANTI_TIME_PP, MINOR), f8[f8["variant"] == "present"]
    gap = (f8["recompute_pct"] - f8["paper_recompute_pct"]).abs()
    r = f8.loc[gap.idxmax()]
    share = claimed(CLAIMS, "figure8.recompute", r["recompute_pct"],
                    _printed(r["paper_recompute_pct"], "Figure 8"), rule, where="predicted",
                    text=f"within {ceil_text(gap.max(), 1)} pp of every bar (largest: {r['model']}, {r['variant']})")
    t = f8.loc[(f8["total_pct"] - f8["paper_total_pct"]).abs().idxmax()]
    below = list(present.loc[present["total_pct"] < 100, "model"])
    shares = {k: span_text([v[3] for (_, kk), v in PAPER_FIGURE8_PERCENT.items() if kk == k], 1, " %")
              for k in ("full", "present")}
    paper = replace(_printed(t["paper_total_pct"], "Figure 8"),
                    text=f"recompute share: full {shares['full']}, present {shares['present']}; "
                         f"SP + selective total {span_text(present['paper_total_pct'], 1, ' %')}")
    why = (f"the model puts SP + selective at {span_text(present['total_pct'], 1, ' %')} of the baseline "
           f"(below 100 %, faster than no recompute, for {', '.join(below) or 'no model'}) where the paper has "
           f"{span_text(present['paper_total_pct'], 1, ' %')} (“just 2 % vs 36 %”): {t['model']} {t['variant']} "
           f"{abs(t['total_pct'] - t['paper_total_pct']):.1f} pp off; the recompute share alone is within "
           f"{ceil_text(gap.max(), 1)} pp")
    total = claimed(CLAIMS, "figure8", t["total_pct"], paper, rule, where="predicted", reason=why,
                    text=f"recompute share within {ceil_text(gap.max(), 1)} pp of every bar; SP + selective total "
                         f"{span_text(present['total_pct'], 1, ' %')}")
    return [share, total]


def _over_ninety(f8: pd.DataFrame) -> Finding:
    by = f8.set_index(["model", "variant"])
    models = list(dict.fromkeys(f8["model"]))
    cut, paper_cut = ({m: 100 * (1 - by.loc[(m, "present"), c] / by.loc[(m, "full"), c]) for m in models}
                      for c in ("recompute_pct", "paper_recompute_pct"))
    worst = max(models, key=lambda m: abs(cut[m] - paper_cut[m]))   # two-sided: against the paper's own bars
    abstract = PAPER["korthikanti.recompute_time_cut"]
    paper = PaperValue(paper_cut[worst], f"{abstract.source}; Figure 8's bars",
                       f"{abstract.text} ({abstract.source}); "
                       + ", ".join(f"{m} {v:.0f} %" for m, v in paper_cut.items()) + " from Figure 8's bars")
    return claimed(CLAIMS, "over-ninety", cut[worst], paper, within_abs(KORTHIKANTI_CUT_PP, MINOR), where="predicted",
                   text=", ".join(f"{m} {v:.0f} %" for m, v in cut.items()))


def _rates(t4: pd.DataFrame) -> Finding:
    g = gpu_preset(str(t4["gpu"].iloc[0]))
    text = (f"{g.peak_flops * g.achievable / 1e12:.0f} TFLOP/s for GEMMs ({g.achievable:.0%} of the "
            f"{g.peak_flops / 1e12:.0f} TFLOP/s dense peak), {g.memory_bandwidth * g.memory_efficiency / 1e9:,.0f} "
            f"GB/s of HBM ({g.memory_efficiency:.0%} of {g.memory_bandwidth / 1e9:,.0f}), "
            f"{g.nvlink_bytes_per_s * g.nvlink_efficiency / 1e9:.0f} GB/s of NVLink bus bandwidth "
            f"({g.nvlink_efficiency:.0%} of {g.nvlink_bytes_per_s / 1e9:.0f} per direction) — {g.full_name}")
    return claimed(CLAIMS, "time.rates", g.peak_flops * g.achievable, where="predicted", text=text)


GROUPS = (  # (finding-id prefixes, the tables they come from, findings from those tables): korthikanti2022's
    (("table4", "time"), ("korthikanti.table4",), lambda t4: _table4_findings(t4) + [_rates(t4)]),
    (("figure8", "over-ninety"), ("korthikanti.figure8",), lambda f8: _figure8_findings(f8) + [_over_ninety(f8)]))


def model_checks(root=".") -> list[Finding]:
    """The roofline's direct checks here: sweeps' worst error, offload's measured ÷ model (full, selective)."""
    checks = {"sweeps": ["time-model.error."], "offload": ["breakeven.model_full", "breakeven.model_selective"]}
    return [f for report, ids in checks.items() for f in catalog.unless_missing(
        lambda: [next(f for f in load(report, root).values() if f.id.startswith(i)) for i in ids],
        lambda missing: [not_measured(i.rstrip("."), f"The time model's check in {report}", missing) for i in ids])]
