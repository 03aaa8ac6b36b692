"""planner-pipeline: per-rank plans applied on real ranks running torch.distributed.pipelining, measured.

For each pipeline size p and schedule (``PipelineParams``), the runtime's small Llama model (``remat.models.
transformer``, float32 on the CPU) is planned per rank (``remat.planner.ranks.plan_pipeline``: model state =
weights + gradients, no optimizer step, no reserve; budget halfway between the least and the largest peak of the
most loaded rank) and run for one training step on p gloo processes (127.0.0.1, bounded by ``timeout_s``): each
rank builds the whole seeded model, keeps its stages (``Stage``: the embedding on stage 0, the final norm and head
on the last), applies its own plan to their layers (``remat.policies.apply_plan``) and runs the torch schedule
over N micro-batches, its peak bytes measured by torch's MemTracker (``remat.measure.peak.PeakMemory``, the
stages' parameters and buffers tracked from the start). The gradients of every parameter are compared with the
unsplit model's (one process, the same N micro-batches, mean of their losses). One row per (schedule, pp, rank):
predicted and measured peak, their difference, the rank's plan, the step's wall seconds, the gradient check.

planner-schedules (``schedule_gains``, predicted only): per paper model and schedule, the per-rank plans beside the
one plan every rank shares at the GPU's full memory, each step timed on the schedule's actions
(``remat.planner.ranks``); a setting torch or the planner refuses is a row with its reason.
"""

from __future__ import annotations

import dataclasses
import json
import socket
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from remat.errors import InfeasibleError, UsageError
from remat.experiments.params import Count
from remat.measure.provenance import with_provenance
from remat.models.presets import ModelConfig, from_name
from remat.planner.make import make_settings
from remat.planner.ranks import default_interleave, plan_pipeline
from remat.planner.schedules import NAMES
from remat.timemodel.gpus import check_presets

PRELOAD = ["torch", "torch.distributed", "torch.distributed.pipelining", "torch.utils.checkpoint",
           "remat.policies", "remat.models.transformer", "remat.measure.peak"]


@dataclass
class PipelineParams:
    """planner.pipeline: per-rank plans run on gloo ranks."""

    sizes: list[int] = field(default_factory=lambda: [2, 4])
    """Pipeline sizes p (processes on this machine)."""
    schedules: list[str] = field(default_factory=lambda: ["GPipe", "1F1B", "Interleaved1F1B", "ZBVZeroBubble"])
    """torch.distributed.pipelining schedules by name."""
    layers: Count = 8
    seq: Count = 128
    hidden: Count = 128
    micro_batches: Count = 8
    """N micro-batches per step (b = 2 each)."""
    timeout_s: Count = 120
    """Per run (all ranks), seconds."""


@dataclass
class SchedulesParams:
    """planner.schedules: per-rank plans beside one shared plan, every schedule, paper models (predicted)."""

    models: list[str] = field(default_factory=lambda: ["gpt3-175b"])
    """Presets (their t, p, m, b and global batch: the paper's Table 3 layout)."""
    gpu: str = "a100-80gb"
    """GPU preset (remat.timemodel.gpus.GPUS): the budget is its memory."""
    sp: bool = True
    schedules: list[str] = field(default_factory=lambda: list(NAMES))

    def __post_init__(self):
        check_presets("planner.schedules.gpu", [self.gpu])


def schedule_gains(p: SchedulesParams) -> pd.DataFrame:
    """One row per (model, schedule): steps and gain of the per-rank plans over the shared one (module docstring)."""
    rows = []
    for name in p.models:
        for schedule in p.schedules:
            cfg = from_name(name)
            cfg = dataclasses.replace(cfg, interleave=default_interleave(schedule, cfg.interleave))
            keys = {"model": name, "schedule": schedule, "gpu": p.gpu, "sp": p.sp, "pp": cfg.pp,
                    "stages_per_rank": cfg.interleave, "layers": cfg.layers}
            try:
                plan = plan_pipeline(cfg, make_settings(cfg, p.gpu, sp=p.sp), schedule)
            except (UsageError, InfeasibleError) as exc:
                rows.append({**keys, "feasible": False, "note": str(exc)})
                continue
            rows.append({**keys, "feasible": True, "note": None, "micro_batches": plan.micro_batches,
                         "budget_bytes": plan.budget_bytes, "step_time_s": plan.step_time_s,
                         "uniform_step_time_s": plan.uniform_step_time_s,
                         "peak_bytes": max(r.peak_bytes for r in plan.ranks),
                         "ranks_own_plan": sum(r.policies != u.policies for r, u in zip(plan.ranks, plan.uniform)),
                         "plans": " | ".join(",".join(r.policies) for r in plan.ranks)})
    return with_provenance(rows, "cpu")


