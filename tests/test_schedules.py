"""Every schedule's gradients are bitwise the plain backward's; Revolve's counted extra forwards are the
binomial minimum, which an exhaustive search over all slot strategies confirms for small chains."""

from __future__ import annotations

from collections import deque
from math import comb

import pytest

from remat import chain, schedules
from remat.errors import UsageError
from remat.formulas import revolve as binomial
from remat.schedules import Backward, Forward, Loss

LAYERS = [1, 2, 3, 5, 8, 13, 32, 64]


def _setup(layers, dtype="float64"):
    net = chain.make_chain(layers, width=6, hidden=5, dtype=dtype, seed=layers)  # d' ≠ d on purpose
    x = chain.make_input(net, batch=3, seed=layers + 100)
    return net, x, chain.naive_grads(net, x)[1]


@pytest.mark.parametrize("layers", LAYERS)
def test_every_schedule_is_bitwise_the_plain_backward(layers):
    net, x, reference = _setup(layers)
    fd = chain.finite_differences(net, x, probes=3, seed=layers)
    assert chain.fd_relative_error(reference, fd) < 1e-6
    found = [schedules.none(layers), schedules.sqrt(layers),
             *(schedules.segments(layers, k) for k in range(1, layers + 1)),
             *(schedules.recursive(layers, k) for k in (1, 2, 3)),
             *(schedules.revolve(layers, s) for s in (1, 2, 3, 5, layers))]
    for schedule in found:
        result = chain.run(net, x, schedule)
        assert result.grads.bitwise_equal(reference), schedule.name
        if schedule.family in ("segments", "sqrt"):  # all but the last (⌊L/k⌋-layer) segment run twice
            assert result.forwards == 2 * layers - layers // schedule.param, schedule.name


def test_float32_gradients_are_bitwise_too():
    net, x, reference = _setup(13, dtype="float32")
    for schedule in schedules.catalogue(13).values():
        assert chain.run(net, x, schedule).grads.bitwise_equal(reference), schedule.name


def test_schedules_are_data():
    s = schedules.segments(5, 2)
    assert s.ops == (Forward(0, keep_input=True), Forward(1, keep_input=False), Forward(2, keep_input=False),
                     Forward(3, True, True, True), Forward(4, True, True, True), Loss(), Backward(4), Backward(3),
                     Forward(0, True, True, True), Forward(1, True, True, True), Forward(2, True, True, False),
                     Backward(2), Backward(1), Backward(0))
    assert schedules.none(4).ops == schedules.segments(4, 1).ops
    assert schedules.sqrt(10).param == 4 and schedules.sqrt(16).param == 4 and schedules.sqrt(17).param == 5


def brute_force_advances(l: int, s: int) -> int:
    """Minimal advances to reverse l steps with s slots (x_0 in one), by 0-1 BFS over every strategy.

    State: (working position p or −1, set of slot positions, e = steps not yet reversed). Moves: advance
    (cost 1), snapshot p into a free slot, restore a slot, free a slot, reverse step e−1 when p = e−1.
    """
    start = (0, frozenset({0}), l)
    dist = {start: 0}
    queue = deque([start])
    while queue:
        state = queue.popleft()
        p, held, e = state
        d = dist[state]
        if e == 0:
            return d
        moves = [(0, (q, held, e)) for q in held] + [(0, (p, held - {q}, e)) for q in held]
        if p >= 0 and p + 1 < e:
            moves.append((1, (p + 1, held, e)))
        if p >= 0 and p not in held and len(held) < s:
            moves.append((0, (p, held | {p}, e)))
        if p == e - 1:
            moves.append((0, (-1, frozenset(q for q in held if q < e - 1), e - 1)))
        for cost, new in moves:
            if d + cost < dist.get(new, 1 << 30):
                dist[new] = d + cost
                (queue.appendleft if cost == 0 else queue.append)(new)
    raise AssertionError("unreachable")


@pytest.mark.parametrize("s", [1, 2, 3, 4])
def test_binomial_minimum_equals_exhaustive_search(s):
    for l in range(1, 11 if s <= 2 else 9):
        assert brute_force_advances(l, s) == binomial.extra_forwards(l, s), (l, s)


def test_griewank_example_and_beta():
    assert binomial.repetitions(10, 2) == 3
    assert binomial.extra_forwards(10, 2) == 20
    assert binomial.beta(2, 3) == comb(5, 2) == 10 and binomial.beta(3, -1) == 0


def test_dp_table_equals_closed_form():
    table, _ = binomial.advance_table(200, 10)
    for s in range(1, 11):
        for l in range(1, 201):
            assert table[l, s] == binomial.extra_forwards(l, s), (l, s)


def test_revolve_counted_forwards_and_peak():
    from remat.formulas import chen as formulas
    for l in range(1, 41):
        net = chain.make_chain(l, width=3, hidden=2, seed=l)
        x = chain.make_input(net, batch=2)
        x_bytes, h_bytes = formulas.activation_bytes(2, 3, 2, 4)
        for s in range(1, 9):
            result = chain.run(net, x, schedules.revolve(l, s))
            assert result.forwards - l == binomial.extra_forwards(l, s), (l, s)
            assert result.peak_bytes == formulas.revolve_peak_bytes_bound(l, s, x_bytes, h_bytes), (l, s)


def test_bad_schedule_parameters_name_the_field():
    for build, field in [(lambda: schedules.segments(4, 5), "k"), (lambda: schedules.segments(4, 0), "k"),
                         (lambda: schedules.revolve(4, 0), "slots"), (lambda: schedules.recursive(4, 0), "k"),
                         (lambda: schedules.none(0), "layers"), (lambda: binomial.repetitions(0, 2), "steps")]:
        with pytest.raises(UsageError) as err:
            build()
        assert err.value.field == field
