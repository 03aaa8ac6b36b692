"""planner-tensor: tensor plans (remat.auto ``granularity="tensor"``: per block, which op outputs the selective
checkpoint keeps) beside per-block plans, applied to small eager models on ``device`` and measured.

Per model (``TensorModel``: a pre-norm transformer, a transformers Llama, a residual conv–GroupNorm net), one
training step (loss = the output's sum; no optimizer, so ``optimizer_state_bytes=0``): ``points`` budgets
evenly spaced from the predicted peak of every block full to that of no recompute; at each, the tensor plan
and the per-block plan (choices none / selective / full / offload), each applied to a copy of the model and run
once: peak bytes by remat.measure.peak.PeakMemory (torch's MemTracker; on a CPU the offloaded bytes' host copies
are made out of its sight, remat.offload_pool.host_side, so it measures the device side), gradients compared bit
for bit with the unmodified model's. One row per (model, budget, granularity): predicted and measured peak,
their difference in bytes, the predicted step time on the GPU preset (roofline: nothing is timed on this machine
except ``plan_s``: for the first tensor plan the wall seconds auto.plan took, measure and solve together; for
every other row the re-solve's, the per-block measurement being made for the bounds), the blocks that keep an op set,
the bytes the plan offloads (op outputs and whole blocks; ``max_block_offload_bytes`` the most one block does)
and the bytes the step moved (``moved_bytes``, remat.policies.apply.OffloadStats).
A Llama needs transformers (the hf extra); without it its rows are left out and the table says so
(``skipped``). Run: ``remat experiment planner-tensor --params '{"points": 4}' --out x.csv``.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field, replace
from typing import Annotated, Literal

import pandas as pd
import torch

from remat import auto
from remat.auto.blocks import find_blocks
from remat.auto.planning import block_rows, solve_blocks
from remat.device import resolve_device
from remat.experiments.params import Count, Ge
from remat.experiments.progress import progress
from remat.measure.peak import PeakMemory
from remat.measure.provenance import with_provenance
from remat.models.toys import BlockNet, ConvBlock, TransformerBlock
from remat.planner.problem import POLICIES, plan_from_policies
from remat.timemodel.gpus import check_presets


@dataclass(frozen=True)
class TensorModel:
    """One model of planner.tensor."""

    kind: Literal["transformer", "llama", "conv"] = "transformer"
    """transformer: remat.models.toys.TransformerBlock (4 heads); llama: transformers' LlamaForCausalLM (4 heads,
    MLP 2.6875·width, vocabulary 1024, no KV cache); conv: remat.models.toys.ConvBlock (8 groups) with a linear
    head."""
    blocks: Count = 12
    """Blocks (layers)."""
    width: Count = 256
    """Hidden size (transformer, llama) or channels (conv)."""
    seq: Count = 256
    """Sequence length (transformer, llama) or image side (conv)."""
    batch: Count = 4
    """Micro-batch size."""

    def __str__(self) -> str:
        return f"{self.kind} ({self.blocks} blocks, width {self.width}, s {self.seq}, b {self.batch})"


@dataclass(frozen=True)
class TensorParams:
    """planner.tensor: tensor plans against per-block plans, applied and measured."""

    models: list[TensorModel] = field(default_factory=lambda: [
        TensorModel("transformer", 6, 128, 128, 2), TensorModel("llama", 4, 128, 128, 2),
        TensorModel("conv", 4, 32, 32, 4)])
    """The models measured: each kind at a size whose applied steps take about a second on a 2-core CPU (the three
    kinds of block, not their size, are what the claims need; planner-compile measures larger ones)."""
    points: Annotated[int, Ge(2)] = 6
    """Budgets per model, from the every-block-full peak to the no-recompute peak (both included)."""
    threads: Count = 1
    """torch intra-op threads on a CPU."""
    gpu: str = "h100-80gb"
    """The GPU preset whose rates price the step time (remat.timemodel.gpus)."""
    device: Literal["cpu", "cuda"] = "cpu"
    """Where the models run (the rule passes config.device)."""

    def __post_init__(self):
        check_presets("planner.tensor.gpu", [self.gpu])


def build(spec: TensorModel, device: str) -> tuple | None:
    """(model, inputs, loss_fn) of ``spec`` on ``device`` (seeded), or None for a llama without transformers."""
    torch.manual_seed(0)
    if spec.kind == "transformer":
        model = BlockNet(lambda: TransformerBlock(spec.width, 4), spec.blocks, spec.width)
        inputs, loss = (torch.randn(spec.batch, spec.seq, spec.width),), lambda o: o
    elif spec.kind == "conv":
        model = BlockNet(lambda: ConvBlock(spec.width, 8), spec.blocks, spec.width)
        inputs, loss = (torch.randn(spec.batch, spec.width, spec.seq, spec.seq),), lambda o: o
    else:
        try:
            from transformers import LlamaConfig, LlamaForCausalLM    # optional (the hf extra): heavy
        except ImportError:
            return None
        config = LlamaConfig(hidden_size=spec.width, intermediate_size=int(spec.width * 2.6875),
                             num_hidden_layers=spec.blocks, num_attention_heads=4, num_key_value_heads=4,
                             vocab_size=1024, max_position_embeddings=max(512, spec.seq),
                             use_cache=False)    # it trains: no KV cache (as remat.auto.apply runs it)
        model, loss = LlamaForCausalLM(config), lambda o: o.logits.float().sum()
        inputs = (torch.randint(0, 1024, (spec.batch, spec.seq)),)
    return model.to(device), tuple(x.to(device) for x in inputs), loss


def tensor_plans(p: TensorParams) -> pd.DataFrame:
    """Rows of every model (module docstring). Raises UsageError("planner.tensor.device") when the device is
    not available."""
    device = resolve_device(p.device, field="planner.tensor.device")
    if device.type == "cpu":
        torch.set_num_threads(p.threads)
    rows = []
    for spec in progress(p.models, "planner-tensor"):
        built = build(spec, str(device))
        rows += [{**_describe(spec), "skipped": "needs transformers (pip install -e '.[hf]')"}] if built is None \
            else _model_rows(spec, *built, p)
    return with_provenance(rows, p.device)


def _describe(spec: TensorModel) -> dict:
    return {"model": str(spec), "kind": spec.kind, "blocks": spec.blocks, "width": spec.width, "seq": spec.seq,
            "batch": spec.batch}


def _model_rows(spec, model, inputs, loss_fn, p: TensorParams) -> list[dict]:
    plans = _Plans(model, inputs, loss_fn, p.gpu)
    reference = _step(copy.deepcopy(model), inputs, loss_fn)[1]
    low, high = plans.bounds()
    rows = []
    for k in range(p.points):
        budget = int(low + (high - low) * k / (p.points - 1))
        for granularity in ("tensor", "block"):
            result, seconds = plans.at(budget, granularity)
            applied = copy.deepcopy(model)
            auto.apply(applied, result)
            peak, grads = _step(applied, inputs, loss_fn)
            offloaded = [row["offload_bytes"] for row in block_rows(result)]
            rows.append({**_describe(spec), "point": k, "budget_bytes": budget, "granularity": granularity,
                         "predicted_peak_bytes": result.plan.peak_bytes, "measured_peak_bytes": peak,
                         "peak_error_bytes": peak - result.plan.peak_bytes,
                         "predicted_step_time_s": result.plan.step_time_s, "plan_s": seconds,
                         "kept_blocks": sum(k is not None for k in result.kept_sets),
                         "offloaded_bytes": sum(offloaded), "max_block_offload_bytes": max(offloaded),
                         "moved_bytes": applied.remat_offload.bytes,
                         **{f"n_{c}": result.policies.count(c) for c in POLICIES},
                         "grads_bitwise": all(torch.equal(a, b) for a, b in zip(reference, grads)),
                         "full_peak_bytes": low, "none_peak_bytes": high, "gpu": p.gpu, "skipped": None})
    return rows


class _Plans:
    """auto.plan of one model at several budgets: one call per granularity measures the model (under fake tensors:
    the same bytes and seconds at every budget) and solves; each further budget re-solves that measurement
    (auto.planning.solve_blocks, as auto.plan ends), which is what auto.plan at that budget returns."""

    def __init__(self, model, inputs, loss_fn, gpu: str):
        self.model, self.inputs, self.loss_fn, self.gpu = model, inputs, loss_fn, gpu
        self.first: dict = {}

    def at(self, budget: int, granularity: str):
        """(AutoPlan at ``budget``, wall seconds: auto.plan's, measure and solve, on the first call of a granularity;
        the re-solve's after)."""
        start = time.perf_counter()
        if granularity not in self.first:
            self.first[granularity] = auto.plan(self.model, self.inputs, budget=budget, gpu=self.gpu,
                                                loss_fn=self.loss_fn, optimizer_state_bytes=0, choices=POLICIES,
                                                granularity=granularity)
            return self.first[granularity], time.perf_counter() - start
        first = self.first[granularity]
        result = solve_blocks(replace(first.problem, budget_bytes=budget), find_blocks(self.model), first.costs)
        return result, time.perf_counter() - start

    def bounds(self) -> tuple[int, int]:
        """Predicted peaks of every block full and of no recompute (bytes), from the per-block measurement."""
        result, _ = self.at(2**62, "block")
        blocks = len(result.problem.layers)
        return tuple(plan_from_policies(result.problem, [c] * blocks).peak_bytes for c in ("full", "none"))


def _step(model, inputs, loss_fn) -> tuple[int, list]:
    """(peak bytes, gradients) of one training step of ``model``."""
    model.zero_grad(set_to_none=True)
    device = next(model.parameters()).device
    with PeakMemory(device, model, *inputs) as mem:
        loss_fn(model(*inputs)).backward()
    grads = [q.grad.clone() for q in model.parameters() if q.grad is not None]
    model.zero_grad(set_to_none=True)
    return mem.peak_bytes, grads
