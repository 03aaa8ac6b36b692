"""A planning problem's option tables as [L, K] arrays (``Arrays``), what the exact solver and its MILP fallback
compute on, and the same problem without a device budget (``unbounded``, for the least peak).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from remat.planner.problem import Problem


@dataclass
class Arrays:
    """Option tables as [L, K] arrays (K = most options of any layer; absent options are never allowed)."""

    time: np.ndarray        # seconds
    stored: np.ndarray      # bytes (float64, exact below 2**53)
    transient: np.ndarray   # bytes
    host: np.ndarray        # bytes
    present: np.ndarray     # bool

    @classmethod
    def of(cls, problem: Problem) -> "Arrays":
        L, K = len(problem.layers), max(len(layer.options) for layer in problem.layers)
        a = cls(*(np.zeros((L, K)) for _ in range(4)), np.zeros((L, K), dtype=bool))
        for i, layer in enumerate(problem.layers):
            for j, o in enumerate(layer.options):
                a.time[i, j], a.stored[i, j] = o.time_s, o.stored_bytes
                a.transient[i, j], a.host[i, j] = o.transient_bytes, o.offload_bytes
                a.present[i, j] = True
        return a


def unbounded(problem: Problem) -> Problem:
    return dataclasses.replace(problem, budget_bytes=2**62)
