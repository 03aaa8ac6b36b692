"""Why did checkpointing save nothing? One training step of a model as it is, measured per block.

    from remat import auto; auto.explain(model, example_args, example_kwargs)   # or remat.auto.diagnose.explain
    report = explain(model, (), {"input_ids": ids, "labels": ids})
    print(report)                 # per block: mechanism, bytes kept vs plain, recompute FLOPs; then the traps
    report.rows, report.traps, report.totals, report.to_json()

    remat explain --model llama3-8b --checkpointing hf --seq 4096 --device fake

What runs: ONE step (forward, loss, backward) of ``model`` exactly as it is — wrapped by remat.auto.apply,
by hand with torch.utils.checkpoint (reentrant or not, per block or per child), by
``checkpoint_sequential``, or by HuggingFace's ``gradient_checkpointing_enable()`` — with measuring hooks
around it; nothing about the model is changed (gradients accumulate into ``.grad`` as in a normal step).

What is measured, per block (the blocks: remat.auto.find_blocks):
* ``kept_bytes`` — bytes the block keeps for backward: autograd's saved tensors (remat.measure.saved.
  SavedTensorLog: unique storages, parameters excluded, checkpoint inputs included) plus what a selective-
  checkpoint cache keeps (remat.drop_cheap.KeptLog, invisible to saved-tensor hooks). A checkpoint's inputs
  saved by the caller (``checkpoint(block, x)`` in the parent, ``checkpoint_sequential``) count for the
  block that takes them. Storages saved by several blocks (a shared mask, RoPE cos/sin) count once, for the
  first. Offloaded saves live in host memory and are not counted (device bytes).
* ``plain_bytes`` — bytes the block keeps with no checkpointing: each block's inputs are captured in the
  step (forward pre-hook, with kwargs) and the block's class forward re-run on them in isolation, with
  grad on, every ``torch.utils.checkpoint`` call in it made a plain call (so HuggingFace's layer wrapper,
  remat's policies, SAC and per-child checkpoints run plain), measured by SavedTensorLog.
* ``recompute_flops`` / ``recompute_ops`` — the forward work re-run in backward inside the block: every op
  dispatched during ``loss.backward()`` with grad mode on (a checkpoint's recompute runs under
  ``enable_grad``; gradient kernels run with grad off), attributed to the block whose modules are running.
  FLOPs are torch.utils.flop_counter's matmul-like scope (remat.measure.flops.flop_count: mm, addmm, bmm,
  SDPA, convolution); ops count every non-view op, so a selective checkpoint that recomputes only
  pointwise ops shows ops but no FLOPs. ``forward_flops`` is the plain block's forward, same scope.
* ``predicted_bytes`` — what an AutoPlan (``result``) predicted the block keeps under its policy.
* At the start of backward: live bytes (every storage made in the step or passed in, followed by weak
  reference like torch's MemTracker — which remat.measure.peak.PeakMemory uses off-GPU but which cannot
  follow a model with frozen parameters; garbage in reference cycles collected first) against what explains
  them — parameters, buffers, gradients, the inputs, saved tensors, SAC caches (drop-cheap's KeptLog, and
  any selective-checkpoint policy's cache found among live objects), inputs shared by several blocks (a
  mask, RoPE cos/sin: HuggingFace's checkpoint keeps keyword inputs in its recompute closure, where saved-
  tensor hooks do not see them), the loss and the output tensor it comes from; the rest is named by the
  output field holding it ("attentions", "hidden_states") or "elsewhere" (hooks, globals, closures).

The traps (``Trap.code``), each with one sentence and what to do:
* ``no-saving``        a checkpointed block that recomputes nothing or keeps ≥ 90 % of its plain bytes
                       (or checkpointing switched on that did not run: a HuggingFace model in eval mode);
* ``last-segment``     checkpoint_sequential / ``segments:k`` never checkpoints its last segment;
* ``reentrant-no-grad`` reentrant checkpoint whose inputs do not require grad: the block's parameters get
                       no gradients — not a saving;
* ``per-child``        each child checkpointed instead of the block: the block's own ops and the children's
                       inputs are still kept;
* ``caller-keeps``     live bytes at backward start beyond everything above (output_hidden_states,
                       output_attentions, a hook keeping activations).

Works with real tensors and under FakeTensorMode (when the parameters are fake, their mode is entered).
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import json
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map

from remat.auto.measure import default_loss
from remat.auto.blocks import Blocks, find_blocks
from remat.units import format_bytes

NO_SAVING = "no-saving"
LAST_SEGMENT = "last-segment"
REENTRANT_NO_GRAD = "reentrant-no-grad"
PER_CHILD = "per-child"
CALLER_KEEPS = "caller-keeps"
TRAPS = (NO_SAVING, LAST_SEGMENT, REENTRANT_NO_GRAD, PER_CHILD, CALLER_KEEPS)

KEEPS_ALL = 0.9
"""A checkpointed block keeping at least this fraction of its plain bytes saved (about) nothing."""
CALLER_SHARE = 0.05
"""Live bytes beyond the accounted ones, as a fraction of the saved bytes (autograd + caches), that count as
a caller keeping tensors (below it: allocator-level noise such as RNG state copies)."""

_CKPT_FILE = "checkpoint.py"
_CKPT_OPS = ("checkpoint", "CheckpointFunction")  # SavedRecord.op of checkpoint inputs (non-reentrant, reentrant)


@dataclass(frozen=True)
class Trap:
    """One known trap seen in the step: ``code`` (TRAPS), the ``blocks`` it concerns (qualified names),
    ``message`` (one sentence with the measured numbers) and ``fix`` (what to do)."""

    code: str
    blocks: tuple[str, ...]
    message: str
    fix: str

    def __str__(self) -> str:
        return f"[{self.code}] {self.message} Fix: {self.fix}"


@dataclass
class Explanation:
    """What one step kept and recomputed, per block, and the traps seen.

    rows: one dict per block (keys: index, block, mechanism, region, kept_bytes, plain_bytes, kept_share,
    predicted_bytes, recompute_flops, recompute_ops, forward_flops, inputs_require_grad, got_grads; bytes
    int, FLOPs int, None where not measured); traps: list of Trap; totals: dict of int bytes / FLOPs (kept,
    plain, predicted, recompute, outside the blocks, live at backward start and what explains it, excess).
    Row keys also: saved_bytes / cache_bytes (the two parts of kept_bytes), input_bytes, declared (an
    auto.apply policy, "hf", or None), calls.
    """

    rows: list[dict]
    traps: list[Trap]
    totals: dict
    blocks: str = ""
    device: str = ""

    def codes(self) -> list[str]:
        """The trap codes seen, in order."""
        return [t.code for t in self.traps]

    def to_json(self) -> str:
        """The explanation as a JSON string (bytes as int bytes, FLOPs as int FLOPs)."""
        return json.dumps({"blocks": self.blocks, "device": self.device, "rows": self.rows,
                           "traps": [dataclasses.asdict(t) for t in self.traps], "totals": self.totals},
                          indent=2, default=str)

    def __str__(self) -> str:
        return _render(self)


# --- the step --------------------------------------------------------------------------------------------------

def explain(model: nn.Module, example_args=(), example_kwargs: dict | None = None, result=None,
            blocks: str | Sequence[nn.Module] | None = None,
            loss_fn: Callable[[Any], torch.Tensor] | None = None) -> Explanation:
    """Run one training step of ``model`` as it is and explain, per block, what checkpointing kept.

    example_args / example_kwargs: one micro-batch as the model takes it. result: an AutoPlan (its predicted
    bytes per block are set beside the measured ones). blocks: None (remat.auto.apply's blocks if applied,
    else remat.auto.find_blocks), a container's qualified name, or a list of modules. loss_fn: output ->
    scalar; default ``output.loss`` when it is a tensor, else the first tensor of the output summed.

    Returns an Explanation (module docstring: what each number counts). Raises UsageError("blocks") when no
    blocks are found, UsageError("loss_fn") when the output holds no tensor. Sources: torch.autograd.graph.
    saved_tensors_hooks (SavedTensorLog), create_selective_checkpoint_contexts' policy (KeptLog),
    torch.utils.flop_counter.
    """
    args = tuple(example_args) if isinstance(example_args, (tuple, list)) else (example_args,)
    kwargs = dict(example_kwargs or {})
    found = _blocks(model, blocks, result)
    with _fake_mode_of(model):
        return _Step(model, found, result, loss_fn or default_loss).run(args, kwargs)


def _blocks(model: nn.Module, blocks, result) -> Blocks:
    if blocks is not None:
        return find_blocks(model, blocks)
    from remat.auto.wrap import applied
    done = applied(model)
    if done is not None:
        return done[0]
    if result is not None and getattr(result, "blocks", None):
        return find_blocks(model, result.blocks)
    return find_blocks(model)


def _fake_mode_of(model: nn.Module):
    """The FakeTensorMode of the model's parameters, entered unless one is active (else a null context)."""
    from torch._subclasses.fake_tensor import FakeTensor
    param = next((p for p in model.parameters() if isinstance(p, FakeTensor)), None)
    if param is None or torch._C._get_dispatch_mode(torch._C._TorchDispatchModeKey.FAKE) is not None:
        return contextlib.nullcontext()
    return param.fake_mode


