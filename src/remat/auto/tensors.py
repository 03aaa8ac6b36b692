"""Per saved tensor: a block's ops as torch's selective checkpoint sees them, and the policy that keeps a chosen
set of their outputs (MUST_SAVE) and recomputes the rest (PREFER_RECOMPUTE).

    ops = block_ops(module, inputs, rates, amp, device)  # under FakeTensorMode: one OpRecord per op SAC sees
    forward = wrapper(module, "selective", keep=KeptSet(ops.names, frozenset({3, 7})))   # remat.auto.wrap

The stream. torch.utils.checkpoint's selective-checkpoint modes ask the policy about every op the region's
forward dispatches except ``SAC_IGNORED_OPS`` (detach, size queries), in order; ``block_ops`` records the same
stream, views left out (``counted``), from one plain forward of the block (its captured inputs, fake tensors)
and gives each op its index in it; the policy answers PREFER_RECOMPUTE for a view without counting it.
``KeptSet.policy`` answers by that index and checks the op's name: a block that runs other ops than were
planned (data-dependent control flow) raises one RecomputeError instead of keeping the wrong tensors.

Per op (``OpRecord``):
* ``nbytes`` — the bytes of the output storages it allocates (0 for a view, an in-place op, an op writing an
  existing storage): what keeping it costs on the device from forward to backward;
* ``seconds`` / ``flops`` — its roofline time on the GPU preset (remat.timemodel.trace.priced, op_seconds) and
  FLOPs: what recomputing it costs. The checkpoint's recompute re-runs the whole forward (early_stop off), and
  an op whose output the cache holds is served from it, so the recompute of a kept set K costs
  Σ_{j ∉ K} seconds_j — the full recompute less the kept ops;
* ``candidate`` — it may be kept: it allocates (nbytes > 0), moves data (seconds > 0), has FLOPs when priced at
  fused rates (a compiled plan keeps GEMM, attention and convolution outputs only: ``KeptSet._stream``), no
  later op of the forward writes its output in place (SAC keeps by reference; the recompute would read the
  written values), the block does not return it (the block's output is live anyway, as the next block's
  input: keeping it would spare one op's recompute and count its bytes twice), and it is not a ``_to_copy``
  (torch's cache finds what it keeps by the op and its count of that op's calls, and autocast's cached weight
  casts, made in some forwards and not others, shift the count of ``_to_copy`` calls).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.checkpoint import SAC_IGNORED_OPS, CheckpointPolicy

from remat.drop_cheap import record_kept
from remat.errors import RecomputeError
from remat.formulas.offload import exposed_offload_s
from remat.measure.peak import PeakMemory
from remat.policies.values import parameter_cast
from remat.timemodel.roofline import op_seconds
from remat.timemodel.trace import priced


@dataclass(frozen=True)
class OpRecord:
    """One op of a block's forward as SAC sees it (module docstring). Bytes and FLOPs are ints, seconds float."""

    index: int
    op: str
    nbytes: int
    seconds: float
    flops: int
    candidate: bool


