"""Per-rank recompute plans for a pipeline schedule as torch runs it (``plan_pipeline``).

Rank r of schedule S (``remat.planner.schedules.timeline``: what r holds after each of its actions) runs k stages
(1; ``--interleave`` m for the looped schedules; 2 for the V ones) of L/(p·k) layers each. Per layer, the
options per micro-batch, the bytes outside the layers of the first and last stage and each rank's fixed bytes
(model state of its parameters, the workspace reserve) come from ``remat.planner.rank_costs`` (Korthikanti's
closed form for GPT models, measured under fake tensors for the others). Rank r's peak for a plan is

    fixed_r + max over its events e of  Σ_c held_e(c) · (Σ_{layers of c} stored + outside_c)
                                        + Σ_c split_e(c) · Σ_{layers of c} (retained + weight_grads)
                                        + transient_{b(e)}

with transient_c the worst chosen transient of stage c's layers (or its outside transient) while c's backward
runs, retained what a split backward's input-gradient step recomputed and keeps until the weight-gradient step
(``rank_costs.RECOMPUTED``) and weight_grads the gradients of the layer's weight-op outputs it keeps for that step.
Each rank's plan minimises its seconds per micro-batch under that peak ≤ budget (every event a linear
constraint: a MILP, ``scipy.optimize.milp``, one binary per layer option and one bound per stage transient);
the uniform plan (one per-layer choice for every stage of every rank, what Megatron's flags and torchtitan's
config express) is the same MILP over all ranks at once. It is feasible for every rank's own MILP, so the per-rank
plans are never slower on any rank. Step seconds: the schedule's own actions timed (``schedules.step_seconds``,
bubble included: (N + (p − 1)/k) · t for equal ranks under 1F1B and interleaved, less under a split backward) with
each stage's forward, backward (its layers' chosen seconds less the forward) and weight-gradient seconds per
micro-batch: the roofline's forward of a layer and half its gradient work (each GEMM's backward is one product for
the input's gradient and one for the weight's), scaled to a calibrated ``none`` where one is given. Each rank
minimises its own seconds per micro-batch, which minimises the step for one stage per rank; with several stages per
rank the step is evaluated, not searched, and where the uniform plan's step is shorter (the ranks' least sums left
their stages unbalanced) every rank takes the uniform plan. Not counted: a GPT layer's backward workspace (the
workspace reserve's; a measured layer's is in its options' transients), the head's and the embedding's time, the
sends' time. With ``runtime`` (the default) the rank also holds what torch.distributed.pipelining keeps: a receive
buffer per micro-batch for each stage's input and output gradient, allocated at the first step and kept
(a received input is the first layer's saved input: not counted twice), and each stage's output until its backward
— or, where the schedule runs on torch's ``_PipelineScheduleRuntime`` (``Timeline.keeps_sends``), every output sent on
and input gradient sent back, until the step ends.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from remat.errors import InfeasibleError, UsageError
from remat.models.presets import ModelConfig
from remat.planner.costs import micro_batches
from remat.planner.layer_costs import Settings, layer_seconds
from remat.planner.rank_costs import RankCosts, rank_costs
from remat.planner import schedules
from remat.planner.schedules import V_SHAPED, Timeline, check_name, single_stage, timeline


MIB = float(2**20)
"""Bytes enter HiGHS in MiB: in bytes (coefficients up to 1e10 beside 0/1 indicators) it returned a plan it called
optimal that a faster feasible one beat; every plan's peak is then evaluated exactly in integers."""


@dataclass(frozen=True)
class RankPlan:
    """One rank's plan: ``policies`` per layer of its stages (stage by stage, ascending), its peak and fixed bytes,
    its seconds per micro-batch (``stage_seconds`` per local stage), and the most stage micro-batches it holds at
    once."""

    rank: int
    stages: tuple[int, ...]
    policies: tuple[str, ...]
    peak_bytes: int
    fixed_bytes: int
    seconds_per_micro_batch: float
    most_held: int
    stage_seconds: tuple[float, ...] = ()


@dataclass(frozen=True)
class PipelinePlan:
    """Per-rank plans and the uniform plan of one schedule, each with its predicted step seconds."""

    schedule: str
    pp: int
    stages_per_rank: int
    micro_batches: int
    budget_bytes: int
    ranks: tuple[RankPlan, ...]
    uniform: tuple[RankPlan, ...]
    step_time_s: float
    uniform_step_time_s: float


