"""Planning details of the recent work: a ``_to_copy`` is never a kept-set candidate (remat.auto.tensors), a layer's
backward workspace is measured from the start of its backward (a transient of the forward is not in it), the
per-rank pipeline plans stand unless the uniform plan's step is strictly shorter, and measuring a model whose ops need
values on a real copy leaves the caller's model as it was, and a tensor plan made under autocast and trained without
it says so."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from torch import nn

from remat import auto
from remat.auto.tensors import block_ops
from remat.errors import RecomputeError
from remat.models.presets import from_name
from remat.planner import measured, ranks
from remat.planner.make import make_settings
from remat.planner.ranks import evaluate, plan_pipeline, setup
from remat.timemodel.gpus import gpu
from remat.timemodel.roofline import Rates
from stack import Stack


class Residual(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(16, 32), nn.Linear(32, 16)

    def forward(self, x):
        return x + self.b(nn.functional.gelu(self.a(x)))


def test_under_autocast_the_inputs_cast_is_never_a_candidate():
    # the stream under bfloat16 autocast: x's cast to bfloat16 (_to_copy: 64 × 16 × 2 = 2048 new bytes, priced,
    # not written, not returned: it would qualify but for its name), addmm, gelu, addmm, the residual add (returned).
    # The weight casts are not in the stream (parameter casts)
    x = torch.randn(64, 16)
    ops = block_ops(Residual(), lambda: ((x,), {}), Rates.of(gpu("h100-80gb"), 1, "float32"),
                    lambda: torch.autocast("cpu", dtype=torch.bfloat16), "cpu").ops
    assert [o.op for o in ops] == ["_to_copy", "addmm", "gelu", "addmm", "add"]
    assert ops[0].nbytes == 64 * 16 * 2 and ops[0].seconds > 0
    assert [o.candidate for o in ops] == [False, True, True, True, False]


class Transient(nn.Module):
    """x·Wᵀ plus the sum of a 4 MiB tensor of zeros made and freed inside the forward (a forward's transient)."""

    def __init__(self, h: int):
        super().__init__()
        self.lin = nn.Linear(h, h, bias=False)

    def forward(self, x):
        return self.lin(x) + torch.zeros(1024, 1024).sum()


def test_the_workspace_leaves_out_what_the_forward_freed_before_backward(monkeypatch):
    # as tests/test_audit_i_measured.py's linear layer: backward(ones) allocates the ones [32, 64], x's gradient
    # [32, 64] and W's gradient [64, 64], float32: 4 · (2 · 32 · 64 + 64 · 64) bytes. The forward's 4 MiB of zeros
    # are freed before backward starts and are no part of it
    n, h = 32, 64
    monkeypatch.setattr(measured, "build", lambda cfg, t, sp, policy, group, mode: (Transient(h), None))
    monkeypatch.setattr(measured, "layer_input", lambda cfg, t, sp, mode: torch.randn(n, h, requires_grad=True))
    monkeypatch.setattr(measured, "_backward_peak", measured._backward_peak.__wrapped__)
    assert measured.backward_workspace.__wrapped__(from_name("llama-tiny"), 1, False) == 4 * (2 * n * h + h * h)


def test_when_the_uniform_plans_step_only_equals_the_per_rank_plans_they_stand(monkeypatch):
    # the budget of tests/test_audit_i_step_timing.py: rank 0 must recompute, rank 1 fits none; every plan's step
    # 1 s, so the uniform plan is not shorter and each rank keeps its own plan (rank 1: none on every layer; the
    # uniform plan recomputes on both ranks)
    cfg = dataclasses.replace(from_name("gpt-tiny"), layers=4, pp=2, interleave=1, global_batch=8)
    st = make_settings(cfg, "a100-80gb", sp=False)
    su = setup(cfg, st, "1F1B")
    peaks = [r.peak_bytes for r in evaluate(su, ("none",) * su.per_stage)]
    at = dataclasses.replace(st, budget_bytes=(peaks[0] + peaks[1]) // 2)
    monkeypatch.setattr(ranks, "step_seconds", lambda su, plans: 1.0)
    plan = plan_pipeline(cfg, at, "1F1B")
    assert plan.step_time_s == plan.uniform_step_time_s == 1.0
    none = ("none",) * su.per_stage
    assert plan.ranks[1].policies == none and plan.ranks[0].policies != none
    assert plan.uniform[0].policies == plan.uniform[1].policies != none     # rank 0 cannot run none


class Routed(nn.Module):
    """A BatchNorm, then top-1 routing by ``nonzero`` (values needed: measured on a real copy); ``calls`` counts
    its forwards."""

    def __init__(self):
        super().__init__()
        self.norm, self.router = nn.BatchNorm1d(16), nn.Linear(16, 2)
        self.experts, self.calls = nn.ModuleList(nn.Linear(16, 16) for _ in range(2)), 0

    def forward(self, x):
        self.calls += 1
        x = self.norm(x)
        choice, out = self.router(x).argmax(-1), torch.zeros_like(x)
        for e, expert in enumerate(self.experts):
            tokens = (choice == e).nonzero().squeeze(-1)
            out = out.index_add(0, tokens, expert(x[tokens]))
        return x + out


def test_measuring_on_a_real_copy_leaves_the_callers_model_as_it_was():
    model, x = Stack(Routed, 2), torch.randn(32, 16, generator=torch.Generator().manual_seed(1))
    state = {k: v.clone() for k, v in model.state_dict().items()}
    result = auto.plan(model, (x,), budget="1GiB", choices=("none",), optimizer_state_bytes=0)
    assert any("measured on a real copy" in n for n in result.notes)
    assert all(torch.equal(v, state[k]) for k, v in model.state_dict().items())   # running statistics too
    assert [layer.calls for layer in model.layers] == [0, 0]
    assert all(p.grad is None for p in model.parameters())


class Stack4(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.layers = nn.ModuleList(Residual() for _ in range(4))

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


def test_a_tensor_plan_made_under_autocast_and_trained_without_it_says_so():
    # the reverse of tests/test_tensor_plan_autocast.py's case: the plan's op 0 is the input's cast (_to_copy), the
    # block without autocast runs addmm there
    model, x = Stack4(), torch.randn(64, 16)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        result = auto.plan(model, (x,), granularity="tensor", budget="100KiB")
    assert any(result.kept_sets)
    auto.apply(model, result)
    with pytest.raises(RecomputeError, match=r"^layers\.\d: the block ran aten\.addmm as op 0, where the tensor plan "
                                             r"has _to_copy: .*plan it under the autocast it trains with"):
        model(x)