@dataclass
class _BlockStep:
    """What the step saw of one block (internal)."""

    calls: int = 0
    entry: int = 0                        # len(log.records) when its first call began
    args: tuple | None = None             # captured inputs (dropped before backward)
    kwargs: dict | None = None
    amp: tuple = ("cpu", False, torch.bfloat16)   # (device type, autocast on, its dtype) at its call
    input_storages: set = field(default_factory=set)
    inputs_require_grad: bool = False
    input_bytes: int = 0                  # bytes of its floating-point input storages
    region: tuple | None = None           # innermost checkpoint around the block's call
    reentrant: bool = False               # ... or around any of its modules: reentrant
    child_regions: dict = field(default_factory=dict)   # direct child name -> regions seen in its subtree
    inner_regions: set = field(default_factory=set)     # every region seen inside the block
    sequential: bool = False              # called from checkpoint_sequential
    kept_storages: dict = field(default_factory=dict)   # SAC cache: storage -> bytes
    recompute_flops: int = 0
    recompute_ops: int = 0
    plain_bytes: int | None = None
    forward_flops: int | None = None


class _Step:
    def __init__(self, model: nn.Module, found: Blocks, result, loss_fn):
        self.model, self.found, self.result, self.loss_fn = model, found, result, loss_fn
        self.steps = [_BlockStep() for _ in found.modules]
        self.phase = "off"
        self.stack: list[int] = []        # block indices of the running modules
        self.children: list = []          # direct child (of a block) each running module is under, or None
        self.last_block: int | None = None
        self.region_blocks: dict = {}     # region -> block indices called directly inside it
        self.log = None
        owner = {}
        for i, block in enumerate(found.modules):
            for m in block.modules():
                owner.setdefault(id(m), i)
        self.owner = owner
        self.direct = {id(child): (i, name) for i, block in enumerate(found.modules)
                       for name, child in block.named_children()}

    # --- hooks ---------------------------------------------------------------------------------------------
    def _install(self) -> list:
        handles = []
        blocks = {id(b): i for i, b in enumerate(self.found.modules)}
        for i, block in enumerate(self.found.modules):
            for m in block.modules():
                if id(m) in blocks:
                    handles.append(m.register_forward_pre_hook(self._block_pre(blocks[id(m)]), with_kwargs=True))
                else:
                    handles.append(m.register_forward_pre_hook(self._module_pre(self.owner[id(m)], m)))
                handles.append(m.register_forward_hook(self._post, always_call=True))
        return handles

    def _block_pre(self, i: int):
        def hook(module, args, kwargs):
            self.stack.append(i)
            self.children.append(None)
            self.last_block = i
            if self.phase != "forward":
                return None
            st = self.steps[i]
            st.calls += 1
            if st.calls > 1:
                return None
            region, reentrant, sequential = _regions()
            st.entry = len(self.log.records)
            st.args, st.kwargs = args, kwargs
            device = next((t.device.type for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)),
                          "cpu")
            st.amp = (device, torch.is_autocast_enabled(device), torch.get_autocast_dtype(device))
            tensors = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
            st.input_storages = {_address(t) for t in tensors}
            st.inputs_require_grad = any(t.requires_grad for t in tensors)
            floats = {_address(t): t.untyped_storage().nbytes() for t in tensors if t.is_floating_point()}
            st.input_bytes = int(sum(floats.values()))
            st.region, st.sequential = region, sequential
            st.reentrant = st.reentrant or reentrant
            if region is not None:
                self.region_blocks.setdefault(region, []).append(i)
            return None
        return hook

    def _module_pre(self, i: int, module: nn.Module):
        direct = self.direct.get(id(module))

        def hook(mod, args):
            under = direct[1] if direct is not None else (self.children[-1] if self.children else None)
            self.stack.append(i)
            self.children.append(under)
            self.last_block = i
            if self.phase != "forward":
                return None
            region, reentrant, _ = _regions()
            st = self.steps[i]
            if under is not None:
                regions = st.child_regions.setdefault(under, set())
                if region is not None and region != st.region:
                    regions.add(region)
            if region is not None and region != st.region:
                st.inner_regions.add(region)
                st.reentrant = st.reentrant or reentrant
            return None
        return hook

    def _post(self, module, args, output):
        if self.stack:
            self.stack.pop()
        if self.children:
            self.children.pop()

    # --- run -----------------------------------------------------------------------------------------------
    def run(self, args: tuple, kwargs: dict) -> Explanation:
        from remat.measure.saved import SavedTensorLog
        inputs = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
        handles = self._install()
        tracker = _LiveStorages([*self.model.parameters(), *self.model.buffers(), *inputs,
                                 *(p.grad for p in self.model.parameters() if p.grad is not None)], self)
        try:
            with tracker:
                with SavedTensorLog(self.model) as log, _BlockKeptLog(self) as kept:
                    self.log, self.phase = log, "forward"
                    output = self.model(*args, **kwargs)
                    loss = self.loss_fn(output)
                    self.phase = "off"
                alive = tracker.alive()
            self._rerun_plain()
            for st in self.steps:             # explain's captures: what only they held is not the caller's
                st.args = st.kwargs = None
            gc.collect()                      # garbage in reference cycles is nobody's (and gc would free it)
            known = {r.storage for r in kept.records}
            for address, nbytes in _sac_caches().items():   # any SAC policy's cache, not only drop-cheap's
                if address in known:
                    continue
                kept.records.append(_Cached(address, nbytes))
                i = tracker.block_of.get(address)
                if i is not None:
                    self.steps[i].kept_storages.setdefault(address, nbytes)
            live = self._live(alive, log, kept, loss, output, inputs)
            grads = _grad_state(self.found.modules)
            self.phase, self.last_block = "backward", None
            with _BackwardOps(self):
                if loss.requires_grad:
                    loss.backward()
            self.phase = "off"
        finally:
            self.phase = "off"
            for h in handles:
                h.remove()
        got = _got_grads(self.found.modules, grads)
        return self._explain(log, kept, live, got, loss.requires_grad)

    def _rerun_plain(self) -> None:
        """Each block's class forward on its captured inputs, checkpoints made plain: plain bytes and FLOPs."""
        from remat.measure.flops import RegistryFlops
        self.phase = "rerun"
        try:
            with torch.random.fork_rng(devices=[]), torch.enable_grad(), _plain_checkpoints():
                for i, (block, st) in enumerate(zip(self.found.modules, self.steps)):
                    if st.args is None:
                        continue
                    args, kwargs = tree_map(_detached, (st.args, st.kwargs))
                    device, enabled, amp_dtype = st.amp      # the autocast the block ran under
                    with _DetachedLog(self.model) as log, RegistryFlops() as flops, \
                            torch.autocast(device, dtype=amp_dtype, enabled=enabled):
                        out = type(block).forward(block, *args, **kwargs)
                    st.plain_bytes, st.forward_flops = log.total_bytes(), flops.total
                    del out, log
        finally:
            self.phase = "off"

    def _live(self, alive: dict, log, kept, loss, output, inputs) -> dict:
        """Live bytes at backward start, what explains them, and the rest by output field. ``alive``: the
        tracker's storages when the forward ended; those freed since were held by explain's captures only."""
        live = {s: nbytes for s, (nbytes, ref) in alive.items() if not ref.expired()}
        parts = {
            "parameters": {_address(p) for p in self.model.parameters()},
            "buffers": {_address(b) for b in self.model.buffers()},
            "gradients": {_address(p.grad) for p in self.model.parameters() if p.grad is not None},
            "inputs": {_address(t) for t in inputs},
            "saved": {r.address for r in log.activations()},
            "cache": {r.storage for r in kept.records},
            "loss": {_address(loss)},
        }
        counts: dict = {}
        for st in self.steps:
            for s in st.input_storages:
                counts[s] = counts.get(s, 0) + 1
        parts["shared block inputs"] = {s for s, n in counts.items() if n > 1}
        named = _named_tensors(output)
        primary = next(((n, t) for n, t in named if t is not loss and n != "loss"), None)
        parts["output"] = {_address(primary[1])} if primary is not None else set()
        seen: set = set()
        accounted = {}
        for name, storages in parts.items():
            fresh = (storages & live.keys()) - seen
            accounted[name] = sum(live[s] for s in fresh)
            seen |= fresh
        excess = {s: b for s, b in live.items() if s not in seen and b > 0}
        by_field: dict[str, int] = {}
        for name, t in named:
            s = _address(t)
            if s in excess:
                key = name.split("[")[0] or "output"
                by_field[key] = by_field.get(key, 0) + excess.pop(s)
        pool = getattr(getattr(getattr(self.model, "remat_offload", None), "hooks", None), "pool", None)
        if pool is not None and excess and not pool.pin:      # a CPU stand-in: the "host" is this memory
            host = min(pool.live_bytes, sum(excess.values()))
            accounted["offload host buffers (simulated: host memcpy)"] = host
            for s in sorted(excess, key=excess.get, reverse=True):
                if host <= 0:
                    break
                host -= excess.pop(s)
        if excess:
            by_field["elsewhere (hooks, globals, closures)"] = sum(excess.values())
        return {"live_bytes": sum(live.values()), "accounted": accounted, "excess": by_field,
                "primary": primary[0] if primary else None}

    # --- rows and traps ------------------------------------------------------------------------------------
    def _explain(self, log, kept, live: dict, got: list, backward_ran: bool) -> Explanation:
        names = self.found.names
        autograd = self._attribute(log)
        autograd_storages = {r.address for r in log.activations()}
        policies = _declared(self.model, self.found)
        predicted = _predicted(self.result, names)
        rows = []
        for i, (name, st) in enumerate(zip(names, self.steps)):
            cache = sum(b for s, b in st.kept_storages.items() if s not in autograd_storages)
            kept_bytes = autograd[i] + cache
            region = self._region(i)
            mechanism = _mechanism(st, region, policies[i])
            share = kept_bytes / st.plain_bytes if st.plain_bytes else None
            rows.append({"index": i, "block": name, "mechanism": mechanism, "region": region,
                         "declared": policies[i], "kept_bytes": kept_bytes, "saved_bytes": autograd[i],
                         "cache_bytes": cache, "plain_bytes": st.plain_bytes, "kept_share": share,
                         "predicted_bytes": predicted[i], "recompute_flops": st.recompute_flops,
                         "recompute_ops": st.recompute_ops, "forward_flops": st.forward_flops,
                         "inputs_require_grad": st.inputs_require_grad if st.calls else None,
                         "input_bytes": st.input_bytes if st.calls else None, "got_grads": got[i],
                         "calls": st.calls})
        saved_total = sum(r.storage_nbytes for r in log.activations())
        cache_total = sum(r.nbytes for r in kept.records if r.storage not in autograd_storages)
        totals = {
            "kept_bytes": sum(r["kept_bytes"] for r in rows),
            "plain_bytes": sum(r["plain_bytes"] or 0 for r in rows),
            "predicted_bytes": (sum(p for p in predicted if p is not None)
                                if any(p is not None for p in predicted) else None),
            "saved_bytes": saved_total, "cache_bytes": cache_total,
            "outside_blocks_bytes": saved_total + cache_total - sum(r["kept_bytes"] for r in rows),
            "recompute_flops": sum(r["recompute_flops"] for r in rows),
            "forward_flops": sum(r["forward_flops"] or 0 for r in rows),
            "live_at_backward_bytes": live["live_bytes"], "accounted_bytes": live["accounted"],
            "excess_bytes": sum(live["excess"].values()), "excess_by_holder": live["excess"],
            "backward_ran": backward_ran,
        }
        traps = self._traps(rows, policies, live, saved_total + cache_total, backward_ran)
        return Explanation(rows, traps, totals, self.found.name, _device_of(self.model))

    def _attribute(self, log) -> list[int]:
        """Bytes autograd saved per block; checkpoint inputs saved outside the blocks go to the block taking
        them (non-reentrant: the next block entered; reentrant: the last one entered, else the next)."""
        names = self.found.names
        out = [0] * len(names)
        for k, r in enumerate(log.records):
            if r.is_parameter or r.duplicate:
                continue
            i = _block_of(r.module, names)
            if i is None and r.op in _CKPT_OPS:
                i = self._taker(k, r)
            if i is not None:
                out[i] += r.storage_nbytes
        return out

    def _taker(self, k: int, record) -> int | None:
        storage = record.address
        entered = [(st.entry, i) for i, st in enumerate(self.steps) if st.calls]
        after = [i for e, i in sorted(entered) if e > k]       # entry = len(records) when the block began
        before = [i for e, i in sorted(entered, reverse=True) if e <= k]
        order = after[:1] + before[:1] if record.op == "checkpoint" else before[:1] + after[:1]
        for i in order:
            if storage in self.steps[i].input_storages:
                return i
        return None

    def _region(self, i: int) -> str:
        """none | segment | block | children | part: how the block's step was checkpointed."""
        st = self.steps[i]
        if st.region is not None:
            return "segment" if len(self.region_blocks.get(st.region, ())) > 1 else "block"
        called = list(st.child_regions.values())
        if called and all(len(r) == 1 for r in called) and len(set().union(*called)) == 1:
            return "block"            # every child inside one region that began in the block (HF, auto.apply)
        covered = [r for r in called if r]
        if len(covered) >= 2 and all(a.isdisjoint(b) for j, a in enumerate(covered) for b in covered[j + 1:]):
            return "children"         # two or more children, each in its own region(s)
        if st.inner_regions:
            return "part"
        if st.kept_storages or (st.calls and not called and self._has_ckpt_records(i)):
            return "block"
        return "none"

    def _has_ckpt_records(self, i: int) -> bool:
        name = self.found.names[i]
        return any(r.op in _CKPT_OPS and _block_of(r.module, [name]) == 0 for r in self.log.records)

    def _traps(self, rows: list[dict], policies: list, live: dict, saved: int, backward_ran: bool) -> list[Trap]:
        traps: list[Trap] = []
        checkpointed = [r for r in rows if r["region"] in ("block", "segment")]
        # 3. reentrant checkpoint, inputs without grad
        lost = [r for r, st in zip(rows, self.steps)
                if st.reentrant and st.calls and not st.inputs_require_grad and r["got_grads"] is False]
        if lost:
            traps.append(Trap(REENTRANT_NO_GRAD, _names(lost), (
                f"{_span(lost)} run under reentrant checkpoint (use_reentrant=True) but none of their inputs "
                "requires grad, so their parameters got no gradients this step: the "
                f"{_fmt(sum(r['kept_bytes'] for r in lost))} they keep is not a saving, it is a silent bug "
                "(frozen embeddings, LoRA)."),
                "use use_reentrant=False (remat.auto.apply, gradient_checkpointing_kwargs={'use_reentrant': False}), "
                "or make the block input require grad (HF: model.enable_input_require_grads())."))
        skip = {r["index"] for r in lost}
        # 1. checkpointed but keeps everything / recomputes nothing; or switched on and not run
        wasted = []
        for r in checkpointed:
            if r["index"] in skip or not r["calls"]:
                continue
            keeps = r["kept_share"] is not None and r["kept_share"] >= KEEPS_ALL
            idle = backward_ran and r["recompute_ops"] == 0 and (r["plain_bytes"] or 0) > 0
            if keeps or idle:
                wasted.append((r, "keeps" if keeps else "idle"))
        if wasted:
            kept = sum(r["kept_bytes"] for r, _ in wasted)
            plain = sum(r["plain_bytes"] or 0 for r, _ in wasted)
            what = ("keeps " + _pct(kept, plain) + f" of {'its' if len(wasted) == 1 else 'their'} plain bytes "
                    f"({_fmt(kept)} of {_fmt(plain)})"
                    if any(k == "keeps" for _, k in wasted) else "recomputes nothing in backward")
            blocks = [r for r, _ in wasted]
            traps.append(Trap(NO_SAVING, _names(blocks), (
                f"{_span(blocks)} {'is' if len(blocks) == 1 else 'are'} checkpointed but "
                f"{what if len(blocks) == 1 else what.replace('keeps', 'keep').replace('recomputes', 'recompute')}: "
                "the checkpoint saves (about) nothing."),
                "check what the region saves: a selective policy that saves every op, or a region whose "
                "outputs are all kept, saves nothing — checkpoint the whole block with a policy that "
                "recomputes (remat.auto.apply(model, 'full'))."))
        inactive = [r for r in rows if r["declared"] in ("full", "selective", "hf") and r["region"] == "none"
                    and r["calls"] and r["index"] not in skip]
        if inactive:
            hf = any(r["declared"] == "hf" for r in inactive)
            traps.append(Trap(NO_SAVING, _names(inactive), (
                f"checkpointing is switched on for {_span(inactive)} but did not run: they keep "
                f"{_fmt(sum(r['kept_bytes'] for r in inactive))}, "
                f"{_pct(sum(r['kept_bytes'] for r in inactive), sum(r['plain_bytes'] or 0 for r in inactive))} "
                "of their plain bytes."),
                ("HuggingFace layers checkpoint only in training mode with grad enabled: call model.train() "
                 "(from_pretrained returns the model in eval mode)." if hf else
                 "run the step in training with grad enabled, and do not replace the blocks' forward after "
                 "remat.auto.apply.")))
        # 2. the last segment of checkpoint_sequential / segments:k
        tail = []
        for r, st in zip(reversed(rows), reversed(self.steps)):
            if r["region"] != "none" or not st.calls:
                break
            tail.append(r)
        tail.reverse()
        segments = _segments_spec(self.model)
        sequential = any(self.steps[r["index"]].sequential for r in tail)
        deliberate = any(p in ("none", "offload") for p in policies[-len(tail):]) if tail else False
        if tail and (sequential or segments or (checkpointed and len(tail) < len(rows) and not deliberate
                                                and all(r["region"] != "none" for r in rows[:-len(tail)]))):
            kept = sum(r["kept_bytes"] for r in tail)
            how = (f"'{segments}'" if segments else "checkpoint_sequential" if sequential
                   else "checkpointing by segments")
            every = len(tail) == len(rows)
            traps.append(Trap(LAST_SEGMENT, _names(tail), (
                f"{how} never checkpoints its last segment: {_span(tail)} "
                f"{'(every block: one segment checkpoints nothing) ' if every else ''}"
                f"keep{'s' if len(tail) == 1 else ''} everything, {_fmt(kept)}."),
                "use more segments (k ≥ 2; k = √L is Chen's choice) or checkpoint the last blocks too "
                "(remat.auto.apply(model, 'full') wraps every block)."))
        # 4. each child checkpointed instead of the block
        split = [r for r in rows if r["region"] == "children"]
        if split:
            kept = sum(r["kept_bytes"] for r in split)
            plain = sum(r["plain_bytes"] or 0 for r in split)
            traps.append(Trap(PER_CHILD, _names(split), (
                f"{_span(split)} checkpoint{'s' if len(split) == 1 else ''} each child separately, not the "
                f"block: the block's own ops (norms, residual adds) and every child's inputs are still kept — "
                f"{_fmt(kept)}, {_pct(kept, plain)} of the plain {_fmt(plain)}; checkpointed whole, they would keep "
                f"about their inputs, {_fmt(sum(r['input_bytes'] or 0 for r in split))}."),
                "checkpoint the block as one region (remat.auto.apply(model, 'full'), HF "
                "gradient_checkpointing_enable(), or checkpoint(block, ...)), not its attention and MLP."))
        # 5. tensors kept alive by the caller
        excess = sum(live["excess"].values())
        if excess > 0 and excess >= CALLER_SHARE * max(saved, 1):
            ranked = sorted(live["excess"].items(), key=lambda kv: -kv[1])
            holders = ", ".join(f"{k} {_fmt(v)}" for k, v in ranked)
            traps.append(Trap(CALLER_KEEPS, (), (
                f"{_fmt(excess)} is live at the start of backward beyond parameters, gradients, inputs, saved "
                f"tensors, SAC caches, the loss and the output it comes from: {holders}; checkpointing cannot "
                "free what the caller holds."),
                "do not ask for output_hidden_states / output_attentions while training, drop outputs and "
                "hook-held activations before backward (loss = model(...).loss)."))
        return traps


