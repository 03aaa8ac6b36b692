"""Runtime benchmark: seconds to trace a 1000-layer bottleneck ResNet at Chen 2016's size into the §3 graph.

    python benchmarks/bench_graph_trace.py [--depth 1000] [--batch 32] [--image 224]

Builds the net under FakeTensorMode (no memory), then times ``remat.graph.trace.trace`` on a batch of
3 × image × image inputs with a cross-entropy loss (target: well under 30 s on 2 CPU cores). Prints the
build and trace seconds, the node count, the activation bytes (GiB, the sum over all act values, no
liveness), the forward FLOPs and the aten ops that fell into "other".

The net is the paper's ResNet, ``remat.models.resnet`` (``ResNetConfig.for_depth``: ResNet-1000 is 998
layers, blocks (3, 130, 196, 3)); where that module is absent, the toy bottleneck ResNet below (stem,
``(depth - 2) // 3`` blocks at 64/16 channels and 56 × 56, global pool, fc): the op count of a
ResNet-1000's trace, not its channel plan.
"""

from __future__ import annotations

import argparse
import time

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


def build_net(depth: int, image: int) -> nn.Module:
    """The paper's ResNet of ``depth`` layers (remat.models.resnet) if present, else DeepResNet."""
    try:
        from remat.models.resnet import ResNet, ResNetConfig
    except ImportError:
        return DeepResNet(depth)
    return ResNet(ResNetConfig.for_depth(depth, image=image))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--depth", type=int, default=1000)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--image", type=int, default=224)
    args = ap.parse_args()
    start = time.perf_counter()
    with FakeTensorMode():
        net = build_net(args.depth, args.image)
        x = torch.randn(args.batch, 3, args.image, args.image)
        y = torch.randint(0, 1000, (args.batch,))
    built = time.perf_counter()
    graph = trace(net, (x,), loss_fn=lambda logits: F.cross_entropy(logits, y), name=f"resnet-{args.depth}")
    done = time.perf_counter()
    acts = sum(v.nbytes for v in graph.values.values() if v.kind == "act")
    print(f"{type(net).__name__} {graph.name} batch {args.batch} 3x{args.image}x{args.image}: "
          f"build {built - start:.1f} s, trace {done - built:.1f} s, {len(graph.nodes)} nodes, activations {acts / 2**30:.1f} GiB, "
          f"forward {graph.forward_flops() / 1e9:.0f} GFLOPs, other ops {other_ops(graph) or 'none'}")


if __name__ == "__main__":
    main()
