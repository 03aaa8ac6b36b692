"""The knapsack of remat.planner.mckp and its Lagrangian bound: ``Knapsack`` (costs, one or two weight rows,
capacities, the optional running constraint), ``lagrangian`` (the bound and its multipliers, ``_ascend``),
``greedy`` (the Lagrangian argmin repaired into a first plan), ``Dual`` (bound, multipliers, reduced costs; under
a running constraint taken over the relaxation ``merged_tail``). The method is described in mckp's docstring.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

REL = 1e-12          # relative float slack: prune only what is worse by more than this
_MERGED = 64        # combinations of the last rows merged into one row of the relaxation under a running constraint


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


def float_slack(x: float) -> float:
    """The float slack allowed at ``x``: REL relative (at least REL absolute), 0 for an infinite ``x``."""
    return REL * max(1.0, abs(x)) if np.isfinite(x) else 0.0


def lagrangian(ks: Knapsack, rounds: int = 4) -> tuple[float, list[float]]:
    """(lower bound, multipliers λ) of the MCKP; bound = +inf when even the lightest options overflow a row.

    One row: the exact maximum of the dual (= the LP relaxation). Two rows: coordinate ascent, each step the
    exact maximum along one multiplier (``_ascend``), ``rounds`` times — a valid bound, at most the LP's.
    """
    if any(ks.lightest(k).sum() > cap for k, cap in enumerate(ks.capacities)):
        return np.inf, [0.0] * len(ks.weights)
    lam = [0.0] * len(ks.weights)
    for _ in range(rounds if len(lam) > 1 else 1):
        before = list(lam)
        for k, cap in enumerate(ks.capacities):
            rest = ks.cost + sum(l * w for q, (l, w) in enumerate(zip(lam, ks.weights)) if q != k)
            lam[k] = _ascend(np.where(ks.allowed, rest, np.inf), ks.weights[k], cap)
        if lam == before:
            break
    return float(ks.scores(lam).min(axis=1).sum() - sum(l * c for l, c in zip(lam, ks.capacities))), lam


def _ascend(a: np.ndarray, b: np.ndarray, cap: float) -> float:
    """argmax over x ≥ 0 of Σ_i min_j (a[i, j] + x·b[i, j]) − x·cap (a = +inf where not allowed; b ≥ 0).

    The function is concave and piecewise linear: its slope is Σ_i b[i, j_i(x)] − cap with j_i(x) the row's
    argmin, which only falls as x passes the breakpoints of each row's lower envelope of lines. The maximum is
    at x = 0 or at the breakpoint where the slope turns ≤ 0 (exact). The envelopes are walked for the rows
    still moving only.
    """
    j = np.where(a == a.min(axis=1, keepdims=True), b, np.inf).argmin(axis=1)    # argmin at x = 0+
    rows = np.arange(len(a))
    slope = b[rows, j].sum() - cap
    if slope <= 0:
        return 0.0
    at, drop = [], []
    while len(rows):
        A, B = a[rows], b[rows]
        bc = B[np.arange(len(rows)), j][:, None]
        with np.errstate(divide="ignore", invalid="ignore"):
            cross = np.where((B < bc) & np.isfinite(A), (A - A[np.arange(len(rows)), j][:, None]) / (bc - B), np.inf)
        x = cross.min(axis=1)
        nxt = np.where(cross == x[:, None], B, np.inf).argmin(axis=1)   # ties: the lightest line wins after
        moved = np.isfinite(x)
        at.append(x[moved])
        drop.append((B[np.arange(len(rows)), nxt] - bc[:, 0])[moved])
        rows, j = rows[moved], nxt[moved]
    at, drop = np.concatenate(at), np.concatenate(drop)
    order = np.argsort(at, kind="stable")
    turned = np.flatnonzero(slope + np.cumsum(drop[order]) <= 0)
    return float(at[order][turned[0]]) if len(turned) else 0.0


def greedy(ks: Knapsack, lam) -> np.ndarray | None:
    """A feasible plan (choices [L]) or None: Lagrangian argmin, repaired, then improved switch by switch
    (under a running constraint: ``_prefix_greedy``)."""
    if ks.prefix is not None:
        return _prefix_greedy(ks, lam)
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


def _prefix_greedy(ks: Knapsack, lam) -> np.ndarray | None:
    """A plan meeting the running constraint, or None: row by row in order, the option of least Lagrangian
    score among those that meet the row's running constraint and leave weight 0 so far at most ``room`` — the
    most from which the later rows can still meet theirs and capacity 0 (exact, backwards: room after row i =
    max over row i+1's options of min(prefix_capacity − weight − prefix, room after row i+1 − weight)) — and
    leave the other capacities room for the rest's lightest options (so it fails only on those)."""
    score, W, P = ks.scores(lam), np.stack(ks.weights), ks.prefix_capacity
    room = np.empty(len(score))
    room[-1] = ks.capacities[0]
    for i in range(len(score) - 1, 0, -1):
        reach = np.minimum(P - ks.weights[0][i] - ks.prefix[i], room[i] - ks.weights[0][i])
        room[i - 1] = np.where(ks.allowed[i], reach, -np.inf).max()
    rest = after_sum(np.where(ks.allowed, W, np.inf).min(axis=2))         # [m, L]
    caps, used, choices = np.array(ks.capacities)[:, None], np.zeros((len(W), 1)), []
    for i in range(len(score)):
        new = used + W[:, i]                                             # [m, K]
        ok = ks.allowed[i] & (new[0] + ks.prefix[i] <= P) & (new[0] <= room[i])
        ok &= (new + rest[:, i:i + 1] <= caps).all(axis=0)
        if not ok.any():
            return None
        choices.append(int(np.argmin(np.where(ok, score[i], np.inf))))
        used = new[:, choices[-1]:choices[-1] + 1]
    return np.array(choices)


@dataclass
class Dual:
    """The Lagrangian bound, its multipliers, each row's least score and each option's reduced cost ([L, K])."""

    bound: float
    lam: np.ndarray
    least: np.ndarray
    reduced: np.ndarray

    @classmethod
    def of(cls, ks: Knapsack) -> "Dual":
        """The Lagrangian of ``ks`` — under a running constraint, of its relaxation ``merged_tail``, whose
        bound also holds for ``ks``; a tail row's option then gets the least reduced cost of a combination
        holding it."""
        if ks.prefix is None:
            bound, lam = lagrangian(ks)
        else:
            relaxed, rows, combos = merged_tail(ks)
            bound, lam = lagrangian(relaxed)
        scores = ks.scores(lam)
        least = scores.min(axis=1)
        reduced = scores - least[:, None]
        if ks.prefix is not None:
            merged = relaxed.scores(lam)[-1, :len(combos)]
            merged -= merged.min()
            for q, i in enumerate(rows):
                for j in np.flatnonzero(ks.allowed[i]):
                    reduced[i, j] = merged[combos[:, q] == j].min()
        return cls(bound, np.array(lam), least, reduced)

    def first_step(self, ks: Knapsack) -> float:
        """The first cut's distance above the bound without a plan in hand: the least positive reduced cost,
        or a millionth of the bound when that is larger."""
        positive = self.reduced[ks.allowed & (self.reduced > 0)]
        return max(1e-6 * abs(self.bound), positive.min() if positive.size else 0.0) or 1.0


def merged_tail(ks: Knapsack) -> tuple[Knapsack, np.ndarray, np.ndarray]:
    """(relaxed, rows, combos): a knapsack without the running constraint whose plans include every plan of
    ``ks``. Its last row stands for the last r rows of ``ks`` (``rows``; their allowed combinations ``combos``
    [M, r], M ≤ _MERGED): a combination weighs Σ weight_0 + the excess E it raises above prefix_capacity −
    capacity_0 (E = max over its rows of prefix − Σ weight_0 of the rows after it), which the running
    constraints of those rows add to the total (Σ weight_0 + E ≤ prefix_capacity). The last layers' backward
    meets every stored byte: this is what the plain knapsack misses."""
    L, K = ks.cost.shape
    r = max(1, min(L, int(np.log(_MERGED) // np.log(max(K, 2)))))
    rows = np.arange(L - r, L)
    combos = np.array(list(itertools.product(*[np.flatnonzero(ks.allowed[i]) for i in rows])))   # [M, r]
    held = ks.weights[0][rows, combos]
    later = np.cumsum(held[:, ::-1], axis=1)[:, ::-1] - held
    excess = np.maximum((ks.prefix[rows, combos] - later).max(axis=1) - (ks.prefix_capacity - ks.capacities[0]), 0)
    width = max(K, len(combos))
    pad = lambda head, last: np.vstack((np.pad(head[:L - r], ((0, 0), (0, width - K))),
                                        np.pad(last, (0, width - len(combos)))[None]))
    relaxed = Knapsack(pad(ks.cost, ks.cost[rows, combos].sum(axis=1)),
                       [pad(ks.weights[0], held.sum(axis=1) + excess)]
                       + [pad(w, w[rows, combos].sum(axis=1)) for w in ks.weights[1:]],
                       ks.capacities, pad(ks.allowed, np.ones(len(combos), dtype=bool)))
    return relaxed, rows, combos


def after_sum(v: np.ndarray) -> np.ndarray:
    """Σ of v over the positions after each position (along the last axis)."""
    total = np.cumsum(v[..., ::-1], axis=-1)[..., ::-1]
    return np.concatenate((total[..., 1:], np.zeros(v.shape[:-1] + (1,))), axis=-1)
