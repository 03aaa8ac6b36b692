"""A plan as JSON (for scripts) and as Markdown (for people).

JSON keys: title (model, GPU, s and b: the Markdown's first line), feasible, budget_bytes,
layers [{index, policy, kind}], counts {policy: n}, predicted
{peak_bytes, step_time_s, recompute_flops, offload_bytes, stored_bytes, transient_bytes}, memory
{part: bytes}, apply (``how_to_apply``: remat.auto, remat.policies and Megatron-LM forms of the plan),
baselines {name: {peak_bytes, step_time_s, feasible, ...}}, settings (the problem's meta).
Markdown: counts per choice, which layers take which policy and why (bytes saved and seconds paid per
layer against ``none``), how to apply it, a memory breakdown, the baselines.
"""

from __future__ import annotations

from itertools import groupby

from remat.planner import megatron
from remat.planner.problem import POLICIES, Plan, Problem
from remat.units import GiB, format_bytes


def memory_breakdown(problem: Problem, plan: Plan) -> dict[str, int]:
    """Named parts of the predicted peak (bytes): the fixed parts, the stored activations, and the worst
    transient (for the prefix model, what the binding moment adds beyond the layers' stored bytes)."""
    parts = dict(problem.fixed_parts)
    parts["stored activations (layers)"] = plan.stored_bytes
    parts["transient at the peak"] = plan.peak_bytes - problem.fixed_bytes - plan.stored_bytes
    return parts


def shape(meta: dict) -> str:
    """"s = 32768 (…), b = 1 (…)": the sequence length and micro-batch a plan is for, and where each came from
    (meta keys s, b, s_from, b_from); pipelined (p > 1) also "N = 16 micro-batches per step (…), 4 in flight on
    the first stage" (micro_batches, N_from, in_flight; interleaved: the range over the stage's chunks)."""
    parts = [f"{k} = {meta[k]}" + (f" ({meta[k + '_from']})" if meta.get(k + "_from") else "")
             for k in ("s", "b") if k in meta]
    if meta.get("p", 1) > 1 and "micro_batches" in meta:
        source = f" ({meta['N_from']})" if meta.get("N_from") else ""
        flight = sorted(set(meta["in_flight"]))
        held = f"{flight[0]}" if len(flight) == 1 else f"{flight[0]}–{flight[-1]} (by chunk)"
        parts.append(f"N = {meta['micro_batches']} micro-batches per step{source}, {held} in flight on the first "
                     "stage")
    return ", ".join(parts)


def title(problem: Problem) -> str:
    """"Recompute plan: <model> on <GPU full name> (<preset>), s = …, b = …; regime …": the first line of every
    plan (the regime when the plan has one: remat.planner.regime)."""
    meta = problem.meta
    gpu = meta.get("gpu", "GPU")
    name = meta.get("gpu_name", gpu)
    where = name if name == gpu else f"{name} ({gpu})"
    regime = f"; {meta['regime']}" if meta.get("regime") else ""
    return f"Recompute plan: {meta.get('model', 'model')} on {where}" + (f", {shape(meta)}" if "s" in meta else "") \
        + regime


def to_json(problem: Problem, plan: Plan, baselines: dict[str, dict]) -> dict:
    """The plan as a JSON-ready dict (ints for bytes, floats for seconds); its first key "title" (``title``)."""
    counts = {p: plan.policies.count(p) for p in POLICIES if p in plan.policies}
    return {
        "title": title(problem),
        "feasible": plan.feasible,
        "budget_bytes": problem.budget_bytes,
        "host_limit_bytes": problem.host_limit_bytes,
        "layers": [{"index": layer.index, "policy": policy, "kind": layer.kind}
                   for layer, policy in zip(problem.layers, plan.policies)],
        "counts": counts,
        "predicted": {"peak_bytes": plan.peak_bytes, "step_time_s": plan.step_time_s,
                      "recompute_flops": plan.recompute_flops, "offload_bytes": plan.offload_bytes,
                      "stored_bytes": plan.stored_bytes, "transient_bytes": plan.transient_bytes},
        "optimal": plan.optimal,
        "memory": memory_breakdown(problem, plan),
        "apply": how_to_apply(problem, plan),
        "baselines": baselines,
        "settings": problem.meta,
    }


