"""How long `remat plan --pp 4 --schedule NAME` takes on Llama-3-8B (the preset) and Llama-3-70B (its config.json,
TP = 8 with SP), every schedule, and with --hf (transformers' own layer measured) on Llama-3-8B's config.json: one
line per run with its wall seconds, then the slowest (target ≤ 30 s). Each run is a fresh process, as a user runs it
(torch import and the fake-tensor measurement included).

    python benchmarks/pp_plan_time.py
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from remat.planner.schedules import NAMES

LLAMA3_70B = {"model_type": "llama", "hidden_size": 8192, "intermediate_size": 28672, "num_attention_heads": 64,
              "num_key_value_heads": 8, "num_hidden_layers": 80, "vocab_size": 128256,
              "max_position_embeddings": 8192, "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
              "torch_dtype": "bfloat16", "tie_word_embeddings": False}
LLAMA3_8B = {**LLAMA3_70B, "hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32,
             "num_hidden_layers": 32}
INTERLEAVE = {"GPipe": 1, "1F1B": 1}


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path, small = Path(tmp) / "config.json", Path(tmp) / "8b" / "config.json"
        path.write_text(json.dumps(LLAMA3_70B))
        small.parent.mkdir()
        small.write_text(json.dumps(LLAMA3_8B))
        models = {"llama3-8b": ["--global-batch", "16"], str(path): ["--tp", "8", "--sp", "--seq", "8192"],
                  str(small): ["--hf", "--global-batch", "16", "--seq", "8192"]}
        worst = 0.0
        for model, extra in models.items():
            for name in NAMES:
                m = INTERLEAVE.get(name, 2)
                start = time.perf_counter()
                run = subprocess.run([sys.executable, "-m", "remat", "plan", "--model", model, "--pp", "4",
                                      "--interleave", str(m), "--schedule", name, *extra, "--format", "json"],
                                     capture_output=True, text=True)
                wall = time.perf_counter() - start
                worst = max(worst, wall)
                status = "ok" if run.returncode == 0 else f"exit {run.returncode}: {run.stderr.strip()[:120]}"
                label = {str(path): "llama3-70b (config.json)", str(small): "llama3-8b (config.json, --hf)"}.get(
                    model, model)
                print(f"{label:26} {name:22} {wall:6.1f} s  {status}")
        print(f"slowest: {worst:.1f} s (target <= 30 s)")


if __name__ == "__main__":
    main()
