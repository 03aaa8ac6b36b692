"""Planner experiments: plans for the paper's models, Pareto frontiers against the baselines, and the plans
applied to real (tiny, CPU) models and measured.

* ``paper_plans``     (planner-paper): the exact plan and every baseline for the Table 3 models on 80 GB GPUs
  (predicted; the cost model of ``remat.planner.costs``). One row per (model, gpu, sp, method).
* ``frontier``        (planner-frontier): a budget sweep from the smallest budget any plan fits to the peak
  of ``none``: step time of the plan and of each baseline per budget (predicted). One row per (model,
  budget, method).
* ``validate``        (planner-validate): tiny GPT models on this machine. Calibration (stated in every row):
  per-policy seconds from whole-model reference steps, and two reference steps — ``none`` and ``full`` —
  whose measured peaks give the backward workspaces the formulas do not contain. Then, at
  budgets across the feasible range, the plan and every baseline are applied with
  ``remat.policies.apply_plan`` and measured: peak bytes by ``remat.measure.step.measure`` (MemTracker on a
  CPU), step time by interleaved rounds over all the plans (``step_seconds``; one intra-op thread by
  default, so other work on a shared machine disturbs every plan alike). Times are calibrated from the
  all-none/selective/full steps (``calibrate_torch``) in an earlier session than the one that measures the
  plans, so besides absolute seconds each row carries the slowdown against ``none`` measured in the same
  session — the comparison a shared, variably loaded machine supports. One row per (model, budget, method)
  with predicted and measured peak and time.

Run: ``remat experiment planner-validate --params '{"models": [{"layers": 8, "seq": 128}]}' --out x.csv``.
"""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd

from remat.errors import InfeasibleError, UsageError
from remat.experiments.params import check_known, get_int
from remat.experiments.progress import progress
from remat.measure.timing import intra_op_threads
from remat.measure.provenance import with_provenance
from remat.models.presets import from_name
from remat.planner import make_problem
from remat.planner.baselines import baselines
from remat.planner.problem import Problem, evaluate, plan_from_policies
from remat.planner.solve import minimum_budget, solve

PAPER_MODELS = ("gpt-22b", "gpt3-175b", "mt-nlg-530b", "gpt-1t")
GiB = 2**30


def _list(params: dict, key: str, default: list) -> list:
    value = params.get(key, default)
    if not isinstance(value, list) or not value:
        raise UsageError(key, f"must be a non-empty list, got {value!r}")
    return value


def _rows(problem: Problem, plan, base: dict, **keys) -> list[dict]:
    rows = [{**keys, "method": "plan", "peak_bytes": plan.peak_bytes, "step_time_s": plan.step_time_s,
             "feasible": plan.feasible, "recompute_flops": plan.recompute_flops,
             "offload_bytes": plan.offload_bytes,
             **{f"n_{p}": plan.policies.count(p) for p in ("none", "selective", "full", "offload")}}]
    for name, b in base.items():
        rows.append({**keys, "method": name, "peak_bytes": b["peak_bytes"], "step_time_s": b["step_time_s"],
                     "feasible": b["feasible"], "recompute_flops": b.get("recompute_flops"),
                     "detail": ";".join(f"{k}={b[k]}" for k in ("N", "k") if k in b) or None})
    return rows


