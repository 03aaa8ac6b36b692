"""Exact planner: the per-layer policy of least predicted step time whose peak fits the budget.

    minimize   Σ_i time[i, c_i]
    subject to fixed + Σ_i stored[i, c_i] + max_i transient[i, c_i] ≤ budget        (device)
               Σ_i offload[i, c_i] ≤ host_limit                                   (host)

is a multiple-choice knapsack (MCKP) with a max term. The algorithm, exact for real-valued times and
integer bytes:

1. **Branch and bound over the transient cap T** (the distinct transient values T_0 < T_1 < …). For a cap,
   the rest is an MCKP: options with transient ≤ T, capacity budget − fixed − T (a plan whose real max
   transient is below T is only better off). An interval of caps [T_a, T_b] is bounded below by the relaxation
   "options with transient ≤ T_b, capacity budget − fixed − T_a"; intervals are split best-bound first and
   dropped once their bound reaches the best plan found.
2. **Exact MCKP per cap** (``remat.planner.mckp``): a Lagrangian bound, a greedy plan, reduced-cost fixing
   to a small core, and a Pareto dynamic program over the core — (stored, time), or (stored, host, time)
   when the host limit can bind — pruned by the bound. Identical layers reach identical states, so a
   homogeneous model costs no more than a few distinct layers, and degenerate instances (every layer
   trading recompute FLOPs for bytes at the same rate, as selective recompute does) stay cheap.

Ties in time are broken afterwards, layer by layer, towards the option holding fewer bytes (device + host)
at no more time — e.g. ``none`` instead of an offload whose transfer the model calls hidden — keeping the
plan feasible. Inside the DP, equal-time partial plans keep the one storing less.

Everything is scored at the end by ``problem.evaluate`` in Python integers; sizes below 2**53 bytes are exact
in the float64 arithmetic used here. Exactness is checked against brute force on random instances
(tests/test_planner_solve.py); speed by benchmarks/bench_planner.py (1000 heterogeneous layers).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np

from remat.errors import InfeasibleError
from remat.planner import mckp
from remat.planner.problem import Plan, Problem, evaluate
from remat.units import format_bytes


@dataclass
class _Arrays:
    """Option tables as [L, K] arrays (K = most options of any layer; absent options are never allowed)."""

    time: np.ndarray        # seconds
    stored: np.ndarray      # bytes (float64, exact below 2**53)
    transient: np.ndarray   # bytes
    host: np.ndarray        # bytes
    present: np.ndarray     # bool

    @classmethod
    def of(cls, problem: Problem) -> "_Arrays":
        L, K = len(problem.layers), max(len(layer.options) for layer in problem.layers)
        a = cls(*(np.zeros((L, K)) for _ in range(4)), np.zeros((L, K), dtype=bool))
        for i, layer in enumerate(problem.layers):
            for j, o in enumerate(layer.options):
                a.time[i, j], a.stored[i, j] = o.time_s, o.stored_bytes
                a.transient[i, j], a.host[i, j] = o.transient_bytes, o.offload_bytes
                a.present[i, j] = True
        return a


# --- branch and bound over the transient cap ---------------------------------------------------------------

def _over_caps(levels, lower, exact):
    """Least value over cap levels. lower(a, b) bounds every level in [a, b]; exact(a, upper) -> (value, x) | None.

    Best-bound-first search on intervals of level indices; returns (value, x, level) or None.
    """
    best = (np.inf, None, None)
    heap = [(lower(0, len(levels) - 1), 0, len(levels) - 1)]
    while heap:
        bound, a, b = heapq.heappop(heap)
        if not bound < best[0] + mckp.REL * max(1.0, abs(best[0])) or not np.isfinite(bound):
            break
        if a == b:
            found = exact(a, best[0])
            if found is not None and found[0] < best[0]:
                best = (found[0], found[1], a)
            continue
        mid = (a + b) // 2
        for lo, hi in ((a, mid), (mid + 1, b)):
            heapq.heappush(heap, (lower(lo, hi), lo, hi))
    return None if best[1] is None else best


def _host_binds(problem: Problem, arr: _Arrays) -> bool:
    limit = problem.host_limit_bytes
    return limit is not None and np.where(arr.present, arr.host, 0).max(axis=1).sum() > limit


def _plan(problem: Problem, choices) -> Plan:
    plan = evaluate(problem, choices, optimal=True)
    assert plan.feasible, "solver returned an infeasible plan"  # integer re-check of the float arithmetic
    return plan


def minimum_budget(problem: Problem) -> Plan | None:
    """The plan of smallest peak (bytes) that respects the host limit; None when no plan does.

    Its ``peak_bytes`` is the smallest budget that works (the number an InfeasibleError reports).
    Method: the cap search above with objective Σ stored (+ T) and the host row as the knapsack.
    """
    arr = _Arrays.of(problem)
    levels = np.unique(arr.transient[arr.present])
    host = _host_binds(problem, arr)
    limit = float(problem.host_limit_bytes or 0)

    def lower(a, b):
        allowed = arr.present & (arr.transient <= levels[b])
        return levels[a] + np.where(allowed, arr.stored, np.inf).min(axis=1).sum()

    def exact(a, upper):
        allowed = arr.present & (arr.transient <= levels[a])
        if not host:
            j = np.where(allowed, arr.stored, np.inf).argmin(axis=1)
            return levels[a] + arr.stored[np.arange(len(j)), j].sum(), j
        found = mckp.solve(mckp.Knapsack(arr.stored, [arr.host], [limit], allowed), upper - levels[a])
        return None if found is None else (levels[a] + found[0], found[1])

    found = _over_caps(levels, lower, exact)
    if found is None:
        return None
    problem_fixed = Problem(problem.layers, problem.fixed_parts, 2**62, problem.host_limit_bytes,
                            problem.fixed_time_s)
    return evaluate(problem_fixed, found[1], optimal=True)


def _infeasible(problem: Problem) -> InfeasibleError:
    best = minimum_budget(problem)
    budget = problem.budget_bytes
    if best is None:
        return InfeasibleError(
            f"no plan fits the host limit {format_bytes(problem.host_limit_bytes)} "
            f"({problem.host_limit_bytes} bytes) at any device budget", None)
    return InfeasibleError(
        f"budget {format_bytes(budget)} ({budget} bytes) is below the smallest peak any plan reaches; "
        f"the smallest budget that works is {format_bytes(best.peak_bytes)} ({best.peak_bytes} bytes); "
        f"outside the layers alone: {format_bytes(problem.fixed_bytes)} ({problem.fixed_bytes} bytes)",
        best.peak_bytes)


def solve(problem: Problem) -> Plan:
    """The exact plan: least predicted step time (seconds) with peak ≤ budget and offload ≤ host limit.

    Returns a Plan (``optimal=True``) scored by ``problem.evaluate``.
    Raises InfeasibleError(msg, minimum_bytes) when no plan fits: minimum_bytes is the smallest budget that
    works (bytes), or None when the host limit rules out every plan.
    Source: the algorithm in the module docstring (exact; cross-checked against brute force).
    """
    arr = _Arrays.of(problem)
    levels = np.unique(arr.transient[arr.present])
    room = float(problem.budget_bytes - problem.fixed_bytes)
    host = _host_binds(problem, arr)
    limit = float(problem.host_limit_bytes or 0)

    def knapsack(allowed, capacity):
        if host:
            return mckp.Knapsack(arr.time, [arr.stored, arr.host], [capacity, limit], allowed)
        return mckp.Knapsack(arr.time, [arr.stored], [capacity], allowed)

    def lower(a, b):
        return mckp.lagrangian(knapsack(arr.present & (arr.transient <= levels[b]), room - levels[a]), 1)[0]

    def exact(a, upper):
        return mckp.solve(knapsack(arr.present & (arr.transient <= levels[a]), room - levels[a]), upper)

    found = _over_caps(levels, lower, exact) if room >= levels[0] else None
    if found is None:
        raise _infeasible(problem)
    return _tie_break(problem, arr, _plan(problem, found[1]))


def _tie_break(problem: Problem, arr: _Arrays, plan: Plan) -> Plan:
    """Per layer, move to an option of no more time that holds fewer bytes (stored + transient + host)."""
    rows = np.arange(len(plan.choices))
    choices = np.array(plan.choices)
    held = arr.stored + arr.transient + arr.host
    room = problem.budget_bytes - problem.fixed_bytes
    limit = np.inf if problem.host_limit_bytes is None else problem.host_limit_bytes
    for i in range(len(choices)):
        c = choices[i]
        better = np.flatnonzero(arr.present[i] & (arr.time[i] <= arr.time[i, c]) & (held[i] < held[i, c]))
        if len(better) == 0:
            continue
        stored = arr.stored[rows, choices].sum() - arr.stored[i, c]
        host = arr.host[rows, choices].sum() - arr.host[i, c]
        others = np.delete(arr.transient[rows, choices], i)
        top = others.max() if len(others) else 0.0
        for j in better[np.argsort(held[i, better], kind="stable")]:
            if (stored + arr.stored[i, j] + max(top, arr.transient[i, j]) <= room
                    and host + arr.host[i, j] <= limit):
                choices[i] = j
                break
    return _plan(problem, choices)
