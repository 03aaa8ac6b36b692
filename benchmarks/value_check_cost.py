"""What the default recompute value check costs (remat.policies.values): one training step of a model whose every
layer is under full recompute, checked (every op's checksum in forward and recompute) against unchecked, and what
that comes to over a run under the default sampling (a region's first FIRST forwards and every EVERY-th).

    python benchmarks/value_check_cost.py [--preset gpt2-124m] [--layers 4] [--seq 256] [--rounds 5] [--steps 1000]

Interleaved rounds, the median of each; float32 (this CPU's matmul dtype); one intra-op thread per core
torch chose. Prints the step times, the checked step's overhead, and the overhead averaged over ``--steps``
steps of the default. Run it alone: a timing taken while anything else runs is noise.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time

import torch

from remat.models.presets import from_name
from remat.models.transformer import build_model, lm_loss, random_tokens
from remat.policies import apply_plan, recompute_check
from remat.policies.values import EVERY, FIRST, Tally, check_for


def step_s(model, tokens, mode: str, n: int) -> float:
    with recompute_check(mode):
        start = time.perf_counter()
        for _ in range(n):
            lm_loss(model(tokens), tokens).backward()
        return (time.perf_counter() - start) / n


def _cpu() -> str:
    for line in open("/proc/cpuinfo", encoding="utf-8") if os.path.exists("/proc/cpuinfo") else ():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "?"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="gpt2-124m")
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--seq", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=1000)
    args = parser.parse_args()
    cfg = from_name(args.preset, layers=args.layers, seq=args.seq, micro_batch=1, dtype="float32")
    torch.manual_seed(0)
    model = build_model(cfg)
    apply_plan(model, "full")
    tokens = random_tokens(cfg)
    step_s(model, tokens, "every", 1)                           # warm both paths
    plain, checked = [], []
    for r in range(args.rounds):
        for mode, out in ((("off", plain), ("every", checked)) if r % 2 == 0 else (("every", checked), ("off", plain))):
            out.append(step_s(model, tokens, mode, 2))
    p, c = statistics.median(plain), statistics.median(checked)
    sampled = sum(check_for(Tally(forwards=n, checked=min(n - 1, FIRST))) is not None for n in range(1, args.steps + 1))
    print(f"{cfg.name} L={cfg.layers} s={cfg.seq} b=1 float32, every layer full; CPU {_cpu()} "
          f"({os.cpu_count()} cores), load {os.getloadavg()[0]:.2f}")
    print(f"step unchecked {p * 1e3:.1f} ms, checked {c * 1e3:.1f} ms: a checked step costs {100 * (c / p - 1):+.1f} %")
    print(f"default sampling (first {FIRST}, every {EVERY}th) checks {sampled} of {args.steps} steps: "
          f"{100 * (c / p - 1) * sampled / args.steps:+.2f} % over the run ({args.rounds} interleaved rounds, medians)")


if __name__ == "__main__":
    main()
