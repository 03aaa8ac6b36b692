"""A value check of recompute: every op a checkpointed region re-runs in backward must give the values it gave
in forward, or the gradients differ from the unmodified model's.

    set_recompute_check("sample")                    # the default: a region's first FIRST forwards, every EVERY-th
    with remat.policies.ValueCheck() as check:       # every region, every step; strict: raise RecomputeError
        loss = model(x).sum()
        loss.backward()
    check.mismatches                                 # strict=False (remat.auto.explain): the differences seen

Why: torch.utils.checkpoint's ``determinism_check`` compares shapes and dtypes only, so a block that reads
state that is not its inputs (an attribute a forward hook sets and clears, a counter, FP8 scaling state kept in
plain tensors, random numbers from numpy or a generator it does not own, a context such as fp8_autocast active
in forward and not in backward) recomputes other values silently. While checked, a region remat checkpoints
(remat.policies.checkpointed) records a checksum of every op's outputs in forward and compares in its
recompute. The modes sit outside a selective-checkpoint cache: the ops whose outputs it keeps are dropped from
the forward's record when it keeps them (remat.drop_cheap.KEPT_WATCHERS), as the recompute serves them without
running them, and the recompute's ops are matched in order to the forward's remaining ops of the same name.
Checksums are float64 sums of the values, of their absolute values and over strided subsets of their positions
(``STRIDES``: a permutation keeps the first two), kept on the device and compared once
when the recompute ends (no synchronisation per op), computed with every dispatch mode off (a measuring mode
outside never sees them); what is skipped: ``_skipped``; fake tensors have no values and are not checked. On
the CPU the values must be equal; on an accelerator, where a forward kernel may accumulate in another order
each run (atomics), within RTOL of the absolute sum.

The default (``sample``) checks a region's forwards until FIRST of its recomputes were compared, and every
EVERY-th forward after:
a recompute that differs does so every step, so the first steps show it, and the check's cost (a reduction per
op in forward and recompute) is paid on a few steps only (benchmarks/value_check_cost.py). ``every``: every
step; ``off``: never. remat's own measurements (remat.measure) switch it off: its scalars and time are not the
model's.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch
from torch._subclasses.fake_tensor import is_fake
from torch.utils._pytree import tree_flatten
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes

from remat.drop_cheap import KEPT_WATCHERS
from remat.errors import RecomputeError, UsageError

_ACTIVE: list["ValueCheck"] = []
MODES = ("sample", "every", "off")
FIRST, EVERY = 2, 100
RTOL = 1e-6
_mode = ["sample"]
_NO_VALUES = ("empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided",   # uninitialised outputs
              "set_")   # points a tensor at a storage (offload's fetch), whose values may still be in flight
_COLLECTIVES = ("c10d", "_c10d_functional", "_c10d_functional_autograd")


@dataclass(frozen=True)
class Mismatch:
    """One region whose recompute gave other values: its name, the op, its place among the forward's ops."""

    region: str
    op: str
    index: int
    forward: tuple
    recompute: tuple

    def differing(self) -> str:
        """The first part of the checksum (``_checksum``) that differs, forward vs recompute, each float as Python
        prints it (the shortest text that reads back as the same float: two different values never read equal)."""
        names = ["sum", "sum of absolute values", *(f"sum of every {k}th value from {o}" for k, o in STRIDES)]
        pairs = list(zip(names, self.forward, self.recompute))
        name, f, r = next((p for p in pairs if p[1] != p[2] and not (p[1] != p[1] and p[2] != p[2])), pairs[0])
        return f"{name} {f!r} vs {r!r}"

    def __str__(self) -> str:
        return (f"recomputing aten.{self.op} (op {self.index + 1} of its forward) gave other values than the "
                f"forward ({self.differing()}): the region reads state that is not its inputs (an attribute a "
                "hook sets, a counter, FP8 scaling state in plain tensors or in a buffer of a module outside the "
                "block, random numbers from numpy or a generator it does not own) or runs under a context in forward "
                "that backward lacks (fp8_autocast). Keep such state in buffers of the block's own modules "
                "(register_buffer on the block or a module inside it: those are restored for the recompute), "
                "re-enter the context in recompute (remat.policies.recompute_context), or give this block policy "
                "none or offload")


