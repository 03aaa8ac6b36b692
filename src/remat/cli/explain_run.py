"""What `remat explain` runs once its arguments are parsed (remat.cli.explain): the model built (remat.auto.hf),
its checkpointing switched on as asked, one step explained (remat.auto.diagnose). Imports torch, so the parser
loads it only when the command runs."""

from __future__ import annotations

import json
import warnings

from remat.auto.diagnose import explain
from remat.auto.hf import build
from remat.auto.wrap import apply
from remat.cli.args import emit
from remat.errors import UsageError

CHECKPOINTING = ("none", "hf", "hf-reentrant", "auto-full")


def run_explain(args) -> int:
    """`remat explain`: the explanation of one step of --model under --checkpointing, printed (or as JSON)."""
    built = build(args.model, device=args.device, layers=args.layers, seq=args.seq, micro_batch=args.micro_batch)
    with built.mode:
        enable_checkpointing(built.model, args.checkpointing)
        report = explain(built.model, (), built.kwargs)
    if args.json:
        emit(json.loads(report.to_json()), True)
    else:
        emit(f"model {built.source}: s = {built.seq}, b = {built.micro_batch}, --checkpointing "
             f"{args.checkpointing}\n{report}", False)
    return 0


def enable_checkpointing(model, how: str) -> None:
    """Switch on ``how`` (CHECKPOINTING, or a per-block policy spec for remat.auto.apply) on ``model``.
    Raises UsageError("--checkpointing") for an unknown value or a spec that does not fit the blocks."""
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
    names = ["full"] if text == "auto-full" else [t.strip() for t in text.split(",")]
    try:
        apply(model, names[0] if len(names) == 1 else names)
    except UsageError as exc:
        raise UsageError("--checkpointing", f"{exc} (or one of {', '.join(CHECKPOINTING)})") from None