def paper_plans(params: dict) -> pd.DataFrame:
    """The plan and baselines of each paper model at its GPU's memory (80 GB class), with and without SP.

    params: models (list of presets; default the four of Table 3), gpus (default ["a100-80gb", "h100-80gb"]),
    sac_time_limit_s (default 20)."""
    check_known(params, {"models", "gpus", "sac_time_limit_s"}, "planner-paper")
    models = _list(params, "models", list(PAPER_MODELS))
    gpus = _list(params, "gpus", ["a100-80gb", "h100-80gb"])
    limit = float(params.get("sac_time_limit_s", 20.0))
    rows = []
    for name, gpu_name, sp in progress(itertools.product(models, gpus, (False, True)), "planner-paper"):
        problem = make_problem(from_name(name), gpu_name=gpu_name, sp=sp)
        keys = {"model": name, "gpu": gpu_name, "sp": sp, "budget_bytes": problem.budget_bytes,
                "layers_per_gpu": len(problem.layers), "sac_time_limit_s": limit}
        try:
            plan = solve(problem)
        except InfeasibleError as exc:
            rows.append({**keys, "method": "plan", "feasible": False,
                         "minimum_bytes": exc.minimum_bytes})
            continue
        rows += _rows(problem, plan, baselines(problem, sac_time_limit_s=limit), **keys)
    return with_provenance(rows, "cpu")


def frontier(params: dict) -> pd.DataFrame:
    """Budget sweep (predicted): per model, ``points`` budgets from the least feasible peak to ``none``'s.

    params: models (default ["gpt3-175b", "mt-nlg-530b"]), gpu (default "a100-80gb"), sp (default true),
    points (default 12), sac_time_limit_s (default 10)."""
    check_known(params, {"models", "gpu", "sp", "points", "sac_time_limit_s"}, "planner-frontier")
    models = _list(params, "models", ["gpt3-175b", "mt-nlg-530b"])
    points = get_int(params, "points", 12, minimum=2)
    limit = float(params.get("sac_time_limit_s", 10.0))
    rows = []
    for name in models:
        problem = make_problem(from_name(name), gpu_name=params.get("gpu", "a100-80gb"),
                               sp=bool(params.get("sp", True)))
        for budget in _budgets(problem, points):
            at = _at(problem, budget)
            rows += _rows(at, solve(at), baselines(at, sac_time_limit_s=limit), model=name,
                          budget_bytes=budget, gpu=problem.meta["gpu"], sp=problem.meta["sp"],
                          sac_time_limit_s=limit)
    return with_provenance(rows, "cpu")


def _at(problem: Problem, budget: int) -> Problem:
    import dataclasses
    return dataclasses.replace(problem, budget_bytes=int(budget))


def _budgets(problem: Problem, points: int) -> list[int]:
    """``points`` budgets (bytes) evenly spaced from the least feasible peak to the peak of all-none."""
    lo = minimum_budget(problem).peak_bytes
    hi = max(lo, plan_from_policies(problem, ["none"] * len(problem.layers)).peak_bytes)
    return sorted({int(round(x)) for x in np.linspace(lo, hi, points)})


# --- validation on the runtime's tiny models ------------------------------------------------------------------

_MODEL_KEYS = {"model", "layers", "seq", "micro_batch", "hidden", "heads", "dropout"}


def _tiny(spec: dict):
    check_known(spec, _MODEL_KEYS, "planner-validate.models[]")
    hidden = spec.get("hidden")
    overrides = {k: spec.get(k) for k in ("layers", "seq", "micro_batch", "hidden", "heads", "dropout")}
    if hidden is not None:
        overrides["ffn_hidden"] = 4 * hidden
    if spec.get("seq") is not None:
        overrides["max_positions"] = spec["seq"]
    return from_name(spec.get("model", "gpt-tiny"), **overrides)


