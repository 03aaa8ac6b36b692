"""Korthikanti et al. 2022 Table 5 predicted by the planner's cost model: the iteration time of each Table 3
model under full recompute and under SP + selective, beside the paper's (remat.paper.PAPER_TABLE5_S).

    rows = table5_rows(gpu("a100-80gb"))
"""

from __future__ import annotations

import dataclasses

from remat.formulas import korthikanti
from remat.models.presets import from_name
from remat.planner.make import make_problem
from remat.planner.problem import plan_from_policies
from remat.paper import PAPER_TABLE5_S, TABLE3_MODELS

TABLE5_VARIANTS = {"full": (False, "full"), "present": (True, "selective")}
"""Table 5's columns (row prefix -> SP, mode): the baseline is full recompute without SP; "present work" is
SP + selective."""


def table5_rows(gpu, models=TABLE3_MODELS) -> list[dict]:
    """Paper Table 5 predicted: the iteration time of each Table 3 model (its p, m, t, b and global batch; no
    data parallelism) with every layer under full recompute (no SP) and under SP + selective, priced by the
    planner's cost model (``remat.planner.costs``: the roofline per layer × (N + (p − 1)/m) micro-batch
    slots of the first stage, + the LM head when p = 1), the ratio full / present (the paper's throughput
    gain + 1), and the model-FLOPs utilization (Eq. 7 FLOPs / (time × GPUs × peak)). Not modelled: the
    optimizer step, embedding, pipeline send/receive and the data loader — the predicted times are lower
    bounds; the ratio is what the paper's Table 5 is compared on."""
    rows = []
    for model in models:
        cfg = from_name(model)
        row = {"model": model, "gpu": gpu.name, "gpus": cfg.tp * cfg.pp, "global_batch": cfg.global_batch}
        overrides = {f.name: getattr(gpu, f.name) for f in dataclasses.fields(gpu) if f.name != "name"}
        for prefix, (sp, mode) in TABLE5_VARIANTS.items():
            problem = make_problem(cfg, gpu.name, overrides, sp=sp, policies=(mode,))
            row[f"{prefix}_s"] = plan_from_policies(problem, [mode] * len(problem.layers)).step_time_s
        flops = korthikanti.model_flops(cfg.global_batch, cfg.seq, cfg.hidden, cfg.layers, cfg.vocab)
        row.update(ratio=row["full_s"] / row["present_s"],
                   mfu_pct=100 * flops / (row["present_s"] * row["gpus"] * gpu.peak_flops))
        row["difference_s"] = row["full_s"] - row["present_s"]
        if model in PAPER_TABLE5_S:
            full, present, mfu, hfu = PAPER_TABLE5_S[model]
            row.update(paper_full_s=full, paper_present_s=present, paper_ratio=full / present,
                       paper_difference_s=full - present, paper_mfu_pct=mfu, paper_hfu_pct=hfu)
        rows.append(row)
    return rows
