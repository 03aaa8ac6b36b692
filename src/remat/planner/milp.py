"""The planner's fallback past the exact search's memory guard: the same problem as a mixed-integer program for
HiGHS (``scipy.optimize.milp``, relative gap 0), so remat.planner.solve still returns a proven-optimal plan.
"""

from __future__ import annotations

import numpy as np

from remat.planner.arrays import Arrays, unbounded
from remat.planner.mckp import SearchTooLarge
from remat.planner.problem import Problem, evaluate


def milp(problem: Problem, arr: Arrays, least_peak: bool = False) -> np.ndarray | None:
    """The fallback past the exact search's memory guard: the same problem as a mixed-integer program for
    HiGHS (``scipy.optimize.milp``, relative gap 0), least step time within the budget or, with
    ``least_peak``, least peak. Returns choices, or None when HiGHS proves that no plan exists.

    Variables: x[i, j] ∈ {0, 1} (Σ_j x[i, j] = 1), and per memory model — prefix: the stored bytes so far S_i
    (S_i = S_{i−1} + Σ_j stored·x, S_i + Σ_j transient·x ≤ room, S_{L−1} + floor ≤ room); max: the worst
    transient T (transient·x ≤ T, T ≥ floor, Σ stored·x + T ≤ room); room = budget − fixed, or a variable R
    to minimize. Raises mckp.SearchTooLarge when HiGHS stops without a proven optimum or its plan does not
    pass the integer check of ``evaluate`` (no unproven plan is returned).
    """
    # lazy (scipy): HiGHS loads only when the exact search outgrows its memory guard
    from scipy.optimize import Bounds
    from scipy.optimize import milp as highs_milp

    L, K = arr.time.shape
    n, width = L * K, L * K + (L if problem.prefix else 1) + 1   # x, then S_0..S_{L−1} or T, then R
    cost = np.zeros(width)
    if least_peak:
        cost[-1] = 1.0
    else:
        cost[:n] = np.where(arr.present, arr.time, 0.0).ravel()
    lower, upper = np.zeros(width), np.full(width, np.inf)
    upper[:n] = arr.present.ravel()
    lower[n] = 0.0 if problem.prefix else problem.transient_floor_bytes
    result = highs_milp(cost, constraints=milp_constraints(problem, arr, least_peak), bounds=Bounds(lower, upper),
                  integrality=(np.arange(width) < n).astype(int), options={"mip_rel_gap": 0.0})
    if result.status == 2:
        return None
    choices = result.x[:n].reshape(L, K).argmax(axis=1) if result.status == 0 else None
    if choices is None or not evaluate(unbounded(problem) if least_peak else problem, choices).feasible:
        raise SearchTooLarge(f"the exact search outgrew its memory guard and HiGHS ended with "
                             f"{result.message!r}")
    return choices


def milp_constraints(problem: Problem, arr: Arrays, least_peak: bool):
    """The rows of ``milp``'s program (one choice per layer, the memory model, the host limit) as a sparse
    LinearConstraint over its variables (x [L·K], S [L] or T, R)."""
    # lazy (scipy): as in ``milp``
    from scipy.optimize import LinearConstraint
    from scipy.sparse import coo_matrix

    L, K = arr.time.shape
    n, width = L * K, L * K + (L if problem.prefix else 1) + 1
    rows, lo, hi = [], [], []

    def row(columns, values, low=-np.inf, high=np.inf):
        rows.append((np.asarray(columns, dtype=int), np.asarray(values, dtype=float)))
        lo.append(low)
        hi.append(high)

    room = (0.0, [width - 1], [-1.0]) if least_peak else \
        (float(problem.budget_bytes - problem.fixed_bytes), [], [])       # ≤ budget − fixed, or ≤ R
    for i in range(L):
        x, present = i * K + np.flatnonzero(arr.present[i]), arr.present[i]
        row(x, np.ones(len(x)), 1.0, 1.0)
        if problem.prefix:                                        # S_i − S_{i−1} − Σ stored·x = 0
            row([n + i, *([n + i - 1] if i else []), *x], [1.0, *([-1.0] if i else []), *-arr.stored[i, present]],
                0.0, 0.0)
            row([n + i, *x, *room[1]], [1.0, *arr.transient[i, present], *room[2]], high=room[0])
        else:                                                     # transient·x ≤ T
            for col, t in zip(x, arr.transient[i, present]):
                row([col, n], [t, -1.0], high=0.0)
    cols = np.flatnonzero(arr.present.ravel())
    if problem.prefix:
        row([n + L - 1, *room[1]], [1.0, *room[2]], high=room[0] - problem.transient_floor_bytes)
    else:
        row([*cols, n, *room[1]], [*arr.stored.ravel()[cols], 1.0, *room[2]], high=room[0])
    if problem.host_limit_bytes is not None:
        row(cols, arr.host.ravel()[cols], high=float(problem.host_limit_bytes))
    matrix = coo_matrix((np.concatenate([v for _, v in rows]),
                         (np.repeat(np.arange(len(rows)), [len(c) for c, _ in rows]),
                          np.concatenate([c for c, _ in rows]))), shape=(len(rows), width))
    return LinearConstraint(matrix, lo, hi)