# --- helpers ---------------------------------------------------------------------------------------------------

def _regions() -> tuple[tuple | None, bool, bool]:
    """(innermost torch.utils.checkpoint region around the caller, whether it is reentrant, whether
    checkpoint_sequential is on the stack), read from the Python stack. A region is (frame id, id of the
    checkpointed function): frame ids alone can be reused by the next region."""
    frame = sys._getframe(2)
    region, reentrant, sequential = None, False, False
    while frame is not None:
        code = frame.f_code
        if code.co_filename.endswith(_CKPT_FILE) and "torch" in code.co_filename:
            if code.co_name == "checkpoint_sequential":
                sequential = True
            elif region is None and code.co_name in ("checkpoint", "forward"):
                local = frame.f_locals
                fn = local.get("function", local.get("run_function"))
                if fn is not None:
                    region = (id(frame), id(fn))
                    reentrant = code.co_name == "forward"
        frame = frame.f_back
    return region, reentrant, sequential


class _LiveStorages(TorchDispatchMode):
    """Every storage an op creates while active, plus ``external`` tensors, followed by weak reference (what
    torch's MemTracker does; MemTracker itself cannot follow a model with frozen parameters: it registers a
    gradient hook on each). ``alive()``: {StorageImpl address: (bytes, weak reference)} of those alive now."""

    def __init__(self, external: Sequence[torch.Tensor], step: "_Step | None" = None):
        super().__init__()
        self.refs: dict = {}
        self.block_of: dict = {}      # StorageImpl address -> index of the block running when it was made
        self.step = step
        for t in external:
            self._note(t)

    def _note(self, t: torch.Tensor) -> None:
        from torch.multiprocessing.reductions import StorageWeakRef
        try:
            storage = t.untyped_storage()
        except (RuntimeError, NotImplementedError):
            return
        known = self.refs.get(storage._cdata)
        if known is None or known[1].expired():   # weak only: the step's tensors alone keep storages alive
            self.refs[storage._cdata] = (int(storage.nbytes()), StorageWeakRef(storage))
            step = self.step
            if step is not None and step.phase == "forward" and step.stack:
                self.block_of[storage._cdata] = step.stack[-1]

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor):
                self._note(t)
        return out

    def alive(self) -> dict:
        return {address: (nbytes, ref) for address, (nbytes, ref) in self.refs.items() if not ref.expired()}


