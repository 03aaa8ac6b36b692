"""A per-layer plan in the configuration formats trainers read: HuggingFace ``TrainingArguments``, Megatron-Bridge /
NeMo 2 model overrides, torchtitan's ``[activation_checkpoint]`` section, or a torch-only Python module (``sac``).

    out = trainer_config(problem, plan, "hf")    # {"format", "tool", "exact", "config", "plan", ...}
    print(render_config(out))                     # JSON (hf), YAML (nemo), TOML (torchtitan), Python (sac)

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

* ``sac`` — a self-contained Python module that needs torch only (2.4+: ``CheckpointPolicy``): ``POLICIES``, one
  per block, and ``apply(blocks)``, which sets each block's ``forward`` on the instance — none: unchanged; full:
  ``torch.utils.checkpoint.checkpoint(forward, use_reentrant=False)``; selective: the same with
  ``context_fn=partial(create_selective_checkpoint_contexts, policy_fn)``, ``policy_fn`` MUST_SAVE for the ops
  remat's op-level selective keeps (``sac_kept_ops``: remat.drop_cheap.is_kept, the matmul-like ops torch's FLOP
  counter counts) and PREFER_RECOMPUTE for every other op. Family: every per-layer plan over none / selective /
  full (3^L plans, so the module's rule is applied by the exact solver on the problem restricted to them,
  ``_sac_scored``, not by enumeration). Offload (this planner's: every activation kept on the host) has no
  torch SAC form and is never proposed.

A plan whose ``selective`` is op-level (measured by remat.auto) has no Megatron selective: ``nemo`` then
proposes none of its selective plans. Conversely a plan whose ``selective`` is Megatron's core_attn (remat's own
GPT/Llama costs, ``meta["selective"]`` not "op-level") has no op-level selective: ``sac`` then proposes none of
its selective plans (family none / full). Writing the op-level policy under that plan's name would be dishonest:
op-level keeps the matmul outputs, among them the [b·a, s, s] attention scores of an unfused attention, which
core_attn recompute exists to drop, so the peak and step time printed beside it would be another policy's; a
UsageError would refuse plans whose none / full layers torch runs exactly. The header says which it is.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from torch.utils.flop_counter import flop_registry

from remat.drop_cheap import is_kept
from remat.errors import InfeasibleError, UsageError
from remat.formulas.op_flops import FORMULAS
from remat.planner import megatron, render
from remat.planner.problem import Plan, Problem, plan_from_policies
from remat.planner.solve import minimum_budget, solve

FORMATS = ("hf", "nemo", "torchtitan", "sac")
TOOLS = {"hf": "HuggingFace transformers TrainingArguments (5.24)",
         "nemo": "Megatron-Bridge / NeMo 2 model overrides (Megatron-core TransformerConfig fields)",
         "torchtitan": "torchtitan 0.2.x job config, [activation_checkpoint] (0.3 reads no TOML job config)",
         "sac": "torch.utils.checkpoint selective activation checkpointing (a torch-only module, no remat)"}


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


def sac_policies(op_level: bool) -> tuple[str, ...]:
    """The policies a ``sac`` module runs: selective only where it is op-level (module docstring)."""
    return ("none", "selective", "full") if op_level else ("none", "full")


def sac_candidate(policies, op_level: bool) -> Candidate:
    return Candidate({"policies": list(policies), "selective": "op-level" if op_level else "core_attn"},
                     tuple(policies))


def _sac(L: int, pp: int, op_level: bool) -> Iterator[Candidate]:
    """Lazily (an iterator: 3^L plans): every per-layer plan over ``sac_policies``."""
    return (sac_candidate(p, op_level) for p in itertools.product(sac_policies(op_level), repeat=L))


FAMILIES = {"hf": _hf, "nemo": _nemo, "torchtitan": _torchtitan, "sac": _sac}


def family(fmt: str, L: int, pp: int = 1, op_level: bool = False) -> Iterable[Candidate]:
    """Every configuration of ``fmt`` for L layers of one pipeline stage (p = ``pp``) and the plan each runs
    (module docstring; for ``sac`` an iterator over 3^L). Raises UsageError("--format") for an unknown format."""
    if fmt not in FAMILIES:
        raise UsageError("--format", f"unknown trainer format {fmt!r} (known: {', '.join(FORMATS)})")
    return FAMILIES[fmt](L, pp, op_level)


def _scored(plan: Plan) -> dict:
    return {"policies": list(plan.policies), "peak_bytes": plan.peak_bytes, "step_time_s": plan.step_time_s,
            "feasible": plan.feasible}


def _family_scored(problem: Problem, fmt: str, op_level: bool) -> list[tuple[Candidate, Plan]]:
    """Every configuration of ``fmt``'s (enumerated) family with its plan scored on ``problem``; those that
    need a policy some layer does not offer are left out."""
    scored = []
    for cand in family(fmt, len(problem.layers), int(problem.meta.get("p", 1) or 1), op_level):
        candidate_plan = plan_from_policies(problem, cand.policies)
        if candidate_plan is not None:
            scored.append((cand, candidate_plan))
    return scored


def _sac_scored(problem: Problem, plan: Plan, op_level: bool) -> list[tuple[Candidate, Plan]]:
    """The one ``sac`` candidate the module's rule picks, found without enumerating 3^L plans: ``plan`` when its
    policies are all in the family; else the exact optimum (remat.planner.solve) of ``problem`` with every layer
    restricted to the family's options — the family's fastest plan that fits — or, when none fits, its least
    peak (``minimum_budget``). Scored on ``problem`` (peak bytes, step seconds). [] when a layer offers none of
    the family's policies."""
    allowed = sac_policies(op_level)
    if set(plan.policies) <= set(allowed):
        return [(sac_candidate(plan.policies, op_level), plan)]
    layers = tuple(dataclasses.replace(layer, options=tuple(o for o in layer.options if o.policy in allowed))
                   for layer in problem.layers if any(o.policy in allowed for o in layer.options))
    if len(layers) < len(problem.layers):
        return []
    restricted = dataclasses.replace(problem, layers=layers)
    try:
        found = solve(restricted)
    except InfeasibleError:
        found = minimum_budget(restricted)   # no offload, so the host limit binds nothing: never None
    chosen = plan_from_policies(problem, found.policies)
    return [(sac_candidate(chosen.policies, op_level), chosen)]


