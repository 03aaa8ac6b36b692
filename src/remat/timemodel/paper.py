"""Korthikanti et al. 2022's timing results (v1 of arXiv 2205.05198; A100 80GB, Selene) and the time model's
predictions beside them: Table 4 (one 22B layer), Figure 8 (% of the baseline layer time, four models),
Table 5 (iteration time, full recompute vs SP + selective; predicted by the planner's cost model in
remat.planner.table5).

    rows = table4_rows(gpu("a100-80gb"))          # predicted and paper ms per phase, per experiment
    rows = figure8_rows(gpu("a100-80gb"))         # predicted and paper % per model and variant

The paper's numbers (remat.paper) are what the model is compared against — no constant of the model is fitted to
them (``remat.timemodel.gpus``: datasheet rates × achievable fractions with their own sources). Figure 8's
values are read off the bars (about ±0.5 percentage points).
"""

from __future__ import annotations

from remat.models.presets import from_name
from remat.paper import PAPER_FIGURE8_PERCENT, PAPER_TABLE4_MS, PAPER_TABLE4_OVERHEAD, TABLE3_MODELS
from remat.timemodel.layer import predict

EXPERIMENTS = {  # Table 4's rows: (sequence parallel, recompute mode)
    "baseline": (False, "none"),
    "sequence parallel": (True, "none"),
    "full recompute": (False, "full"),
    "selective recompute": (False, "selective"),
    "selective + sequence parallel": (True, "selective"),
}

FIGURE8_VARIANTS = {"full": (False, "full"), "present": (True, "selective")}
"""Figure 8's bars: "full" = full recompute (no SP), "present" = SP + selective ("present work")."""


def _times(model: str, gpu, sp: bool, mode: str, rates=None):
    cfg = from_name(model)
    return predict(cfg, gpu, mode, cfg.tp, sp, rates)


def table4_rows(gpu, model: str = "gpt-22b", rates=None) -> list[dict]:
    """Paper Table 4 predicted: per experiment, forward / backward / combined ms of one layer on one TP
    rank (backward includes the recompute, as the paper's profile does), the overhead % of the baseline,
    the parts (compute-bound, memory-bound, exposed and total collective ms per phase) and, for the 22B
    layer, the paper's values beside them (``paper_*``)."""
    rows, base = [], None
    for name, (sp, mode) in EXPERIMENTS.items():
        lt = _times(model, gpu, sp, mode, rates)
        base = lt.combined_s if base is None else base
        row = {"model": model, "experiment": name, "sp": sp, "mode": mode, "gpu": gpu.name, **lt.to_ms(),
               "overhead_pct": 100 * (lt.combined_s / base - 1)}
        if model == "gpt-22b":
            fwd, bwd, comb = PAPER_TABLE4_MS[name]
            row.update(paper_forward_ms=fwd, paper_backward_ms=bwd, paper_combined_ms=comb,
                       paper_overhead_pct=PAPER_TABLE4_OVERHEAD[name])
        rows.append(row)
    return rows


def figure8_rows(gpu, models=TABLE3_MODELS, rates=None) -> list[dict]:
    """Paper Figure 8 predicted: per model and variant, forward, forward + backward (gradient work), total
    (with the recompute) and the recompute share, each in % of the baseline layer time (no recompute, no SP:
    forward + backward = 100 %), with the paper's bars (``paper_*``)."""
    rows = []
    for model in models:
        base = _times(model, gpu, False, "none", rates).combined_s
        for variant, (sp, mode) in FIGURE8_VARIANTS.items():
            lt = _times(model, gpu, sp, mode, rates)
            pct = lambda seconds: 100 * seconds / base
            row = {"model": model, "variant": variant, "sp": sp, "mode": mode, "gpu": gpu.name,
                   "baseline_ms": 1e3 * base, "forward_pct": pct(lt.forward_s),
                   "forward_backward_pct": pct(lt.forward_s + lt.backward.total_s),
                   "total_pct": pct(lt.combined_s), "recompute_pct": pct(lt.recompute_s)}
            paper = PAPER_FIGURE8_PERCENT.get((model, variant))
            if paper:
                row.update(zip(("paper_forward_pct", "paper_forward_backward_pct", "paper_total_pct",
                                "paper_recompute_pct"), paper))
            rows.append(row)
    return rows
