"""From what the step of remat.auto.explain saw to its Explanation: per block the bytes autograd saved (checkpoint
inputs saved outside the blocks given to the block taking them), the SAC cache, how the block was checkpointed
(its region: none, block, segment, children, part) and by what mechanism, the plan's prediction; the totals; the
traps (remat.auto.traps).

The ``step`` these take is remat.auto.explain_step.Step; what each number counts: remat.auto.diagnose.
"""

from __future__ import annotations

from typing import Sequence

from torch import nn
from torch._subclasses.fake_tensor import FakeTensor

from remat.auto.blocks import Blocks
from remat.auto.explanation import Explanation
from remat.auto.traps import find_traps
from remat.auto.wrap import applied

_CKPT_OPS = ("checkpoint", "CheckpointFunction")  # SavedRecord.op of checkpoint inputs (non-reentrant, reentrant)


def explanation_of(step, log, kept, live: dict, got: list, backward_ran: bool) -> Explanation:
    """The Explanation of ``step``: ``log`` its SavedTensorLog, ``kept`` its KeptLog (SAC caches found added),
    ``live`` the bytes live at backward start and what explains them (Step._live), ``got`` per block whether
    its parameters got gradients."""
    names = step.found.names
    autograd = _attribute(step, log)
    autograd_storages = {r.address for r in log.activations()}
    policies = _declared(step.model, step.found)
    predicted = _predicted(step.result, names)
    rows = []
    for i, (name, st) in enumerate(zip(names, step.steps)):
        cache = sum(b for s, b in st.kept_storages.items() if s not in autograd_storages)
        kept_bytes = autograd[i] + cache
        region = _region(step, i)
        mechanism = _mechanism(st, region, policies[i])
        share = kept_bytes / st.plain_bytes if st.plain_bytes else None
        rows.append({"index": i, "block": name, "mechanism": mechanism, "region": region,
                     "declared": policies[i], "kept_bytes": kept_bytes, "saved_bytes": autograd[i],
                     "cache_bytes": cache, "plain_bytes": st.plain_bytes, "kept_share": share,
                     "predicted_bytes": predicted[i], "recompute_flops": st.recompute_flops,
                     "recompute_ops": st.recompute_ops, "forward_flops": st.forward_flops,
                     "inputs_require_grad": st.inputs_require_grad if st.calls else None,
                     "input_bytes": st.input_bytes if st.calls else None, "got_grads": got[i],
                     "calls": st.calls})
    saved_total = sum(r.storage_nbytes for r in log.activations())
    cache_total = sum(r.nbytes for r in kept.records if r.storage not in autograd_storages)
    totals = {
        "kept_bytes": sum(r["kept_bytes"] for r in rows),
        "plain_bytes": sum(r["plain_bytes"] or 0 for r in rows),
        "predicted_bytes": (sum(p for p in predicted if p is not None)
                            if any(p is not None for p in predicted) else None),
        "saved_bytes": saved_total, "cache_bytes": cache_total,
        "outside_blocks_bytes": saved_total + cache_total - sum(r["kept_bytes"] for r in rows),
        "recompute_flops": sum(r["recompute_flops"] for r in rows),
        "forward_flops": sum(r["forward_flops"] or 0 for r in rows),
        "live_at_backward_bytes": live["live_bytes"], "accounted_bytes": live["accounted"],
        "excess_bytes": sum(live["excess"].values()), "excess_by_holder": live["excess"],
        "backward_ran": backward_ran,
    }
    traps = find_traps(rows, step.steps, step.model, policies, live, saved_total + cache_total, backward_ran,
                       step.stashed, step.check.mismatches if step.check is not None else (), step.effects)
    return Explanation(rows, traps, totals, step.found.name, _device_of(step.model))


