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
* bytes outside the layers all step (``outside``): what a 1-layer copy's embedding saves (the token ids), times
  the micro-batches the first stage holds in flight, and a sliding-window mask; the layers' own buffers (the
  RoPE tables of remat's runtime layer, one pair per layer; a trainer's layer may keep one pair per model);
* the head (p = 1; the first of p > 1 stages holds none): its peak from the last layer's output through the
  final norm, the head, the loss and their backward, beyond what is live when the layers' backward starts
  (``head_floor``), measured on a 1-layer copy as remat.auto measures any model (remat.auto.whole_step) — the
  saved fp32 log-softmax, its gradient and the gradient it makes (about 12·s·b·v bytes with torch's
  cross-entropy in fp32), not Korthikanti's 4sbv of stored logits;
* parameters: the numel of the fake-built model's parameters, per layer and outside the layers (embedding;
  final norm and head too when p = 1; a tied head is counted once; with t > 1 the embedding and head v/t rows);
* tensor parallelism (t > 1, with or without SP): one rank's layer, ``remat.models.llama_parallel`` on rank 0 of a
  fake process group, measured the same way (stored bytes per mode: remat.accounting; recompute FLOPs: the
  time model's trace; its parameters counted). Outside the layers the vocabulary-parallel embedding and head
  hold v/t rows each, and the head's peak is measured at v/t vocabulary rows (``head_floor``);
* the number of tensors a layer saves (the per-copy latency of offload) from the same SavedTensorLog;
* expert parallelism (``cfg.ep`` ranks of the data-parallel group, Megatron-Core's expert-model-parallel size):
  each rank holds E/ep experts, whose gradients and optimizer state ZeRO shards over the dp/ep ranks holding the
  same experts (the expert-data-parallel group). Its activations are the layer's without EP: with balanced
  routing a rank receives the k·s·b rows it sends (the offsets vector of E/ep, 4·E·(1 − 1/ep) bytes fewer, is
  not subtracted); the all-to-all exchange is priced by ``remat.timemodel.layer.predict``.

Selective is op-level here (``layer_costs.runtime_mode``: drop-cheap, matmul and attention outputs kept in torch's
selective-checkpoint cache, counted with the saved tensors), as remat.auto's: the fused attention keeps no s × s
tensor, so Megatron's core-attention recompute would free almost nothing.

Time: the per-op roofline model of the same layer (``remat.timemodel.predict``) and offload through
``remat.formulas.offload.exposed_offload_s``, as the GPT path; the rest of the step (embedding, head, loss) by the
same roofline over every op of a whole step (``outside_seconds``), as remat.auto. Transients: none − stored for full
(the recompute), measured for selective (``op_level_transient``), 2 × none for offload, each plus the layer's
backward workspace (``backward_workspace``: gradient temporaries, its parameters' gradients before they are
accumulated; measured, as remat.auto measures a block's); the head's floor as above. A t
that does not divide the query heads, the key/value groups or the MLP width is a UsageError("--tp") from
``remat.planner.costs``.

Fused attention (``F.scaled_dot_product_attention``, the CPU kernel under FakeTensorMode) is counted by
``remat.measure.flops`` (QKᵀ and ·V over the full s × s, Korthikanti's 4bs²h convention); the time model prices
the query–key pairs a causal (or windowed) FlashAttention kernel computes (``remat.formulas.op_flops``).
"""

from __future__ import annotations

import dataclasses
import functools

import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from remat.accounting import account_layer, build, layer_input, tensor_mode, tp_group
from remat.auto.blocks import Blocks
from remat.auto.whole_step import whole_seconds, whole_step
from remat.formulas.korthikanti import RECOMPUTE
from remat.measure.peak import PeakMemory
from remat.measure.saved import SavedTensorLog
from remat.measure.step import measure
from remat.models.llama_parallel import build_llama_layer
from remat.models.presets import ModelConfig
from remat.models.tensor_parallel import fake_process_group
from remat.models.transformer import build_model, lm_loss, random_tokens
from remat.planner.layer_costs import layer_seconds, policy_costs, runtime_mode, sharded_state
from remat.timemodel.roofline import Rates
from remat.timemodel.trace import trace_layer

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
    mask = getattr(model.layers[0].attn.core, "window_mask", None)
    buffers = sum(b.numel() * b.element_size() for b in model.layers[0].buffers() if b is not mask)
    return {"layer": count(model.layers[0]), "experts": expert_params(model.layers[0]), "embedding": embed,
            "norm": count(model.norm),
            "head": rest - count(model.norm), "tensors": tensors,
            "mask": 0 if mask is None else mask.numel() * mask.element_size(), "buffers": buffers}


@functools.lru_cache(maxsize=16)
def measure_layer(cfg: ModelConfig) -> dict:
    """One layer of ``cfg`` measured under fake tensors (bytes and FLOPs per layer per micro-batch; module
    docstring), at t = 1. Cached per config."""

    two = dataclasses.replace(cfg, layers=2, pp=1, interleave=1, tp=1)
    one = dataclasses.replace(cfg, layers=1, pp=1, interleave=1, tp=1)
    rows = {p: measure(two, runtime_mode(cfg, p), "fake", timing=False) for p in RECOMPUTE}
    single = measure(one, "none", "fake", timing=False)
    none = rows["none"]
    forward = none["flops_forward_layers"] // 2
    backward = none["flops_backward"] - single["flops_backward"]
    return {
        # a selective-checkpoint cache (op-level selective) is per step: the two identical layers hold half each
        "stored": {p: r["activation_bytes_per_layer"][-1] + r["activation_bytes_sac_cache"] // 2
                   for p, r in rows.items()},
        "stored_first": {p: r["activation_bytes_per_layer"][0] + r["activation_bytes_sac_cache"] // 2
                         for p, r in rows.items()},
        "forward_flops": forward,
        "backward_flops": backward,
        "recompute_flops": {p: r["flops_recompute"] // 2 for p, r in rows.items()},
        **_facts(one),
    }


@functools.lru_cache(maxsize=16)
def measure_rank_layer(cfg: ModelConfig, t: int, sp: bool) -> dict:
    """One TP rank's layer of ``cfg`` (rank 0 of a fake group of t, SP as set) under fake tensors: stored bytes
    per mode (every storage autograd keeps, remat.accounting), recompute FLOPs (the trace's recompute phase,
    remat.timemodel.trace), the tensors it saves and its parameters. Cached."""
    stored, flops = {}, {}
    for mode in RECOMPUTE:
        acc = account_layer(cfg, runtime_mode(cfg, mode), tp=t, sp=sp)
        stored[mode], items = acc.bytes_per_layer_actual, acc.items
        flops[mode] = trace_layer(cfg, t, sp, runtime_mode(cfg, mode)).totals("recompute")["flops"]
        if mode == "none":
            tensors = len(items)      # every tensor saved, as ``_facts`` counts them at t = 1
    with fake_process_group(t) as group, FakeTensorMode():
        layer = build_llama_layer(cfg, group, sp)
        params, experts = sum(p.numel() for p in layer.parameters()), expert_params(layer)
    return {"stored": stored, "recompute_flops": flops, "tensors": tensors, "layer": params, "experts": experts}


@functools.lru_cache(maxsize=16)
def op_level_transient(cfg: ModelConfig, t: int, sp: bool) -> int:
    """The backward transient of the planner's selective for a fused-attention layer (op-level: drop-cheap,
    ``layer_costs.runtime_mode``) on one rank: the peak of the layer's backward under drop-cheap beyond the peak of
    the same backward with nothing recomputed (``_backward_peak``). Not none − stored, as for the GPT layer:
    op-level keeps every matmul output, also ones a plain backward does not need (under SP the partial sums before
    each reduce-scatter), so it can store more than none and still recompute the norms and pointwise ops."""
    return max(0, _backward_peak(cfg, t, sp, "drop-cheap") - _backward_peak(cfg, t, sp, "none"))


@functools.lru_cache(maxsize=16)
def backward_workspace(cfg: ModelConfig, t: int, sp: bool) -> int:
    """What a layer's backward allocates beyond what is live when it starts, with nothing recomputed: its gradient
    temporaries and the gradients of its parameters before they are accumulated (``_backward_peak`` of none).
    Every policy's backward holds it on top of what it recomputes."""
    return max(0, _backward_peak(cfg, t, sp, "none"))


@functools.lru_cache(maxsize=32)
def _backward_peak(cfg: ModelConfig, t: int, sp: bool, mode: str) -> int:
    """The peak of one rank's layer backward under ``mode`` beyond the bytes live when it starts, under fake tensors
    (torch's memory tracker)."""
    with tp_group(t, 0, "fake") as group, tensor_mode("fake"):
        container, _ = build(cfg, t, sp, mode, group, "fake")
        x = layer_input(cfg, t, sp, "fake")
        with PeakMemory("cpu", container, x) as mem:
            out = container(x)
            start = mem.current_bytes()
            mem.reset_peak()
            out.backward(torch.ones_like(out))
            return mem.peak_so_far() - start


def expert_params(layer) -> int:
    """Parameters of a layer's experts (an MoE MLP's ``mlp.experts``; 0 for a dense layer): what expert
    parallelism divides."""
    return sum(p.numel() for name, p in layer.named_parameters() if name.startswith("mlp.experts."))


def outside(cfg: ModelConfig, held: int) -> dict[str, int]:
    """Bytes saved outside the layers on the first pipeline stage, one TP rank, all step (module docstring): the
    embedding's (token ids) × the ``held`` micro-batches in flight, and the sliding-window mask every layer reads
    (one buffer, remat.models.llama.SDPACore). What the final norm, the head and the loss save is freed by the
    head's backward, before any layer's: it is in ``head_floor``."""
    out = {"embedding (measured)": held * _embedding_bytes(cfg)}
    mask = measure_layer(cfg)["mask"]
    if mask:
        out["sliding-window mask (one [s, s] buffer for every layer)"] = mask
    return out


@functools.lru_cache(maxsize=16)
def _embedding_bytes(cfg: ModelConfig) -> int:
    """Bytes the embedding of a 1-layer copy of ``cfg`` saves for backward under fake tensors (the token ids)."""
    one = dataclasses.replace(cfg, layers=1, pp=1, interleave=1, tp=1)
    with FakeTensorMode():
        model = build_model(one)
        with SavedTensorLog(model) as log:
            lm_loss(model(random_tokens(one)), random_tokens(one))
    return sum(r.nbytes for r in log.activations() if r.module.startswith("embed"))


def _head_copy(cfg: ModelConfig, layers: int = 1) -> ModelConfig:
    """``cfg`` with ``layers`` layers on one rank, serial, with the rank's v/t vocabulary rows (``head_floor``)."""
    return dataclasses.replace(cfg, layers=layers, pp=1, interleave=1, tp=1, ep=1, vocab=-(-cfg.vocab // cfg.tp))


@functools.lru_cache(maxsize=16)
def outside_seconds(cfg: ModelConfig, gpu) -> float:
    """Roofline seconds of one micro-batch's step outside the layers (embedding, final norm, head and loss, forward
    and backward), priced as remat.auto prices them for any model: whole steps of a 1- and a 2-layer copy under fake
    tensors (remat.auto.whole_step.whole_seconds, every op on ``gpu``'s rates), 2·one − two, at one rank's v/t
    vocabulary rows. The head's memory-bound softmax and cross-entropy in fp32 count, not only its matmul."""
    steps = []
    for layers in (1, 2):
        copy = _head_copy(cfg, layers)
        with FakeTensorMode():
            model = build_model(copy)
            tokens, targets = random_tokens(copy), random_tokens(copy)
            steps.append(whole_seconds(model, (tokens,), {}, lambda logits: lm_loss(logits, targets),
                                       Rates.of(gpu, 1, copy.dtype)))
    return max(0.0, 2 * steps[0] - steps[1])


@functools.lru_cache(maxsize=16)
def head_floor(cfg: ModelConfig) -> int:
    """The head's peak (p = 1): from the last layer's output through the final norm, the head, the loss and their
    backward, the most bytes live beyond what is live when the last layer's backward starts — measured as
    remat.auto does for any model (remat.auto.whole_step, torch's memory tracker) on a 1-layer copy under fake
    tensors, so remat's layers and ``--hf`` price the head alike. With t > 1 the copy has the rank's v/t
    vocabulary rows (vocabulary-parallel head and cross-entropy: every vocabulary-wide tensor is 1/t) and the
    full sequence (the head's input is gathered under SP; the final norm's input, s/t there, is counted whole)."""
    one = _head_copy(cfg)
    with FakeTensorMode():
        model = build_model(one)
        tokens, targets = random_tokens(one), random_tokens(one)
        blocks = Blocks("layers", ("layers.0",), (model.layers[0],))
        whole = whole_step(model, (tokens,), {}, blocks, lambda logits: lm_loss(logits, targets))
    return max(0, whole["peak_head"] - whole["live_last"])


def measured_costs(cfg: ModelConfig, st, held: int = 1) -> dict:
    """The planner's inputs for ``cfg`` from measurement (module docstring), in the shapes of
    ``remat.planner.costs``: per_micro_batch {policy: {stored, transient, time, flops, host[, exposed]}}
    (one layer, one micro-batch, bytes/seconds/FLOPs), model_state {weights, gradients, optimizer} (bytes),
    outside {name: bytes}; plus floor_bytes (the head's backward transient), head_time_s (one micro-batch),
    params (per layer / outside) and source. ``st``: remat.planner.layer_costs.Settings; ``held``: micro-batches
    the first stage holds in flight (remat.planner.costs.in_flight)."""
    m = measure_layer(cfg)
    t, p = cfg.tp, cfg.pp
    rank = measure_rank_layer(cfg, t, st.sp) if t > 1 else m
    out = policy_costs(rank["stored"], layer_seconds(cfg, st), rank["recompute_flops"], rank["tensors"], st,
                       {"selective": op_level_transient(cfg, t, st.sp)})
    workspace = backward_workspace(cfg, t, st.sp)        # every policy's backward holds it besides
    out = {policy: dict(c, transient=c["transient"] + workspace) for policy, c in out.items()}
    # vocabulary-parallel embedding and head (v/t rows each; a tied head is counted in the embedding), the final
    # norm replicated
    outside_params = -(-m["embedding"] // t) + (m["norm"] + -(-m["head"] // t) if p == 1 else 0)
    n_layers, experts = cfg.layers // p, rank["experts"] // cfg.ep      # E/ep experts per rank (expert parallelism)
    per_layer = rank["layer"] - rank["experts"] + experts
    dense = n_layers * (rank["layer"] - rank["experts"]) + outside_params
    # the experts' state sharded over the dp/ep ranks that hold the same experts
    state = [sharded_state(dense, st), sharded_state(n_layers * experts, dataclasses.replace(st, dp=st.dp // cfg.ep))]
    return {
        "per_micro_batch": out,
        "model_state": {part: state[0][part] + state[1][part] for part in state[0]},
        "outside": {**outside(cfg, held), **({"the layers' buffers (RoPE tables of remat's runtime layer)":
                                              n_layers * m["buffers"]} if m["buffers"] else {})},
        "floor_bytes": head_floor(cfg) if p == 1 else 0,
        "head_time_s": outside_seconds(cfg, st.gpu) if p == 1 else 0.0,
        "params": {"per_layer": per_layer, "on_this_gpu": dense + n_layers * experts,
                   "embedding": -(-m["embedding"] // t),
                   "norm": m["norm"] if p == 1 else 0, "head": -(-m["head"] // t) if p == 1 else 0},
        "source": COST_SOURCE,
    }
