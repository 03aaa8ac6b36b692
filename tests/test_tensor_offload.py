"""Tensor plans that offload single op outputs (remat.auto.tensor_offload, BlockOps.served_cost / splits): the
runtime against hand-counted bytes and the plain model's gradients, the pricing against the transfer formula
written out here, and applied plans measured on this CPU (the device side of the simulation: MemTracker sees
the storages emptied and refilled, the host buffers are not the device)."""

from __future__ import annotations

import copy
import gc
import json
from unittest import mock

import pytest
import torch
from torch import nn

import remat.auto as auto_module
from remat import auto
from remat.auto import measure
from remat.auto.fake import fake_model
from remat.auto.planning import block_rows, kept_lines
from remat.auto.tensors import KeptSet
from remat.auto.whole_step import whole_step
from remat.auto.wrap import wrapper
from remat.measure.peak import PeakMemory
from remat.models.toys import BlockNet, ConvBlock, TransformerBlock
from remat.policies import OffloadStats
from remat.timemodel.gpus import gpu
from remat.timemodel.roofline import Rates

B, S, D = 8, 16, 64


class _Mlp(nn.Module):
    def __init__(self, wide: int = 4):
        super().__init__()
        self.a, self.b = nn.Linear(D, wide * D), nn.Linear(wide * D, D)

    def forward(self, x):
        return x + self.b(torch.nn.functional.gelu(self.a(x)))   # ops: addmm, gelu, addmm, add


def _wrapped(offloads: list[frozenset]):
    """Three MLP blocks, block i offloading the op indices ``offloads[i]`` (nothing kept on the device)."""
    torch.manual_seed(0)
    blocks = nn.Sequential(*[_Mlp() for _ in offloads])
    plain, stats = copy.deepcopy(blocks), OffloadStats()
    names = ("addmm", "gelu", "addmm", "add")
    for i, (block, off) in enumerate(zip(blocks, offloads)):
        block.forward = wrapper(block, "selective", stats, f"b{i}",
                                keep=KeptSet(names, frozenset(), f"b{i}", off))
    return blocks, plain, stats


def test_offloaded_outputs_leave_the_device_come_back_and_gradients_stay_bitwise():
    """Each block's first matmul output (B·S × 4D float32 = 131,072 bytes, counted by hand) goes to the host
    after its forward; backward fetches the last block on demand and prefetches the earlier ones; gradients are
    bitwise the plain blocks'; every host buffer is back in the pool at the end."""
    blocks, plain, stats = _wrapped([frozenset({0})] * 3)
    x = torch.randn(B, S, D)
    y = blocks(x)
    assert stats.bytes == 3 * B * S * 4 * D * 4 and stats.tensors == 3 and stats.simulated
    manager = stats.tensor_offload
    assert [s.nbytes() for g in manager.groups for s, _, _ in g().moved] == [0, 0, 0]
    y.square().sum().backward()
    plain(x).square().sum().backward()
    assert all(torch.equal(a.grad, b.grad) for a, b in zip(blocks.parameters(), plain.parameters()))
    assert manager.fetches == [("b2", "demand"), ("b1", "prefetch"), ("b0", "prefetch")]
    assert manager.pool.stats()["live_bytes"] == 0


def test_a_neighbour_larger_than_the_allowance_is_fetched_on_demand():
    """Block 1 offloads two outputs (more than block 2's allowance of one): block 2's recompute does not prefetch
    it, its own recompute fetches it; block 0 (one output, within block 1's allowance) is prefetched."""
    blocks, plain, stats = _wrapped([frozenset({0}), frozenset({0, 1}), frozenset({0})])
    x = torch.randn(B, S, D)
    blocks(x).square().sum().backward()
    plain(x).square().sum().backward()
    assert all(torch.equal(a.grad, b.grad) for a, b in zip(blocks.parameters(), plain.parameters()))
    assert stats.tensor_offload.fetches == [("b2", "demand"), ("b1", "demand"), ("b0", "prefetch")]


def test_a_forward_without_backward_gives_the_host_buffers_back():
    blocks, _, stats = _wrapped([frozenset({0})] * 3)
    y = blocks(torch.randn(B, S, D))
    assert stats.tensor_offload.pool.stats()["live_bytes"] == 3 * B * S * 4 * D * 4
    del y
    gc.collect()
    assert stats.tensor_offload.pool.stats()["live_bytes"] == 0


def test_offloaded_splits_are_priced_by_the_transfer_formula():
    """Each served set's splits, at four link speeds, against the formula written out: copies t0·n + bytes/BW
    each way, hidden under the block's forward (out) and backward (back), the rest exposed; stored bytes lose
    what goes to the host, the transient counts it twice (fetched back, and the neighbour's prefetch); a partly
    offloaded split hides its copies entirely."""
    torch.manual_seed(0)
    net, x = BlockNet(TransformerBlock), torch.randn(2, 64, 64)
    mode, model = fake_model(net)
    blocks = auto.find_blocks(model)
    rates = Rates.of(gpu("h100-80gb"), 1, "float32")
    tags = set()
    with mode:
        captured = whole_step(model, (mode.from_tensor(x),), {}, blocks, lambda o: o)["inputs"][1]
        full = measure._run_block(blocks.modules[1], captured, "full", rates)
        for bw in (1e9, 1e10, 1e11, 1e12):
            link = gpu("h100-80gb", link_bytes_per_s=bw, link_t0_s=1e-7).link
            variants, ops = measure.tensor_variants(blocks.modules[1], captured, rates, full, link)
            tags |= {label[0] for label in variants}
            for label, v in variants.items():
                _check_priced(label, v, ops, full, link)
    assert tags == {"k", "h", "o"}


