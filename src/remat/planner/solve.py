"""Exact planner: the per-layer policy of least predicted step time whose peak fits the budget.

    minimize   Σ_i time[i, c_i]
    subject to peak(c) ≤ budget                                                   (device)
               Σ_i offload[i, c_i] ≤ host_limit                                   (host)

with peak(c) from ``problem``'s memory model. The algorithm is exact for any non-negative times and integer
bytes (it uses no structure of the times):

1. **Max model** (several micro-batches in flight): peak = fixed + Σ_i stored + max(floor, max_i transient), a
   multiple-choice knapsack (MCKP) with a max term. Branch and bound over the transient cap T (the distinct
   transient values T_0 < T_1 < …): for a cap, the rest is an MCKP — options with transient ≤ T, capacity
   budget − fixed − T (a plan whose real max transient is below T is only better off). An interval of caps
   [T_a, T_b] is bounded below by the Lagrangian of "options with transient ≤ T_b, capacity budget − fixed −
   T_a"; intervals are split best-bound first and dropped once their bound reaches the best plan found.
2. **Prefix model** (one micro-batch in flight, ``Problem.prefix``): no max term but the running constraints
   Σ_{k≤i} stored_k + transient_i ≤ budget − fixed, one MCKP with a running constraint.
3. **Exact MCKP** (``remat.planner.mckp``, whose docstring has the details): a Lagrangian bound — under a
   running constraint over a relaxation whose last row merges the last layers, their transient counted
   (the last layers' backward meets every stored byte: what the plain knapsack misses) — a first plan, then a
   dynamic program over the core (reduced-cost fixing) at deepening cuts above the bound, which keeps
   Pareto-optimal partial plans (stored, [host,] cost) and drops those whose completion bound exceeds the cut;
   under a running constraint it visits the last layers first, carrying the excess their transients add.
   When the host row does not bind the bound, the problem is first solved without it: an optimum within the
   host limit is optimal.
4. **Memory guard**: the dynamic program holds at most ``mckp.MAX_STATES`` partial plans per layer and branches
   at most ``mckp.MAX_BRANCH`` partial plans × options at once (a tiny HF Llama's tensor plan with offload, 1,332
   options per block, was killed for memory before); past either,
   the same problem goes to HiGHS as a mixed-integer program (remat.planner.milp, relative gap 0), so ``solve`` returns
   a proven-optimal plan or raises InfeasibleError; ``mckp.SearchTooLarge`` reaches the caller only when HiGHS
   cannot prove an optimum either. Runs of identical layers are one group of counts there (its docstring):
   80 identical blocks × 422 options take HiGHS about a second. It is not tried first: on a Llama-3-8B tensor
   plan (three groups of about 600 options) HiGHS took 257 s where the exact search takes 72 s.

``minimum_budget`` (the smallest budget that works, reported by InfeasibleError): max model — the cap search
with Σ stored as the cost; prefix model — a bisection over multiples of the bytes' gcd whose test is an exact
forward greedy, or with a binding host limit an MCKP probe (a plan within the room and the host limit).

Ties in time are broken afterwards, layer by layer, towards the option holding fewer bytes (device + host)
at no more time — e.g. ``none`` instead of an offload whose transfer the model calls hidden — keeping the
plan feasible. Inside the DP, equal-time partial plans keep the one storing less. Last, ``_canonical`` sorts
the choices of layers with identical options into ``CANONICAL_ORDER`` (full first, none last) when the plan
stays within the budget: a permutation of the same options among identical layers has the same step time
(the same terms summed), the same Σ stored and host bytes, and the same max-model peak, so the plan stays
optimal; the exact search may return any of these equal-time orders, and "full on the first N layers" is the
one Megatron-LM can run (``--recompute-method block``, ``remat.planner.megatron``) and a reader can follow.

Everything is scored at the end by ``problem.evaluate`` in Python integers; sizes below 2**53 bytes are exact
in the float64 arithmetic used here. Exactness is checked against brute force and an independent dynamic
program on random instances, many with ties, binding host limits and tiny search budgets
(tests/test_planner_solve.py); speed by benchmarks/bench_planner.py (1000 heterogeneous layers, both memory
models, host limit unbound and binding).
"""

from __future__ import annotations

import heapq
from collections import defaultdict

import numpy as np

