"""Per-block costs of any eager nn.Module, measured under FakeTensorMode at the real sizes: no memory, no GPU.

    costs = measure_model(model, example_args, example_kwargs, find_blocks(model), gpu("h100-80gb"))
    costs.blocks[i].costs["full"].stored_bytes

What is measured, and how (nothing here is a formula of the model):

1. **The whole step, blocks plain** (one forward, the loss, one backward; torch's MemTracker through
   remat.measure.peak.PeakMemory): each block's inputs (args and kwargs, captured by a forward pre-hook), and
   the live bytes at three moments — ``params_bytes`` (parameters and buffers), ``held_bytes`` = live bytes when
   the last block's backward starts minus the parameters and the blocks' stored bytes (inputs, what the
   embedding saved, the head's gradients, the hidden-state
   gradient), ``floor_bytes`` = the peak from the last block's forward output to the start of its backward
   (head forward, loss, head backward) beyond parameters + held + every block's stored bytes, and
   ``end_bytes`` = the peak after the first block's backward (the embedding's backward, every gradient made)
   beyond parameters + held. The output is dropped once the loss is computed, as a training loop does
   (transformers' Trainer keeps the loss only): a caller who holds the output (its logits) through backward
   holds more than predicted — ``auto.explain`` names it (caller-keeps).
2. **Each block alone, per policy** (its captured inputs; tensors that required grad become leaves that
   do): ``stored_bytes`` — what it keeps for backward: autograd's saved tensors (saved-tensor hooks,
   remat.measure.saved.SavedTensorLog, parameters excluded) + the selective-checkpoint cache
   (remat.drop_cheap.KeptLog) + under a checkpoint the inputs it keeps by keyword (its recompute closure, seen
   by no hook), each storage once, without the storages of inputs that need no gradient (position embeddings,
   masks: shared by every block, counted once in ``held_bytes``, or in ``loose_bytes`` when only a checkpoint
   keeps them); ``transient_bytes`` — the peak of its backward beyond the live bytes when that backward starts
   (the recompute, the activation gradients, its parameters' gradients; the upstream gradient made inside
   autograd, ``_Seed``). A storage two parties keep — a block's output the next block saves, a block input a
   stem saves, a block output a head saves — is then counted once (remat.auto.boundaries). In a second run
   (the op recorder keeps every tensor alive), its ops: forward, backward and recompute seconds by the per-op
   roofline (remat.timemodel.roofline) at the GPU's rates for the parameters' dtype, and recompute FLOPs.
   Blocks of one class whose parameters and inputs have the same shapes, dtypes and keyword structure are
   measured once.
3. **offload** is not run (a CPU stand-in's host copy lives in the same memory): it keeps nothing on the
   device, holds the plain stored bytes on the host, fetches them back while its backward runs (transient =
   plain transient + 2 × plain stored: the block and the prefetched next one, as remat.planner.costs) and
   pays the copy time its compute does not hide (remat.formulas.offload.exposed_offload_s on the GPU's link).

The rest of a step (embedding, head, loss) is priced as the whole step's roofline time minus the blocks'.
Forward-phase peaks inside a block are not modelled (a block's backward, which re-runs its forward and
holds its gradients, is larger in every model we measured). Part 1 runs in remat.auto.whole_step; parts 2 and
3 here.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

import torch
from torch import nn
from torch.utils._pytree import tree_flatten, tree_map

from remat.auto import tensors, wrap
from remat.auto.blocks import Blocks
from remat.auto.boundaries import head_shared, loose_shared, shared_once, storage_id, tensor_leaves
from remat.auto.fake import ValuesNeeded, is_real, twin, values_needed
from remat.auto.hf import CACHE_OFF, cache_off_in_training, fallback_grouped_mm, unpacked_masks
from remat.auto.whole_step import (check_dense, check_inputs, checked_loss, device_of, unique_bytes, weight_shapes,
                                   whole_seconds, whole_step)
from remat.drop_cheap import KeptLog
from remat.errors import RecomputeError, UsageError
from remat.formulas import offload as offload_formulas
from remat.measure.flops import RecomputeTally
from remat.measure.peak import PeakMemory
from remat.measure.saved import SavedTensorLog
from remat.planner import keepsets
from remat.planner.problem import POLICIES
from remat.timemodel.roofline import Rates, layer_times
from remat.timemodel.trace import LayerTrace, recording

MEASURED = ("none", "selective", "full")
"""The policies run under fake tensors; offload is derived from none (module docstring)."""
KEPT_SETS = "op-level kept sets"
"""What a tensor plan offers beyond the block policies, as ``BlockCost.refused`` names it when a block cannot."""


@dataclass(frozen=True)
class PolicyCost:
    """One block under one policy (ints: bytes, FLOPs; floats: seconds on the GPU preset, one step)."""

    stored_bytes: int
    transient_bytes: int
    forward_s: float
    backward_s: float       # gradient work + recompute
    recompute_flops: int
    offload_bytes: int = 0
    saved_tensors: int = 0  # tensors saved for backward (the per-copy latency of offload)
    saved_inputs: tuple = ()    # (position among its tensor inputs, bytes) of the inputs it keeps on the device
    saved_outputs: tuple = ()   # (position among its tensor outputs, bytes) of the outputs it keeps
    saved_shared: tuple = ()    # (position, bytes) of the inputs needing no gradient it keeps (a checkpoint's)

    @property
    def time_s(self) -> float:
        """Seconds this block adds to a step: forward + backward (recompute included)."""
        return self.forward_s + self.backward_s


@dataclass(frozen=True)
class BlockCost:
    """A block's costs per policy; grad_bytes: its parameters' gradients (bytes, one per parameter storage)."""

    name: str
    grad_bytes: int
    costs: dict
    refused: dict = field(default_factory=dict)   # policy -> why it cannot run on this block (RecomputeError)
    variants: dict = field(default_factory=dict)  # a tensor plan's sets: label -> remat.auto.tensors.Variant
    ops: object = None                            # its remat.auto.tensors.BlockOps (a tensor plan's stream)


@dataclass(frozen=True)
class ModelCosts:
    """The measured model (module docstring): per-block costs and the terms outside the blocks (int bytes)."""

    blocks: tuple
    params_bytes: int
    trainable_bytes: int      # parameters that require grad (their gradients, their optimizer state)
    param_count: int
    held_bytes: int
    floor_bytes: int
    end_bytes: int
    outside_time_s: float
    dtype: str
    notes: tuple = ()         # how the model was run (remat.auto.hf.CACHE_OFF)
    head_grad_bytes: int = 0  # gradients made before the blocks' backward (of the parameters used after them)
    loose_bytes: int = 0      # block inputs needing no gradient a checkpoint keeps (boundaries.loose_shared)


def measure_model(model: nn.Module, args: tuple, kwargs: dict, blocks: Blocks, gpu, loss_fn=None,
                  policies=POLICIES, granularity: str = "block", compiled: bool = False) -> ModelCosts:
    """Measure ``model`` (module docstring) under FakeTensorMode; ``blocks`` from remat.auto.find_blocks,
    ``gpu`` a remat.timemodel.gpus.GPU, ``loss_fn(output) -> scalar`` (default ``default_loss``).

    ``granularity`` "tensor": each block also gets its selective kept sets (``tensor_variants``). ``compiled``:
    priced at fused rates (remat.timemodel.roofline: byte-priced ops read their inputs once, as under torch.compile).
    A model whose ops need tensor values (token routing by ``nonzero``, ``.item()``) is measured on a real copy
    with the real example inputs instead, and the costs say so in their notes; with fake or meta inputs or
    parameters it is one ValuesNeeded (UsageError("model")). Returns ModelCosts (bytes: int; seconds on ``gpu``). Raises
    UsageError("model") when a block never runs in the forward. Any wrapping by remat.auto.apply is lifted while
    measuring and restored afterwards."""
    loss_fn = checked_loss(loss_fn or default_loss, model)
    check_dense(model)
    state = wrap.applied(model)
    wrap.clear(model)
    measure = functools.partial(_measure, model, args, kwargs, blocks, gpu, loss_fn, policies, granularity, compiled)
    try:
        try:
            return measure(real=False)
        except ValuesNeeded as needed:
            inputs = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
            inputs_real = all(is_real(t) for t in inputs)
            if not (inputs_real and all(is_real(t) for t in model.parameters())):
                raise ValuesNeeded(needed.op, inputs_real) from None
            costs = measure(real=True)
            return replace(costs, notes=(*costs.notes, f"measured on a real copy with the example inputs, as "
                                         f"{needed.op} needs tensor values: the bytes and times are those of "
                                         "this batch's values (its routing); another batch may keep more"))
    finally:
        if state is not None:
            wrap.apply(model, state[1], list(state[0].modules))


def _measure(source, args, kwargs, blocks: Blocks, gpu, loss_fn, policies, granularity, compiled,
             real: bool) -> ModelCosts:
    """``measure_model`` on a fake twin of ``source``, or with ``real`` a real one (remat.auto.fake.twin)."""
    with twin(source, args, kwargs, real) as (model, args, kwargs):
        cache_off = cache_off_in_training(model, warn=False)     # as remat.auto.apply runs it
        notes = (CACHE_OFF,) if cache_off is not None and model.training \
            and kwargs.get("use_cache", model.config.use_cache) else ()
        blocks = Blocks(blocks.name, blocks.names, tuple(model.get_submodule(n) for n in blocks.names))
        with unpacked_masks(), fallback_grouped_mm(), values_needed():
            whole = whole_step(model, args, kwargs, blocks, loss_fn)
            check_inputs(blocks, whole["inputs"])
            dtype = _dtype(model)
            rates = replace(Rates.of(gpu, 1, dtype), fused=compiled)
            cache: dict = {}
            block_costs = []
            for name, module, captured in zip(blocks.names, blocks.modules, whole["inputs"]):
                key = _signature(module, captured)
                if key not in cache:
                    cache[key] = _block_costs(module, captured, rates, gpu, policies, granularity)
                block_costs.append(BlockCost(name, _grad_bytes(module), *cache[key]))
            block_costs = shared_once(block_costs, whole["links"])
            outside_s = whole_seconds(model, args, kwargs, loss_fn, rates) - sum(
                b.costs["none"].time_s for b in block_costs)
        headed = head_shared(block_costs, whole["links"])
        loose = loose_shared(block_costs, whole["links"], [tensor_leaves(c[:2]) for c in whole["inputs"]])
        held = whole["live_last"] - whole["params"] - headed - sum(b.costs["none"].stored_bytes for b in block_costs)
        return ModelCosts(
            blocks=tuple(block_costs), params_bytes=whole["params"], trainable_bytes=_grad_bytes(model),
            param_count=whole["param_count"], held_bytes=held, loose_bytes=loose,
            floor_bytes=max(0, whole["peak_head"] - whole["live_last"]) + headed,
            end_bytes=0 if whole["peak_end"] is None else whole["peak_end"] - whole["params"] - held,
            outside_time_s=max(0.0, outside_s), dtype=dtype, notes=notes, head_grad_bytes=whole["head_grads"])


def default_loss(output) -> torch.Tensor:
    """The scalar to call backward on: ``output.loss`` / ``output["loss"]`` when it is a tensor (HF with
    labels), else the sum of the first floating tensor of the output (a mapping's values in order — HF's
    ModelOutput is one). Raises UsageError("loss_fn") when there is none."""
    loss = output.get("loss") if isinstance(output, Mapping) else getattr(output, "loss", None)
    if isinstance(loss, torch.Tensor):
        return loss
    values = list(output.values()) if isinstance(output, Mapping) else output
    first = next((t for t in tree_flatten(values)[0] if isinstance(t, torch.Tensor) and t.is_floating_point()),
                 None)
    if first is None:
        raise UsageError("loss_fn", f"the model's output ({type(output).__name__}) has no floating tensor: pass "
                                    "loss_fn=")
    return first.sum()


def _block_costs(module, captured, rates, gpu, policies, granularity="block") -> tuple:
    """(policy -> PolicyCost, policy -> why it was refused, kept sets, ops): a policy whose run raises
    RecomputeError (an in-place write into what selective keeps) is not offered for this block. Kept sets
    and ops: ``tensor_variants`` when ``granularity`` is "tensor" and selective is among ``policies`` (none,
    refused as ``KEPT_SETS``, when the block's frontier is too large: keepsets.FrontierTooLarge)."""
    out, refused = {}, {}
    tensor = granularity == "tensor" and "selective" in policies
    for policy in MEASURED:
        if policy == "none" or policy in policies or (tensor and policy == "full"):
            try:
                out[policy] = _run_block(module, captured, policy, rates)
            except RecomputeError as error:
                if policy == "none":
                    raise
                refused[policy] = error.detail
    none = out["none"]
    if "offload" in policies:
        exposed = offload_formulas.exposed_offload_s(none.stored_bytes, max(1, none.saved_tensors), none.forward_s,
                                                     none.backward_s, gpu.link)
        out["offload"] = PolicyCost(0, none.transient_bytes + 2 * none.stored_bytes, none.forward_s,
                                    none.backward_s + exposed, 0, offload_bytes=none.stored_bytes,
                                    saved_tensors=none.saved_tensors)
    link = gpu.link if "offload" in policies else None
    variants, ops = {}, None
    if tensor and "full" in out:
        try:
            variants, ops = tensor_variants(module, captured, rates, out["full"], link)
        except keepsets.FrontierTooLarge as exc:      # planned per block, and the plan says so
            refused[KEPT_SETS] = f"{exc}; this block takes a block policy"
    return {p: out[p] for p in POLICIES if p in out and (p in policies or p == "none")}, refused, variants, ops


def tensor_variants(module, captured, rates, full: PolicyCost, link=None) -> tuple[dict, object]:
    """A block's selective kept sets (label -> remat.auto.tensors.Variant: op indices kept, PolicyCost, op
    indices offloaded) and its op stream. The sets the cache serves are the exact Pareto frontier of (bytes,
    recompute seconds spared) over its candidate op outputs (remat.planner.keepsets), each priced from the
    measured full recompute (BlockOps.served_cost). The empty set is ``full`` itself and is left out. Each
    served set is offered as the splits of BlockOps.splits: kept ("k<n>") and, with a ``link`` (a
    remat.formulas.offload.Link: "offload" among the choices), partly ("h<n>") or all ("o<n>") offloaded."""
    ops = tensors.block_ops(module, lambda: _leaves(captured), rates, functools.partial(_amp, captured),
                            device_of(module))
    candidates = ops.candidates
    variants = {}
    for n, point in enumerate(keepsets.frontier([(o.nbytes, o.seconds) for o in candidates])[1:], start=1):
        served = frozenset(candidates[i].index for i in point.items)
        for tag, off in ops.splits(served, full, link):
            variants[f"{tag}{n}"] = tensors.Variant(served - off, PolicyCost(
                **ops.served_cost(served, off, full, link), saved_inputs=full.saved_inputs,
                saved_outputs=full.saved_outputs, saved_shared=full.saved_shared), off)
    return variants, ops


def _run_block(module, captured, policy, rates, keep=None) -> PolicyCost:
    """Memory run, then op-recording run, of ``module`` alone under ``policy`` (module docstring, part 2);
    ``keep``: a selective tensor plan's remat.auto.tensors.KeptSet."""
    if policy != "none":
        module.forward = wrap.wrapper(module, policy, keep=keep)
    try:
        args, kwargs = _leaves(captured)
        shared = {t.untyped_storage()._cdata for t in tree_flatten((args, kwargs))[0]
                  if isinstance(t, torch.Tensor) and not t.requires_grad}
        inputs = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
        amp = functools.partial(_amp, captured)
        with PeakMemory(device_of(module), module, *inputs) as mem, RecomputeTally() as tally, amp():
            with SavedTensorLog(module) as log, KeptLog() as kept:
                out = module(*args, **kwargs)
            records = [r for r in log.activations() if r.address not in shared]
            saved = {r.address for r in log.activations()}
            stored = sum(r.storage_nbytes for r in records) + sum(
                r.nbytes for r in kept.records if r.storage not in saved and r.storage not in shared)
            kept_ids = saved | {r.storage for r in kept.records}
            if not any(t.requires_grad for t in tensor_leaves(out)):    # no graph (a frozen block on inputs that
                stored, kept_ids = 0, set()                             # need no gradient): nothing is kept
            elif policy != "none":  # a checkpoint keeps every input: args through a saved-tensor hook, kwargs in
                closure = {storage_id(t): t.untyped_storage().nbytes() for t in inputs     # its recompute closure
                           if t.requires_grad and storage_id(t) not in kept_ids}
                stored += sum(closure.values())
                kept_ids |= {storage_id(t) for t in inputs}
            saved_inputs, saved_outputs, saved_shared = (
                tuple((k, t.untyped_storage().nbytes()) for k, t in enumerate(leaves)
                      if t.requires_grad == grad and storage_id(t) in kept_ids)
                for leaves, grad in ((inputs, True), (tensor_leaves(out), True), (inputs, False)))
            outputs = _backward_args(out)[0]
            seed = [_Seed.apply(*outputs)] if outputs else []
            seeded = sum(t.numel() * t.element_size() for t in outputs)
            del out, outputs
            start = mem.current_bytes()
            mem.reset_peak()
            torch.autograd.backward(seed, [t.new_empty((0,)) for t in seed])
            transient = max(0, mem.peak_so_far() - start - seeded)
        _drop_grads(module)
        args, kwargs = _leaves(captured)
        with recording(weight_shapes(module)) as recorder, amp():
            outputs, grads = _backward_args(module(*args, **kwargs))
            recorder.phase = "backward"
            torch.autograd.backward(outputs, grads)
        _drop_grads(module)
    finally:
        module.__dict__.pop("forward", None)
    times = layer_times(LayerTrace(tuple(recorder.ops), type(module).__name__, policy, 1, False, False), rates)
    return PolicyCost(stored, transient, times.forward_s, times.backward_s, tally.total,
                      saved_tensors=len(records), saved_inputs=saved_inputs, saved_outputs=saved_outputs,
                      saved_shared=saved_shared)


def _amp(captured) -> torch.autocast:
    """The autocast state a block's captured inputs were recorded under (whole_step's third entry)."""
    device, enabled, amp_dtype = captured[2]
    return torch.autocast(device, dtype=amp_dtype, enabled=enabled)


class _Seed(torch.autograd.Function):
    """An empty tensor whose backward makes the upstream gradients (ones) of a block's outputs inside autograd's
    engine, which frees each once the block's last op has used it — as the head's gradient is freed in a whole
    step. Gradients passed to torch.autograd.backward would be held by the caller to the end of the backward:
    a block that does not pass its upstream gradient on (a final ReLU makes a new one) would be measured holding
    one gradient too many. Those bytes are counted as live when the backward starts (the whole step's ``held``).
    The gradient is dense, as a head's matmul makes it. A model with no head, whose loss is taken straight off
    the last block (``block_output.sum()``: an expanded scalar gradient), is not modelled: its measured peak was
    above the prediction by 760 B on a 16-wide toy and by one activation (128 KiB, 4.4 %) on a 64-wide MLP
    with in-place ops; seeding the same expanded gradient in the isolated run did not close it."""

    @staticmethod
    def forward(ctx, *outputs):
        ctx.specs = [(t.shape, t.dtype, t.device) for t in outputs]
        return outputs[0].new_empty((0,))

    @staticmethod
    def backward(ctx, grad):
        return tuple(torch.ones(shape, dtype=dtype, device=device) for shape, dtype, device in ctx.specs)


def _backward_args(out):
    """The outputs that need a gradient, and an upstream gradient for each (ones: any values do)."""
    outputs = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor) and t.requires_grad]
    return outputs, [torch.ones_like(t) for t in outputs]


