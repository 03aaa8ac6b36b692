"""remat.policies.ValueCheck's semantics: values are compared exactly (one float32 ulp is a difference), a NaN
equals only a NaN (a forward that makes NaN where its recompute makes the same NaN is faithful; NaN against a
number is a difference), and a region reports its FIRST differing op only — one mismatch per region however
many of its ops differ after it."""

from __future__ import annotations

import copy
import math

import pytest
import torch
from torch import nn

from remat import auto
from remat.errors import RecomputeError
from remat.policies import ValueCheck

ULP = math.ldexp(1.0, -23)        # float32's spacing just above 1


class Scaled(nn.Module):
    """tanh(lin(x) · scale): ``scale`` is state that is not the block's input (the model sets it for its forward
    only, as a hook would), so the recompute in backward reads 1.0. Ops: addmm, then mul and tanh, which differ."""

    def __init__(self):
        super().__init__()
        self.lin, self.scale = nn.Linear(8, 8), 1.0

    def forward(self, x):
        return torch.tanh(self.lin(x) * self.scale)


class Model(nn.Module):
    def __init__(self, forward_scale: float, n: int = 3):
        super().__init__()
        self.layers, self.forward_scale = nn.ModuleList(Scaled() for _ in range(n)), forward_scale

    def forward(self, x):
        for layer in self.layers:
            layer.scale = self.forward_scale
        for layer in self.layers:
            x = layer(x)
        for layer in self.layers:
            layer.scale = 1.0
        return x


def _mismatches(model, x, policy: str) -> list:
    m = copy.deepcopy(model)
    auto.apply(m, policy)
    with ValueCheck(strict=False) as check:
        m(x).pow(2).sum().backward()
    return check.mismatches


@pytest.mark.parametrize("policy", ["full", "selective"])
def test_each_region_reports_its_first_differing_op_only(policy):
    """Three regions, each recomputing mul and then tanh with other values (forward scale 2, recompute 1): three
    mismatches, one per region, each at mul (op 2 of its forward: after the addmm, which agrees), not six."""
    torch.manual_seed(0)
    found = _mismatches(Model(2.0), torch.randn(4, 8), policy)
    assert sorted(m.region for m in found) == ["layers.0", "layers.1", "layers.2"]
    assert [(m.op, m.index) for m in found] == [("mul", 1)] * 3


ALL = ["layers.0", "layers.1", "layers.2"]


@pytest.mark.parametrize("scale, regions", [(1.0, []), (1.0 + ULP, ALL), (float("nan"), ["layers.0"])])
def test_values_are_compared_exactly_and_nan_differs_from_a_number(scale, regions):
    """The same scale in forward and recompute: no mismatch. Scale 1 + 2⁻²³ (one float32 ulp above the
    recompute's 1): a mismatch in every region. NaN in the forward only: the first region's NaN checksum against
    its recompute's number is one; the later regions recompute from the NaN inputs the forward gave them, NaN
    again in forward and recompute alike, so they are not."""
    torch.manual_seed(0)
    found = _mismatches(Model(scale), torch.randn(4, 8), "full")
    assert sorted(m.region for m in found) == regions
    for m in found:
        assert math.isnan(m.forward[0]) == math.isnan(scale) and not math.isnan(m.recompute[0])


class LogWhere(nn.Module):
    """where(h > 0, log h, h) with h = lin(x): log makes NaN at every negative h, in forward and recompute alike."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x):
        h = self.lin(x)
        return torch.where(h > 0, torch.log(h), h)


@pytest.mark.parametrize("policy", ["full", "selective"])
def test_a_nan_the_recompute_makes_again_is_no_mismatch(policy):
    """log's NaN checksum equals its recompute's NaN: no mismatch, the strict check passes, and the gradients are
    the unmodified model's bit for bit (finite: where sends no gradient through the NaN)."""
    torch.manual_seed(0)
    model, x = nn.Sequential(*[LogWhere() for _ in range(3)]), torch.randn(16, 8)
    with torch.no_grad():
        assert torch.isnan(torch.log(model[0].lin(x))).any()          # the case: NaN in the forward's values
    plain = copy.deepcopy(model)
    plain(x).pow(2).sum().backward()
    assert _mismatches(model, x, policy) == []
    m = copy.deepcopy(model)
    auto.apply(m, policy)
    with ValueCheck():
        m(x).pow(2).sum().backward()
    assert all(torch.equal(a.grad, b.grad) for a, b in zip(m.parameters(), plain.parameters()))
    assert all(torch.isfinite(p.grad).all() for p in m.parameters())


