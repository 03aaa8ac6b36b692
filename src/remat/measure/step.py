"""One training step of a model under a recompute plan, measured: saved bytes, peak bytes, FLOPs, time.

    row = measure(from_name("gpt2-124m", seq=256), "selective", device="cpu")

The one step measurer of the package: ``remat measure``, the planner's validation and the torch sweeps
(``keep_grads=True``) all call ``measure``.
The step is forward (tokens [s, b] -> logits [s, b, v]) + fp32 cross-entropy + backward; no optimizer.
With ``keep_grads`` one untimed step first allocates the parameter gradients, which are zeroed in place and
kept, so the measured peak is what the step adds above a fixed model state (``peak_activation_bytes``).
One instrumented step records, together (the instruments hold no tensors, so the peak is the plain step's):
  * saved-for-backward bytes through saved-tensor hooks (remat.measure.saved.SavedTensorLog), whole model
    and per layer, and the same quantity a second, independent way: the live-bytes delta across the forward
    from the memory tracker (``activation_bytes_tracker``; it also holds the loss and excludes the inputs);
  * peak bytes (remat.measure.peak.PeakMemory; ``peak_method`` says which mechanism), and the bytes alive
    when the forward starts (``base_bytes``: parameters, gradients if kept, inputs);
  * FLOPs of forward, backward (gradient work only) and recompute (remat.measure.flops).
Then, on real devices, untimed warm-up steps and ≥ 5 timed ones (remat.measure.timing).
``device="fake"`` builds the model and inputs under FakeTensorMode on the CPU: paper sizes, no memory, no
time (step_time_s is None).
"""

from __future__ import annotations

import contextlib

import torch

from remat.device import resolve_device
from remat.drop_cheap import KeptLog, cache_bytes
from remat.measure.bandwidth import SIMULATED
from remat.measure.flops import StepFlopCounter
from remat.measure.peak import PeakMemory
from remat.measure.saved import SavedTensorLog
from remat.measure.timing import MIN_REPEATS, time_step
from remat.models.presets import ModelConfig
from remat.models.transformer import build_model, lm_loss, random_tokens
from remat.policies import apply_plan, parse_plan

DEVICES = ("cpu", "cuda", "fake")
FLOPS_METHOD = ("torch.utils.flop_counter: FlopCounterMode in forward, its FLOP registry in backward and inside "
                "each checkpoint recompute (context_fn); flops_backward excludes the recompute")


def measure(cfg: ModelConfig, policy: str, device: str = "cpu", seed: int = 0, warmup: int = 1,
            repeats: int = MIN_REPEATS, timing: bool = True, early_stop: bool = False,
            keep_grads: bool = False) -> dict:
    """Measure one training step of ``cfg`` under ``policy`` on ``device``; returns one flat dict (JSON-ready).

    policy: a spec for remat.policies.parse_plan ("none", "selective", "full", "offload", "uniform:N",
    "block:N", "segments:k", or a comma list). device: "cpu", "cuda" or "fake". timing: also time the step
    (ignored under fake). keep_grads: allocate the gradients in an untimed step first and keep them (zeroed
    in place; the timed steps zero them in place too). Keys: model, policy, plan, device, dtype, layers,
    seq, micro_batch, hidden, heads, attention, activation_bytes (saved-tensor hooks plus drop-cheap's
    selective-checkpoint cache, activation_bytes_sac_cache), activation_bytes_per_layer,
    activation_bytes_outside_layers, activation_bytes_tracker, base_bytes, peak_bytes,
    peak_activation_bytes (= peak − base), peak_method, flops_forward, flops_forward_layers, flops_backward,
    flops_recompute, flops_method, offloaded_bytes, offload_note, step_time_s, step_time_iqr_s,
    step_time_samples, timing_method (provenance is added where the row is written: the experiment's table,
    or ``remat measure``).
    activation_bytes_per_layer counts what each layer's own modules saved: layers inside a multi-layer
    checkpoint unit (uniform:N, segments:k) show 0 and the unit's input is in activation_bytes_outside_layers.
    Sizes in bytes (int), FLOPs (int), times in seconds.
    Raises UsageError("device") for an unknown or unavailable device, UsageError("policy") for a bad plan.
    """
    run_on = str(resolve_device(device, allowed=DEVICES))
    plan = parse_plan(policy, cfg.layers)
    torch.manual_seed(seed)
    fake = contextlib.nullcontext() if device != "fake" else _fake_mode()
    with fake:
        model = build_model(cfg, run_on)
        apply_plan(model, plan, early_stop=early_stop)
        tokens, targets = random_tokens(cfg, run_on), random_tokens(cfg, run_on)
        if keep_grads:
            _loss(model, tokens, targets).backward()
            model.zero_grad(set_to_none=False)
        row = _instrumented_step(model, tokens, targets, run_on)
    row = {"model": cfg.name, "policy": plan.spec, "plan": list(plan), "device": device, "dtype": cfg.dtype,
           "layers": cfg.layers, "seq": cfg.seq, "micro_batch": cfg.micro_batch, "hidden": cfg.hidden,
           "heads": cfg.heads, "attention": cfg.attention, **row}
    row.update(_timing(model, tokens, targets, run_on, warmup, repeats, keep_grads) if timing and device != "fake"
               else {"step_time_s": None, "step_time_iqr_s": None, "step_time_samples": None,
                     "timing_method": None})
    return row