@dataclass(frozen=True)
class _Rank:
    """The data of one rank's MILP: per local stage its outside bytes (stored per micro-batch, transient), the
    distinct events, fixed bytes and the most micro-batches each stage holds (host bytes of offload)."""

    fixed: int
    outside: tuple[tuple[int, int], ...]
    events: tuple
    most: tuple[int, ...]
    split_grads: int = 0
    sent: tuple | None = None


def stages_per_rank(schedule: str, cfg: ModelConfig) -> int:
    """Stages each rank runs under ``schedule``: 2 for the V-shaped ones, else ``cfg.interleave``. Raises
    UsageError("--interleave") for a V-shaped schedule given another count than 2 (1 means unset)."""
    if check_name(schedule) not in V_SHAPED:
        return cfg.interleave
    if cfg.interleave > 2:
        raise UsageError("--interleave", f"{check_name(schedule)} runs two stages per rank in a V; give --interleave 2")
    return 2


def default_interleave(schedule: str, preset: int) -> int:
    """Stages per rank when --interleave is not given: 1 for a one-stage schedule (GPipe, 1F1B), 2 for a V,
    else the preset's m (at least 2)."""
    name = check_name(schedule)
    return 1 if single_stage(name) else 2 if name in V_SHAPED else max(2, preset)


def _ranks(cfg: ModelConfig, st: Settings, rc: RankCosts, tl: Timeline, per_stage: int, runtime: bool) -> list[_Rank]:
    last = tl.pp * len(tl.stages[0]) - 1
    out = []
    for r, stages in enumerate(tl.stages):
        events = tuple(dict.fromkeys((e.held, e.split, e.backward, e.sent, e.sent_grads) for e in tl.events[r]))
        most = tuple(max(e.held[c] for e in tl.events[r]) for c in range(len(stages)))
        fixed = rc.fixed(st, per_stage * len(stages), 0 in stages, last in stages, cfg.ep)
        fixed += sum(rc.buffers(s, last, tl.micro_batches) for s in stages) if runtime else 0
        kept = runtime and tl.keeps_sends
        out.append(_Rank(fixed, tuple(rc.outside(s, last, runtime, kept) for s in stages), events, most,
                         rc.weight_grads, tuple(rc.sent(s, last) for s in stages) if kept else None))
    return out


def _solve(ranks: list[_Rank], blocks: list[list[int]], options: list[dict], per_stage: int, room: list[int],
           host: int | None) -> np.ndarray | None:
    """Counts n[k, o] of layers taking option o in each choice block k (``blocks[r][c]``: the block of rank r's
    local stage c), least Σ seconds, every event of every rank within ``room[r]``; None when none fits.
    Variables: n (integer, Σ_o n = per_stage per block), z ≥ n / per_stage (binary: option o used in block k),
    T[r, c] ≥ transient_o · z and ≥ the stage's outside transient (what c's backward adds)."""
    from scipy.optimize import Bounds, LinearConstraint
    from scipy.optimize import milp as highs_milp

    from remat.planner.milp import SECONDS, _quiet

    n_blocks, n_opt = 1 + max(k for b in blocks for k in b), len(options)
    cells = [(r, c) for r, b in enumerate(blocks) for c in range(len(b))]
    width = 2 * n_blocks * n_opt + len(cells)
    n_at = lambda k, o: k * n_opt + o                                          # noqa: E731
    z_at = lambda k, o: n_blocks * n_opt + k * n_opt + o                       # noqa: E731
    t_at = {cell: 2 * n_blocks * n_opt + i for i, cell in enumerate(cells)}
    rows, lo, hi = [], [], []

    def row(coefs, low: float, high: float) -> None:
        vec = np.zeros(width)
        for i, v in coefs:          # (index, coefficient) pairs; an index may repeat (a block in two stages)
            vec[i] += v
        rows.append(vec), lo.append(low), hi.append(high)

    for k in range(n_blocks):
        row([(n_at(k, o), 1) for o in range(n_opt)], per_stage, per_stage)
        for o in range(n_opt):
            row([(n_at(k, o), 1), (z_at(k, o), -per_stage)], -np.inf, 0)
    for (r, c), t in t_at.items():
        for o, opt in enumerate(options):
            row([(z_at(blocks[r][c], o), opt["transient"] / MIB), (t, -1)], -np.inf, 0)
    for r, rank in enumerate(ranks):
        for held, split, back, sent, grads in rank.events:
            coefs = [(n_at(blocks[r][c], o), (held[c] * opt["stored"] + split[c] * opt["retained"]) / MIB)
                     for c in range(len(held)) for o, opt in enumerate(options)]
            coefs += [(t_at[(r, back)], 1)] if back is not None else []
            fixed = sum(h * out[0] for h, out in zip(held, rank.outside)) + sum(split) * per_stage * rank.split_grads
            fixed += sum(f * b + g * d for f, g, (b, d) in zip(sent, grads, rank.sent)) if rank.sent else 0
            row(coefs, -np.inf, (room[r] - fixed) / MIB)
        if host is not None:
            row([(n_at(blocks[r][c], o), m * opt["host"] / MIB) for c, m in enumerate(rank.most)
                 for o, opt in enumerate(options)], -np.inf, host / MIB)
    cost = np.zeros(width)
    for r, b in enumerate(blocks):
        for k in b:
            for o, opt in enumerate(options):
                cost[n_at(k, o)] += opt["time"] * SECONDS
    lower = np.zeros(width)
    upper = np.concatenate([np.full(n_blocks * n_opt, per_stage), np.ones(n_blocks * n_opt),
                            np.full(len(cells), np.inf)])
    for (r, c), t in t_at.items():
        lower[t] = ranks[r].outside[c][1] / MIB
    integral = np.concatenate([np.ones(2 * n_blocks * n_opt), np.zeros(len(cells))])
    with _quiet():
        res = highs_milp(cost, constraints=LinearConstraint(np.array(rows), lo, hi), bounds=Bounds(lower, upper),
                         integrality=integral, options={"mip_rel_gap": 0.0})
    if res.status == 2:
        return None
    return np.rint(res.x[:n_blocks * n_opt]).astype(int).reshape(n_blocks, n_opt)


