"""What recompute's safety checks cost: the forward and recompute contexts of one checkpointed region
(remat.policies.region: versions, buffer copies, training modes, generators) against a layer's forward.

    python benchmarks/bench_region_checks.py [--preset gpt-tiny] [--rounds 5]

Prints, in interleaved rounds (the median of each), the seconds to enter and leave both contexts for one layer
and the seconds of that layer's plain forward, and their ratio. Run it alone: a timing taken while anything
else runs is noise.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from remat.models.presets import from_name
from remat.models.transformer import build_model
from remat.policies.region import ForwardWatch, Recompute


def contexts_s(layer, n: int) -> float:
    start = time.perf_counter()
    for _ in range(n):
        watch = ForwardWatch([layer])
        with watch:
            pass
        with Recompute(watch, "layer"):
            pass
    return (time.perf_counter() - start) / n


def forward_s(layer, x, n: int) -> float:
    start = time.perf_counter()
    with torch.no_grad():
        for _ in range(n):
            layer(x)
    return (time.perf_counter() - start) / n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="gpt-tiny")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    cfg = from_name(args.preset, layers=1)
    torch.manual_seed(0)
    layer = build_model(cfg).layers[0]
    x = torch.randn(cfg.seq, cfg.micro_batch, cfg.hidden)
    checks, plain = [], []
    for _ in range(args.rounds):
        checks.append(contexts_s(layer, 500))
        plain.append(forward_s(layer, x, 50))
    c, f = statistics.median(checks), statistics.median(plain)
    print(f"{args.preset} layer: region contexts {c * 1e6:.1f} us, plain forward {f * 1e6:.1f} us, "
          f"ratio {c / f:.3f} ({args.rounds} interleaved rounds, medians)")


if __name__ == "__main__":
    main()
