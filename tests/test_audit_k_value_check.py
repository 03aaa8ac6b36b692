"""The value check (remat.policies.values) where regions hold other regions' or BatchNorm's ops: a drop-cheap region
inside a checkpointed one (each region's forward record keeps what its own recompute runs), and a BatchNorm whose
output a selective cache keeps, followed by an in-place accumulate (the statistics' update is in neither side of the
comparison, so it cannot stand in for another op of its name). Faithful regions: no mismatch, gradients bitwise."""

from __future__ import annotations

import copy

import torch
from torch import nn
from torch.utils.checkpoint import CheckpointPolicy

from remat import drop_cheap as dc
from remat.policies import ValueCheck, checkpointed, drop_cheap


def _grads(module: nn.Module) -> list[torch.Tensor]:
    return [p.grad.clone() for p in module.parameters()]


def test_a_drop_cheap_region_inside_a_checkpointed_one_is_no_mismatch_in_either():
    # outer region: inner (Linear, tanh, Linear, tanh under drop-cheap: its addmms kept by the selective cache) then
    # a Linear. The outer recompute re-runs the inner forward, addmms included, so the outer region's record holds
    # all three addmms; the inner recompute is served its two from the cache, so its record drops them
    torch.manual_seed(0)
    inner, tail = nn.Sequential(nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 4), nn.Tanh()), nn.Linear(4, 4)
    plain_inner, plain_tail = copy.deepcopy(inner), copy.deepcopy(tail)
    x = torch.randn(3, 4)
    plain_tail(plain_inner(x)).tanh().pow(2).sum().backward()
    run_inner = drop_cheap(inner, [inner], name="inner")
    outer = checkpointed(lambda h: tail(run_inner(h)).tanh(), [inner, tail], name="outer")
    with ValueCheck(strict=False) as check:
        outer(x.clone().requires_grad_()).pow(2).sum().backward()
    assert check.mismatches == []
    assert all(torch.equal(a, b) for a, b in zip(_grads(inner) + _grads(tail),
                                                  _grads(plain_inner) + _grads(plain_tail)))


class NormAccumulate(nn.Module):
    """acc = 2x, then acc += BatchNorm(x) in place: in forward the ops are mul, add_ (the statistics' counter),
    native_batch_norm, add_ (the accumulate)."""

    def __init__(self):
        super().__init__()
        self.bn = nn.BatchNorm1d(4)

    def forward(self, x):
        acc = x * 2
        acc.add_(self.bn(x))
        return acc


def _keep_norm(ctx, func, *args, **kwargs):
    dc.record_kept(func, ctx)
    return CheckpointPolicy.MUST_SAVE if func.overloadpacket.__name__ == "native_batch_norm" else \
        CheckpointPolicy.PREFER_RECOMPUTE


def test_a_kept_batch_norm_then_an_accumulate_is_no_mismatch():
    # the cache keeps native_batch_norm's output: the recompute runs mul and the accumulate's add_ only. The counter's
    # add_ (a running statistic: not compared) must not be the forward op the accumulate's add_ is matched to
    torch.manual_seed(0)
    block, x = NormAccumulate(), torch.randn(8, 4)
    plain = copy.deepcopy(block)
    plain(x).pow(2).sum().backward()
    run = checkpointed(block, [block], selective=lambda: dc.contexts(decide=_keep_norm), name="norm")
    with ValueCheck(strict=False) as check:
        run(x.clone().requires_grad_()).pow(2).sum().backward()
    assert check.mismatches == []
    assert all(torch.equal(a, b) for a, b in zip(_grads(block), _grads(plain)))
    assert int(block.bn.num_batches_tracked) == 1          # updated once per step, as without recompute
    with ValueCheck():                                     # strict: no RecomputeError either
        run(x.clone().requires_grad_()).pow(2).sum().backward()
