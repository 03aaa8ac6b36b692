"""Runtime benchmark: seconds to build and run the Chen 2016 §5.2 ResNet (and the §5.3 LSTM) at the paper's
sizes under FakeTensorMode (no memory), with the bytes each strategy holds for backward.

    python benchmarks/bench_chen_fake.py [--depth 1000] [--plans none,sublinear,drop-cheap] [--lstm]

First a bare trace (no accounting, plan none); then per plan: build, forward and backward seconds of
ResNet-<depth> (blocks_for_depth: 1000 -> 998 layers), batch 32, 3×224×224, width 64, 1000 classes,
float32, and the saved bytes after the forward (remat.measure.drop_cheap.saved_bytes: saved-tensor hooks +
drop-cheap's SAC cache; GiB = 2^30 bytes). The accounted forward and backward run under its dispatch modes,
so they are slower than the bare trace. With --lstm the same for the LSTM at the paper's sizes (4 × 1024,
64 steps, batch 64, input 50, 5000 classes). Strategies as in remat.experiments.chen_speed (sublinear =
⌈√n⌉ segments, the last one unchecked).
"""

from __future__ import annotations

import argparse
import time

from torch._subclasses.fake_tensor import FakeTensorMode

from remat.measure.drop_cheap import saved_bytes
from remat.experiments.chen_speed import STRATEGIES, strategy_spec
from remat.models.lstm import LSTMConfig, build_lstm, random_sequence
from remat.models.resnet import ResNetConfig, build_resnet, random_images, resnet_loss
from remat.policies import apply_plan

GiB = 2**30


def resnet(depth: int):
    """(model, chain length, loss function, plan applier) of the paper-size ResNet; call under FakeTensorMode."""
    cfg = ResNetConfig.for_depth(depth, batch=32, image=224, width=64, classes=1000)
    model = build_resnet(cfg)
    images, labels = random_images(cfg)
    return model, len(model.blocks), lambda: resnet_loss(model(images), labels), lambda s: apply_plan(model, s)


def lstm(_depth: int):
    """(model, chain length, loss function, plan applier) of the paper-size LSTM; call under FakeTensorMode."""
    model = build_lstm(LSTMConfig())
    x, targets = random_sequence(model.cfg)
    return model, model.cfg.steps, lambda: model(x, targets), model.set_plan


def bench(name: str, make, depth: int, strategy: str, account: bool) -> None:
    """Build, forward and backward under a fresh FakeTensorMode; print the seconds (and saved GiB)."""
    with FakeTensorMode():
        start = time.perf_counter()
        model, units, loss_fn, apply = make(depth)
        spec = strategy_spec(strategy, units)
        apply(spec)
        built = time.perf_counter()
        saved, loss = saved_bytes(model, loss_fn) if account else (None, loss_fn())
        forward = time.perf_counter()
        loss.backward()
        done = time.perf_counter()
    bytes_ = (f"  saved {saved.total / GiB:7.2f} GiB (SAC cache {saved.kept / GiB:.2f} GiB)" if account
              else "  (bare trace)")
    print(f"{name} ({units} units) {strategy:>10} [{spec}]: build {built - start:5.1f} s  forward "
          f"{forward - built:5.1f} s  backward {done - forward:5.1f} s  total {done - start:5.1f} s{bytes_}",
          flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--depth", type=int, default=1000, help="ResNet depth requested (default 1000 -> 998)")
    parser.add_argument("--plans", default="none", help=f"comma list of {', '.join(STRATEGIES)} (default none)")
    parser.add_argument("--lstm", action="store_true", help="also the paper-size LSTM")
    args = parser.parse_args()
    strategies = [s.strip() for s in args.plans.split(",")]
    print("== Chen 2016 nets under FakeTensorMode (paper sizes, float32)")
    nets = [(f"ResNet-{ResNetConfig.for_depth(args.depth).depth}", resnet)] + [("LSTM", lstm)] * args.lstm
    for name, make in nets:
        bench(name, make, args.depth, "none", account=False)
        for strategy in strategies:
            bench(name, make, args.depth, strategy, account=True)


if __name__ == "__main__":
    main()
