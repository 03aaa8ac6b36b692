"""The Chen 2016 torch models (remat.models.resnet, remat.models.lstm): depth rule, shapes, parameter counts,
agreement with torch.nn.LSTM, fake-tensor construction, and gradients bitwise equal under every plan."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode

from remat.errors import UsageError
from remat.models.lstm import LSTMConfig, build_lstm, random_sequence
from remat.models.resnet import (ResNetConfig, blocks_for_depth, build_resnet, random_images, resnet_depth,
                                 resnet_loss)
from remat.policies import apply_plan, apply_step_plan

TINY_RESNET = dict(blocks=(2, 1, 1, 1), width=4, image=32, classes=10, batch=4)
TINY_LSTM = dict(layers=2, hidden=8, input=5, classes=7, steps=9, batch=3)
RESNET_PLANS = ["segments:3", "drop-cheap", "full", "drop-cheap,none,full,none,drop-cheap"]  # 5 blocks
LSTM_PLANS = ["segments:3", "segments:9", "drop-cheap", "full", ",".join(["drop-cheap", "none", "full"] * 3)]


# --- depth -----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("blocks, depth", [((3, 4, 6, 3), 50), ((3, 24, 36, 3), 200), ((3, 130, 196, 3), 998),
                                           ((1, 1, 1, 1), 14)])
def test_depth_formula_and_rule(blocks, depth):
    assert resnet_depth(blocks) == depth == 3 * sum(blocks) + 2
    assert blocks_for_depth(depth) == blocks


def test_depth_1000_is_the_nearest_below():
    assert blocks_for_depth(1000) == (3, 130, 196, 3) and resnet_depth(blocks_for_depth(1000)) == 998
    assert resnet_depth(blocks_for_depth(1001)) == 1001


def test_rule_gives_the_deepest_network_not_above_the_request():
    for depth in range(14, 1300):
        got = resnet_depth(blocks_for_depth(depth))
        assert depth - 3 < got <= depth
        assert all(b >= 1 for b in blocks_for_depth(depth))


@pytest.mark.parametrize("bad", [0, -5, 13, 2.5, True])
def test_bad_depth_names_the_field(bad):
    with pytest.raises(UsageError) as err:
        blocks_for_depth(bad)
    assert err.value.field == "depth"


@pytest.mark.parametrize("bad", [(3, 4, 6), (3, 0, 6, 3), (3, 4, 6, -1)])
def test_bad_blocks_name_the_field(bad):
    with pytest.raises(UsageError) as err:
        ResNetConfig(blocks=bad)
    assert err.value.field == "blocks"


# --- shapes and sizes ------------------------------------------------------------------------------------------

def test_resnet50_has_torchvisions_parameter_count():
    model = build_resnet(ResNetConfig(), "meta")  # ImageNet ResNet-50 v1.5: 25,557,032 parameters
    assert sum(p.numel() for p in model.parameters()) == 25_557_032
    assert len(model.blocks) == 16 and isinstance(model.blocks, nn.ModuleList)
    assert model.layers is model.blocks


def test_resnet_1000_parameters_counted_by_hand_are_the_experiments():
    """Per stage of bottleneck width m (conv weights, BN γ and β): an identity block 4m·m + 9m² + m·4m + 12m =
    17m² + 12m; a first block with input c adds a projection (c·4m + 8m) and reads c: 18m² + 20m at c = m (stage 1),
    23m² + 20m at c = 2m. ResNet-998, blocks (3, 130, 196, 3), m = 64·2^i: 215,808 + 36,507,648 + 219,363,328 +
    14,964,736, the stem 9,408 + 128, the head 2,048,000 + 1,000: 273,110,056 (He et al.'s ResNet-50: 25,557,032)."""
    from remat.experiments.chen_graph import ResNetParams, resnet_size

    block = lambda m, first=0: 17 * m * m + 12 * m if not first else (17 + first) * m * m + 20 * m
    stages = [block(64, 1) + 2 * block(64), block(128, 6) + 129 * block(128), block(256, 6) + 195 * block(256),
              block(512, 6) + 2 * block(512)]
    assert stages == [215_808, 36_507_648, 219_363_328, 14_964_736]
    size = resnet_size(1000, ResNetParams())
    assert size["params"] == sum(stages) + 9_408 + 128 + 2_048_000 + 1_000 == 273_110_056
    assert size["param_bytes"] == 4 * 273_110_056 and size["layers"] == 998   # float32


def test_resnet_shapes():
    cfg = ResNetConfig(**TINY_RESNET)
    model = build_resnet(cfg)
    images, labels = random_images(cfg)
    assert model.stem(images).shape == (4, 4, 8, 8)
    widths = [block.conv3.out_channels for block in model.blocks]
    assert widths == [16, 16, 32, 64, 128]
    x = model.run_layers(model.stem(images))
    assert x.shape == (4, 128, 1, 1)
    assert model(images).shape == (4, 10) and resnet_loss(model(images), labels).shape == ()
    assert all(not m.inplace for m in model.modules() if isinstance(m, nn.ReLU))


def test_lstm_matches_torch_lstm():
    cfg = LSTMConfig(**TINY_LSTM, dtype="float64")
    torch.manual_seed(0)
    model = build_lstm(cfg)
    ref = nn.LSTM(cfg.input, cfg.hidden, cfg.layers, dtype=torch.float64)
    with torch.no_grad():
        for l, cell in enumerate(model.cells):
            for name, lin in (("ih", cell.ih), ("hh", cell.hh)):
                getattr(ref, f"weight_{name}_l{l}").copy_(lin.weight)
                getattr(ref, f"bias_{name}_l{l}").copy_(lin.bias)
    x, targets = random_sequence(cfg)
    hidden, _ = ref(x)                                           # [T, B, H]
    logits = model.classifier(hidden)                            # [T, B, classes]
    expected = sum(nn.functional.cross_entropy(logits[t], targets[t]) for t in range(cfg.steps))
    torch.testing.assert_close(model(x, targets), expected)


def test_lstm_rejects_policies_without_a_step_meaning():
    model = build_lstm(LSTMConfig(**TINY_LSTM))
    with pytest.raises(UsageError) as err:
        apply_step_plan(model, "selective")
    assert err.value.field == "policy"


@pytest.mark.parametrize("bad", ["steps", "hidden", "layers"])
def test_bad_lstm_sizes_name_the_field(bad):
    with pytest.raises(UsageError) as err:
        LSTMConfig(**{bad: 0})
    assert err.value.field == bad


def test_paper_size_resnet50_and_lstm_under_fake_tensors():
    """The paper's sizes (batch 32, 3×224×224; LSTM 4 layers × 1024, batch 64, 5000 classes; 8 of its 64
    steps here) trace under FakeTensorMode; ResNet-1000 and 64 steps are in benchmarks/bench_chen_fake.py."""
    with FakeTensorMode():
        cfg = ResNetConfig.for_depth(50)
        model = build_resnet(cfg)
        images, labels = random_images(cfg)
        logits = model(images)
        resnet_loss(logits, labels).backward()
        assert logits.shape == (32, 1000) and model.blocks[0].conv1.weight.grad.shape == (64, 64, 1, 1)
        lstm = build_lstm(LSTMConfig(steps=8))
        apply_step_plan(lstm, "segments:3")
        x, targets = random_sequence(lstm.cfg)
        lstm(x, targets).backward()
        assert x.shape == (8, 64, 50) and lstm.classifier.weight.grad.shape == (5000, 1024)


# --- recompute changes nothing ---------------------------------------------------------------------------------

def resnet_step(plan: str, dtype: str):
    cfg = ResNetConfig(**TINY_RESNET, dtype=dtype)
    torch.manual_seed(0)
    model = build_resnet(cfg)
    apply_plan(model, plan)
    images, labels = random_images(cfg, generator=torch.Generator().manual_seed(1))
    loss = resnet_loss(model(images), labels)
    loss.backward()
    return loss, {n: p.grad for n, p in model.named_parameters()}, dict(model.named_buffers())


def lstm_step(plan: str, dtype: str):
    cfg = LSTMConfig(**TINY_LSTM, dtype=dtype)
    torch.manual_seed(0)
    model = build_lstm(cfg)
    apply_step_plan(model, plan)
    x, targets = random_sequence(cfg, generator=torch.Generator().manual_seed(1))
    loss = model(x, targets)
    loss.backward()
    return loss, {n: p.grad for n, p in model.named_parameters()}, {}


def assert_same(ref, out):
    assert torch.equal(ref[0], out[0])
    for group in (1, 2):  # gradients; buffers (BN running statistics updated once per step)
        assert ref[group].keys() == out[group].keys()
        for name in ref[group]:
            assert torch.equal(ref[group][name], out[group][name]), name


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("plan", RESNET_PLANS)
def test_resnet_plans_bitwise_equal(plan, dtype):
    assert_same(resnet_step("none", dtype), resnet_step(plan, dtype))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("plan", LSTM_PLANS)
def test_lstm_plans_bitwise_equal(plan, dtype):
    assert_same(lstm_step("none", dtype), lstm_step(plan, dtype))
