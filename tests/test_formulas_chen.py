"""Closed forms of remat.formulas.chen predict the store's counts exactly (bytes, forwards), and the depth
sweep's fitted exponents are Chen's: none ~ L, sqrt ~ √L, recursive ~ log L."""

from __future__ import annotations

import math

import numpy as np
import pytest

from remat import chain, schedules
from remat.errors import UsageError
from remat.experiments import chen as experiments
from remat.analysis import chen2016 as chen_summary
from remat.formulas import chen as formulas

CONFIGS = [  # batch, width, hidden, dtype
    (4, 8, 8, "float32"), (3, 5, 11, "float64"), (2, 7, 3, "float16"),
]


@pytest.mark.parametrize("batch,width,hidden,dtype", CONFIGS)
def test_segments_peak_and_forwards_equal_counted(batch, width, hidden, dtype):
    x_bytes, h_bytes = formulas.activation_bytes(batch, width, hidden, np.dtype(dtype).itemsize)
    for layers in [*range(1, 21), 37, 64]:
        net = chain.make_chain(layers, width, hidden, dtype=dtype, seed=layers)
        x = chain.make_input(net, batch)
        none = chain.run(net, x, schedules.none(layers))
        assert none.peak_bytes == formulas.none_peak_bytes(layers, x_bytes, h_bytes)
        for k in range(1, layers + 1):
            result = chain.run(net, x, schedules.segments(layers, k))
            assert result.peak_bytes == formulas.segments_peak_bytes(layers, k, x_bytes, h_bytes), (layers, k)
            assert result.forwards == formulas.segments_forwards(layers, k) == 2 * layers - layers // k


def test_segments_peak_is_the_max_over_live_segments():
    # the closed form's two-term max equals the per-segment definition it was derived from
    for layers in range(1, 60):
        for k in range(1, layers + 1):
            sizes = formulas.segment_sizes(layers, k)
            assert sum(sizes) == layers and max(sizes) - min(sizes) <= 1
            by_segment = max((j + 1) * 3 + n * (3 + 5) for j, n in enumerate(sizes))
            assert formulas.segments_peak_bytes(layers, k, 3, 5) == by_segment


@pytest.mark.parametrize("k", [1, 2, 3])
def test_recursive_peak_and_forwards_equal_counted(k):
    x_bytes, h_bytes = formulas.activation_bytes(2, 4, 6, 4)
    for layers in range(1, 70):
        net = chain.make_chain(layers, 4, 6, seed=layers)
        result = chain.run(net, chain.make_input(net, 2), schedules.recursive(layers, k))
        assert result.peak_bytes == formulas.recursive_peak_bytes(layers, k, x_bytes, h_bytes), (layers, k)
        assert result.forwards == formulas.recursive_forwards(layers, k), (layers, k)


def test_recursive_closed_forms_at_powers_of_two():
    for p in range(0, 11):
        n = 2 ** p
        assert formulas.recursive_peak_bytes(n, 1, 10, 7) == (p + 2) * 10 + 7
        assert formulas.recursive_forwards(n, 1) == n + n * p // 2
        assert formulas.chen_recursive_memory(n, 1) == pytest.approx(p)
    assert formulas.chen_recursive_memory(9, 2) == pytest.approx(4)


def test_optimal_k_is_the_argmin_of_counted_peaks():
    layers, batch, width, hidden = 30, 2, 4, 8
    net = chain.make_chain(layers, width, hidden)
    x = chain.make_input(net, batch)
    counted = {k: chain.run(net, x, schedules.segments(layers, k)).peak_bytes for k in range(1, layers + 1)}
    best = min(counted, key=lambda k: (counted[k], k))
    x_bytes, h_bytes = formulas.activation_bytes(batch, width, hidden, 4)
    assert formulas.optimal_segments(layers, x_bytes, h_bytes) == best
    # the continuous optimum √(L(x+h)/x) is within 15% of the integer optimum's memory (L ≥ 16)
    for layers in range(16, 300):
        for x_b, h_b in [(4, 4), (4, 8), (8, 2)]:
            k_star = min(layers, round(formulas.optimal_segments_approx(layers, x_b, h_b)))
            k_opt = formulas.optimal_segments(layers, x_b, h_b)
            ratio = formulas.segments_peak_bytes(layers, k_star, x_b, h_b) / \
                formulas.segments_peak_bytes(layers, k_opt, x_b, h_b)
            assert 1 <= ratio <= 1.15