def trainer_config(problem: Problem, plan: Plan, fmt: str) -> dict:
    """``plan`` (the optimum of ``problem``) in ``fmt``: {format, tool, exact (the config runs ``plan``), config,
    plan (the policies the config runs, their predicted peak bytes, step seconds, feasible), optimum (the
    same for ``plan``), per_block (``plan``'s policies, for remat.auto.apply)}. Module docstring for the rule.
    Raises UsageError("--format") for an unknown format or when no configuration of it uses only the policies
    the problem offers."""
    op_level = problem.meta.get("selective") == "op-level"
    scored = _sac_scored(problem, plan, op_level) if fmt == "sac" else _family_scored(problem, fmt, op_level)
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


def hf_model_call(config: dict) -> str:
    """The same plan through transformers' model method instead of TrainingArguments + Trainer: ``every_n_layers``
    is the method's own argument there (the Trainer pops it from the kwargs; the method would hand it, inside
    ``activation_checkpointing_kwargs``, to every layer's forward, which drops it: every layer checkpointed)."""
    if not config["activation_checkpointing"]:
        return "no call: activation checkpointing off"
    kwargs = dict(config["activation_checkpointing_kwargs"])
    every = kwargs.pop("every_n_layers", 1)
    return f"model.activation_checkpointing_enable(activation_checkpointing_kwargs={kwargs!r}, every_n_layers={every})"


def render_config(out: dict) -> str:
    """The config of ``trainer_config``'s ``out`` as its tool reads it: JSON (hf: TrainingArguments keyword
    arguments, the remat summary under "remat"), YAML (nemo), TOML (torchtitan) or Python (sac: ``sac_module``),
    with the summary as comments."""
    header = _header(out)
    if out["format"] == "sac":
        return sac_module(out["config"], header)
    if out["format"] == "hf":
        summary = {k: v for k, v in out.items() if k != "config"} | {"summary": header,
                                                                       "model_call": hf_model_call(out["config"])}
        return json.dumps({"training_arguments": out["config"], "remat": summary}, indent=2)
    comments = "".join(f"# {line}\n" for line in header)
    if out["format"] == "nemo":
        import yaml  # lazy: GPU nodes have no PyYAML, and only this format needs it (remat.planner runs there)
        return comments + yaml.safe_dump(out["config"], sort_keys=False)
    section = out["config"]["activation_checkpoint"]
    return comments + "[activation_checkpoint]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in section.items())


# --- sac: the torch-only module ---------------------------------------------------------------------------------

