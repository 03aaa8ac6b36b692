"""A plan as JSON (for scripts) and as Markdown (for people).

JSON keys: title (model, GPU, s and b: the Markdown's first line), feasible, budget_bytes,
layers [{index, policy, kind}], counts {policy: n}, predicted
{peak_bytes, step_time_s, recompute_flops, offload_bytes, stored_bytes, transient_bytes}, memory
{part: bytes}, baselines {name: {peak_bytes, step_time_s, feasible, ...}}, settings (the problem's meta).
Markdown: counts per choice, which layers take which policy and why (bytes saved and seconds paid per
layer against ``none``), a memory breakdown, the baselines.
"""

from __future__ import annotations

from itertools import groupby

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
    (meta keys s, b, s_from, b_from)."""
    return ", ".join(f"{k} = {meta[k]}" + (f" ({meta[k + '_from']})" if meta.get(k + "_from") else "")
                     for k in ("s", "b") if k in meta)


def title(problem: Problem) -> str:
    """"Recompute plan: <model> on <GPU full name> (<preset>), s = …, b = …": the first line of every plan."""
    meta = problem.meta
    gpu = meta.get("gpu", "GPU")
    name = meta.get("gpu_name", gpu)
    where = name if name == gpu else f"{name} ({gpu})"
    return f"Recompute plan: {meta.get('model', 'model')} on {where}" + (f", {shape(meta)}" if "s" in meta else "")


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


def _why_rows(problem: Problem, plan: Plan) -> list[str]:
    rows = ["| policy | layers | bytes saved per layer (vs none) | extra seconds per layer | why |",
            "|---|---|---|---|---|"]
    for policy in POLICIES:
        idx = [layer.index for layer, p in zip(problem.layers, plan.policies) if p == policy]
        if not idx:
            continue
        layer = problem.layers[idx[0]]
        none, this = layer.option("none"), layer.option(policy)
        saved = format_bytes(none.stored_bytes - this.stored_bytes) if none else "—"
        extra = f"{this.time_s - none.time_s:.4g} s" if none else "—"
        rows.append(f"| {policy} | {_ranges(idx)} | {saved} | {extra} | {_WHY[policy]} |")
    return rows


def _baseline_rows(plan: Plan, baselines: dict[str, dict]) -> list[str]:
    rows = ["| baseline | fits | peak | step time | vs plan |", "|---|---|---|---|---|"]
    for name, b in baselines.items():
        detail = "".join(f" ({k}={b[k]})" for k in ("N", "k") if k in b)
        peak = format_bytes(b["peak_bytes"]) if b.get("peak_bytes") is not None else "—"
        time = f"{b['step_time_s']:.4g} s" if b.get("step_time_s") is not None else "—"
        vs = f"{b['step_time_s'] / plan.step_time_s - 1:+.1%}" if b.get("step_time_s") else "—"
        rows.append(f"| {name}{detail} | {'yes' if b['feasible'] else 'no'} | {peak} | {time} | {vs} |")
    return rows


def to_markdown(problem: Problem, plan: Plan, baselines: dict[str, dict]) -> str:
    """A readable plan: counts, layers and reasons, memory breakdown, baselines (Markdown text)."""
    meta = problem.meta
    counts = ", ".join(f"{plan.policies.count(p)} {p}" for p in POLICIES if p in plan.policies)
    lines = [f"# {title(problem)}", "",
             f"Budget {format_bytes(problem.budget_bytes)} ({problem.budget_bytes} bytes); predicted peak "
             f"{format_bytes(plan.peak_bytes)}; predicted step time {plan.step_time_s:.4g} s; "
             f"recompute {plan.recompute_flops:.3e} FLOPs; offload {format_bytes(plan.offload_bytes)}.",
             "", f"**Layers ({len(problem.layers)} on this GPU):** {counts}." +
             (" Exact optimum of the cost model." if plan.optimal else ""), ""]
    if meta:
        keys = ("s", "b", "h", "a", "L", "t", "sp", "p", "m", "dp", "zero", "micro_batches", "time_source",
                "cost_source", "memory_model")
        lines += ["Settings: " + ", ".join(f"{k}={meta[k]}" for k in keys if k in meta) + ".", ""]
    lines += ["## Which layers and why", ""] + _why_rows(problem, plan) + [""]
    lines += ["## Memory", "", "| part | bytes | GiB |", "|---|---|---|"]
    for name, value in memory_breakdown(problem, plan).items():
        lines.append(f"| {name} | {value} | {value / GiB:.3f} |")
    lines += [f"| **peak** | **{plan.peak_bytes}** | **{plan.peak_bytes / GiB:.3f}** |",
              f"| budget | {problem.budget_bytes} | {problem.budget_bytes / GiB:.3f} |", ""]
    if baselines:
        lines += ["## Baselines at the same budget", ""] + _baseline_rows(plan, baselines) + [""]
    return "\n".join(lines)
