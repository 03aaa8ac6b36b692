"""The planner's fallback past the exact search's memory guard: the same problem as a mixed-integer program for
HiGHS (``scipy.optimize.milp``, relative gap 0), so remat.planner.solve still returns a proven-optimal plan.

Runs of identical adjacent layers (same options: time, bytes, presence) are one group each: how many of its
layers take each option (an integer count), not which layer takes which. No plan is lost: swapping the
choices of two identical layers changes no sum, and under the prefix model the order of non-increasing
transient along the layers is as feasible as any (remat.planner.symmetry), so the last layer taking option j
has before it the stored bytes of every option ranked at or above j. A run of 80 identical transformer blocks
with 400 options each is then 800 variables instead of 32,000 binaries (minutes of HiGHS → about a second).
"""

from __future__ import annotations

import contextlib
import os
import sys
from dataclasses import dataclass

import numpy as np

from remat.planner.arrays import Arrays, unbounded
from remat.planner.mckp import SearchTooLarge
from remat.planner.problem import Problem, evaluate

SECONDS = 1e9
"""Times enter the objective in nanoseconds: HiGHS also stops within an absolute gap (1e-6), which in seconds
would allow a microsecond off the optimum."""


@dataclass(frozen=True)
class _Group:
    """Layers ``start`` … ``start + size − 1`` with identical options ``js`` (present, in rank order: transient
    descending, then index descending — the order the layers take them in); ``n``: the column of each option's
    count; ``y``: of each option's indicator (size > 1); ``s``: the column of the stored bytes after the group
    (prefix model)."""

    start: int
    size: int
    js: np.ndarray
    n: np.ndarray
    y: np.ndarray | None
    s: int


def milp(problem: Problem, arr: Arrays, least_peak: bool = False) -> np.ndarray | None:
    """The fallback past the exact search's memory guard: the same problem as a mixed-integer program for
    HiGHS (``scipy.optimize.milp``, relative gap 0), least step time within the budget or, with
    ``least_peak``, least peak. Returns choices, or None when HiGHS proves that no plan exists.

    Variables, per group of identical adjacent layers (module docstring): counts n_j ∈ {0 … size} (Σ_j n_j =
    size) and, for a run, indicators y_j ≥ n_j / size; then per memory model — prefix: the stored bytes after
    each group S_g (S_g = S_{g−1} + Σ_j stored·n, and for each option j taken, S_{g−1} + Σ_{ranked at or above
    j} stored·n + transient_j ≤ room; S_last + floor ≤ room); max: the worst transient T (transient·y ≤ T, T ≥
    floor, Σ stored·n + T ≤ room); room = budget − fixed, or a variable R to minimize. Raises
    mckp.SearchTooLarge when HiGHS stops without a proven optimum or its plan does not pass the integer check of
    ``evaluate`` (no unproven plan is returned).
    """
    # lazy (scipy): HiGHS loads only when the exact search outgrows its memory guard
    from scipy.optimize import Bounds
    from scipy.optimize import milp as highs_milp

    groups, width = _groups(arr, problem.prefix)
    cost, lower, upper, integral = np.zeros(width), np.zeros(width), np.full(width, np.inf), np.zeros(width)
    for g in groups:
        cost[g.n] = 0.0 if least_peak else arr.time[g.start, g.js] * SECONDS
        upper[g.n], integral[g.n] = g.size, 1
        if g.y is not None:
            upper[g.y], integral[g.y] = 1, 1
    if least_peak:
        cost[-1] = 1.0
    if not problem.prefix:
        lower[-2] = problem.transient_floor_bytes
    with _quiet():
        result = highs_milp(cost, constraints=milp_constraints(problem, arr, groups, width, least_peak),
                            bounds=Bounds(lower, upper), integrality=integral, options={"mip_rel_gap": 0.0})
    if result.status == 2:
        return None
    choices = _choices(groups, result.x) if result.status == 0 else None
    if choices is None or not evaluate(unbounded(problem) if least_peak else problem, choices).feasible:
        raise SearchTooLarge(f"the exact search outgrew its memory guard and HiGHS ended with "
                             f"{result.message!r}")
    return choices


