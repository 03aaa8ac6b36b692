"""Plans for a model trained under torch.compile (remat.auto.plan ``compiled=True``: fused rates,
remat.timemodel.roofline ``Rates.fused``): the step time is the GEMMs' roofline and one read of every other op's
inputs, a tensor plan keeps only outputs whose recompute costs FLOPs, and the plan applied under torch.compile
trains with the plain model's gradients."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from remat import auto
from remat.errors import UsageError
from remat.models.toys import BlockNet, ConvBlock, TransformerBlock
from remat.timemodel.gpus import GPUS

FLOP_OPS = {"mm", "addmm", "bmm", "baddbmm", "_scaled_dot_product_flash_attention_for_cpu", "convolution"}


class _MLPs(nn.Module):
    def __init__(self, h: int, layers: int):
        super().__init__()
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(h, 4 * h), nn.ReLU(), nn.Linear(4 * h, h))
                                    for _ in range(layers))

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return x


def _plan(net, x, budget, **options):
    return auto.plan(net, (x,), budget=budget, loss_fn=lambda o: o.sum(), optimizer_state_bytes=0, **options)


def test_a_compiled_step_is_its_gemms_roofline():
    """Hand derivation: L blocks Linear(h, 4h) → ReLU → Linear(4h, h) on x [n, h] (float32, x needs no grad).
    Forward: 2 addmm per block; backward: per linear a weight-gradient mm and an input-gradient mm, except the
    first linear's input gradient (x needs none) — 4L − 1 mm. Each GEMM at the roofline max(2mkn / FLOP/s,
    4(mk + kn + mn [+ n bias]) / bytes/s) on the H100 preset's FP32 rates. Fused, each op without FLOPs reads its
    inputs once and writes nothing: per block the ReLU reads [n, 4h], its backward the gradient and its output
    (2 × [n, 4h]), the two bias gradients [n, h] and [n, 4h]; the loss's sum reads [n, h] — (17L + 1)·n·h floats
    at bytes/s (in eager they also write, and each op pays its launch)."""
    h, layers, n = 64, 3, 512
    torch.manual_seed(0)
    net, x = _MLPs(h, layers), torch.randn(n, h)
    card = GPUS["h100-80gb"]
    flops_s, bytes_s = card.fp32_flops * card.achievable, card.memory_bandwidth * card.memory_efficiency

    def gemm(m, k, n_, bias=False):
        return max(2 * m * k * n_ / flops_s, 4 * (m * k + k * n_ + m * n_ + (n_ if bias else 0)) / bytes_s)
    forward = layers * (gemm(n, h, 4 * h, True) + gemm(n, 4 * h, h, True))
    backward = layers * (gemm(n, 4 * h, h) + gemm(4 * h, n, h) + gemm(n, h, 4 * h) + gemm(h, n, 4 * h)) \
        - gemm(n, 4 * h, h)
    fused = (17 * layers + 1) * n * h * 4 / bytes_s
    compiled = _plan(net, x, "1GiB", choices=("none",), compiled=True)
    assert compiled.plan.step_time_s == pytest.approx(forward + backward + fused, rel=1e-9)
    assert "torch.compile" in str(compiled)
    assert _plan(net, x, "1GiB", choices=("none",)).plan.step_time_s > 1.1 * (forward + backward)


@pytest.mark.slow
def test_a_compiled_tensor_plan_keeps_only_what_costs_flops_to_recompute():
    """From the every-block-full peak to no recompute, a compiled plan's kept sets hold GEMM / attention outputs
    only (the ops a compiled plan is matched on: remat.auto.tensors.KeptSet), while the eager plan keeps some
    elementwise output."""
    torch.manual_seed(0)
    net, x = BlockNet(TransformerBlock), torch.randn(2, 64, 64)
    full = _plan(net, x, "1GiB", choices=("full",)).plan.peak_bytes
    none = _plan(net, x, "1GiB", choices=("none",)).plan.peak_bytes
    kept = {False: set(), True: set()}
    for fraction in (0.2, 0.4, 0.6, 0.8):
        budget = int(full + (none - full) * fraction)
        for compiled in (False, True):
            result = _plan(net, x, budget, choices=("none", "selective", "full"), granularity="tensor",
                           compiled=compiled)
            kept[compiled] |= {k.names[i] for k in result.kept_sets if k is not None for i in k.keep}
    assert kept[True] and kept[True] <= FLOP_OPS
    assert kept[False] - FLOP_OPS


@pytest.mark.slow
def test_a_compiled_tensor_plan_trains_under_torch_compile():
    """The compiled plan at a budget between full and none, applied and compiled (aot_eager), gives the plain
    model's gradients bit for bit."""
    torch.manual_seed(0)
    net, x = BlockNet(TransformerBlock), torch.randn(2, 64, 64)
    full = _plan(net, x, "1GiB", choices=("full",)).plan.peak_bytes
    none = _plan(net, x, "1GiB", choices=("none",)).plan.peak_bytes
    result = _plan(net, x, (full + none) // 2, choices=("none", "selective", "full"), granularity="tensor",
                   compiled=True)
    assert set(result.policies) - {"none"}
    model = copy.deepcopy(net)
    auto.apply(model, result)
    compiled = torch.compile(model, backend="aot_eager")
    compiled(x).sum().backward()
    net(x).sum().backward()
    assert all(torch.equal(a.grad, b.grad) for a, b in zip(net.parameters(), model.parameters()))


