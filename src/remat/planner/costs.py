"""Per-layer costs of the four policies for a model on one GPU -> a planner ``Problem``.

    settings = Settings(gpu=gpu("a100-80gb"), budget_bytes=80 * 2**30, sp=True)
    problem = build_problem(from_name("gpt3-175b"), settings)

What one GPU holds (the first pipeline stage, the most loaded), Korthikanti et al. 2022 symbols:

* layers: L/p of them; with the interleaved schedule (m > 1) m chunks of L/(p·m) layers.
* micro-batches in flight per layer n (``in_flight``): min(p, N) under 1F1B with N micro-batches per step;
  interleaved, the first chunk holds 2p − 1 and the others p when the first backward starts (Megatron's
  warm-up of 2(p − 1) + (m − 1)p forwards, + 1), which sums to the paper's factor L·(1 + (p − 1)/(p·m))
  (§4.2) — each capped by what N allows. The embedding-dropout mask outside the layers is held for the first
  chunk's count. With p = 1, n = 1 and the planner uses the prefix memory
  model (backward frees layers from the last one back); with several micro-batches in flight it uses the
  conservative model (all stored + the worst transient) — see ``remat.planner.problem``.
* bytes per layer and micro-batch (16-bit activations, 1-byte masks; ``korthikanti.layer_bytes`` with t, SP):
  none = sbh(34 + 5as/h) at t = 1; selective = without core attention; full = the layer input 2sbh (/t with
  SP); offload = nothing on the device. A model whose MLP is not 4h wide (cfg.ffn_hidden, e.g. GPT-2's
  n_inner) has its GeLU and fc2 inputs at 2sb·ffn bytes each (the paper's 8sbh at ffn = 4h).
* transient while the layer's backward runs (one micro-batch): selective — the recomputed core attention
  (none − selective); full — the recomputed layer (none − full); offload — the layer's activations fetched
  back plus the next layer's prefetch (2 × none); none — 0 (its gradients' working set is the stated
  workspace reserve).
* host bytes (offload) = n × none.
* outside the layers (§4.3, ``korthikanti.outside_layer_bytes``): the embedding-dropout mask of p
  micro-batches; with p = 1 also the final LayerNorm input, output-projection input and fp32 logits, and
  the logits' gradient (4sbv/t) as the transient floor of the head's backward.
* model state (bytes per parameter of ``korthikanti.params_per_gpu``, with the model's MLP width, position
  table and untied head if any): weights 2, gradients 4 (fp32
  main_grad), optimizer 12 (fp32 master + Adam m, v) — Megatron's mixed precision, 18 in all
  (``korthikanti.BYTES_PER_PARAM_WHY``); ZeRO stage z with data-parallel degree d divides the optimizer (z ≥ 1),
  the gradients (z ≥ 2) and the weights (z = 3, FSDP) by d.
* time of a layer per micro-batch: the per-op roofline model (``remat.timemodel.predict``: the layer traced
  under fake tensors, each op max(FLOPs / achievable FLOP/s, bytes / achievable memory bandwidth), TP
  collectives by ring formulas with Megatron's backward overlap) — forward + backward for none, + the
  recompute for selective and full (selective re-runs memory-bound softmax/dropout, which FLOPs alone price
  several times too low), + the exposed offload transfer of the break-even model (``remat.formulas.offload``)
  for offload. The LM head (p = 1) is priced by its FLOPs (one large GEMM). ``calibration`` replaces the
  model by seconds measured on this machine (``calibrate``). A step runs N = global_batch/(b·dp)
  micro-batches plus the pipeline bubble (p − 1)/m, so per-step seconds = (N + (p − 1)/m) × per-micro-batch
  seconds.

Everything is in int bytes and float seconds; FLOPs are ints.

Other architectures (Llama) have no closed form: their per-layer costs are MEASURED on the runtime's layer
under FakeTensorMode (saved-tensor hooks + FlopCounterMode; ``remat.planner.measured``), t = 1 without SP
only; the plan's meta says which (``cost_source``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from fractions import Fraction

from remat.errors import UsageError
from remat.formulas import korthikanti, torch_gpt
from remat.models.llama_parallel import check_split
from remat.models.presets import ModelConfig
from remat.planner.layer_costs import DEFAULT_RESERVE, Settings, layer_seconds, policy_costs, sharded_state
from remat.planner.measured import measured_costs
from remat.planner.problem import POLICIES, Layer, Option, Problem, check_dp_zero
from remat.timemodel.roofline import TIME_SOURCE

__all__ = ["DEFAULT_RESERVE", "PIPELINE_MICRO_BATCHES", "TIME_SOURCE", "Settings", "TorchCalibration", "build_problem",
           "check", "default_global_batch", "in_flight",
           "layer_bytes", "layer_seconds", "micro_batches", "model_state", "per_micro_batch", "policy_costs",
           "sharded_state", "step_multiplier", "torch_parts", "torch_problem"]


def check(cfg: ModelConfig, st: Settings) -> None:
    """Raise UsageError naming the field for a model or settings the cost model cannot take."""
    _check(cfg, st)


def _check(cfg: ModelConfig, st: Settings) -> None:
    if cfg.arch != "gpt":
        check_split(cfg, cfg.tp, st.sp, ("--tp", "--sp"))
    check_dp_zero(st.dp, st.zero)
    for name in ("weight_bytes", "grad_bytes", "optimizer_bytes", "reserve_bytes", "budget_bytes"):
        value = getattr(st, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise UsageError(name, f"must be an integer ≥ 0, got {value!r}")
    if st.dp % cfg.ep:
        raise UsageError("--ep", f"expert parallelism spreads the experts over data-parallel ranks: --ep {cfg.ep} must "
                                 f"divide --dp {st.dp}")
    if cfg.layers % cfg.pp:
        raise UsageError("pp", f"p = {cfg.pp} must divide the {cfg.layers} layers")
    if cfg.interleave > 1 and (cfg.layers // cfg.pp) % cfg.interleave:
        raise UsageError("interleave", f"m = {cfg.interleave} must divide the {cfg.layers // cfg.pp} layers per "
                                       "stage")
    n = micro_batches(cfg, st.dp)
    if cfg.interleave > 1 and cfg.pp > 1 and n % cfg.pp:
        raise UsageError("--global-batch", f"the interleaved schedule (--interleave {cfg.interleave}) needs the "
                         f"micro-batches per step N = ⌈--global-batch / (--micro-batch × --dp)⌉ = "
                         f"⌈{cfg.global_batch} / ({cfg.micro_batch} × {st.dp})⌉ = {n} to be a multiple of --pp "
                         f"{cfg.pp} (Megatron-LM: num_microbatches % pipeline_model_parallel_size == 0); use "
                         f"--global-batch {cfg.pp * cfg.micro_batch * st.dp} or a multiple, or --interleave 1")
    unknown = set(st.policies) - set(POLICIES)
    if unknown or not st.policies:
        raise UsageError("policies", f"unknown policies {sorted(unknown)} (known: {', '.join(POLICIES)})")


def attention_kind(cfg: ModelConfig) -> str:
    """The attention the plan accounts, stated on the plan: materialised softmax (the paper's GPT layer:
    Korthikanti's s × s terms) or a fused kernel (SDPA / FlashAttention: no s × s kept; its time covers the causal
    or sliding-window share of the query-key pairs, remat.formulas.op_flops.attention_share)."""
    if cfg.attention != "sdpa":
        return "materialised softmax (s × s kept)"
    window = f", sliding window {cfg.sliding_window}" if cfg.sliding_window else ""
    return f"fused SDPA (no s × s kept; causal{window}: time of a FlashAttention kernel over the attended pairs)"


def in_flight(cfg: ModelConfig, dp: int = 1) -> list[int]:
    """Micro-batches whose activations each layer of the first stage holds when the stage's first backward
    starts, in the stage's layer order (ints; N = ``micro_batches(cfg, dp)``). Megatron-LM's schedules
    (``forward_backward_pipelining_without_interleaving`` / ``_with_interleaving``) on pipeline rank 0:

    * p = 1: 1 — each micro-batch's backward runs before the next forward.
    * 1F1B (m = 1): min(p, N) — min(p − 1, N) warm-up forwards, then one more before the first backward
      when any is left (Korthikanti §4.2: p micro-batches, so L layers' worth, once N ≥ p).
    * interleaved (m > 1; N a multiple of p, ``_check``): with N = p every forward runs first, so each chunk
      holds p; otherwise 2(p − 1) + (m − 1)p warm-up forwards + 1, handed out to the m chunks in groups of p
      (chunk (k mod pm) // p runs forward k): chunk 0 holds 2p − 1, the others p, which sums to the paper's
      L·(1 + (p − 1)/(p·m)) layers' worth (§4.2.3). Each count is also capped by the N forwards a chunk has.

    The counts are a snapshot: in the steady state the stage still holds (m + 1)p − 1 micro-batches in all,
    but they move from the last chunk to the first ones (chunk 0 reaches 2p), so with unequal bytes per chunk
    the peak can exceed this snapshot's."""
    p, m = cfg.pp, cfg.interleave
    per_stage = cfg.layers // p
    n = micro_batches(cfg, dp)
    if p == 1:
        return [1] * per_stage
    if m <= 1:
        return [min(p, n)] * per_stage
    forwards = n * m if n == p else min(2 * (p - 1) + (m - 1) * p + 1, n * m)
    held = [0] * m
    for k in range(forwards):
        held[(k % (p * m)) // p] += 1
    chunk = per_stage // m
    return [held[i // chunk] for i in range(per_stage)]


def micro_batches(cfg: ModelConfig, dp: int = 1) -> int:
    """Micro-batches per step for one pipeline: N = ⌈global_batch / (b · dp)⌉, at least 1 (presets without a
    training batch say global_batch = 1)."""
    return max(1, -(-cfg.global_batch // (cfg.micro_batch * dp)))


PIPELINE_MICRO_BATCHES = 4
"""Micro-batches per step per pipeline stage when a pipelined plan (p > 1) is not given a training batch: N = 4·p.
Under 1F1B the first stage then holds min(p, N) = p micro-batches in flight (what real training holds once
N ≥ p), and the bubble (p − 1)/N stays under 25 % (Narayanan et al. 2021 §2.2 ask for N ≫ p). One micro-batch
per step would plan for one in flight and run out of memory in real 1F1B training."""


def default_global_batch(cfg: ModelConfig, dp: int = 1) -> int:
    """The global batch that gives N = PIPELINE_MICRO_BATCHES·p micro-batches per step: 4·p·b·dp (p > 1), else
    the config's own."""
    return PIPELINE_MICRO_BATCHES * cfg.pp * cfg.micro_batch * dp if cfg.pp > 1 else cfg.global_batch


def step_multiplier(cfg: ModelConfig, dp: int = 1) -> float:
    """Per-step seconds / per-micro-batch seconds of a stage: N + (p − 1)/m (1F1B bubble, interleaved)."""
    return micro_batches(cfg, dp) + (cfg.pp - 1) / max(1, cfg.interleave)


def layer_bytes(cfg: ModelConfig, sp: bool) -> dict[str, int]:
    """Bytes one layer keeps per micro-batch on one TP rank under none / selective / full (Table 2)."""
    s, b, h, a, t = cfg.seq, cfg.micro_batch, cfg.hidden, cfg.heads, cfg.tp
    return {mode: korthikanti.layer_bytes(s, b, h, a, t, sp, mode, ffn=cfg.ffn_hidden)
            for mode in korthikanti.RECOMPUTE}


def per_micro_batch(cfg: ModelConfig, st: Settings) -> dict[str, dict]:
    """Per policy, one layer and one micro-batch: stored/transient/host bytes, seconds, recompute FLOPs."""
    s, b, h, t = cfg.seq, cfg.micro_batch, cfg.hidden, cfg.tp
    flops = {mode: korthikanti.recompute_flops(s, b, h, mode, ffn=cfg.ffn_hidden) // t
             for mode in ("selective", "full")}
    tensors = len(korthikanti.stored_terms("none"))
    return policy_costs(layer_bytes(cfg, st.sp), layer_seconds(cfg, st), flops, tensors, st)


def model_state(cfg: ModelConfig, st: Settings) -> dict[str, int]:
    """Weights, gradients and optimizer state (bytes) of the first stage's GPU, ZeRO-sharded by dp: the
    parameters of ``korthikanti.params_per_gpu`` with the model's MLP width (cfg.ffn_hidden), its position
    table (cfg.max_positions rows, what the model holds whatever s is trained) and its head (tied or not)."""
    n = korthikanti.params_per_gpu(cfg.hidden, cfg.layers, cfg.vocab, cfg.max_positions, cfg.tp, cfg.pp,
                                   ffn=cfg.ffn_hidden, tied=cfg.tie_embeddings)
    return sharded_state(n, st)


def build_problem(cfg: ModelConfig, st: Settings) -> Problem:
    """The planning problem of ``cfg`` on one GPU of its first pipeline stage (module docstring).

    Raises UsageError naming the field for an unsupported model or inconsistent settings.
    Sources: Korthikanti et al. 2022 Table 2, §4.2–4.3, Appendix A; remat.formulas.offload.
    """
    _check(cfg, st)
    s, b, h, v, t, p = cfg.seq, cfg.micro_batch, cfg.hidden, cfg.vocab, cfg.tp, cfg.pp
    layers, flight = [], in_flight(cfg, st.dp)
    measured = None
    if cfg.arch != "gpt":   # no closed form: measured under fake tensors (remat.planner.measured)
        measured = measured_costs(cfg, st, flight[0])
    costs = per_micro_batch(cfg, st) if measured is None else measured["per_micro_batch"]
    steps = step_multiplier(cfg, st.dp)
    n_mb = micro_batches(cfg, st.dp)
    chunk = (cfg.layers // p) // max(1, cfg.interleave)
    for i, n in enumerate(flight):
        options = tuple(Option(policy, stored_bytes=n * c["stored"], transient_bytes=c["transient"],
                               time_s=steps * c["time"], recompute_flops=n_mb * c["flops"],
                               offload_bytes=n * c["host"]) for policy, c in costs.items())
        kind = f"chunk {i // chunk}, {n} micro-batches in flight" if cfg.interleave > 1 and p > 1 else \
            f"{n} micro-batch{'es' if n > 1 else ''} in flight"
        layers.append(Layer(i, options, kind))
    if measured is None:
        outside = korthikanti.outside_layer_bytes(s, b, h, v, t, p, st.sp, held=flight[0])
        fixed = {**model_state(cfg, st), "outside layers (§4.3)": sum(outside.values()),
                 "workspace reserve": st.reserve_bytes}
        floor = _whole(Fraction(4 * s * b * v, t)) if p == 1 else 0   # fp32 logits' gradient
        head_rate = st.gpu.peak_for(cfg.dtype) * st.gpu.achievable
        head_time = steps * 3 * korthikanti.logits_flops(s, b, h, v) / t / head_rate if p == 1 else 0.0
    else:
        outside = measured["outside"]
        fixed = {**measured["model_state"], "outside layers (measured)": sum(outside.values()),
                 "workspace reserve": st.reserve_bytes}
        floor, head_time = measured["floor_bytes"], steps * measured["head_time_s"]
    meta = {"model": cfg.name, "s": s, "b": b, "h": h, "a": cfg.heads, "L": cfg.layers, "v": v, "t": t,
            "sp": st.sp, "p": p, "m": cfg.interleave, "dp": st.dp, "zero": st.zero, "gpu": st.gpu.name,
            "gpu_name": st.gpu.full_name or st.gpu.name,
            "micro_batches": n_mb, "step_multiplier": steps, "in_flight": flight, "outside_terms": outside,
            "bytes_per_micro_batch": {k: c["stored"] for k, c in costs.items()},
            "time_source": "calibrated on this machine" if st.calibration else TIME_SOURCE,
            "cost_source": "closed form (Korthikanti Table 2)" if measured is None else measured["source"],
            "attention": attention_kind(cfg),
            "selective": "core attention" if cfg.arch == "gpt" else "op-level",   # layer_costs.runtime_mode
            "runtime": "remat.policies",
            "flops_per_s": st.gpu.peak_for(cfg.dtype) * st.gpu.achievable, "dtype": cfg.dtype,
            "peak_flops": st.gpu.peak_for(cfg.dtype), "achievable": st.gpu.achievable,
            "link_bytes_per_s": st.gpu.link_bytes_per_s, "link_t0_s": st.gpu.link_t0_s,
            "gpus_per_host_link": st.gpu.gpus_per_host_link,
            "memory_bytes_per_s": st.gpu.memory_bandwidth * st.gpu.memory_efficiency,
            "nvlink_bytes_per_s": st.gpu.nvlink_bytes_per_s * st.gpu.nvlink_efficiency,
            "reserve_bytes": st.reserve_bytes, "weight_bytes": st.weight_bytes, "grad_bytes": st.grad_bytes,
            "optimizer_bytes": st.optimizer_bytes,
            "memory_model": "prefix" if p == 1 else "all stored + worst transient"}
    layers, fixed = _gradient_timing(cfg, st, measured, layers, fixed, meta)
    return Problem(tuple(layers), fixed, st.budget_bytes, st.host_limit_bytes, fixed_time_s=head_time,
                   transient_floor_bytes=floor, prefix=(p == 1), meta=meta)


def _grad_params(cfg: ModelConfig, measured: dict | None) -> tuple[int, int, int]:
    """Parameters of one GPU (p = 1, t = cfg.tp) whose gradients backward makes (layer, head side, end side): one
    layer's; those made before the layers' backward (the final norm and the head — the word embedding when the
    head shares it); those made after it (the embedding's: the position table, an untied word embedding)."""
    h, v, t = cfg.hidden, cfg.vocab, cfg.tp
    if measured is None:    # GPT closed form (remat.formulas.korthikanti.params_per_gpu's terms)
        word = v * h // t
        return (korthikanti.params_per_layer(h, t, cfg.ffn_hidden), 2 * h + word,
                cfg.max_positions * h + (0 if cfg.tie_embeddings else word))
    n = measured["params"]
    head = n["head"] or n["embedding"]    # a tied head is the embedding
    return n["per_layer"], n["norm"] + head, n["embedding"] if n["head"] else 0


def _gradient_timing(cfg: ModelConfig, st: Settings, measured: dict | None, layers: list, fixed: dict,
                     meta: dict) -> tuple[list, dict]:
    """The regime's gradients in the prefix model: held all step (a fixed part, as computed), or made by
    backward (eager ``.grad``): the head side's before the layers' backward (fixed), each layer's in its
    backward (layer i's transient holds layers i..L−1's), the embedding's at the end (layer 0's transient covers
    the moment: every gradient, nothing stored). A pipeline stage (p > 1) or ZeRO ≥ 2 (gradient buffers
    reduce-scattered) holds them all step: stated."""
    regime, note = st.regime, ""
    if not regime.grads_held_all_step and (cfg.pp > 1 or st.zero >= 2):
        note = "; here held all step (" + ("--pp > 1" if cfg.pp > 1 else "--zero ≥ 2") + ")"
    elif not regime.grads_held_all_step:
        per_layer, head_side, end_side = (n * st.grad_bytes for n in _grad_params(cfg, measured))
        fixed = {k: (head_side if k == "gradients" else v) for k, v in fixed.items()}
        L = len(layers)
        layers = [replace(layer, options=tuple(
            replace(o, transient_bytes=max(o.transient_bytes + (L - i) * per_layer,
                                           L * per_layer + end_side - o.stored_bytes if i == 0 else 0))
            for o in layer.options)) for i, layer in enumerate(layers)]
    meta["regime"] = regime.describe() + note
    return layers, fixed


def _whole(x: Fraction) -> int:
    return int(round(x))


# --- the runtime's torch model (validation on the machine that runs it) ---------------------------------------

@dataclass(frozen=True)
class TorchCalibration:
    """What the torch model's costs need from this machine (measured once, stated in every result):

    layer_seconds: policy -> seconds of one layer's forward + backward (``calibrate.layer_seconds``);
    outside_seconds: the rest of a step (embedding, head, loss);
    layer_workspace_bytes: what a layer's backward allocates beyond its saved tensors (activation gradients,
    temporaries); head_workspace_bytes: the same for the LM head and loss (the logits' gradients);
    stats_itemsize: bytes per LayerNorm mean/rstd element on this device."""

    layer_seconds: dict[str, float]
    outside_seconds: float
    layer_workspace_bytes: int
    head_workspace_bytes: int
    stats_itemsize: int


def torch_parts(cfg: ModelConfig, stats_itemsize: int) -> dict:
    """Bytes of the runtime's GPT model on one device, from ``remat.formulas.torch_gpt`` (one micro-batch,
    no pipeline, no optimizer step — what ``remat.measure.step`` runs):

    layer[mode]: saved per layer (none | selective | full); grads_layer: one layer's parameter gradients;
    grads_head: gradients made by the head's backward (the tied embedding, the final LayerNorm); kept: bytes
    held the whole step (parameters, causal-mask buffers L·max_positions², token ids and targets, the
    embedding's saved tensors); head: the head's saved tensors (freed before the layers' backward)."""
    sz, state = torch_gpt.sizes_of(cfg, stats_itemsize), torch_gpt.model_bytes(cfg, stats_itemsize)
    return {
        "layer": {mode: torch_gpt.layer_saved_bytes(sz, mode) for mode in torch_gpt.MODES},
        "grads_layer": state.layer_gradients,
        "grads_head": state.head_gradients,
        "kept": {"weights": state.weights, "causal-mask buffers": state.causal_masks,
                 "inputs and embedding activations": state.inputs + state.embed},
        "head": state.head,
    }


def torch_problem(cfg: ModelConfig, budget_bytes: int, cal: TorchCalibration,
                  policies: tuple[str, ...] = korthikanti.RECOMPUTE) -> Problem:
    """The planning problem of the runtime's GPT model on this machine (prefix memory model, one micro-batch).

    While layer i's backward runs the device holds: ``kept``, the stored tensors of layers 0..i, what the
    layer recomputes (none − its stored), the backward workspace, the gradients already made (layers after
    i and the head's). At the start of backward: everything stored + the head's tensors, workspace and
    gradients (the transient floor). Offload is not offered: on a CPU "host" memory is the same memory.
    """
    if cfg.arch != "gpt" or cfg.tp != 1 or cfg.pp != 1:
        raise UsageError("model", "the torch cost model covers the serial GPT model (t = p = 1)")
    parts = torch_parts(cfg, cal.stats_itemsize)
    y, L = parts["layer"], cfg.layers
    layers = []
    for i in range(L):
        later_grads = (L - 1 - i) * parts["grads_layer"] + parts["grads_head"]
        options = tuple(Option(m, stored_bytes=y[m],
                               transient_bytes=y["none"] - y[m] + cal.layer_workspace_bytes + later_grads,
                               time_s=cal.layer_seconds[m]) for m in policies)
        layers.append(Layer(i, options, "first" if i == 0 else "last" if i == L - 1 else "middle"))
    floor = parts["head"] + cal.head_workspace_bytes + parts["grads_head"]
    meta = {"model": cfg.name, "s": cfg.seq, "b": cfg.micro_batch, "h": cfg.hidden, "a": cfg.heads, "L": L,
            "v": cfg.vocab, "dtype": cfg.dtype, "time_source": "calibrated on this machine",
            "memory_model": "prefix", "gpu": "cpu"}
    return Problem(tuple(layers), dict(parts["kept"]), budget_bytes, None, fixed_time_s=cal.outside_seconds,
                   transient_floor_bytes=floor, prefix=True, meta=meta)
