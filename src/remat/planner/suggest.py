"""What would make an infeasible plan fit: the device budget each single change needs, computed by the planner.

    parts = suggest(cfg, problem_args)   # problem_args as for make_problem; ["Fits 24.00 GiB with --dp 64 …", …]

For each change the planner rebuilds the problem (``make_problem``) and takes its least peak
(``solve.minimum_budget``, bytes) — nothing is guessed:

* ``--dp N --zero 3``: ZeRO-3 shards weights, gradients and optimizer state over N data-parallel ranks
  (Rajbhandari et al. 2020); the smallest N in 2, 4, …, 1024 that fits (the peak falls as N grows), among
  those the pipeline schedule can run (interleaved: N micro-batches per step a multiple of p);
* ``--tp T``: the smallest T in 2t, 4t, … dividing the heads and the hidden size (a Llama-style layer: also the
  key/value groups and the MLP width, Megatron-LM's split) that fits;
* ``--ep E`` (a mixture of experts): the smallest E in 2, 4, … dividing the experts that fits, each rank holding
  E/ep experts' state; with ``--dp`` raised to a multiple of E where the data-parallel ranks are too few;
* ``--seq S``: the largest power of two S ≥ 128 below s that fits (the peak grows with s);
* ``--micro-batch 1`` when b > 1.

A change that cannot fit even at its far end (N = 1024, the largest T, S = 128) is reported with what it still
needs, so the reader sees which lever does not help (e.g. model state alone above the budget).
"""

from __future__ import annotations

import dataclasses
import math

from remat.errors import UsageError
from remat.models.presets import ModelConfig, validate
from remat.planner.costs import micro_batches
from remat.planner.make import make_problem
from remat.planner.mckp import SearchTooLarge
from remat.planner.solve import minimum_budget
from remat.timemodel.gpus import gpu
from remat.units import format_bytes

MAX_DP = 1024
MIN_SEQ = 128


def needed_bytes(cfg: ModelConfig | None, problem_args: dict) -> int | None:
    """The smallest device budget (bytes) any plan of ``cfg`` under ``problem_args`` needs; None when ``cfg`` is
    None, no plan fits the host limit or the change is not valid for this model (a UsageError)."""
    if cfg is None:
        return None
    try:
        best = minimum_budget(make_problem(cfg, **{**problem_args, "calibrate": False}))
    except (UsageError, SearchTooLarge):
        return None
    return None if best is None else best.peak_bytes


def first_fit(candidates: list, need, budget: int):
    """(candidate, bytes) of the first candidate that fits, the list being ordered so that fitting is monotone
    (once one fits, every later one does): the far end first, then a binary search. Else (last candidate, its
    bytes); None for no candidate."""
    if not candidates:
        return None
    last = need(candidates[-1])
    if last is None or last > budget:
        return candidates[-1], last
    lo, hi, found = 0, len(candidates) - 2, (candidates[-1], last)
    while lo <= hi:
        mid = (lo + hi) // 2
        n = need(candidates[mid])
        if n is not None and n <= budget:
            found, hi = (candidates[mid], n), mid - 1
        else:
            lo = mid + 1
    return found


def _changes(cfg: ModelConfig, args: dict) -> list[tuple[list, object, object]]:
    """(candidates, flags(candidate) -> str, need(candidate) -> bytes | None) per lever, in report order."""
    dp, zero = args.get("dp", 1), args.get("zero", 0)
    out = []
    dps = [n for n in (2 ** k for k in range(1, 11)) if (n > dp or (n == dp and zero < 3)) and _schedulable(cfg, n)]
    out.append((dps, lambda n: f"--dp {n} --zero 3",
                lambda n: needed_bytes(cfg, {**args, "dp": n, "zero": 3})))
    tps = [t for t in (cfg.tp * 2 ** k for k in range(1, 12)) if t <= cfg.heads and cfg.heads % t == 0
           and cfg.hidden % t == 0 and (cfg.arch == "gpt" or cfg.kv_heads % t == 0 and cfg.ffn_hidden % t == 0)]
    if tps:
        out.append((tps, lambda t: f"--tp {t}", lambda t: needed_bytes(_with(cfg, tp=t), args)))
    if cfg.experts:
        eps = [e for e in (2 ** k for k in range(1, 11)) if e > cfg.ep and cfg.experts % e == 0]
        ranks = lambda e: dp if dp % e == 0 else math.lcm(dp, e)     # EP spans data-parallel ranks
        out.append((eps, lambda e: f"--ep {e}" + ("" if ranks(e) == dp else f" --dp {ranks(e)}"),
                    lambda e: needed_bytes(_with(cfg, ep=e), {**args, "dp": ranks(e)})))
    seqs = [s for s in (2 ** k for k in range(30, 6, -1)) if MIN_SEQ <= s < cfg.seq]
    out.append((seqs, lambda s: f"--seq {s}", lambda s: needed_bytes(_with(cfg, seq=s), args)))
    if cfg.micro_batch > 1:
        out.append(([1], lambda b: "--micro-batch 1", lambda b: needed_bytes(_with(cfg, micro_batch=1), args)))
    return out


def _schedulable(cfg: ModelConfig, dp: int) -> bool:
    """Whether ``dp`` leaves a step the interleaved schedule can run: N = ⌈global_batch / (b·dp)⌉ a multiple of
    p (Megatron-LM; ``costs._check`` rejects the rest). Always true without interleaving."""
    return cfg.interleave <= 1 or cfg.pp == 1 or micro_batches(cfg, dp) % cfg.pp == 0


def _with(cfg: ModelConfig, **changes) -> ModelConfig | None:
    """``cfg`` with ``changes``, validated; None when the model cannot take them."""
    try:
        return validate(dataclasses.replace(cfg, **changes))
    except UsageError:
        return None


def suggest(cfg: ModelConfig, problem_args: dict) -> list[str]:
    """At most two sentences: the single changes that fit the budget of ``problem_args["memory"]`` with the budget
    each needs, and those that do not fit even at their far end with what they still need (module docstring).
    Raises nothing for changes the model cannot take (they are left out)."""
    budget = problem_args.get("memory")
    if budget is None:
        budget = gpu(problem_args.get("gpu_name", "a100-80gb"), **(problem_args.get("gpu_overrides") or {})
                     ).memory_bytes
    return summarize(_changes(cfg, problem_args), budget)


def summarize(changes, budget: int) -> list[str]:
    """At most two sentences over ``changes`` [(candidates, flags(c) -> str, need(c) -> bytes | None), ...], each
    list ordered so that fitting is monotone: "Fits <budget> with <flags> (<bytes>); …" for the first candidate of
    each change that fits, "Not enough even with <flags> (<bytes>); …" for changes whose far end does not."""
    fits, short = [], []
    for candidates, flags, need in changes:
        hit = first_fit(candidates, need, budget)
        if hit is None or hit[1] is None:
            continue
        text = f"{flags(hit[0])} ({format_bytes(hit[1])})"
        (fits if hit[1] <= budget else short).append(text)
    parts = []
    if fits:
        parts.append(f"Fits {format_bytes(budget)} with " + "; ".join(fits))
    if short:
        parts.append("Not enough even with " + "; ".join(short))
    return parts
