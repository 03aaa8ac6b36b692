"""Part 1 of remat.auto.measure: the whole step of a model with every block plain, under FakeTensorMode —
each block's captured inputs and the live bytes at the moments the memory model needs (after the last block's
forward, when its backward starts, after the first block's backward), and the step's roofline seconds.

    whole = whole_step(model, args, kwargs, blocks, loss_fn)   # inputs, params, live_last, peak_head, peak_end
    seconds = whole_seconds(model, args, kwargs, loss_fn, rates)

What each number is: remat.auto.measure's docstring, part 1.
"""

from __future__ import annotations

import functools

import torch
from torch import nn
from torch.nn.modules.module import register_module_forward_pre_hook
from torch.utils._pytree import tree_flatten, tree_map_only

from remat.auto.boundaries import boundaries, tensor_leaves
from remat.auto.fake import user_code
from remat.errors import UsageError
from remat.measure.peak import PeakMemory
from remat.measure.saved import SavedTensorLog
from remat.timemodel.roofline import layer_times
from remat.timemodel.trace import LayerTrace, recording


def whole_step(model, args, kwargs, blocks, loss_fn) -> dict:
    """One plain step (forward, ``loss_fn``, backward) under the memory tracker: {"inputs": per block (args,
    kwargs, autocast state) of its first call or None, "links": per block its remat.auto.boundaries.Boundary
    (storages it shares with the next block or with code outside the blocks), "params": bytes of parameters and
    buffers, "param_count",
    "live_last", "peak_head", "peak_end" (bytes; peak_end None when no block input needs a gradient),
    "head_grads" (bytes of the gradients of the parameters of modules that run after the last block — the head's,
    made before the blocks' backward starts)}."""
    captured, links = capture_inputs(model, args, kwargs, blocks)
    marks: dict = {}
    handles = []
    device = device_of(model)
    params = unique_bytes([*model.parameters(), *model.buffers()])
    tensors = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
    try:
        with PeakMemory(device, model, *tensors) as mem:
            handles.append(blocks.modules[-1].register_forward_hook(
                functools.partial(_after_last_forward, mem, marks)))
            handles.append(blocks.modules[0].register_forward_pre_hook(
                functools.partial(_before_first_forward, mem, marks), with_kwargs=True))
            handles.append(register_module_forward_pre_hook(functools.partial(_after_last, marks)))
            loss = loss_fn(model(*args, **kwargs))     # the output is not held through backward
            loss.backward()
            # after the first block's backward (when its input needs a gradient): the embedding's backward
            marks["peak_end"] = mem.peak_so_far() if "hooked_end" in marks else None
    finally:
        for h in handles:
            h.remove()
    for p in model.parameters():
        p.grad = None
    head = {id(p): p for m in marks.get("after_last", ()) for p in m.parameters(recurse=False) if p.requires_grad}
    return {"inputs": captured, "links": links, "params": params,
            "param_count": sum(p.numel() for p in model.parameters()),
            "live_last": marks["live_last"], "peak_head": marks["peak_head"], "peak_end": marks["peak_end"],
            "head_grads": unique_bytes(head.values())}


def check_dense(model) -> None:
    """UsageError("model") naming the first trained nn.Embedding / nn.EmbeddingBag with ``sparse=True``: its gradient
    is a sparse tensor, which has no storage for the memory tracker (torch's MemTracker: "Cannot access storage of
    SparseTensorImpl") to count."""
    for name, module in model.named_modules():
        if isinstance(module, (nn.Embedding, nn.EmbeddingBag)) and module.sparse and module.weight.requires_grad:
            kind = type(module).__name__
            raise UsageError("model", f"{name or 'the model'} is nn.{kind}(sparse=True): its weight's gradient is a "
                                      "sparse tensor, whose bytes the step's memory measurement (torch's MemTracker) "
                                      "cannot count. Plan with sparse=False (set .sparse = False on it while "
                                      "planning: the plan then counts a dense gradient there), then apply the plan "
                                      "to the sparse model")


def checked_loss(loss_fn, model):
    """``loss_fn`` checked on every call: an error it raises, a result that is not a one-element tensor, or one
    that does not require grad is one UsageError — naming "model" when no parameter requires grad (nothing to
    train), else "loss_fn"."""
    def loss(output):
        with user_code("loss_fn", "loss_fn on the model's output"):
            value = loss_fn(output)
        if not isinstance(value, torch.Tensor) or value.numel() != 1:
            got = f"shape {tuple(value.shape)}" if isinstance(value, torch.Tensor) else type(value).__name__
            raise UsageError("loss_fn", f"must return a one-element tensor to call backward on, got {got}")
        if not value.requires_grad:
            if not any(p.requires_grad for p in model.parameters()):
                raise UsageError("model", "no parameter requires grad: there is no training step to plan")
            raise UsageError("loss_fn", "returned a tensor that does not require grad (detached from the output?)")
        return value
    return loss


