"""Baselines at the planner's budget, scored by the planner's own cost model (``problem.evaluate``):

* ``none``, ``full``, ``selective`` (Megatron recompute_granularity=selective, core_attn) — one policy for all;
* ``sqrt-segments`` — Chen et al. 2016: k = round(√L) segments (``remat.formulas.chen.segment_sizes``), the
  first k − 1 checkpointed, the last kept;
* ``megatron-uniform`` — recompute_method=uniform: chunks of N layers, each checkpointed as one unit; the
  smallest N whose plan fits;
* ``megatron-block`` — recompute_method=block: the first N layers fully recomputed, the rest not; the
  smallest N that fits;
* ``torch-sac-milp`` — torch's own planner, ``torch.distributed._tools.sac_ilp.sac_milp`` (a MILP on pulp's
  CBC, its own memory model), fed the same per-layer statistics: each layer is a module whose discardable
  memory is stored(none) − stored(full) and whose recompute-time curve runs through (0, 0), selective and
  full; its answer (a fraction of memory discarded per layer) is rounded up to the policy that discards at
  least that much and scored here.

A checkpointed unit of several layers keeps only its input (the first layer's ``full`` stored bytes) and,
while its backward runs, holds every layer's activations again: the first layer's ``full`` transient plus
the other members' ``none`` stored bytes (one micro-batch); each of its layers costs the ``full`` time.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import warnings

from remat.formulas.chen import segment_bounds
from remat.planner.problem import Layer, Option, Plan, Problem, evaluate, plan_from_policies
from remat.policies import Policy
from remat.units import GiB

SAC_TIME_LIMIT_S = 20.0
"""Default seconds CBC may spend on torch's sac_milp (torch's own: 180)."""
UNIFORM: tuple[Policy, ...] = ("none", "full", "selective")
"""The one-policy-for-all baselines, in the order tables list them."""


def _unit_problem(problem: Problem, units: list[tuple[int, int, bool]]) -> Problem | None:
    """A problem with one option per layer that scores ``units`` [(start, stop, checkpointed)]."""
    layers = []
    for start, stop, ckpt in units:
        members = problem.layers[start:stop]
        none = [layer.option("none") for layer in members]
        full = [layer.option("full") for layer in members]
        if any(o is None for o in none) or (ckpt and any(o is None for o in full)):
            return None
        if not ckpt:
            layers += [Layer(layer.index, (o,), layer.kind) for layer, o in zip(members, none)]
            continue
        # the unit's input is its first layer's checkpoint; its recompute re-creates every member's
        # activations: the first layer's full-recompute transient plus the other members' stored (one mb)
        recomputed = full[0].transient_bytes + sum(o.stored_bytes // max(1, _in_flight(problem, k))
                                                   for k, o in zip(range(start + 1, stop), none[1:]))
        for k, (layer, f) in enumerate(zip(members, full)):
            first = k == 0
            layers.append(Layer(layer.index, (Option(
                "full", f.stored_bytes if first else 0, recomputed if first else 0, f.time_s,
                f.recompute_flops, 0),), layer.kind))
    return dataclasses.replace(problem, layers=tuple(layers))


def _in_flight(problem: Problem, i: int) -> int:
    """Micro-batches in flight of layer i (from the cost builder's meta; 1 when unknown)."""
    return int(problem.meta.get("in_flight", [1] * len(problem.layers))[i])


def score_units(problem: Problem, units) -> Plan | None:
    """Score a plan of checkpoint units [(start, stop, checkpointed)] with the problem's memory model."""
    derived = _unit_problem(problem, units)
    return None if derived is None else evaluate(derived, [0] * len(derived.layers))


def segments_units(L: int, k: int) -> list[tuple[int, int, bool]]:
    """Chen's segments(k) (remat.formulas.chen.segment_bounds): the first k − 1 checkpointed, the last kept."""
    bounds = segment_bounds(L, k)
    return [(start, stop, j < k - 1) for j, (start, stop) in enumerate(bounds)]


def uniform_units(L: int, n: int) -> list[tuple[int, int, bool]]:
    """Megatron uniform: every chunk of n layers checkpointed as one unit."""
    return [(s, min(s + n, L), True) for s in range(0, L, n)]


def entry(plan: Plan | None, problem: Problem, **extra) -> dict:
    """A baseline as the renderers take it: {peak_bytes, step_time_s, feasible, recompute_flops, **extra}
    (bytes, seconds; None values and feasible False for ``plan`` None)."""
    if plan is None:
        return {"peak_bytes": None, "step_time_s": None, "feasible": False, **extra}
    return {"peak_bytes": plan.peak_bytes, "step_time_s": plan.step_time_s,
            "feasible": bool(plan.peak_bytes <= problem.budget_bytes and
                             (problem.host_limit_bytes is None or plan.offload_bytes <= problem.host_limit_bytes)),
            "recompute_flops": plan.recompute_flops, **extra}


def _smallest_fitting(problem: Problem, make, what: str) -> dict:
    """The smallest N in 1..L whose plan ``make(N)`` fits; else the N of least peak, marked infeasible."""
    L, best = len(problem.layers), None
    for n in range(0 if what == "block" else 1, L + 1):
        plan = make(n)
        if plan is None:
            continue
        scored = entry(plan, problem, N=n)
        if scored["feasible"]:
            return scored
        if best is None or plan.peak_bytes < best["peak_bytes"]:
            best = scored
    return best or entry(None, problem)


def baselines(problem: Problem, sac: bool = True, sac_time_limit_s: float = SAC_TIME_LIMIT_S) -> dict[str, dict]:
    """name -> {peak_bytes, step_time_s, feasible, ...} for every baseline at ``problem.budget_bytes``."""
    L = len(problem.layers)
    out = {name: entry(plan_from_policies(problem, [name] * L), problem)
           for name in UNIFORM}
    k = max(1, min(L, round(math.sqrt(L))))
    out["sqrt-segments"] = entry(score_units(problem, segments_units(L, k)), problem, k=k)
    out["megatron-uniform"] = _smallest_fitting(problem, lambda n: score_units(problem, uniform_units(L, n)),
                                                "uniform")
    out["megatron-block"] = _smallest_fitting(
        problem, lambda n: plan_from_policies(problem, ["full"] * n + ["none"] * (L - n)), "block")
    if sac:
        out["torch-sac-milp"] = sac_milp_baseline(problem, sac_time_limit_s)
    return out


# --- torch's SAC planner on the same statistics --------------------------------------------------------------

def sac_graph(problem: Problem):
    """A ``torch.distributed._tools.ilp_utils.Graph`` of the model: root "model" + one module per layer, with
    the planner's per-layer statistics (bytes; runtimes in ms as sac_milp expects). Also returns, per layer,
    the discard fraction of selective recompute (None where the layer has no selective option)."""
    from torch.distributed._tools.ilp_utils import Graph

    L = len(problem.layers)
    graph = Graph(L + 1)
    worst = max([problem.transient_floor_bytes] + [o.transient_bytes for layer in problem.layers
                                                   for o in layer.options if o.policy != "offload"])
    stored_none = [layer.option("none").stored_bytes for layer in problem.layers]
    nodes, r_sel = [], []
    for i, layer in enumerate(problem.layers):
        none, sel, full = layer.option("none"), layer.option("selective"), layer.option("full")
        acm = max(1, none.stored_bytes - full.stored_bytes)
        recompute_ms = max(1e-9, (full.time_s - none.time_s) * 1e3)
        points = [(0.0, 0.0), (1.0, 1.0)]
        if sel is not None:
            r = (none.stored_bytes - sel.stored_bytes) / acm
            points.insert(1, (r, max(0.0, (sel.time_s - none.time_s) * 1e3 / recompute_ms)))
            r_sel.append(r)
        else:
            r_sel.append(None)
        slopes, intercepts = _segments(points)
        nodes.append(_node(f"model.layers.{i}", i + 1, i, is_leaf=False, acm=acm, runtime=recompute_ms,
                           total=sum(stored_none[:i]), slopes=slopes, intercepts=intercepts))
    root = _node("model", 0, L, is_leaf=True, acm=0, runtime=0.0, total=sum(stored_none), slopes=[],
                 intercepts=[], grad=worst, params=problem.fixed_bytes)
    for node in [root] + nodes:
        graph.add_node(node)
    graph.fw_post_order = [n["fqn"] for n in nodes] + ["model"]
    graph.ad_matrix[0, :] = 1
    for i in range(1, L + 1):
        graph.ad_matrix[i, i] = 1
    return graph, r_sel


def _segments(points):
    """Slopes and intercepts of the lines through consecutive points (sac_milp takes their max)."""
    slopes, intercepts = [], []
    for (x0, y0), (x1, y1) in zip(points, points[1:]):
        slope = (y1 - y0) / (x1 - x0) if x1 > x0 else 0.0
        slopes.append(slope)
        intercepts.append(y0 - slope * x0)
    return slopes, intercepts


def _node(fqn, index, pos, is_leaf, acm, runtime, total, slopes, intercepts, grad=0, params=0) -> dict:
    return {"fqn": fqn, "index": index, "pos_fw_post_order": pos, "is_leaf": is_leaf,
            "param_per_module": params, "grad_per_module": 0, "grad_total": 0,
            "act_fw_per_module": acm, "sac_memory": acm, "act_bw_per_module": 0, "act_grad_per_module": grad,
            "act_total": total, "input_per_module": 0, "output_per_module": 0,
            "fw_runtime_per_module": 0.0, "bw_runtime_per_module": 0.0, "sac_runtime": runtime,
            "n_segments": len(slopes), "slopes": slopes, "intercepts": intercepts, "breakpoints": [],
            "tradeoff_curve": {}}


def sac_milp_baseline(problem: Problem, time_limit_s: float = SAC_TIME_LIMIT_S) -> dict:
    """torch's sac_milp on the planner's statistics, its answer scored by the planner's model.

    Layers without none/full options give an infeasible entry. torch calls CBC with gapRel 0.05 and a 180 s
    time limit; we keep the gap and cap the time at ``time_limit_s`` (its best plan by then is taken —
    identical layers make its MILP highly symmetric, and CBC can spend the whole limit on 48 of them).
    Source: torch.distributed._tools.sac_ilp.sac_milp.
    """
    if any(layer.option("none") is None or layer.option("full") is None for layer in problem.layers):
        return entry(None, problem, note="needs none and full options on every layer")
    try:
        from torch.distributed._tools import sac_ilp
    except ImportError as exc:    # torch's module needs PuLP (absent on a bare GPU node): no entry, a reason
        return entry(None, problem, note=f"not run: {exc}")

    graph, r_sel = sac_graph(problem)
    logger = logging.getLogger(sac_ilp.__name__)
    level, cbc = logger.level, sac_ilp.PULP_CBC_CMD
    logger.setLevel(logging.CRITICAL)
    sac_ilp.PULP_CBC_CMD = lambda **kw: cbc(**{**kw, "timeLimit": time_limit_s})
    try:
        with warnings.catch_warnings():   # pulp 3.x deprecation notices about its own 4.0 API
            warnings.simplefilter("ignore", DeprecationWarning)
            decisions, _, peak = sac_ilp.sac_milp(
                graph, problem.budget_bytes / GiB,
                ac_units=[f"model.layers.{i}" for i in range(len(problem.layers))])
    finally:
        logger.setLevel(level)
        sac_ilp.PULP_CBC_CMD = cbc
    if peak == -1:
        return entry(None, problem, note="sac_milp found no solution")
    policies = []
    for i in range(len(problem.layers)):
        r = decisions.get(f"model.layers.{i}", 0.0)
        policies.append("none" if r <= 1e-6 else
                        "selective" if r_sel[i] is not None and r <= r_sel[i] + 1e-6 else "full")
    plan = plan_from_policies(problem, policies)
    return entry(plan, problem, sac_peak_bytes=int(peak), policies=policies, time_limit_s=time_limit_s)
