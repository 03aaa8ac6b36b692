"""Binomial checkpointing (Griewank & Walther, "Algorithm 799: Revolve", ACM TOMS 26(1), 2000).

Model (the one the paper's bound is stated in): a chain of ``l`` steps x_0 -> x_1 -> ... -> x_l is reversed
(back-propagated) step by step from the last. A *slot* holds one chain state x_i; ``s`` counts every slot,
including the one holding the initial state x_0. Besides the slots there is the working state (the x being
advanced) and one step's tape. An *advance* is a forward step evaluated without keeping its tape; each step's
taped forward, done right before it is reversed, is not counted (it is the cost every schedule pays once).
With these conventions

    β(s, r) = C(s + r, s)                       (steps reversible with s slots and ≤ r advances of any step)
    r(l, s) = min{ r : β(s, r) ≥ l }
    T(l, s) = r·l − β(s + 1, r − 1)             (the minimal number of advances; Griewank 1992, Prop. 1)

e.g. l = 10, s = 2 -> r = 3, T = 30 − C(5, 3) = 20. On the numpy chain T(l, s) is exactly the number of layer
forwards beyond the L of a plain forward/backward ("extra forwards").

``advance_table`` solves the same minimum by dynamic programming over the classical split structure
(advance m steps, take a snapshot, reverse the right part with one slot fewer, then the left part); the
Revolve schedule in ``remat.schedules`` follows its arg-min splits, and the tests check that DP, closed form,
counted forwards and an exhaustive search over all slot strategies agree.
"""

from __future__ import annotations

from functools import lru_cache
from math import comb

import numpy as np

from remat.errors import UsageError


def beta(s: int, r: int) -> int:
    """β(s, r) = C(s + r, s): chain length reversible with ``s`` slots and at most ``r`` advances per step.

    Defined as 0 for r < 0 (so that T(1, s) = 0·1 − β(s + 1, −1) = 0). Source: Griewank & Walther 2000, Eq. (1).
    """
    if s < 0:
        raise UsageError("slots", f"must be ≥ 0, got {s}")
    return comb(s + r, s) if r >= 0 else 0


def repetitions(l: int, s: int) -> int:
    """r(l, s): the smallest r with β(s, r) ≥ l — the most times any step is advanced in an optimal schedule.

    Raises UsageError("steps") if l < 1 and UsageError("slots") if s < 1 and l > 1 (no slot: nothing to
    restart from; a single step needs no slot).
    """
    if l < 1:
        raise UsageError("steps", f"must be ≥ 1, got {l}")
    if l == 1:
        return 0
    if s < 1:
        raise UsageError("slots", f"must be ≥ 1 to reverse {l} steps, got {s}")
    r = 0
    while beta(s, r) < l:
        r += 1
    return r


def extra_forwards(l: int, s: int) -> int:
    """T(l, s) = r·l − β(s + 1, r − 1): minimal advances (forward steps without tape) to reverse ``l`` steps.

    Units: layer-forward evaluations. ``s`` counts the slot holding the initial state.
    Source: Griewank 1992 ("Achieving logarithmic growth...", Prop. 1); Griewank & Walther 2000, Eq. (2).
    Raises UsageError as ``repetitions``.
    """
    r = repetitions(l, s)
    return r * l - beta(s + 1, r - 1)


_INF = np.iinfo(np.int64).max // 4


@lru_cache(maxsize=64)
def advance_table(l: int, s: int) -> tuple[np.ndarray, np.ndarray]:
    """DP minimum of advances over split strategies, for every chain length n ≤ l and slot count s' ≤ s.

    Returns (T, M), int64 arrays of shape (l + 1, s + 1): T[n, s'] = min advances to reverse n steps with s'
    slots (the first holding the segment's input; s' = 0 only allows n = 1, reversed from the working
    state), M[n, s'] = the arg-min number of steps to advance before the snapshot (smallest on ties); _INF
    where infeasible. Recurrence: T[1, ·] = 0, T[n, s'] = min_{1≤m<n} m + T[n−m, s'−1] + T[m, s'].
    O(l²·s) integer work, vectorised over m with numpy. Read-only results (cached).
    """
    if l < 1:
        raise UsageError("steps", f"must be ≥ 1, got {l}")
    if s < 0:
        raise UsageError("slots", f"must be ≥ 0, got {s}")
    T = np.full((l + 1, s + 1), _INF, dtype=np.int64)
    M = np.zeros((l + 1, s + 1), dtype=np.int64)
    T[1, :] = 0
    for sp in range(1, s + 1):
        for n in range(2, l + 1):
            m = np.arange(1, n)
            right, left = T[n - m, sp - 1], T[m, sp]
            cost = np.where((right >= _INF) | (left >= _INF), _INF, m + right + left)
            best = int(np.argmin(cost))
            T[n, sp], M[n, sp] = cost[best], m[best]
    T.flags.writeable = M.flags.writeable = False
    return T, M