def _leaves(captured):
    """Fresh copies of a block's captured inputs for an isolated run: tensors that required grad become copies
    of leaves that do (a block may write its input in place, which a leaf refuses; the copy is made before the
    run's memory is measured); others are passed as they are."""
    args, kwargs = captured[:2]

    def leaf(t):
        if isinstance(t, torch.Tensor) and t.requires_grad:   # a copy of a leaf: the block may write it in place
            return t.detach().requires_grad_(True).clone()
        return t
    return tree_map(leaf, args), tree_map(leaf, kwargs)


def _signature(module, captured) -> tuple:
    """Blocks with equal signatures cost the same: class, parameter shapes/dtypes, input structure."""
    def describe(x):
        if isinstance(x, torch.Tensor):
            return ("T", tuple(x.shape), str(x.dtype), x.requires_grad, x.untyped_storage()._cdata
                    if not x.requires_grad else None)
        return ("V", repr(x)[:200])
    leaves, spec = tree_flatten(captured)
    return (type(module), tuple((tuple(p.shape), str(p.dtype), p.requires_grad) for p in module.parameters()),
            str(spec), tuple(describe(x) for x in leaves))


def _grad_bytes(module) -> int:
    return unique_bytes([p for p in module.parameters() if p.requires_grad])


def _drop_grads(module) -> None:
    for p in module.parameters():
        p.grad = None


def _dtype(model) -> str:
    """The dtype most parameter bytes have, as a name ("bfloat16", "float32")."""
    counts: dict = {}
    for p in model.parameters():
        counts[p.dtype] = counts.get(p.dtype, 0) + p.numel()
    return str(max(counts, key=counts.get)).removeprefix("torch.") if counts else "float32"
