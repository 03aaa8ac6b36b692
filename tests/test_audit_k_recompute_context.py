"""A recompute whose captured contexts cannot all be entered (remat.policies.recompute_context, a region recomputed
twice): refused with one RecomputeError naming the region, and nothing of the failed recompute stays behind — the
contexts entered before the one that failed are exited, and ``recomputing()`` is False again."""

from __future__ import annotations

import contextlib

import pytest
import torch
from torch import nn

from remat.errors import RecomputeError
from remat.policies import checkpointed, recompute_context, recomputing


class Depth:
    """A context that can be entered again: counts how deep it is entered now, and how often in all."""

    def __init__(self):
        self.depth, self.entries = 0, 0

    def __enter__(self):
        self.depth, self.entries = self.depth + 1, self.entries + 1

    def __exit__(self, *exc):
        self.depth -= 1


@contextlib.contextmanager
def _once():
    yield


def test_a_context_that_enters_once_leaves_nothing_entered_when_the_second_recompute_is_refused():
    # two captured contexts, in order: a re-enterable one, then a @contextmanager one (entered once). The first
    # recompute enters both; the second enters the first, fails on the second, and must exit the first again
    torch.manual_seed(0)
    lin, depth = nn.Linear(4, 4), Depth()
    run = checkpointed(lin, [lin], name="blk")
    with recompute_context(lambda: depth), recompute_context(_once):
        loss = run(torch.randn(3, 4, requires_grad=True)).tanh().sum()
    loss.backward(retain_graph=True)
    assert (depth.depth, depth.entries, recomputing()) == (0, 1, False)
    with pytest.raises(RecomputeError, match=r"^blk: the context recompute_context captured in forward could not"):
        loss.backward()
    assert (depth.depth, depth.entries) == (0, 2)
    assert not recomputing()
