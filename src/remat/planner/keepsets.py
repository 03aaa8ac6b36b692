"""Which op outputs of one block to keep: the exact Pareto frontier of (bytes kept, recompute seconds spared).

    points = frontier([(nbytes, seconds), ...])     # one (bytes, seconds) per candidate op output
    points[k].items                                  # indices of the items kept; bytes, seconds

Keeping item j costs its bytes from forward to backward and spares its recompute seconds (remat.auto.tensors:
the recompute re-runs every op the cache does not serve, so both sums are additive). For every amount of
memory, the kept set that spares the most time is a point of the Pareto frontier of the 0/1 knapsack; the
frontier is built exactly by Nemhauser and Ullmann's merge (1969): items one at a time, each list merged with
itself shifted by the item, dominated points dropped (as many bytes or more for no more seconds). Ties (equal
bytes, equal seconds) keep the set found first. Exact for any item values; its size is the number of distinct
Pareto points (≤ 2^n, small in practice: blocks repeat a few tensor sizes). ``MAX_POINTS`` bounds it: past it,
``FrontierTooLarge`` (the caller plans the block per block instead, and says so).
"""

from __future__ import annotations

from dataclasses import dataclass

MAX_POINTS = 4096


class FrontierTooLarge(RuntimeError):
    """The exact frontier has more than MAX_POINTS points."""


@dataclass(frozen=True)
class Point:
    """A kept set: ``items`` (indices into the caller's list), their total ``nbytes`` (int) and ``seconds``."""

    items: frozenset
    nbytes: int
    seconds: float


def frontier(items: list[tuple[int, float]]) -> list[Point]:
    """The exact Pareto frontier (module docstring) of kept sets of ``items`` [(bytes ≥ 0, seconds ≥ 0), ...],
    from the empty set up, bytes strictly increasing and seconds strictly increasing. Raises
    FrontierTooLarge past MAX_POINTS points."""
    points = [(0, 0.0, 0)]                      # (bytes, seconds, bitmask)
    for j, (nbytes, seconds) in enumerate(items):
        if nbytes < 0 or not seconds >= 0:
            raise ValueError(f"item {j}: bytes {nbytes} and seconds {seconds} must not be negative")
        shifted = [(b + nbytes, s + seconds, m | (1 << j)) for b, s, m in points]
        points = _pareto(points, shifted)
        if len(points) > MAX_POINTS:
            raise FrontierTooLarge(f"more than {MAX_POINTS} Pareto-optimal kept sets after {j + 1} of "
                                   f"{len(items)} tensors")
    return [Point(frozenset(i for i in range(len(items)) if m >> i & 1), b, s) for b, s, m in points]


def _pareto(a: list, b: list) -> list:
    """Merge two lists sorted by bytes, keeping the points no other point dominates (fewer or equal bytes and
    more or equal seconds); on a tie in both, the point from ``a`` (found first)."""
    merged = sorted(a + b, key=lambda p: (p[0], -p[1]))    # stable: a's point first on a full tie
    out: list = []
    for p in merged:
        if not out or p[1] > out[-1][1]:
            out.append(p)
    return out
