"""Checkpoint schedules as DATA: a Schedule is a tuple of ops that ``remat.chain.run`` (the one executor)
interprets. No schedule has its own code path at run time.

Ops (layer i maps x_i -> x_{i+1} through h_i; see ``remat.chain``):
    Forward(i, keep_input, keep_hidden, keep_output)   evaluate layer i; drop x_i / h_i / x_{i+1} unless kept
    Loss()                                              ½‖x_L‖²; g = x_L; drop x_L
    Backward(i)                                         back-propagate layer i (needs x_i, h_i); drop both

Vocabulary. A *checkpoint* (Chen) or *slot* (Griewank) holds one chain state x_i (B×d values, x_0 included:
Revolve's s counts the slot holding the initial state). *Advancing* is a Forward that keeps no tape; *taping*
is a Forward that keeps h_i (and x_i) for the Backward of layer i.

Schedules:
    none            keep everything (= segments(L, 1)).
    segments(k)     Chen 2016 Alg. 1 with k segments (numpy.array_split sizes): the forward keeps each
                    segment's input; the last segment is taped in the first forward (as torch's
                    checkpoint_sequential leaves it unchecked); backward, per segment in reverse: recompute
                    its forward keeping intermediates, then back-propagate it.
    sqrt            segments(⌈√L⌉) (rounding: see remat.formulas.chen.sqrt_segments).
    recursive(k)    Chen §4.4: keep k checkpoints splitting a segment into k + 1 parts, reverse the parts last
                    to first, each recursively; g(n) = k + g(n/(k+1)); k = 1: log2 L memory, O(L log L) work.
    revolve(s)      Griewank & Walther's binomial checkpointing with s slots: r·L − β(s+1, r−1) advances,
                    the minimum (remat.formulas.revolve).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from remat.formulas import chen as formulas
from remat.formulas import revolve as binomial


@dataclass(frozen=True, slots=True)
class Forward:
    """Evaluate layer ``layer``; keep its input x_i, its hidden h_i, its output x_{i+1} only if told."""

    layer: int
    keep_input: bool = True
    keep_hidden: bool = False
    keep_output: bool = True


@dataclass(frozen=True, slots=True)
class Backward:
    """Back-propagate layer ``layer`` (x_i and h_i must be stored; both are dropped after)."""

    layer: int


@dataclass(frozen=True, slots=True)
class Loss:
    """Take the loss of x_L and start the backward (x_L is dropped)."""


@dataclass(frozen=True)
class Schedule:
    """A named op list for a chain of ``layers`` layers. ``family`` is none|segments|sqrt|recursive|revolve;
    ``param`` its k (segments) or slots (revolve), None for none."""

    name: str
    family: str
    param: int | None
    layers: int
    ops: tuple

    @property
    def forwards(self) -> int:
        """Layer-forward evaluations the schedule asks for (the executor counts them independently)."""
        return sum(type(op) is Forward for op in self.ops)


# --- building blocks -------------------------------------------------------------------------------------------

def _advance(ops: list, lo: int, hi: int, keep: set[int]) -> None:
    """Forwards lo..hi−1 without tape, x_hi left live; x_i kept where i ∈ keep (checkpoints), else dropped."""
    ops.extend(Forward(i, keep_input=i in keep) for i in range(lo, hi))


def _tape_and_reverse(ops: list, lo: int, hi: int, layers: int) -> None:
    """Forward lo..hi−1 keeping x_i and h_i (x_hi dropped unless it is x_L, whose Loss follows), then Backward
    hi−1..lo. Needs x_lo stored."""
    ops.extend(Forward(i, keep_input=True, keep_hidden=True, keep_output=(i < hi - 1 or hi == layers))
               for i in range(lo, hi))
    if hi == layers:
        ops.append(Loss())
    ops.extend(Backward(i) for i in reversed(range(lo, hi)))


# --- the schedules ---------------------------------------------------------------------------------------------

def segments(layers: int, k: int, name: str | None = None, family: str = "segments") -> Schedule:
    """Chen Alg. 1 with k segments (sizes: remat.formulas.chen.segment_sizes). Peak bytes:
    formulas.chen.segments_peak_bytes; forwards: 2L − ⌊L/k⌋. Raises UsageError("k") unless 1 ≤ k ≤ layers."""
    sizes = formulas.segment_sizes(layers, k)
    starts = [sum(sizes[:j]) for j in range(k + 1)]
    ops: list = []
    for j in range(k - 1):
        _advance(ops, starts[j], starts[j + 1], keep={starts[j]})
    for j in reversed(range(k)):
        _tape_and_reverse(ops, starts[j], starts[j + 1], layers)
    return Schedule(name or f"segments({k})", family, k, layers, tuple(ops))


def none(layers: int) -> Schedule:
    """Keep every activation: the plain backward as a schedule (segments(L, 1))."""
    formulas.check_count(layers, "layers")
    return segments(layers, 1, name="none", family="none")


def sqrt(layers: int) -> Schedule:
    """segments(⌈√L⌉) — Chen §4.3's k = √n, rounded up (formulas.chen.sqrt_segments says why)."""
    return segments(layers, formulas.sqrt_segments(layers), name="sqrt", family="sqrt")


