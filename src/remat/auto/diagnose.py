"""Why did checkpointing save nothing? One training step of a model as it is, measured per block.

    from remat import auto; auto.explain(model, example_args, example_kwargs)   # or remat.auto.diagnose.explain
    report = explain(model, (), {"input_ids": ids, "labels": ids})
    print(report)                 # per block: mechanism, bytes kept vs plain, recompute FLOPs; then the traps
    report.rows, report.traps, report.totals, report.to_json()

    remat explain --model llama3-8b --checkpointing hf --seq 4096 --device fake

What runs: ONE step (forward, loss, backward) of ``model`` exactly as it is — wrapped by remat.auto.apply,
by hand with torch.utils.checkpoint (reentrant or not, per block or per child), by
``checkpoint_sequential``, or by HuggingFace's ``gradient_checkpointing_enable()`` — with measuring hooks
around it; nothing about the model is changed: its buffers (BatchNorm running statistics), ``.grad``, tensor
attributes and the RNG state are as before afterwards (remat.auto.preserve).

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
                       output_attentions, a hook keeping activations);
* ``stashed``          a block keeps tensors on itself (``self.last_h = h``, a list it appends to): alive until
                       the next step, outside autograd (remat.auto.preserve);
* ``recompute-differs`` a block remat checkpoints recomputed other values than its forward (remat.policies.
                       ValueCheck: a checksum of every op's outputs compared): it reads state that is not its
                       inputs, and its gradients are not the unmodified model's;
* ``side-effects``     a block that recomputes has forward code whose effects are not values: a hook on one of
                       its modules, an attribute its forward changes (a counter); both run twice per step
                       unless guarded with ``remat.policies.recomputing()`` (remat.auto.preserve).

Works with real tensors and under FakeTensorMode (when the parameters are fake, their mode is entered).

Modules: ``explain_step`` (the step and its hooks), ``instruments`` (what watches it), ``explain_rows`` (the per-
block rows and totals), ``traps`` (the traps), ``explanation`` (Explanation, Trap, the printed text).
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Sequence

import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensor
from torch.utils._pytree import tree_map

from remat.auto.blocks import Blocks, find_blocks
from remat.auto.explain_step import Step
from remat.auto.explanation import Explanation, Trap
from remat.auto.fake import fake_model, input_device, keyword_inputs, values_needed
from remat.auto.measure import default_loss
from remat.auto.preserve import ModelState
from remat.auto.traps import (CALLER_KEEPS, CALLER_SHARE, KEEPS_ALL, LAST_SEGMENT, NO_SAVING, PER_CHILD,
                              REENTRANT_NO_GRAD, RECOMPUTE_DIFFERS, SIDE_EFFECTS, STASHED, TRAPS)
from remat.auto.whole_step import checked_loss
from remat.auto.wrap import applied
from remat.errors import UsageError
from remat.policies import ValueCheck

__all__ = ["explain", "Explanation", "Trap", "TRAPS", "NO_SAVING", "LAST_SEGMENT", "REENTRANT_NO_GRAD", "PER_CHILD",
           "CALLER_KEEPS", "KEEPS_ALL", "CALLER_SHARE", "STASHED", "RECOMPUTE_DIFFERS", "SIDE_EFFECTS"]


def explain(model: nn.Module, example_args=(), example_kwargs: dict | None = None, result=None,
            blocks: str | Sequence[nn.Module] | None = None,
            loss_fn: Callable[[Any], torch.Tensor] | None = None) -> Explanation:
    """Run one training step of ``model`` as it is and explain, per block, what checkpointing kept.

    example_args / example_kwargs: one micro-batch as the model takes it. result: an AutoPlan (its predicted
    bytes per block are set beside the measured ones). blocks: None (remat.auto.apply's blocks if applied,
    else remat.auto.find_blocks), a container's qualified name, or a list of modules. loss_fn: output ->
    scalar; default ``output.loss`` when it is a tensor, else the first tensor of the output summed.

    Returns an Explanation (module docstring: what each number counts). Raises UsageError("blocks") when no
    blocks are found, UsageError("loss_fn") when the output holds no tensor or the loss is not a scalar needing
    grad, UsageError("example_args") when the forward raises on the inputs, UsageError("result") for a result that
    is not an AutoPlan. Sources: torch.autograd.graph.
    saved_tensors_hooks (SavedTensorLog), create_selective_checkpoint_contexts' policy (KeptLog),
    torch.utils.flop_counter.
    """
    args = tuple(example_args) if isinstance(example_args, (tuple, list)) else (example_args,)
    kwargs = keyword_inputs(example_kwargs)
    if result is not None and not hasattr(result, "block_names"):
        raise UsageError("result", f"an AutoPlan (auto.plan's result), not {type(result).__name__}")
    found = _blocks(model, blocks, result)
    if any(p.device.type == "meta" for p in model.parameters()):
        return _explain_fake_copy(model, args, kwargs, found, result, loss_fn)
    with _fake_mode_of(model), values_needed(), ModelState(model) as state, ValueCheck(strict=False) as check:
        loss = checked_loss(loss_fn or default_loss, model)
        return Step(model, found, result, loss, state, check).run(args, kwargs)


def _explain_fake_copy(model: nn.Module, args: tuple, kwargs: dict, found: Blocks, result, loss_fn):
    """A model on the meta device has no values to run: explain a fake copy of it (remat.auto.measure.
    fake_model) on the inputs' device; a copy keeps remat.auto.apply's wrappers, over its own blocks."""
    mode, copied = fake_model(model, input_device(args, kwargs))
    with mode:
        args, kwargs = tree_map(lambda x: mode.from_tensor(x) if isinstance(x, torch.Tensor) else x, (args, kwargs))
        return explain(copied, args, kwargs, result, [copied.get_submodule(n) for n in found.names], loss_fn)


def _blocks(model: nn.Module, blocks, result) -> Blocks:
    if blocks is not None:
        return find_blocks(model, blocks)
    done = applied(model)
    if done is not None:
        return done[0]
    if result is not None and getattr(result, "blocks", None):
        return find_blocks(model, result.blocks)
    return find_blocks(model)


def _fake_mode_of(model: nn.Module):
    """The FakeTensorMode of the model's parameters, entered unless one is active (else a null context)."""
    param = next((p for p in model.parameters() if isinstance(p, FakeTensor)), None)
    if param is None or torch._C._get_dispatch_mode(torch._C._TorchDispatchModeKey.FAKE) is not None:
        return contextlib.nullcontext()
    return param.fake_mode