from remat.errors import InfeasibleError
from remat.planner import mckp
from remat.planner.arrays import Arrays, unbounded
from remat.planner.milp import milp
from remat.planner.problem import Plan, Problem, evaluate
from remat.units import format_bytes


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


def _host_binds(problem: Problem, arr: Arrays) -> bool:
    limit = problem.host_limit_bytes
    return limit is not None and np.where(arr.present, arr.host, 0).max(axis=1).sum() > limit


def _peak(problem: Problem, arr: Arrays, choices: np.ndarray) -> float:
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


def minimum_budget(problem: Problem) -> Plan | None:
    """The plan of smallest peak (bytes) that respects the host limit; None when no plan does.

    Its ``peak_bytes`` is the smallest budget that works (the number an InfeasibleError reports).
    Method: max model — the cap search above with objective Σ stored (+ T) and the host row as the
    knapsack; prefix model — ``_least_prefix_peak``; past the exact search's memory guard, ``milp``.
    """
    arr = Arrays.of(problem)
    try:
        found = _least_prefix_peak(problem, arr) if problem.prefix else _least_max_peak(problem, arr)
    except mckp.SearchTooLarge:
        found = milp(problem, arr, least_peak=True)
    return None if found is None else evaluate(unbounded(problem), found, optimal=True)


def _least_max_peak(problem: Problem, arr: Arrays) -> np.ndarray | None:
    """Choices of least max-model peak within the host limit, or None: the cap search with Σ stored (+ T) as
    the cost; at a cap, without a binding host limit the lightest allowed option per layer, else an MCKP with
    the host row as the knapsack."""
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
    return None if found is None else found[1]