@dataclass(frozen=True)
class BlockOps:
    """A block's op stream: ``ops`` in forward order (module docstring)."""

    ops: tuple[OpRecord, ...]
    live: tuple[int, ...] = ()     # bytes live after each op of a plain forward, beyond those at its start

    def peak_bytes(self, keep, full_stored: int, full_peak: int) -> int:
        """The block's device bytes at the peak of its backward under kept set ``keep``, beyond those live
        before it but its own stored bytes, from the same under full recompute, measured: ``full_stored`` (what
        the checkpoint keeps: its inputs) and ``full_peak`` (stored + transient).

        The recompute re-runs the forward, each kept output served from the cache when its op comes: after op
        j the live bytes are the plain forward's (``live[j]``) plus the kept outputs still waiting (ops > j);
        before the first op, every kept output. After the recompute the backward runs as under full."""
        waiting = self.kept_bytes(keep)
        peak = max(full_peak, full_stored + waiting)
        for j, live in enumerate(self.live):
            if j in keep:
                waiting -= self.ops[j].nbytes
            peak = max(peak, full_stored + live + waiting)
        return peak

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(o.op for o in self.ops)

    @property
    def candidates(self) -> tuple[OpRecord, ...]:
        return tuple(o for o in self.ops if o.candidate)

    def kept_bytes(self, keep) -> int:
        return sum(self.ops[j].nbytes for j in keep)

    def kept_seconds(self, keep) -> float:
        """Recompute seconds the kept set spares (its ops are served from the cache)."""
        return sum(self.ops[j].seconds for j in keep)

    def kept_flops(self, keep) -> int:
        return sum(self.ops[j].flops for j in keep)

    def backward_s(self, served, full) -> float:
        """The block's backward seconds with ``served`` served by the cache: full recompute's less their ops'."""
        return max(0.0, full.backward_s - self.kept_seconds(served))

    def served_cost(self, served, off, full, link) -> dict:
        """The PolicyCost fields (remat.auto.measure) of the cache serving ``served`` with ``off`` of it offloaded,
        from ``full``, the block's measured full recompute; ``link`` a remat.formulas.offload.Link (None: nothing
        offloaded). An offloaded output leaves the stored bytes and counts twice in the transient: fetched back
        for the recompute, plus the same again for the neighbour's prefetch (remat.auto.tensor_offload); its
        copies' seconds beyond the block's forward and backward are exposed (offload.exposed_offload_s)."""
        stored, off_bytes = full.stored_bytes + self.kept_bytes(served - off), self.kept_bytes(off)
        backward = self.backward_s(served, full)
        exposed = exposed_offload_s(off_bytes, len(off), full.forward_s, backward, link) if off else 0.0
        peak = self.peak_bytes(served, full.stored_bytes, full.stored_bytes + full.transient_bytes) + off_bytes
        return dict(stored_bytes=stored, transient_bytes=max(0, peak - stored), forward_s=full.forward_s,
                    backward_s=backward + exposed, offload_bytes=off_bytes, saved_tensors=len(off),
                    recompute_flops=max(0, full.recompute_flops - self.kept_flops(served)))

    def splits(self, served, full, link) -> list[tuple[str, frozenset]]:
        """The kept/offloaded splits of a served set a tensor plan offers, (tag, offloaded): "k" all kept; with a
        ``link`` also "h", the largest outputs (greedy by bytes) whose copies the block's forward and backward
        hide, the rest kept (when neither empty nor all), and "o", all offloaded. Three splits, not every one."""
        if link is None:
            return [("k", frozenset())]
        backward = self.backward_s(served, full)
        hidden: frozenset = frozenset()
        for j in sorted(served, key=lambda j: -self.ops[j].nbytes):
            if exposed_offload_s(self.kept_bytes(hidden | {j}), len(hidden) + 1, full.forward_s, backward, link) == 0:
                hidden |= {j}
        return [("k", frozenset())] + ([("h", hidden)] if hidden and hidden != served else []) + [("o", served)]


class Variant(NamedTuple):
    """One option of a tensor plan for a block: op indices the cache keeps on the device, its cost (a
    remat.auto.measure.PolicyCost) and op indices it keeps on the host (remat.auto.tensor_offload)."""

    keep: frozenset
    cost: object
    offload: frozenset = frozenset()


def counted(func, args=()) -> bool:
    """Whether ``func`` (called on ``args``) has an index in a block's stream: every op torch's selective
    checkpoint asks about (not ``SAC_IGNORED_OPS``) except views and autocast's casts of parameters. A view
    allocates nothing, so it is never kept; and autograd replays an in-place write into a view differently on fake
    and real tensors (a ``view`` where eager runs a ``detach``), so counting views would shift the indices between
    the planned stream and the applied one. autocast caches its cast of a parameter for the rest of its region, so
    whether a block's forward casts its weights depends on what ran before it in that region (a second micro-batch
    casts none): counting them would shift the indices too, and never keeping them loses nothing."""
    return func not in SAC_IGNORED_OPS and not func.is_view and not parameter_cast(func, args)


