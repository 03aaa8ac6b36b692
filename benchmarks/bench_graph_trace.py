"""Runtime benchmark: seconds to trace Chen 2016's nets at the paper's sizes into the §3 graph.

    python benchmarks/bench_graph_trace.py [--depth 1000] [--batch 32] [--image 224]

Builds each net under FakeTensorMode (no memory), then times ``remat.graph.trace.trace`` (target: well
under 30 s on 2 CPU cores for ResNet-1000). Per net it prints the build and trace seconds, the node count,
the activation bytes (GiB: the sum over all act values, no liveness), the forward FLOPs and the aten ops
that fell into "other".

* ResNet: the paper's, ``remat.models.resnet`` (``ResNetConfig.for_depth``: ResNet-1000 is 998 layers,
  blocks (3, 130, 196, 3)), batch × 3 × image × image, cross-entropy loss; where that module is absent, the
  toy bottleneck ResNet below (stem, ``(depth - 2) // 3`` blocks at 64/16 channels and 56 × 56, global pool,
  fc): the op count of a ResNet-1000's trace, not its channel plan.
* LSTM: the paper's, ``remat.models.lstm`` at its defaults (4 layers, hidden 1024, 64 steps, batch 64, input
  50, 5000 classes), when that module exists.
"""

from __future__ import annotations

import argparse
import importlib.util
import time
from typing import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch._subclasses.fake_tensor import FakeTensorMode

from remat.graph.trace import other_ops, trace


class Bottleneck(nn.Module):
    """1×1 → 3×3 → 1×1 convolutions with batch norm and ReLU, identity shortcut."""

    def __init__(self, channels: int, mid: int):
        super().__init__()
        self.c1, self.b1 = nn.Conv2d(channels, mid, 1, bias=False), nn.BatchNorm2d(mid)
        self.c2, self.b2 = nn.Conv2d(mid, mid, 3, padding=1, bias=False), nn.BatchNorm2d(mid)
        self.c3, self.b3 = nn.Conv2d(mid, channels, 1, bias=False), nn.BatchNorm2d(channels)

    def forward(self, x):                                     # x: (N, channels, S, S)
        h = F.relu(self.b1(self.c1(x)), inplace=True)
        h = F.relu(self.b2(self.c2(h)), inplace=True)
        return F.relu(self.b3(self.c3(h)) + x)


class DeepResNet(nn.Module):
    """stem (7×7/2 conv, 3×3/2 max pool) → blocks → global average pool → fc to 1000 classes."""

    def __init__(self, depth: int):
        super().__init__()
        self.stem, self.pool = nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.MaxPool2d(3, 2, 1)
        self.blocks = nn.Sequential(*[Bottleneck(64, 16) for _ in range((depth - 2) // 3)])
        self.fc = nn.Linear(64, 1000)

    def forward(self, x):                                     # x: (N, 3, image, image) -> logits (N, 1000)
        h = self.blocks(self.pool(self.stem(x)))
        return self.fc(F.adaptive_avg_pool2d(h, 1).flatten(1))


def resnet(depth: int, batch: int, image: int):
    """(net, inputs, loss_fn): the paper's ResNet (remat.models.resnet) if present, else DeepResNet."""
    try:
        from remat.models.resnet import ResNetConfig, build_resnet
        net = build_resnet(ResNetConfig.for_depth(depth, image=image, batch=batch))
    except ImportError:
        net = DeepResNet(depth)
    x, y = torch.randn(batch, 3, image, image), torch.randint(0, 1000, (batch,))
    return net, (x,), lambda logits: F.cross_entropy(logits, y)


def lstm():
    """(model, inputs, None): the paper's LSTM (remat.models.lstm); its forward returns the loss."""
    from remat.models.lstm import LSTMConfig, build_lstm, random_sequence
    cfg = LSTMConfig()
    return build_lstm(cfg), random_sequence(cfg), None


def bench(name: str, build: Callable) -> None:
    """Build under FakeTensorMode, trace, print one line (module docstring)."""
    start = time.perf_counter()
    with FakeTensorMode():
        net, inputs, loss_fn = build()
    built = time.perf_counter()
    graph = trace(net, inputs, loss_fn=loss_fn, name=name)
    done = time.perf_counter()
    acts = sum(v.nbytes for v in graph.values.values() if v.kind == "act")
    print(f"{name} ({type(net).__name__}): build {built - start:.1f} s, trace {done - built:.1f} s, "
          f"{len(graph.nodes)} nodes, activations {acts / 2**30:.1f} GiB, "
          f"forward {graph.forward_flops() / 1e9:.0f} GFLOPs, other ops {other_ops(graph) or 'none'}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--depth", type=int, default=1000)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--image", type=int, default=224)
    args = ap.parse_args()
    bench(f"resnet-{args.depth} batch {args.batch} 3x{args.image}x{args.image}",
          lambda: resnet(args.depth, args.batch, args.image))
    if importlib.util.find_spec("remat.models.lstm"):
        bench("lstm 4x1024, 64 steps, batch 64", lstm)


if __name__ == "__main__":
    main()
