"""Check a plan by measurement: a small instance of the same architecture, planned, applied and run on this CPU.

    rows = check_small("path/to/config.json", layers=4, seq=128)      # or a preset name, or a config object
    for row in rows: print(row["setup"], row["predicted_peak_bytes"], row["measured_peak_bytes"])

The instance: the config with ``layers`` blocks narrowed to about ``width`` wide (``narrow``: hidden size, heads,
key/value groups and MLP width divided alike, the head dimension kept), sequence length ``seq`` (by default the
shortest of ``SEQS`` at which the activations, not the parameters' gradients, set the peak), micro-batch
``micro_batch``, a vocabulary of at most ``vocab`` tokens (the blocks are the architecture; a 128k vocabulary's
embedding, head and gradients would dominate a small instance's peak and leave nothing to plan), in float32
(this CPU's matmul dtype), random weights (remat.auto.hf.build). Its plan is made at a budget between the
predicted peaks of "every block full" and "no recompute" (``fraction`` of the way up; by default the middle,
which makes the plan mix policies), without optimizer state (the step measured has no optimizer). Then, each
from the same seed (dropout masks equal):

* ``none``       — the model as built: reference gradients, peak, time;
* ``plan``       — ``auto.apply(model, result)``: gradients compared bit for bit with none's;
* ``hf-full``    — transformers' ``gradient_checkpointing_enable()`` (non-reentrant), every block full: the
                   baseline a transformers user has today;
* ``auto-full``  — ``auto.apply(model, "full")``: the same policy through remat, predicted and measured.

Per setup: saved bytes after the forward (remat.measure.saved + the selective cache), the measured peak of
forward + backward (torch's MemTracker, remat.measure.peak) beside the predicted peak (the plan's memory
model; none for hf-full, which remat did not plan), the step time on this CPU (median of two interleaved
rounds, remat.measure.timing; one round when two would take over TIMING_S), and whether the gradients equal
none's bitwise. ``activations_set_peak`` is False when every block full and none peak alike — the parameters'
gradients at the end of backward set the peak at this size, the plan is all none, and a longer ``seq`` makes
the check informative. The offload policy is left out: on a CPU its "host" buffers are the same memory, so its
device peak cannot be measured here.
"""

from __future__ import annotations

import copy
import dataclasses
import time

import torch

from remat import auto
from remat.auto.hf import build, config_of, context_length, hf_checkpointing, set_hf_checkpointing
from remat.auto.planning import AutoPlan, solve_blocks
from remat.drop_cheap import KeptLog, cache_bytes
from remat.errors import UsageError
from remat.measure.peak import PeakMemory
from remat.measure.saved import SavedTensorLog
from remat.measure.timing import time_steps
from remat.planner.problem import plan_from_policies
from remat.units import format_bytes

CHOICES = ("none", "selective", "full")
WIDTH = 256                   # the hidden size ``narrow`` aims at (a 4-block step then takes well under a second)
SEQS = (128, 256, 512, 1024)  # the sequence lengths tried, shortest first, when none is given
MARGIN = 1.2                  # the activations set the peak: none's predicted peak ≥ 1.2 × every block full's
EXPERT_FIELDS = ("num_local_experts", "num_experts")   # transformers' names for E (Mixtral; Qwen2-MoE)
TIMING_S = 30.0               # the timing's share of the check: two interleaved rounds when they fit, else one


