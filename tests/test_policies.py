"""Recompute changes nothing: every policy against ``none`` — bitwise loss and gradients, buffers, autocast,
frozen inputs, Python side effects — and plan parsing (remat.policies)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from remat.errors import UsageError
from remat.measure.saved import SavedTensorLog
from remat.models import build_model, from_name, lm_loss, random_tokens
from remat.policies import apply_plan, clear_plan, parse_plan, recomputing

PLANS = ["selective", "full", "offload", "uniform:2", "block:1", "segments:2", "full,selective,offload,none"]
CUDA = pytest.mark.gpu


def gpt_step(name: str, plan: str, dtype: str, device: str = "cpu", freeze_embedding: bool = False,
             **overrides):
    """Loss and gradients of one step, same weights, tokens and RNG for every plan."""
    cfg = from_name(name, layers=4, dtype=dtype, **overrides)
    torch.manual_seed(0)
    model = build_model(cfg, device)
    if freeze_embedding:
        model.embed.requires_grad_(False)
        model.head.weight = nn.Parameter(model.head.weight.detach().clone())  # untie: the head still trains
    apply_plan(model, plan)
    g = torch.Generator().manual_seed(1)
    tokens, targets = (torch.randint(0, cfg.vocab, (cfg.seq, cfg.micro_batch), generator=g).to(device)
                       for _ in range(2))
    torch.manual_seed(1234)  # dropout masks
    loss = lm_loss(model(tokens), targets)
    loss.backward()
    return loss.detach(), {n: p.grad for n, p in model.named_parameters() if p.requires_grad}


def assert_bitwise(ref, out):
    assert torch.equal(ref[0], out[0])
    assert ref[1].keys() == out[1].keys()
    for name in ref[1]:
        assert out[1][name] is not None, name
        assert torch.equal(ref[1][name], out[1][name]), name


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("plan", PLANS)
def test_gpt_plans_bitwise_equal_with_dropout(plan, dtype):
    assert from_name("gpt-tiny").dropout > 0
    assert_bitwise(gpt_step("gpt-tiny", "none", dtype), gpt_step("gpt-tiny", plan, dtype))


@pytest.mark.parametrize("plan", ["selective", "full"])
def test_gpt_sdpa_attention_with_dropout_bitwise_equal(plan):
    ref = gpt_step("gpt-tiny", "none", "float32", attention="sdpa")
    assert_bitwise(ref, gpt_step("gpt-tiny", plan, "float32", attention="sdpa"))


@pytest.mark.parametrize("plan", ["selective", "full", "offload", "uniform:2"])
def test_llama_plans_bitwise_equal(plan):
    assert_bitwise(gpt_step("llama-tiny", "none", "float32"), gpt_step("llama-tiny", plan, "float32"))


@pytest.mark.parametrize("plan", ["selective", "full", "uniform:2", "offload"])
def test_frozen_embedding_still_gives_layer_gradients(plan):
    ref = gpt_step("gpt-tiny", "none", "float32", freeze_embedding=True)
    out = gpt_step("gpt-tiny", plan, "float32", freeze_embedding=True)
    assert not any(name.startswith("embed.") for name in out[1])
    assert any(name.startswith("layers.0.") for name in out[1])
    assert_bitwise(ref, out)


# --- a toy model with a running-stat buffer, a Python side effect and an autocast probe ---------------------

class Core(nn.Module):
    """BatchNorm (running stats), a guarded and an unguarded call counter, and an autocast-dtype probe."""

    def __init__(self, d: int):
        super().__init__()
        self.bn = nn.BatchNorm1d(d)
        self.calls = 0             # guarded by recomputing(): a side effect that must fire once per step
        self.raw_calls = 0         # unguarded: counts every execution, recomputes included
        self.autocast: list[tuple[bool, torch.dtype | None]] = []

    def forward(self, x):
        if not recomputing():
            self.calls += 1
        self.raw_calls += 1
        dtype = torch.get_autocast_dtype("cpu") if torch.is_autocast_enabled("cpu") else None
        self.autocast.append((recomputing(), dtype))
        return torch.tanh(self.bn(x.float())).to(x.dtype)


class Attn(nn.Module):
    def __init__(self, d: int):
        super().__init__()
        self.core = Core(d)


class ToyLayer(nn.Module):
    def __init__(self, d: int):
        super().__init__()
        self.fc = nn.Linear(d, d)
        self.attn = Attn(d)

    def forward(self, x):
        return x + self.attn.core(self.fc(x))


class Toy(nn.Module):
    def __init__(self, d: int = 8, layers: int = 3):
        super().__init__()
        self.layers = nn.ModuleList(ToyLayer(d) for _ in range(layers))

    def run_layers(self, x):
        for layer in self.layers:
            x = layer(x)
        return x

    def forward(self, x):
        return self.run_layers(x)


def toy_step(plan: str, autocast: bool = False):
    torch.manual_seed(0)
    model = Toy()
    apply_plan(model, plan)
    x = torch.randn(16, 8)  # requires_grad False: the first layer's input has no gradient
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        loss = model(x).float().pow(2).mean()
    loss.backward()
    return model, loss


@pytest.mark.parametrize("plan", PLANS[:-1] + ["full,selective,offload"])
def test_running_stats_update_once_and_side_effects_fire_once(plan):
    ref, ref_loss = toy_step("none")
    model, loss = toy_step(plan)
    assert torch.equal(ref_loss, loss)
    for a, b in zip(ref.layers, model.layers):
        for name, buf in a.attn.core.bn.named_buffers():
            assert torch.equal(buf, dict(b.attn.core.bn.named_buffers())[name]), name
        assert b.attn.core.bn.num_batches_tracked.item() == 1
        assert b.attn.core.calls == 1
        assert torch.equal(a.fc.weight.grad, b.fc.weight.grad)


def test_recompute_reruns_forward_code():
    """Why recomputing() exists: torch re-executes forward Python code when it recomputes."""
    model, _ = toy_step("full")
    assert [layer.attn.core.raw_calls for layer in model.layers] == [2, 2, 2]
    model, _ = toy_step("none")
    assert [layer.attn.core.raw_calls for layer in model.layers] == [1, 1, 1]


@pytest.mark.parametrize("plan", ["full", "selective", "uniform:3"])
def test_autocast_dtype_inside_recompute_equals_forward(plan):
    model, _ = toy_step(plan, autocast=True)
    for layer in model.layers:
        seen = layer.attn.core.autocast
        assert [r for r, _ in seen] == [False, True]  # one forward, one recompute
        assert {d for _, d in seen} == {torch.bfloat16}


def test_offload_moves_every_layer_activation_off_the_log():
    cfg = from_name("gpt-tiny", layers=2)
    logs = {}
    for plan in ("none", "offload"):
        torch.manual_seed(0)
        model = build_model(cfg)
        apply_plan(model, plan)
        with SavedTensorLog(model) as logs[plan]:
            lm_loss(model(random_tokens(cfg)), random_tokens(cfg))
    in_layers = [r for r in logs["none"].records if r.module.startswith("layers.") and not r.is_parameter]
    assert logs["offload"].bytes_per_layer(2) == [0, 0]
    assert model.remat_offload.bytes == sum(r.nbytes for r in in_layers)
    assert model.remat_offload.simulated  # CPU device: a host memcpy


def test_apply_plan_replaces_and_clears():
    cfg = from_name("gpt-tiny", layers=3)
    model = build_model(cfg)
    tokens = random_tokens(cfg)

    def saved():
        with SavedTensorLog(model) as log:
            model(tokens).sum()
        return log.total_bytes()
    none = saved()
    apply_plan(model, "uniform:3")
    grouped = saved()
    apply_plan(model, "selective")
    selective = saved()
    clear_plan(model)
    assert saved() == none > selective > grouped
    assert "forward" not in model.layers[0].attn.core.__dict__ and "run_layers" not in model.__dict__


@pytest.mark.parametrize("spec, policies, groups", [
    ("full", ["full"] * 5, []),
    ("uniform:2", ["full"] * 5, [(0, 2), (2, 4)]),          # last chunk of 1 = per-layer full
    ("uniform:5", ["full"] * 5, [(0, 5)]),
    ("block:2", ["full", "full", "none", "none", "none"], []),
    ("block:0", ["none"] * 5, []),
    ("segments:2", ["full", "full", "full", "none", "none"], [(0, 3)]),  # array_split: [3, 2], last kept
    ("segments:3", ["full", "full", "full", "full", "none"], [(0, 2), (2, 4)]),  # [2, 2, 1]
    ("none,full,selective,offload,none", ["none", "full", "selective", "offload", "none"], []),
])
def test_parse_plan(spec, policies, groups):
    plan = parse_plan(spec, 5)
    assert list(plan) == policies and list(plan.groups) == groups


@pytest.mark.parametrize("spec", ["sometimes", "uniform:0", "block:6", "segments:x", "segments:1", "full,none",
                                  "uniform:-1"])
def test_parse_plan_rejects(spec):
    with pytest.raises(UsageError) as exc:
        parse_plan(spec, 5)
    assert exc.value.field == "policy"


@CUDA
@pytest.mark.parametrize("plan", ["selective", "full", "offload"])
def test_cuda_plans_bitwise_equal_with_dropout(plan):
    assert_bitwise(gpt_step("gpt-tiny", "none", "float32", "cuda"), gpt_step("gpt-tiny", plan, "float32", "cuda"))


def test_one_segment_is_a_usage_error():
    # segments:1 would be Chen's one kept segment: nothing checkpointed, silently equal to none
    with pytest.raises(UsageError) as err:
        parse_plan("segments:1", 8)
    assert err.value.field == "policy" and '"full"' in str(err.value) and "k ≥ 2" in str(err.value)
    assert parse_plan("segments:2", 8).groups == ((0, 4),)
