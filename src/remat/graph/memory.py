"""Chen et al. 2016 §3 memory planning: a static allocation of storage to every value of a program.

Before execution, walk the program's steps in order with a liveness counter per value (how many steps still
read it). A value is given a *storage tag* when written:

* in-place — when the step may work in place and its in-place input's counter is 1 (this step is its last
  reader) and the sizes match, the output takes that input's tag;
* sharing — when a value's counter reaches 0 its tag goes back to a pool, and a new value takes a pooled
  tag: the smallest one that is large enough, else the largest one, grown (as MXNet's graph allocator);
* otherwise a new tag.

Strategies (Chen §5.2, Figure 5): "no-opt" (every value its own storage), "inplace", "sharing" (in-place and
sharing). A tag's size is the largest value it ever holds; the planned feature-map memory is the sum of the
tags' sizes. ``live_peak_bytes`` (the most bytes live at once) is the lower bound any allocator needs.
Outputs are allocated before dead inputs are released, so a step's inputs and outputs never overlap except
in place.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Literal, get_args

from remat.errors import UsageError
from remat.graph.program import Program

Allocation = Literal["no-opt", "inplace", "sharing"]
ALLOCATIONS: tuple[str, ...] = get_args(Allocation)


@dataclass(frozen=True)
class MemoryPlan:
    """Storage tag per value id, each tag's size in bytes, and the totals.

    planned_bytes = Σ tag sizes (the static allocation's feature-map memory, bytes); live_peak_bytes = max
    over steps of the bytes of values live at once; inplace_count = values that took their input's tag."""

    strategy: str
    tag_of: dict[str, int]
    tag_bytes: tuple[int, ...]
    live_peak_bytes: int
    inplace_count: int

    @property
    def planned_bytes(self) -> int:
        """The static plan's memory: Σ tag sizes (bytes)."""
        return sum(self.tag_bytes)

    @property
    def tags(self) -> int:
        """Storage blocks the plan allocates."""
        return len(self.tag_bytes)


def readers(program: Program) -> dict[str, int]:
    """Liveness counters: value id -> number of steps reading it (a step reading a value twice counts once)."""
    count: dict[str, int] = {}
    for step in program.steps:
        for v in set(step.reads):
            count[v] = count.get(v, 0) + 1
    return count


def plan_memory(program: Program, strategy: str = "sharing") -> MemoryPlan:
    """The static allocation of ``program`` under ``strategy`` ("no-opt" | "inplace" | "sharing").

    Raises UsageError("strategy") for another name. Source: Chen et al. 2016 §3 and Figure 2 (liveness
    counter; in-place when the counter is 1; a tag recycled at 0).
    """
    if strategy not in ALLOCATIONS:
        raise UsageError("strategy", f"unknown allocation {strategy!r} (known: {', '.join(ALLOCATIONS)})")
    return _Allocator(program, strategy).run()


class _Allocator:
    def __init__(self, program: Program, strategy: str):
        self.program, self.sizes, self.strategy = program, program.sizes, strategy
        self.inplace = strategy != "no-opt"
        self.share = strategy == "sharing"
        self.counter = readers(program)
        self.tag_of: dict[str, int] = {}
        self.tag_bytes: list[int] = []
        self.pool: list[tuple[int, int]] = []   # free (bytes, tag), sorted (sharing)
        self.released: set[str] = set()
        self.live = self.peak = self.inplace_count = 0

    def run(self) -> MemoryPlan:
        for v in self.program.initial:
            self._allocate(v)
        for v in self.program.initial:
            self._release_if_dead(v)
        for step in self.program.steps:
            self._step(step)
        return MemoryPlan(self.strategy, self.tag_of, tuple(self.tag_bytes), self.peak, self.inplace_count)

    def _step(self, step) -> None:
        writes = list(step.writes)
        if self._can_inplace(step.inplace, writes):
            src, out = step.inplace, writes.pop(0)
            self.tag_of[out] = self.tag_of[src]        # the output takes its input's storage
            self.counter[src] = 0
            self.released.add(src)
            self.live += self.sizes[out] - self.sizes[src]
            self.inplace_count += 1
        for v in writes:
            self._allocate(v)
        for v in set(step.reads):
            if self.counter.get(v, 0) > 0:
                self.counter[v] -= 1
                self._release_if_dead(v)
        for v in step.writes:
            self._release_if_dead(v)

    def _can_inplace(self, src: str | None, writes: list[str]) -> bool:
        return (self.inplace and src is not None and bool(writes) and self.counter.get(src) == 1
                and src not in self.released and self.sizes[src] == self.sizes[writes[0]])

    def _allocate(self, v: str) -> None:
        size = self.sizes[v]
        self.live += size
        self.peak = max(self.peak, self.live)
        tag = self._from_pool(size) if self.share else None
        if tag is None:
            tag = len(self.tag_bytes)
            self.tag_bytes.append(size)
        self.tag_of[v] = tag

    def _from_pool(self, size: int) -> int | None:
        """The smallest pooled tag holding ``size`` bytes, else the largest pooled tag (grown); None if empty.
        The pool is a list of (bytes, tag) kept sorted."""
        if not self.pool:
            return None
        i = bisect.bisect_left(self.pool, (size, -1))
        _, tag = self.pool.pop(i if i < len(self.pool) else -1)
        self.tag_bytes[tag] = max(self.tag_bytes[tag], size)
        return tag

    def _release_if_dead(self, v: str) -> None:
        if self.counter.get(v, 0) == 0 and v in self.tag_of and v not in self.released:
            self.released.add(v)
            self.live -= self.sizes[v]
            if self.share:
                bisect.insort(self.pool, (self.tag_bytes[self.tag_of[v]], self.tag_of[v]))
