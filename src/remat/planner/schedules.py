"""What each pipeline rank holds over a step, read from torch.distributed.pipelining's own schedules.

A schedule is named as torch and torchtitan name it (``NAMES``; ``torch.distributed.pipelining.schedules.
get_schedule_class`` resolves the name, so a schedule torch adds is one more name here). It is built on stand-in
stages (no process group, no model: only what its constructor reads) for ``pp`` ranks, ``stages_per_rank`` stages
each and N micro-batches, and its per-rank action list is read (``pipeline_order``: F, B, and for a split
backward I then W; DualPipeV's overlapped forward-backward pairs are taken apart, forward first). Following each
rank's actions, ``timeline`` records what the rank holds at every point (``Event``):

* F(s, m): one more micro-batch of stage s's forward activations held (recorded after the forward, when they all
  exist);
* B(s, m): recorded while it runs (the micro-batch still held, stage s's backward transient on top), then freed;
* I(s, m) (input gradients only): recorded while it runs like B; torch's ``stage_backward_input`` keeps the
  graph for the weight-gradient step (retain_graph), so the activations stay held, now marked ``split``;
* W(s, m): recorded while it runs, then the micro-batch is freed.

Micro-batch indices are not used, only counts per stage: torch 2.13's ``Schedule1F1B._get_pipeline_order`` labels
the last rank's micro-batches one too high (F1…F8 for eight micro-batches; its runtime does not read that list),
which leaves the counts right. A rank's activation peak for given per-stage bytes is ``Timeline.peak_bytes``: the
largest, over its events, of Σ_s held_s × stored_s + Σ_s split_s × split_extra_s + the running backward's
transient. Megatron's schedules are the special case ``in_flight`` states (Korthikanti §4.2.3): under 1F1B rank r
holds at most min(p − r, N) micro-batches; interleaved with m chunks, 2(p − r − 1) + (m − 1)p + 1 chunk
micro-batches when N ≥ 2p.

The same action lists time a step (``step_seconds``): every rank runs its actions in torch's order, each starting
when the rank is free and its input exists — F(s, j) once F(s − 1, j) is done, B or I(s, j) once the gradient of
stage s + 1 for micro-batch j is (B or I there), W(s, j) after I(s, j) — and the step is the last action's end.
Micro-batch j of a stage is its j-th action of that kind, B and I counted together (each stage runs its
micro-batches in order). Sends take
no time. For equal stages this is (N + p − 1)(f + b) under GPipe and 1F1B, the bubble of Narayanan et al. 2021.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace

from remat.errors import UsageError

NAMES = ("GPipe", "1F1B", "Interleaved1F1B", "LoopedBFS", "InterleavedZeroBubble", "ZBVZeroBubble", "DualPipeV")
"""Schedules by torch's (and torchtitan's) names, in torch 2.13."""

V_SHAPED = ("ZBVZeroBubble", "DualPipeV")
"""Two stages per rank, in a V: rank r runs stages r and 2p − 1 − r (torch requires exactly two)."""


@dataclass(frozen=True)
class Event:
    """One point of a rank's timeline. ``held``: per local stage (the rank's stages in ascending order), the
    micro-batches whose forward activations the rank keeps; ``split``: of those, the ones past their input-gradient
    step (a split backward) waiting for their weight-gradient step; ``backward``: the local stage whose backward
    (B or I) runs at this point, else None; ``sent``, ``sent_grads``: per local stage, the forwards done so far
    (this one included) and the backwards done before this one — what a schedule that keeps its sends until the
    step ends (``Timeline.keeps_sends``) still holds of the outputs it sent on and the input gradients it sent
    back."""

    held: tuple[int, ...]
    split: tuple[int, ...]
    backward: int | None
    sent: tuple[int, ...] = ()
    sent_grads: tuple[int, ...] = ()


@dataclass(frozen=True)
class Timeline:
    """Every rank's events under one schedule: ``stages[r]`` the global stage indices rank r runs (ascending),
    ``events[r]`` its events in order; ``keeps_sends``: the schedule runs on torch's ``_PipelineScheduleRuntime``,
    which waits for its sends only when the step ends (``_step_microbatches``: ``send_ops``), so every tensor a rank
    sent stays alive until then (GPipe and 1F1B wait for each send within the step)."""

    schedule: str
    pp: int
    micro_batches: int
    stages: tuple[tuple[int, ...], ...]
    events: tuple[tuple[Event, ...], ...]
    keeps_sends: bool = False

    def most_held(self, rank: int) -> int:
        """The most stage micro-batches rank ``rank`` holds at once (all its stages together)."""
        return max(sum(e.held) for e in self.events[rank])

    def peak_bytes(self, rank: int, stored, transient, split_extra=None, sent=None) -> int:
        """Rank ``rank``'s activation peak (int bytes): per local stage, ``stored`` bytes one micro-batch's
        forward leaves held, ``transient`` bytes its backward adds while it runs, ``split_extra`` bytes a
        micro-batch past its input-gradient step holds on top of ``stored`` (default 0), ``sent`` (output bytes,
        input-gradient bytes) a send keeps alive when the schedule ``keeps_sends`` (default none)."""
        return max(self.event_bytes(e, stored, transient, split_extra, sent) for e in self.events[rank])

    def event_bytes(self, e: Event, stored, transient, split_extra=None, sent=None) -> int:
        """``peak_bytes``'s bytes at one event."""
        out = sum(n * b for n, b in zip(e.held, stored)) + sum(n * b for n, b in zip(e.split, split_extra or ()))
        if sent is not None and self.keeps_sends:
            out += sum(n * b for n, (b, _) in zip(e.sent, sent)) + sum(n * g for n, (_, g) in zip(e.sent_grads, sent))
        return out + (transient[e.backward] if e.backward is not None else 0)


