"""planner-compile: torch.compile's activation_memory_budget beside remat's tensor plans, applied and measured on
``device``: peak and step time per point.

Per model (remat.experiments.tensor_plans.build, the planner-tensor kinds at larger sizes; the Llama without a KV
cache, as it trains), four kinds of point (``mode``), each in a fresh process (compiled code and the allocator's state
do not carry over):
* ``compile``: torch.compile (inductor) with torch._functorch.config.activation_memory_budget = b, for each b of
  ``budgets`` (1.0: save what the min-cut partitioner would; 0.0: recompute what it can);
* ``eager``: the model as it is, in eager (no plan): the step fusion alone shortens;
* ``eager tensor``: remat.auto's tensor plan (granularity "tensor", choices none / selective / full) planned with
  each compile point's measured peak as its budget — the comparison at equal peak — and at the every-block-full
  and no-recompute peaks (``setting`` "full" / "none"); applied in eager;
* ``compiled tensor``: the tensor plan for a compiled model (``compiled=True``: priced at fused rates) at the same
  budgets, applied, then torch.compile (remat's checkpoint hands torch the plan's per-op policy).
Each point: one step to warm up (it compiles: ``first_step_s``), one step whose peak is measured (on a CPU from
torch.profiler's memory timeline, which sees compiled code and allocations inside kernels; on a GPU torch.cuda's
max_memory_allocated), then ``repeats`` timed steps (median). Points run in ``rounds`` interleaved rounds (every
point once, then again: a process's step time varies by several percent with where its memory lands); a point's
``step_s`` is the median of its rounds' medians (each in ``round_ms``), its ``peak_bytes`` the largest, its
``timing_other_cores`` the most cores other processes used while a round's steps were timed (the run's own load
columns count the points' processes as others). A point
that fails has its ``error`` (the last line of its stderr). torch at ``threads`` threads on a CPU. Step times are
this device's: on a CPU, inductor's kernels fuse pointwise ops that eager runs one by one. Run it alone.

Run: ``remat experiment planner-compile --params '{"budgets": [1.0, 0.5]}' --out x.csv`` (about 50 minutes for
the three default models at two rounds on a 2-core CPU).
"""

from __future__ import annotations

import copy
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Annotated, Literal

import pandas as pd
import torch
import torch._functorch.config as functorch_config
from torch.profiler import ProfilerActivity, profile
from torch.profiler._memory_profiler import Action

from remat import auto
from remat.device import resolve_device
from remat.errors import UsageError
from remat.experiments.params import Count, Ge
from remat.experiments.progress import progress
from remat.experiments.tensor_plans import TensorModel, build
from remat.measure.provenance import load_since, snapshot, with_provenance
from remat.timemodel.gpus import check_presets

FULL, NONE = "full", "none"
"""A tensor point's setting besides a budget in bytes: the predicted peak of every block full (the least a plan
reaches) or of no recompute (the most a plan needs)."""
MODES = ("compile", "eager", "eager tensor", "compiled tensor")


@dataclass(frozen=True)
class CompileParams:
    """planner.compile: torch.compile's memory budget beside remat's tensor plans, applied and measured."""

    models: list[TensorModel] = field(default_factory=lambda: [
        TensorModel("transformer", 12, 256, 256, 4), TensorModel("llama", 8, 256, 256, 4),
        TensorModel("conv", 8, 64, 64, 8)])
    """The models measured (the planner-tensor kinds, larger: a compiled step's time must dwarf its noise)."""
    budgets: list[float] = field(default_factory=lambda: [1.0, 0.8, 0.6, 0.4, 0.2, 0.0])
    """torch.compile activation_memory_budget values, each in [0, 1]."""
    rounds: Count = 2
    """Interleaved rounds (every point once per round)."""
    repeats: Annotated[int, Ge(3)] = 5
    """Timed steps per point and round (median)."""
    threads: Count = 1
    """torch intra-op threads on a CPU."""
    gpu: str = "h100-80gb"
    """The GPU preset whose rates price the plans (remat.timemodel.gpus)."""
    device: Literal["cpu", "cuda"] = "cpu"
    """Where the models run (the rule passes config.device)."""

    def __post_init__(self):
        check_presets("planner.compile.gpu", [self.gpu])
        if any(not 0 <= b <= 1 for b in self.budgets) or not self.budgets:
            raise UsageError("planner.compile.budgets", f"one or more fractions in [0, 1], got {self.budgets}")


