"""The value check's comparison (remat.policies.values): a checksum of ±inf in forward and recompute alike is equal
(a causal mask filled with -inf is faithful), an op the selective cache keeps is left out of the matching (the next op
of that name is matched to its own forward op), the innermost active ValueCheck is the one told, and a region with
BatchNorm, whose statistics' update is not compared, still has its other ops compared."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from remat import auto
from remat.auto import wrap
from remat.auto.tensors import KeptSet
from remat.errors import RecomputeError
from remat.policies import ValueCheck


class Causal(nn.Module):
    """softmax(lin(x)·xᵀ + mask)·x with the causal mask built in forward as -inf above the diagonal: full and triu
    give outputs whose sum is -inf and whose absolute sum is +inf, in forward and recompute alike."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        mask = torch.full((x.shape[0], x.shape[0]), float("-inf")).triu(1)
        return torch.softmax(self.lin(x) @ x.T + mask, -1) @ x


@pytest.mark.parametrize("policy", ["full", "selective"])
def test_an_infinite_checksum_the_recompute_makes_again_is_no_mismatch(policy):
    torch.manual_seed(0)
    model, x = nn.Sequential(Causal(), Causal()), torch.randn(3, 4)
    plain = copy.deepcopy(model)
    plain(x).pow(2).sum().backward()
    auto.apply(model, policy)
    with ValueCheck(strict=False) as check:
        model(x).pow(2).sum().backward()
    assert check.mismatches == []
    assert all(torch.equal(a.grad, b.grad) for a, b in zip(model.parameters(), plain.parameters()))


class TwoLinear(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 4)

    def forward(self, x):
        return self.b(self.a(x))


def test_a_kept_op_does_not_shift_the_next_op_of_its_name_onto_it():
    # the block's stream is addmm (a), addmm (b); the kept set keeps the first. The recompute serves a's output
    # from the cache and runs b's addmm only: it must be compared with b's forward addmm (equal), not a's (other
    # values): no mismatch, and the strict check passes
    torch.manual_seed(0)
    block, x = TwoLinear(), torch.randn(3, 4, requires_grad=True)
    block.forward = wrap.wrapper(block, "selective", keep=KeptSet(("addmm", "addmm"), frozenset({0})), name="blk")
    with ValueCheck(strict=False) as check:
        block(x).sum().backward()
    assert check.mismatches == []
    with ValueCheck():
        block(x).sum().backward()


class Scaled(nn.Module):
    """tanh(lin(x) · scale) with ``scale`` set for the forward only (the recompute reads 1.0); ``norm``: a
    BatchNorm1d between the linear and the scale."""

    def __init__(self, norm: bool = False):
        super().__init__()
        self.lin, self.scale = nn.Linear(4, 4), 1.0
        self.norm = nn.BatchNorm1d(4) if norm else nn.Identity()

    def forward(self, x):
        return torch.tanh(self.norm(self.lin(x)) * self.scale)


class Model(nn.Module):
    def __init__(self, scale: float, norm: bool = False):
        super().__init__()
        self.layers, self.forward_scale = nn.Sequential(Scaled(norm), Scaled(norm)), scale

    def forward(self, x):
        for layer in self.layers:
            layer.scale = self.forward_scale
        y = self.layers(x)
        for layer in self.layers:
            layer.scale = 1.0
        return y


def test_the_innermost_value_check_is_told():
    # a strict check outside, a collecting one inside: the inner one collects both regions' mismatches and nothing
    # is raised while it is active
    torch.manual_seed(0)
    m = Model(2.0)
    auto.apply(m, "full")
    with ValueCheck():
        with ValueCheck(strict=False) as inner:
            m(torch.randn(8, 4)).sum().backward()
    assert sorted(x.region for x in inner.mismatches) == ["layers.0", "layers.1"]


@pytest.mark.parametrize("policy", ["full", "selective"])
def test_a_region_with_batchnorm_still_compares_its_other_ops(policy):
    # BatchNorm's statistics update (num_batches_tracked.add_) runs in forward and again in recompute, and is left
    # out of both sides; the mul after the norm reads scale 2 in forward and 1 in recompute: one mismatch per region
    # at mul; with scale 1 there is none
    for scale, expected in ((1.0, []), (2.0, [("layers.0", "mul"), ("layers.1", "mul")])):
        torch.manual_seed(0)
        m = Model(scale, norm=True)
        auto.apply(m, policy)
        with ValueCheck(strict=False) as check:
            m(torch.randn(8, 4)).sum().backward()
        assert sorted((x.region, x.op) for x in check.mismatches) == expected
    with pytest.raises(RecomputeError, match=r"recomputing aten\.mul"):
        with ValueCheck():
            m(torch.randn(8, 4)).sum().backward()


class Reordered(nn.Module):
    """tanh(lin(x)[order]): rows of an [8, 8] activation taken in ``order``, which the model sets for its forward
    only (the recompute reads the identity)."""

    def __init__(self):
        super().__init__()
        self.lin, self.order = nn.Linear(8, 8), list(range(8))

    def forward(self, x):
        return torch.tanh(self.lin(x)[self.order])


class Swapping(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.Sequential(Reordered(), Reordered())

    def forward(self, x):
        for layer in self.layers:
            layer.order = [0, 1, 2, 3, 4, 5, 7, 6]
        y = self.layers(x)
        for layer in self.layers:
            layer.order = list(range(8))
        return y


@pytest.mark.parametrize("policy", ["full", "selective"])
def test_values_moved_beyond_the_first_positions_are_refused(policy):
    # the forward swaps the last two rows (flat positions 48-63), the recompute does not: the sum and the absolute
    # sum agree, and so does the stride-31 sum from position 5 (positions 5 and 36: rows 0 and 4); the stride-7 sum
    # from position 2 reads positions 51 and 58 there, column 3 of row 6 and column 2 of row 7, so it differs. One
    # mismatch per region, at the index op (the addmm before it agrees)
    torch.manual_seed(0)
    m = Swapping()
    auto.apply(m, policy)
    with ValueCheck(strict=False) as check:
        m(torch.randn(8, 8)).sum().backward()
    assert sorted((x.region, x.op) for x in check.mismatches) == [("layers.0", "index"), ("layers.1", "index")]
