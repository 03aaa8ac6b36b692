"""The known traps remat.auto.explain names (``Trap.code``: no-saving, last-segment, reentrant-no-grad,
per-child, caller-keeps, stashed, recompute-differs, side-effects; what each means: remat.auto.diagnose), each
found from the per-block rows of one step, with one sentence holding the measured numbers and what to do.
"""

from __future__ import annotations

from torch import nn

from remat.auto.explanation import Trap, bytes_text, names_of, share_text, span_of

NO_SAVING = "no-saving"
LAST_SEGMENT = "last-segment"
REENTRANT_NO_GRAD = "reentrant-no-grad"
PER_CHILD = "per-child"
CALLER_KEEPS = "caller-keeps"
STASHED = "stashed"
RECOMPUTE_DIFFERS = "recompute-differs"
SIDE_EFFECTS = "side-effects"
TRAPS = (NO_SAVING, LAST_SEGMENT, REENTRANT_NO_GRAD, PER_CHILD, CALLER_KEEPS, STASHED, RECOMPUTE_DIFFERS, SIDE_EFFECTS)

KEEPS_ALL = 0.9
"""A checkpointed block keeping at least this fraction of its plain bytes saved (about) nothing."""
CALLER_SHARE = 0.05
"""Live bytes beyond the accounted ones, as a fraction of the saved bytes (autograd + caches), that count as
a caller keeping tensors (below it: allocator-level noise such as RNG state copies)."""


def find_traps(rows: list[dict], steps: list, model: nn.Module, policies: list, live: dict, saved: int,
               backward_ran: bool, stashed=(), mismatches=(), effects=()) -> list[Trap]:
    """The traps seen in one step, in the order: reentrant-no-grad, no-saving (keeps all or idle, then switched
    on but not run), last-segment, per-child, caller-keeps.

    rows: the Explanation's rows; steps: what the step saw per block (remat.auto.explain_step.BlockStep);
    policies: the checkpointing declared per block; live: bytes live at backward start and what explains them;
    saved: bytes autograd and the SAC caches kept (int bytes); backward_ran: whether the loss required grad;
    stashed: remat.auto.preserve.Stashed tensors the blocks keep on themselves; mismatches: remat.policies.
    Mismatch, recomputes that gave other values; effects: remat.auto.preserve.SideEffect, forward code a
    recompute runs again (named for the blocks that recompute)."""
    checkpointed = [r for r in rows if r["region"] in ("block", "segment")]
    lost = [r for r, st in zip(rows, steps)
            if st.reentrant and st.calls and not st.inputs_require_grad and r["got_grads"] is False]
    skip = {r["index"] for r in lost}
    found = [_reentrant_no_grad(lost), _keeps_all(checkpointed, skip, backward_ran), _not_run(rows, skip),
             _last_segment(rows, steps, policies, checkpointed, _segments_spec(model)), _per_child(rows),
             _caller_keeps(live, saved), _stashed(stashed), _recompute_differs(mismatches),
             _side_effects(effects, set(names_of(checkpointed)))]
    return [trap for trap in found if trap is not None]


def _reentrant_no_grad(lost: list[dict]) -> Trap | None:
    """Reentrant checkpoint whose inputs need no gradient: ``lost`` got no parameter gradients."""
    if not lost:
        return None
    return Trap(REENTRANT_NO_GRAD, names_of(lost), (
        f"{span_of(lost)} run under reentrant checkpoint (use_reentrant=True) but none of their inputs "
        "requires grad, so their parameters got no gradients this step: the "
        f"{bytes_text(sum(r['kept_bytes'] for r in lost))} they keep is not a saving, it is a silent bug "
        "(frozen embeddings, LoRA)."),
        "use use_reentrant=False (remat.auto.apply, gradient_checkpointing_kwargs={'use_reentrant': False}), "
        "or make the block input require grad (HF: model.enable_input_require_grads()).")