def check_small(source, layers: int = 4, seq: int | None = None, micro_batch: int = 1, fraction: float = 0.5,
                gpu: str = "h100-80gb", seed: int = 0, repeats: int = 5, vocab: int = 1024,
                width: int | None = WIDTH, granularity: str = "block", compiled: bool = False) -> list[dict]:
    """Rows of the check (module docstring): setup, policies, saved_bytes, predicted_peak_bytes,
    measured_peak_bytes, peak_error (relative), step_time_s (CPU median) of timing_samples, grads_equal,
    budget_bytes, and the instance (hidden, seq, width_divisor, experts: E after ``narrow``, None when dense).
    seq None: the shortest of ``SEQS`` at which the activations set the peak; width: narrow the blocks towards
    this hidden size (``narrow``; None keeps the model's); granularity, compiled: the plan's (remat.auto.plan),
    applied (in eager) with its kept sets when "tensor".
    Raises UsageError naming the field for bad sizes; needs transformers (UsageError("model") without)."""
    if not 0.0 <= fraction <= 1.0:
        raise UsageError("fraction", f"must be in [0, 1], got {fraction!r}")
    config = source if hasattr(source, "to_dict") else config_of(source)
    config.dtype = "float32"
    config.vocab_size = min(config.vocab_size, vocab)   # the embedding and head would dominate a small peak
    config, divisor = (config, 1) if width is None else narrow(config, width)
    context = context_length(config)
    for seq in ([n for n in SEQS if n <= context] or [context]) if seq is None else (seq,):
        first, low, high = _fake_plan(config, layers, seq, micro_batch, gpu, granularity, compiled)
        if high > MARGIN * low:
            break
    n = len(first.policies)
    _check_room(high + first.costs.trainable_bytes)      # the none step + the reference gradients' copy
    budget = int(low + fraction * (high - low))
    torch.manual_seed(seed)
    built = build(config, "cpu", layers=layers, seq=seq, micro_batch=micro_batch)
    model, kwargs = built.model, built.kwargs
    result = solve_blocks(dataclasses.replace(first.problem, budget_bytes=budget), auto.find_blocks(model),
                          first.costs)
    setups = {"none": ("none",) * n, "plan": result, "hf-full": None, "auto-full": ("full",) * n}
    field = _experts_field(config)
    instance = {"activations_set_peak": low < high, "hidden": config.hidden_size, "seq": seq,
                "width_divisor": divisor, "experts": None if field is None else getattr(config, field)}
    rows, step_s = _rows(model, kwargs, setups, result.problem, seed, {"budget_bytes": budget, **instance})
    rounds = 2 if 2 * len(setups) * (1 + repeats) * step_s <= TIMING_S else 1
    times = _times(model, kwargs, setups, seed, repeats, rounds)
    for row in rows:
        row["step_time_s"], row["timing_samples"] = times[row["setup"]], rounds * repeats
    _configure(model, "none", None)
    return rows


def _fake_plan(config, layers: int, seq: int, micro_batch: int, gpu: str, granularity: str = "block",
               compiled: bool = False):
    """The instance planned under fake tensors at no budget: (AutoPlan, predicted peak of every block full, of
    none) in bytes."""
    fake = build(config, "fake", layers=layers, seq=seq, micro_batch=micro_batch)   # planned without memory
    with fake.mode:
        first = auto.plan(fake.model, (), fake.kwargs, budget=2**62, gpu=gpu, choices=CHOICES,
                          optimizer_state_bytes=0, granularity=granularity, compiled=compiled)
    n = len(first.policies)
    low = plan_from_policies(first.problem, ["full"] * n).peak_bytes
    high = plan_from_policies(first.problem, ["none"] * n).peak_bytes
    return first, low, high