def _DetachedLog(model: nn.Module):
    """A SavedTensorLog whose pack hook keeps a detached alias: with no backward to free it, a saved output
    kept as itself would hold its own grad_fn in a reference cycle autograd never frees (leaked memory)."""
    from remat.measure.saved import SavedTensorLog

    class Log(SavedTensorLog):
        def _pack(self, t):
            return super()._pack(t).detach()
    return Log(model)


@dataclass(frozen=True)
class _Cached:
    """A storage some selective-checkpoint cache holds (shaped like remat.drop_cheap.KeptRecord)."""

    storage: int
    nbytes: int


def _sac_caches() -> dict:
    """{StorageImpl address: bytes} of every tensor held by a live selective-checkpoint cache
    (torch.utils.checkpoint's _Caching/_CachedTorchDispatchMode.storage: what a SAC policy MUST/PREFER_SAVEs),
    found among the live Python objects — any policy, not only remat.drop_cheap's."""
    import torch.utils.checkpoint as ckpt
    kinds = {k for k in (getattr(ckpt, "_CachingTorchDispatchMode", None),
                         getattr(ckpt, "_CachedTorchDispatchMode", None)) if k is not None}
    out = {}
    for obj in gc.get_objects():
        if type(obj) not in kinds:    # forward (caching) and recompute (cached) modes share one storage
            continue
        for outputs in getattr(obj, "storage", {}).values():
            values = outputs.values() if isinstance(outputs, dict) else outputs
            for leaf in tree_flatten(list(values))[0]:
                t = getattr(leaf, "val", leaf)
                if isinstance(t, torch.Tensor):
                    try:
                        storage = t.untyped_storage()
                    except (RuntimeError, NotImplementedError):
                        continue
                    out[storage._cdata] = int(storage.nbytes())
    return out