def compile_budget(p: CompileParams) -> pd.DataFrame:
    """Rows of every model and point (module docstring). Raises UsageError("planner.compile.device") when the
    device is not available."""
    resolve_device(p.device, field="planner.compile.device")
    rows = []
    for spec in progress(p.models, "planner-compile"):
        rows += _model_rows(spec, p)
    return with_provenance(rows, p.device)


def _model_rows(spec: TensorModel, p: CompileParams) -> list[dict]:
    """Every point of ``spec``, each run once per round, rounds interleaved; merged (``_merged``)."""
    points = [("compile", b) for b in p.budgets]
    runs = [[_fresh(spec, mode, value, p) for mode, value in points]]
    budgets = [FULL, *sorted({int(r["peak_bytes"]) for r in runs[0] if "peak_bytes" in r}), NONE]
    tensor = [(mode, b) for mode in ("eager tensor", "compiled tensor") for b in budgets] + [("eager", NONE)]
    runs[0] += [_fresh(spec, mode, value, p) for mode, value in tensor]
    points += tensor
    for _ in range(p.rounds - 1):
        runs.append([_fresh(spec, mode, value, p) for mode, value in points])
    described = {"model": str(spec), "kind": spec.kind, "blocks": spec.blocks, "width": spec.width,
                 "seq": spec.seq, "batch": spec.batch, "gpu": p.gpu, "rounds": p.rounds, "repeats": p.repeats}
    return [{**described, **_merged(list(rs))} for rs in zip(*runs)]


def _fresh(spec: TensorModel, mode: str, value, p: CompileParams) -> dict:
    """``point`` in a fresh process; on failure a row with its ``error``."""
    got = in_fresh_process("remat.experiments.compile_budget", {"spec": asdict(spec), "mode": mode, "value": value,
                                                                 "p": {k: v for k, v in asdict(p).items()
                                                                       if k != "models"}})
    return {"mode": mode, "setting": value if isinstance(value, str) else "", **_budget_of(mode, value), **got}


