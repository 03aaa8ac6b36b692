"""Planner experiments: plans for the paper's models, Pareto frontiers against the baselines, and the plans
applied to real (tiny) models and measured.

* ``paper_plans``     (planner-paper): the exact plan and every baseline for the Table 3 models at the full
  memory of each GPU preset (predicted; the cost model of ``remat.planner.costs``). One row per (model, gpu,
  sp, method).
* ``frontier``        (planner-frontier): a budget sweep from the smallest budget any plan fits to the peak
  of ``none``: step time of the plan and of each baseline per budget (predicted). One row per (model,
  budget, method).
* ``validate``        (planner-validate): tiny GPT models on ``device``. Calibration (stated in every row):
  per-policy seconds from whole-model reference steps (timed again with more rounds, ``calibration_rounds``,
  while noise puts them out of the order of their work), and two reference steps — ``none`` and ``full`` —
  whose measured peaks give the backward workspaces the formulas do not contain. Those two plans are fitted,
  not predicted (``reference`` marks their rows), and the two fitted constants absorb any error that is the
  same for every plan (a missing buffer, say); so the bytes alive before the step (parameters, buffers,
  inputs: ``predicted_base_bytes``) are compared with the measured ``base_bytes`` of the reference step.
  Then, at ``points`` budgets strictly inside the feasible range (``interior_budgets``: neither the least
  feasible peak nor the peak of all-none, the calibration's own points), the plan and every baseline are
  applied with ``remat.policies.apply_plan`` and measured: peak bytes by ``remat.measure.step.measure``
  (MemTracker on a CPU), step time of the plans (and, with ``time_baselines``, of every baseline) and of
  ``none`` by the one timing protocol, all at once (``sweep_point.time_plans``:
  ``remat.measure.timing.time_steps``, one intra-op thread by default, so other work on a shared machine
  disturbs every plan alike). Times are calibrated (``calibrate_torch``) in an earlier session than the one
  that measures the plans, so besides absolute seconds each row carries the slowdown against ``none``
  measured in the same session — the comparison a shared, variably loaded machine supports. One row per
  (model, budget, method) with predicted and measured peak (and their difference in bytes, exact) and time.

Every row carries the settings it was made with (GPU preset values, parallel layout, model-state bytes per
parameter, workspace reserve; for validate the timing protocol), so a report reads them from the table.
Parameters: the dataclasses below (config.yaml section ``planner``).

Run: ``remat experiment planner-validate --params '{"models": [{"layers": 8, "seq": 128}]}' --out x.csv``.
"""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass, field
from typing import Annotated, Literal

import numpy as np
import pandas as pd

from remat.device import resolve_device
from remat.errors import InfeasibleError, UsageError
from remat.paper import TABLE3_MODELS
from remat.experiments.params import Count, Ge
from remat.experiments.progress import progress
from remat.experiments.sweep_point import time_plans
from remat.formulas import torch_gpt
from remat.formulas.korthikanti import RECOMPUTE
from remat.measure.provenance import with_provenance
from remat.measure.step import layernorm_stats_itemsize, measure
from remat.models.presets import ModelConfig, from_name
from remat.planner import make_problem
from remat.planner.baselines import baselines
from remat.planner.costs import TorchCalibration, torch_problem
from remat.planner.problem import Problem, evaluate, plan_from_policies
from remat.planner.solve import minimum_budget, solve
from remat.policies import POLICIES, parse_plan
from remat.timemodel.gpus import check_presets

# --- parameters ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PaperParams:
    """planner.paper: the plan and every baseline of each model at the full memory of each GPU, SP off and on."""

    models: list[str] = field(default_factory=lambda: list(TABLE3_MODELS))
    """Presets or config.json paths (default: the four models of Korthikanti Table 3, their t, p, m and b)."""
    gpus: list[str] = field(default_factory=lambda: ["a100-80gb", "h100-80gb"])
    """GPU presets (remat.timemodel.gpus.GPUS); the budget is the preset's memory in bytes."""
    sac_time_limit_s: float = 20.0
    """Seconds CBC may spend on torch's sac_milp per setting (> 0)."""

    def __post_init__(self):
        check_presets("planner.paper.gpus", self.gpus)
        _check_positive("planner.paper.sac_time_limit_s", self.sac_time_limit_s)


