"""A value check of recompute: every op a checkpointed region re-runs in backward must give the values it gave
in forward, or the gradients differ from the unmodified model's.

    with remat.policies.ValueCheck() as check:       # strict: raise RecomputeError at the first difference
        loss = model(x).sum()
        loss.backward()
    check.mismatches                                 # strict=False (remat.auto.explain): the differences seen

Why: torch.utils.checkpoint's ``determinism_check`` compares shapes and dtypes only, so a block that reads
state that is not its inputs (an attribute a forward hook sets and clears, a counter, a global) recomputes
other values silently. While a ValueCheck is active, each region remat checkpoints (remat.policies.checkpointed)
records a checksum of every op's outputs in forward and compares in its recompute. The modes sit outside a
selective-checkpoint cache, so ops the cache serves are not re-run and not compared: the recompute's ops are
matched in order to the forward's ops of the same name. Checksums are float64 sums of the values and of their
absolute values (views and ops with uninitialised outputs, ``empty*``, are skipped); fake tensors have no values and are
not checked. It costs a sum per op: a diagnostic, not for every step.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch._subclasses.fake_tensor import is_fake
from torch.utils._pytree import tree_flatten
from torch.utils._python_dispatch import TorchDispatchMode

from remat.errors import RecomputeError

_ACTIVE: list["ValueCheck"] = []
_UNINITIALISED = ("empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided")


@dataclass(frozen=True)
class Mismatch:
    """One region whose recompute gave other values: its name, the op, its place among the forward's ops."""

    region: str
    op: str
    index: int
    forward: tuple
    recompute: tuple

    def __str__(self) -> str:
        return (f"recomputing aten.{self.op} (op {self.index + 1} of its forward) gave other values than the "
                f"forward (checksum {self.forward[0]:.6g} vs {self.recompute[0]:.6g}): the region reads state "
                "that is not its inputs (an attribute a hook sets, a counter, a global)")


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


def active_check() -> "ValueCheck | None":
    """The innermost active ValueCheck, or None."""
    return _ACTIVE[-1] if _ACTIVE else None


def _checksum(out) -> tuple | None:
    tensors = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
    if not tensors or any(is_fake(t) or t.device.type == "meta" for t in tensors):
        return None
    with torch.no_grad():
        values = [t.detach().to(torch.float64) for t in tensors]
        return (sum(float(v.sum()) for v in values), sum(float(v.abs().sum()) for v in values))


def _skipped(func, out, stats: frozenset) -> bool:
    """Views (``detach``, ``view``: no new values; a selective-checkpoint cache detaches what it keeps), ops
    with uninitialised outputs (``empty*``) and ops writing a storage of ``stats`` (BatchNorm's running
    statistics, which the recompute updates again and no training forward reads) are not compared."""
    if func.is_view or func.overloadpacket.__name__ in _UNINITIALISED:
        return True
    return bool(stats) and any(isinstance(t, torch.Tensor) and t.untyped_storage()._cdata in stats
                               for t in tree_flatten(out)[0])


def _same(a: tuple, b: tuple) -> bool:
    return all(x == y or (x != x and y != y) for x, y in zip(a, b))   # NaN == NaN here


class Record(TorchDispatchMode):
    """Forward: (op name, checksum) of every op the region runs, in order, into ``sums``; ``stats``: storages
    of running statistics (``_skipped``)."""

    def __init__(self, sums: list, stats=frozenset()):
        super().__init__()
        self.sums, self.stats = sums, frozenset(stats)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if not _skipped(func, out, self.stats):
            self.sums.append((func.overloadpacket.__name__, _checksum(out)))
        return out


class Compare(TorchDispatchMode):
    """Recompute: each op matched to the forward's next op of the same name; the first difference is reported
    to ``check`` (a ValueCheck) under ``region``; ``stats`` as Record's."""

    def __init__(self, sums: list, check: ValueCheck, region: str, stats=frozenset()):
        super().__init__()
        self.sums, self.check, self.region, self.stats = sums, check, region, frozenset(stats)

    def __enter__(self):
        self.at, self.reported = 0, False
        return super().__enter__()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if _skipped(func, out, self.stats):
            return out
        name = func.overloadpacket.__name__
        while self.at < len(self.sums) and self.sums[self.at][0] != name:
            self.at += 1
        if self.at < len(self.sums) and not self.reported:
            expected = self.sums[self.at][1]
            got = None if expected is None else _checksum(out)
            if expected is not None and got is not None and not _same(got, expected):
                self.reported = True
                self.check.found(Mismatch(self.region, name, self.at, expected, got))
        self.at += 1
        return out
