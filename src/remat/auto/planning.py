"""A per-block plan for any nn.Module: the measured costs (remat.auto.measure) as the exact planner's problem.

    result = plan(model, example_args, example_kwargs, budget="24GiB", gpu="h100-80gb")
    print(result)            # per block: policy, bytes kept, extra time; totals vs budget; baselines

The memory model is the planner's prefix model (remat.planner.problem: one micro-batch, backward from the
last block to the first), with what was measured:

    peak = fixed + max(Σ_i stored_i + floor, max_i (Σ_{k≤i} stored_k + transient_i))

* fixed = parameters and buffers + optimizer state (default: Adam's two moments in the parameters' dtype,
  torch.optim.Adam/AdamW; ``optimizer_state_bytes`` to change it) + ``held`` (measured: what stays live outside
  the blocks while they run backward — inputs, the embedding's saved tensors,
  the head's gradients) + the block inputs without gradient a checkpoint keeps (``LOOSE``);
* stored_i = the block's saved bytes under its policy; floor = the head's forward, loss and backward;
* transient_i = the block's measured backward workspace under its policy + the gradients of the blocks after
  it (made already); for the first block also the end of the step (the embedding's backward, every
  gradient alive), which the max covers as E − stored_0.

With a ``regime`` (remat.planner.regime; ``remat plan`` always gives one) the model state takes the regime's
bytes per parameter instead of the measured dtype's: the parameters, the optimizer state, and the gradients —
either one buffer held all step (a fixed part; the gradients of later blocks leave the transients, and the
head's the ``held`` term) or made by backward as measured, in the regime's bytes. ZeRO (``dp``, ``zero``) then
shards the state (``shard_state``).

Step time = Σ_i the block's roofline seconds under its policy + the rest of the step (remat.auto.measure).
The optimizer step itself (its temporaries) is not part of the peak.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field, replace
from itertools import groupby, product

from remat.auto.blocks import Blocks
from remat.auto.measure import KEPT_SETS, ModelCosts
from remat.auto.tensors import KeptSet
from remat.errors import InfeasibleError, UsageError
from remat.formulas.torch_gpt import itemsize
from remat.planner.baselines import entry
from remat.planner.problem import POLICIES, Layer, Option, Plan, Problem, plan_from_policies
from remat.planner.regime import Regime
from remat.planner.render import to_json
from remat.planner.solve import solve
from remat.units import format_bytes

COST_SOURCE = "measured per block under fake tensors (remat.auto)"
BASELINES = {"no recompute": "none", "every block full (HF gradient_checkpointing_enable)": "full",
             "every block selective": "selective"}


@dataclass
class AutoPlan:
    """The plan for a model's blocks (``auto.apply`` takes it).

    block_names: the blocks' qualified names; blocks: their container's name ("" when given as a list); plan:
    the solved remat.planner.Plan (policies, peak_bytes, step_time_s, …); problem: the planner's problem (per
    block the options' bytes and seconds); costs: the measurement; baselines: name -> uniform policies at the
    same budget, those among the choices, as remat.planner.baselines.entry dicts (what render.to_markdown /
    to_json take)."""

    block_names: tuple
    blocks: str
    plan: Plan
    problem: Problem
    costs: ModelCosts
    baselines: dict = field(default_factory=dict)
    skipped: tuple = ()       # other containers of same-class modules, left out ("decoder.block (3)")
    notes: tuple = ()         # refused policies (why), shared blocks, use_cache turned off

    @property
    def policies(self) -> tuple:
        """One of POLICIES per block (the plan's)."""
        return self.plan.policies

    @property
    def kept_sets(self) -> tuple:
        """Per block: the remat.auto.tensors.KeptSet of a tensor plan's selective option (which op outputs the
        selective-checkpoint cache keeps), or None (a block policy: remat.auto.wrap's own)."""
        out = []
        for layer, choice, block in zip(self.problem.layers, self.plan.choices, self.costs.blocks):
            variant = layer.options[choice].variant
            v = block.variants.get(variant)
            out.append(KeptSet(block.ops.names, v.keep, layer.kind, v.offload,
                               frozenset(o.index for o in block.ops.ops if o.flops)) if v else None)
        return tuple(out)

    def __str__(self) -> str:
        return to_text(self)

    def to_json(self) -> dict:
        """JSON-ready: every plan's keys (remat.planner.render.to_json: predicted, memory, baselines, apply,
        settings, …) plus blocks [{name, policy, stored_bytes, offload_bytes, extra_s[, kept_ops,
        offloaded_ops]}], notes (refused policies, shared blocks, use_cache) and, for a tensor plan, torch_policy:
        block name -> per op of its stream {index, op, policy: MUST_SAVE | MUST_CPU_OFFLOAD | PREFER_RECOMPUTE}
        (what torch's create_selective_checkpoint_contexts takes, applied without remat; {} when no block keeps
        an op set of its own)."""
        policies = {name: kept.torch_policy() for name, kept in zip(self.block_names, self.kept_sets) if kept}
        tensor = policies or self.problem.meta.get("granularity") == "tensor"
        return {**to_json(self.problem, self.plan, self.baselines), "blocks": block_rows(self),
                "notes": list(self.notes), **({"torch_policy": policies} if tensor else {})}


LOOSE = "inputs without gradient a checkpoint keeps (measured)"
"""The fixed part of remat.auto.boundaries.loose_shared: position ids and the like, which the plain step frees
after the forward but a checkpoint keeps to its backward; held whatever the plan (over for a plan of none and
offload only)."""


def build_problem(costs: ModelCosts, budget_bytes: int, choices=POLICIES, optimizer_state_bytes: int | None = None,
                  host_limit_bytes: int | None = None, meta: dict | None = None, reserve_bytes: int = 0,
                  regime: Regime | None = None, dp: int = 1, zero: int = 0) -> Problem:
    """The planner's problem of a measured model (module docstring); bytes are ints. ``optimizer_state_bytes``
    None = 2 × the trainable parameters' bytes (Adam). ``regime`` (remat.planner.regime): the model state in
    its bytes per parameter (``_state``); None = as measured (``_state``). ``dp``, ``zero``: ZeRO's sharding of
    the model state (``shard_state``)."""
    unsharded, g, held_all = _state(costs, optimizer_state_bytes, regime)
    fixed = shard_state(unsharded, dp, zero)
    grads = [b.grad_bytes for b in costs.blocks]
    later = [0 if held_all else g(sum(grads[i + 1:])) for i in range(len(grads))]
    # a block's measured transient holds the gradients its backward makes, in the parameters' dtype: kept as
    # measured when a buffer holds them all step (the backward still makes each before adding it in), else in
    # the regime's bytes
    own = [0 if held_all else g(grad) - grad for grad in grads]
    head = costs.head_grad_bytes
    rest = costs.trainable_bytes - head
    held = costs.held_bytes - head + (0 if held_all else g(head))
    end = costs.end_bytes - rest + (0 if held_all else g(rest))
    layers = []
    for i, block in enumerate(costs.blocks):
        measured = [(policy, "", block.costs[policy]) for policy in choices if policy in block.costs]
        variants = [("selective", label, v.cost) for label, v in block.variants.items()]
        options = []
        for policy, variant, c in measured + variants:     # a refused policy is not in block.costs
            transient = c.transient_bytes + own[i] + later[i]
            if i == 0:
                transient = max(transient, end - c.stored_bytes)
            options.append(Option(policy, stored_bytes=c.stored_bytes, transient_bytes=max(0, transient),
                                  time_s=c.time_s, recompute_flops=c.recompute_flops,
                                  offload_bytes=c.offload_bytes, variant=variant))
        if not options:
            raise UsageError("choices", _none_left(block, choices))
        layers.append(Layer(i, tuple(options), block.name))
    fixed["held outside the blocks (measured)"] = max(0, held)
    if costs.loose_bytes:
        fixed[LOOSE] = costs.loose_bytes
    if reserve_bytes:
        fixed["workspace reserve"] = reserve_bytes
    return Problem(tuple(layers), fixed, budget_bytes, host_limit_bytes, fixed_time_s=costs.outside_time_s,
                   transient_floor_bytes=costs.floor_bytes, prefix=True,
                   meta={"cost_source": COST_SOURCE, "memory_model": "prefix", "dtype": costs.dtype,
                         "selective": "op-level", "param_count": costs.param_count, "dp": dp, "zero": zero,
                         "unsharded_state": unsharded,
                         **({"regime": regime.describe()} if regime else {}), **(meta or {})})


def _none_left(block, choices) -> str:
    """Why a block has no option: each policy of ``choices`` it refused, with the reason (policies refused for
    one reason named together), and what to do."""
    reasons: dict[str, list[str]] = {}
    for policy in choices:
        reason = re.sub(r"\. Give (this block|it) policy none or offload$", "", block.refused.get(policy, "not run"))
        reasons.setdefault(reason, []).append(policy)
    why = "; ".join(f"{' and '.join(policies)}: {reason}" for reason, policies in reasons.items())
    return (f"{block.name}: every policy of choices was dropped for this block — {why}. Add none or offload to "
            "choices (neither recomputes the block)")


def shard_state(state: dict, dp: int, zero: int) -> dict:
    """The model state (``_state``'s parts) on one of ``dp`` data-parallel ranks under ZeRO stage ``zero``
    (Rajbhandari et al. 2020): stage 1 divides the optimizer state, 2 also the gradients held all step, 3 also the
    parameters (their buffers too: a few bytes too few). Rounded up."""
    stage = lambda name: 1 if name.startswith("optimizer") else 2 if name.startswith("gradients") else 3
    return {name: -(-b // dp) if zero >= stage(name) else b for name, b in state.items()}


def _state(costs: ModelCosts, optimizer_state_bytes: int | None, regime: Regime | None):
    """(fixed parts, g, held_all): the model state's fixed bytes; g maps measured gradient bytes (the
    parameters' dtype) to the regime's; held_all: the gradients are one buffer held all step (a fixed part)
    instead of made by backward block by block (the measured timing: the head's before the blocks' backward,
    each block's in its backward, the embedding's at the end). regime None: parameters and buffers, Adam's two
    moments in the parameters' dtype (or ``optimizer_state_bytes``), gradients as measured."""
    if regime is None:
        optimizer = 2 * costs.trainable_bytes if optimizer_state_bytes is None else optimizer_state_bytes
        what = "Adam m, v in " + costs.dtype if optimizer_state_bytes is None else "given"
        return {"parameters and buffers": costs.params_bytes, f"optimizer state ({what})": optimizer}, \
            (lambda x: x), False
    size = itemsize(costs.dtype)
    per = lambda n, x: x * n // size               # measured bytes in the dtype -> n bytes per element
    fixed = {"parameters and buffers": per(regime.weight, costs.params_bytes)}
    if regime.grads_held_all_step:
        fixed["gradients (held all step)"] = per(regime.grad, costs.trainable_bytes)
    fixed["optimizer state"] = per(regime.optimizer, costs.trainable_bytes)
    return fixed, functools.partial(per, regime.grad), regime.grads_held_all_step


def solve_blocks(problem: Problem, blocks: Blocks, costs: ModelCosts) -> AutoPlan:
    """Solve ``problem`` exactly (remat.planner.solve; one module object at several places takes one policy)
    and score the uniform baselines. Raises InfeasibleError naming the smallest budget that works."""
    offered = set.intersection(*({o.policy for o in layer.options if not o.variant} for layer in problem.layers))
    try:
        best = _solve_shared(problem, blocks.shared())
    except InfeasibleError as exc:
        raise InfeasibleError(f"{exc}. Measured per block under fake tensors (remat.auto)", exc.minimum_bytes) \
            from None
    baselines = {name: entry(plan_from_policies(problem, [p] * len(problem.layers)), problem)
                 for name, p in BASELINES.items() if p in offered}
    return AutoPlan(blocks.names, blocks.name, best, problem, costs, baselines, blocks.skipped, _notes(blocks, costs))


def _solve_shared(problem: Problem, groups: list[list[int]]) -> Plan:
    """The exact plan in which every group of ``groups`` takes one policy: each assignment of policies to the
    groups solved with those layers fixed, the least step time kept (ties: the lower peak)."""
    if not groups:
        return solve(problem)
    common = [sorted(set.intersection(*({o.key for o in problem.layers[i].options} for i in g)))
              for g in groups]
    best, error = None, None
    for assignment in product(*common):
        fixed = {i: key for g, key in zip(groups, assignment) for i in g}
        layers = tuple(replace(layer, options=(layer.option(*fixed[layer.index]),)) if layer.index in fixed
                       else layer for layer in problem.layers)
        try:
            plan = solve(replace(problem, layers=layers))
        except InfeasibleError as exc:
            error = exc if error is None or (exc.minimum_bytes or 0) < (error.minimum_bytes or 0) else error
            continue
        if best is None or (plan.step_time_s, plan.peak_bytes) < (best.step_time_s, best.peak_bytes):
            best = plan
    if best is None:
        raise error
    return best


def _notes(blocks: Blocks, costs: ModelCosts) -> tuple[str, ...]:
    """What the plan's reader must know: policies refused for some blocks (why), shared blocks, the cache."""
    notes = []
    for policy in (*POLICIES, KEPT_SETS):
        refused = [(b.name, b.refused[policy]) for b in costs.blocks if policy in b.refused]
        if refused:
            notes.append(f"{policy} not offered for {_span([n for n, _ in refused])}: {refused[0][1]}")
    for group in blocks.shared():
        notes.append(f"{', '.join(blocks.names[i] for i in group)} are one module object (shared weights): "
                     "one policy")
    hooked = [f"{name}.{sub}" for name, block in zip(blocks.names, blocks.modules)
              for sub, m in block.named_modules() if sub and (m._forward_hooks or m._forward_pre_hooks)]
    if hooked:
        more = f" and {len(hooked) - 3} more" if len(hooked) > 3 else ""
        notes.append(f"forward hooks on {', '.join(hooked[:3])}{more} run again when their block recomputes (full, "
                     "selective): skip side effects while remat.policies.recomputing() is True")
    return tuple(notes) + tuple(costs.notes)


def _span(names: list[str]) -> str:
    return names[0] if len(names) == 1 else f"{len(names)} blocks ({names[0]}…{names[-1]})"


def block_rows(result: AutoPlan) -> list[dict]:
    """Per block: name, policy, stored bytes (device, kept for backward), extra seconds against none."""
    rows = []
    for layer, choice, kept in zip(result.problem.layers, result.plan.choices, result.kept_sets):
        this, none = layer.options[choice], layer.option("none")
        rows.append({"name": layer.kind, "policy": this.policy, "stored_bytes": this.stored_bytes,
                     "offload_bytes": this.offload_bytes,
                     "extra_s": None if none is None else this.time_s - none.time_s,
                     **({} if kept is None else {"kept_ops": sorted(kept.keep)}),
                     **({"offloaded_ops": sorted(kept.offload)} if kept is not None and kept.offload else {})})
    return rows


def kept_lines(result: AutoPlan) -> list[str]:
    """Per block with a tensor plan's kept set: what the selective-checkpoint cache keeps on the device and on the
    host (ops, bytes) and what the recompute re-runs (ops, seconds); blocks with equal sets merged."""
    lines, seen = [], {}
    for i, (kept, block) in enumerate(zip(result.kept_sets, result.costs.blocks)):
        if kept is not None:
            seen.setdefault((block.ops, kept.keep, kept.offload), []).append(i)
    for (ops, keep, off), where in seen.items():
        redo = [o for o in ops.ops if o.index not in keep | off and o.seconds > 0]
        parts = [f"{verb} {len(js)} op outputs ({', '.join(f'{ops.ops[j].op}#{j}' for j in sorted(js))}; "
                 f"{format_bytes(ops.kept_bytes(js))})" for verb, js in (("keep", keep), ("offload", off)) if js]
        lines.append(f"blocks {','.join(map(str, where))}: {', '.join(parts)}, recompute {len(redo)} ops "
                     f"({sum(o.seconds for o in redo) * 1e3:.3f} ms)")
    return lines


def to_text(result: AutoPlan) -> str:
    """A readable plan: per block (runs of equal rows merged), totals against the budget, baselines."""
    problem, plan = result.problem, result.plan
    lines = [f"remat.auto plan: {len(result.policies)} blocks ({result.blocks or 'given'}), budget "
             f"{format_bytes(problem.budget_bytes)}, {problem.meta.get('gpu_name', problem.meta.get('gpu', ''))}",
             "", f"{'blocks':<24} {'policy':<10} {'kept per block':>15} {'extra time per block':>21}"]
    rows = block_rows(result)
    index = 0
    for key, run in groupby(rows, key=lambda r: (r["policy"], r["stored_bytes"], round(r["extra_s"] or 0, 12))):
        run = list(run)
        span = f"{index}" if len(run) == 1 else f"{index}–{index + len(run) - 1}"
        index += len(run)
        extra = "—" if run[0]["extra_s"] is None else f"{run[0]['extra_s'] * 1e3:+.3f} ms"
        lines.append(f"{span:<24} {key[0]:<10} {format_bytes(key[1]):>15} {extra:>21}")
    fits = "fits" if plan.feasible else "does NOT fit"
    lines += ["", f"predicted peak {format_bytes(plan.peak_bytes)} ({plan.peak_bytes} bytes) {fits} the "
                  f"budget {format_bytes(problem.budget_bytes)}; predicted step time {plan.step_time_s * 1e3:.2f} ms "
                  f"({problem.meta.get('time_source', 'roofline model')})"]
    for name, base in result.baselines.items():    # uniform policies every block offers (solve_blocks)
        lines.append(f"  {name}: peak {format_bytes(base['peak_bytes'])}, step {base['step_time_s'] * 1e3:.2f} "
                     f"ms{'' if base['feasible'] else ' (over budget)'}")
    lines += kept_lines(result)
    lines += [f"note: {note}" for note in result.notes]
    if result.skipped:
        lines.append(f"not planned (other block containers; pass blocks= a list to plan them too): "
                     f"{', '.join(result.skipped)}")
    return "\n".join(lines)