@dataclass(frozen=True)
class FrontierParams:
    """planner.frontier: a budget sweep per model, plan against every baseline (predicted)."""

    models: list[str] = field(default_factory=lambda: ["gpt3-175b", "mt-nlg-530b"])
    """Presets or config.json paths."""
    gpu: str = "a100-80gb"
    """GPU preset (remat.timemodel.gpus.GPUS): FLOP/s, host link and host memory."""
    sp: bool = True
    """Sequence parallelism (Korthikanti §4.2.2)."""
    points: Annotated[int, Ge(2)] = 12
    """Budgets per model, evenly spaced from the least feasible peak to the peak of none (bytes)."""
    sac_time_limit_s: float = 10.0
    """Seconds CBC may spend on torch's sac_milp per budget (> 0)."""

    def __post_init__(self):
        check_presets("planner.frontier.gpu", [self.gpu])
        _check_positive("planner.frontier.sac_time_limit_s", self.sac_time_limit_s)


@dataclass(frozen=True)
class TinyModel:
    """One model of planner.validate: a preset with overrides (None: the preset's value)."""

    model: str = "gpt-tiny"
    """Preset or config.json path (a GPT: the torch cost model covers the serial GPT model)."""
    layers: Count | None = None
    """L: layers."""
    seq: Count | None = None
    """s: sequence length (tokens); also the model's max_positions."""
    micro_batch: Count | None = None
    """b: micro-batch size (sequences)."""
    hidden: Count | None = None
    """h: hidden size; the MLP's inner size is 4h."""
    heads: Count | None = None
    """a: attention heads."""
    dropout: float | None = None
    """Dropout probability in [0, 1)."""

    def __post_init__(self):
        if self.dropout is not None and not 0 <= self.dropout < 1:
            raise UsageError("planner.validate.models.dropout", f"must be in [0, 1), got {self.dropout}")

    def config(self) -> ModelConfig:
        """The preset with these overrides (ffn_hidden = 4h with h, max_positions = s with s)."""
        overrides = {k: getattr(self, k) for k in ("layers", "seq", "micro_batch", "hidden", "heads", "dropout")}
        if self.hidden is not None:
            overrides["ffn_hidden"] = 4 * self.hidden
        if self.seq is not None:
            overrides["max_positions"] = self.seq
        return from_name(self.model, **overrides)


@dataclass(frozen=True)
class ValidateParams:
    """planner.validate: plans and baselines applied to tiny GPT models and measured."""

    models: list[TinyModel] = field(default_factory=lambda: [
        TinyModel(layers=8, seq=128, micro_batch=2),
        TinyModel(layers=8, seq=64, micro_batch=4, hidden=128, heads=8)])
    """The models measured, each a preset with overrides (two shapes: the claims need a plan between the
    uniform ones at each budget, not large steps)."""
    points: Annotated[int, Ge(2)] = 4
    """Budgets per model (bytes), evenly spaced strictly inside the feasible range: the least feasible peak
    and the peak of all-none are left out (``interior_budgets``)."""
    repeats: Annotated[int, Ge(5)] = 5
    """Timed steps per plan and round (≥ 5)."""
    rounds: Count = 2
    """Interleaved timing rounds (remat.measure.timing.time_steps): 2 of 5 pool 10 samples per plan."""
    threads: Count = 1
    """torch intra-op threads while timing on a CPU."""
    time_baselines: bool = False
    """Also time every applied baseline (the measured × of the baselines in the step-time figure); the
    findings use the plans' times only, so by default only the plans and ``none`` are timed (every applied
    plan and baseline has its peak measured either way)."""
    device: Literal["cpu", "cuda"] = "cpu"
    """Where the models run (the rule passes config.device)."""


def _check_positive(where: str, value: float) -> None:
    if not value > 0:
        raise UsageError(where, f"must be > 0 seconds, got {value}")


# --- predicted: the paper's models and the frontier -------------------------------------------------------------

SETTINGS = {"tp": "t", "pp": "p", "interleave": "m", "micro_batch": "b", "seq": "s",
            **{key: key for key in ("dp", "zero", "peak_flops", "achievable", "memory_bytes_per_s",
                                    "nvlink_bytes_per_s", "link_bytes_per_s", "gpus_per_host_link", "link_t0_s",
                                    "reserve_bytes", "weight_bytes", "grad_bytes", "optimizer_bytes")}}
"""Column -> key of the problem's meta (remat.planner.costs.build_problem): the settings a row was made with."""


