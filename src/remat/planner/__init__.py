"""The exact per-layer planner: none / selective / full / offload per layer, least predicted step time
under a memory budget.

    from remat.models.presets import from_name
    from remat.planner import make_problem, plan_model, solve
    problem = make_problem(from_name("gpt3-175b"), gpu_name="a100-80gb", sp=True)
    plan = solve(problem)                      # raises InfeasibleError(msg, minimum_bytes) if nothing fits
    print(plan_model(from_name("gpt3-175b"), fmt="md", gpu_name="a100-80gb", sp=True))   # solve + baselines, as text

Modules: ``problem`` (the instance as data, ``evaluate``), ``solve`` (exact: cap branch-and-bound over an
MCKP solved by ``mckp``), ``costs`` (Korthikanti formulas -> per-layer options; ``layer_costs``, ``measured``),
``make`` (``make_problem``: flags -> problem), ``gpus`` (presets),
``calibrate`` (measured per-layer times), ``baselines`` (none, full, √L, Megatron uniform/block/selective,
torch's sac_milp), ``render`` (JSON / Markdown).
"""

from __future__ import annotations

import dataclasses
import json

from remat.errors import InfeasibleError, UsageError
from remat.models.hf_config import CONTEXT_KEYS
from remat.models.presets import ModelConfig
from remat.planner import megatron, render, trainers
from remat.planner.baselines import SAC_TIME_LIMIT_S
from remat.planner.baselines import baselines as run_baselines
from remat.planner.costs import PIPELINE_MICRO_BATCHES, default_global_batch
from remat.planner.make import make_problem
from remat.planner.problem import POLICIES, Layer, Option, Plan, Problem, evaluate, plan_from_policies
from remat.planner.solve import minimum_budget, solve
from remat.planner.suggest import suggest

__all__ = ["POLICIES", "Layer", "Option", "Plan", "Problem", "evaluate", "plan_from_policies", "solve",
           "minimum_budget", "make_problem", "plan_model", "render_plan", "shape_sources", "solve_model"]


def shape_sources(cfg: ModelConfig, given=()) -> dict[str, str]:
    """Where s, b and the micro-batches per step N come from, for the first line of a plan: {"s": ..., "b": ...,
    "N": ...}. ``given``: the fields the user set ("seq", "micro_batch", "global_batch"). A config.json has no
    training shape: s is its context length (``hf_config.CONTEXT_KEYS``, e.g. 32768 for Mistral), b is 1 and,
    pipelined, N = 4·p (``costs.default_global_batch``) unless set."""
    preset = cfg.source == "preset"
    return {"s": "--seq" if "seq" in given else "the preset's" if preset else
            f"config.json {CONTEXT_KEYS[cfg.arch]}, the context length; set --seq to your training length",
            "b": "--micro-batch" if "micro_batch" in given else "the preset's" if preset else
            "default; set --micro-batch",
            "N": "--global-batch" if "global_batch" in given else "the preset's" if preset else
            f"default {PIPELINE_MICRO_BATCHES}·p; set --global-batch"}


def plan_model(cfg: ModelConfig, baselines: bool = True, sac_time_limit_s: float = SAC_TIME_LIMIT_S,
               fmt: str = "json", given=(), **problem_args) -> str:
    """Solve and render: the plan of ``cfg`` as JSON text (fmt "json"), Markdown (fmt "md") or a trainer's config
    (fmt in ``trainers.FORMATS``, remat.planner.trainers); the first line
    (Markdown) or first key "title" (JSON) names the model, the GPU and the s and b used (``shape_sources``
    with ``given``), and, pipelined, the micro-batches per step and how many the first stage holds in flight. A
    pipelined config.json without ``global_batch`` in ``given`` plans N = 4·p micro-batches per step.

    ``problem_args`` go to ``make_problem``. Raises InfeasibleError (exit 3 in the CLI) with the smallest
    budget that works, the s and b used and what would make it fit (``remat.planner.suggest``), UsageError for
    bad input."""
    return render_plan(*solve_model(cfg, baselines, sac_time_limit_s, given, **problem_args), fmt)


def solve_model(cfg: ModelConfig, baselines: bool = True, sac_time_limit_s: float = SAC_TIME_LIMIT_S, given=(),
                **problem_args) -> tuple[Problem, Plan, dict]:
    """``plan_model`` before it renders: (problem, plan, baselines), for ``render_plan`` in as many formats as
    wanted (``remat plan --format all``)."""
    if cfg.pp > 1 and "global_batch" not in given and cfg.source != "preset":
        cfg = dataclasses.replace(cfg, global_batch=default_global_batch(cfg, problem_args.get("dp", 1)))
    problem = make_problem(cfg, **problem_args)
    sources = shape_sources(cfg, given)
    problem.meta.update(s_from=sources["s"], b_from=sources["b"], N_from=sources["N"])
    try:
        plan = solve(problem)
    except InfeasibleError as exc:
        parts = [f"{exc}; {render.shape(problem.meta)}", *suggest(cfg, problem_args)]
        raise InfeasibleError(". ".join(parts), exc.minimum_bytes) from None
    return problem, plan, run_baselines(problem, sac_time_limit_s=sac_time_limit_s) if baselines else {}


def render_plan(problem: Problem, plan: Plan, base: dict, fmt: str) -> str:
    """``plan`` as text: JSON ("json"), Markdown ("md") or a trainer's config (``trainers.FORMATS``)."""
    if fmt in trainers.FORMATS:
        return trainers.render_config(trainers.trainer_config(problem, plan, fmt))
    nearest = _megatron_nearest(problem, plan)
    if nearest is not None:     # shown beside "not expressible" (render.how_to_apply); the caller's problem untouched
        problem = dataclasses.replace(problem, meta={**problem.meta, "megatron_nearest": nearest})
    if fmt == "json":
        return json.dumps(render.to_json(problem, plan, base), indent=2, default=str)
    return render.to_markdown(problem, plan, base)


def _megatron_nearest(problem: Problem, plan: Plan) -> dict | None:
    """When Megatron-LM's flags cannot run ``plan``: the fastest plan they can run that fits (else the one with the
    least peak), as the nemo format chooses it (remat.planner.trainers), with its flags, peak and step time."""
    if render.how_to_apply(problem, plan)["megatron"]["flags"] is not None:
        return None
    try:
        chosen = trainers.trainer_config(problem, plan, "nemo")["plan"]
    except UsageError:              # no Megatron configuration uses only the policies offered
        return None
    flags = megatron.megatron_flags(chosen["policies"], int(problem.meta.get("p", 1) or 1))
    return None if flags is None else {**chosen, "flags": flags}