def sac_kept_ops() -> dict[str, list[str]]:
    """The ops whose outputs remat's op-level selective keeps, by torch.ops namespace: {"aten": ["_convolution",
    "addmm", ...], "higher_order": ["flex_attention", ...]}, names sorted. The rule's one home is
    remat.drop_cheap.is_kept (the ops torch's FLOP counter counts: torch.utils.flop_counter.flop_registry plus
    remat.formulas.op_flops.FORMULAS); this asks it of every op in those registries, its whole domain."""
    kept: dict[str, set[str]] = {}
    for op in {*flop_registry, *FORMULAS}:
        if is_kept(op):
            qualified = getattr(op, "_qualified_op_name", None)   # "aten::mm"; a HigherOrderOperator has none
            namespace, name = qualified.split("::") if qualified else (op.namespace, op.__name__)
            kept.setdefault(namespace, set()).add(name)
    return {namespace: sorted(names) for namespace, names in sorted(kept.items())}


_SAC_SELECTIVE = {
    "op-level": ["selective = remat's op-level selective (remat.auto, as planned): matmul, convolution and",
                 "attention-kernel outputs kept, every other op recomputed in backward"],
    "core_attn": ["this plan's selective is Megatron's core_attn recompute (priced so); torch SAC's op-level",
                  "policy is another policy (it keeps the attention scores core_attn drops), so this module",
                  "runs none / full only and its peak and step time are those of the plan it runs"]}

_SAC_BODY = '''
from functools import partial

import torch
from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts

_KEPT = {kept}
MUST_SAVE = {{getattr(getattr(torch.ops, ns), name) for ns, names in _KEPT.items() for name in names
             if hasattr(getattr(torch.ops, ns), name)}}
"""The ops whose outputs selective keeps (CheckpointPolicy.MUST_SAVE); an op this torch lacks is skipped."""

POLICIES = {policies}
"""One policy per block, in forward order: none | selective | full."""


def policy_fn(ctx, op, *args, **kwargs):
    """torch SAC policy: MUST_SAVE for the ops in MUST_SAVE, PREFER_RECOMPUTE for every other op."""
    packet = getattr(op, "overloadpacket", op)
    return CheckpointPolicy.MUST_SAVE if packet in MUST_SAVE else CheckpointPolicy.PREFER_RECOMPUTE


def wrapped(forward, policy):
    """forward under policy: itself (none), non-reentrant checkpoint (full), the same with policy_fn (selective)."""
    if policy == "none":
        return forward
    if policy == "full":
        return partial(checkpoint, forward, use_reentrant=False)
    if policy == "selective":
        return partial(checkpoint, forward, use_reentrant=False,
                       context_fn=partial(create_selective_checkpoint_contexts, policy_fn))
    raise ValueError(f"unknown policy {{policy!r}} (known: none, selective, full)")


def apply(blocks):
    """Set each block's forward (on the instance; call once) by POLICIES. blocks: the model's blocks in forward
    order, one per policy (e.g. model.model.layers). Raises ValueError when the counts differ."""
    blocks = list(blocks)
    if len(blocks) != len(POLICIES):
        raise ValueError(f"{{len(blocks)}} blocks for {{len(POLICIES)}} policies")
    for block, policy in zip(blocks, POLICIES):
        if policy != "none":
            block.forward = wrapped(block.forward, policy)
    return blocks
'''


def sac_module(config: dict, header: list[str]) -> str:
    """The ``sac`` module's Python text for ``config`` ({"policies": [...], "selective": "op-level" |
    "core_attn"}), ``header`` (the plan's summary lines) as comments. It imports torch only (2.4+), holds the
    op list of ``sac_kept_ops`` and ``POLICIES`` (as remat.planner.render.python_list) and defines ``policy_fn``,
    ``wrapped`` and ``apply`` (module docstring). Source: torch.utils.checkpoint (checkpoint,
    create_selective_checkpoint_contexts, CheckpointPolicy)."""
    kept = "{\n" + "".join(f"    {json.dumps(ns)}: (\n" + "".join(f"        {json.dumps(n)},\n" for n in names)
                           + "    ),\n" for ns, names in sac_kept_ops().items()) + "}"
    notes = header + _SAC_SELECTIVE[config["selective"]] + ([
        "an op that writes in place into a kept output (nn.ReLU(inplace=True) right after a Linear) makes the",
        "selective recompute read the written values: remat.auto.apply refuses it, this module does not check"]
        if "selective" in config["policies"] else [])
    doc = ('"""Selective activation checkpointing written by `remat plan --format sac`; needs torch only.\n\n'
           "    import this_module\n    this_module.apply(model.model.layers)   # the blocks, in forward order\n"
           '"""\n')
    return ("".join(f"# {line}\n" for line in notes) + doc
            + _SAC_BODY.format(kept=kept, policies=render.python_list(config["policies"])))