def config(p: PipelineParams, pp: int, schedule: str) -> ModelConfig:
    """The small Llama of the experiment for ``pp`` ranks under ``schedule`` (stages per rank as it needs)."""
    m = default_interleave(schedule, 2)
    return dataclasses.replace(from_name("llama-tiny"), layers=p.layers, seq=p.seq, hidden=p.hidden,
                               ffn_hidden=p.hidden * 11 // 4, heads=4, kv_heads=2, vocab=512, max_positions=p.seq,
                               micro_batch=2, pp=pp, interleave=m, global_batch=2 * p.micro_batches)


def settings(cfg: ModelConfig, budget: int | None = None):
    """Weights and gradients in float32, no optimizer state, no reserve (what one step on the CPU holds)."""
    return make_settings(cfg, "a100-80gb", memory=budget, reserve=0, weight_bytes=4, grad_bytes=4,
                         optimizer_bytes=0, policies=("none", "selective", "full"))


def midway_plan(cfg: ModelConfig, schedule: str):
    """The per-rank plans at a budget halfway between the most loaded rank's least peak and its all-none peak."""
    wide = settings(cfg, 2**50)
    peaks = [max(r.peak_bytes for r in plan_pipeline(cfg, dataclasses.replace(wide, policies=(pol,)),
                                                       schedule).ranks) for pol in ("full", "none")]
    return plan_pipeline(cfg, settings(cfg, (peaks[0] + peaks[1]) // 2), schedule)


def pipeline(p: PipelineParams) -> pd.DataFrame:
    """Rows of every (schedule, pp, rank) (module docstring)."""
    rows = []
    for pp in p.sizes:
        for schedule in p.schedules:
            cfg = config(p, pp, schedule)
            plan = midway_plan(cfg, schedule)
            measured = run_ranks(cfg, schedule, [list(r.policies) for r in plan.ranks], p.timeout_s)
            for r, m in zip(plan.ranks, measured):
                rows.append({"schedule": schedule, "pp": pp, "rank": r.rank, "stages": ",".join(map(str, r.stages)),
                             "micro_batches": plan.micro_batches, "layers": cfg.layers, "seq": cfg.seq,
                             "hidden": cfg.hidden, "budget_bytes": plan.budget_bytes, "plan": ",".join(r.policies),
                             "predicted_peak_bytes": r.peak_bytes, **m})
    frame = with_provenance(rows, "cpu")
    frame["peak_error_bytes"] = frame["predicted_peak_bytes"] - frame["measured_peak_bytes"]
    frame["peak_rel_error"] = frame["predicted_peak_bytes"] / frame["measured_peak_bytes"] - 1
    return frame


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(cfg: ModelConfig, schedule: str, plans: list[list[str]], timeout_s: int) -> list[dict]:
    """One step of ``schedule`` on cfg.pp gloo processes, rank r applying ``plans[r]``: per rank {measured_peak_bytes,
    peak_method, step_wall_s, grads_max_rel_error}."""
    import torch.multiprocessing as mp

    from remat.experiments import pipeline_rank

    with tempfile.TemporaryDirectory() as tmp:
        ctx = mp.get_context("forkserver")
        ctx.set_forkserver_preload(PRELOAD)
        mp.start_processes(pipeline_rank.worker, args=(cfg, schedule, plans, _free_port(), tmp, timeout_s),
                           nprocs=cfg.pp, join=True, start_method="forkserver")
        return [json.loads((Path(tmp) / f"rank{r}.json").read_text()) for r in range(cfg.pp)]