@dataclass(frozen=True)
class Setup:
    """What a schedule's per-rank plans are made from: the torch name, stages per rank k, ranks p, micro-batches
    N, layers per stage, the timeline, the layer options, each rank's MILP data and a layer's (forward,
    weight-gradient) seconds per micro-batch (``phases``)."""

    name: str
    k: int
    p: int
    n: int
    per_stage: int
    tl: Timeline
    options: tuple[dict, ...]
    ranks: tuple[_Rank, ...]
    phases: tuple[float, float] = (0.0, 0.0)


def setup(cfg: ModelConfig, st: Settings, schedule: str, runtime: bool = True, priced=None) -> Setup:
    """``plan_pipeline``'s inputs. ``priced``: (RankCosts, phases) measured elsewhere (a transformers model's block,
    ``remat.auto.ranks``), else ``rank_costs(cfg, st)`` and ``_phases``. Raises UsageError naming the field for bad
    input."""
    name = check_name(schedule)
    k, p = stages_per_rank(name, cfg), cfg.pp
    if cfg.layers % (p * k):
        raise UsageError("--layers", f"{name} splits the layers over {p} × {k} stages: {cfg.layers} layers do not "
                                     "divide evenly")
    per_stage, n = cfg.layers // (p * k), micro_batches(cfg, st.dp)
    tl = timeline(name, p, n, k)
    rc, phases = priced or (rank_costs(cfg, st), _phases(cfg, st))
    return Setup(name, k, p, n, per_stage, tl, rc.options, tuple(_ranks(cfg, st, rc, tl, per_stage, runtime)),
                 phases)


def _phases(cfg: ModelConfig, st: Settings) -> tuple[float, float]:
    """(forward, weight-gradient) seconds of one layer and micro-batch (module docstring): the roofline's
    forward and half its gradient work under ``none``, scaled to a calibrated ``none`` where one is given."""
    none = layer_seconds(cfg, st)["none"]
    scale = (st.calibration or {}).get("none", none.combined_s) / none.combined_s
    return none.forward_s * scale, none.backward.total_s / 2 * scale