def settings(problem: Problem) -> dict:
    """The settings columns of a predicted row: SETTINGS from the problem's meta, and host_limit_bytes."""
    return {**{column: problem.meta[key] for column, key in SETTINGS.items()},
            "host_limit_bytes": problem.host_limit_bytes}


def _rows(plan, base: dict, **keys) -> list[dict]:
    rows = [{**keys, "method": "plan", "peak_bytes": plan.peak_bytes, "step_time_s": plan.step_time_s,
             "feasible": plan.feasible, "recompute_flops": plan.recompute_flops,
             "offload_bytes": plan.offload_bytes, **{f"n_{p}": plan.policies.count(p) for p in POLICIES}}]
    for name, b in base.items():
        rows.append({**keys, "method": name, "peak_bytes": b["peak_bytes"], "step_time_s": b["step_time_s"],
                     "feasible": b["feasible"], "recompute_flops": b.get("recompute_flops"),
                     "detail": ";".join(f"{k}={b[k]}" for k in ("N", "k") if k in b) or None})
    return rows


def paper_plans(p: PaperParams) -> pd.DataFrame:
    """The plan and baselines of each paper model at its GPU's memory, with and without SP (module docstring)."""
    rows = []
    for name, gpu_name, sp in progress(itertools.product(p.models, p.gpus, (False, True)), "planner-paper"):
        problem = make_problem(from_name(name), gpu_name=gpu_name, sp=sp)
        keys = {"model": name, "gpu": gpu_name, "sp": sp, "budget_bytes": problem.budget_bytes,
                "layers_per_gpu": len(problem.layers), "sac_time_limit_s": p.sac_time_limit_s,
                **settings(problem)}
        try:
            plan = solve(problem)
        except InfeasibleError as exc:
            rows.append({**keys, "method": "plan", "feasible": False, "minimum_bytes": exc.minimum_bytes})
            continue
        rows += _rows(plan, baselines(problem, sac_time_limit_s=p.sac_time_limit_s), **keys)
    return with_provenance(rows, "cpu")


def frontier(p: FrontierParams) -> pd.DataFrame:
    """Budget sweep (predicted): per model, ``points`` budgets from the least feasible peak to ``none``'s."""
    rows = []
    for name in p.models:
        problem = make_problem(from_name(name), gpu_name=p.gpu, sp=p.sp)
        for budget in budgets(problem, p.points):
            at = dataclasses.replace(problem, budget_bytes=budget)
            rows += _rows(solve(at), baselines(at, sac_time_limit_s=p.sac_time_limit_s), model=name,
                          budget_bytes=budget, gpu=problem.meta["gpu"], sp=problem.meta["sp"],
                          sac_time_limit_s=p.sac_time_limit_s, **settings(problem))
    return with_provenance(rows, "cpu")


def budgets(problem: Problem, points: int) -> list[int]:
    """``points`` budgets (bytes) evenly spaced from the least feasible peak to the peak of all-none."""
    lo = minimum_budget(problem).peak_bytes
    hi = max(lo, plan_from_policies(problem, ["none"] * len(problem.layers)).peak_bytes)
    return sorted({int(round(x)) for x in np.linspace(lo, hi, points)})