def check_name(name: str) -> str:
    """``name`` in torch's spelling (case-insensitive match). Raises UsageError("--schedule") for an unknown one."""
    known = {n.lower(): n for n in NAMES}
    if name.lower() not in known:
        raise UsageError("--schedule", f"unknown schedule {name!r} (known: {', '.join(NAMES)})")
    return known[name.lower()]


def single_stage(name: str) -> bool:
    """Whether torch runs schedule ``name`` with one stage per rank (a ``PipelineScheduleSingle``)."""
    from torch.distributed.pipelining import schedules

    return issubclass(schedules.get_schedule_class(check_name(name)), schedules.PipelineScheduleSingle)


def _schedule(name: str, pp: int, micro_batches: int, stages_per_rank: int):
    """The torch schedule object on stand-in stages. Raises UsageError("--interleave") for a stage count the
    schedule does not run, UsageError("--pp" or "--global-batch") for a pipeline size or a micro-batch count
    torch refuses."""
    from torch import nn
    from torch.distributed.pipelining import schedules

    cls, single = schedules.get_schedule_class(name), single_stage(name)
    if single and stages_per_rank != 1:
        raise UsageError("--interleave", f"{name} runs one stage per rank; drop --interleave (or use "
                                         f"Interleaved1F1B / LoopedBFS / InterleavedZeroBubble)")
    if name in V_SHAPED and stages_per_rank != 2:
        raise UsageError("--interleave", f"{name} runs two stages per rank in a V; give --interleave 2")
    if not single and stages_per_rank < 2:
        raise UsageError("--interleave", f"{name} runs several stages per rank; give --interleave 2 or more")
    if pp < 2:
        raise UsageError("--pp", f"a pipeline schedule needs 2 or more stages (ranks), got --pp {pp}")
    n = pp * stages_per_rank
    stand_in = [SimpleNamespace(stage_index=k * pp, num_stages=n, group_rank=0, group_size=pp, is_first=k == 0,
                                is_last=k * pp == n - 1, submod=nn.Module()) for k in range(stages_per_rank)]
    try:
        return cls(stand_in[0], micro_batches) if single else cls(stand_in, micro_batches)
    except (ValueError, AssertionError) as err:
        field = "--global-batch" if "microbatch" in str(err).lower() else "--pp"
        raise UsageError(field, f"{name} with {pp} ranks and {micro_batches} micro-batches: {err}") from err


