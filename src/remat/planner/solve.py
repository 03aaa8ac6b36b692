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

With the prefix memory model (one micro-batch in flight, ``Problem.prefix``) there is no max term: the
running constraints Σ_{k≤i} stored_k + transient_i ≤ budget − fixed are checked inside the same dynamic
program, which then visits the layers in order; the knapsack row Σ stored + floor ≤ budget − fixed is its
relaxation for the bounds. This path is exact too but, on many distinct layers whose options tie in cost
per byte, it can outgrow its memory guard (``mckp.SearchTooLarge``; see benchmarks/bench_planner.py --prefix).

Ties in time are broken afterwards, layer by layer, towards the option holding fewer bytes (device + host)
at no more time — e.g. ``none`` instead of an offload whose transfer the model calls hidden — keeping the
plan feasible. Inside the DP, equal-time partial plans keep the one storing less.

Everything is scored at the end by ``problem.evaluate`` in Python integers; sizes below 2**53 bytes are exact
in the float64 arithmetic used here. Exactness is checked against brute force on random instances
(tests/test_planner_solve.py); speed by benchmarks/bench_planner.py (1000 heterogeneous layers).
"""

from __future__ import annotations

import dataclasses
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


def _peak(problem: Problem, arr: _Arrays, choices: np.ndarray) -> float:
    """``evaluate``'s peak (bytes) of a plan, in numpy: the memory model of ``problem``."""
    rows = np.arange(len(choices))
    stored, transient = arr.stored[rows, choices], arr.transient[rows, choices]
    floor = problem.transient_floor_bytes
    if problem.prefix:
        return problem.fixed_bytes + max(stored.sum() + floor, (np.cumsum(stored) + transient).max())
    return problem.fixed_bytes + stored.sum() + max(floor, transient.max())


def _plan(problem: Problem, choices) -> Plan:
    plan = evaluate(problem, choices, optimal=True)
    assert plan.feasible, "solver returned an infeasible plan"  # integer re-check of the float arithmetic
    return plan


def _unbounded(problem: Problem) -> Problem:
    return dataclasses.replace(problem, budget_bytes=2**62)


def minimum_budget(problem: Problem) -> Plan | None:
    """The plan of smallest peak (bytes) that respects the host limit; None when no plan does.

    Its ``peak_bytes`` is the smallest budget that works (the number an InfeasibleError reports).
    Method: max model — the cap search above with objective Σ stored (+ T) and the host row as the
    knapsack; prefix model — a Pareto DP over the layers in order on (stored so far [, host], running peak).
    """
    arr = _Arrays.of(problem)
    if problem.prefix:
        found = _least_prefix_peak(problem, arr)
        return None if found is None else evaluate(_unbounded(problem), found, optimal=True)
    floor = problem.transient_floor_bytes
    levels = np.unique(np.maximum(arr.transient[arr.present], floor))
    transient = np.maximum(arr.transient, floor)
    host = _host_binds(problem, arr)
    limit = float(problem.host_limit_bytes or 0)

    def lower(a, b):
        allowed = arr.present & (transient <= levels[b])
        return levels[a] + np.where(allowed, arr.stored, np.inf).min(axis=1).sum()

    def exact(a, upper):
        allowed = arr.present & (transient <= levels[a])
        if not host:
            j = np.where(allowed, arr.stored, np.inf).argmin(axis=1)
            return levels[a] + arr.stored[np.arange(len(j)), j].sum(), j
        found = mckp.solve(mckp.Knapsack(arr.stored, [arr.host], [limit], allowed), upper - levels[a])
        return None if found is None else (levels[a] + found[0], found[1])

    found = _over_caps(levels, lower, exact)
    return None if found is None else evaluate(_unbounded(problem), found[1], optimal=True)


