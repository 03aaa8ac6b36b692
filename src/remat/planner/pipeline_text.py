"""``remat plan --schedule``: per-rank plans (``remat.planner.ranks.PipelinePlan``) as JSON, as Markdown, and in a
trainer's format (``trainer_text``: one setting for every stage, the exact per-rank plans in its header).

JSON keys: title, schedule, pp, stages_per_rank, micro_batches, budget_bytes, step_time_s, uniform_step_time_s,
gain (uniform step / per-rank step − 1; both null when no single plan fits every rank), ranks and uniform [{rank,
stages, policies, python_list, peak_bytes, fixed_bytes, seconds_per_micro_batch, most_held}], apply (per format:
what it can express and the plan to write), not_counted. Markdown: the same, a row per rank.
"""

from __future__ import annotations

import dataclasses
from collections import Counter

from remat.errors import InfeasibleError, UsageError
from remat.models.presets import ModelConfig
from remat.planner.layer_costs import Settings
from remat.planner.ranks import PipelinePlan, RankPlan, evaluate, plan_pipeline, setup, step_seconds
from remat.planner.render import python_list, runtime_spec
from remat.planner.trainers import TOOLS, family, render_config, sac_candidate, sac_policies
from remat.units import format_bytes

NOT_COUNTED = ("the time of the sends between stages (the step prices them at none)",
               "the embedding's, the head's and the loss's time in the step",
               "a GPT layer's backward workspace (the workspace reserve's; a measured layer's is counted)")


def title(plan: PipelinePlan, model: str, gpu: str) -> str:
    return (f"Per-rank plan: {model} on {gpu}, {plan.schedule}, p = {plan.pp}, {plan.stages_per_rank} stage(s) per "
            f"rank, N = {plan.micro_batches} micro-batches per step, budget {format_bytes(plan.budget_bytes)} "
            "per GPU")


def gain(plan: PipelinePlan) -> float:
    """Uniform step seconds / per-rank step seconds − 1 (≥ 0 by construction; NaN when no uniform plan fits)."""
    return plan.uniform_step_time_s / plan.step_time_s - 1


def apply(plan: PipelinePlan) -> dict:
    """Per format: what it can express of the per-rank plans, and the plan to write in it."""
    exact = [runtime_spec(r.policies) for r in plan.ranks]
    same = len(set(exact)) == 1
    uniform = runtime_spec(plan.uniform[0].policies) if plan.uniform else None
    return {"remat": {"expresses": "a plan per rank (each rank applies its own, remat.auto.apply / "
                                   "remat.policies.apply_plan on its stages' layers)", "per_rank": exact},
            "megatron": {"expresses": "one recompute setting for every pipeline stage (--recompute-granularity, "
                                      "--recompute-method, --recompute-num-layers)",
                         "write": exact[0] if same else uniform, "exact": same},
            "torchtitan": {"expresses": "one activation-checkpoint config for every stage ([activation_checkpoint] "
                                        "mode)", "write": exact[0] if same else uniform, "exact": same}}


def _rank_json(r: RankPlan) -> dict:
    return {"rank": r.rank, "stages": list(r.stages), "policies": list(r.policies),
            "python_list": python_list(r.policies), "peak_bytes": r.peak_bytes, "fixed_bytes": r.fixed_bytes,
            "seconds_per_micro_batch": r.seconds_per_micro_batch, "most_held": r.most_held}


def to_json(plan: PipelinePlan, model: str, gpu: str) -> dict:
    return {"title": title(plan, model, gpu), "schedule": plan.schedule, "pp": plan.pp,
            "stages_per_rank": plan.stages_per_rank, "micro_batches": plan.micro_batches,
            "budget_bytes": plan.budget_bytes, "step_time_s": plan.step_time_s,
            "uniform_step_time_s": plan.uniform_step_time_s if plan.uniform else None,
            "gain": gain(plan) if plan.uniform else None,
            "ranks": [_rank_json(r) for r in plan.ranks], "uniform": [_rank_json(r) for r in plan.uniform],
            "apply": apply(plan), "not_counted": list(NOT_COUNTED)}


FORMAT_OF = {"megatron": "nemo", "torchtitan": "torchtitan"}
"""The --format that writes each one-setting trainer's nearest configuration."""


def _write(name: str, how: dict) -> str:
    """What a one-setting format should write (``apply``), as the end of its Markdown line: the per-rank plan where
    every rank has the same, else the uniform plan (one choice per layer, the same on every stage), which such a
    trainer may still not express layer by layer: its own format (``FORMAT_OF``) writes the nearest it can."""
    if "write" not in how:
        return ""
    if how["write"] is None:
        return "; no single setting fits every rank: only per-rank plans (remat) run within the budget"
    if how["exact"]:
        return f"; write {how['write']}"
    return (f"; the uniform plan is {how['write']} (one choice per layer, the same on every stage); "
            f"`--format {FORMAT_OF[name]}` writes the nearest setting this trainer can express")


