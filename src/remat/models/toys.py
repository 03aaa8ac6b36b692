"""Small eager models the tensor-plan tests and benchmark measure (benchmarks/bench_tensor_plans.py): a pre-norm
transformer block, a residual conv–GroupNorm block, and a stack of either with a linear head.

    net = BlockNet(lambda: TransformerBlock(256, 4), 12, width=256)     # loss: net(x) (a sum)
"""

from __future__ import annotations

import torch
from torch import nn


class TransformerBlock(nn.Module):
    """Pre-norm: x + attention(LayerNorm(x)), then + MLP(LayerNorm(·)) with GELU, 4·d wide."""

    def __init__(self, d: int = 64, heads: int = 4):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        y = self.ln1(x)
        x = x + self.attn(y, y, y, need_weights=False)[0]
        return x + self.fc2(torch.nn.functional.gelu(self.fc1(self.ln2(x))))


class ConvBlock(nn.Module):
    """relu(x + GN(conv(relu(GN(conv(x)))))), 3×3 convolutions, ``c`` channels in ``groups`` groups."""

    def __init__(self, c: int = 16, groups: int = 4):
        super().__init__()
        self.conv1, self.conv2 = nn.Conv2d(c, c, 3, padding=1), nn.Conv2d(c, c, 3, padding=1)
        self.gn1, self.gn2 = nn.GroupNorm(groups, c), nn.GroupNorm(groups, c)

    def forward(self, x):
        return torch.relu(x + self.gn2(self.conv2(torch.relu(self.gn1(self.conv1(x))))))


class BlockNet(nn.Module):
    """``n`` blocks made by ``make()`` in ``blocks``, then a linear head of ``width`` inputs (after a spatial
    mean for 4-D activations); returns the sum of the head's outputs (a scalar loss)."""

    def __init__(self, make, n: int = 4, width: int = 64):
        super().__init__()
        self.blocks = nn.ModuleList(make() for _ in range(n))
        self.head = nn.Linear(width, 8)

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return self.head(x if x.dim() == 3 else x.mean((2, 3))).sum()