def _ranges(indices: list[int]) -> str:
    out = []
    for _, run in groupby(enumerate(indices), key=lambda t: t[1] - t[0]):
        run = [i for _, i in run]
        out.append(str(run[0]) if len(run) == 1 else f"{run[0]}–{run[-1]}")
    return ", ".join(out)


_WHY = {
    "none": "keeps every activation: no extra time",
    "selective": "recomputes core attention (QKᵀ, softmax, dropout, ·V) in backward",
    "full": "keeps only the layer input; re-runs the layer's forward in backward",
    "offload": "moves the activations to host memory; the copy time not hidden by compute is paid",
}


_WHY_OP_LEVEL = "keeps matmul and attention outputs; recomputes normalisation and pointwise ops in backward"


_WHY_KEPT_SET = ("keeps the op outputs its kept set names (below); recomputes the block's other ops in backward "
                 "(a tensor plan)")


def _why_rows(problem: Problem, plan: Plan) -> list[str]:
    """One row per option the plan uses (a tensor plan's kept sets each their own), in POLICIES order."""
    rows = ["| policy | layers | bytes saved per layer (vs none) | extra seconds per layer | why |",
            "|---|---|---|---|---|"]
    chosen = [layer.options[c] for layer, c in zip(problem.layers, plan.choices)]
    for key in sorted({o.key for o in chosen}, key=lambda k: (POLICIES.index(k[0]), len(k[1]), k[1])):
        idx = [layer.index for layer, o in zip(problem.layers, chosen) if o.key == key]
        layer = problem.layers[idx[0]]
        none, this = layer.option("none"), layer.option(*key)
        saved = format_bytes(none.stored_bytes - this.stored_bytes) if none else "—"
        extra = f"{this.time_s - none.time_s:.4g} s" if none else "—"
        op_level = key[0] == "selective" and problem.meta.get("selective") == "op-level"
        why = _WHY_KEPT_SET if key[1] else _WHY_OP_LEVEL if op_level else _WHY[key[0]]
        label = f"{key[0]} ({key[1]})" if key[1] else key[0]
        rows.append(f"| {label} | {_ranges(idx)} | {saved} | {extra} | {why} |")
    return rows


def tensor_plan(problem: Problem, plan: Plan) -> bool:
    """Whether ``plan`` uses a tensor plan's kept sets (options with a variant): one policy name per layer then
    does not say what to run."""
    return any(layer.options[c].variant for layer, c in zip(problem.layers, plan.choices))


def _baseline_rows(plan: Plan, baselines: dict[str, dict]) -> list[str]:
    rows = ["| baseline | fits | peak | step time | vs plan |", "|---|---|---|---|---|"]
    for name, b in baselines.items():
        detail = "".join(f" ({k}={b[k]})" for k in ("N", "k") if k in b)
        peak = format_bytes(b["peak_bytes"]) if b.get("peak_bytes") is not None else "—"
        time = f"{b['step_time_s']:.4g} s" if b.get("step_time_s") is not None else "—"
        vs = f"{b['step_time_s'] / plan.step_time_s - 1:+.1%}" if b.get("step_time_s") else "—"
        rows.append(f"| {name}{detail} | {'yes' if b['feasible'] else 'no'} | {peak} | {time} | {vs} |")
    return rows


def _op_level_aside(problem: Problem, plan: Plan) -> str:
    """Why an op-level selective plan recomputes fewer matmul FLOPs than its extra time suggests."""
    if tensor_plan(problem, plan):
        return " (each block re-runs the ops its kept set leaves out)"
    if "selective" in plan.policies and problem.meta.get("selective") == "op-level":
        return " (op-level selective re-runs norms and pointwise ops, no matmul)"
    return ""