def test_the_strict_check_raises_at_the_first_mismatch_naming_region_and_op():
    torch.manual_seed(0)
    m = Model(2.0)
    auto.apply(m, "full")
    with pytest.raises(RecomputeError, match=r"^layers\.2: recomputing aten\.mul \(op 2 of its forward\)"):
        with ValueCheck():
            m(torch.randn(4, 8)).sum().backward()


def test_the_mismatch_names_the_part_of_the_checksum_that_differs_and_never_prints_two_values_alike():
    from remat.policies.values import Mismatch
    # a permutation: same sum and absolute sum, other strided sums
    moved = Mismatch("blocks.0", "roll", 3, (6.0, 6.0, 1.0, 2.0), (6.0, 6.0, 3.0, 2.0))
    assert "(sum of every 7th value from 2 1.0 vs 3.0)" in str(moved) and "op 4 of its forward" in str(moved)
    # sums apart in the tenth digit: six significant digits would print both as 12.3457
    close = Mismatch("blocks.1", "mul", 0, (12.345678901, 13.0, 1.0, 1.0), (12.345678902, 13.0, 1.0, 1.0))
    assert "(sum 12.345678901 vs 12.345678902)" in str(close)
    # NaN in both forward and recompute is not the difference
    nan = Mismatch("b", "add", 0, (math.nan, 2.0, 1.0, 1.0), (math.nan, 5.0, 1.0, 1.0))
    assert "(sum of absolute values 2.0 vs 5.0)" in str(nan)


class ReadsParent(nn.Module):
    """lin(x) · the parent's step buffer, which the parent bumps in place after the blocks ran."""

    def __init__(self, parent_buffers):
        super().__init__()
        self.lin, self.outer = nn.Linear(8, 8), parent_buffers

    def forward(self, x):
        return torch.tanh(self.lin(x) * self.outer["step"])


class Parent(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("step", torch.ones(()))
        self.layers = nn.ModuleList(ReadsParent(self._buffers) for _ in range(2))

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        self.step.add_(1)
        return x


def test_state_in_a_parents_buffer_is_caught_and_the_advice_says_the_blocks_own_buffers():
    torch.manual_seed(0)
    model = Parent()
    auto.apply(model, "full")
    with pytest.raises(RecomputeError, match=r"a buffer of a module outside the block.*buffers of the block's own "
                                             r"modules \(register_buffer on the block or a module inside it"):
        model(torch.randn(4, 8)).sum().backward()


class Fp8Round(nn.Module):
    """Rounds its input through float8 (a straight-through estimate, as FP8 training recipes do)."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        return self.lin(x + (x.to(torch.float8_e4m3fn).to(x.dtype) - x).detach())


def test_a_region_with_float8_tensors_is_checked_and_trains_as_unchecked():
    from remat.policies import checkpointed, recompute_check
    from remat.policies.values import _checksum
    eight = torch.tensor([1.0, -2.0, 0.5, 3.0]).to(torch.float8_e4m3fn)
    assert _checksum(eight)[:2].tolist() == [2.5, 6.5]             # sum and absolute sum, exact in float8
    grads = []
    for mode in ("every", "off"):
        torch.manual_seed(0)
        m, x = Fp8Round(), torch.randn(3, 4, requires_grad=True)
        with recompute_check(mode):
            checkpointed(m, [m], name="blk")(x).sum().backward()
        grads.append((x.grad, m.lin.weight.grad))
    assert all(torch.equal(a, b) for a, b in zip(*grads))
