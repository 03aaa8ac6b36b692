"""Block discovery in a mixture of experts: more experts per layer (an nn.ModuleList inside each layer) than layers.
The blocks a user means are the layers on the residual path, not the first layer's experts."""

from __future__ import annotations

import copy

import torch
from torch import nn

from remat import auto


class Layer(nn.Module):
    def __init__(self, width: int = 8, experts: int = 6):
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.experts = nn.ModuleList(nn.Linear(width, width) for _ in range(experts))

    def forward(self, x):
        self.runs = getattr(self, "runs", 0) + 1      # forward and any recompute of it
        h = self.norm(x)
        return x + torch.stack([e(h) for e in self.experts]).mean(0)


class Mixture(nn.Module):
    def __init__(self, layers: int = 2):
        super().__init__()
        self.layers = nn.ModuleList(Layer() for _ in range(layers))

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


def test_the_layers_are_the_blocks_not_the_first_layers_experts():
    found = auto.find_blocks(Mixture())
    assert found.name == "layers" and found.names == ("layers.0", "layers.1") and found.skipped == ()


def test_full_recompute_reruns_each_layer_and_keeps_gradients_bitwise():
    torch.manual_seed(0)
    plain = Mixture()
    model = copy.deepcopy(plain)
    auto.apply(model, "full")
    x = torch.randn(4, 8)
    plain(x).square().sum().backward()
    model(x).square().sum().backward()
    assert [layer.runs for layer in model.layers] == [2, 2]    # each layer's forward once more: its recompute
    for a, b in zip(plain.parameters(), model.parameters()):
        assert torch.equal(a.grad, b.grad)