def _fake_mode():
    from torch._subclasses.fake_tensor import FakeTensorMode
    return FakeTensorMode()


def _loss(model, tokens, targets) -> torch.Tensor:
    return lm_loss(model(tokens), targets)


def _instrumented_step(model, tokens, targets, device: str) -> dict:
    """Saved bytes (hooks and tracker delta), peak bytes and FLOPs of one step."""
    model.remat_offload.reset()
    counter = StepFlopCounter()
    with PeakMemory(device, model, tokens, targets) as memory:
        before = memory.current_bytes()
        with SavedTensorLog(model) as log, KeptLog() as kept, counter.forward():
            loss = _loss(model, tokens, targets)
        tracker_delta = memory.current_bytes() - before
        counter.backward(loss)
        del loss
    flops, offload = counter.result(), model.remat_offload
    per_layer = log.bytes_per_layer(len(model.layers))
    sac_cache = cache_bytes(log, kept)   # drop-cheap's kept outputs: invisible to saved-tensor hooks
    total = log.total_bytes() + sac_cache
    return {
        "activation_bytes": total,
        "activation_bytes_sac_cache": sac_cache,
        "activation_bytes_per_layer": per_layer,
        "activation_bytes_outside_layers": total - sac_cache - sum(per_layer),
        "activation_bytes_tracker": int(tracker_delta),
        "base_bytes": int(before),
        "peak_bytes": memory.peak_bytes,
        "peak_activation_bytes": memory.peak_bytes - int(before),
        "peak_method": memory.method,
        "flops_forward": flops.forward,
        "flops_forward_layers": flops.forward_layers(),
        "flops_backward": flops.backward,
        "flops_recompute": flops.recompute,
        "flops_method": FLOPS_METHOD,
        "offloaded_bytes": offload.bytes,
        "offload_note": (SIMULATED if offload.simulated else "device->host copy")
        if offload.tensors else None,
    }


def _timing(model, tokens, targets, device: str, warmup: int, repeats: int, keep_grads: bool) -> dict:
    def step():
        model.zero_grad(set_to_none=not keep_grads)
        _loss(model, tokens, targets).backward()
    t = time_step(step, device, warmup=warmup, repeats=repeats)
    return {"step_time_s": t.median_s, "step_time_iqr_s": t.iqr_s, "step_time_samples": list(t.samples_s),
            "timing_method": t.method}


def layernorm_stats_itemsize(dtype: str, device: str) -> int:
    """Bytes per element of the mean/rstd that LayerNorm saves for ``dtype`` inputs on ``device``, asked of
    torch (torch.native_layer_norm on a 1-element tensor): fp32 for 16-bit inputs on CUDA, the input dtype
    on the CPU. The ``stats_itemsize`` of remat.formulas.torch_gpt."""
    x = torch.zeros(1, 1, dtype=getattr(torch, dtype), device=str(resolve_device(device)))
    return torch.native_layer_norm(x, (1,), None, None, 1e-5)[2].element_size()