def plan_pipeline(cfg: ModelConfig, st: Settings, schedule: str, runtime: bool = True, priced=None) -> PipelinePlan:
    """Per-rank plans and the uniform plan of ``cfg`` (p = cfg.pp ranks, N = ``costs.micro_batches``) under
    ``schedule`` within ``st.budget_bytes`` per GPU (module docstring). ``runtime``: with what torch.distributed.
    pipelining keeps besides the model's own tensors (``RankCosts.buffers``, the stage outputs); False counts the
    model's tensors only, as the first-stage planner does. Raises UsageError naming the field for bad input,
    InfeasibleError naming the rank that no plan fits. ``priced``: as ``setup``'s."""
    su = setup(cfg, st, schedule, runtime, priced)
    options, ranks, k, p, n = list(su.options), list(su.ranks), su.k, su.p, su.n
    room = [st.budget_bytes - rank.fixed for rank in ranks]
    own = []
    for r, rank in enumerate(ranks):
        plans = _fitting(su.tl, [rank], [list(range(k))], options, su.per_stage, [room[r]], st, [r])
        if plans is None:
            raise InfeasibleError(f"rank {r} of {su.name} (p = {p}, N = {n}): no plan fits "
                                  f"{st.budget_bytes} bytes (its model state and reserve: {rank.fixed})", None)
        own += plans
    uniform = _fitting(su.tl, ranks, [[0] * k for _ in ranks], options, su.per_stage, room, st, range(p)) or ()
    step, shared = step_seconds(su, own), step_seconds(su, uniform) if uniform else float("nan")
    if shared < step:           # several stages per rank: each rank's least sum can leave its stages unbalanced
        own, step = list(uniform), shared
    return PipelinePlan(su.name, p, k, n, st.budget_bytes, tuple(own), uniform, step, shared)


def evaluate(su: Setup, policies) -> tuple[RankPlan, ...] | None:
    """Every rank running the same per-layer ``policies`` (one per layer of a rank's stages, stage by stage), its
    peak evaluated exactly; None when a policy is not among the options."""
    names = [o["policy"] for o in su.options]
    if any(q not in names for q in policies):
        return None
    counts = np.zeros((su.k, len(names)), dtype=int)
    for i, q in enumerate(policies):
        counts[i // su.per_stage, names.index(q)] += 1
    return tuple(_rank_plan(r, su.tl, rank, list(su.options), counts) for r, rank in enumerate(su.ranks))


def _fitting(tl: Timeline, ranks: list[_Rank], blocks, options, per_stage: int, room: list[int], st: Settings,
             ranks_at) -> list[RankPlan] | None:
    """The plans of ``_solve`` for the ranks ``ranks_at`` of ``tl``, each peak checked in integers: a plan HiGHS's
    tolerance let past the budget (by bytes) is solved again with a KiB less room; None when none fits."""
    for margin in (0, 1024):
        counts = _solve(ranks, blocks, options, per_stage, [x - margin for x in room], st.host_limit_bytes)
        if counts is None:
            return None
        plans = [_rank_plan(r, tl, rank, options, counts[blocks[i]]) for i, (r, rank) in enumerate(zip(ranks_at,
                                                                                                      ranks))]
        if all(plan.peak_bytes <= st.budget_bytes for plan in plans):
            return plans
    raise InfeasibleError(f"{tl.schedule}: HiGHS's plan exceeds the budget in exact arithmetic", None)


def step_seconds(su: Setup, plans) -> float:
    """One step's seconds with every rank running its plan (module docstring; ``schedules.step_seconds``)."""
    forward, weight = (su.per_stage * x for x in su.phases)
    seconds = [(0.0, 0.0, 0.0)] * (su.p * su.k)
    for plan in plans:
        for stage, total in zip(su.tl.stages[plan.rank], plan.stage_seconds):
            seconds[stage] = (forward, total - forward, weight)
    return schedules.step_seconds(su.name, su.p, su.n, su.k, seconds)


def _rank_plan(r: int, tl: Timeline, rank: _Rank, options: list[dict], counts: np.ndarray) -> RankPlan:
    """Rank r's plan from its per-stage option counts, its peak evaluated exactly in integers."""
    policies, stored, transient, retained = [], [], [], []
    for c, row in enumerate(counts):
        chosen = [o for o, m in enumerate(row) if m]
        policies += [options[o]["policy"] for o in chosen for _ in range(row[o])]
        stored.append(sum(int(m) * options[o]["stored"] for o, m in enumerate(row)) + rank.outside[c][0])
        transient.append(max([rank.outside[c][1]] + [options[o]["transient"] for o in chosen]))
        retained.append(sum(int(m) * (options[o]["retained"] + rank.split_grads) for o, m in enumerate(row)))
    seconds = tuple(sum(int(m) * options[o]["time"] for o, m in enumerate(row)) for row in counts)
    peak = rank.fixed + tl.peak_bytes(r, stored, transient, retained, rank.sent)
    return RankPlan(r, tl.stages[r], tuple(policies), peak, rank.fixed, sum(seconds), tl.most_held(r), seconds)
