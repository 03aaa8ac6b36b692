"""The bottleneck residual network of Chen et al. 2016 §5.2 (He et al. 2016 layout, ImageNet stem and head).

    cfg = ResNetConfig.for_depth(1000, batch=32, image=224)   # the paper's size: 998 layers, see blocks_for_depth
    model = build_resnet(cfg)                                   # also under FakeTensorMode, at paper size
    loss = resnet_loss(model(images), labels)                   # images [N, 3, H, W], labels [N]
    apply_plan(model, "segments:18")                            # remat.policies: model.layers is model.blocks

Layout (channels for base width w; stage i has bottleneck width w·2^i and output 4·w·2^i):
    stem:   conv 7×7/2 (3 -> w) – BN – ReLU – max-pool 3×3/2            [N, 3, H, W] -> [N, w, H/4, W/4]
    blocks: 4 stages of Bottleneck blocks; the first block of stages 2–4 has stride 2 (on its 3×3 conv)
            Bottleneck: conv1×1 – BN – ReLU – conv3×3 – BN – ReLU – conv1×1 (×4 expansion) – BN,
            + shortcut (identity, or conv1×1 + BN projection when the shape changes), ReLU
    head:   global average pool – linear (4·8w -> classes)                 [N, 32w, H/32, W/32] -> [N, classes]

Depth = 3·Σ blocks + 2 (three convolutions per block, the stem conv, the classifier; projections are not
counted, as in He et al.). The modules are plain torch (Conv2d, BatchNorm2d, ReLU(inplace=False), MaxPool2d,
Linear): any in-place decision is left to the graph planner. ``model.blocks`` (nn.ModuleList) is the chain
that recompute plans segment; the stem and head stay outside it. Build under
torch._subclasses.fake_tensor.FakeTensorMode for the paper's sizes without memory.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from remat.errors import UsageError
from remat.formulas.chen import check_count
from remat.models.transformer import default_dtype

STAGES = 4
EXPANSION = 4


def resnet_depth(blocks: tuple[int, ...] | list[int]) -> int:
    """Layers of the network with ``blocks`` bottleneck blocks per stage: 3·Σ blocks + 2 (int).

    Raises UsageError("blocks") unless there are 4 stages of ≥ 1 block. Source: He et al. 2016 (ResNet-50 =
    (3, 4, 6, 3) -> 50, ResNet-200 = (3, 24, 36, 3) -> 200).
    """
    if len(blocks) != STAGES or any(isinstance(b, bool) or not isinstance(b, int) or b < 1 for b in blocks):
        raise UsageError("blocks", f"need {STAGES} stages of ≥ 1 block each, got {list(blocks)}")
    return 3 * sum(blocks) + 2


def blocks_for_depth(depth: int) -> tuple[int, int, int, int]:
    """Blocks per stage for a network of at most ``depth`` layers: the deepest one the rule below reaches.

    Rule (the proportions of ResNet-200, the network of Chen's own ResNet memory example, dmlc/mxnet-memonger
    example_resnet.py, layers = [3, 24, 36, 3]): n = ⌊(depth − 2)/3⌋ blocks in all; stages 1 and 4 keep 3
    blocks (fewer for tiny n), stages 2 and 3 share the rest 2 : 3, rounded half up for stage 2. Depth grows
    in the middle stages, where ImageNet ResNets grow (ResNet-101/152/200). It reproduces ResNet-50
    (3, 4, 6, 3) and ResNet-200 (3, 24, 36, 3); depth 1000 gives (3, 130, 196, 3) = 998 layers, the nearest
    below 1000 (3·Σ + 2 skips 1000; the next, 1001, would exceed the request). Raises UsageError("depth")
    for depth < 14 (one block per stage).
    """
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 3 * STAGES + 2:
        raise UsageError("depth", f"must be an integer ≥ {3 * STAGES + 2} (one block per stage), got {depth}")
    total = (depth - 2) // 3
    outer = min(3, (total - 2) // 2)
    middle = total - 2 * outer
    second = max(1, (4 * middle + 5) // 10)
    return (outer, second, middle - second, outer)


@dataclass(frozen=True)
class ResNetConfig:
    """Sizes of the network and of its input.

    blocks: bottleneck blocks per stage (4 ints ≥ 1); width: stage-1 bottleneck width w (channels; the paper:
    64); image: input height = width H (pixels; the paper: 224); classes: outputs of the classifier (1000);
    batch: N images per step (32); in_channels: 3; dtype: parameter and input dtype name.
    """

    blocks: tuple[int, int, int, int] = (3, 4, 6, 3)
    width: int = 64
    image: int = 224
    classes: int = 1000
    batch: int = 32
    in_channels: int = 3
    dtype: str = "float32"

    def __post_init__(self):
        resnet_depth(self.blocks)
        object.__setattr__(self, "blocks", tuple(self.blocks))
        for name in ("width", "image", "classes", "batch", "in_channels"):
            check_count(getattr(self, name), name)

    @property
    def depth(self) -> int:
        """Layers: 3·Σ blocks + 2."""
        return resnet_depth(self.blocks)

    @classmethod
    def for_depth(cls, depth: int, **sizes) -> "ResNetConfig":
        """The config with ``blocks_for_depth(depth)`` blocks and the other fields from ``sizes``."""
        return cls(blocks=blocks_for_depth(depth), **sizes)


def _conv_bn(cin: int, cout: int, kernel: int, stride: int = 1) -> tuple[nn.Conv2d, nn.BatchNorm2d]:
    conv = nn.Conv2d(cin, cout, kernel, stride=stride, padding=kernel // 2, bias=False)
    return conv, nn.BatchNorm2d(cout)


class Projection(nn.Module):
    """Shortcut when the shape changes: conv 1×1 (stride s) + BN. [N, cin, H, W] -> [N, cout, H/s, W/s]."""

    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.conv, self.bn = _conv_bn(cin, cout, 1, stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.bn(self.conv(x))


class Bottleneck(nn.Module):
    """conv1×1–BN–ReLU, conv3×3 (stride s)–BN–ReLU, conv1×1–BN, + shortcut, ReLU (He et al. 2016, Fig. 5).

    x: [N, cin, H, W] -> [N, 4·width, H/s, W/s]; shortcut = identity when cin = 4·width and s = 1, else a
    Projection.
    """

    def __init__(self, cin: int, width: int, stride: int = 1):
        super().__init__()
        cout = EXPANSION * width
        self.conv1, self.bn1 = _conv_bn(cin, width, 1)
        self.relu1 = nn.ReLU()
        self.conv2, self.bn2 = _conv_bn(width, width, 3, stride)
        self.relu2 = nn.ReLU()
        self.conv3, self.bn3 = _conv_bn(width, cout, 1)
        self.shortcut = Projection(cin, cout, stride) if stride != 1 or cin != cout else nn.Identity()
        self.relu3 = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.relu1(self.bn1(self.conv1(x)))
        y = self.relu2(self.bn2(self.conv2(y)))
        y = self.bn3(self.conv3(y))
        return self.relu3(y + self.shortcut(x))


class Stem(nn.Module):
    """conv 7×7/2 – BN – ReLU – max-pool 3×3/2. [N, c, H, W] -> [N, w, ⌈H/4⌉, ⌈W/4⌉]."""

    def __init__(self, cin: int, width: int):
        super().__init__()
        self.conv, self.bn = _conv_bn(cin, width, 7, 2)
        self.relu = nn.ReLU()
        self.pool = nn.MaxPool2d(3, stride=2, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(self.relu(self.bn(self.conv(x))))


class Head(nn.Module):
    """Global average pool – linear. [N, c, h, w] -> logits [N, classes]."""

    def __init__(self, cin: int, classes: int):
        super().__init__()
        self.fc = nn.Linear(cin, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1))


class ResNet(nn.Module):
    """stem -> blocks (nn.ModuleList of Bottleneck, the recompute chain) -> head. [N, c, H, W] -> [N, classes].

    ``layers`` is ``blocks`` (so remat.policies.apply_plan plans the blocks) and ``run_layers`` runs them
    (apply_plan replaces it for multi-block checkpoint units).
    """

    def __init__(self, cfg: ResNetConfig):
        super().__init__()
        self.cfg = cfg
        self.stem = Stem(cfg.in_channels, cfg.width)
        blocks, cin = [], cfg.width
        for stage, count in enumerate(cfg.blocks):
            width = cfg.width * 2 ** stage
            for i in range(count):
                blocks.append(Bottleneck(cin, width, stride=2 if stage > 0 and i == 0 else 1))
                cin = EXPANSION * width
        self.blocks = nn.ModuleList(blocks)
        self.head = Head(cin, cfg.classes)

    @property
    def layers(self) -> nn.ModuleList:
        return self.blocks

    def run_layers(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return x

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.head(self.run_layers(self.stem(images)))


def build_resnet(cfg: ResNetConfig, device: str | torch.device = "cpu") -> ResNet:
    """A ResNet of ``cfg`` on ``device`` in ``cfg.dtype``, training mode. Under FakeTensorMode its parameters
    are fake (no memory): ResNet-1000 at width 64 builds in seconds. Built inside the device and dtype
    (remat.models.transformer.default_dtype), since Module.to cannot swap fake parameters."""
    with torch.device(device), default_dtype(getattr(torch, cfg.dtype)):
        return ResNet(cfg).train()


def random_images(cfg: ResNetConfig, device: str | torch.device = "cpu",
                  generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(images [N, c, H, W] in cfg.dtype, labels [N] int64 in [0, classes)) from ``generator``."""
    images = torch.randn(cfg.batch, cfg.in_channels, cfg.image, cfg.image, generator=generator,
                         dtype=getattr(torch, cfg.dtype))
    labels = torch.randint(0, cfg.classes, (cfg.batch,), generator=generator)
    return images.to(device), labels.to(device)


def resnet_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of logits [N, classes] against labels [N] (a scalar)."""
    return F.cross_entropy(logits, labels)
