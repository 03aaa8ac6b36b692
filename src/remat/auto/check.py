"""Check a plan by measurement: a small instance of the same architecture, planned, applied and run on this CPU.

    rows = check_small("path/to/config.json", layers=4, seq=128)      # or a preset name, or a config object
    for row in rows: print(row["setup"], row["predicted_peak_bytes"], row["measured_peak_bytes"])

The instance: the config with ``layers`` blocks, sequence length ``seq``, micro-batch ``micro_batch``, a
vocabulary of at most ``vocab`` tokens (the blocks are the architecture; a 128k vocabulary's embedding, head and
gradients would dominate a small instance's peak and leave nothing to plan), in float32 (this CPU's matmul
dtype), random weights (remat.auto.hf.build). Its plan is made at a budget between
the predicted peaks of "every block full" and "no recompute" (``fraction`` of the way up; by default the middle,
which makes the plan mix policies), without optimizer state (the step measured has no optimizer). Then, each
from the same seed (dropout masks equal):

* ``none``       — the model as built: reference gradients, peak, time;
* ``plan``       — ``auto.apply(model, result)``: gradients compared bit for bit with none's;
* ``hf-full``    — transformers' ``gradient_checkpointing_enable()`` (non-reentrant), every block full: the
                   baseline a transformers user has today;
* ``auto-full``  — ``auto.apply(model, "full")``: the same policy through remat, predicted and measured.

Per setup: saved bytes after the forward (remat.measure.saved + the selective cache), the measured peak of
forward + backward (torch's MemTracker, remat.measure.peak) beside the predicted peak (the plan's memory
model; none for hf-full, which remat did not plan), the step time on this CPU (median of interleaved rounds,
remat.measure.timing), and whether the gradients equal none's bitwise. ``activations_set_peak`` is False
when every block full and none peak alike — the parameters' gradients at the end of backward set the peak at
this size, the plan is all none, and a longer ``seq`` makes the check informative. The offload policy is left out: on a
CPU its "host" buffers are the same memory, so its device peak cannot be measured here.
"""

from __future__ import annotations

import dataclasses

import torch

from remat import auto
from remat.auto.hf import build, config_of, hf_checkpointing, set_hf_checkpointing
from remat.auto.planning import solve_blocks
from remat.drop_cheap import KeptLog, cache_bytes
from remat.errors import UsageError
from remat.measure.peak import PeakMemory
from remat.measure.saved import SavedTensorLog
from remat.measure.timing import time_steps
from remat.planner.problem import plan_from_policies
from remat.units import format_bytes

CHOICES = ("none", "selective", "full")


def check_small(source, layers: int = 4, seq: int = 128, micro_batch: int = 1, fraction: float = 0.5,
                gpu: str = "h100-80gb", seed: int = 0, repeats: int = 5, vocab: int = 1024) -> list[dict]:
    """Rows of the check (module docstring): setup, policies, saved_bytes, predicted_peak_bytes,
    measured_peak_bytes, peak_error (relative), step_time_s (CPU median), grads_equal, budget_bytes.
    Raises UsageError naming the field for bad sizes; needs transformers (UsageError("model") without)."""
    if not 0.0 <= fraction <= 1.0:
        raise UsageError("fraction", f"must be in [0, 1], got {fraction!r}")
    config = source if hasattr(source, "to_dict") else config_of(source)
    config.dtype = "float32"
    config.vocab_size = min(config.vocab_size, vocab)   # the embedding and head would dominate a small peak
    fake = build(config, "fake", layers=layers, seq=seq, micro_batch=micro_batch)   # planned without memory
    with fake.mode:
        first = auto.plan(fake.model, (), fake.kwargs, budget=2**62, gpu=gpu, choices=CHOICES,
                          optimizer_state_bytes=0)
    n = len(first.policies)
    low = plan_from_policies(first.problem, ["full"] * n).peak_bytes
    high = plan_from_policies(first.problem, ["none"] * n).peak_bytes
    _check_room(high + first.costs.trainable_bytes)      # the none step + the reference gradients' copy
    budget = int(low + fraction * (high - low))
    torch.manual_seed(seed)
    built = build(config, "cpu", layers=layers, seq=seq, micro_batch=micro_batch)
    model, kwargs = built.model, built.kwargs
    result = solve_blocks(dataclasses.replace(first.problem, budget_bytes=budget), auto.find_blocks(model),
                          first.costs)
    setups = {"none": ("none",) * n, "plan": result.policies, "hf-full": None, "auto-full": ("full",) * n}
    rows, reference = [], None
    for name, policies in setups.items():
        _configure(model, name, policies)
        row = _measure(model, kwargs, seed)
        grads = row.pop("grads")
        reference = grads if reference is None else reference
        predicted = None if policies is None else plan_from_policies(result.problem, policies).peak_bytes
        rows.append({"setup": name, "policies": "hf gradient checkpointing" if policies is None else
                     ",".join(policies), "budget_bytes": budget, "predicted_peak_bytes": predicted, **row,
                     "peak_error": None if predicted is None else predicted / row["measured_peak_bytes"] - 1,
                     "grads_equal": all(torch.equal(a, b) for a, b in zip(grads, reference)),
                     "activations_set_peak": low < high})
    times = _times(model, kwargs, setups, seed, repeats)
    for row in rows:
        row["step_time_s"] = times[row["setup"]]
    _configure(model, "none", None)
    return rows


def _times(model, kwargs, setups: dict, seed: int, repeats: int) -> dict:
    """Median CPU seconds of a step per setup: remat.measure.timing's interleaved rounds (a load change on the
    machine hits every setup alike)."""
    def step():
        torch.manual_seed(seed)
        model.zero_grad(set_to_none=True)
        model(**kwargs).loss.backward()
    timings = time_steps({name: step for name in setups}, "cpu", rounds=2, repeats=repeats,
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
        auto.apply(model, list(policies))


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