class _BlockKeptLog:
    """remat.drop_cheap.KeptLog that also notes which block each cached output belongs to."""

    def __init__(self, step: _Step):
        from remat.drop_cheap import KeptLog

        class Log(KeptLog):
            def record(self, func, out):
                before = len(self.records)
                super().record(func, out)
                if step.stack and step.phase == "forward":
                    for r in self.records[before:]:
                        step.steps[step.stack[-1]].kept_storages[r.storage] = r.nbytes
        self.log = Log()

    def __enter__(self):
        return self.log.__enter__()

    def __exit__(self, *exc):
        self.log.__exit__(*exc)


class _BackwardOps(TorchDispatchMode):
    """During backward: ops run with grad mode on (a checkpoint's recompute) counted into the running block."""

    def __init__(self, step: _Step):
        super().__init__()
        self.step = step

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        from remat.measure.flops import flop_count
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if torch.is_grad_enabled() and not func.is_view:
            step = self.step
            i = step.stack[-1] if step.stack else step.last_block
            if i is not None and any(isinstance(t, torch.Tensor) for t in tree_flatten(out)[0]):
                step.steps[i].recompute_ops += 1
                step.steps[i].recompute_flops += flop_count(func, args, kwargs, out)
        return out


@contextlib.contextmanager
def _plain_checkpoints():
    """Every torch.utils.checkpoint.checkpoint call made a plain call while active (reentrant: the function
    applied directly; non-reentrant: no hooks, no recompute, context_fn ignored). Patches two module globals
    of torch.utils.checkpoint that checkpoint() looks up at call time; not thread-safe."""
    import torch.utils.checkpoint as ckpt

    class Plain:
        @staticmethod
        def apply(function, preserve_rng_state, *args):
            return function(*args)

    def generator(*args, **kwargs):
        yield

    saved = ckpt.CheckpointFunction, ckpt._checkpoint_without_reentrant_generator
    ckpt.CheckpointFunction, ckpt._checkpoint_without_reentrant_generator = Plain, generator
    try:
        yield
    finally:
        ckpt.CheckpointFunction, ckpt._checkpoint_without_reentrant_generator = saved


