"""Identical adjacent rows under a running constraint: one order of their options is enough.

Rows i and i + 1 with the same options (cost, weights, prefix, allowed) can swap their choices a and b
without changing any sum; only their own running constraints change:
    S + w_a + p_a,  S + w_a + w_b + p_b      against      S + w_b + p_b,  S + w_a + w_b + p_a.
When p_a < p_b the swapped pair is no worse on both (w ≥ 0), so every plan has a plan of the same cost, as
feasible, whose runs of identical rows take their options in non-increasing prefix (transient) order along the
rows — in the backward visiting order of ``mckp._dp``, non-decreasing. The exact search may keep only those
(ties: by option index): each state carries the rank of its last choice, a row that continues a run takes no
option of lower rank, and a state of lower rank dominates (it may take more).
"""

from __future__ import annotations

import numpy as np


def ranks(ks, keep, core, options) -> tuple[list, np.ndarray]:
    """(per core row the rank of each kept option — by prefix, then index — or None outside a run; per core row
    whether it continues the run of the core row visited before it: adjacent, one row lower, identical).
    ``core``: the rows in visiting order, ``options``: their kept options. Nothing to rank without a running
    constraint (the order of rows then changes no sum) or without runs: ([], all False)."""
    n = len(core)
    continues = np.zeros(n, dtype=bool)
    if ks.prefix is None:
        return [], continues
    for k in range(1, n):
        continues[k] = core[k] == core[k - 1] - 1 and _identical(ks, keep, core[k], core[k - 1])
    if not continues.any():
        return [], continues
    out = []
    for k, (i, js) in enumerate(zip(core, options)):
        if continues[k] or (k + 1 < n and continues[k + 1]):
            rank = np.empty(len(js))
            rank[np.lexsort((js, ks.prefix[i, js]))] = np.arange(len(js))
            out.append(rank)
        else:
            out.append(None)
    return out, continues


def _identical(ks, keep, a: int, b: int) -> bool:
    return (np.array_equal(keep[a], keep[b]) and np.array_equal(ks.cost[a], ks.cost[b])
            and np.array_equal(ks.prefix[a], ks.prefix[b])
            and all(np.array_equal(w[a], w[b]) for w in ks.weights))


def ranked_branch(rank, continues: bool, carries: bool, parents: np.ndarray, nX: np.ndarray) -> np.ndarray | None:
    """Set the rank row (the last of ``nX`` [r, n·J], states × options) to each new state's last rank when the
    next core row ``carries`` the run on (else 0: states merge) and return which new states keep the order (None:
    all); ``parents`` the states' ranks before, ``continues``: this row continues their run."""
    nX[-1] = np.tile(rank, len(parents)) if carries else 0.0
    return (rank[None, :] >= parents[:, None]).ravel() if continues else None
