"""A tensor plan made under torch.autocast applies under it: autocast casts a parameter once per autocast region
and serves the cast from its cache afterwards, so a block's op stream has weight casts in the region's first
forward and none in a second micro-batch's. The plan's indices leave those casts out (remat.auto.tensors.counted),
so both micro-batches keep what was planned, and the gradients equal the unmodified model's bitwise."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from remat import auto
from remat.errors import RecomputeError
from stack import Stack


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(16, 32), nn.Linear(32, 16)

    def forward(self, x):
        return x + self.b(nn.functional.gelu(self.a(x)))


def _grads(model, xs):
    """Parameter gradients of micro-batches ``xs`` accumulated, their forwards in one autocast region."""
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ys = [model(x) for x in xs]
    for y in ys:
        y.float().pow(2).sum().backward()
    return [p.grad for p in model.parameters()]


def test_a_tensor_plan_made_under_autocast_trains_under_it_bitwise():
    model = Stack(Block, 4)
    xs = [torch.randn(64, 16, generator=torch.Generator().manual_seed(i)) for i in range(2)]
    reference = _grads(copy.deepcopy(model), xs)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        result = auto.plan(model, (xs[0],), granularity="tensor", budget="100KiB")
    assert "selective" in result.policies and any(result.kept_sets)   # the case this test exists for
    planned = auto.apply(copy.deepcopy(model), result)
    m = copy.deepcopy(model)
    auto.apply(m, result)
    assert all(torch.equal(a, b) for a, b in zip(_grads(m, xs), reference)), planned


def test_a_tensor_plan_made_without_autocast_and_trained_under_it_says_so():
    model = Stack(Block, 4)
    x = torch.randn(64, 16)
    result = auto.plan(model, (x,), granularity="tensor", budget="100KiB")
    assert any(result.kept_sets)
    auto.apply(model, result)
    with pytest.raises(RecomputeError, match=r"^layers\.\d: .*aten\._to_copy.*plan it under the autocast it trains "
                                             r"with"):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            model(x)