def _least_prefix_peak(problem: Problem, arr: _Arrays) -> np.ndarray | None:
    """Choices of least prefix-model peak within the host limit: DP keeping Pareto states in
    (stored so far [, host so far]; running max of stored-so-far + transient)."""
    L = len(problem.layers)
    host = _host_binds(problem, arr)
    limit = float(problem.host_limit_bytes or 0)
    light_host = np.concatenate((np.cumsum(np.where(arr.present, arr.host, np.inf).min(axis=1)[::-1])[::-1][1:],
                                 [0.0]))
    P, M = np.zeros(1), np.zeros(1)
    O = np.zeros(1)
    trail = []
    for i in range(L):
        js = np.flatnonzero(arr.present[i])
        nP = (P[:, None] + arr.stored[i, js][None, :]).ravel()
        nO = (O[:, None] + arr.host[i, js][None, :]).ravel()
        nM = np.maximum(np.repeat(M, len(js)), nP + np.tile(arr.transient[i, js], len(P)))
        parent, option = np.repeat(np.arange(len(P)), len(js)), np.tile(js, len(P))
        ok = nO + light_host[i] <= limit if host else np.ones(len(nP), dtype=bool)
        if not ok.any():
            return None
        nP, nO, nM, parent, option = nP[ok], nO[ok], nM[ok], parent[ok], option[ok]
        sel = mckp._pareto([nP, nO] if host else [nP], nM)
        if len(sel) > mckp.MAX_STATES:
            raise mckp.SearchTooLarge(f"the least-peak search holds {len(sel)} partial plans at layer {i}")
        P, O, M = nP[sel], nO[sel], nM[sel]
        trail.append((parent[sel], option[sel]))
    at = int(np.argmin(np.maximum(P + problem.transient_floor_bytes, M)))
    choices = np.zeros(L, dtype=int)
    for i in range(L - 1, -1, -1):
        parent, option = trail[i]
        choices[i] = option[at]
        at = parent[at]
    return choices


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
        f"{' + '.join(problem.fixed_parts) or 'fixed bytes'} alone: {format_bytes(problem.fixed_bytes)} "
        f"({problem.fixed_bytes} bytes)",
        best.peak_bytes)


def solve(problem: Problem) -> Plan:
    """The exact plan: least predicted step time (seconds) with peak ≤ budget and offload ≤ host limit.

    Returns a Plan (``optimal=True``) scored by ``problem.evaluate``.
    Raises InfeasibleError(msg, minimum_bytes) when no plan fits: minimum_bytes is the smallest budget that
    works (bytes), or None when the host limit rules out every plan. Raises mckp.SearchTooLarge when the
    exact search outgrows its memory guard.
    Source: the algorithm in the module docstring (exact; cross-checked against brute force).
    """
    arr = _Arrays.of(problem)
    room = float(problem.budget_bytes - problem.fixed_bytes)
    floor = float(problem.transient_floor_bytes)
    host = _host_binds(problem, arr)
    limit = float(problem.host_limit_bytes or 0)

    def knapsack(allowed, capacity, **prefix):
        if host:
            return mckp.Knapsack(arr.time, [arr.stored, arr.host], [capacity, limit], allowed, **prefix)
        return mckp.Knapsack(arr.time, [arr.stored], [capacity], allowed, **prefix)

    if problem.prefix:   # one knapsack; the running constraint is checked inside the DP
        found = mckp.solve(knapsack(arr.present, room - floor, prefix=arr.transient, prefix_capacity=room))
        found = None if found is None else (found[0], found[1])
    else:                # the max model: branch and bound over the transient cap
        transient = np.maximum(arr.transient, floor)
        levels = np.unique(transient[arr.present])

        def lower(a, b):
            return mckp.lagrangian(knapsack(arr.present & (transient <= levels[b]), room - levels[a]), 1)[0]

        def exact(a, upper):
            return mckp.solve(knapsack(arr.present & (transient <= levels[a]), room - levels[a]), upper)

        found = _over_caps(levels, lower, exact) if room >= levels[0] else None
    if found is None:
        raise _infeasible(problem)
    return _tie_break(problem, arr, _plan(problem, found[1]))


def _tie_break(problem: Problem, arr: _Arrays, plan: Plan) -> Plan:
    """Per layer, move to an option of no more time that holds fewer bytes (stored + transient + host)
    while the plan stays within the budget and the host limit."""
    rows = np.arange(len(plan.choices))
    choices = np.array(plan.choices)
    held = arr.stored + arr.transient + arr.host
    limit = np.inf if problem.host_limit_bytes is None else problem.host_limit_bytes
    for i in range(len(choices)):
        c = choices[i]
        better = np.flatnonzero(arr.present[i] & (arr.time[i] <= arr.time[i, c]) & (held[i] < held[i, c]))
        for j in better[np.argsort(held[i, better], kind="stable")]:
            trial = choices.copy()
            trial[i] = j
            if (_peak(problem, arr, trial) <= problem.budget_bytes
                    and arr.host[rows, trial].sum() <= limit):
                choices = trial
                break
    return _plan(problem, choices)