def _detached(x):
    if isinstance(x, torch.Tensor):
        return x.detach().requires_grad_(x.requires_grad) if x.is_floating_point() or x.is_complex() else x.detach()
    return x


def _address(t: torch.Tensor) -> int:
    try:
        return t.untyped_storage()._cdata
    except (RuntimeError, NotImplementedError):
        return -id(t)


def _block_of(module: str, names: Sequence[str]) -> int | None:
    best = None
    for i, name in enumerate(names):
        if module == name or module.startswith(name + "."):
            if best is None or len(name) > len(names[best]):
                best = i
    return best


def _named_tensors(output, prefix: str = "") -> list[tuple[str, torch.Tensor]]:
    """(field name, tensor) of a model output: dicts / ModelOutputs by key, tuples by index, dataclasses by
    field ("hidden_states[3]")."""
    if isinstance(output, torch.Tensor):
        return [(prefix, output)]
    if isinstance(output, dict):
        items = [(str(k), v) for k, v in output.items()]
    elif dataclasses.is_dataclass(output) and not isinstance(output, type):
        items = [(f.name, getattr(output, f.name)) for f in dataclasses.fields(output)]
    elif isinstance(output, (tuple, list)):
        return [pair for j, v in enumerate(output) for pair in _named_tensors(v, f"{prefix}[{j}]")]
    else:
        return []
    return [pair for k, v in items for pair in _named_tensors(v, f"{prefix}.{k}" if prefix else k)]