def _attribute(step, log) -> list[int]:
    """Bytes autograd saved per block; checkpoint inputs saved outside the blocks go to the block taking
    them (non-reentrant: the next block entered; reentrant: the last one entered, else the next)."""
    names = step.found.names
    out = [0] * len(names)
    for k, r in enumerate(log.records):
        if r.is_parameter or r.duplicate:
            continue
        i = _block_of(r.module, names)
        if i is None and r.op in _CKPT_OPS:
            i = _taker(step, k, r)
        if i is not None:
            out[i] += r.storage_nbytes
    return out


def _taker(step, k: int, record) -> int | None:
    """The block that takes checkpoint input ``record`` (the k-th saved), or None."""
    storage = record.address
    entered = [(st.entry, i) for i, st in enumerate(step.steps) if st.calls]
    after = [i for e, i in sorted(entered) if e > k]       # entry = len(records) when the block began
    before = [i for e, i in sorted(entered, reverse=True) if e <= k]
    order = after[:1] + before[:1] if record.op == "checkpoint" else before[:1] + after[:1]
    for i in order:
        if storage in step.steps[i].input_storages:
            return i
    return None


def _region(step, i: int) -> str:
    """none | segment | block | children | part: how the block's step was checkpointed."""
    st = step.steps[i]
    if st.region is not None:
        return "segment" if len(step.region_blocks.get(st.region, ())) > 1 else "block"
    called = list(st.child_regions.values())
    if called and all(len(r) == 1 for r in called) and len(set().union(*called)) == 1:
        return "block"            # every child inside one region that began in the block (HF, auto.apply)
    covered = [r for r in called if r]
    if len(covered) >= 2 and all(a.isdisjoint(b) for j, a in enumerate(covered) for b in covered[j + 1:]):
        return "children"         # two or more children, each in its own region(s)
    if st.inner_regions:
        return "part"
    if st.kept_storages or (st.calls and not called and _has_ckpt_records(step, i)):
        return "block"
    return "none"


def _has_ckpt_records(step, i: int) -> bool:
    """Whether block ``i`` saved checkpoint inputs itself (a checkpoint called inside its forward)."""
    name = step.found.names[i]
    return any(r.op in _CKPT_OPS and _block_of(r.module, [name]) == 0 for r in step.log.records)


def _block_of(module: str, names: Sequence[str]) -> int | None:
    """The index of the block (by qualified name) that module ``module`` is in, the innermost; or None."""
    best = None
    for i, name in enumerate(names):
        if module == name or module.startswith(name + "."):
            if best is None or len(name) > len(names[best]):
                best = i
    return best


def _declared(model: nn.Module, found: Blocks) -> list[str | None]:
    """Per block the checkpointing asked for: an auto.apply policy, "hf" for a HuggingFace layer with
    gradient_checkpointing on, else None."""
    done = applied(model)
    if done is not None and tuple(done[0].names) == tuple(found.names):
        return list(done[1])
    return ["hf" if getattr(b, "gradient_checkpointing", False) is True else None for b in found.modules]


def _predicted(result, names: Sequence[str]) -> list[int | None]:
    if result is None:
        return [None] * len(names)
    by_name = dict(zip(tuple(result.block_names), range(len(result.block_names))))
    out = []
    for name in names:
        j = by_name.get(name)
        out.append(None if j is None else        # the chosen option: a tensor plan's kept set, not the plain policy
                   int(result.problem.layers[j].options[result.plan.choices[j]].stored_bytes))
    return out


def _mechanism(st, region: str, declared) -> str:
    if declared == "offload":
        return "offload"
    if region == "none":
        return "none"
    kind = "reentrant" if st.reentrant else "non-reentrant"
    if st.kept_storages:
        kind = "selective (SAC)"
    return {"block": kind, "segment": f"segment, {kind}", "children": f"per child, {kind}",
            "part": f"part, {kind}"}[region]


def _device_of(model: nn.Module) -> str:
    p = next(model.parameters(), None)
    if p is None:
        return "cpu"
    return f"fake ({p.device})" if isinstance(p, FakeTensor) else str(p.device)
