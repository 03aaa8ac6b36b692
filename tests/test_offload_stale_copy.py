"""Offload (remat.offload) never hands backward a stale host copy: a saved tensor written in place AFTER its
layer's copy went to the host — by code outside the layer, between forward and backward — is refused at
backward with a RecomputeError, as plain autograd refuses it ("modified by an inplace operation"); left alone,
the same step gives the plain gradients bit for bit. Through the hooks directly and through the offload policy."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from remat import auto
from remat.errors import RecomputeError
from remat.offload import OffloadHooks

REFUSED = "modified by an in-place operation after it was saved"


def _hooks_step(write_after: bool):
    """(t * w).sum() saves t (a non-leaf activation, 64 KiB) for w's gradient; the layer exits, so t's storage is
    copied to the host; then (``write_after``) the caller adds 1 to t in place; then backward."""
    w = torch.randn(16384, requires_grad=True)
    t = torch.randn(16384) * 1.0
    hooks = OffloadHooks("cpu", min_bytes=0)
    with hooks.layer():
        y = (t * w).sum()
    assert hooks.copies == 1 and hooks.offloaded_bytes == 16384 * 4     # on the host before the write
    expected = t.clone()
    if write_after:
        with torch.no_grad():
            t.add_(1.0)
    y.backward()
    return w.grad, expected


def test_a_saved_tensor_written_after_its_host_copy_is_refused_at_backward():
    grad, expected = _hooks_step(write_after=False)
    assert torch.equal(grad, expected)                 # d(Σ t·w)/dw = t, from the host copy
    with pytest.raises(RecomputeError, match=REFUSED):
        _hooks_step(write_after=True)


def test_plain_autograd_refuses_the_same_write():
    w, t = torch.randn(8, requires_grad=True), torch.randn(8) * 1.0
    y = (t * w).sum()
    with torch.no_grad():
        t.add_(1.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.backward()


class Keeps(nn.Module):
    """Two tanh layers; the model keeps the first one's output on itself (as a hook or a logger does). tanh saves
    its output, and the second layer's matmul saves it as its input: both are offloaded."""

    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList(nn.Sequential(nn.Linear(64, 64), nn.Tanh()) for _ in range(2))

    def forward(self, x):
        self.hidden = self.layers[0](x)
        return self.layers[1](self.hidden)


def _policy_step(model, x, policy=None, write=False):
    m = copy.deepcopy(model)
    if policy is not None:
        auto.apply(m, policy)
    loss = m(x).pow(2).sum()
    if write:
        with torch.no_grad():
            m.hidden.mul_(0.5)                          # outside both layers, after their forward
    loss.backward()
    return [p.grad for p in m.parameters()]


def test_the_offload_policy_refuses_an_activation_the_caller_writes_before_backward():
    torch.manual_seed(0)
    model, x = Keeps(), torch.randn(32, 64)
    reference = _policy_step(model, x)
    assert all(torch.equal(a, b) for a, b in zip(_policy_step(model, x, "offload"), reference))
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        _policy_step(model, x, write=True)                              # plain autograd refuses
    with pytest.raises(RecomputeError, match=REFUSED):
        _policy_step(model, x, "offload", write=True)