def interior_budgets(problem: Problem, points: int) -> list[int]:
    """``points`` budgets (bytes) evenly spaced strictly inside (least feasible peak, peak of all-none):
    lo + (hi − lo)·k/(points + 1) for k = 1..points, rounded down, duplicates dropped. The two ends are the
    validation's calibration points (``calibrate_torch`` fits the none and full steps), so a budget there
    would test the fit, not a prediction. Empty when the range is narrower than ``points`` + 1 bytes."""
    lo = minimum_budget(problem).peak_bytes
    hi = plan_from_policies(problem, ["none"] * len(problem.layers)).peak_bytes
    return sorted({lo + (hi - lo) * k // (points + 1) for k in range(1, points + 1)} - {lo, hi})


# --- validation on the runtime's tiny models ------------------------------------------------------------------

def calibrate_torch(cfg: ModelConfig, device: str = "cpu", repeats: int = 5, rounds: int = 3, threads: int = 1):
    """(TorchCalibration, reference rows, rounds timed) of the runtime's GPT model on this machine.

    Times: whole-model steps of the all-none, all-selective and all-full plans (``_steps_in_order``); a layer
    under policy X costs T_none/L + (T_X − T_none)/L seconds, so a plan's predicted step is T_none + Σ over
    its layers of (T_X − T_none)/L (the embedding, head and loss ride in T_none). Memory: the measured peaks
    of the none and full steps (bytes) give the two backward workspaces (module docstring). The reference
    rows are ``remat.measure.step.measure`` dicts (their ``base_bytes``: bytes alive before the step)."""

    steps, rounds = _steps_in_order(cfg, device, repeats, rounds, threads)
    L = cfg.layers
    seconds = {p: steps["none"] / L + (steps[p] - steps["none"]) / L for p in RECOMPUTE}
    ref = {p: measure(cfg, p, device, timing=False) for p in ("none", "full")}
    stats = layernorm_stats_itemsize(cfg.dtype, device)
    bare = torch_problem(cfg, 2**62, TorchCalibration(seconds, 0.0, 0, 0, stats), RECOMPUTE)
    head = max(0, ref["none"]["peak_bytes"] - evaluate(bare, [0] * L).peak_bytes)
    with_head = torch_problem(cfg, 2**62, TorchCalibration(seconds, 0.0, 0, head, stats), RECOMPUTE)
    full = [RECOMPUTE.index("full")] * L
    layer_ws = max(0, ref["full"]["peak_bytes"] - evaluate(with_head, full).peak_bytes)
    return TorchCalibration(seconds, 0.0, layer_ws, head, stats), ref, rounds


def _steps_in_order(cfg: ModelConfig, device: str, repeats: int, rounds: int, threads: int, attempts: int = 3):
    """(policy -> median whole-model step seconds, rounds taken) for RECOMPUTE, timed again with twice the rounds
    (up to ``attempts`` times) while the medians are out of the order of the work each step does (none < selective
    < full: recomputation only adds work), i.e. while the noise of a busy machine is larger than the recompute.
    Still out of order after the last attempt: returned as measured (the findings gate the times invalid)."""
    for attempt in range(attempts):
        timed = time_plans(cfg, RECOMPUTE, device, rounds=rounds << attempt, repeats=repeats, warmup=1,
                           threads=threads)
        steps = {spec: t.median_s for spec, t in timed.items()}
        if all(steps[a] < steps[b] for a, b in zip(RECOMPUTE, RECOMPUTE[1:])):
            break
    return steps, rounds << attempt


def _spec(name: str, entry: dict) -> str | None:
    """The runtime's plan spec (remat.policies.parse_plan) of a baseline entry."""
    if name in POLICIES:
        return name
    if name == "sqrt-segments":
        return f"segments:{entry['k']}" if entry["k"] > 1 else "none"   # one segment: nothing checkpointed
    if name == "megatron-uniform":
        return f"uniform:{entry['N']}"
    if name == "megatron-block":
        return f"block:{entry['N']}"
    if name == "torch-sac-milp" and entry.get("policies"):
        return ",".join(entry["policies"])
    return None


def validate(p: ValidateParams) -> pd.DataFrame:
    """Plans and baselines applied to tiny GPT models on ``p.device`` and measured (module docstring).
    Raises UsageError("planner.validate.device") when the device is not available."""

    resolve_device(p.device, field="planner.validate.device")
    rows = []
    for model in progress(p.models, "planner-validate"):
        rows += _validate_model(model.config(), p)
    frame = with_provenance(rows, p.device)
    measured = frame["measured_peak_bytes"]
    frame["peak_rel_error"] = frame["predicted_peak_bytes"] / measured - 1
    frame["measured_within_budget"] = (measured <= frame["budget_bytes"]).where(measured.notna())
    frame["time_rel_error"] = frame["predicted_step_time_s"] / frame["measured_step_time_s"] - 1
    frame["slowdown_rel_error"] = frame["predicted_slowdown"] / frame["measured_slowdown"] - 1
    return frame


def _share_specs(entries: list[tuple[int, str, dict]], layers: int, first: tuple[str, ...] = ("none", "full")) -> None:
    """Give every entry whose spec means the same plan ("none" = "block:0", "full,full,full" = "uniform:1" =
    "full") one spec: one of ``first`` (the calibration steps, so such a plan is marked a reference and
    reuses their measurement), else the first such spec. Each distinct plan is then measured once."""
    seen: dict = {}
    for spec in first:
        plan = parse_plan(spec, layers)
        seen[(plan.policies, plan.groups)] = spec
    for _, _, entry in entries:
        if entry["spec"] is not None:
            plan = parse_plan(entry["spec"], layers)
            entry["spec"] = seen.setdefault((plan.policies, plan.groups), entry["spec"])


def _validate_model(cfg: ModelConfig, p: ValidateParams) -> list[dict]:
    """Rows of one tiny model: calibrate, plan at ``p.points`` budgets, apply and measure every plan."""

    cal, ref, cal_rounds = calibrate_torch(cfg, p.device, p.repeats, p.rounds, p.threads)
    problem = torch_problem(cfg, 2**62, cal)
    entries = []
    for budget in interior_budgets(problem, p.points):
        at = dataclasses.replace(problem, budget_bytes=budget)
        plan = solve(at)
        entries.append((budget, "plan", {"peak_bytes": plan.peak_bytes, "step_time_s": plan.step_time_s,
                                         "feasible": plan.feasible, "spec": ",".join(plan.policies)}))
        entries += [(budget, name, {**entry, "spec": _spec(name, entry)}) for name, entry in baselines(at).items()]
    _share_specs(entries, cfg.layers)
    runnable = list(dict.fromkeys(e["spec"] for _, _, e in entries if e["feasible"] and e["spec"] is not None))
    timed = [e["spec"] for _, method, e in entries
             if e["spec"] in runnable and (p.time_baselines or method == "plan")]
    timings = time_plans(cfg, ["none"] + timed, p.device, rounds=p.rounds, repeats=p.repeats, warmup=1,
                         threads=p.threads)
    peaks = {spec: ref[spec] if spec in ref else measure(cfg, spec, p.device, timing=False) for spec in runnable}
    predicted_none = cfg.layers * cal.layer_seconds["none"]
    keys = {"model": cfg.name, "layers": cfg.layers, "seq": cfg.seq, "micro_batch": cfg.micro_batch,
            "hidden": cfg.hidden, "heads": cfg.heads, "dtype": cfg.dtype,
            "layer_workspace_bytes": cal.layer_workspace_bytes, "head_workspace_bytes": cal.head_workspace_bytes,
            "predicted_base_bytes": base_bytes(cfg, problem, cal.stats_itemsize),
            "measured_base_bytes": ref["none"]["base_bytes"],
            **{f"layer_seconds_{policy}": v for policy, v in cal.layer_seconds.items()},
            "points": p.points, "repeats": p.repeats, "rounds": p.rounds, "calibration_rounds": cal_rounds,
            "threads": p.threads,
            "time_baselines": p.time_baselines}
    rows = []
    for budget, method, entry in entries:
        spec, predicted = entry["spec"], entry["step_time_s"]
        row = {**keys, "budget_bytes": budget, "method": method, "spec": spec,
               "predicted_peak_bytes": entry["peak_bytes"], "predicted_step_time_s": predicted,
               "predicted_slowdown": None if predicted is None else predicted / predicted_none,
               "feasible": entry["feasible"], "reference": spec in ref,
               "measured_peak_bytes": None, "peak_error_bytes": None, "measured_step_time_s": None,
               "measured_step_time_iqr_s": None, "measured_slowdown": None, "peak_method": None, "timing_method": None}
        if spec in peaks:
            row.update(measured_peak_bytes=peaks[spec]["peak_bytes"], peak_method=peaks[spec]["peak_method"],
                       peak_error_bytes=entry["peak_bytes"] - peaks[spec]["peak_bytes"])
        if spec in timings:
            t = timings[spec]
            row.update(measured_step_time_s=t.median_s, measured_step_time_iqr_s=t.iqr_s, timing_method=t.method,
                       measured_slowdown=t.median_s / timings["none"].median_s)
        rows.append(row)
    return rows


def base_bytes(cfg: ModelConfig, problem: Problem, stats_itemsize: int) -> int:
    """Bytes the torch problem holds before a step's forward starts (int): its fixed parts (parameters,
    causal-mask buffers, inputs, the embedding's saved tensors: ``costs.torch_parts``) less the embedding's
    saved tensors (``torch_gpt.outside_terms`` "embed"), which the forward makes. What
    ``remat.measure.step.measure`` reports as ``base_bytes``."""
    embed = sum(torch_gpt.outside_terms(torch_gpt.sizes_of(cfg, stats_itemsize))["embed"].values())
    return sum(problem.fixed_parts.values()) - embed
