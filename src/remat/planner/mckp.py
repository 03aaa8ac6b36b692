"""Exact multiple-choice knapsack (MCKP) with one or two capacity rows — the inner problem of the planner.

    minimize Σ_i cost[i, c_i]   subject to   Σ_i weight_k[i, c_i] ≤ capacity_k   (k = 0, or k = 0 and 1)
    [and, optionally, a running constraint on row 0: Σ_{l≤i} weight_0[l, c_l] + prefix[i, c_i] ≤ prefix_capacity
     for every i, in row order]

over one choice c_i per row i among its allowed columns. Costs are any non-negative reals (seconds, or bytes
when the planner minimizes memory), weights integers held in float64 (bytes; exact below 2**53). The method
(Martello & Toth, "Knapsack Problems", 1990, ch. 2 and 6; Pisinger's core algorithms for the MCKP; the cut
schedule after IDA*'s, Korf 1985, with controlled re-expansion, Sarkar et al. 1991):

1. ``lagrangian``: for multipliers λ ≥ 0, LB = Σ_i min_j (cost + Σ_k λ_k·weight_k) − Σ_k λ_k·capacity_k bounds
   the optimum from below (weak duality); λ maximizes it exactly along one multiplier (``_ascend``: the breakpoints
   of the rows' lower envelopes), by coordinate ascent for two rows. For one row it is the LP relaxation.
   With d[i, j] ≥ 0 the reduced cost of an option (its score above its row's least), every plan x costs
       LB + Σ_i d[i, x_i] + Σ_k λ_k·(capacity_k − W_k(x)),
   two sums that are ≥ 0 when x fits. Under a running constraint LB is taken over ``merged_tail``, where the
   last rows' combinations weigh their stored bytes plus the transient they add (the running constraints of the
   last rows are what the plain knapsack misses; the relaxation's bound holds for the problem).
   When row 1's multiplier is 0, the problem without row 1 is solved first: if its optimum fits row 1, it is
   the optimum; else its value raises the lower bound.
2. A first plan: ``greedy`` (the Lagrangian argmin, repaired then improved one switch at a time), under a
   running constraint a beam search (the 16 states of least bound per row of ``_dp``) — an upper bound U.
3. Cuts: ``_dp`` explores every plan of cost ≤ cut and returns the best plan found below U. The first cut is
   U (the whole gap), on a budget of partial plans. A search that finds no plan within its cut proves that
   none costs less than the least bound it dropped (the floor rises) and the next cut lets back in about
   twice as many dropped states as were kept (``_next_cut``), held to an 8-fold growth of the states at the
   rate seen between cuts; a search over budget (partial plans kept, or states branched: one row can branch
   tens of millions) is retried with 4× the budget closer to the floor (at the whole gap if it found a plan
   that narrowed the gap 4-fold). Under a running constraint, runs of identical adjacent rows take their
   options in one order only (remat.planner.symmetry: any plan has one as good in that order). The first
   cut holding a plan has found the optimum. The work grows steeply with the cut, so the cuts near OPT, not
   U, decide the time.
4. ``_dp`` over the core: reduced-cost fixing keeps the options with LB + d ≤ cut; rows left with one option are
   fixed (their sums folded), the others form the core, visited clear-cut rows first (ties last, widest
   first). Under a running constraint the rows are visited from the last backwards while they can matter,
   carrying the excess E = max over the rows seen of (prefix − Σ weight_0 of the rows after it): every running
   constraint holds iff Σ weight_0 + E ≤ prefix_capacity (``_Walk``). It keeps Pareto-optimal partial plans
   (weights so far [, E], cost so far) and drops a state when it cannot fit (W_k + the rest's lightest >
   capacity_k, capacity_0 less E) or when its completion bound exceeds the cut:
       C + Σ_rest min score − Σ_k λ_k·min(capacity_k − W_k, heaviest rest_k)
   (the Lagrangian bound of the rest, whose weight is at most its heaviest options: in degenerate instances,
   where many options tie in cost per byte, only states the rest can still bring close to the capacity
   survive). Each state completed by the rest's base options (least reduced cost, then least weight), when
   that fits, is a plan: the best one lowers U on the way. Identical rows reach identical states, which merge.

``solve`` returns (value, choices) or None when nothing beats ``upper``. It is exact: every pruning rule only
discards plans provably no better than the cut or than a plan in hand (with a 1e-12 relative float slack on the
safe side), whatever the heuristics choose for the cuts. Its one guard, ``MAX_STATES``, bounds memory:
``SearchTooLarge`` then reports the size instead of returning an unproven plan (the planner falls back to a
MILP; tests/test_planner_solve.py, benchmarks/bench_planner.py).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from remat.planner import symmetry
from remat.planner.dominance import pareto
from remat.planner.knapsack import REL, Dual, Knapsack, after_sum, float_slack, greedy, lagrangian

__all__ = ["MAX_STATES", "REL", "Knapsack", "SearchTooLarge", "greedy", "lagrangian", "solve"]

MAX_STATES = 2_000_000     # partial plans per row, and 20× that over one search (memory guard)
MAX_BRANCH = 32_000_000    # states × options one row may branch into (memory guard: its arrays are made at once)
_BEAM = 16          # states per row of the first, heuristic search
_SAMPLE = 1 << 16   # least dropped bounds kept per search (to place the next cut)
_GROWN = 64         # states the next cut lets in at least (of those the last one dropped for their bound)
_BUDGET = 200_000   # partial plans a search may hold (at first; then 16× the last one's) before a closer cut is tried
_WORK = 16          # and states it may branch (each state × each kept option), per partial plan of its budget


class SearchTooLarge(RuntimeError):
    """The exact search would exceed its memory guard; no plan is returned rather than an unproven one."""


def solve(ks: Knapsack, upper: float = np.inf, enough: float = -np.inf) -> tuple[float, np.ndarray] | None:
    """Least Σ cost over plans within the capacities (and the running constraint), if below ``upper`` (+ slack):
    (value, choices [L]) or None. With ``enough``, any plan of cost ≤ enough found on the way is returned at
    once (a feasibility question: is there a plan that cheap?).

    Raises SearchTooLarge when the core search would hold more partial plans than its memory guard (it
    never returns a plan it has not proven optimal).
    """
    dual = Dual.of(ks)
    if not (np.isfinite(dual.bound) and dual.bound <= upper + float_slack(upper)):
        return None
    floor = dual.bound
    if len(ks.weights) > 1 and dual.lam[1] == 0:    # row 1 does not bind the bound: first solve without it
        found = solve(dataclasses.replace(ks, weights=ks.weights[:1], capacities=ks.capacities[:1]), upper)
        if found is None or ks.fits(found[1]):
            return found                            # the relaxation's optimum fits: optimal
        floor = max(floor, found[0])
    return _search(ks, dual, floor, upper, enough)


def _search(ks: Knapsack, dual: "Dual", floor: float, upper: float, enough: float):
    """``solve`` after its bounds: a first plan, then ``_dp`` at deepening cuts above ``floor`` (a lower
    bound) — see the module docstring."""
    best = _first_plan(ks, dual, upper)
    if best is not None and best[0] <= enough:
        return best
    upper = upper if best is None else best[0]
    budget, last = _BUDGET, (floor, 1)
    cut = upper if np.isfinite(upper) else floor + dual.first_step(ks)    # the whole gap first, on a budget
    while True:
        run = _dp(ks, dual, min(cut, upper), upper, budget)
        if run.found is not None:
            best, upper = run.found, run.found[0]
            if upper <= enough:
                return best
        if run.held is None:    # over budget: a larger budget, and the whole (narrower) gap or a closer cut
            narrowed = run.found is not None and upper - floor < (cut - floor) / 4
            cut = upper if narrowed else floor + (min(cut, upper) - floor) / (64 if last[1] == 1 else 4)
            budget *= 4
            continue
        if run.dropped == 0 or upper <= cut + float_slack(cut):
            return best
        floor = max(floor, min(run.near[0], upper))     # no plan ≤ cut: none costs less than what was dropped
        cut, last = _next_cut(run, cut, last, upper), (cut, run.held)
        budget = max(budget, 16 * run.held)


def _first_plan(ks: Knapsack, dual: "Dual", upper: float) -> tuple[float, np.ndarray] | None:
    """A first plan below ``upper``, or None: ``greedy``; under a running constraint (where the greedy knows
    less) a beam search first — the ``_BEAM`` states of least bound per row of ``_dp``."""
    found = _dp(ks, dual, upper, upper, beam=_BEAM).found if ks.prefix is not None else None
    if found is None and (plan := greedy(ks, dual.lam)) is not None:
        found = (ks.value(plan), plan)
    return found if found is not None and found[0] < upper else None


def _next_cut(run: "_Run", cut: float, last, upper: float) -> float:
    """The cut after one that found no plan. ``upper`` when it dropped few states for their bound (a quarter
    of those it kept: ties, not costs, decide the work); else the least cut that lets back in twice as many of
    the states and options dropped for their bound as were kept, but not so far beyond ``cut`` that the partial
    plans kept, which grow about exponentially with the cut, would grow more than 8-fold at the rate seen since
    the cut before (``last`` = (cut, held); at first the bound, with one state)."""
    if run.dropped <= run.held // 4:
        return upper
    grown = max(_GROWN, 2 * run.held)
    nxt = run.near[grown - 1] if len(run.near) >= grown else upper
    if cut > last[0] and run.held > max(last[1], 1):
        nxt = min(nxt, cut + np.log(8) * (cut - last[0]) / np.log(run.held / max(last[1], 1)))
    return nxt


@dataclass
class _Walk:
    """The visiting order of ``_dp`` and what it needs per core row k (a row with more than one kept option).

    Order: without a running constraint, the fixed rows (one kept option: folded) then the core rows,
    clear-cut ones first. With one, the rows are visited backwards from the last, carrying the *excess*
    E = max over the rows seen of (prefix − Σ weight_0 of the rows after it), started at prefix_capacity −
    capacity_0: every running constraint holds iff Σ weight_0 + E ≤ prefix_capacity at the end. Once every
    earlier row is sure to add nothing to E (its largest prefix minus the least weight the rows after it can
    hold is below the start), those earlier rows — the ``head`` — are visited like the unconstrained case.

    Per core row k: the fixed rows' sums since the previous core row (``block_*``, one entry more than the core
    rows), whether the row can raise E (``tracked``), and over the rows after it in the visiting order: Σ least
    score, lightest / heaviest / base weights ([m, n]), base cost, and the excess their base options would add
    (``base_excess``, relative to the weight-0 held before them).
    """

    core: np.ndarray            # [n] row indices in visiting order
    options: list               # per core row, its kept options
    moves: list                 # per core row, their weights [m (+1: E, 0), J]
    base: np.ndarray            # [L] the option of least reduced cost (then least weight 0) per row
    block_cost: np.ndarray      # [n + 1]
    block_weight: np.ndarray    # [m, n + 1]
    block_excess: np.ndarray    # [n + 1]
    tracked: np.ndarray         # [n] bool
    best_rest: np.ndarray
    light_rest: np.ndarray
    heavy_rest: np.ndarray
    base_rest: np.ndarray
    base_cost_rest: np.ndarray
    base_excess: np.ndarray
    rank: list                  # per core row its options' ranks in a run of identical rows (remat.planner.symmetry)
    continues: np.ndarray       # [n] bool: the row continues the run of the core row before it

    @classmethod
    def of(cls, ks: Knapsack, dual: Dual, keep) -> "_Walk":
        L = len(keep)
        base = np.where(keep & (dual.reduced == 0), ks.weights[0], np.inf).argmin(axis=1)
        order, tail = _visiting_order(ks, dual, keep)
        multi = keep.sum(axis=1) > 1
        at = np.flatnonzero(multi[order])                   # positions of the core rows in ``order``
        rows, fixed = np.arange(L), ~multi[order]
        W = np.stack(ks.weights)[:, order]                  # [m, L, K] in visiting order
        kept = keep[order]
        base_w, base_c = W[:, rows, base[order]], ks.cost[order, base[order]]
        after = lambda v: after_sum(v)[..., at]
        held = np.cumsum(np.where(fixed, np.vstack((base_c, base_w)), 0.0), axis=1)
        blocks = np.diff(np.concatenate((np.zeros((len(held), 1)), held[:, at], held[:, -1:]), axis=1), axis=1)
        block_excess, base_excess = _excesses(ks, order, tail, base, base_w[0], at, fixed)
        options = [np.flatnonzero(keep[i]) for i in order[at]]
        rank, continues = symmetry.ranks(ks, keep, order[at], options)
        extra = int(ks.prefix is not None) + int(bool(rank))    # rows of E and of the rank
        stacked = np.concatenate((np.stack(ks.weights), np.zeros((extra, L, keep.shape[1]))))
        return cls(order[at], options, [stacked[:, i, js] for i, js in zip(order[at], options)], base,
                   blocks[0], blocks[1:], block_excess, tail[order][at], after(dual.least[order]),
                   after(np.where(kept, W, np.inf).min(axis=2)), after(np.where(kept, W, -np.inf).max(axis=2)),
                   after(base_w), after(base_c), base_excess, rank, continues)


def _visiting_order(ks: Knapsack, dual: Dual, keep) -> tuple[np.ndarray, np.ndarray]:
    """(order [L], tail [L] bool): the tail rows (``_tail``) from the last backwards, then the others — fixed
    rows first, then the core rows clear-cut first (largest second-least reduced cost), close calls last, among
    ties the widest first (the window bound then closes on them soonest)."""
    tail = _tail(ks, keep)
    head = np.flatnonzero(~tail)
    multi = keep.sum(axis=1) > 1
    core = head[multi[head]]
    second = np.sort(np.where(keep, dual.reduced, np.inf)[core], axis=1)[:, 1] if len(core) else core
    order = np.concatenate((np.flatnonzero(tail)[::-1], head[~multi[head]],
                            core[np.lexsort((-_spread(ks, keep)[core], -second))]))
    return order, tail


def _excesses(ks: Knapsack, order, tail, base, base_w0, at, fixed) -> tuple[np.ndarray, np.ndarray]:
    """(block [n + 1], rest [n]) under a running constraint (else −inf): the excess E the fixed rows of each
    block raise, relative to the weight-0 held when the block starts, and the excess the rest's base options
    raise after each core row, relative to the weight-0 held after it (E of a row = its prefix − Σ weight_0 of
    the rows after it in layer order, i.e. before it in the visiting order)."""
    L = len(order)
    rise = np.full(L, -np.inf)                              # each tail row's base prefix − weight-0 seen before it
    if ks.prefix is not None:
        seen = np.concatenate(([0.0], np.cumsum(base_w0)[:-1]))
        rise = np.where(tail[order], ks.prefix[order, base[order]] - seen, -np.inf)
    block = np.full(len(at) + 1, -np.inf)
    np.maximum.at(block, np.searchsorted(at, np.arange(L)[fixed]), rise[fixed])
    start = np.concatenate(([0.0], np.cumsum(base_w0)[at]))          # weight-0 seen when each block starts
    later = np.concatenate((np.maximum.accumulate(rise[::-1])[::-1][1:], [-np.inf]))
    return block + start, later[at] + start[1:]


def _tail(ks: Knapsack, keep) -> np.ndarray:
    """[L] bool: the rows whose excess ``_dp`` tracks — all from the first row that might raise it (its largest
    kept prefix, less the least weight-0 the rows after it hold, above prefix_capacity − capacity_0)."""
    L = len(keep)
    if ks.prefix is None:
        return np.zeros(L, dtype=bool)
    light_after = after_sum(np.where(keep, ks.weights[0], np.inf).min(axis=1))
    rises = np.where(keep, ks.prefix, -np.inf).max(axis=1) - light_after > ks.prefix_capacity - ks.capacities[0]
    return np.arange(L) >= (np.argmax(rises) if rises.any() else L)


def _spread(ks: Knapsack, keep) -> np.ndarray:
    """Per row, how far its kept options' weights range, relative to the capacities ([L])."""
    return sum((np.where(keep, w, -np.inf).max(axis=1) - np.where(keep, w, np.inf).min(axis=1)) / max(cap, 1.0)
               for w, cap in zip(ks.weights, ks.capacities))