@pytest.mark.parametrize("value", [1, "yes", None])
def test_compiled_must_be_a_bool(value):
    with pytest.raises(UsageError, match="compiled"):
        _plan(_MLPs(8, 1), torch.randn(4, 8), "1GiB", compiled=value)


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
@pytest.mark.slow
def test_a_compiled_tensor_plan_of_a_grouped_head_llama_trains_under_torch_compile(attention):
    """A transformers Llama with grouped K/V heads (repeat_kv's reshape is traced as ``_unsafe_view``) and with
    eager attention: under compile the ops between GEMMs differ from eager's, so a compiled plan (kept sets of
    GEMM / attention outputs only) is matched on those ops; gradients bitwise the plain compiled model's."""
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(hidden_size=64, intermediate_size=176, num_hidden_layers=3,
                                      num_attention_heads=4, num_key_value_heads=2, vocab_size=256, use_cache=False,
                                      attn_implementation=attention)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config)
    plain = copy.deepcopy(model)
    batch = {"input_ids": torch.randint(0, 256, (2, 64)), "labels": torch.randint(0, 256, (2, 64))}
    ends = [auto.plan(model, (), batch, budget="1GiB", choices=(c,), optimizer_state_bytes=0).plan.peak_bytes
            for c in ("full", "selective")]     # between them: kept sets smaller than selective's
    result = auto.plan(model, (), batch, budget=sum(ends) // 2, choices=("none", "selective", "full"),
                       granularity="tensor", compiled=True, optimizer_state_bytes=0)
    assert any(k is not None for k in result.kept_sets), result.policies
    auto.apply(model, result)
    torch.compile(model, backend="aot_eager")(**batch).loss.backward()
    torch.compile(plain, backend="aot_eager")(**batch).loss.backward()
    assert all(torch.equal(a.grad, b.grad) for a, b in zip(model.parameters(), plain.parameters()))


def test_a_compiled_plan_with_room_to_spare_recomputes_nothing():
    """Fused, recomputing a GroupNorm or a ReLU still reads its inputs again: it costs time, not nothing. So at the
    budget of no recompute a compiled tensor plan keeps every block whole (all "none"), and one byte less makes
    some block recompute; priced at 0 (the old fused rates) any mix of selective tied with "none"."""
    torch.manual_seed(0)
    net, x = BlockNet(lambda: ConvBlock(16, 4), 4, 16), torch.randn(2, 16, 16, 16)
    none = _plan(net, x, "1GiB", choices=("none",), compiled=True).plan
    choices = dict(choices=("none", "selective", "full"), granularity="tensor", compiled=True)
    roomy = _plan(net, x, none.peak_bytes, **choices)
    assert set(roomy.policies) == {"none"} and roomy.plan.step_time_s == pytest.approx(none.step_time_s)
    tight = _plan(net, x, none.peak_bytes - 1, **choices)
    assert set(tight.policies) != {"none"} and tight.plan.step_time_s > none.step_time_s
