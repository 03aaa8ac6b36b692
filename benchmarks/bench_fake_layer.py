"""Runtime benchmark: seconds and resident memory of one paper-size layer under fake tensors, and saved bytes on gpt2.

    python benchmarks/bench_fake_layer.py [--policies none,selective,full] [--gpt2]

1. One gpt3-175b layer (s 2048, h 12288, a 96, bf16) measured with ``remat measure --device fake``, each run
   in its own process: wall time (target ≤ 10 s) and that process's max resident memory (target < 2 GB =
   2·10^9 bytes), with the measured bytes and FLOPs.
2. With --gpt2: the 12-layer gpt2-124m at s = 256 on the CPU under none / selective / full: saved bytes
   (hooks and tracker), peak, and recompute FLOPs over the layers' forward FLOPs.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

GB = 10**9


_CHILD = ("import resource, sys\n"
          "from remat.cli import main\n"
          "code = main(sys.argv[1:])\n"
          "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, file=sys.stderr)  # KiB on Linux\n"
          "sys.exit(code)\n")


def run_measure(*argv: str) -> tuple[dict, float, int]:
    """Run `remat measure ... --json` in a child process: (row, wall seconds, the child's max RSS in bytes)."""
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", _CHILD, "measure", *argv, "--json"], capture_output=True,
                          text=True)
    wall = time.perf_counter() - start
    if proc.returncode:
        sys.exit(f"remat measure failed ({proc.returncode}): {proc.stderr.strip()}")
    return json.loads(proc.stdout), wall, int(proc.stderr.strip().splitlines()[-1])


def bench_fake_layer(policies: list[str]) -> None:
    print("== one gpt3-175b layer under FakeTensorMode (targets: ≤ 10 s, < 2 GB RSS)")
    for policy in policies:
        row, wall, rss = run_measure("--model", "gpt3-175b", "--layers", "1", "--policy", policy,
                                     "--device", "fake")
        print(f"{policy:>10}: wall {wall:6.2f} s  max RSS {rss / GB:5.2f} GB  "
              f"[{'ok' if wall <= 10 and rss < 2 * GB else 'MISSED'}]  "
              f"saved/layer {row['activation_bytes_per_layer'][0]:,} B  peak {row['peak_bytes']:,} B  "
              f"fwd {row['flops_forward']:.3e}  recompute {row['flops_recompute']:.3e} FLOPs")


def bench_gpt2() -> None:
    print("== gpt2-124m (12 layers), s = 256, CPU")
    for policy in ("none", "selective", "full"):
        row, wall, _ = run_measure("--model", "gpt2-124m", "--seq", "256", "--policy", policy, "--device", "cpu",
                                   "--no-timing")
        ratio = row["flops_recompute"] / row["flops_forward_layers"]
        gap = abs(row["activation_bytes"] - row["activation_bytes_tracker"]) / row["activation_bytes"]
        print(f"{policy:>10}: saved {row['activation_bytes']:,} B (tracker {row['activation_bytes_tracker']:,} B, "
              f"gap {gap:.4%})  peak {row['peak_bytes']:,} B  recompute/forward(layers) {ratio:.4f}  "
              f"recompute/forward(model) {row['flops_recompute'] / row['flops_forward']:.4f}  ({wall:.1f} s)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policies", default="none,selective,full")
    parser.add_argument("--gpt2", action="store_true", help="also the 12-layer gpt2-124m CPU figures")
    args = parser.parse_args()
    bench_fake_layer(args.policies.split(","))
    if args.gpt2:
        bench_gpt2()


if __name__ == "__main__":
    main()