def actions(name: str, pp: int, micro_batches: int, stages_per_rank: int = 1) -> dict[int, list[tuple[int, str]]]:
    """rank -> its compute actions in order, each (global stage index, "F" | "B" | "I" | "W"), from the torch
    schedule's ``pipeline_order`` (idle steps and communication left out, overlapped pairs taken apart)."""
    order = _schedule(check_name(name), pp, micro_batches, stages_per_rank).pipeline_order
    out = {}
    for rank, acts in order.items():
        flat = []
        for a in acts:
            for sub in (a.sub_actions or (a,)) if a is not None else ():
                kind = sub.computation_type.value
                if kind in ("F", "B", "I", "W"):
                    flat.append((sub.stage_index, kind))
        out[rank] = flat
    return out


def timeline(name: str, pp: int, micro_batches: int, stages_per_rank: int = 1) -> Timeline:
    """Every rank's events (module docstring) under schedule ``name``."""
    acts = actions(name, pp, micro_batches, stages_per_rank)
    stages = tuple(tuple(sorted({s for s, _ in acts[r]})) for r in range(pp))
    events = []
    for r in range(pp):
        local = {s: i for i, s in enumerate(stages[r])}
        held, split, sent, back = ([0] * len(local) for _ in range(4))
        out = []
        for stage, kind in acts[r]:
            i = local[stage]
            if kind == "F":
                held[i] += 1
                sent[i] += 1
            out.append(Event(tuple(held), tuple(split), i if kind in ("B", "I") else None, tuple(sent), tuple(back)))
            back[i] += kind in ("B", "I")
            if kind == "I":
                split[i] += 1
            elif kind in ("B", "W"):
                held[i] -= 1
                split[i] -= kind == "W"
        events.append(tuple(out))
    return Timeline(check_name(name), pp, micro_batches, stages, tuple(events), _keeps_sends(check_name(name)))


def step_seconds(name: str, pp: int, micro_batches: int, stages_per_rank: int, seconds) -> float:
    """One step's seconds under schedule ``name`` (module docstring). ``seconds[s]``: stage s's (forward,
    backward, weight-gradient) seconds per micro-batch, the backward with what it recomputes; a split backward
    runs I for backward − weight and W for weight. Raises RuntimeError if the action lists cannot all run."""
    acts = actions(name, pp, micro_batches, stages_per_rank)
    last = pp * stages_per_rank - 1
    done: dict[tuple, float] = {}           # (kind, stage, micro-batch) -> end; kind "F", "G" (gradient sent), "W"
    seen: dict[tuple, int] = {}
    free, at = [0.0] * pp, [0] * pp
    while any(at[r] < len(acts[r]) for r in range(pp)):
        moved = False
        for r in range(pp):
            while at[r] < len(acts[r]):
                stage, kind = acts[r][at[r]]
                counted = (stage, "B" if kind == "I" else kind)          # a stage's Bs and Is count together
                j = seen.get(counted, 0)
                need = {"F": ("F", stage - 1, j) if stage else None, "W": ("G", stage, j)}.get(
                    kind, ("G", stage + 1, j) if stage < last else ("F", stage, j))
                if need is not None and need not in done:
                    break
                f, b, w = seconds[stage]
                start = max(free[r], done.get(need, 0.0))
                free[r] = start + {"F": f, "B": b, "I": b - w, "W": w}[kind]
                done[("F" if kind == "F" else "W" if kind == "W" else "G", stage, j)] = free[r]
                seen[counted], at[r], moved = j + 1, at[r] + 1, True
        if not moved:
            raise RuntimeError(f"{name}: the ranks' actions wait on each other (p = {pp}, N = {micro_batches})")
    return max(free)


def _keeps_sends(name: str) -> bool:
    """Whether torch runs ``name`` on ``_PipelineScheduleRuntime`` (``Timeline.keeps_sends``; False where torch
    has no such class)."""
    from torch.distributed.pipelining import schedules

    runtime = getattr(schedules, "_PipelineScheduleRuntime", None)
    return runtime is not None and issubclass(schedules.get_schedule_class(name), runtime)
