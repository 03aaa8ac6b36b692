"""Pareto filters of the exact search's partial plans (remat.planner.mckp): states are columns of weights W
[m, n] (bytes held so far per capacity row, and under a running constraint the excess E; integers held in
float64) with a cost C [n]; a state another beats on every weight and the cost can be dropped.

    keep = pareto(W, C)       # indices of the states to keep
"""

from __future__ import annotations

import numpy as np


def pareto(W, C) -> np.ndarray:
    """Indices of states (weights W [m, n], cost C [n]) to keep; only dominated states are dropped.

    One weight: sort by (W0, C) and keep each state cheaper than all before it — the exact Pareto set.
    More: sort by (W0, W1, …, C), keep the cheapest of equal weights, and drop a state when the cheapest state
    before it has no more of any weight and no more cost — a sound partial filter (a state is dropped only for
    another with no more of anything; the exact front would keep a few per cent fewer, at a higher cost).
    """
    if len(W) == 1:   # the states arrive as a few runs sorted by W0: a stable sort merges them fast
        order = np.argsort(W[0], kind="stable")
        Ss, Cs = W[0][order], C[order]
        keep = Cs < np.minimum.accumulate(np.concatenate(([np.inf], Cs[:-1])))
        idx, Sk = order[keep], Ss[keep]
        return idx[~np.concatenate((Sk[1:] == Sk[:-1], [False]))]   # equal W0: the later one is cheaper
    order = _cheapest_per_weights(W, C)
    Cs, Xs = C[order], W[1:, order]
    pos = np.arange(len(Cs))
    prev_min = np.minimum.accumulate(np.concatenate(([np.inf], Cs[:-1])))
    newest = np.maximum.accumulate(np.where(Cs < prev_min, pos, 0))     # argmin of C over [0, p]
    prev = np.concatenate(([0], newest[:-1]))                             # argmin of C over [0, p)
    return order[~((pos > 0) & (Cs >= Cs[prev]) & (Xs >= Xs[:, prev]).all(axis=0))]


def _cheapest_per_weights(W, C) -> np.ndarray:
    """Indices of the cheapest state of each distinct weight vector (the first in index order among equal costs),
    sorted by (W0, W1, …): what ``np.lexsort((C, *W[::-1]))`` then keeping the first of equal weights gives.
    Weights that are integers (bytes) below 2**62 are sorted by stable radix sorts of int64 keys, last row first
    (a few times faster than lexsort on floats, where the search spends most of its time); others by lexsort."""
    if np.isfinite(W).all() and (np.abs(W) < 2.0 ** 62).all() and (W == np.floor(W)).all():
        order = np.arange(W.shape[1])
        for row in W[::-1].astype(np.int64):
            order = order[np.argsort(row[order], kind="stable")]
    else:
        order = np.lexsort(W[::-1])
    Ws, Cs = W[:, order], C[order]
    new = np.concatenate(([True], (Ws[:, 1:] != Ws[:, :-1]).any(axis=0)))
    group = np.cumsum(new) - 1
    least = np.flatnonzero(Cs == np.minimum.reduceat(Cs, np.flatnonzero(new))[group])
    return order[least[np.concatenate(([True], group[least[1:]] != group[least[:-1]]))]]

