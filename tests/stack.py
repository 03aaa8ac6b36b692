"""A model of ``n`` blocks in a row, the shape remat.auto finds blocks in: what the recompute tests build models
from (imported by test files; not a test file itself)."""

from __future__ import annotations

import torch
from torch import nn


class Stack(nn.Module):
    """``n`` blocks made by ``make()`` right after ``torch.manual_seed(seed)``, in an nn.ModuleList ``layers``, run
    in order."""

    def __init__(self, make, n: int = 3, seed: int = 0):
        super().__init__()
        torch.manual_seed(seed)
        self.layers = nn.ModuleList(make() for _ in range(n))

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x