def calibrate_torch(cfg, device: str = "cpu", repeats: int = 5, rounds: int = 3):
    """(TorchCalibration, reference rows) of the runtime's GPT model on this machine.

    Times: whole-model steps of the all-none, all-selective and all-full plans in interleaved rounds
    (``step_seconds``); a layer under policy X costs T_none/L + (T_X − T_none)/L, so a plan's predicted step
    is T_none + Σ over its layers of (T_X − T_none)/L (the embedding, head and loss ride in T_none).
    Memory: the measured peaks of the none and full steps give the two backward workspaces (module
    docstring)."""
    from remat.experiments.sweeps import layernorm_stats_itemsize
    from remat.measure.step import measure
    from remat.planner.costs import TorchCalibration, torch_problem

    policies = ("none", "selective", "full")
    steps = step_seconds(cfg, policies, device, repeats, rounds)
    L = cfg.layers
    seconds = {p: steps["none"] / L + (steps[p] - steps["none"]) / L for p in policies}
    ref = {p: measure(cfg, p, device, timing=False) for p in ("none", "full")}
    stats = layernorm_stats_itemsize(cfg.dtype, device)
    bare = torch_problem(cfg, 2**62, TorchCalibration(seconds, 0.0, 0, 0, stats), policies)
    head = max(0, ref["none"]["peak_bytes"] - evaluate(bare, [0] * L).peak_bytes)
    with_head = torch_problem(cfg, 2**62, TorchCalibration(seconds, 0.0, 0, head, stats), policies)
    full = [policies.index("full")] * L
    layer_ws = max(0, ref["full"]["peak_bytes"] - evaluate(with_head, full).peak_bytes)
    return TorchCalibration(seconds, 0.0, layer_ws, head, stats), ref


def step_seconds(cfg, specs, device: str = "cpu", repeats: int = 5, rounds: int = 3, seed: int = 0) -> dict:
    """spec -> median seconds of a training step (forward, fp32 loss, backward) under that plan: ``rounds``
    interleaved rounds of ``repeats`` timed steps per plan (load drift on a shared machine hits every plan
    alike). The step is remat.measure.step's; remat.measure.timing.time_step times it."""
    import torch

    from remat.measure.timing import time_step
    from remat.models.transformer import build_model, lm_loss, random_tokens
    from remat.policies import apply_plan

    torch.manual_seed(seed)
    model = build_model(cfg, device)
    tokens, targets = random_tokens(cfg, device), random_tokens(cfg, device)
    specs = list(dict.fromkeys(specs))
    samples = {spec: [] for spec in specs}

    def step():
        model.zero_grad(set_to_none=True)
        lm_loss(model(tokens), targets).backward()

    for r in range(rounds):
        for spec in specs[r % len(specs):] + specs[:r % len(specs)]:
            apply_plan(model, spec)
            samples[spec] += time_step(step, device, warmup=1, repeats=repeats).samples_s
    return {spec: float(np.median(v)) for spec, v in samples.items()}


def _spec(name: str, entry: dict) -> str | None:
    """The runtime's plan spec (remat.policies.parse_plan) of a baseline entry."""
    if name in ("none", "full", "selective"):
        return name
    if name == "sqrt-segments":
        return f"segments:{entry['k']}"
    if name == "megatron-uniform":
        return f"uniform:{entry['N']}"
    if name == "megatron-block":
        return f"block:{entry['N']}"
    if name == "torch-sac-milp" and entry.get("policies"):
        return ",".join(entry["policies"])
    return None


def validate(params: dict) -> pd.DataFrame:
    """Plans and baselines applied to tiny GPT models on ``device`` and measured (module docstring).

    params: models (list of {model, layers, seq, micro_batch, hidden, heads, dropout}; default two tiny
    GPTs), points (budgets per model, default 5), repeats (timed steps per round, default 5), rounds
    (interleaved timing rounds, default 3), threads (torch intra-op threads while timing, default 1),
    device ("cpu")."""
    from remat.measure.step import measure
    from remat.planner.costs import torch_problem

    check_known(params, {"models", "points", "repeats", "rounds", "threads", "device"}, "planner-validate")
    specs = _list(params, "models", [{"layers": 8, "seq": 128, "micro_batch": 4},
                                      {"layers": 12, "seq": 64, "micro_batch": 8, "hidden": 128, "heads": 8}])
    points = get_int(params, "points", 5, minimum=2)
    repeats = get_int(params, "repeats", 5, minimum=5)
    rounds = get_int(params, "rounds", 3)
    threads = get_int(params, "threads", 1)
    device = params.get("device", "cpu")
    if device not in ("cpu", "cuda"):
        raise UsageError("device", f"must be cpu or cuda, got {device!r}")
    rows = []
    with intra_op_threads(threads):
        for spec in progress(specs, "planner-validate"):
            rows += _validate_model(_tiny(spec), points, repeats, rounds, device, measure, torch_problem)
    frame = with_provenance(rows, device)
    frame["threads"] = threads
    measured = frame["measured_peak_bytes"]
    frame["peak_rel_error"] = frame["predicted_peak_bytes"] / measured - 1
    frame["measured_within_budget"] = (measured <= frame["budget_bytes"]).where(measured.notna())
    frame["time_rel_error"] = frame["predicted_step_time_s"] / frame["measured_step_time_s"] - 1
    frame["slowdown_rel_error"] = frame["predicted_slowdown"] / frame["measured_slowdown"] - 1
    return frame


