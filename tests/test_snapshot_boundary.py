"""A persistent buffer the forward writes in place and then reads (an EMA statistic, a step counter) is copied when
its checkpointed region starts when it is at most SNAPSHOT_BYTES (256 KiB, remat.policies.region), so the recompute
starts from its value at the forward's start and the gradients are the unmodified model's bit for bit; one element
more and the recompute refuses, naming the buffer and the limit. Sizes at the limit, one element under and one
over, in float32 (4 bytes an element: 65,536 elements are 256 KiB)."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from remat import auto
from remat.errors import RecomputeError

LIMIT = 256 * 1024 // 4           # float32 elements in 256 KiB


class Counting(nn.Module):
    """tanh(lin(x) · c) where c, the first element of a ``numel``-element buffer, is incremented in place by every
    forward before it is read: a recompute that did not start from the forward's value would read c + 1."""

    def __init__(self, numel: int, persistent: bool = True):
        super().__init__()
        self.lin = nn.Linear(8, 8)
        self.register_buffer("count", torch.ones(numel), persistent=persistent)

    def forward(self, x):
        with torch.no_grad():
            self.count.add_(1.0)
        return torch.tanh(self.lin(x) * self.count[0])


def _grads(model, x, policy=None):
    m = copy.deepcopy(model)
    if policy is not None:
        auto.apply(m, policy)
    m(x).pow(2).sum().backward()
    return [p.grad for p in m.parameters()], m


def _model(numel: int, persistent: bool = True) -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(*[Counting(numel, persistent) for _ in range(2)])


@pytest.mark.parametrize("numel", [LIMIT - 1, LIMIT])
@pytest.mark.parametrize("policy", ["full", "selective"])
def test_a_written_buffer_up_to_256_kib_is_copied_and_the_gradients_are_bitwise(numel, policy):
    """65,535 and 65,536 elements (256 KiB exactly): recomputed from the copy; after one step the counter has moved
    once (1 + 1 = 2), as in the unmodified model."""
    model, x = _model(numel), torch.randn(4, 8)
    reference, _ = _grads(model, x)
    got, stepped = _grads(model, x, policy)
    assert all(torch.equal(a, b) for a, b in zip(got, reference))
    assert all(float(block.count[0]) == 2.0 for block in stepped)


@pytest.mark.parametrize("policy", ["full", "selective"])
def test_a_written_buffer_one_element_over_256_kib_is_refused_naming_it_and_the_limit(policy):
    """65,537 elements (256 KiB + 4 bytes) are not copied: the recompute refuses, naming the block, the buffer and
    the 256 KiB limit; the unmodified model (no recompute) trains."""
    model, x = _model(LIMIT + 1), torch.randn(4, 8)
    _grads(model, x)
    with pytest.raises(RecomputeError, match=r"^1: the forward wrote buffer count in place, which is not copied .*"
                                             r"over 256 KiB"):
        _grads(model, x, policy)


def test_a_small_non_persistent_buffer_written_in_place_is_refused():
    """A non-persistent buffer (a mask, a table: derived, not state) is never copied, however small (8 elements)."""
    model, x = _model(8, persistent=False), torch.randn(4, 8)
    with pytest.raises(RecomputeError, match="wrote buffer count in place, which is not copied"):
        _grads(model, x, "full")
