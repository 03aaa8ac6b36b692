"""``remat plan --schedule``: per-rank plans (``remat.planner.ranks.PipelinePlan``) as JSON and as Markdown.

JSON keys: title, schedule, pp, stages_per_rank, micro_batches, budget_bytes, step_time_s, uniform_step_time_s,
gain (uniform step / per-rank step − 1), ranks and uniform [{rank, stages, policies, python_list, peak_bytes,
fixed_bytes, seconds_per_micro_batch, most_held}], apply (per format: what it can express and the plan to write),
not_counted. Markdown: the same, a row per rank.
"""

from __future__ import annotations

from collections import Counter

from remat.planner.ranks import PipelinePlan, RankPlan
from remat.planner.render import python_list, runtime_spec
from remat.units import format_bytes

NOT_COUNTED = ("what a split backward's weight-gradient step keeps besides the activations (the output "
               "gradients of the weight ops)", "the send and receive buffers",
               "a zero-bubble schedule's smaller bubble (step seconds use the 1F1B / interleaved bubble)")


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
            "uniform_step_time_s": plan.uniform_step_time_s, "gain": gain(plan),
            "ranks": [_rank_json(r) for r in plan.ranks], "uniform": [_rank_json(r) for r in plan.uniform],
            "apply": apply(plan), "not_counted": list(NOT_COUNTED)}


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
    lines += ["## How to apply", ""] + [f"- {fmt}: {v['expresses']}" + (
        "" if fmt == "remat" else f"; write {v['write']}" + ("" if v["exact"] else " (the uniform plan: nearest "
                                                                                     "it can express)"))
        for fmt, v in how.items()]
    lines += ["", "Per rank, remat.policies specs: " + "; ".join(f"rank {r}: {s}" for r, s in
                                                                 enumerate(how["remat"]["per_rank"])), "",
              "Not counted yet: " + "; ".join(NOT_COUNTED) + "."]
    return "\n".join(lines) + "\n"
