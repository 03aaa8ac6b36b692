"""Runtime benchmark: seconds to plan a Llama-style model of 8B shape (32 blocks) from its config.json with
remat.auto, on this machine, no GPU (target ≤ 20 s, issue [4/7]).

    python benchmarks/bench_auto_plan.py [--seq 8192] [--memory 80GiB] [--gpu h100-80gb]

Writes a Llama-3-8B-shaped config.json (hidden 4096, 32 layers, 32 heads, 8 KV heads, MLP 14336, vocabulary
128256, bfloat16) to a temp dir and runs, in one process, what ``remat plan --model config.json --hf`` runs:
transformers' AutoConfig, the model built under FakeTensorMode (no memory), every block measured (the
distinct ones once), the exact plan. Prints the seconds of each phase, the total, and the plan's first lines.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

LLAMA3_8B = {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
             "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256,
             "max_position_embeddings": 8192, "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
             "tie_word_embeddings": False, "torch_dtype": "bfloat16"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seq", type=int, default=8192)
    parser.add_argument("--memory", default="80GiB")
    parser.add_argument("--gpu", default="h100-80gb")
    args = parser.parse_args()
    start = time.perf_counter()
    from remat import auto
    from remat.auto.hf import build
    imported = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "config.json"
        path.write_text(json.dumps(LLAMA3_8B))
        built = build(path, "fake", seq=args.seq)
    made = time.perf_counter()
    with built.mode:
        result = auto.plan(built.model, (), built.kwargs, budget=args.memory, gpu=args.gpu)
    planned = time.perf_counter()
    print(f"import {imported - start:.1f} s, build (fake) {made - imported:.1f} s, measure + plan "
          f"{planned - made:.1f} s: total {planned - start:.1f} s (target ≤ 20 s)")
    print("\n".join(str(result).splitlines()[:12]))


if __name__ == "__main__":
    main()
