"""Wall time of `remat plan --check-small` by default, end to end in a fresh process per run, on two published
config.json shapes: Llama-3.2-1B (dense) and Mixtral-8x7B (mixture of experts). Target: ≤ 60 s each on
this 2-core machine, with a default instance where the plan recomputes something, its measured peaks within 1 %
of predicted and gradients bitwise. Prints one line per model; not a timed test. Run it alone (a build or tests
beside it is noise).

    .venv/bin/python benchmarks/bench_check_small.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGET_S = 60.0
LLAMA_32_1B = {"model_type": "llama", "hidden_size": 2048, "intermediate_size": 8192, "num_attention_heads": 32,
               "num_key_value_heads": 8, "head_dim": 64, "num_hidden_layers": 16, "vocab_size": 128256,
               "max_position_embeddings": 131072, "tie_word_embeddings": True, "torch_dtype": "bfloat16"}
MIXTRAL_8X7B = {"model_type": "mixtral", "hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32,
                "num_key_value_heads": 8, "num_hidden_layers": 32, "num_local_experts": 8, "num_experts_per_tok": 2,
                "vocab_size": 32000, "max_position_embeddings": 32768, "rms_norm_eps": 1e-5, "rope_theta": 1e6,
                "tie_word_embeddings": False, "torch_dtype": "bfloat16"}
MODELS = {"Llama-3.2-1B": (LLAMA_32_1B, ["--seq", "4096"]),
          "Mixtral-8x7B": (MIXTRAL_8X7B, ["--seq", "4096", "--dp", "16", "--zero", "3"])}


def main() -> None:
    worst = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        for name, (raw, flags) in MODELS.items():
            path = Path(tmp) / f"{name}.json"
            path.write_text(json.dumps(raw))
            start = time.perf_counter()
            done = subprocess.run([sys.executable, "-m", "remat", "plan", "--model", str(path), *flags,
                                   "--check-small", "--format", "json"], capture_output=True, text=True)
            wall = time.perf_counter() - start
            if done.returncode:
                raise SystemExit(f"{name}: exit {done.returncode}: {done.stderr.strip()}")
            rows = {r["setup"]: r for r in json.loads(done.stdout)["check"]}
            plan = rows["plan"]
            error = max(abs(r["peak_error"]) for r in rows.values() if r["peak_error"] is not None)
            print(f"{name}: {wall:.1f} s; instance h = {plan['hidden']}, s = {plan['seq']}, experts "
                  f"{plan['experts']}; plan {plan['policies']}; worst |peak error| {error:.3%}; gradients bitwise: "
                  f"{all(r['grads_equal'] for r in rows.values())}; stderr lines: {len(done.stderr.splitlines())}")
            worst = max(worst, wall)
    print(f"worst {worst:.1f} s (target ≤ {TARGET_S:.0f} s): {'met' if worst <= TARGET_S else 'NOT met'}; "
          f"load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