def to_markdown(problem: Problem, plan: Plan, baselines: dict[str, dict]) -> str:
    """A readable plan: counts, layers and reasons, memory breakdown, baselines (Markdown text)."""
    meta = problem.meta
    counts = ", ".join(f"{plan.policies.count(p)} {p}" for p in POLICIES if p in plan.policies)
    lines = [f"# {title(problem)}", "",
             f"Budget {format_bytes(problem.budget_bytes)} ({problem.budget_bytes} bytes); predicted peak "
             f"{format_bytes(plan.peak_bytes)}; predicted step time {plan.step_time_s:.4g} s; "
             f"recompute {plan.recompute_flops:.3e} matmul FLOPs{_op_level_aside(problem, plan)}; offload "
             f"{format_bytes(plan.offload_bytes)}.",
             "", f"**Layers ({len(problem.layers)} on this GPU):** {counts}." +
             (" Exact optimum of the cost model." if plan.optimal else ""), ""]
    if meta:
        keys = ("s", "b", "h", "a", "L", "t", "sp", "p", "m", "dp", "zero", "micro_batches", "attention",
                "time_source", "cost_source", "memory_model")
        lines += ["Settings: " + ", ".join(f"{k}={meta[k]}" for k in keys if k in meta) + ".", ""]
    lines += ["## Which layers and why", ""] + _why_rows(problem, plan) + [""]
    lines += ["## How to apply", ""] + _apply_lines(how_to_apply(problem, plan)) + [""]
    lines += ["## Memory", "", "| part | bytes | GiB |", "|---|---|---|"]
    for name, value in memory_breakdown(problem, plan).items():
        lines.append(f"| {name} | {value} | {value / GiB:.3f} |")
    lines += [f"| **peak** | **{plan.peak_bytes}** | **{plan.peak_bytes / GiB:.3f}** |",
              f"| budget | {problem.budget_bytes} | {problem.budget_bytes / GiB:.3f} |", ""]
    if baselines:
        lines += ["## Baselines at the same budget", ""] + _baseline_rows(plan, baselines) + [""]
    return "\n".join(lines)


# --- how to apply ----------------------------------------------------------------------------------------------

def python_list(policies) -> str:
    """Per-layer policies as a short Python expression: runs as ``["full"] * 16 + ["none"] * 8`` (a run of one
    as ``["full"]``)."""
    runs = [(p, len(list(run))) for p, run in groupby(policies)]
    return " + ".join(f'["{p}"]' + (f" * {n}" if n > 1 else "") for p, n in runs) or "[]"


def runtime_spec(policies) -> str:
    """The shortest ``remat.policies.parse_plan`` spec of a per-layer plan: one policy name when every layer
    takes it, ``block:N`` for full on the first N layers and none on the rest, else the comma list.
    (``uniform:N`` with N ≥ 2 checkpoints N layers as one unit, which no per-layer plan is; ``uniform:1`` is
    "full".)"""
    policies = list(policies)
    if len(set(policies)) == 1:
        return policies[0]
    n = next(i for i, p in enumerate(policies) if p != "full")
    if n and all(p == "none" for p in policies[n:]):
        return f"block:{n}"
    return ",".join(policies)


def how_to_apply(problem: Problem, plan: Plan) -> dict:
    """How to run ``plan``: a JSON-ready dict.

    Keys: layers (how many layers the plan covers: this GPU's, the first pipeline stage's), policies (one per
    layer), python_list (``python_list``), auto (the remat.auto calls: plan-and-apply, and apply of this
    plan's list), runtime_spec and runtime (``remat.policies.apply_plan`` with ``runtime_spec``; None for a
    plan remat.auto measured, whose selective is op-level), megatron {flags (list or None), command (flags joined, ""
    for none), why_not (None or a sentence), scope (what the flags count), source}, notes (caveats a user must know, a
    list of sentences).
    Sources: remat.auto.apply (an AutoPlan or one policy name per block), remat.policies.parse_plan,
    remat.planner.megatron (Megatron-LM TransformerConfig recompute_* and cpu_offloading_num_layers).
    """
    meta = problem.meta
    policies = list(plan.policies)
    pp, m = int(meta.get("p", 1) or 1), int(meta.get("m", 1) or 1)
    flags = megatron.megatron_flags(policies, pp)
    why_not = megatron.why_not(policies, pp)
    op_level = meta.get("selective") == "op-level"     # torch SAC (remat.auto's, or a fused-attention layer's)
    if "selective" in policies and op_level:
        flags, why_not = None, ("this plan's selective is op-level (torch selective checkpointing), which "
                                "Megatron-LM has no flag for: its selective recomputes core attention")
    spec = runtime_spec(policies)
    # remat's own layers run the plan through remat.policies, whose selective is core attention
    own = meta.get("runtime") == "remat.policies" and not ("selective" in policies and op_level)
    budget = f"budget={problem.budget_bytes}"
    gpu = f'gpu="{meta["gpu"]}"' if "gpu" in meta else "gpu=..."
    stage = "this GPU" + (f" (the first of p = {pp} pipeline stages)" if pp > 1 else "")
    scope = ("Megatron-LM counts --recompute-num-layers per pipeline stage (block: the first N layers of each "
             f"stage's layers); this plan is for {stage}, {len(policies)} layers")
    if m > 1:
        scope += (f"; with an interleaved schedule (m = {m}) Megatron-LM's block counts the first N layers of "
                  "each model chunk, not of the GPU's layers in forward order")
    kept = tensor_plan(problem, plan)
    tensor = ', granularity="tensor"' if meta.get("granularity") == "tensor" else ""
    return {
        "layers": len(policies),
        "policies": policies,
        "python_list": python_list(policies),
        "auto": ["from remat import auto",
                 *meta.get("auto_call", [f"result = auto.plan(model, example_args, {budget}, {gpu}{tensor})  # "
                                         "budget in bytes"]),
                 "auto.apply(model, result)",
                 *([] if kept else [f"auto.apply(model, {python_list(policies)})  # or this plan, one policy per "
                                    "block"])],
        "runtime_spec": spec if own else None,
        "runtime": f'remat.policies.apply_plan(model, "{spec}")' if own else None,
        "megatron": {"flags": flags, "command": " ".join(flags) if flags is not None else None,
                     "why_not": why_not, "scope": scope, "nearest": meta.get("megatron_nearest"),
                     "source": megatron.OFFLOAD_SOURCE if "offload" in policies else megatron.RECOMPUTE_SOURCE},
        "notes": _apply_notes(meta, policies, pp, kept),
    }