def _keeps_all(checkpointed: list[dict], skip: set, backward_ran: bool) -> Trap | None:
    """Checkpointed blocks that keep (about) all their plain bytes, or recompute nothing in backward."""
    wasted = []
    for r in checkpointed:
        if r["index"] in skip or not r["calls"]:
            continue
        keeps = r["kept_share"] is not None and r["kept_share"] >= KEEPS_ALL
        idle = backward_ran and r["recompute_ops"] == 0 and (r["plain_bytes"] or 0) > 0
        if keeps or idle:
            wasted.append((r, "keeps" if keeps else "idle"))
    if not wasted:
        return None
    kept = sum(r["kept_bytes"] for r, _ in wasted)
    plain = sum(r["plain_bytes"] or 0 for r, _ in wasted)
    what = ("keeps " + share_text(kept, plain) + f" of {'its' if len(wasted) == 1 else 'their'} plain bytes "
            f"({bytes_text(kept)} of {bytes_text(plain)})"
            if any(k == "keeps" for _, k in wasted) else "recomputes nothing in backward")
    blocks = [r for r, _ in wasted]
    return Trap(NO_SAVING, names_of(blocks), (
        f"{span_of(blocks)} {'is' if len(blocks) == 1 else 'are'} checkpointed but "
        f"{what if len(blocks) == 1 else what.replace('keeps', 'keep').replace('recomputes', 'recompute')}: "
        "the checkpoint saves (about) nothing."),
        "check what the region saves: a selective policy that saves every op, or a region whose "
        "outputs are all kept, saves nothing — checkpoint the whole block with a policy that "
        "recomputes (remat.auto.apply(model, 'full')).")


def _not_run(rows: list[dict], skip: set) -> Trap | None:
    """Checkpointing switched on (auto.apply or HuggingFace) that did not run."""
    inactive = [r for r in rows if r["declared"] in ("full", "selective", "hf") and r["region"] == "none"
                and r["calls"] and r["index"] not in skip]
    if not inactive:
        return None
    hf = any(r["declared"] == "hf" for r in inactive)
    return Trap(NO_SAVING, names_of(inactive), (
        f"checkpointing is switched on for {span_of(inactive)} but did not run: they keep "
        f"{bytes_text(sum(r['kept_bytes'] for r in inactive))}, "
        f"{share_text(sum(r['kept_bytes'] for r in inactive), sum(r['plain_bytes'] or 0 for r in inactive))} "
        "of their plain bytes."),
        ("HuggingFace layers checkpoint only in training mode with grad enabled: call model.train() "
         "(from_pretrained returns the model in eval mode)." if hf else
         "run the step in training with grad enabled, and do not replace the blocks' forward after "
         "remat.auto.apply."))


def _last_segment(rows: list[dict], steps: list, policies: list, checkpointed: list[dict],
                  segments: str | None) -> Trap | None:
    """The last segment of checkpoint_sequential / segments:k (or of checkpointing by segments) left plain."""
    tail = []
    for r, st in zip(reversed(rows), reversed(steps)):
        if r["region"] != "none" or not st.calls:
            break
        tail.append(r)
    tail.reverse()
    sequential = any(steps[r["index"]].sequential for r in tail)
    deliberate = any(p in ("none", "offload") for p in policies[-len(tail):]) if tail else False
    if not (tail and (sequential or segments or (checkpointed and len(tail) < len(rows) and not deliberate
                                                 and all(r["region"] != "none" for r in rows[:-len(tail)])))):
        return None
    kept = sum(r["kept_bytes"] for r in tail)
    how = (f"'{segments}'" if segments else "checkpoint_sequential" if sequential
           else "checkpointing by segments")
    every = len(tail) == len(rows)
    return Trap(LAST_SEGMENT, names_of(tail), (
        f"{how} never checkpoints its last segment: {span_of(tail)} "
        f"{'(every block: one segment checkpoints nothing) ' if every else ''}"
        f"keep{'s' if len(tail) == 1 else ''} everything, {bytes_text(kept)}."),
        "use more segments (k ≥ 2; k = √L is Chen's choice) or checkpoint the last blocks too "
        "(remat.auto.apply(model, 'full') wraps every block).")


