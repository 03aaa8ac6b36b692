"""A tensor plan never keeps an op output that a later op of the block writes in place (remat.auto.tensors): the
selective-checkpoint cache keeps by reference, so a kept output that the forward then writes would hand the
recompute the written values. Shown on the op stream (the rule, with the out-of-place twin on the other side),
on every kept set a tensor plan is offered, and by training: the applied plan's gradients equal the unmodified
model's bit for bit."""

from __future__ import annotations

import contextlib
import copy
import dataclasses

import torch
from torch import nn

from remat import auto
from remat.auto import tensors, wrap
from remat.auto.planning import solve_blocks
from remat.auto.tensors import KeptSet
from remat.models.toys import BlockNet
from remat.planner.problem import plan_from_policies
from remat.timemodel.gpus import gpu
from remat.timemodel.roofline import Rates

D = 16


class Doubled(nn.Module):
    """x + fc2(tanh(2·fc1(x))), the doubling written into fc1's output in place (``inplace``) or out of place.
    The doubling is not idempotent: a recompute that read the written output would compute tanh(4·fc1(x))."""

    def __init__(self, inplace: bool = True):
        super().__init__()
        self.fc1, self.fc2, self.inplace = nn.Linear(D, 4 * D), nn.Linear(4 * D, D), inplace

    def forward(self, x):
        h = self.fc1(x)
        h = h.mul_(2.0) if self.inplace else h * 2.0
        return x + self.fc2(torch.tanh(h))


def _stream(inplace: bool) -> tensors.BlockOps:
    torch.manual_seed(0)
    block, x = Doubled(inplace), torch.randn(8, D)
    rates = Rates.of(gpu("h100-80gb"), 1, "float32")
    return tensors.block_ops(block, lambda: ((x,), {}), rates, contextlib.nullcontext, "cpu")


def test_an_output_written_in_place_later_is_no_candidate_and_its_out_of_place_twin_is():
    """fc1's addmm (op 0, 8 × 64 float32 = 2,048 bytes, FLOPs 2·8·16·64 = 16,384) is written by mul_ in place: not a
    candidate; with the doubling out of place the same output is one. The block's returned sum is never one."""
    written, twin = _stream(True), _stream(False)
    assert [o.op for o in written.ops] == ["addmm", "mul_", "tanh", "addmm", "add"]
    assert [o.op for o in twin.ops] == ["addmm", "mul", "tanh", "addmm", "add"]
    assert (written.ops[0].nbytes, written.ops[0].flops) == (8 * 4 * D * 4, 2 * 8 * D * 4 * D)
    assert written.ops[1].nbytes == 0                                     # the in-place write allocates nothing
    assert not written.ops[0].candidate and twin.ops[0].candidate
    assert [o.index for o in written.candidates] == [2, 3]
    assert [o.index for o in twin.candidates] == [0, 1, 2, 3]
    assert not written.ops[4].candidate and not twin.ops[4].candidate   # returned: live anyway


def _grads(model, x) -> list[torch.Tensor]:
    model.zero_grad(set_to_none=True)
    model(x).backward()
    return [p.grad.clone() for p in model.parameters()]


def _with_kept_set(net, names: tuple, keep: frozenset):
    """A copy of ``net`` whose every block runs selective recompute keeping the op outputs ``keep``."""
    model = copy.deepcopy(net)
    for block in model.blocks:
        block.forward = wrap.wrapper(block, "selective", keep=KeptSet(names, keep))
    return model


def test_a_tensor_plan_never_keeps_a_written_output_and_trains_bitwise():
    """Every kept set the tensor plan is offered leaves op 0 (the written addmm) out, yet keeps something, and each,
    applied to every block, trains to the unmodified model's gradients bit for bit (a set keeping op 0 is refused
    when it runs); so does the plan at a budget halfway between every block full and none, which keeps op sets."""
    torch.manual_seed(0)
    net, x = BlockNet(lambda: Doubled(True), 3, D), torch.randn(4, 8, D)
    reference = _grads(copy.deepcopy(net), x)
    first = auto.plan(net, (x,), budget="1GiB", loss_fn=lambda o: o, optimizer_state_bytes=0,
                      choices=("none", "selective", "full"), granularity="tensor")
    block = first.costs.blocks[0]
    offered = {v.keep | v.offload for b in first.costs.blocks for v in b.variants.values()}
    assert offered and all(0 not in keep and keep for keep in offered)
    for keep in offered:
        trained = _grads(_with_kept_set(net, block.ops.names, keep), x)
        assert all(torch.equal(a, b) for a, b in zip(trained, reference)), sorted(keep)
    n = len(first.policies)
    low = plan_from_policies(first.problem, ["full"] * n).peak_bytes
    high = plan_from_policies(first.problem, ["none"] * n).peak_bytes
    result = solve_blocks(dataclasses.replace(first.problem, budget_bytes=(low + high) // 2), auto.find_blocks(net),
                          first.costs)
    kept = [k for k in result.kept_sets if k is not None]
    assert kept and all(0 not in k.keep | k.offload for k in kept)
    model = copy.deepcopy(net)
    auto.apply(model, result)
    assert all(torch.equal(a, b) for a, b in zip(_grads(model, x), reference))