def test_sqrt_rounds_up():
    assert [formulas.sqrt_segments(n) for n in (1, 2, 4, 5, 9, 10, 64, 65, 512)] == [1, 2, 2, 3, 3, 4, 8, 9, 23]
    assert all(formulas.sqrt_segments(n) == math.ceil(math.sqrt(n)) for n in range(1, 5000))


def test_bad_k_names_the_field():
    with pytest.raises(UsageError) as err:
        formulas.segments_peak_bytes(4, 5, 1, 1)
    assert err.value.field == "k" and "layers = 4" in str(err.value)
    with pytest.raises(UsageError) as err:
        formulas.segments_forwards(0, 1)
    assert err.value.field == "layers"


@pytest.fixture(scope="module")
def depth_table():
    return experiments.depth_sweep(experiments.DepthParams(depths=[2, 4, 8, 16, 32, 64, 128, 256, 512]))


def test_depth_sweep_counts_equal_closed_forms(depth_table):
    exact = depth_table[depth_table["peak_formula"] == "exact"]
    assert set(exact["family"]) == {"none", "sqrt", "recursive"}
    assert (exact["peak_bytes"] == exact["peak_bytes_formula"]).all()
    assert (depth_table["forwards"] == depth_table["forwards_formula"]).all()
    bound = depth_table[depth_table["peak_formula"] == "bound"]
    assert (bound["peak_bytes"] <= bound["peak_bytes_formula"]).all()


def test_depth_exponents_are_chens(depth_table):
    fits = chen_summary.depth_fits(depth_table).set_index("family")
    assert 0.95 <= fits.loc["none", "exponent"] <= 1.05
    assert 0.45 <= fits.loc["sqrt", "exponent"] <= 0.55
    x_bytes = int(depth_table["x_bytes"].iloc[0])
    for family in ("recursive", "revolve"):  # peak = a + b·log2 L exactly: one checkpoint per doubling
        assert fits.loc[family, "r2_log2"] > 0.999
        assert fits.loc[family, "bytes_per_doubling"] == pytest.approx(x_bytes)
        part = depth_table[depth_table["family"] == family]
        assert (part["peak_bytes"] / np.log2(part["layers"])).max() <= 3 * x_bytes + int(part["h_bytes"].iloc[0])
    # recursive and Revolve hold the same memory here; Revolve (optimal) never needs more forwards
    rec = depth_table[depth_table["family"] == "recursive"].set_index("layers")
    rev = depth_table[depth_table["family"] == "revolve"].set_index("layers")
    assert (rev["peak_bytes"] == rec["peak_bytes"]).all() and (rev["forwards"] <= rec["forwards"]).all()


def test_fit_loglog_exponent_recovers_a_power():
    x = np.array([2, 4, 8, 16, 32])
    assert chen_summary.fit_loglog_exponent(x, 3 * x ** 0.5) == pytest.approx(0.5)
    slope, r2 = chen_summary.fit_log2_growth(x, 5 + 7 * np.log2(x))
    assert slope == pytest.approx(7) and r2 == pytest.approx(1)


def test_fits_agree_with_scipy_linregress_on_noisy_data():
    """The fits are centred-sum least squares; scipy.stats.linregress is the second method (noisy, so r² < 1)."""
    from scipy import stats
    rng = np.random.default_rng(1)
    x = np.array([2.0, 4, 8, 16, 32, 64])
    y = 5 + 7 * np.log2(x) + rng.normal(0, 2, x.size)
    ref = stats.linregress(np.log2(x), y)
    assert chen_summary.fit_log2_growth(x, y) == pytest.approx((ref.slope, ref.rvalue ** 2), rel=1e-12)
    y = 3 * x ** 0.5 * np.exp(rng.normal(0, 0.1, x.size))
    assert chen_summary.fit_loglog_exponent(x, y) == pytest.approx(stats.linregress(np.log(x), np.log(y)).slope)
    assert math.isnan(chen_summary.fit_log2_growth(x, np.full(x.size, 3.0))[1])   # r of a flat line: undefined
