"""Per-layer costs of a non-GPT model (Llama) for the planner, MEASURED instead of taken from closed forms.

    costs = measured_costs(from_name("llama3-8b"), settings)   # same shapes as remat.planner.costs

Korthikanti's Table 2 describes the GPT layer only. For any other architecture the planner measures the
runtime's own layer (remat.models) with the project's measurement code, ``remat.measure.step.measure`` on
``device="fake"``: the model is built and run under FakeTensorMode (paper sizes, no memory, no time), the
saved-for-backward bytes come from saved-tensor hooks (remat.measure.saved.SavedTensorLog, per layer and
outside the layers) and the FLOPs from torch.utils.flop_counter.FlopCounterMode (forward, backward and the
recompute inside the policies' checkpoints). Nothing here is a formula of the layer:

* a 2-layer copy of the model (same s, b, h, …) is measured under none / selective / full; a layer's stored
  bytes are those of the second layer (its input comes from a layer, as for every layer but the first; both
  agree for the runtime's layers), its forward and recompute FLOPs half of the two layers'; its backward
  FLOPs the difference between the 2-layer and a 1-layer step under ``none`` (the rest is the head's);
* bytes outside the layers = the measured ``activation_bytes_outside_layers`` (embedding, final norm, head,
  fp32 logits of the loss) — with p > 1 this over-counts the first stage, which holds no head (conservative);
* parameters: the numel of the fake-built model's parameters, per layer and outside the layers (embedding;
  final norm and head too when p = 1; a tied head is counted once);
* the number of tensors a layer saves (the per-copy latency of offload) from the same SavedTensorLog.

Time: the per-op roofline model of the same layer (``remat.timemodel.predict``) and offload through
``remat.formulas.offload.exposed_offload_s``, as the GPT path; the head by its FLOPs. Transients as the GPT path: none −
stored (the recompute of selective/full), 2 × none for offload; the head's backward floor is the fp32 logits' gradient
4sbv when p = 1. Only t = 1 without SP: tensor parallelism exists for the GPT layer only (UsageError "--tp" / "--sp"
from ``remat.planner.costs``).

Fused attention (``F.scaled_dot_product_attention``, the CPU kernel under FakeTensorMode) is counted by
``remat.measure.flops`` (QKᵀ and ·V over the full s × s, Korthikanti's 4bs²h convention).
"""

from __future__ import annotations

import dataclasses
import functools

from torch._subclasses.fake_tensor import FakeTensorMode

from remat.formulas.korthikanti import RECOMPUTE
from remat.measure.saved import SavedTensorLog
from remat.measure.step import measure
from remat.models.presets import ModelConfig
from remat.models.transformer import build_model, random_tokens
from remat.planner.layer_costs import layer_seconds, policy_costs, sharded_state

COST_SOURCE = "measured (fake tensors)"


def _facts(cfg: ModelConfig) -> dict:
    """Parameters per layer / outside (embedding; norm; head) and the tensors layer 0 saves, under fake."""

    with FakeTensorMode():
        model = build_model(cfg)
        tokens = random_tokens(cfg)
        with SavedTensorLog(model) as log:
            model(tokens)
    count = lambda module: sum(p.numel() for p in module.parameters())
    embed = count(model.embed)
    rest = sum(p.numel() for p in model.parameters()) - embed - sum(count(layer) for layer in model.layers)
    tensors = sum(1 for r in log.activations() if r.module.startswith("layers.0.") or r.module == "layers.0")
    return {"layer": count(model.layers[0]), "embedding": embed, "norm_and_head": rest, "tensors": tensors}


@functools.lru_cache(maxsize=16)
def measure_layer(cfg: ModelConfig) -> dict:
    """One layer of ``cfg`` measured under fake tensors (bytes and FLOPs per layer per micro-batch; module
    docstring). Cached per config."""

    two = dataclasses.replace(cfg, layers=2, pp=1, interleave=1)
    one = dataclasses.replace(cfg, layers=1, pp=1, interleave=1)
    rows = {p: measure(two, p, "fake", timing=False) for p in RECOMPUTE}
    single = measure(one, "none", "fake", timing=False)
    none = rows["none"]
    forward = none["flops_forward_layers"] // 2
    backward = none["flops_backward"] - single["flops_backward"]
    return {
        "stored": {p: r["activation_bytes_per_layer"][-1] for p, r in rows.items()},
        "stored_first": {p: r["activation_bytes_per_layer"][0] for p, r in rows.items()},
        "forward_flops": forward,
        "backward_flops": backward,
        "recompute_flops": {p: r["flops_recompute"] // 2 for p, r in rows.items()},
        "outside_bytes": none["activation_bytes_outside_layers"],
        "head_forward_flops": none["flops_forward"] - none["flops_forward_layers"],
        "head_backward_flops": single["flops_backward"] - backward,
        **_facts(one),
    }


def measured_costs(cfg: ModelConfig, st) -> dict:
    """The planner's inputs for ``cfg`` from measurement (module docstring), in the shapes of
    ``remat.planner.costs``: per_micro_batch {policy: {stored, transient, time, flops, host[, exposed]}}
    (one layer, one micro-batch, bytes/seconds/FLOPs), model_state {weights, gradients, optimizer} (bytes),
    outside {name: bytes}; plus floor_bytes (the head's backward transient), head_time_s (one micro-batch),
    params (per layer / outside) and source. ``st``: remat.planner.layer_costs.Settings."""
    m = measure_layer(cfg)
    rate = st.gpu.peak_for(cfg.dtype) * st.gpu.achievable
    out = policy_costs(m["stored"], layer_seconds(cfg, st), m["recompute_flops"], m["tensors"], st)
    p = cfg.pp
    n = (cfg.layers // p) * m["layer"] + m["embedding"] + (m["norm_and_head"] if p == 1 else 0)
    return {
        "per_micro_batch": out,
        "model_state": sharded_state(n, st),
        "outside": {"saved outside the layers (measured)": m["outside_bytes"]},
        "floor_bytes": 4 * cfg.seq * cfg.micro_batch * cfg.vocab if p == 1 else 0,
        "head_time_s": (m["head_forward_flops"] + m["head_backward_flops"]) / rate if p == 1 else 0.0,
        "params": {"per_layer": m["layer"], "on_this_gpu": n},
        "source": COST_SOURCE,
    }
