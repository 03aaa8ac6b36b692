"""One gloo rank of the planner-pipeline experiment (``remat.experiments.pipeline_ranks``): its stages of the
runtime model with its own plan, one step of a torch.distributed.pipelining schedule under torch's MemTracker,
its gradients against the unsplit model's. Runs in a process of its own (``worker``)."""

from __future__ import annotations

import copy
import json
import time
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn

from remat.measure.peak import PeakMemory
from remat.models.presets import ModelConfig
from remat.models.transformer import build_model, lm_loss
from remat.planner.costs import micro_batches
from remat.planner.layer_costs import runtime_mode
from remat.planner.ranks import stages_per_rank
from remat.planner.schedules import check_name, timeline
from remat.policies import apply_plan


class Stage(nn.Module):
    """Stage ``index`` of ``n`` of a runtime Transformer: its ``layers`` (a ModuleList, as remat.policies applies
    plans to), the embedding before them on stage 0 (token ids [b, s], batch first as the schedule splits them),
    the final norm and head after them on the last stage (logits [s, b, v])."""

    def __init__(self, model: nn.Module, index: int, n: int, per_stage: int):
        super().__init__()
        self.embed = model.embed if index == 0 else None
        self.layers = nn.ModuleList(model.layers[index * per_stage:(index + 1) * per_stage])
        self.norm, self.head = (model.norm, model.head) if index == n - 1 else (None, None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # a received activation is a leaf; torch's non-reentrant checkpoint refuses a leaf input under the
        # autograd.grad(inputs=...) the schedule's backward runs, so the layers see a view of it (no bytes)
        x = self.embed(x.t()) if self.embed is not None else x.view_as(x)
        for layer in self.layers:
            x = layer(x)
        return self.head(self.norm(x)) if self.head is not None else x


def _loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return lm_loss(logits, targets.t())


def _batch(cfg: ModelConfig, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids and targets [n·b, s] (seeded: every rank draws the same)."""
    gen = torch.Generator().manual_seed(1)
    shape = (n * cfg.micro_batch, cfg.seq)
    return torch.randint(0, cfg.vocab, shape, generator=gen), torch.randint(0, cfg.vocab, shape, generator=gen)


def _reference_grads(model: nn.Module, tokens, targets, n: int) -> dict[str, torch.Tensor]:
    """Gradients of the unsplit model: the mean of the n micro-batches' losses (the schedule's scale_grads)."""
    model = copy.deepcopy(model)
    for x, y in zip(tokens.chunk(n), targets.chunk(n)):
        (lm_loss(model(x.t()), y.t()) / n).backward()
    return {name: p.grad for name, p in model.named_parameters()}


def run(rank: int, cfg: ModelConfig, schedule: str, policies: list[str]) -> dict:
    """This rank's measured peak, step wall seconds and gradient error (module docstring)."""
    from torch.distributed.pipelining import PipelineStage
    from torch.distributed.pipelining.schedules import PipelineScheduleSingle, get_schedule_class

    name, n = check_name(schedule), micro_batches(cfg)
    k = stages_per_rank(name, cfg)
    stages = timeline(name, cfg.pp, n, k).stages[rank]
    per_stage, total = cfg.layers // (cfg.pp * k), cfg.pp * k
    torch.manual_seed(0)
    model = build_model(cfg)
    tokens, targets = _batch(cfg, n)
    reference = _reference_grads(model, tokens, targets, n)
    names = {id(p): name for name, p in model.named_parameters()}
    mods = [Stage(model, s, total, per_stage) for s in stages]
    for i, mod in enumerate(mods):       # the planner's policy as this layer runs it (selective: op-level for Llama)
        apply_plan(mod, [runtime_mode(cfg, q) for q in policies[i * per_stage:(i + 1) * per_stage]])
    pipe = [PipelineStage(mod, s, total, torch.device("cpu")) for mod, s in zip(mods, stages)]
    cls = get_schedule_class(name)
    sched = cls(pipe[0], n, loss_fn=_loss) if issubclass(cls, PipelineScheduleSingle) else cls(pipe, n, loss_fn=_loss)
    args = (tokens,) if 0 in stages else ()
    start = time.perf_counter()
    with PeakMemory("cpu", *mods) as mem:
        sched.step(*args, target=targets if total - 1 in stages else None, return_outputs=False)
    wall = time.perf_counter() - start
    errors = [((p.grad - reference[names[id(p)]]).abs().max() / reference[names[id(p)]].abs().max().clamp_min(1e-30))
              .item() for mod in mods for p in mod.parameters()]
    return {"measured_peak_bytes": int(mem.peak_bytes), "peak_method": mem.method, "step_wall_s": wall,
            "grads_max_rel_error": max(errors), "grads_missing": sum(p.grad is None for m in mods
                                                                     for p in m.parameters())}


def worker(rank: int, cfg: ModelConfig, schedule: str, plans: list[list[str]], port: int, outdir: str,
           timeout_s: int) -> None:
    """Process entry: join the gloo group on 127.0.0.1, run this rank, write rank{r}.json in ``outdir``."""
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=cfg.pp,
                            timeout=timedelta(seconds=timeout_s))
    try:
        result = run(rank, cfg, schedule, plans[rank])
        with open(f"{outdir}/rank{rank}.json", "w") as f:
            json.dump(result, f)
    finally:
        dist.destroy_process_group()
