"""Exact multiple-choice knapsack (MCKP) with one or two capacity rows — the inner problem of the planner.

    minimize Σ_i cost[i, c_i]   subject to   Σ_i weight_k[i, c_i] ≤ capacity_k   (k = 0, or k = 0 and 1)

over one choice c_i per row i among its allowed columns. Costs are real (seconds), weights integers held in
float64 (bytes; exact below 2**53). The method (Martello & Toth, "Knapsack Problems", 1990, ch. 2 and 6;
Pisinger's core algorithms for the MCKP):

1. ``lagrangian``: for multipliers λ ≥ 0, Σ_i min_j (cost + Σ_k λ_k·weight_k) − Σ_k λ_k·capacity_k bounds the
   optimum from below (weak duality); λ is tuned by bisection on the subgradient (coordinate ascent for two
   rows). At the best single λ it equals the LP relaxation.
2. ``greedy``: a feasible plan — the Lagrangian argmin, repaired then improved one switch at a time — gives an
   upper bound.
3. Reduced-cost fixing drops every option whose reduced cost already exceeds the gap between the bounds; the
   rows left with more than one option form the core.
4. ``_dp`` over the core keeps Pareto-optimal partial plans (weights, cost), pruning any whose Lagrangian
   completion bound exceeds the incumbent; the last state of least cost is the optimum.

``solve`` returns (value, choices) or None when nothing beats ``upper``. It is exact: every pruning rule only
discards plans provably no better than one kept (with a 1e-12 relative float slack on the safe side).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

REL = 1e-12          # relative float slack: prune only what is worse by more than this
MAX_STATES = 1_000_000     # partial plans per row, and 20× that over a whole search (memory guard)
BEAM = 256
_BINS = 32


class SearchTooLarge(RuntimeError):
    """The exact search would exceed its memory guard; no plan is returned rather than an unproven one."""


@dataclass
class Knapsack:
    """cost [L, K]; weights: one or two [L, K] arrays; capacities: as many floats; allowed [L, K] bool.

    prefix [L, K] (optional): a running constraint on row 0 — for every i, Σ_{k≤i} weight_0[k] + prefix[i, c_i]
    ≤ prefix_capacity (the planner's "backward frees layers from the last" memory model).
    """

    cost: np.ndarray
    weights: list[np.ndarray]
    capacities: list[float]
    allowed: np.ndarray
    prefix: np.ndarray | None = None
    prefix_capacity: float = np.inf

    def scores(self, lam) -> np.ndarray:
        """cost + Σ_k λ_k·weight_k, +inf where not allowed ([L, K])."""
        total = self.cost + sum(l * w for l, w in zip(lam, self.weights))
        return np.where(self.allowed, total, np.inf)

    def lightest(self, k: int) -> np.ndarray:
        """Per row, the least allowed weight of row k ([L])."""
        return np.where(self.allowed, self.weights[k], np.inf).min(axis=1)

    def used(self, choices) -> list[float]:
        rows = np.arange(len(choices))
        return [float(w[rows, choices].sum()) for w in self.weights]

    def fits(self, choices) -> bool:
        if not all(u <= c for u, c in zip(self.used(choices), self.capacities)):
            return False
        if self.prefix is None:
            return True
        rows = np.arange(len(choices))
        running = np.cumsum(self.weights[0][rows, choices]) + self.prefix[rows, choices]
        return bool((running <= self.prefix_capacity).all())

    def value(self, choices) -> float:
        return float(self.cost[np.arange(len(choices)), choices].sum())


def lagrangian(ks: Knapsack, rounds: int = 4) -> tuple[float, list[float]]:
    """(lower bound, multipliers λ) of the MCKP; bound = +inf when even the lightest options overflow a row."""
    if any(ks.lightest(k).sum() > cap for k, cap in enumerate(ks.capacities)):
        return np.inf, [0.0] * len(ks.weights)
    lam = [0.0] * len(ks.weights)

    def dual(lam):
        s = ks.scores(lam)
        j = s.argmin(axis=1)
        return s[np.arange(len(j)), j].sum() - sum(l * c for l, c in zip(lam, ks.capacities)), j

    best = dual(lam)[0]
    for _ in range(rounds if len(lam) > 1 else 1):
        for k, cap in enumerate(ks.capacities):
            def slope(x):
                trial = lam[:k] + [x] + lam[k + 1:]
                value, j = dual(trial)
                return value, ks.weights[k][np.arange(len(j)), j].sum() - cap
            lo, hi = 0.0, max(lam[k], 1.0)
            value, g = slope(lo)
            if g <= 0:
                lam[k] = 0.0
                best = max(best, value)
                continue
            while slope(hi)[1] > 0 and hi < 1e300:
                lo, hi = hi, hi * 4.0
            top, top_x = -np.inf, hi
            for _ in range(64):
                mid = 0.5 * (lo + hi)
                value, g = slope(mid)
                if value > top:
                    top, top_x = value, mid
                lo, hi = (mid, hi) if g > 0 else (lo, mid)
            value = slope(hi)[0]
            if value > top:
                top, top_x = value, hi
            lam[k] = top_x
            best = max(best, top)
    return best, lam


def greedy(ks: Knapsack, lam) -> np.ndarray | None:
    """A feasible plan (choices [L]) or None: Lagrangian argmin, repaired, then improved switch by switch."""
    rows = np.arange(ks.cost.shape[0])
    choices = ks.scores(lam).argmin(axis=1)
    caps = np.array(ks.capacities)
    norm = np.maximum(np.abs(caps), 1.0)
    W = np.stack(ks.weights)                                     # [k, L, K]
    for _ in range(4 * len(rows) + 8):                           # repair: least cost per unit of overflow
        used = W[:, rows, choices].sum(axis=1)
        over = np.maximum(used - caps, 0.0) / norm
        if not over.any():
            break
        new_used = used[:, None, None] - W[:, rows, choices][:, :, None] + W
        gain = over.sum() - (np.maximum(new_used - caps[:, None, None], 0.0) / norm[:, None, None]).sum(axis=0)
        dc = ks.cost - ks.cost[rows, choices][:, None]
        ratio = np.where(ks.allowed & (gain > 0), dc / np.where(gain > 0, gain, 1.0), np.inf)
        if not np.isfinite(ratio).any():
            return None
        i, j = np.unravel_index(np.argmin(ratio), ratio.shape)
        choices[i] = j
    else:
        return None
    for _ in range(4 * len(rows) + 8):                           # improve: largest saving that still fits
        used = W[:, rows, choices].sum(axis=1)
        new_used = used[:, None, None] - W[:, rows, choices][:, :, None] + W
        ok = ks.allowed & (new_used <= caps[:, None, None]).all(axis=0)
        dc = np.where(ok, ks.cost - ks.cost[rows, choices][:, None], np.inf)
        i, j = np.unravel_index(np.argmin(dc), dc.shape)
        if not dc[i, j] < 0:
            break
        choices[i] = j
    return choices if ks.fits(choices) else None


def solve(ks: Knapsack, upper: float = np.inf) -> tuple[float, np.ndarray] | None:
    """Least Σ cost over plans within the capacities, if below ``upper`` (+ slack): (value, choices) or None.

    Raises SearchTooLarge when the core search would hold more partial plans than its memory guard (it
    never returns a plan it has not proven optimal).
    """
    bound, lam = lagrangian(ks)
    if not bound <= upper + REL * abs(upper):
        return None
    incumbent = greedy(ks, lam)
    if incumbent is not None:
        upper = min(upper, ks.value(incumbent))
    scores = ks.scores(lam)
    best = scores.min(axis=1)

    def core(upper):
        slack = REL * max(1.0, abs(upper)) if np.isfinite(upper) else np.inf
        return ks.allowed & (bound + scores - best[:, None] <= upper + slack), slack  # reduced-cost fixing

    keep, slack = core(upper)
    if not keep.any(axis=1).all():
        return None
    if (keep.sum(axis=1) > 1).sum() > 16:   # a beam search first: a near-optimal plan tightens the fixing
        found = _dp(ks, keep, upper, slack, lam, best, beam=BEAM)
        if found is not None and found[0] < upper:
            upper = found[0]
            keep, slack = core(upper)
    return _dp(ks, keep, upper, slack, lam, best)


def _dp(ks: Knapsack, keep, upper, slack, lam, best, beam: int | None = None):
    """Pareto DP over the rows with more than one kept option (all rows, in order, when a prefix constraint
    applies); see the module docstring.

    With ``beam``, only the ``beam`` partial plans of least bound survive each row: a heuristic (an upper
    bound), never the final answer.
    """
    L, m = ks.cost.shape[0], len(ks.weights)
    choices = np.argmax(keep, axis=1)                      # the single option of fixed rows
    single = keep.sum(axis=1) == 1
    if ks.prefix is not None:
        rows = np.arange(L)                                 # the running constraint needs layer order
    else:                                                   # else: clear-cut rows first, close calls last
        rows = np.flatnonzero(~single)
        if len(rows):
            scores = np.sort(np.where(keep, ks.scores(lam), np.inf)[rows], axis=1)
            rows = rows[np.argsort(scores[:, 0] - scores[:, 1], kind="stable")]
    folded = np.setdiff1d(np.arange(L), rows)               # fixed rows summed up front
    base = ks.cost[folded, choices[folded]].sum()
    caps = [c - w[folded, choices[folded]].sum() for c, w in zip(ks.capacities, ks.weights)]
    if any(c < 0 for c in caps):
        return None
    tail = lambda v: np.concatenate((np.cumsum(v[rows][::-1])[::-1][1:], [0.0]))  # Σ over later rows
    light_rest = [tail(np.where(keep, w, np.inf).min(axis=1)) for w in ks.weights]
    offset = base + tail(best) - sum(l * c for l, c in zip(lam, caps))
    room = _prefix_room(ks, keep) if ks.prefix is not None else None
    W = [np.zeros(1) for _ in range(m)]
    C = np.zeros(1)
    trail, held = [], 0
    for k, i in enumerate(rows):
        js = np.flatnonzero(keep[i])
        nW = [(w[:, None] + ks.weights[q][i, js][None, :]).ravel() for q, w in enumerate(W)]
        nC = (C[:, None] + ks.cost[i, js][None, :]).ravel()
        option = np.tile(js, len(C))
        ok = nC + sum(l * w for l, w in zip(lam, nW)) + offset[k] <= upper + slack
        for q in range(m):
            ok &= nW[q] + light_rest[q][k] <= caps[q]
        if ks.prefix is not None:   # this row's running constraint, and what every later row will need
            ok &= (nW[0] + ks.prefix[i, option] <= ks.prefix_capacity) & (nW[0] <= room[k])
        parent = np.repeat(np.arange(len(C)), len(js))[ok]
        option = option[ok]
        nW, nC = [w[ok] for w in nW], nC[ok]
        if len(nC) == 0:
            return None
        sel = _pareto(nW, nC) if len(js) > 1 else np.arange(len(nC))  # a shift keeps the Pareto set
        if beam is not None and len(sel) > beam:
            score = nC[sel] + sum(l * w[sel] for l, w in zip(lam, nW))
            sel = sel[np.argpartition(score, beam)[:beam]]
        held += len(sel) if len(js) > 1 else 0
        if len(sel) > MAX_STATES or held > 20 * MAX_STATES:
            raise SearchTooLarge(f"the exact search holds {held} partial plans after {k + 1} of {len(rows)} "
                                 "layers (a binding host limit on many distinct layers)")
        W, C = [w[sel] for w in nW], nC[sel]
        trail.append((parent[sel], option[sel]))
    at = int(np.lexsort((W[0], C))[0])
    value = float(base + C[at])
    if value > upper + slack:
        return None
    for k in range(len(rows) - 1, -1, -1):
        parent, option = trail[k]
        choices[rows[k]] = option[at]
        at = parent[at]
    return value, choices


def _prefix_room(ks: Knapsack, keep) -> np.ndarray:
    """room[k]: the most weight-0 a partial plan may hold after row k so that every later row i can still meet
    its running constraint — Σ of the lightest kept weight of the rows between, plus row i's least
    weight + prefix, ≤ prefix_capacity (a necessary condition; [L] floats, +inf after the last row)."""
    w0 = np.where(keep, ks.weights[0], np.inf)
    need = np.where(keep, ks.weights[0] + ks.prefix, np.inf).min(axis=1)
    light = w0.min(axis=1)
    room = np.full(len(need), np.inf)
    for k in range(len(need) - 2, -1, -1):
        room[k] = min(ks.prefix_capacity - need[k + 1], room[k + 1] - light[k + 1])
    return room


def _pareto(W, C):
    """Indices of states (weights W[0] [, W[1]], cost C) to keep; only dominated states are dropped.

    One weight: sort by (W0, C) and keep each state cheaper than all before it — the exact Pareto set.
    Two weights: sort by (W0, C); a state is dropped when an earlier state has a smaller W1 bin (W1 cut at
    its quantiles) and no more cost, or when the cheapest earlier state has no more W1 and no more cost —
    a sound partial filter (each rule drops a state only for another with no more of anything).
    """
    if len(W) == 1:   # the states arrive as a few runs sorted by W0: a stable sort merges them fast
        order = np.argsort(W[0], kind="stable")
        Ss, Cs = W[0][order], C[order]
        keep = Cs < np.minimum.accumulate(np.concatenate(([np.inf], Cs[:-1])))
        idx, Sk = order[keep], Ss[keep]
        return idx[~np.concatenate((Sk[1:] == Sk[:-1], [False]))]   # equal W0: the later one is cheaper
    order = np.lexsort((C, W[0]))
    Cs = C[order]
    prev_min = np.minimum.accumulate(np.concatenate(([np.inf], Cs[:-1])))
    Xs = W[1][order]
    pos = np.arange(len(Cs))
    newest = np.maximum.accumulate(np.where(Cs < prev_min, pos, 0))     # argmin of C over [0, p]
    prev = np.concatenate(([0], newest[:-1]))                             # argmin of C over [0, p)
    dominated = (pos > 0) & (Cs >= Cs[prev]) & (Xs >= Xs[prev])
    cuts = np.unique(np.quantile(Xs, np.linspace(0, 1, _BINS + 1)[1:-1]))
    binned = np.searchsorted(cuts, Xs, side="left")                       # Xs ≤ cuts[b] ⇔ bin ≤ b
    for b in range(1, len(cuts) + 1):
        lower = np.where(binned < b, Cs, np.inf)                          # W1 ≤ cuts[b-1] < W1 of bin b
        before = np.minimum.accumulate(np.concatenate(([np.inf], lower[:-1])))
        dominated |= (binned == b) & (before <= Cs)
    return order[~dominated]