def in_fresh_process(module: str, arg: dict) -> dict:
    """``python -m module <arg as JSON>`` in a fresh process: the JSON object on its stdout's last line, or
    {"error": its stderr's last line} when it fails."""
    proc = subprocess.run([sys.executable, "-m", module, json.dumps(arg)], capture_output=True, text=True,
                          env={**os.environ, "PYTHONWARNINGS": "ignore"})
    if proc.returncode:
        return {"error": (proc.stderr.strip().splitlines() or [f"exit code {proc.returncode}"])[-1]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _budget_of(mode: str, value) -> dict:
    """A point's knob: compile's budget fraction, or a tensor plan's budget in bytes (none for full / none)."""
    if mode == "compile":
        return {"compile_budget": float(value)}
    return {"budget_bytes": int(value)} if not isinstance(value, str) else {}


def _merged(runs: list[dict]) -> dict:
    """One point over its rounds: the median step time of the rounds' medians, the largest peak, the first
    failure (module docstring)."""
    failed = [r for r in runs if "error" in r]
    if failed:
        return failed[0]
    out = {**runs[0], "step_s": statistics.median(r["step_s"] for r in runs),
           "peak_bytes": max(r["peak_bytes"] for r in runs), "error": None,
           "timing_other_cores": max(r["timing_other_cores"] for r in runs)}
    out["round_ms"] = " ".join(f"{r['step_s'] * 1e3:.1f}" for r in runs)
    return out


def point(spec: TensorModel, mode: str, value, p: dict) -> dict:
    """One point (module docstring), in this process: peak_bytes, step_s, first_step_s and, for a plan,
    predicted_peak_bytes, budget_bytes and kept (blocks keeping an op set)."""
    device = str(resolve_device(p["device"], field="planner.compile.device"))
    torch.set_num_threads(p["threads"])
    model, inputs, loss_fn = build(spec, device)
    step, out = ready(model, inputs, loss_fn, mode, value, p)
    out["peak_bytes"] = peak_of(step, device)
    start = snapshot()
    times = [timed(step, device) for _ in range(p["repeats"])]
    return {**out, "step_s": statistics.median(times), **load_since(start).columns("timing_")}


def ready(model, inputs, loss_fn, mode: str, value, p: dict) -> tuple:
    """(step, info): one training step of ``mode`` at ``value`` (module docstring) on a copy of ``model``, run once
    (it compiles: info["first_step_s"]); for a plan info also has budget_bytes, predicted_peak_bytes and kept. A
    compiled model is compiled through its own code object (``_compiled``), so two in one process never share
    dynamo's cache: compile's budget is read when it compiles, and a shared entry would run one budget's graph
    for the other."""
    run, out = copy.deepcopy(model), {}
    if mode not in ("compile", "eager"):
        plan = lambda budget, **kw: auto.plan(model, inputs, budget=budget, loss_fn=loss_fn, optimizer_state_bytes=0,
                                              gpu=p["gpu"], compiled=mode == "compiled tensor", **kw)
        budget = plan(2**62, choices=(value,)).plan.peak_bytes if isinstance(value, str) else int(value)
        result = plan(budget, choices=("none", "selective", "full"), granularity="tensor")
        auto.apply(run, result)
        out.update(budget_bytes=budget, predicted_peak_bytes=result.plan.peak_bytes,
                   kept=sum(k is not None for k in result.kept_sets))
    call = _compiled(run) if mode in ("compile", "compiled tensor") else run

    def step():
        loss_fn(call(*inputs)).backward()
        for q in run.parameters():
            q.grad = None
    budget = float(value) if mode == "compile" else functorch_config.activation_memory_budget
    start = time.perf_counter()
    with functorch_config.patch(activation_memory_budget=budget):
        step()
    out["first_step_s"] = time.perf_counter() - start
    return step, out


def _compiled(model):
    """torch.compile of a function calling ``model`` whose code object is its own: dynamo keeps its cache on the
    code object, and every instance of a module class shares one forward code."""
    def call(*args):
        return model(*args)
    call.__code__ = call.__code__.replace(co_name=f"compiled_{id(model):x}")
    return torch.compile(call)


def timed(step, device: str) -> float:
    """Seconds of one ``step()`` (synchronised on a GPU)."""
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    start = time.perf_counter()
    step()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return time.perf_counter() - start


def peak_of(step, device: str) -> int:
    """The most bytes alive during ``step()`` (tensors existing before it included): torch.cuda's allocator peak
    on a GPU, else torch.profiler's memory timeline."""
    if device.startswith("cuda"):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        step()
        torch.cuda.synchronize()
        return int(torch.cuda.max_memory_allocated())
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=True, with_stack=True) as prof:
        step()
    live = peak = 0
    for _, action, _, nbytes in prof._memory_profile().timeline:
        if action in (Action.PREEXISTING, Action.CREATE):
            live += nbytes
        elif action == Action.DESTROY:
            live -= nbytes
        peak = max(peak, live)
    return peak


if __name__ == "__main__":      # one point in this fresh process (``_fresh``): its row as JSON on the last line
    given = json.loads(sys.argv[1])
    print(json.dumps(point(TensorModel(**given["spec"]), given["mode"], given["value"], given["p"])))