def _dp(ks: Knapsack, dual: Dual, cut: float, upper: float, budget: float = np.inf, beam: int | None = None):
    """The best plan of cost ≤ cut (and < upper), if any, by the core DP of the module docstring.

    A state is a column of X ([m (+1: the excess E under a running constraint), n]) and its cost C [n].
    Returns a _Run: ``found`` = (value, choices) | None; ``held`` = partial plans kept in all, or None when
    they outgrew ``budget`` (the search stopped early: the plan found, if any, is only a better incumbent);
    ``dropped`` = states and options dropped for their bound (0: every plan below ``upper`` was seen);
    ``near`` = the least of their bounds. With ``beam``, only the ``beam`` states of least bound survive each
    row: a heuristic (held is None).
    """
    slack = float_slack(min(cut, upper))
    keep = ks.allowed & (dual.bound + dual.reduced <= min(cut + slack, upper - slack))
    dropped = int((keep != ks.allowed).sum())
    near = _Lowest(dual.bound + dual.reduced[ks.allowed & ~keep])
    if not keep.any(axis=1).all():
        return _Run(None, 0, dropped, near.values)
    walk = _Walk.of(ks, dual, keep)
    found = (upper, None)                                   # (value, where) of the best plan below upper
    if ks.fits(walk.base) and ks.value(walk.base) < upper:
        found = (ks.value(walk.base), None)
    X, C = walk.block_weight[:, :1], walk.block_cost[:1]   # states: X [m (+1: E), n], C [n]
    if ks.prefix is not None:
        X = np.vstack((X, [[max(ks.prefix_capacity - ks.capacities[0], walk.block_excess[0])]]))
    if walk.rank:
        X = np.vstack((X, [[0.0]]))
    trail, held, work, over = [], 0, 0, False
    for k, (i, js) in enumerate(zip(walk.core, walk.options)):
        nX, nC, free = _branch(ks, walk, X, C, k)
        work += len(nC)
        fit = (free >= walk.light_rest[:, k:k + 1]).all(axis=0)
        if walk.rank and walk.rank[k] is not None:
            carries = k + 1 < len(walk.core) and walk.continues[k + 1]
            if (ordered := symmetry.ranked_branch(walk.rank[k], walk.continues[k], carries, X[-1], nX)) is not None:
                fit &= ordered
        elif walk.rank:
            nX[-1] = 0.0
        lower = nC + walk.best_rest[k] - dual.lam @ np.minimum(free, walk.heavy_rest[:, k:k + 1])
        ok = fit & (lower <= min(cut + slack, found[0] - slack))
        idx = np.flatnonzero(ok)
        if (fits := int(np.count_nonzero(fit))) > len(idx):
            dropped += fits - len(idx)
            near.add(lower[fit & ~ok])
        if len(idx) == 0:
            break
        sel = idx[pareto(nX[:, idx], nC[idx])]
        if beam is not None and len(sel) > beam:
            sel = sel[np.argpartition(lower[sel], beam)[:beam]]
        X, C = nX[:, sel], nC[sel]
        trail.append((sel // len(js), js[sel % len(js)]))
        held += len(sel)
        if len(sel) > MAX_STATES or held > 20 * MAX_STATES:
            raise SearchTooLarge(f"the exact search holds {held} partial plans after {k + 1} of "
                                 f"{len(walk.core)} core layers")
        done = _completed(ks, walk, X, C, k)                # each state completed by the rest's base options
        if done[a := int(np.argmin(done))] < found[0] - slack:
            found = (float(done[a]), (k, a))
        if (over := held > budget or work > _WORK * budget):
            break
    plan = (found[0], _choices(walk, trail, found[1])) if found[0] < upper else None
    return _Run(plan, None if beam is not None or over else held, dropped, near.values)


def _branch(ks: Knapsack, walk: _Walk, X, C, k):
    """States X [r, n], C [n] before core row k -> after it: (X [r, n·J], C [n·J], capacity left per weight
    row [m, n·J]; row 0's less the excess E under a running constraint). First the fixed rows since the last
    core row (their sums, and under a running constraint the excess they raise), then each kept option.
    SearchTooLarge past MAX_BRANCH states × options (the arrays are made at once)."""
    i, js, m = walk.core[k], walk.options[k], len(ks.weights)
    if len(C) * len(js) > MAX_BRANCH:
        raise SearchTooLarge(f"the exact search would branch {len(C)} partial plans × {len(js)} options at core "
                             f"layer {k + 1} of {len(walk.core)}")
    prefix = ks.prefix is not None
    if k:
        X = X.copy()
        if prefix:
            X[m] = np.maximum(X[m], walk.block_excess[k] - X[0])
        X[:m] += walk.block_weight[:, k:k + 1]
        C = C + walk.block_cost[k]
    nX = X[:, :, None] + walk.moves[k][:, None, :]          # [r, n, J]
    if prefix and walk.tracked[k]:
        nX[m] = np.maximum(nX[m], ks.prefix[i, js] - X[0][:, None])
    nX = nX.reshape(len(X), -1)
    free = np.array(ks.capacities)[:, None] - nX[:m]
    if prefix:
        free[0] = ks.prefix_capacity - nX[m] - nX[0]
    return nX, (C[:, None] + ks.cost[i, js]).ravel(), free


def _completed(ks: Knapsack, walk: _Walk, X, C, k) -> np.ndarray:
    """Per state after core row k, the cost of its plan completed by the rest's base options, +inf where
    that plan does not fit ([n])."""
    m = len(ks.weights)
    fine = (X[:m] + walk.base_rest[:, k:k + 1] <= np.array(ks.capacities)[:, None]).all(axis=0)
    if ks.prefix is not None:
        fine &= X[0] + walk.base_rest[0, k] + np.maximum(X[m], walk.base_excess[k] - X[0]) <= ks.prefix_capacity
    return np.where(fine, C + walk.base_cost_rest[k], np.inf)


class _Run(NamedTuple):
    found: tuple[float, np.ndarray] | None
    held: int | None
    dropped: int
    near: np.ndarray    # the least bounds of what was dropped for its bound, ascending: no plan not found costs less


class _Lowest:
    """The ``_SAMPLE`` least of the values added (``values``: ascending)."""

    def __init__(self, values):
        self.parts, self.size = [np.asarray(values, dtype=float)], len(values)

    def add(self, values):
        self.parts.append(values)
        self.size += len(values)
        if self.size > 4 * _SAMPLE:
            self.parts = [self.values]
            self.size = len(self.parts[0])

    @property
    def values(self) -> np.ndarray:
        joined = np.concatenate(self.parts)
        return np.sort(joined if len(joined) <= _SAMPLE else np.partition(joined, _SAMPLE - 1)[:_SAMPLE])


def _choices(walk: _Walk, trail, at) -> np.ndarray:
    """The plan of state ``at`` = (core step, state index) completed by base options; None = all base."""
    choices = walk.base.copy()
    if at is not None:
        k, a = at
        for step in range(k, -1, -1):
            parent, option = trail[step]
            choices[walk.core[step]] = option[a]
            a = parent[a]
    return choices