class _Stream(TorchDispatchMode):
    """Records the SAC op stream (module docstring) of one forward: names, fresh output storages, prices."""

    def __init__(self, rates):
        super().__init__()
        self.rates, self.rows, self.keep = rates, [], []
        self.owner: dict[int, int] = {}      # storage -> the op that allocated it
        self.seen: set[int] = set()          # every storage read or written so far
        self.written: set[int] = set()       # ops whose output a later op writes in place

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        for t in _tensors((args, kwargs)):
            self.seen.add(_storage(t))
        if func._schema.is_mutable:
            self._writes(func, args, kwargs)
        out = func(*args, **kwargs)
        if not counted(func, args):
            return out
        index, fresh = len(self.rows), []
        for t in _tensors(out):
            key = _storage(t)
            if key not in self.seen and t.untyped_storage().nbytes() > 0:
                self.seen.add(key)
                self.owner[key] = index
                fresh.append(int(t.untyped_storage().nbytes()))
            self.keep.append(t)
        op = priced(func, args, kwargs, out, "recompute")
        seconds = 0.0 if op is None else op_seconds(op, self.rates, 1)
        self.rows.append([func.overloadpacket.__name__, sum(fresh), seconds, 0 if op is None else op.flops])
        return out

    def _writes(self, func, args, kwargs) -> None:
        values = dict(zip((a.name for a in func._schema.arguments), args)) | kwargs
        for arg in func._schema.arguments:
            value = values.get(arg.name)
            if arg.alias_info is not None and arg.alias_info.is_write and isinstance(value, torch.Tensor):
                owner = self.owner.get(_storage(value))
                if owner is not None:
                    self.written.add(owner)


class _Live(TorchDispatchMode):
    """The live bytes after each op of the SAC stream (a PeakMemory's current bytes beyond ``start``)."""

    def __init__(self, mem):
        super().__init__()
        self.mem, self.start, self.live = mem, mem.current_bytes(), []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if counted(func, args):
            self.live.append(self.mem.current_bytes() - self.start)
        return out


def block_ops(module, inputs, rates, amp, device) -> BlockOps:
    """The SAC op stream of one forward of ``module`` (module docstring). ``inputs()`` gives fresh (args,
    kwargs) of fake tensors for a run; ``amp()`` the block's autocast state; ``device`` where its memory is
    tracked. Two plain forwards: the stream (bytes of the outputs' storages, roofline seconds at ``rates``)
    and, with nothing extra held, the live bytes after each op (``BlockOps.live``)."""
    stream = _Stream(rates)
    args, kwargs = inputs()
    with amp(), stream:
        out = module(*args, **kwargs)
    returned = {stream.owner.get(_storage(t)) for t in _tensors(out)}
    del out
    del stream.keep[:]
    args, kwargs = inputs()
    with PeakMemory(device, module, *_tensors((args, kwargs))) as mem:
        with amp(), _Live(mem) as live:
            out = module(*args, **kwargs)
        del out
    ops = tuple(OpRecord(i, name, nbytes, seconds, flops, nbytes > 0 and seconds > 0 and (flops > 0 or not rates.fused)
                         and i not in stream.written and i not in returned and name != "_to_copy")
                for i, (name, nbytes, seconds, flops) in enumerate(stream.rows))
    if len(live.live) != len(ops):
        raise RecomputeError("", f"the block ran {len(live.live)} ops in one forward and {len(ops)} in another: "
                                 "its ops depend on more than its inputs' shapes; it cannot take a tensor plan")
    return BlockOps(ops, tuple(live.live))