class _canonical(dict):
    """spec -> the first spec seen for the same plan (remat.policies.parse_plan's policies and groups)."""

    def __init__(self, layers: int):
        super().__init__()
        self.layers, self.seen = layers, {}

    def get(self, spec, default=None):
        if spec is None:
            return None
        from remat.policies import parse_plan
        plan = parse_plan(spec, self.layers)
        return self.seen.setdefault((plan.policies, plan.groups), spec)


def _validate_model(cfg, points, repeats, rounds, device, measure, torch_problem) -> list[dict]:
    """Rows of one tiny model: calibrate, plan at ``points`` budgets, apply and measure every plan."""
    cal, ref = calibrate_torch(cfg, device, repeats, rounds)
    problem = torch_problem(cfg, 2**62, cal)
    entries = []
    for budget in _budgets(problem, points):
        at = _at(problem, budget)
        plan = solve(at)
        entries.append((budget, "plan", {"peak_bytes": plan.peak_bytes, "step_time_s": plan.step_time_s,
                                         "feasible": plan.feasible, "spec": ",".join(plan.policies)}))
        for name, entry in baselines(at).items():
            entries.append((budget, name, {**entry, "spec": _spec(name, entry)}))
    canon = _canonical(cfg.layers)             # one measurement per distinct plan ("none" = "block:0")
    for _, _, e in entries:
        e["spec"] = canon.get(e["spec"])
    runnable = [e["spec"] for _, _, e in entries if e["feasible"] and e["spec"] is not None]
    seconds = step_seconds(cfg, ["none"] + runnable, device, repeats, rounds)
    predicted_none = cfg.layers * cal.layer_seconds["none"]
    peaks = {spec: ref[spec] if spec in ref else measure(cfg, spec, device, timing=False)
             for spec in dict.fromkeys(runnable)}
    keys = {"model": cfg.name, "layers": cfg.layers, "seq": cfg.seq, "micro_batch": cfg.micro_batch,
            "hidden": cfg.hidden, "heads": cfg.heads, "dtype": cfg.dtype,
            "layer_workspace_bytes": cal.layer_workspace_bytes, "head_workspace_bytes": cal.head_workspace_bytes,
            **{f"layer_seconds_{p}": v for p, v in cal.layer_seconds.items()}}
    rows = []
    for budget, method, entry in entries:
        row = {**keys, "budget_bytes": budget, "method": method, "spec": entry["spec"],
               "predicted_peak_bytes": entry["peak_bytes"],
               "predicted_step_time_s": entry["step_time_s"],
               "predicted_slowdown": None if entry["step_time_s"] is None else entry["step_time_s"] / predicted_none,
               "feasible": entry["feasible"], "reference": entry["spec"] in ref,
               "measured_peak_bytes": None, "measured_step_time_s": None, "measured_slowdown": None,
               "peak_method": None}
        if entry["spec"] in peaks:
            row.update(measured_peak_bytes=peaks[entry["spec"]]["peak_bytes"],
                       measured_step_time_s=seconds[entry["spec"]],
                       measured_slowdown=seconds[entry["spec"]] / seconds["none"],
                       peak_method=peaks[entry["spec"]]["peak_method"])
        rows.append(row)
    return rows
