"""Per-layer activation policies and plans: none | selective | full | offload, and Megatron/Chen shorthands.

    plan = parse_plan("selective", layers=12)        # or "full", "offload", "uniform:2", "block:4",
    apply_plan(model, plan)                           #    "segments:3", "full,none,selective,..."

Policies (one per layer):
* ``none``      — autograd keeps everything it saves.
* ``full``      — the whole layer under ``torch.utils.checkpoint.checkpoint(use_reentrant=False)``: only its
                  input is kept; the layer's forward is re-run in backward (Korthikanti "full recompute").
* ``selective`` — only ``attn.core`` (Megatron's core_attn: QKᵀ, softmax, softmax dropout, ·V) is
                  checkpointed, so its inputs Q, K, V are kept and softmax output, dropout mask and dropout
                  output are not (exactly Korthikanti's selective saving, sbh·34 per layer at 16 bits).
                  Why not ``create_selective_checkpoint_contexts`` around the layer: what SAC keeps
                  (MUST_SAVE outputs) lives in its own cache, invisible to saved-tensor hooks, so the
                  accounting could not measure it; checkpointing the core module keeps exactly its inputs,
                  saved through autograd like any other tensor.
* ``offload``   — the layer runs under saved-tensor hooks that copy each saved activation (not parameters)
                  to a host buffer at pack time and back at unpack time: asynchronously, through the model's
                  remat.offload.OffloadHooks (pinned pool, side stream, prefetch). On a CPU device this is a
                  host memcpy: "simulated", not PCIe.
* ``drop-cheap`` — Chen 2016 §4.2: the layer under a checkpoint with an op-level selective policy
                  (``create_selective_checkpoint_contexts``, remat.drop_cheap): the outputs of matmul-like ops
                  (convolution, mm, addmm, bmm, baddbmm, attention kernels) are kept, every other op (norms,
                  activations, pooling, softmax, dropout, elementwise) is recomputed in backward. Runtime only:
                  the planner's options stay POLICIES (without drop-cheap), and what SAC keeps is invisible to
                  saved-tensor hooks, so its bytes are measured by remat.drop_cheap.KeptLog.

Shorthands (Megatron-LM recompute_method, Chen 2016):
* ``uniform:N``  — layers split into chunks of N, each chunk checkpointed as one unit (N = 1: per-layer full).
* ``block:N``    — the first N layers full, the rest none.
* ``segments:k`` — Chen's segments (``remat.formulas.chen.segment_sizes``: the first L mod k one layer
                   longer), every segment but the last checkpointed as one unit; k ≥ 2 (``segments:1`` would
                   checkpoint nothing and is a UsageError).

Recompute changes nothing: dropout RNG is replayed (preserve_rng_state), autocast state is restored by
checkpoint, buffers a region mutated in forward (BatchNorm running statistics) are restored after each
recompute, so they update once per step, and ``recomputing()`` lets forward code skip Python side effects
while torch re-runs it. Or it refuses with one RecomputeError (remat.errors) naming the region: parameters or
buffers changed between forward and backward, an in-place write into an output selective keeps, a saved tensor
written after offload saved it, a recompute that fails (data-dependent shapes), a recompute whose values differ
from its forward's: each region's first forwards and every 100th are checked by default (remat.policies.values:
``set_recompute_check``, ``ValueCheck`` for every op of every step); ``recompute_context`` re-enters a context
of the forward (fp8_autocast) around its recompute. A region recomputes as often as backward
asks (``retain_graph``, double backward); under torch.compile it is torch's own checkpoint.
"""

from remat.policies.apply import OffloadStats, apply_plan, apply_step_plan, clear_plan
from remat.policies.apply import _offloaded  # noqa: F401  (remat.auto.wrap's offload wrapper)
from remat.policies.checkpoint import SUPPORTED_TORCH, check_torch, checkpointed, drop_cheap, unwrap, wrap
from remat.policies.region import observe_recompute, recompute_context, recomputing
from remat.policies.values import Mismatch, ValueCheck, recompute_check, set_recompute_check
from remat.policies.plans import (POLICIES, RUNTIME_POLICIES, SHORTHANDS, STEP_POLICIES, LayerPolicies, Policy,
                                  parse_plan)

check_torch()

__all__ = ["SUPPORTED_TORCH", "POLICIES", "RUNTIME_POLICIES", "SHORTHANDS", "STEP_POLICIES", "LayerPolicies",
           "Mismatch", "OffloadStats", "Policy", "ValueCheck", "check_torch",
           "apply_plan", "apply_step_plan", "checkpointed", "clear_plan", "drop_cheap", "observe_recompute",
           "parse_plan", "recompute_check", "recompute_context", "recomputing", "set_recompute_check", "unwrap",
           "wrap"]