class KeptSet:
    """A kept set of one block: the op names of its stream, the indices kept and those offloaded (kept by the
    cache, their storages on the host between forward and backward: remat.auto.tensor_offload) (module
    docstring). ``policy(on_offload)`` is a fresh torch policy_fn for one
    checkpointed region (remat.drop_cheap.contexts' decide); ``on_offload(output)`` gets each offloaded op's
    output in forward. Under torch.compile an op the block's eager stream never runs (a decomposition's, e.g. a
    bool attention mask made float before SDPA) is recomputed and skipped, and a set of FLOP ops only is matched
    on those (``_stream``); any other difference from the planned stream raises RecomputeError, as in eager."""

    def __init__(self, names: tuple[str, ...], keep: frozenset, block: str = "", offload: frozenset = frozenset(),
                 flop_ops: frozenset = frozenset()):
        self.names, self.keep, self.block, self.offload = tuple(names), frozenset(keep), block, frozenset(offload)
        self.flop_ops = frozenset(flop_ops)

    def _stream(self, compiling: bool) -> tuple[list[int], set[str]]:
        """The indices a traced op is matched against, and their names. Under torch.compile (``compiling``), when
        every kept and offloaded op has FLOPs (``flop_ops``: GEMMs, attention, convolutions — a compiled plan's
        sets always), only those ops are matched: decompositions rewrite the ops between them (a reshape of a
        grouped K/V head traced as ``_unsafe_view``, eager attention's scale), never a GEMM. Else every op."""
        chosen = self.keep | self.offload
        if compiling and self.flop_ops and chosen <= self.flop_ops:
            indices = sorted(self.flop_ops)
        else:
            indices = list(range(len(self.names)))
        return indices, {self.names[i] for i in indices}

    def policy(self, on_offload=None):
        counters, eager_ops = {False: 0, True: 0}, set(self.names)
        streams = {compiling: self._stream(compiling) for compiling in (False, True)}

        def decide(ctx, func, *args, **kwargs) -> CheckpointPolicy:
            if not counted(func, args):
                return CheckpointPolicy.PREFER_RECOMPUTE
            name = func.overloadpacket.__name__
            indices, names = streams[torch.compiler.is_compiling()]
            if torch.compiler.is_compiling() and (name not in eager_ops or name not in names):
                return CheckpointPolicy.PREFER_RECOMPUTE   # inserted by a decomposition, or not matched (_stream)
            j = counters[ctx.is_recompute]
            counters[ctx.is_recompute] += 1
            i = indices[j] if j < len(indices) else None
            if i is None or self.names[i] != name:
                self._refuse(name, len(self.names) if i is None else i)
            if i in self.offload and on_offload is not None:
                if not ctx.is_recompute:
                    on_offload(ctx.op_output)
                return CheckpointPolicy.MUST_SAVE
            if i in self.keep:
                if not ctx.is_recompute:
                    record_kept(func, ctx)
                return CheckpointPolicy.MUST_SAVE
            return CheckpointPolicy.PREFER_RECOMPUTE
        return decide

    def _refuse(self, name: str, i: int) -> None:
        planned = self.names[i] if i < len(self.names) else "the end of the block"
        why = ("under torch.compile the traced ops differ from eager's (decompositions): apply this tensor plan in "
               "eager, or a per-block plan under compile" if torch.compiler.is_compiling() else
               "it casts where the plan does not, or the reverse: a plan made outside torch.autocast and trained "
               "under it (or the reverse); plan it under the autocast it trains with" if "_to_copy" in (name, planned)
               else "it runs other ops than were planned (control flow on values or shapes); plan it again for these "
               "inputs")
        raise RecomputeError(self.block, f"the block ran aten.{name} as op {i}, where the tensor plan has {planned}: "
                                         f"{why}")

    def torch_policy(self) -> list[dict]:
        """The plan as torch reads it: per op of the stream, its name and CheckpointPolicy's name (an offloaded
        op: MUST_CPU_OFFLOAD, a policy torch 2.13 names but its eager cache treats as recompute; remat.auto.apply
        offloads it: remat.auto.tensor_offload).
        A policy_fn applying it counts the forward's ops as ``counted`` does — not ``SAC_IGNORED_OPS``, not views,
        not ``_to_copy`` of an ``nn.Parameter`` (autocast's weight casts); it answers PREFER_RECOMPUTE for those."""
        def policy(i: int) -> str:
            return ("MUST_CPU_OFFLOAD" if i in self.offload else "MUST_SAVE" if i in self.keep
                    else "PREFER_RECOMPUTE")
        return [{"index": i, "op": name, "policy": policy(i)} for i, name in enumerate(self.names)]


def _storage(t: torch.Tensor) -> int:
    return t.untyped_storage()._cdata


def _tensors(tree) -> list[torch.Tensor]:
    return [t for t in tree_flatten(tree)[0] if isinstance(t, torch.Tensor)]


__all__ = ["BlockOps", "KeptSet", "OpRecord", "Variant", "block_ops"]