def _check_priced(label, v, ops, full, link):
    served = v.keep | v.offload
    nbytes = sum(ops.ops[j].nbytes for j in v.offload)
    backward = full.backward_s - sum(ops.ops[j].seconds for j in served)
    copy_s = len(v.offload) * link.t0_s + nbytes / link.bw_d2h if v.offload else 0.0
    exposed = max(0.0, copy_s - full.forward_s) + max(0.0, copy_s - backward)
    assert v.cost.stored_bytes == full.stored_bytes + sum(ops.ops[j].nbytes for j in v.keep)
    assert v.cost.offload_bytes == nbytes and (label[0] == "k") == (not v.offload)
    assert v.cost.backward_s == pytest.approx(backward + exposed, rel=1e-12, abs=1e-15)
    peak = ops.peak_bytes(served, full.stored_bytes, full.stored_bytes + full.transient_bytes)
    assert v.cost.stored_bytes + v.cost.transient_bytes == peak + nbytes
    assert label[0] != "h" or (exposed == 0 and v.keep and v.offload)
    assert label[0] != "o" or not v.keep


def _fast_plans(net, x, fractions):
    """Tensor plans of ``net`` on a host link too fast to cost anything (offload chosen wherever memory allows),
    at budgets ``fractions`` of the way from every block full to no recompute."""
    fast = gpu("h100-80gb", link_bytes_per_s=1e18, link_t0_s=0.0)
    with mock.patch.object(auto_module, "gpu_preset", lambda name, **_: fast):
        plan = lambda budget, **o: auto.plan(net, (x,), budget=budget, loss_fn=lambda o: o, optimizer_state_bytes=0,
                                             **o)
        full, none = (plan("1GiB", choices=(c,)).plan.peak_bytes for c in ("full", "none"))
        return [(budget, plan(budget, granularity="tensor")) for budget in
                (int(full + (none - full) * f) for f in fractions)]


@pytest.mark.parametrize("which", [0, 1])
@pytest.mark.slow
def test_applied_offload_plans_fit_move_what_they_price_and_are_monotone(which):
    """Plans that offload op outputs or whole blocks, applied (the host copies out of MemTracker's sight:
    remat.offload_pool.host_side): measured device peak ≤ predicted ≤ budget, over by at most the largest block's
    offloaded bytes (a prefetch allowance its neighbour does not use); bytes moved per step = the plan's
    offloaded bytes, exactly for op outputs, within one block input per block offloaded whole (the hooks copy
    the model's input, which the plan leaves to the caller, and copy a boundary two offloaded blocks both save
    once, which the plan counts twice); gradients bitwise; a larger budget never gives a higher predicted peak
    or a slower predicted step."""
    torch.manual_seed(0)
    net, x = [(BlockNet(TransformerBlock), torch.randn(2, 64, 64)),
              (BlockNet(ConvBlock, width=16), torch.randn(2, 16, 16, 16))][which]
    reference = copy.deepcopy(net)
    reference(x).backward()
    results = _fast_plans(net, x, (0.0, 0.2, 0.35, 0.5, 0.75, 1.0))
    checked = set()
    for (_, previous), (_, result) in zip(results, results[1:]):
        assert result.plan.peak_bytes >= previous.plan.peak_bytes
        assert result.plan.step_time_s <= previous.plan.step_time_s
    for budget, result in results:
        offloaded = [row["offload_bytes"] for row in block_rows(result)]
        if not any(offloaded):
            continue
        model = copy.deepcopy(net)
        auto.apply(model, result)
        with PeakMemory("cpu", model, x) as mem:
            model(x).backward()
        assert all(torch.equal(a.grad, b.grad) for a, b in zip(model.parameters(), reference.parameters()))
        boundaries = x.numel() * 4 * result.policies.count("offload")   # every block's input is x's size
        assert abs(model.remat_offload.bytes - sum(offloaded)) <= boundaries
        assert mem.peak_bytes <= result.plan.peak_bytes <= budget
        assert result.plan.peak_bytes - mem.peak_bytes <= max(offloaded)
        checked |= {"block" if "offload" in result.policies else "tensor"}
    assert checked == {"block", "tensor"}


def test_the_plan_prints_and_writes_what_it_offloads():
    torch.manual_seed(0)
    net, x = BlockNet(ConvBlock, width=16), torch.randn(2, 16, 16, 16)
    _, result = _fast_plans(net, x, (0.2,))[0]
    kept = [(i, k) for i, k in enumerate(result.kept_sets) if k is not None and k.offload]
    assert kept
    i, k = kept[0]
    assert any(line.startswith("blocks ") and "offload" in line for line in kept_lines(result))
    data = json.loads(json.dumps(result.to_json(), default=str))
    policy = data["torch_policy"][result.block_names[i]]
    assert {r["index"] for r in policy if r["policy"] == "MUST_CPU_OFFLOAD"} == set(k.offload)
    assert data["blocks"][i]["offloaded_ops"] == sorted(k.offload)
