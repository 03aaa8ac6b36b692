"""Chen §4.2 drop-cheap (remat.drop_cheap): which ops are kept, gradients unchanged on any module and on the
GPT layers, the planner's options untouched, and its saved bytes and recomputed work against closed forms and
the memory tracker."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from test_policies import assert_bitwise, gpt_step

from remat.drop_cheap import is_kept
from remat.measure.drop_cheap import ElementwiseOps, RecomputedElementwise, saved_bytes
from remat.measure.flops import StepFlopCounter
from remat.measure.peak import PeakMemory
from remat.models.resnet import ResNetConfig, build_resnet, random_images, resnet_loss
from remat.policies import POLICIES, RUNTIME_POLICIES, apply_plan, parse_plan, unwrap, wrap

aten = torch.ops.aten
B, D, H = 4, 3, 5  # toy sizes: batch, input/output features, hidden features


def test_kept_ops_are_the_flop_counters():
    for op in (aten.convolution.default, aten.mm.default, aten.addmm.default, aten.bmm.default,
               aten.baddbmm.default, aten._scaled_dot_product_flash_attention_for_cpu.default):
        assert is_kept(op), op
    for op in (aten.native_batch_norm.default, aten.relu.default, aten.add.Tensor, aten._softmax.default,
               aten.native_dropout.default, aten.max_pool2d_with_indices.default, aten.sigmoid.default):
        assert not is_kept(op), op


def test_planner_options_unchanged_runtime_accepts_drop_cheap():
    from remat.planner import POLICIES as planner_policies
    assert POLICIES == planner_policies == ("none", "selective", "full", "offload")
    assert RUNTIME_POLICIES == POLICIES + ("drop-cheap",)
    assert list(parse_plan("drop-cheap", 3)) == ["drop-cheap"] * 3


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_gpt_layers_bitwise_equal_with_dropout(dtype):
    assert_bitwise(gpt_step("gpt-tiny", "none", dtype), gpt_step("gpt-tiny", "drop-cheap", dtype))


@pytest.mark.parametrize("name, overrides", [("gpt-tiny", {"attention": "sdpa"}), ("llama-tiny", {})])
def test_sdpa_and_llama_layers_bitwise_equal(name, overrides):
    assert_bitwise(gpt_step(name, "none", "float32", **overrides),
                   gpt_step(name, "drop-cheap", "float32", **overrides))


def toy() -> tuple[nn.Module, torch.Tensor]:
    """Linear(D→H) – BN – ReLU – Linear(H→D) – ReLU in float64; input x [B, D]."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(D, H), nn.BatchNorm1d(H), nn.ReLU(), nn.Linear(H, D), nn.ReLU()).double()
    return model, torch.randn(B, D, dtype=torch.float64, requires_grad=True)


def test_any_module_bitwise_equal_and_running_stats_once():
    model, x = toy()
    model(x).sum().backward()
    ref = [p.grad.clone() for p in model.parameters()] + [x.grad.clone()] + list(model.state_dict().values())
    model, x = toy()
    wrap(model)(x).sum().backward()
    out = [p.grad for p in model.parameters()] + [x.grad] + list(model.state_dict().values())
    assert all(torch.equal(a, b) for a, b in zip(ref, out))
    assert model[1].num_batches_tracked.item() == 1


def test_toy_saved_bytes_and_recompute_closed_forms():
    """Kept: the two addmm outputs, (B·H + B·D)·8 bytes; autograd: the checkpoint input x, B·D·8. The memory
    tracker's live-bytes delta across the forward is exactly kept + the output (B·D·8). Recomputed cheap work:
    BN (B·H outputs + mean and invstd, 2H), ReLU (B·H), ReLU (B·D) — what the plain forward runs; no matmul."""
    model, x = toy()
    wrap(model)
    counter = StepFlopCounter()
    with PeakMemory("cpu", model, x) as mem:
        before = mem.current_bytes()
        with RecomputedElementwise() as cheap, counter.forward():
            saved, y = saved_bytes(model, lambda: model(x))
        delta = mem.current_bytes() - before
        counter.backward(y.sum())
    assert saved.kept == (B * H + B * D) * 8 and saved.autograd == B * D * 8
    assert delta == saved.kept + y.numel() * 8
    flops = counter.result()
    assert flops.recompute == 0 and flops.forward == 2 * B * D * H * 2
    assert cheap.total == 2 * B * H + 2 * H + B * D
    with ElementwiseOps() as plain:
        unwrap(model)(x)
    assert plain.total == cheap.total


def resnet_measured(plan: str) -> tuple:
    cfg = ResNetConfig(blocks=(2, 1, 1, 1), width=4, image=32, classes=10, batch=4)
    torch.manual_seed(0)
    model = build_resnet(cfg)
    apply_plan(model, plan)
    images, labels = random_images(cfg)
    counter = StepFlopCounter()
    with RecomputedElementwise() as cheap, counter.forward():
        saved, loss = saved_bytes(model, lambda: resnet_loss(model(images), labels))
    counter.backward(loss)
    return saved, counter.result(), cheap.total


def test_resnet_drop_cheap_saves_less_and_recomputes_only_cheap_ops():
    none, drop, full = (resnet_measured(plan) for plan in ("none", "drop-cheap", "full"))
    assert drop[0].total < none[0].total and drop[0].kept > 0 and none[0].kept == 0
    assert drop[1].recompute == 0 < full[1].recompute == full[1].forward - none[1].forward_by_module["stem"] \
        - none[1].forward_by_module["head"]
    assert 0 < drop[2] == full[2]  # the same cheap ops, once each: all of the blocks' non-matmul work