def narrow(config, width: int):
    """(a copy of ``config`` with its blocks narrowed by k, k) — the largest power of two k with hidden / k ≥
    ``width`` that divides the hidden size, the attention heads and the key/value groups: hidden, heads,
    key/value groups and MLP width (intermediate_size, n_inner when set) all divided by k, the head dimension
    and everything else kept. A mixture of experts keeps its top-k and at most 2·top-k experts (each token still
    picks k of several): Mixtral's 8 experts hold 4× the parameters they route a token through, so their
    gradients would set the peak of any instance short enough to run here. (config, 1) when nothing changes.
    A CPU step of a 2048-wide block at a sequence long enough for its activations to outweigh its parameters'
    gradients takes minutes here."""
    h, heads = config.hidden_size, config.num_attention_heads
    kv = getattr(config, "num_key_value_heads", None) or heads
    k = 1
    while h // (2 * k) >= width and not (h % (2 * k) or heads % (2 * k) or kv % (2 * k)):
        k *= 2
    field = _experts_field(config)
    top_k = getattr(config, "num_experts_per_tok", None)
    few = field is not None and top_k is not None and getattr(config, field) > 2 * top_k
    if k == 1 and not few:
        return config, 1
    out = copy.deepcopy(config)
    if few:
        setattr(out, field, 2 * top_k)
    if getattr(config, "head_dim", None) is None and hasattr(config, "head_dim"):
        out.head_dim = h // heads
    out.hidden_size, out.num_attention_heads = h // k, heads // k
    if getattr(config, "num_key_value_heads", None):
        out.num_key_value_heads = kv // k
    for name in ("intermediate_size", "n_inner"):
        if getattr(config, name, None):
            setattr(out, name, getattr(config, name) // k)
    return out, k


def _experts_field(config) -> str | None:
    """The name ``config`` gives its number of experts (``EXPERT_FIELDS``), None for a dense model."""
    return next((name for name in EXPERT_FIELDS if getattr(config, name, None)), None)


def _rows(model, kwargs, setups: dict, problem, seed: int, instance: dict) -> tuple[list[dict], float]:
    """(one measured row per setup, the wall seconds of none's measured step). The first setup's gradients are
    the reference the others are compared with bit for bit."""
    rows, reference, step_s = [], None, None
    for name, policies in setups.items():
        _configure(model, name, policies)
        start = time.perf_counter()
        row = _measure(model, kwargs, seed)
        step_s = time.perf_counter() - start if step_s is None else step_s
        grads = row.pop("grads")
        reference = grads if reference is None else reference
        predicted, label = _predicted(problem, policies)
        rows.append({"setup": name, "policies": label, "predicted_peak_bytes": predicted, **row,
                     "peak_error": None if predicted is None else predicted / row["measured_peak_bytes"] - 1,
                     "grads_equal": all(torch.equal(a, b) for a, b in zip(grads, reference)), **instance})
    return rows, step_s


def _predicted(problem, setup) -> tuple[int | None, str]:
    """(predicted peak bytes, a label) of a setup: policies per block, an AutoPlan (a tensor plan's kept sets
    named), or None (transformers' own gradient checkpointing: no prediction)."""
    if setup is None:
        return None, "hf gradient checkpointing"
    if isinstance(setup, AutoPlan):
        kept = sum(k is not None for k in setup.kept_sets)
        return setup.plan.peak_bytes, ",".join(setup.policies) + (f" ({kept} blocks keep op sets)" if kept else "")
    return plan_from_policies(problem, setup).peak_bytes, ",".join(setup)


def _times(model, kwargs, setups: dict, seed: int, repeats: int, rounds: int) -> dict:
    """Median CPU seconds of a step per setup: remat.measure.timing's interleaved rounds (a load change on the
    machine hits every setup alike); one round when two would take over ``TIMING_S``, then without a warm-up
    call (each setup has run its measured step already)."""
    def step():
        torch.manual_seed(seed)
        model.zero_grad(set_to_none=True)
        model(**kwargs).loss.backward()
    timings = time_steps({name: step for name in setups}, "cpu", rounds=rounds, repeats=repeats, warmup=rounds - 1,
                         setup=lambda name: _configure(model, name, setups[name]))
    model.zero_grad(set_to_none=True)
    return {name: t.median_s for name, t in timings.items()}


def _check_room(need: int) -> None:
    """UsageError("--check-seq") when the instance would need more than half the memory this machine has
    available (/proc/meminfo MemAvailable; no check where that file is missing)."""
    try:
        info = dict(line.split(":", 1) for line in open("/proc/meminfo", encoding="ascii"))
        available = int(info["MemAvailable"].split()[0]) * 1024
    except (OSError, KeyError, ValueError):
        return
    if need > available // 2:
        raise UsageError("--check-seq", f"the check instance needs about {format_bytes(need)} and this machine has "
                                        f"{format_bytes(available)} available: lower --check-layers or --check-seq")


def _configure(model, name: str, policies) -> None:
    auto.clear(model)
    if hf_checkpointing(model):
        set_hf_checkpointing(model, False)
    if name == "hf-full":
        set_hf_checkpointing(model, True)
    elif policies is not None:
        auto.apply(model, policies if isinstance(policies, AutoPlan) else list(policies))


def _measure(model, kwargs, seed: int) -> dict:
    """One seeded step measured: saved bytes after the forward, peak, gradients."""
    model.zero_grad(set_to_none=True)
    torch.manual_seed(seed)
    with PeakMemory("cpu", model, *kwargs.values()) as mem:
        with SavedTensorLog(model) as log, KeptLog() as kept:
            out = model(**kwargs)
        saved = log.total_bytes() + cache_bytes(log, kept)
        loss = out.loss
        del out                          # as a training loop: the output is not held through backward
        loss.backward()
    grads = [p.grad.clone() for p in model.parameters() if p.grad is not None]
    model.zero_grad(set_to_none=True)
    return {"saved_bytes": saved, "measured_peak_bytes": mem.peak_bytes, "grads": grads}