class ValueCheck:
    """While active, checkpointed regions compare their recompute with their forward (module docstring).
    ``strict``: raise RecomputeError naming the region and the op at the first difference; else collect
    ``mismatches`` (the first per region)."""

    def __init__(self, strict: bool = True):
        self.strict, self.mismatches = strict, []

    def __enter__(self) -> "ValueCheck":
        _ACTIVE.append(self)
        return self

    def __exit__(self, *exc):
        _ACTIVE.remove(self)

    def found(self, mismatch: Mismatch) -> None:
        if self.strict:
            raise RecomputeError(mismatch.region, str(mismatch))
        self.mismatches.append(mismatch)


def set_recompute_check(mode: str) -> str:
    """How checkpointed regions are checked when no ValueCheck is active (module docstring): "sample" (the
    default), "every" or "off". Returns the mode it replaces; UsageError("mode") for another value."""
    if mode not in MODES:
        raise UsageError("mode", f"must be one of {', '.join(MODES)}, got {mode!r}")
    previous, _mode[0] = _mode[0], mode
    return previous


@contextlib.contextmanager
def recompute_check(mode: str):
    """``set_recompute_check(mode)`` for the duration of the block."""
    previous = set_recompute_check(mode)
    try:
        yield
    finally:
        set_recompute_check(previous)


@dataclass
class Tally:
    """One region's count of forwards that recorded a graph and of recomputes the check compared."""

    forwards: int = 0
    checked: int = 0


def check_for(tally: Tally | None) -> "ValueCheck | None":
    """The check a region's latest forward (``tally``; None: a forward without grad, never recomputed) runs
    under: the innermost active ValueCheck, else a strict one when the mode samples it — until FIRST of the
    region's recomputes were compared (a forward no backward follows, as a validation pass, does not use one up),
    and every EVERY-th forward after — else None."""
    if tally is None:
        return None
    if _ACTIVE:
        return _ACTIVE[-1]
    mode = _mode[0]
    if mode == "every" or (mode == "sample" and (tally.checked < FIRST or (tally.forwards - 1) % EVERY == 0)):
        return ValueCheck()
    return None


STRIDES = ((7, 2), (31, 5))
"""(stride, offset) of the partial sums a checksum adds for a contiguous tensor: values moved to other places (a
roll, a flip) keep the sum and the absolute sum but move between these subsets. Wide strides read few values:
the two cost about a fifth of a full sum (stride 2 would cost as much as one)."""


def _checksum(out) -> torch.Tensor | None:
    """[sum, sum of absolute values, the sums over the positions of each of STRIDES] of ``out``'s tensors, in
    float64 on their device (strided views: no copy of a floating tensor)."""
    tensors = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
    if not tensors or any(is_fake(t) or t.device.type == "meta" for t in tensors):
        return None
    with torch.no_grad(), _disable_current_modes():   # no measuring mode outside sees the check's own ops
        sums = []
        for t in tensors:
            t = t.detach() if t.is_floating_point() else torch.view_as_real(t) if t.is_complex() else t.to(
                torch.float64)
            if t.element_size() == 1 and t.is_floating_point():   # float8: torch sums none of them in float64
                t = t.to(torch.float32)
            flat = t.reshape(-1) if t.is_contiguous() else None
            parts = [t.sum(dtype=torch.float64), torch.linalg.vector_norm(t, 1, dtype=torch.float64)]
            parts += [flat[offset::stride].sum(dtype=torch.float64) if flat is not None else parts[0]
                      for stride, offset in STRIDES]
            sums.append(torch.stack(parts))
        return sums[0] if len(sums) == 1 else torch.stack(sums).sum(0)


def parameter_cast(func, args) -> bool:
    """Whether ``func`` on ``args`` is a ``_to_copy`` of an ``nn.Parameter``: autocast's cast of a weight, which it
    caches for the rest of its region, so a block's forward makes it or not depending on what ran before it there
    (a second micro-batch in the region makes none; a recompute, in a region of its own, makes them again)."""
    return func is torch.ops.aten._to_copy.default and bool(args) and isinstance(args[0], torch.nn.Parameter)


