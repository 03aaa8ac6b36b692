"""The torch releases remat supports, and the one path a later release changes: torch 2.14's checkpoint can route
what its selective cache keeps through surrounding saved-tensor hooks (``respect_saved_tensors_hooks``, a default
announced to flip); remat's accounting and offload assume the cache stays out of them, so remat pins that."""

from __future__ import annotations

import warnings

import torch
from torch import nn

from remat.policies import checkpoint as ckpt
from remat.policies.checkpoint import SUPPORTED_TORCH, check_torch, checkpointed, legacy_sac_hooks


def test_supported_releases_pass_and_others_are_named():
    assert SUPPORTED_TORCH == ((2, 11), (2, 13))
    for version in ("2.11.0+cu126", "2.12.1", "2.13.0+cpu"):
        assert check_torch(version) is None
    for version in ("2.10.0", "2.14.0", "3.0.0a0+git1234"):
        assert f"this is torch {version}" in check_torch(version)
    assert check_torch(torch.__version__) is None          # the pinned build this suite runs on


def test_the_installed_release_imports_without_a_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert check_torch() is None


def test_a_checkpoint_that_can_route_the_cache_through_hooks_is_told_not_to():
    def later(function, *args, use_reentrant=None, context_fn=None, respect_saved_tensors_hooks=None, **kwargs):
        return function(*args)

    def current(function, *args, use_reentrant=None, context_fn=None, **kwargs):
        return function(*args)

    assert legacy_sac_hooks(later) == {"respect_saved_tensors_hooks": False}
    assert legacy_sac_hooks(current) == {}
    assert legacy_sac_hooks() == {}                          # torch 2.13 has no such argument


def test_selective_regions_pass_the_pin_and_plain_ones_do_not(monkeypatch):
    seen = []

    def later(function, *args, respect_saved_tensors_hooks=None, context_fn=None, **kwargs):
        seen.append(respect_saved_tensors_hooks)
        return function(*args)

    monkeypatch.setattr(ckpt, "checkpoint", later)
    monkeypatch.setattr(ckpt, "legacy_sac_hooks", lambda run=later: legacy_sac_hooks(run))
    lin, x = nn.Linear(4, 4), torch.randn(2, 4)
    checkpointed(lin, [lin])(x)
    checkpointed(lin, [lin], selective=lambda compiling=False: (None, None))(x)
    assert seen == [None, False]
