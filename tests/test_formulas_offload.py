"""Break-even model of offload vs recompute (remat.formulas.offload): values against hand computations."""

from __future__ import annotations

import math

import pytest

from remat.errors import UsageError
from remat.formulas import korthikanti, offload


def test_transfer_is_latency_plus_bytes_over_bandwidth():
    assert offload.transfer_s(10**9, 4, 25e9, 1e-5) == pytest.approx(4e-5 + 0.04)
    assert offload.transfer_s(0, 0, 1.0) == 0.0


def test_hidden_when_transfer_fits_under_compute():
    link = offload.Link.symmetric(25e9)
    cost = offload.offload_cost(10**9, 1, forward_s=0.05, backward_s=0.10, link=link)  # 0.04 s each way
    assert cost.hidden and cost.exposed_s == 0.0
    assert cost.transfer_d2h_s == pytest.approx(0.04)


def test_excess_is_exposed_per_direction():
    link = offload.Link(bw_d2h=10e9, bw_h2d=20e9, t0_s=0.0)
    cost = offload.offload_cost(10**9, 1, forward_s=0.03, backward_s=0.06, link=link)
    # d2h 0.1 s vs 0.03 s forward -> 0.07 exposed; h2d 0.05 s vs 0.06 s backward -> 0
    assert cost.exposed_forward_s == pytest.approx(0.07)
    assert cost.exposed_backward_s == 0.0
    assert offload.exposed_offload_s(10**9, 1, 0.03, 0.06, link) == pytest.approx(0.07)


@pytest.mark.parametrize("recompute", [0.0, 0.005, 0.02, 0.3])
def test_breakeven_bandwidth_equalizes_costs(recompute):
    nbytes, tensors, fwd, bwd, t0 = 3 * 10**9, 20, 0.03, 0.06, 2e-5
    bw = offload.breakeven_bandwidth(nbytes, tensors, fwd, bwd, recompute, t0)
    exposed = offload.exposed_offload_s(nbytes, tensors, fwd, bwd, offload.Link.symmetric(bw, t0))
    assert exposed == pytest.approx(recompute, abs=1e-12)
    # a slightly slower link loses to recompute, a faster one wins
    assert offload.exposed_offload_s(nbytes, tensors, fwd, bwd, offload.Link.symmetric(bw * 0.99, t0)) > recompute
    if recompute > 0:
        assert offload.exposed_offload_s(nbytes, tensors, fwd, bwd, offload.Link.symmetric(bw * 1.01, t0)) < recompute


def test_breakeven_edge_cases():
    assert offload.breakeven_bandwidth(0, 0, 0.1, 0.2, 0.0) == 0.0
    assert math.isinf(offload.breakeven_bandwidth(10**6, 1000, 0.0, 0.0, 0.001, t0_s=1e-5))  # latency alone 10 ms


def test_layer_compute_uses_appendix_a_flops():
    s, b, h, rate = 2048, 1, 12288, 156e12
    t = offload.layer_compute_s(s, b, h, rate, t=8)
    assert t["forward_s"] == pytest.approx((24 * b * s * h * h + 4 * b * s * s * h) / 8 / rate)
    assert t["backward_s"] == pytest.approx(2 * t["forward_s"])
    assert t["selective_recompute_s"] == pytest.approx(korthikanti.core_attn_forward_flops(s, b, h) / 8 / rate)


@pytest.mark.parametrize("call", [
    lambda: offload.transfer_s(-1, 1, 1e9),
    lambda: offload.transfer_s(1, 1, 0.0),
    lambda: offload.Link(0.0, 1e9),
    lambda: offload.Link(1e9, 1e9, -1.0),
    lambda: offload.offload_cost(1, 1, -0.1, 0.1, offload.Link.symmetric(1e9)),
    lambda: offload.compute_s(10, 0.0),
])
def test_bad_input_raises_usage_error(call):
    with pytest.raises(UsageError):
        call()


# --- equal freed bytes --------------------------------------------------------------------------------------------

def test_selective_frees_the_core_attention_term_of_eq1():
    """s = 2048, b = 1, h = 12288, a = 96 (GPT-3 175B): 5as²b = 5·96·2048² = 2 013 265 920 bytes at t = 1, an
    eighth at t = 8 — the 5as/h term of Eq. 1 times sbh — in 3 tensors (softmax out, its mask, dropout out)."""
    s, b, h, a = 2048, 1, 12288, 96
    assert offload.freed_bytes(s, b, h, a, 1, False, "selective") == 2_013_265_920 == s * b * h * 5 * a * s // h
    assert offload.freed_bytes(s, b, h, a, 8, False, "selective") == 2_013_265_920 // 8
    assert offload.freed_copies("selective") == 3


def test_full_frees_the_whole_layer_less_its_input():
    """t = 1: sbh(34 + 5as/h) − 2sbh = sbh(32 + 5as/h) = 2048·12288·(32 + 80) bytes, in 14 − 1 = 13 tensors;
    t = 8: sbh(10 + 24/8 + 5as/(8h)) − 2sbh = sbh(11 + 10) bytes."""
    s, b, h, a = 2048, 1, 12288, 96
    sbh = s * b * h
    assert offload.freed_bytes(s, b, h, a, 1, False, "full") == sbh * 112
    assert offload.freed_bytes(s, b, h, a, 1, False, "full") == korthikanti.table2_bytes(s, b, h, a) - 2 * sbh
    assert offload.freed_bytes(s, b, h, a, 8, False, "full") == sbh * 21
    assert offload.freed_copies("full") == 13


def test_equal_bytes_comparison_against_hand_values():
    """10^9 bytes in 3 copies over 10 GB/s (t0 = 10 µs): 0.10003 s each way; forward 0.03 s, backward 0.06 s
    hide 0.03 and 0.06 -> exposed 0.07003 + 0.04003 = 0.11006 s, more than a 0.05 s recompute. Break-even:
    a₁ + r = 0.08 > a₂ = 0.06, so T* = (0.05 + 0.03 + 0.06)/2 = 0.07 s, BW* = 10^9 / (0.07 − 30 µs)."""
    link = offload.Link.symmetric(10e9, 10e-6)
    cmp = offload.equal_bytes("selective", 10**9, 3, 0.03, 0.06, 0.05, link)
    assert cmp.offload_exposed_s == pytest.approx(0.11006, rel=1e-12)
    assert cmp.breakeven_bytes_per_s == pytest.approx(1e9 / (0.07 - 30e-6), rel=1e-12)
    assert cmp.cheaper == "selective"
    fast = offload.equal_bytes("full", 10**9, 3, 0.03, 0.06, 0.05, offload.Link.symmetric(1e12, 10e-6))
    assert fast.cheaper == "offload" and fast.offload_exposed_s == 0.0


@pytest.mark.parametrize("call", [
    lambda: offload.freed_bytes(2048, 1, 4096, 32, recompute="none"),
    lambda: offload.freed_copies("offload"),
    lambda: offload.equal_bytes("full", 1, 1, 0.1, 0.1, -1.0, offload.Link.symmetric(1e9)),
])
def test_equal_bytes_bad_input_names_the_field(call):
    with pytest.raises(UsageError):
        call()
