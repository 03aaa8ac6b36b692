"""Recompute safety and the measurement it rests on: a frozen parameter of a meta model stays frozen in its fake
copy, frozen head parameters make no gradient before the blocks' backward, a saved tensor already written in place
before it was saved is no stale copy, an infeasible shared-block plan names the least budget that works, a failing
multi-layer unit is named by its own layers, and BatchNorm statistics move once per step under recompute. Expected
values from the definitions (plain autograd's gradients, a brute force over the plans, counts by hand)."""

from __future__ import annotations

import copy
import itertools

import pytest
import torch
from torch import nn

from remat.auto.blocks import Blocks
from remat.auto.fake import fake_model
from remat.auto.planning import _solve_shared
from remat.auto.whole_step import whole_step
from remat.errors import InfeasibleError, RecomputeError
from remat.offload import OffloadHooks
from remat.planner.problem import Layer, Option, Problem, plan_from_policies
from remat.policies import apply_plan, recomputing


def test_a_frozen_parameter_of_a_meta_model_stays_frozen_in_its_fake_copy():
    # a frozen layer makes no gradient: its fake copy must not either, or its gradient bytes would be counted
    with torch.device("meta"):
        model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 2))
    model[0].weight.requires_grad_(False)
    _, fake = fake_model(model, "cpu")
    assert [p.requires_grad for p in fake.parameters()] == [False, True, True, True]
    assert all(p.device.type == "cpu" for p in fake.parameters())


class _Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem, self.blocks, self.head = nn.Linear(8, 8), nn.ModuleList(nn.Linear(8, 8) for _ in range(2)), \
            nn.Linear(8, 4)

    def forward(self, x):
        x = self.stem(x)
        for block in self.blocks:
            x = torch.tanh(block(x))
        return self.head(x)


def test_only_the_trainable_head_parameters_make_gradients_before_the_blocks_backward():
    # the head (after the last block) has a frozen 4×8 weight and a trainable bias of 4 float32: 16 bytes of
    # gradient; the frozen weight makes none
    torch.manual_seed(0)
    model = _Net()
    model.head.weight.requires_grad_(False)
    blocks = Blocks("blocks", ("blocks.0", "blocks.1"), tuple(model.blocks))
    whole = whole_step(model, (torch.randn(2, 8),), {}, blocks, lambda out: out.sum())
    assert whole["head_grads"] == 4 * 4
    model.head.weight.requires_grad_(True)
    assert whole_step(model, (torch.randn(2, 8),), {}, blocks, lambda out: out.sum())["head_grads"] == (32 + 4) * 4


def test_a_tensor_written_in_place_before_it_was_saved_is_no_stale_copy():
    # x is made, doubled in place (version 1), then saved by sin; kept on the device (under min_bytes) and not
    # written after saving: backward runs and d/da sum(sin(3·2a)) = 6·cos(6a), as plain autograd gives
    a = torch.randn(6, requires_grad=True)
    with OffloadHooks("cpu", min_bytes=1 << 20).layer("layer"):
        x = a * 3
        x.mul_(2)
        y = x.sin()
    y.sum().backward()
    torch.testing.assert_close(a.grad, 6 * torch.cos(6 * a.detach()))


def test_an_infeasible_shared_plan_names_the_least_budget_any_plan_needs():
    # layers 0 and 1 are one module (one policy), layer 2 free; none keeps 100 bytes, full 10 and needs 20 while
    # its backward runs. Least peak (Σ stored + the largest transient) over every plan giving 0 and 1 one policy,
    # by brute force: full, full, full = 30 + 20 = 50 bytes
    opts = (Option("none", 100, 0, 1.0), Option("full", 10, 20, 2.0))
    problem = Problem(tuple(Layer(i, opts) for i in range(3)), {"state": 0}, budget_bytes=1)
    least = min(plan_from_policies(problem, [p, p, q]).peak_bytes for p, q in itertools.product(("none", "full"),
                                                                                             repeat=2))
    assert least == 50
    with pytest.raises(InfeasibleError) as caught:
        _solve_shared(problem, [[0, 1]])
    assert caught.value.minimum_bytes == least


class _Picky(nn.Module):
    """Indexes a table with an entry only the forward has: its recompute fails."""

    def __init__(self):
        super().__init__()
        self.lin, self.scales = nn.Linear(8, 8), [1.0]

    def forward(self, x):
        return torch.tanh(self.lin(x)) * self.scales[1 if recomputing() else 0]


class _Stack(nn.Module):
    def __init__(self, blocks):
        super().__init__()
        self.layers = nn.ModuleList(blocks)

    def run_layers(self, x):
        for layer in self.layers:
            x = layer(x)
        return x

    def forward(self, x):
        return self.run_layers(x)


def test_a_failing_multi_layer_unit_is_named_by_its_first_and_last_layer():
    # uniform:2 on three layers: the unit layers 0 and 1 (its recompute fails in layer 0), then layer 2 under full
    torch.manual_seed(0)
    model = _Stack([_Picky(), nn.Sequential(nn.Linear(8, 8), nn.Tanh()), nn.Sequential(nn.Linear(8, 8), nn.Tanh())])
    apply_plan(model, "uniform:2")
    with pytest.raises(RecomputeError, match=r"^layers\.0–1: the recompute in backward failed \(IndexError"):
        model(torch.randn(4, 8, requires_grad=True)).sum().backward()


def test_batchnorm_statistics_move_once_per_step_under_full_recompute():
    # a recompute re-runs BatchNorm's forward in training mode; its running statistics must end as plain autograd
    # leaves them after one step: one batch tracked, mean and variance moved once
    torch.manual_seed(0)
    model = _Stack([nn.Sequential(nn.Linear(8, 8), nn.BatchNorm1d(8), nn.Tanh()) for _ in range(2)])
    plain, x = copy.deepcopy(model), torch.randn(16, 8)
    plain(x).sum().backward()
    apply_plan(model, "full")
    model(x).sum().backward()
    for a, b in zip(model.buffers(), plain.buffers()):
        assert torch.equal(a, b)
    assert model.layers[0][1].num_batches_tracked.item() == 1