def _least_prefix_peak(problem: Problem, arr: Arrays) -> np.ndarray | None:
    """Choices of least prefix-model peak within the host limit, or None when no plan keeps to the limit.

    Peaks above ``fixed_bytes`` are sums and maxima of the options' bytes, so multiples of their gcd g; a
    bisection over those multiples finds the least that fits (``_least``). Whether a device room fits: without
    a binding host limit, the forward greedy ``_PrefixGreedy`` (exact); with one, the least host bytes of a plan
    within that room — ``mckp.solve`` with host bytes as the cost — is at most the limit.
    """
    floor = problem.transient_floor_bytes
    sizes = np.concatenate((arr.stored[arr.present], arr.transient[arr.present], [floor])).astype(np.int64)
    g = max(1, int(np.gcd.reduce(sizes)))
    top = int(np.where(arr.present, arr.stored, 0).max(axis=1).sum()) + int(max(floor, arr.transient.max()))
    units = lambda plan: int(-(-(_peak(problem, arr, plan) - problem.fixed_bytes) // g))
    greedy = _PrefixGreedy(problem, arr)
    plan = _least(lambda k: greedy(k * g), 0, -(-top // g), units)
    if not _host_binds(problem, arr):
        return plan
    limit = float(problem.host_limit_bytes)

    def within_host(k):     # a plan within room k·g and the host limit (host bytes as the cost), or None
        ks = mckp.Knapsack(arr.host, [arr.stored], [k * g - floor], arr.present, prefix=arr.transient,
                           prefix_capacity=k * g)
        found = mckp.solve(ks, limit + 1, enough=limit)    # host bytes are integers: below limit + 1 is within
        return None if found is None else found[1]

    return _least(within_host, units(plan), -(-top // g), units)


def _least(fits, lo: int, hi: int, size):
    """The plan of the least k in [lo, hi] for which fits(k) (a plan or None, monotone in k) gives one, or None
    when fits(hi) gives none: bisection, where a plan found at k of ``size`` s ≤ k moves hi down to s."""
    best = fits(hi)
    if best is None:
        return None
    hi = size(best)
    while lo < hi:
        mid = (lo + hi) // 2
        plan = fits(mid)
        if plan is None:
            lo = mid + 1
        else:
            best, hi = plan, size(plan)
    return best


class _PrefixGreedy:
    """greedy(room) -> a plan whose prefix-model peak is at most fixed_bytes + room (bytes), ignoring the host
    limit, or None when none is.

    Forward greedy: each layer takes, among its options meeting its running constraint (stored so far + stored
    + transient ≤ room), the one storing least — exact, as a plan storing less so far can follow every plan
    storing more; at the end Σ stored + transient floor ≤ room. Plain Python over (stored, need) lists.
    """

    def __init__(self, problem: Problem, arr: Arrays):
        self.floor = problem.transient_floor_bytes
        self.layers = [sorted((float(arr.stored[i, j]), float(arr.stored[i, j] + arr.transient[i, j]), j)
                              for j in np.flatnonzero(arr.present[i])) for i in range(len(arr.present))]

    def __call__(self, room: float) -> np.ndarray | None:
        held, choices = 0.0, []
        for options in self.layers:
            pick = next((o for o in options if held + o[1] <= room), None)
            if pick is None:
                return None
            held += pick[0]
            choices.append(pick[2])
        return np.array(choices) if held + self.floor <= room else None


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
    works (bytes), or None when the host limit rules out every plan. Raises mckp.SearchTooLarge only when the
    exact search outgrows its memory guard and the MILP fallback (``milp``) cannot prove an optimum either.
    Source: the algorithm in the module docstring (exact; cross-checked against brute force).
    """
    arr = Arrays.of(problem)
    try:
        found = _least_time(problem, arr)
    except mckp.SearchTooLarge:
        found = milp(problem, arr)
    if found is None:
        raise _infeasible(problem)
    return _canonical(problem, arr, _tie_break(problem, arr, _plan(problem, found)))


def _least_time(problem: Problem, arr: Arrays) -> np.ndarray | None:
    """Choices of least step time within the budget and the host limit, or None: the prefix model as one
    MCKP with the running constraint; the max model by the cap search (module docstring)."""
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
    else:                # the max model: branch and bound over the transient cap
        transient = np.maximum(arr.transient, floor)
        levels = np.unique(transient[arr.present])

        def lower(a, b):
            return mckp.lagrangian(knapsack(arr.present & (transient <= levels[b]), room - levels[a]), 1)[0]

        def exact(a, upper):
            return mckp.solve(knapsack(arr.present & (transient <= levels[a]), room - levels[a]), upper)

        found = _over_caps(levels, lower, exact) if room >= levels[0] else None
    return None if found is None else found[1]


def _tie_break(problem: Problem, arr: Arrays, plan: Plan) -> Plan:
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


CANONICAL_ORDER = ("full", "offload", "selective", "none")
"""Order of policies along identical layers in a returned plan (``_canonical``): full first, as Megatron-LM's
block method recomputes the first N layers of a stage (TransformerConfig.recompute_method)."""


def _canonical(problem: Problem, arr: Arrays, plan: Plan) -> Plan:
    """The plan with each group of layers of equal options but for their transients (policy, stored bytes,
    seconds, recompute FLOPs and host bytes equal per option; the transient may differ, e.g. by the gradients
    of the layers after it) holding its choices in ``CANONICAL_ORDER`` along the layers (e.g. "full 0–9,
    18–23, none 10–17" → "full 0–15, none 16–23"), when that peak stays within the budget (bytes, checked by
    ``_peak`` here and ``evaluate`` in ``_plan``); otherwise the plan unchanged.

    Within a group the multiset of (policy, stored, seconds, host) is kept, so step time (the same per-layer
    seconds summed), Σ stored and host bytes are unchanged; only the peak can move (the budget check decides).
    Exchanging adjacent (none, full) for (full, none) never raises it when none's transient ≤ full's (both running sums
    of the pair are then bounded by the old ones: P + s_f + t_f ≤ P + s_n + s_f + t_f and
    P + s_f + s_n + t_n ≤ P + s_n + s_f + t_f); for other options the budget check decides. Layers whose
    options differ otherwise are never permuted.
    """
    groups: dict[tuple, list[int]] = defaultdict(list)
    for i, layer in enumerate(problem.layers):
        groups[tuple((o.policy, o.stored_bytes, o.time_s, o.recompute_flops, o.offload_bytes)
                     for o in layer.options)].append(i)
    choices = np.array(plan.choices)
    trial = choices.copy()
    for options, idx in groups.items():
        rank = [CANONICAL_ORDER.index(o[0]) for o in options]
        trial[idx] = sorted(choices[idx], key=lambda c: rank[c])
    if (trial == choices).all() or _peak(problem, arr, trial) > problem.budget_bytes:
        return plan
    return _plan(problem, trial)
