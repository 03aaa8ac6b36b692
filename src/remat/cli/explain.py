"""`remat explain`: one training step of a HuggingFace model as it is, and why checkpointing saved what it did."""

from __future__ import annotations

from remat.cli.args import command, emit, model_help, positive_int

CHECKPOINTING = ("none", "hf", "hf-reentrant", "auto-full")


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
    from remat.auto.hf import build
    built = build(args.model, device=args.device, layers=args.layers, seq=args.seq, micro_batch=args.micro_batch)
    with built.mode:
        enable_checkpointing(built.model, args.checkpointing)
        from remat.auto.diagnose import explain
        report = explain(built.model, (), built.kwargs)
    if args.json:
        import json
        emit(json.loads(report.to_json()), True)
    else:
        emit(f"model {built.source}: s = {built.seq}, b = {built.micro_batch}, --checkpointing "
             f"{args.checkpointing}\n{report}", False)
    return 0


def enable_checkpointing(model, how: str) -> None:
    """Switch on ``how`` (CHECKPOINTING, or a per-block policy spec for remat.auto.apply) on ``model``.
    Raises UsageError("--checkpointing") for an unknown value or a spec that does not fit the blocks."""
    import warnings

    from remat.errors import UsageError
    text = how.strip()
    if text == "none":
        return
    if text in ("hf", "hf-reentrant"):
        enable = getattr(model, "activation_checkpointing_enable", None)
        kwargs = {"use_reentrant": text == "hf-reentrant"}
        if not getattr(model, "supports_gradient_checkpointing", False):
            raise UsageError("--checkpointing", f"{type(model).__name__} has no HuggingFace gradient checkpointing")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            if enable is not None:
                enable(activation_checkpointing_kwargs=kwargs)
            else:
                model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
        return
    from remat.auto.wrap import apply
    names = ["full"] if text == "auto-full" else [t.strip() for t in text.split(",")]
    try:
        apply(model, names[0] if len(names) == 1 else names)
    except UsageError as exc:
        raise UsageError("--checkpointing", f"{exc} (or one of {', '.join(CHECKPOINTING)})") from None