def _grad_state(blocks: Sequence[nn.Module]) -> list[list]:
    return [[(p, p.grad, None if p.grad is None else p.grad._version) for p in b.parameters() if p.requires_grad]
            for b in blocks]


def _got_grads(blocks: Sequence[nn.Module], before: list[list]) -> list[bool | None]:
    """Per block: whether any trainable parameter got a gradient in backward (None: it has none)."""
    out = []
    for state in before:
        if not state:
            out.append(None)
            continue
        out.append(any(p.grad is not None and (g is None or p.grad is not g or p.grad._version != v)
                       for p, g, v in state))
    return out


def _declared(model: nn.Module, found: Blocks) -> list[str | None]:
    """Per block the checkpointing asked for: an auto.apply policy, "hf" for a HuggingFace layer with
    gradient_checkpointing on, else None."""
    from remat.auto.wrap import applied
    done = applied(model)
    if done is not None and tuple(done[0].names) == tuple(found.names):
        return list(done[1])
    return ["hf" if getattr(b, "gradient_checkpointing", False) is True else None for b in found.modules]


def _predicted(result, names: Sequence[str]) -> list[int | None]:
    if result is None:
        return [None] * len(names)
    by_name = dict(zip(tuple(result.block_names), range(len(result.block_names))))
    out = []
    for name in names:
        j = by_name.get(name)
        out.append(None if j is None else int(result.problem.layers[j].option(result.policies[j]).stored_bytes))
    return out