def recursive(layers: int, k: int = 1) -> Schedule:
    """Chen §4.4's recursion with k checkpoints per level (k + 1 parts, formulas.chen.recursive_parts).

    Peak bytes: formulas.chen.recursive_peak_bytes; forwards: formulas.chen.recursive_forwards.
    Raises UsageError("layers"/"k").
    """
    formulas.check_count(layers, "layers")
    formulas.check_count(k, "k")
    ops: list = []

    def reverse(lo: int, hi: int) -> None:
        if hi - lo == 1:
            _tape_and_reverse(ops, lo, hi, layers)
            return
        bounds = [lo]
        for size in formulas.recursive_parts(hi - lo, k):
            bounds.append(bounds[-1] + size)
        _advance(ops, lo, bounds[-2], keep=set(bounds[:-2]))
        for j in reversed(range(len(bounds) - 1)):
            reverse(bounds[j], bounds[j + 1])

    reverse(0, layers)
    return Schedule(f"recursive({k})", "recursive", k, layers, tuple(ops))


def revolve(layers: int, slots: int) -> Schedule:
    """Binomial checkpointing with ``slots`` slots (x_0's slot included): optimal splits from
    formulas.revolve.advance_table; advances = r·L − β(s+1, r−1). Slots beyond L are never used.
    Raises UsageError("layers"/"slots").
    """
    formulas.check_count(layers, "layers")
    formulas.check_count(slots, "slots")
    _, split = binomial.advance_table(layers, min(slots, layers))
    ops: list = []

    def reverse(lo: int, hi: int, s: int) -> None:
        while hi - lo > 1:  # advance m steps, snapshot, reverse the right part with a slot fewer
            m = int(split[hi - lo, s])
            _advance(ops, lo, lo + m, keep={lo})
            reverse(lo + m, hi, s - 1)
            hi = lo + m
        _tape_and_reverse(ops, lo, hi, layers)

    reverse(0, layers, min(slots, layers))
    return Schedule(f"revolve({slots})", "revolve", slots, layers, tuple(ops))


def default_slots(layers: int) -> int:
    """Revolve's slot count in the depth sweep: max(1, ⌈log2 L⌉) — the checkpoints Chen's recursion (k = 1)
    holds, so the two are compared at (about) equal memory."""
    formulas.check_count(layers, "layers")
    return max(1, math.ceil(math.log2(layers)))


def catalogue(layers: int, slots: list[int] | None = None) -> dict[str, Schedule]:
    """Every schedule ``remat check`` verifies for L = ``layers``: none, segments(k) for k = 1..L, sqrt,
    recursive(1), recursive(2), revolve(s) for s in ``slots`` (default {1, 2, ⌈log2 L⌉}). Keyed by name."""
    formulas.check_count(layers, "layers")
    slots = sorted(set(slots or [1, 2, default_slots(layers)]))
    found = [none(layers), *(segments(layers, k) for k in range(1, layers + 1)), sqrt(layers),
             recursive(layers, 1), recursive(layers, 2), *(revolve(layers, s) for s in slots)]
    return {s.name: s for s in found}
