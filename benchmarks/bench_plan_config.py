"""Wall time of `remat plan` on an 80-layer config.json (Llama-3-70B's published shapes), end to end in a fresh
process per run: reading the config, measuring one layer (one TP rank's) under fake tensors, the exact solve, the
baselines and the Markdown (target: ≤ 10 s each on this 2-core machine). Prints one line per setting
and the worst; not a timed test. Run it alone (a build or tests beside it is noise).

    .venv/bin/python benchmarks/bench_plan_config.py [--rounds 2]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGET_S = 10.0
LLAMA3_70B = {"model_type": "llama", "hidden_size": 8192, "num_hidden_layers": 80, "num_attention_heads": 64,
              "num_key_value_heads": 8, "intermediate_size": 28672, "vocab_size": 128256,
              "max_position_embeddings": 8192, "rope_theta": 500000.0, "tie_word_embeddings": False,
              "rms_norm_eps": 1e-5, "torch_dtype": "bfloat16"}
SETTINGS = {"t = 8, SP, dp 8, ZeRO-1 (80 layers on the GPU)": ["--tp", "8", "--sp", "--dp", "8", "--zero", "1"],
            "t = 8, SP, p = 4 (20 layers, 4 in flight)": ["--tp", "8", "--sp", "--pp", "4"],
            "t = 1 (80 layers; infeasible: the smallest budget and what fits)": []}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    remat = [sys.executable, "-m", "remat"]
    worst = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "config.json"
        path.write_text(json.dumps(LLAMA3_70B))
        times: dict[str, list[float]] = {name: [] for name in SETTINGS}
        for _ in range(args.rounds):            # interleaved rounds
            for name, flags in SETTINGS.items():
                start = time.perf_counter()
                done = subprocess.run([*remat, "plan", "--model", str(path), "--seq", "8192", "--memory", "80GiB",
                                       *flags], capture_output=True, text=True, env=dict(os.environ))
                times[name].append(time.perf_counter() - start)
                if done.returncode not in (0, 3):
                    raise SystemExit(f"{name}: exit {done.returncode}: {done.stderr.strip()}")
    for name, ts in times.items():
        print(f"{name}: {min(ts):.2f} s best, {max(ts):.2f} s worst of {len(ts)}")
        worst = max(worst, max(ts))
    print(f"worst {worst:.2f} s (target ≤ {TARGET_S:.0f} s): {'met' if worst <= TARGET_S else 'NOT met'}; "
          f"load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