def _after_last(marks, module, args):
    """Every module that starts its forward after the last block's output was made (the head's)."""
    if "hooked_last" in marks:
        marks.setdefault("after_last", []).append(module)


def check_inputs(blocks, inputs) -> None:
    """Every block ran, and none received a key/value cache (a training step has none; an isolated re-run
    would append to it)."""
    for name, captured in zip(blocks.names, inputs):
        if captured is None:
            raise UsageError("blocks", f"block {name} did not run in the forward: pass blocks=")
        caches = [type(x).__name__ for x in tree_flatten(captured)[0] if "Cache" in type(x).__name__]
        if caches:
            raise UsageError("example_kwargs", f"block {name} receives a {caches[0]}: plan a training step "
                                               "without a cache (use_cache=False)")


def capture_inputs(model, args, kwargs, blocks) -> tuple[list, tuple]:
    """(per block (args, kwargs, autocast state) of its first call in a forward of its own, or None for a block
    that did not run; per block its remat.auto.boundaries.Boundary, found in the same forward). Not captured
    during the measured step: holding every block's input would keep alive what the step frees (a bfloat16 Llama
    block's input, which only its float32 upcast saves: s·b·h·2 bytes per block). Tensors are detached (the
    forward's graph is freed) and keep their requires_grad."""
    captured: list = [None] * len(blocks)
    outputs: list = [None] * len(blocks)
    handles = [m.register_forward_pre_hook(functools.partial(_capture, captured, i), with_kwargs=True)
               for i, m in enumerate(blocks.modules)]
    handles += [m.register_forward_hook(functools.partial(_capture_output, outputs, i))
                for i, m in enumerate(blocks.modules)]
    try:
        with SavedTensorLog(model) as log, user_code("example_args", "the model's forward on example_args / "
                                                                     "example_kwargs"):
            model(*args, **kwargs)
    finally:
        for h in handles:
            h.remove()
    if any(c is None for c in captured):
        return captured, ()
    links = boundaries(blocks.names, [tensor_leaves(c[:2]) for c in captured], outputs, log)
    return captured, links


def _capture_output(outputs, i, module, args, output):
    """A block's first call: its output tensors (held until the links are found: their storage ids stay unique)."""
    if outputs[i] is None:
        outputs[i] = tensor_leaves(output)


def _capture(captured, i, module, args, kwargs):
    """A block's first call: its arguments, detached, and the autocast state it runs under (the model's forward
    may enter autocast itself; the isolated runs re-enter it)."""
    if captured[i] is None:
        device = device_of(module).type
        amp = (device, torch.is_autocast_enabled(device), torch.get_autocast_dtype(device))
        detached = tree_map_only(torch.Tensor, lambda t: t.detach().requires_grad_(t.requires_grad), (args, kwargs))
        captured[i] = (*detached, amp)


def _before_first_forward(mem, marks, module, args, kwargs):
    """Hook the hidden-state input of the first block: when its gradient is made, the blocks' backward is over
    and the embedding's begins (the ``end`` phase)."""
    x = next((t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor) and t.requires_grad),
             None)
    if x is not None and "hooked_end" not in marks:
        marks["hooked_end"] = True
        x.register_hook(lambda grad: mem.reset_peak())


def _after_last_forward(mem, marks, module, args, output):
    """From the last block's output on: the head's forward, the loss, the head's backward (``floor``) until the
    gradient of that output arrives (the last block's backward starts: ``live_last``)."""
    y = next((t for t in tree_flatten(output)[0] if isinstance(t, torch.Tensor) and t.requires_grad), None)
    if y is None or "hooked_last" in marks:
        return
    marks["hooked_last"] = True
    mem.reset_peak()

    def at_last_backward(grad):
        marks["peak_head"] = mem.peak_so_far()
        marks["live_last"] = mem.current_bytes()
    y.register_hook(at_last_backward)


def whole_seconds(model, args, kwargs, loss_fn, rates) -> float:
    """Roofline seconds of the whole step with every block plain (forward + backward)."""
    with recording(weight_shapes(model)) as recorder:
        loss = loss_fn(model(*args, **kwargs))
        recorder.phase = "backward"
        loss.backward()
    for p in model.parameters():
        p.grad = None
    times = layer_times(LayerTrace(tuple(recorder.ops), type(model).__name__, "none", 1, False, False), rates)
    return times.combined_s


def unique_bytes(tensors) -> int:
    """Bytes of the storages of ``tensors``, each storage once."""
    seen, total = set(), 0
    for t in tensors:
        storage = t.untyped_storage()
        if storage._cdata not in seen:
            seen.add(storage._cdata)
            total += storage.nbytes()
    return total


def weight_shapes(module) -> set:
    """Shapes of the 2-D parameters (the time model tells weight matmuls by them)."""
    return {tuple(p.shape) for p in module.parameters() if p.dim() == 2}


def device_of(module) -> torch.device:
    """The device of the first parameter (cpu when there is none)."""
    p = next(module.parameters(), None)
    return p.device if p is not None else torch.device("cpu")
