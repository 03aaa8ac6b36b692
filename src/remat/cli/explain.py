"""`remat explain`: one training step of a HuggingFace model as it is, and why checkpointing saved what it did.
Its arguments here; its work in remat.cli.explain_run."""

from __future__ import annotations

from remat.cli.args import command, model_help, positive_int


def add_explain(sub):
    p = command(sub, "explain", "run one training step of a model as it is and explain, per block, the bytes "
                                "checkpointing kept vs a plain block, the recompute FLOPs, and the known traps",
                ["remat explain --model llama3-8b --checkpointing hf --seq 4096",
                 "remat explain --model path/to/config.json --checkpointing hf-reentrant --device fake --json",
                 "remat explain --model llama-tiny --checkpointing full,none --device cpu"],
                "traps named: no-saving, last-segment, reentrant-no-grad, per-child, caller-keeps "
                "(remat.auto.diagnose). A config.json or model folder needs transformers (pip install -e '.[hf]')")
    p.add_argument("--model", required=True, help=model_help())
    p.add_argument("--checkpointing", default="none",
                   help="none (default); hf: HuggingFace gradient_checkpointing_enable(use_reentrant=False); "
                        "hf-reentrant: the same with use_reentrant=True; auto-full: remat.auto.apply(model, "
                        "'full'); or per-block policies for remat.auto.apply: one policy name (none, selective, "
                        "full, offload) or a comma list, one per block")
    p.add_argument("--seq", type=positive_int, help="sequence length s (default: the model's context length)")
    p.add_argument("--micro-batch", type=positive_int, help="micro-batch size b (default 1)")
    p.add_argument("--layers", type=positive_int, help="override the number of blocks")
    p.add_argument("--device", choices=["fake", "cpu"], default="fake",
                   help="fake (default): FakeTensorMode, any size, no memory; cpu: real tensors (small models)")
    p.add_argument("--json", action="store_true", help="print the explanation as JSON")
    p.set_defaults(func=_run_explain)


def _run_explain(args) -> int:
    from remat.cli import explain_run  # imports torch (remat.auto): kept out of `remat --help`
    return explain_run.run_explain(args)
