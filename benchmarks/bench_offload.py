"""Activation offload benchmark: prints the bandwidth fit, step times and host bytes of the offload hooks.

    python benchmarks/bench_offload.py [--device cpu|cuda] [--max-size 256MiB]

1. Bandwidth fit: per direction / memory kind / overlap, t0 and BW (GB/s = 10^9 B/s and GiB/s = 2^30 B/s)
   and the largest |predicted/measured − 1| over sizes ≥ 1 MiB (target: < 10%).
2. Step time of a small GPT under none, selective, full, offload (async hooks) and torch's save_on_cpu,
   gradients bitwise equal to none, device bytes held after forward (offload vs none).
3. Host bytes after each of 10 offloaded steps (target: back at baseline, no growth).
Without CUDA every copy is a host memcpy, labelled remat.measure.bandwidth.SIMULATED, not PCIe.
"""

from __future__ import annotations

import argparse
import time

import pandas as pd
import torch

from remat.experiments import load
from remat.experiments.offload import steps_table
from remat.measure.bandwidth import bandwidth_summary
from remat.models.presets import from_name
from remat.models.transformer import build_model, lm_loss, random_tokens
from remat.offload import OffloadHooks
from remat.units import format_bytes, parse_bytes


def bench_bandwidth(device: str, max_size: str | None) -> None:
    t = time.perf_counter()
    out = bandwidth_summary(device, max_bytes=None if max_size is None else parse_bytes(max_size))
    print(f"== bandwidth ({out['link']}; {time.perf_counter() - t:.1f} s) — {out['units']}")
    fits = pd.DataFrame(out["fits"])
    fits["fit_within_10pct"] = fits["max_rel_error_ge_1mib"] < 0.10
    print(fits[["direction", "memory", "overlap", "t0_s", "bw_gb_s", "bw_gib_s", "max_rel_error_ge_1mib",
                "fit_within_10pct"]].to_string(index=False))


def bench_steps(device: str) -> None:
    t = time.perf_counter()
    frame = steps_table(load("offload-steps", {"device": device, "seqs": [128], "hiddens": [128], "layers": 4}))
    print(f"== step time and bytes, GPT s=128 h=128 L=4 b=2 ({time.perf_counter() - t:.1f} s)")
    print(frame[["variant", "grads_bitwise_equal", "step_time_s", "overhead_vs_none_s",
                 "device_held_after_forward_bytes", "host_bytes_after_forward", "host_live_after_step_bytes",
                 "offloaded_bytes", "kept_bytes"]].to_string(index=False))
    held = frame.set_index("variant")["device_held_after_forward_bytes"]
    print(f"device bytes held after forward: offload {format_bytes(held['offload'])} vs none "
          f"{format_bytes(held['none'])} ({held['offload'] / held['none']:.1%})")


def bench_host_baseline(device: str, steps: int = 10) -> None:
    cfg = from_name("gpt-tiny", layers=4, seq=128, hidden=128, ffn_hidden=512)
    torch.manual_seed(0)
    model = build_model(cfg, device=device)
    tokens = random_tokens(cfg, device=device)
    hooks = OffloadHooks(device, min_bytes=0, keep=model)
    live, reserved = [], []
    for _ in range(steps):
        x = model.embed(tokens)
        for layer in model.layers:
            with hooks.layer():
                x = layer(x)
        lm_loss(model.head(model.norm(x)), tokens).backward()
        model.zero_grad(set_to_none=True)
        live.append(hooks.pool.live_bytes)
        reserved.append(hooks.pool.reserved_bytes)
    ok = all(v == 0 for v in live) and len(set(reserved)) == 1
    print(f"== host bytes over {steps} steps: live after each step {live}; reserved "
          f"{format_bytes(reserved[0])} every step (pinned: {hooks.pool.pin}) -> "
          f"{'back at baseline, no growth' if ok else 'GROWTH'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--max-size", default=None)
    args = parser.parse_args()
    bench_bandwidth(args.device, args.max_size)
    bench_steps(args.device)
    bench_host_baseline(args.device)


if __name__ == "__main__":
    main()