def _apply_notes(meta: dict, policies: list, pp: int, kept: bool) -> list[str]:
    """``how_to_apply``'s caveats a user must know (sentences)."""
    notes = list(meta.get("notes", ()))     # the path's own caveats (remat.cli.plan_run: transformers' model)
    if pp > 1:
        notes.append(f"The per-layer list covers the {len(policies)} layers of the first pipeline stage, the most "
                     "loaded one; later stages hold fewer micro-batches and fit with the same or less recompute.")
    if kept:
        notes.append("A tensor plan: each selective block keeps its own set of op outputs (listed per block), "
                     "applied by auto.apply(model, result); torch alone applies the JSON's torch_policy (op -> "
                     "CheckpointPolicy per block) through create_selective_checkpoint_contexts, except that an op "
                     "marked MUST_CPU_OFFLOAD is recomputed there (torch 2.13 names that policy, but its eager "
                     "cache does not offload; auto.apply does).")
    elif "selective" in policies and meta.get("selective") == "op-level":
        notes.append("selective here is op-level (torch selective checkpointing: matmul and attention outputs "
                     "kept, pointwise and normalisation recomputed), as remat.auto applies it; "
                     "Megatron-LM's --recompute-granularity selective recomputes core attention instead.")
    elif "selective" in policies:
        notes.append("remat.auto's selective is op-level (torch selective checkpointing: matmul outputs kept); "
                     "this plan costs selective as core-attention recompute (Korthikanti §4.2.2), which is what "
                     "remat.policies.apply_plan and Megatron-LM's --recompute-granularity selective do.")
    return notes


def _apply_lines(apply: dict) -> list[str]:
    """Markdown of ``how_to_apply``: code blocks for remat.auto, remat.policies and the Megatron-LM flags."""
    mega = apply["megatron"]
    listed = any("one policy per block" in line for line in apply["auto"])
    lines = ["PyTorch / HuggingFace (remat.auto plans and applies on the live model"
             + ("; or apply this plan, one policy per block" if listed else "") + "):", "", "```python",
             *apply["auto"], "```", ""]
    if apply["runtime"] is not None:
        lines += ["remat's own models (``model.layers``):", "", "```python", "import remat.policies",
                  apply["runtime"], "```", ""]
    lines += ["Megatron-LM:", ""]
    if mega["flags"] is None:
        lines.append(f"Not expressible as Megatron-LM flags: {mega['why_not']}.")
        near = mega.get("nearest")
        if near:
            fit = "fits" if near["feasible"] else "does not fit the budget"
            lines += ["", f"Nearest Megatron-LM plan ({fit}): peak {format_bytes(near['peak_bytes'])}, step "
                          f"{near['step_time_s']:.4g} s.", "", "```", " ".join(near["flags"]) or "(no flags)", "```"]
    elif not mega["flags"]:
        lines.append("No flags: Megatron-LM's default keeps every activation (no recompute).")
    else:
        lines += ["```", mega["command"], "```", "", f"{mega['scope']}. Source: {mega['source']}."]
    return lines + ([""] + apply["notes"] if apply["notes"] else [])