def _skipped(func, out, stats: frozenset, args=()) -> bool:
    """Not compared: views (``detach``, ``view``: no new values; a selective-checkpoint cache detaches what it
    keeps); ops with uninitialised outputs (``empty*``) or another's storage (``set_``); collectives (``c10d``:
    their output may still be in flight when they return; the ops that read it are compared); autocast's casts of
    parameters (``parameter_cast``); ops writing a storage of ``stats`` (BatchNorm's running statistics, which
    the recompute updates again and no training forward reads)."""
    if (func.is_view or func.overloadpacket.__name__ in _NO_VALUES or func.namespace in _COLLECTIVES
            or parameter_cast(func, args)):
        return True
    return bool(stats) and any(isinstance(t, torch.Tensor) and t.untyped_storage()._cdata in stats
                               for t in tree_flatten(out)[0])


def _first_difference(forward: list, recompute: list) -> int | None:
    """Index into the pairs of the first whose checksums differ (NaN equals NaN; a tolerance off the CPU, module
    docstring), None when all agree; one synchronisation."""
    if not forward:
        return None
    with _disable_current_modes():                    # as _checksum: no measuring mode sees these ops
        home = forward[0].device                       # a region's ops may run on two devices (a CPU arange)
        f, r = (torch.stack([c.to(home) for c in sums]) for sums in (forward, recompute))
        rtol = 0.0 if f.device.type == "cpu" else RTOL
        same = (f == r) | ((f - r).abs() <= rtol * f[:, 1:2].abs()) | (f.isnan() & r.isnan())   # ±inf equal too
        bad = (~same.all(1)).nonzero()
        return int(bad[0, 0]) if len(bad) else None


class Record(TorchDispatchMode):
    """Forward: (op name, checksum) of every op the region runs, in order, into ``sums``, less those the
    selective-checkpoint cache keeps (remat.drop_cheap.KEPT_WATCHERS: the recompute does not run them); ``stats``:
    storages of running statistics (``_skipped``)."""

    def __init__(self, sums: list, stats=frozenset()):
        super().__init__()
        self.sums, self.stats, self.last, self.count = sums, frozenset(stats), set(), 0

    def __enter__(self):
        KEPT_WATCHERS.append(self.cached)
        return super().__enter__()

    def __exit__(self, *exc):
        KEPT_WATCHERS.remove(self.cached)
        return super().__exit__(*exc)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if not _skipped(func, out, self.stats, args):
            self.sums.append((func.overloadpacket.__name__, _checksum(out), self.count))   # its place in forward
            self.last, self.count = {id(t) for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)}, self.count + 1
        return out

    def cached(self, output) -> None:
        """The cache keeps ``output``: the op just recorded, when it made it, is not matched in the recompute."""
        ids = {id(t) for t in tree_flatten(output)[0] if isinstance(t, torch.Tensor)}
        if ids and ids == self.last:
            self.sums.pop()
            self.last = set()


class Compare(TorchDispatchMode):
    """Recompute: each op matched to the forward's next op of the same name, its checksum kept; when the
    recompute ends the first difference is reported to ``check`` (a ValueCheck) under ``region``; ``stats`` as
    Record's."""

    def __init__(self, sums: list, check: ValueCheck, region: str, stats=frozenset(), tally: Tally | None = None):
        super().__init__()
        self.sums, self.check, self.region, self.stats = sums, check, region, frozenset(stats)
        self.tally = tally if tally is not None else Tally()

    def __enter__(self):
        self.at, self.pairs = 0, []          # (index into sums, the recompute's checksum)
        return super().__enter__()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if _skipped(func, out, self.stats, args):
            return out
        name = func.overloadpacket.__name__
        while self.at < len(self.sums) and self.sums[self.at][0] != name:
            self.at += 1
        if self.at < len(self.sums) and self.sums[self.at][1] is not None:
            got = _checksum(out)
            if got is not None:
                self.pairs.append((self.at, got))
        self.at += 1
        return out

    def __exit__(self, *exc):
        super().__exit__(*exc)
        self.tally.checked += 1
        first = _first_difference([self.sums[i][1] for i, _ in self.pairs], [got for _, got in self.pairs])
        if first is not None:
            index, got = self.pairs[first]
            name, expected, place = self.sums[index]
            self.check.found(Mismatch(self.region, name, place, tuple(expected.tolist()), tuple(got.tolist())))
