"""A per-layer plan in the configuration formats trainers read: HuggingFace ``TrainingArguments``, Megatron-Bridge /
NeMo 2 model overrides, torchtitan's ``[activation_checkpoint]`` section.

    out = trainer_config(problem, plan, "hf")    # {"format", "tool", "exact", "config", "plan", ...}
    print(render_config(out))                     # JSON (hf), YAML (nemo), TOML (torchtitan)

Each trainer applies one rule to every layer of a pipeline stage, so it can run only a family of per-layer
plans (``family``, ``L`` = the layers of the planned GPU in forward order). When the optimal plan is in the
family, the config runs it exactly; otherwise the config is the family's fastest plan that fits the budget
(the least peak when none fits), scored by the same cost model (``problem.plan_from_policies``), and the output
says so beside the optimum, with the per-block list for ``remat.auto.apply`` as the exact alternative.

* ``hf`` — transformers ``TrainingArguments.activation_checkpointing`` and ``activation_checkpointing_kwargs``
  (transformers 5.24, installed here; ``gradient_checkpointing*`` are its deprecated aliases). The Trainer pops
  ``every_n_layers`` (layers i with i mod N = 0 are checkpointed: ``PreTrainedModel._set_gradient_checkpointing``)
  and ``offload`` and passes the rest to ``torch.utils.checkpoint.checkpoint``. Family: every layer ``none``
  (activation_checkpointing false), or ``full`` on layers 0, N, 2N, … Its ``offload`` keeps the checkpointed
  layers' inputs on the host — recompute plus a copy, which is not this planner's offload (keep every
  activation, on the host) — so it is never proposed.
* ``nemo`` — Megatron-Bridge / NeMo 2 ``model.*`` overrides: the fields of Megatron-core's TransformerConfig
  that ``remat.planner.megatron`` maps (recompute_granularity / recompute_method / recompute_num_layers,
  recompute_modules ["core_attn"] for selective, cpu_offloading / cpu_offloading_num_layers). Family: its
  per-layer plans (all none, all selective, all full, full on the first N, offload of the first N < L with
  p = 1). Fine-grained activation offloading (``offload_modules``) offloads module types in every layer, not
  whole layers, so it is not this planner's offload and is not proposed.
* ``torchtitan`` — ``[activation_checkpoint]`` mode "none" | "full" | "selective" with ``selective_ac_option``
  N (layer SAC: torchtitan counts layers from 1 and checkpoints those with count mod N = 0, i.e. layers
  N − 1, 2N − 1, …). Its "op" option (save matmul and attention outputs, recompute the rest) and the compiled
  "memory_budget" mode are not per-layer plans this planner prices, so they are not proposed.

A plan whose ``selective`` is op-level (measured by remat.auto) has no Megatron selective: ``nemo`` then
proposes none of its selective plans.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from remat.errors import UsageError
from remat.planner import megatron
from remat.planner.problem import Plan, Problem, plan_from_policies

FORMATS = ("hf", "nemo", "torchtitan")
TOOLS = {"hf": "HuggingFace transformers TrainingArguments (5.24)",
         "nemo": "Megatron-Bridge / NeMo 2 model overrides (Megatron-core TransformerConfig fields)",
         "torchtitan": "torchtitan job config, [activation_checkpoint]"}


@dataclass(frozen=True)
class Candidate:
    """One configuration of a trainer and the per-layer plan it runs (policies in forward order)."""

    config: dict
    policies: tuple[str, ...]


def _hf(L: int, pp: int, op_level: bool) -> list[Candidate]:
    out = [Candidate({"activation_checkpointing": False}, ("none",) * L)]
    for n in range(1, L + 1):
        kwargs = {"use_reentrant": False} | ({"every_n_layers": n} if n > 1 else {})
        policies = tuple("full" if i % n == 0 else "none" for i in range(L))
        out.append(Candidate({"activation_checkpointing": True, "activation_checkpointing_kwargs": kwargs}, policies))
    return out


def _nemo(L: int, pp: int, op_level: bool) -> list[Candidate]:
    shapes = [("none",) * L, ("full",) * L]
    shapes += [("full",) * n + ("none",) * (L - n) for n in range(1, L)]
    shapes += [("offload",) * n + ("none",) * (L - n) for n in range(1, L)]
    if not op_level:
        shapes.append(("selective",) * L)
    out = []
    for policies in shapes:
        model = megatron.megatron_fields(policies, pp)
        if model is None:
            continue
        model = {"recompute_granularity": None} | model
        if model["recompute_granularity"] == "selective":
            model["recompute_modules"] = ["core_attn"]
        if "cpu_offloading_num_layers" in model:
            model |= {"cpu_offloading": True, "cpu_offloading_activations": True, "cpu_offloading_weights": False}
        out.append(Candidate({"model": model}, policies))
    return out


def _torchtitan(L: int, pp: int, op_level: bool) -> list[Candidate]:
    out = [Candidate({"activation_checkpoint": {"mode": "none"}}, ("none",) * L),
           Candidate({"activation_checkpoint": {"mode": "full"}}, ("full",) * L)]
    for n in range(2, L + 1):
        policies = tuple("full" if (i + 1) % n == 0 else "none" for i in range(L))
        out.append(Candidate({"activation_checkpoint": {"mode": "selective", "selective_ac_option": str(n)}},
                             policies))
    return out


FAMILIES = {"hf": _hf, "nemo": _nemo, "torchtitan": _torchtitan}


def family(fmt: str, L: int, pp: int = 1, op_level: bool = False) -> list[Candidate]:
    """Every configuration of ``fmt`` for L layers of one pipeline stage (p = ``pp``) and the plan each runs
    (module docstring). Raises UsageError("--format") for an unknown format."""
    if fmt not in FAMILIES:
        raise UsageError("--format", f"unknown trainer format {fmt!r} (known: {', '.join(FORMATS)})")
    return FAMILIES[fmt](L, pp, op_level)


def _scored(plan: Plan) -> dict:
    return {"policies": list(plan.policies), "peak_bytes": plan.peak_bytes, "step_time_s": plan.step_time_s,
            "feasible": plan.feasible}


def trainer_config(problem: Problem, plan: Plan, fmt: str) -> dict:
    """``plan`` (the optimum of ``problem``) in ``fmt``: {format, tool, exact (the config runs ``plan``), config,
    plan (the policies the config runs, their predicted peak bytes, step seconds, feasible), optimum (the
    same for ``plan``), per_block (``plan``'s policies, for remat.auto.apply)}. Module docstring for the rule."""
    meta = problem.meta
    op_level = meta.get("selective") == "op-level"
    scored = []
    for cand in family(fmt, len(problem.layers), int(meta.get("p", 1) or 1), op_level):
        candidate_plan = plan_from_policies(problem, cand.policies)
        if candidate_plan is not None:
            scored.append((cand, candidate_plan))
    if not scored:
        raise UsageError("--format", f"no {fmt} configuration uses only the policies offered (--policies)")
    exact = next(((c, p) for c, p in scored if p.policies == plan.policies), None)
    fits = [(c, p) for c, p in scored if p.feasible]
    cand, chosen = exact or (min(fits, key=lambda cp: cp[1].step_time_s) if fits else
                             min(scored, key=lambda cp: cp[1].peak_bytes))
    return {"format": fmt, "tool": TOOLS[fmt], "exact": exact is not None, "config": cand.config,
            "plan": _scored(chosen), "optimum": _scored(plan), "per_block": list(plan.policies)}


def _header(out: dict) -> list[str]:
    """Comment lines: what the config runs, against the optimum (GiB, seconds)."""
    run, best = out["plan"], out["optimum"]
    gib = lambda b: f"{b / 2**30:.2f} GiB"
    lines = [f"remat plan for {out['tool']}"]
    if out["exact"]:
        lines.append(f"runs the optimal plan exactly: peak {gib(run['peak_bytes'])}, step {run['step_time_s']:.3f} s")
    else:
        lines += [f"the optimal plan is not expressible here (peak {gib(best['peak_bytes'])}, step "
                  f"{best['step_time_s']:.3f} s); this is the nearest that is: peak {gib(run['peak_bytes'])}, "
                  f"step {run['step_time_s']:.3f} s" + ("" if run["feasible"] else ", OVER the budget"),
                  "the optimal plan per block, for remat.auto.apply: " + ",".join(out["per_block"])]
    return lines


def render_config(out: dict) -> str:
    """The config of ``trainer_config``'s ``out`` as its tool reads it: JSON (hf: TrainingArguments keyword
    arguments, the remat summary under "remat"), YAML (nemo) or TOML (torchtitan), with the summary as comments."""
    header = _header(out)
    if out["format"] == "hf":
        summary = {k: v for k, v in out.items() if k != "config"} | {"summary": header}
        return json.dumps({"training_arguments": out["config"], "remat": summary}, indent=2)
    comments = "".join(f"# {line}\n" for line in header)
    if out["format"] == "nemo":
        import yaml  # lazy: GPU nodes have no PyYAML, and only this format needs it (remat.planner runs there)
        return comments + yaml.safe_dump(out["config"], sort_keys=False)
    section = out["config"]["activation_checkpoint"]
    return comments + "[activation_checkpoint]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in section.items())
