"""The numpy chain: plain backward vs finite differences, the store's byte counting, the executor's checks."""

from __future__ import annotations

import numpy as np
import pytest

from remat import chain, schedules
from remat.errors import UsageError
from remat.schedules import Backward, Forward, Loss, Schedule


@pytest.mark.parametrize("layers,width,hidden,batch", [(1, 3, 3, 2), (4, 5, 7, 3), (12, 6, 4, 4)])
def test_naive_backward_matches_central_differences(layers, width, hidden, batch):
    net = chain.make_chain(layers, width, hidden, dtype="float64", seed=layers)
    x = chain.make_input(net, batch, seed=7)
    _, grads = chain.naive_grads(net, x)
    fd = chain.finite_differences(net, x, probes=4, seed=3)
    sizes = [getattr(net, p).size for p in chain.PARAMS] + [x.size]
    assert len(fd) == sum(min(4, n) for n in sizes)  # probes of W1, b1, W2, b2 and x_0
    assert chain.fd_relative_error(grads, fd) < 1e-6


def test_fd_detects_a_wrong_gradient():
    net = chain.make_chain(3, 4, dtype="float64")
    x = chain.make_input(net, 2)
    _, grads = chain.naive_grads(net, x)
    fd = chain.finite_differences(net, x, probes=3)
    grads.W2 *= 1.01
    assert chain.fd_relative_error(grads, fd) > 1e-4


def test_loss_and_output_shapes():
    net = chain.make_chain(5, 6, hidden=9, seed=2)
    x = chain.make_input(net, 3)
    loss, grads = chain.naive_grads(net, x)
    y = chain.forward(net, x)
    assert y.shape == (3, 6) and y.dtype == np.float32
    assert loss == pytest.approx(0.5 * float(np.sum(y.astype(np.float64) ** 2)), rel=1e-6)
    assert grads.W1.shape == (5, 6, 9) and grads.W2.shape == (5, 9, 6) and grads.x.shape == (3, 6)


def test_store_counts_nbytes_and_peak():
    store = chain.ActivationStore()
    a, b = np.zeros((3, 5), np.float32), np.zeros((2, 7), np.float64)
    store.put(("x", 0), a)
    store.put(("h", 0), b)
    assert store.live_bytes == 60 + 112 == store.peak_bytes
    store.free(("x", 0))
    assert store.live_bytes == 112 and store.peak_bytes == 172
    assert store.get(("h", 0)) is b
    with pytest.raises(chain.ScheduleError):
        store.put(("h", 0), b)
    with pytest.raises(chain.ScheduleError):
        store.get(("x", 0))
    with pytest.raises(chain.ScheduleError):
        store.free(("x", 0))


def test_none_schedule_peak_is_every_activation_the_naive_backward_holds():
    net = chain.make_chain(7, 5, hidden=3, seed=4)
    x = chain.make_input(net, 2)
    result = chain.run(net, x, schedules.none(7))
    kept = [x] + [None] * 7
    hidden = []
    for i in range(7):  # recount independently: the arrays the plain backward keeps
        hidden.append(chain.layer_hidden(net, i, kept[i]))
        kept[i + 1] = chain.layer_output(net, i, hidden[-1])
    assert result.peak_bytes == sum(a.nbytes for a in kept + hidden)
    assert result.forwards == 7
    assert result.grads.bitwise_equal(chain.naive_grads(net, x)[1])


def _plain_ops(layers):
    return [Forward(i, keep_hidden=True) for i in range(layers)] + [Loss()] + \
           [Backward(i) for i in reversed(range(layers))]


@pytest.mark.parametrize("ops,message", [
    (_plain_ops(3)[:-1], "never back-propagated"),
    ([Forward(0, keep_hidden=True), Forward(1, keep_hidden=True), Forward(2, keep_hidden=True), Loss(),
      Backward(1)], "out of order"),
    ([Forward(0, keep_input=False), *_plain_ops(3)[1:]], "not stored"),
    ([Forward(0, keep_hidden=True), Forward(0, keep_hidden=True)], "stored twice"),
])
def test_executor_rejects_invalid_schedules(ops, message):
    net = chain.make_chain(3, 4)
    with pytest.raises(chain.ScheduleError, match=message):
        chain.run(net, chain.make_input(net, 2), Schedule("bad", "bad", None, 3, tuple(ops)))


def test_executor_rejects_a_leak_and_a_wrong_length():
    net = chain.make_chain(2, 4)
    x = chain.make_input(net, 2)
    # recomputing layer 0 but keeping its output x_1 (already back-propagated) leaves x_1 behind
    leak = [Forward(0, keep_hidden=False), Forward(1, keep_hidden=True), Loss(), Backward(1),
            Forward(0, keep_hidden=True, keep_output=True), Backward(0)]
    with pytest.raises(chain.ScheduleError, match=r"left in the store: \[\('x', 1\)\]"):
        chain.run(net, x, Schedule("leak", "bad", None, 2, tuple(leak)))
    with pytest.raises(chain.ScheduleError, match="is for 3 layers"):
        chain.run(net, x, schedules.none(3))


def test_bad_sizes_name_the_field():
    for kwargs, field in [({"layers": 0, "width": 4}, "layers"), ({"layers": 2, "width": 0}, "width"),
                          ({"layers": 2, "width": 4, "hidden": -1}, "hidden"),
                          ({"layers": 2, "width": 4, "dtype": "int32"}, "dtype")]:
        with pytest.raises(UsageError) as err:
            chain.make_chain(**kwargs)
        assert err.value.field == field
    with pytest.raises(UsageError) as err:
        chain.make_input(chain.make_chain(2, 4), 0)
    assert err.value.field == "batch"
    with pytest.raises(UsageError) as err:
        chain.finite_differences(chain.make_chain(2, 4), np.zeros((1, 4), np.float32))
    assert err.value.field == "dtype"


def test_bitwise_equal_sees_a_one_ulp_difference_in_any_gradient():
    """The comparator behind every schedule's "gradients bitwise equal" (a weaker np.allclose would pass all
    schedules and this test would fail): one unit in the last place anywhere makes two gradients unequal."""
    rng = np.random.default_rng(0)
    arrays = {name: rng.standard_normal(shape) for name, shape in
              (("W1", (2, 3, 4)), ("b1", (2, 4)), ("W2", (2, 4, 3)), ("b2", (2, 3)), ("x", (5, 3)))}
    base = chain.Gradients(**arrays)
    assert base.bitwise_equal(chain.Gradients(**{k: v.copy() for k, v in arrays.items()}))
    for name, a in arrays.items():
        moved = a.copy()
        moved.flat[-1] = np.nextafter(moved.flat[-1], np.inf)      # the next representable float64
        assert moved.flat[-1] != a.flat[-1] and abs(moved.flat[-1] - a.flat[-1]) < 1e-15
        assert not base.bitwise_equal(chain.Gradients(**{**arrays, name: moved})), name
