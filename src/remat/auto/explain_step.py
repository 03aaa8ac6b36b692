"""The step remat.auto.explain runs: ONE forward, loss and backward of the model as it is, with hooks on every
module of the blocks (which block runs, its inputs, the checkpoint region around it), the saved-tensor and
SAC-cache logs, live storages followed, each block re-run alone with its checkpoints made plain, and the ops
re-run in backward counted per block.

    Step(model, find_blocks(model), result=None, loss_fn=default_loss).run(args, kwargs)  # -> Explanation

What each number counts: remat.auto.diagnose; the instruments: remat.auto.instruments.
"""

from __future__ import annotations

import gc
from dataclasses import dataclass, field

import torch
from torch import nn
from torch.utils._pytree import tree_flatten, tree_map

from remat.auto.explain_rows import explanation_of
from remat.auto.blocks import Blocks
from remat.auto.explanation import Explanation
from remat.auto.fake import user_code
from remat.auto.instruments import (BackwardOps, BlockKeptLog, Cached, DetachedLog, LiveStorages, address,
                                    checkpoint_region, detached, got_grads, grad_state, named_tensors,
                                    plain_checkpoints, sac_caches)
from remat.measure.flops import RegistryFlops
from remat.measure.saved import SavedTensorLog


@dataclass
class BlockStep:
    """What the step saw of one block."""

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


class Step:
    """One step of ``model`` watched per block of ``found`` (module docstring); ``run`` returns the Explanation."""

    def __init__(self, model: nn.Module, found: Blocks, result, loss_fn, state=None, check=None):
        self.model, self.found, self.result, self.loss_fn = model, found, result, loss_fn
        self.state, self.check = state, check    # remat.auto.preserve.ModelState, remat.policies.ValueCheck
        self.stashed: list = []
        self.effects: list = []                  # remat.auto.preserve.SideEffect
        self.steps = [BlockStep() for _ in found.modules]
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
            region, reentrant, sequential = checkpoint_region()
            st.entry = len(self.log.records)
            st.args, st.kwargs = args, kwargs
            device = next((t.device.type for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)),
                          "cpu")
            st.amp = (device, torch.is_autocast_enabled(device), torch.get_autocast_dtype(device))
            tensors = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
            st.input_storages = {address(t) for t in tensors}
            st.inputs_require_grad = any(t.requires_grad for t in tensors)
            floats = {address(t): t.untyped_storage().nbytes() for t in tensors if t.is_floating_point()}
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
            region, reentrant, _ = checkpoint_region()
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
        inputs = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
        handles = self._install()
        tracker = LiveStorages([*self.model.parameters(), *self.model.buffers(), *inputs,
                                 *(p.grad for p in self.model.parameters() if p.grad is not None)], self)
        try:
            with tracker:
                with SavedTensorLog(self.model) as log, BlockKeptLog(self) as kept:
                    self.log, self.phase = log, "forward"
                    with user_code("example_args", "the model's forward on example_args / example_kwargs"):
                        output = self.model(*args, **kwargs)
                    loss = self.loss_fn(output)
                    self.phase = "off"
                alive = tracker.alive()
            if self.state is not None:        # before the plain re-runs set the blocks' attributes again
                self.stashed = self.state.stashed(self.found.names, self.found.modules)
            self._rerun_plain()
            for st in self.steps:             # explain's captures: what only they held is not the caller's
                st.args = st.kwargs = None
            gc.collect()                      # garbage in reference cycles is nobody's (and gc would free it)
            known = {r.storage for r in kept.records}
            for storage, nbytes in sac_caches().items():   # any SAC policy's cache, not only drop-cheap's
                if storage in known:
                    continue
                kept.records.append(Cached(storage, nbytes))
                i = tracker.block_of.get(storage)
                if i is not None:
                    self.steps[i].kept_storages.setdefault(storage, nbytes)
            live = self._live(alive, log, kept, loss, output, inputs)
            grads = grad_state(self.found.modules)
            scalars = self.state.scalars(self.found.modules) if self.state is not None else {}
            self.phase, self.last_block = "backward", None
            with BackwardOps(self):
                if loss.requires_grad:
                    loss.backward()
            self.phase = "off"
            if self.state is not None:
                self.effects = self.state.side_effects(self.found.names, self.found.modules, scalars)
        finally:
            self.phase = "off"
            for h in handles:
                h.remove()
        got = got_grads(self.found.modules, grads)
        return explanation_of(self, log, kept, live, got, loss.requires_grad)

    def _rerun_plain(self) -> None:
        """Each block's class forward on its captured inputs, checkpoints made plain: plain bytes and FLOPs."""
        self.phase = "rerun"
        try:
            with torch.random.fork_rng(devices=[]), torch.enable_grad(), plain_checkpoints():
                for i, (block, st) in enumerate(zip(self.found.modules, self.steps)):
                    if st.args is None:
                        continue
                    args, kwargs = tree_map(detached, (st.args, st.kwargs))
                    device, enabled, amp_dtype = st.amp      # the autocast the block ran under
                    with DetachedLog(self.model) as log, RegistryFlops() as flops, \
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
            "parameters": {address(p) for p in self.model.parameters()},
            "buffers": {address(b) for b in self.model.buffers()},
            "gradients": {address(p.grad) for p in self.model.parameters() if p.grad is not None},
            "inputs": {address(t) for t in inputs},
            "saved": {r.address for r in log.activations()},
            "cache": {r.storage for r in kept.records},
            "loss": {address(loss)},
            "kept on the blocks (attributes)": {s for st in self.stashed for s in st.storages},
        }
        counts: dict = {}
        for st in self.steps:
            for s in st.input_storages:
                counts[s] = counts.get(s, 0) + 1
        parts["shared block inputs"] = {s for s, n in counts.items() if n > 1}
        named = named_tensors(output)
        primary = next(((n, t) for n, t in named if t is not loss and n != "loss"), None)
        parts["output"] = {address(primary[1])} if primary is not None else set()
        seen: set = set()
        accounted = {}
        for name, storages in parts.items():
            fresh = (storages & live.keys()) - seen
            accounted[name] = sum(live[s] for s in fresh)
            seen |= fresh
        excess = {s: b for s, b in live.items() if s not in seen and b > 0}
        by_field: dict[str, int] = {}
        for name, t in named:
            s = address(t)
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
