"""Chen et al. 2016 Algorithm 3 (memory planning with a budget) and the schedules it is compared with, on a
general graph: which nodes to keep (mirror count 0) and which to drop and recompute once (1).

Candidate split points. A split at position i of the forward order keeps the values crossing it (written at
or before node i, read by a forward node after it) and cuts the graph into stages. Chen takes articulation
points (one value crossing: the output of a residual block); an unrolled LSTM has none (each time step hands
over h and c of every layer), so a position is a candidate when as few values cross it as cross the best
position of the graph's middle half — one for a ResNet, the 2 × layers states of an LSTM.

Algorithm 3 (greedy): walk the forward order accumulating output bytes in ``temp``; at a candidate with
temp > B, split: x += bytes kept there, y = max(y, temp), temp = 0. Run with B = 0 (split everywhere) to get
x and y, then at B = √(x·y), then on a 6-point grid over [B/2, 2B]; keep the plan the memory planner gives
the fewest bytes. ``sqrt_splits`` cuts into ⌈√n⌉ equal stages (Algorithm 1's k = √n); ``optimal_splits``
minimises x + y exactly (the objective Algorithm 3 approximates) by dynamic programming.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np

from remat.errors import UsageError
from remat.graph.ir import Graph

GRID_POINTS = 6


@dataclass(frozen=True)
class Segmentation:
    """Split positions (indices into graph.nodes, ascending), the bytes kept at them (x, bytes), the largest
    segment's output bytes (y, bytes) and the budget B (bytes) it came from (None: not from Algorithm 3)."""

    splits: tuple[int, ...]
    x: int
    y: int
    budget: int | float | None = None

    def mirror_counts(self, graph: Graph) -> dict[str, int]:
        """Chen's m(v): 0 for the nodes writing a value kept at a split and for the nodes after the last
        split (the last segment is kept in the forward: the backward needs it first, as
        torch.utils.checkpoint.checkpoint_sequential and remat.schedules.segments leave it unchecked), 1 for
        every other node. No splits: everything kept."""
        keep = {graph.producer()[v].name for i in self.splits for v in graph.crossing[i]}
        last = self.splits[-1] if self.splits else -1
        return {n.name: 0 if n.name in keep or i > last else 1 for i, n in enumerate(graph.nodes)}


def candidates(graph: Graph) -> list[int]:
    """Candidate split positions (module docstring): positions 0..n−2 crossed by at most as many values as
    the least-crossed position of the middle half of the graph."""
    counts = [len(c) for c in graph.crossing[:-1]]
    if not counts:
        return []
    n = len(counts)
    middle = counts[n // 4: max(n // 4 + 1, 3 * n // 4)]
    limit = min(middle)
    return [i for i, c in enumerate(counts) if 0 < c <= limit]


def _stage_bytes(graph: Graph) -> list[int]:
    """Cumulative output bytes: S[i] = bytes written by nodes 0..i−1 (S has n + 1 entries)."""
    out = [sum(graph.values[v].nbytes for v in n.outputs) for n in graph.nodes]
    return [0, *itertools.accumulate(out)]                  # Python ints: no overflow at any size


def _kept_bytes(graph: Graph, i: int) -> int:
    return sum(graph.values[v].nbytes for v in graph.crossing[i])


def greedy(graph: Graph, budget: float, cands: list[int] | None = None) -> Segmentation:
    """Algorithm 3's pass at budget B (bytes): split at a candidate once the segment's bytes exceed B.
    Raises UsageError("budget") for B < 0."""
    if not budget >= 0:
        raise UsageError("budget", f"must be ≥ 0 bytes, got {budget}")
    cands = set(candidates(graph) if cands is None else cands)
    temp = x = y = 0
    splits = []
    for i, node in enumerate(graph.nodes):
        temp += sum(graph.values[v].nbytes for v in node.outputs)
        if i in cands and temp > budget:
            splits.append(i)
            x += _kept_bytes(graph, i)
            y, temp = max(y, temp), 0
    return Segmentation(tuple(splits), x, max(y, temp), budget if math.isinf(budget) else int(round(budget)))


def budget_grid(graph: Graph, points: int = GRID_POINTS) -> list[int]:
    """Algorithm 3's budgets: B₀ = ⌊√(x·y)⌋ from the B = 0 pass, then ``points`` values evenly spaced over
    [B₀/2, 2B₀] (rounded). Returns [B₀, *grid] in bytes. Raises UsageError("grid") for points < 1."""
    if points < 1:
        raise UsageError("grid", f"needs at least one point, got {points}")
    first = greedy(graph, 0)
    b0 = math.isqrt(first.x * first.y)
    return [b0, *(int(round(b)) for b in np.linspace(b0 / 2, 2 * b0, points))]


def sqrt_splits(graph: Graph) -> Segmentation:
    """⌈√(n+1)⌉ stages of equally many candidates (n candidates): Algorithm 1's k = √n on the graph."""
    cands = candidates(graph)
    k = math.ceil(math.sqrt(len(cands) + 1))
    picks = sorted({cands[round(j * (len(cands) + 1) / k) - 1] for j in range(1, k)}) if cands else []
    return _segmentation(graph, picks)


def _segmentation(graph: Graph, splits: list[int], budget: float | None = None) -> Segmentation:
    S = _stage_bytes(graph)
    bounds = [0, *(i + 1 for i in splits), len(graph.nodes)]
    y = max(int(S[b] - S[a]) for a, b in zip(bounds, bounds[1:]))
    return Segmentation(tuple(splits), sum(_kept_bytes(graph, i) for i in splits), y, budget)


def optimal_splits(graph: Graph) -> Segmentation:
    """The splits minimising x + y (Algorithm 3's objective) exactly: for each feasible largest segment y
    (ascending, pruned by the bound x ≥ (⌈total/y⌉ − 1)·min kept), the least x by dynamic programming with a
    sliding-window minimum."""
    cands = candidates(graph)
    S = _stage_bytes(graph)
    total = int(S[-1])
    pos = [0, *(i + 1 for i in cands), len(graph.nodes)]          # stage boundaries
    cost = [0, *(_kept_bytes(graph, i) for i in cands), 0]
    at = [int(S[p]) for p in pos]
    best = (total, ())                                             # no split: x = 0, y = total
    f_min = min(cost[1:-1], default=0)
    ys = sorted({b - a for i, a in enumerate(at) for b in at[i + 1:]})
    for y in ys:
        if y >= best[0] or y + (math.ceil(total / y) - 1) * f_min >= best[0]:
            continue
        x, picks = _least_kept(at, cost, y)
        if picks is not None and x + y < best[0]:
            best = (x + y, picks)
    return _segmentation(graph, [cands[j - 1] for j in best[1]])


def _least_kept(at: list[int], cost: list[int], y: int) -> tuple[int, tuple | None]:
    """min Σ cost over boundary subsets (first and last forced) with every gap at[b] − at[a] ≤ y."""
    from collections import deque

    n = len(at)
    dp, prev, window = [math.inf] * n, [-1] * n, deque([0])
    dp[0] = 0
    for b in range(1, n):
        while window and at[b] - at[window[0]] > y:
            window.popleft()
        if window:
            a = window[0]
            dp[b], prev[b] = dp[a] + cost[b], a
        while window and dp[window[-1]] >= dp[b]:
            window.pop()
        window.append(b)
    if dp[-1] == math.inf:
        return math.inf, None
    picks, b = [], prev[n - 1]
    while b > 0:
        picks.append(b)
        b = prev[b]
    return int(dp[-1]), tuple(reversed(picks))