def _counts(policies) -> str:
    return ", ".join(f"{p} {n}" for p, n in Counter(policies).items())


def _rows(ranks) -> list[str]:
    return [f"| {r.rank} | {', '.join(map(str, r.stages))} | {r.most_held} | {_counts(r.policies)} | "
            f"{format_bytes(r.peak_bytes)} | {format_bytes(r.fixed_bytes)} | {r.seconds_per_micro_batch:.4g} |"
            for r in ranks]


def to_markdown(plan: PipelinePlan, model: str, gpu: str) -> str:
    head = ["| rank | stages | most held (stage micro-batches) | layers per policy | predicted peak | "
            "of which model state + reserve | seconds per micro-batch |", "|---|---|---|---|---|---|---|"]
    how = apply(plan)
    lines = [f"# {title(plan, model, gpu)}", "", "## Per-rank plans (each rank its own)", "", *head,
             *_rows(plan.ranks), "", f"Step: {plan.step_time_s:.4g} s predicted.", ""]
    if plan.uniform:
        lines += ["## One plan for every rank (what one setting for all stages can express)", "", *head,
                  *_rows(plan.uniform), "", f"Step: {plan.uniform_step_time_s:.4g} s predicted; the per-rank plans "
                                            f"are {100 * gain(plan):.2f} % faster.", ""]
    else:
        lines += ["No single plan fits every rank: only per-rank plans run within the budget.", ""]
    lines += ["## How to apply", ""] + [f"- {fmt}: {v['expresses']}" + _write(fmt, v) for fmt, v in how.items()]
    lines += ["", "Per rank, remat.policies specs: " + "; ".join(f"rank {r}: {s}" for r, s in
                                                                 enumerate(how["remat"]["per_rank"])), "",
              "Not counted yet: " + "; ".join(NOT_COUNTED) + "."]
    return "\n".join(lines) + "\n"


def trainer_text(cfg: ModelConfig, st: Settings, plan: PipelinePlan, fmt: str, priced=None) -> str:
    """The fastest configuration of trainer format ``fmt`` (``remat.planner.trainers``; one setting for every stage)
    whose peak fits every rank of ``plan``'s schedule (else the one with the least peak), as the tool reads it; its
    header says whether it runs the per-rank plans exactly and, where not, names them (for remat.auto.apply).
    ``sac`` runs the uniform plan over the policies it runs. Raises UsageError("--format") when no configuration
    uses only the policies offered."""
    su = setup(cfg, st, plan.schedule, priced=priced)
    op_level = cfg.arch != "gpt"
    cands = [_sac_uniform(cfg, st, plan, op_level, priced)] if fmt == "sac" else family(fmt, su.per_stage * su.k, su.p,
                                                                                   op_level)
    scored = [(c, ranks, step_seconds(su, ranks)) for c in cands
              if (ranks := evaluate(su, c.policies)) is not None]
    if not scored:
        raise UsageError("--format", f"no {fmt} configuration uses only the policies offered (--policies)")
    fits = [x for x in scored if all(r.peak_bytes <= plan.budget_bytes for r in x[1])]
    cand, ranks, step = min(fits, key=lambda x: x[2]) if fits else \
        min(scored, key=lambda x: max(r.peak_bytes for r in x[1]))
    exact = all(sorted(r.policies) == sorted(o.policies) for r, o in zip(ranks, plan.ranks))
    out = {"format": fmt, "tool": TOOLS[fmt], "exact": exact, "config": cand.config,
           "plan": {"policies": list(cand.policies), "peak_bytes": max(r.peak_bytes for r in ranks),
                    "step_time_s": step, "feasible": bool(fits)},
           "optimum": {"policies": list(plan.ranks[0].policies), "peak_bytes": max(r.peak_bytes for r in plan.ranks),
                       "step_time_s": plan.step_time_s, "feasible": True},
           "per_block": ["; ".join(f"rank {r.rank}: {runtime_spec(r.policies)}" for r in plan.ranks)]}
    return render_config(out)


def _sac_uniform(cfg: ModelConfig, st: Settings, plan: PipelinePlan, op_level: bool, priced=None):
    """The sac module's candidate: the uniform plan over the policies it runs (``trainers.sac_policies``), priced as
    ``plan`` was (``priced``: a transformers model's measured block)."""
    allowed = tuple(q for q in st.policies if q in sac_policies(op_level))
    try:
        shared = plan_pipeline(cfg, dataclasses.replace(st, policies=allowed), plan.schedule, priced=priced)
    except InfeasibleError:
        return sac_candidate(("full",) * len(plan.ranks[0].policies), op_level)
    return sac_candidate((shared.uniform or shared.ranks)[0].policies, op_level)
