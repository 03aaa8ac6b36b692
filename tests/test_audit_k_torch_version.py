"""The torch-version guard's warning (remat.policies.check_torch): given once by the import-time call, for the
installed release only; a release asked about by name gets its text back and no warning."""

from __future__ import annotations

import warnings

import pytest
import torch

from remat.policies.checkpoint import check_torch


def test_an_installed_release_outside_the_supported_range_warns_and_a_named_one_does_not(monkeypatch):
    monkeypatch.setattr(torch, "__version__", "2.10.0+cpu")
    with pytest.warns(UserWarning, match=r"^remat supports torch 2\.11–2\.13; this is torch 2\.10\.0\+cpu: "):
        assert "this is torch 2.10.0+cpu" in check_torch()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert "this is torch 2.14.1" in check_torch("2.14.1")