@contextlib.contextmanager
def _quiet():
    """File descriptors 1 and 2 to /dev/null while HiGHS runs: its C++ core prints debugging lines
    ("HighsMipSolverData::transformNewIntegerFeasibleSolution …") whatever ``disp`` says, which would corrupt a
    plan printed as JSON on stdout."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, 1)
        os.dup2(null, 2)
        yield
    finally:
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in (*saved, null):
            os.close(fd)


def _groups(arr: Arrays, prefix: bool) -> tuple[list[_Group], int]:
    """The groups of identical adjacent layers and the width of the program (columns: per group n [, y] [, S];
    then T under the max model; last R)."""
    L = arr.time.shape[0]
    same = lambda a: np.all(a[:-1] == a[1:], axis=1)
    joined = same(arr.time) & same(arr.stored) & same(arr.transient) & same(arr.host) & same(arr.present)
    out, column, start = [], 0, 0
    for i in range(L):
        if i + 1 < L and joined[i]:
            continue
        size, js = i - start + 1, np.flatnonzero(arr.present[start])
        js = js[np.lexsort((js, arr.transient[start, js]))][::-1]
        n = np.arange(column, column + len(js))
        y = n + len(js) if size > 1 else None
        column = (y if y is not None else n)[-1] + 1
        out.append(_Group(start, size, js, n, y, column))
        column += 1 if prefix else 0
        start = i + 1
    return out, column + (0 if prefix else 1) + 1


def milp_constraints(problem: Problem, arr: Arrays, groups: list[_Group], width: int, least_peak: bool):
    """The rows of ``milp``'s program (one count per layer of each group, the memory model, the host limit) as a
    sparse LinearConstraint over its columns (``_groups``)."""
    # lazy (scipy): as in ``milp``
    from scipy.optimize import LinearConstraint
    from scipy.sparse import coo_matrix

    rows, lo, hi = [], [], []

    def row(columns, values, low=-np.inf, high=np.inf):
        rows.append((np.asarray(columns, dtype=int), np.asarray(values, dtype=float)))
        lo.append(low)
        hi.append(high)

    room = (0.0, [width - 1], [-1.0]) if least_peak else \
        (float(problem.budget_bytes - problem.fixed_bytes), [], [])       # ≤ budget − fixed, or ≤ R
    before: list = []                                                     # [S_{g−1}] (prefix), [] for the first
    for g in groups:
        stored, transient = arr.stored[g.start, g.js], arr.transient[g.start, g.js]
        row(g.n, np.ones(len(g.js)), g.size, g.size)
        if g.y is not None:                                               # n_j ≤ size · y_j
            for n, y in zip(g.n, g.y):
                row([n, y], [1.0, -float(g.size)], high=0.0)
        if problem.prefix:
            row([g.s, *before, *g.n], [1.0, *[-1.0] * len(before), *-stored], 0.0, 0.0)
            if g.y is None:                                               # S_g + transient ≤ room
                row([g.s, *g.n, *room[1]], [1.0, *transient, *room[2]], high=room[0])
            else:                                                         # the last layer taking j, if any
                for k in range(len(g.js)):
                    big = g.size * float(stored.max()) + float(transient[k])
                    row([*before, *g.n[:k + 1], g.y[k], *room[1]],
                        [*[1.0] * len(before), *stored[:k + 1], big, *room[2]], high=room[0] - transient[k] + big)
            before = [g.s]
        else:                                                             # transient · (n or y) ≤ T
            for col, t in zip(g.n if g.y is None else g.y, transient):
                row([col, width - 2], [t, -1.0], high=0.0)
    if problem.prefix:
        row([*before, *room[1]], [1.0, *room[2]], high=room[0] - problem.transient_floor_bytes)
    else:
        row([*(c for g in groups for c in g.n), width - 2, *room[1]],
            [*(s for g in groups for s in arr.stored[g.start, g.js]), 1.0, *room[2]], high=room[0])
    if problem.host_limit_bytes is not None:
        row([c for g in groups for c in g.n], [h for g in groups for h in arr.host[g.start, g.js]],
            high=float(problem.host_limit_bytes))
    matrix = coo_matrix((np.concatenate([v for _, v in rows]),
                         (np.repeat(np.arange(len(rows)), [len(c) for c, _ in rows]),
                          np.concatenate([c for c, _ in rows]))), shape=(len(rows), width))
    return LinearConstraint(matrix, lo, hi)


def _choices(groups: list[_Group], x: np.ndarray) -> np.ndarray:
    """Per layer its option: each group's counts laid out in its rank order."""
    return np.concatenate([np.repeat(g.js, np.round(x[g.n]).astype(int)) for g in groups])