def _per_child(rows: list[dict]) -> Trap | None:
    """Each child checkpointed instead of the block."""
    split = [r for r in rows if r["region"] == "children"]
    if not split:
        return None
    kept = sum(r["kept_bytes"] for r in split)
    plain = sum(r["plain_bytes"] or 0 for r in split)
    return Trap(PER_CHILD, names_of(split), (
        f"{span_of(split)} checkpoint{'s' if len(split) == 1 else ''} each child separately, not the "
        f"block: the block's own ops (norms, residual adds) and every child's inputs are still kept — "
        f"{bytes_text(kept)}, {share_text(kept, plain)} of the plain {bytes_text(plain)}; checkpointed whole, "
        f"they would keep about their inputs, {bytes_text(sum(r['input_bytes'] or 0 for r in split))}."),
        "checkpoint the block as one region (remat.auto.apply(model, 'full'), HF "
        "gradient_checkpointing_enable(), or checkpoint(block, ...)), not its attention and MLP.")


def _caller_keeps(live: dict, saved: int) -> Trap | None:
    """Tensors kept alive by the caller: live bytes at backward start beyond everything accounted for."""
    excess = sum(live["excess"].values())
    if not (excess > 0 and excess >= CALLER_SHARE * max(saved, 1)):
        return None
    ranked = sorted(live["excess"].items(), key=lambda kv: -kv[1])
    holders = ", ".join(f"{k} {bytes_text(v)}" for k, v in ranked)
    return Trap(CALLER_KEEPS, (), (
        f"{bytes_text(excess)} is live at the start of backward beyond parameters, gradients, inputs, saved "
        f"tensors, SAC caches, the loss and the output it comes from: {holders}; checkpointing cannot "
        "free what the caller holds."),
        "do not ask for output_hidden_states / output_attentions while training, drop outputs and "
        "hook-held activations before backward (loss = model(...).loss).")


def _segments_spec(model: nn.Module) -> str | None:
    """The model's ``segments:k`` plan spec (remat.policies), or None."""
    spec = getattr(getattr(model, "remat_plan", None), "spec", "") or ""
    return spec if spec.startswith("segments:") else None


def _stashed(stashed) -> Trap | None:
    """Blocks whose forward left tensors on their modules (attributes, lists they append to)."""
    if not stashed:
        return None
    listed = ", ".join(f"{s.attribute} ({bytes_text(s.nbytes)})" for s in stashed[:4])
    more = f" and {len(stashed) - 4} more" if len(stashed) > 4 else ""
    return Trap(STASHED, tuple(dict.fromkeys(s.block for s in stashed)), (
        f"blocks keep tensors on themselves after forward: {listed}{more} — "
        f"{bytes_text(sum(s.nbytes for s in stashed))} alive until the next step replaces them, whatever "
        "checkpointing saves, and a recompute sets them again."),
        "do not store activations on the module (return them, or store them detached and only when needed); "
        "guard such side effects with remat.policies.recomputing().")


def _recompute_differs(mismatches) -> Trap | None:
    """Blocks whose recompute gave other values than their forward (remat.policies.ValueCheck)."""
    if not mismatches:
        return None
    first = mismatches[0]
    return Trap(RECOMPUTE_DIFFERS, tuple(dict.fromkeys(m.region for m in mismatches)), (
        f"{len(mismatches)} recomputed block{'s' if len(mismatches) > 1 else ''} gave other values than in "
        f"forward; {first.region}: {first} — its gradients differ from the unmodified model's."),
        "make the block depend only on its inputs (pass the state as an argument), or give it policy none or "
        "offload.")


def _side_effects(effects, recomputed: set) -> Trap | None:
    """Hooks and changed attributes in blocks that recompute: they run twice per step."""
    effects = [e for e in effects if e.block in recomputed]
    if not effects:
        return None
    listed = ", ".join(e.what for e in effects[:4]) + (f" and {len(effects) - 4} more" if len(effects) > 4 else "")
    return Trap(SIDE_EFFECTS, tuple(dict.fromkeys(e.block for e in effects)), (
        f"forward code with side effects runs again when these blocks recompute in backward: {listed} — a "
        "counter advances twice per step, a hook fires twice (values the recompute reads are checked; these are "
        "not)."),
        "skip them while remat.policies.recomputing() is True (or torch.utils.checkpoint's recompute), or give "
        "the block policy none or offload.")