def _mechanism(st: _BlockStep, region: str, declared) -> str:
    if declared == "offload":
        return "offload"
    if region == "none":
        return "none"
    kind = "reentrant" if st.reentrant else "non-reentrant"
    if st.kept_storages:
        kind = "selective (SAC)"
    return {"block": kind, "segment": f"segment, {kind}", "children": f"per child, {kind}",
            "part": f"part, {kind}"}[region]


def _segments_spec(model: nn.Module) -> str | None:
    spec = getattr(getattr(model, "remat_plan", None), "spec", "") or ""
    return spec if spec.startswith("segments:") else None


def _device_of(model: nn.Module) -> str:
    from torch._subclasses.fake_tensor import FakeTensor
    p = next(model.parameters(), None)
    if p is None:
        return "cpu"
    return f"fake ({p.device})" if isinstance(p, FakeTensor) else str(p.device)


def _names(rows) -> tuple[str, ...]:
    return tuple(r["block"] for r in rows)


def _span(rows) -> str:
    if len(rows) == 1:
        return f"block {rows[0]['block']}"
    return f"blocks {rows[0]['block']} … {rows[-1]['block']} ({len(rows)})"


def _fmt(n) -> str:
    return "—" if n is None else format_bytes(n)


def _pct(part, whole) -> str:
    return "—" if not whole else f"{100 * part / whole:.0f} %"


def _flops(n) -> str:
    if n is None:
        return "—"
    for unit, scale in (("TFLOP", 1e12), ("GFLOP", 1e9), ("MFLOP", 1e6), ("kFLOP", 1e3)):
        if n >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{n} FLOP"


def _render(e: Explanation) -> str:
    t = e.totals
    head = ["block", "checkpointing", "kept", "plain", "kept/plain", "predicted", "recompute", "fwd (plain)"]
    rows = [[r["block"], r["mechanism"], _fmt(r["kept_bytes"]), _fmt(r["plain_bytes"]),
             _pct(r["kept_bytes"], r["plain_bytes"]), _fmt(r["predicted_bytes"]),
             _flops(r["recompute_flops"]),
             _flops(r["forward_flops"])] for r in e.rows]
    rows.append(["total", "", _fmt(t["kept_bytes"]), _fmt(t["plain_bytes"]), _pct(t["kept_bytes"], t["plain_bytes"]),
                 _fmt(t["predicted_bytes"]), _flops(t["recompute_flops"]), _flops(t["forward_flops"])])
    widths = [max(len(str(x[j])) for x in [head] + rows) for j in range(len(head))]
    line = lambda cells: "  ".join(str(c).ljust(w) if j < 2 else str(c).rjust(w)  # noqa: E731
                                   for j, (c, w) in enumerate(zip(cells, widths))).rstrip()
    out = [f"remat explain: one training step as it is, {len(e.rows)} blocks ({e.blocks or 'given'}), "
           f"device {e.device}; bytes in KiB/MiB/GiB (binary), FLOPs matmul-like (torch flop_counter)",
           line(head), line(["-" * w for w in widths])]
    out += [line(r) for r in rows[:-1]] + [line(["-" * w for w in widths]), line(rows[-1])]
    acc = t["accounted_bytes"]
    out.append("")
    out.append(f"kept: autograd's saved tensors + SAC caches, per block; plain: the block's forward re-run alone "
               f"with no checkpoint; outside the blocks: {_fmt(t['outside_blocks_bytes'])}")
    out.append(f"live at backward start: {_fmt(t['live_at_backward_bytes'])} = "
               + " + ".join(f"{k} {_fmt(v)}" for k, v in acc.items() if v)
               + (f" + unexplained {_fmt(t['excess_bytes'])}" if t["excess_bytes"] else ""))
    out.append("")
    if e.traps:
        out.append(f"traps ({len(e.traps)}):")
        out += [f"  {trap}" for trap in e.traps]
    else:
        out.append("traps: none seen")
    return "\n".join(out)
