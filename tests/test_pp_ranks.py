"""Per-rank plans for a pipeline schedule (remat.planner.ranks): against the first-stage planner (a second method
for 1F1B's rank 0), a brute force over every per-stage choice, and the by-construction promise (never slower
than one plan for every rank)."""

from __future__ import annotations

import dataclasses
import itertools
import json

import pytest

from remat.cli import main
from remat.errors import InfeasibleError, UsageError
from remat.models.presets import from_name
from remat.planner import costs
from remat.planner.make import make_problem, make_settings
from remat.planner.rank_costs import rank_costs, weight_output_bytes
from remat.planner.ranks import evaluate, plan_pipeline, setup, step_seconds
from remat.planner.schedules import timeline
from remat.planner.problem import plan_from_policies
from remat.planner.solve import minimum_budget, solve

GiB = 2**30


@pytest.mark.parametrize("gib", [60, 70, 80])
def test_1f1b_rank_0_is_the_first_stage_plan_of_the_megatron_planner(gib):
    cfg = dataclasses.replace(from_name("gpt3-175b"), interleave=1)
    _same_as_first_stage(cfg, gib * GiB)


@pytest.mark.parametrize("share", [0.2, 0.5, 0.8])
def test_1f1b_rank_0_of_a_measured_llama_is_the_first_stage_plan(share):
    cfg = dataclasses.replace(from_name("llama-tiny"), layers=4, pp=2, interleave=1, global_batch=8 * 4)
    wide = make_problem(cfg, "a100-80gb")
    lo, hi = minimum_budget(wide).peak_bytes, plan_from_policies(wide, ["none"] * 2).peak_bytes
    _same_as_first_stage(cfg, int(lo + share * (hi - lo)))


def _same_as_first_stage(cfg, budget: int) -> None:
    """Rank 0 of 1F1B holds min(p, N) micro-batches of every layer and stage 0's outside bytes: the first-stage
    planner's problem (remat.planner.costs), solved by its own exact search (the model's tensors only: neither
    counts torch.distributed.pipelining's receive buffers)."""
    first = solve(make_problem(cfg, "a100-80gb", sp=cfg.arch == "gpt", memory=budget))
    plan = plan_pipeline(cfg, make_settings(cfg, "a100-80gb", sp=cfg.arch == "gpt", memory=budget), "1F1B",
                         runtime=False)
    assert plan.ranks[0].peak_bytes == first.peak_bytes
    assert plan.ranks[0].seconds_per_micro_batch * costs.step_multiplier(cfg) == pytest.approx(first.step_time_s,
                                                                                                 rel=1e-12)
    assert sorted(plan.ranks[0].policies) == sorted(first.policies)


def _small(layers=8, pp=2, m=2, gb=8):
    cfg = dataclasses.replace(from_name("gpt3-175b"), layers=layers, pp=pp, interleave=m, global_batch=gb, tp=1,
                              hidden=1024, heads=8, kv_heads=8, seq=1024, vocab=32000)
    return cfg


def _brute(cfg, st, name, k):
    """Per rank, the least seconds per micro-batch over every multiset of options per stage whose peak, followed
    event by event (Timeline.peak_bytes) with the outside bytes of each stage, fits ``st.budget_bytes``."""
    per_stage, n, last = cfg.layers // (cfg.pp * k), costs.micro_batches(cfg, st.dp), cfg.pp * k - 1
    rc = rank_costs(cfg, st)                    # the inputs (closed form or measured); the search is what is tested
    tl, opts = timeline(name, cfg.pp, n, k), {o["policy"]: o for o in rc.options}
    plan = plan_pipeline(cfg, st, name)
    stage_choices = list(itertools.combinations_with_replacement(sorted(opts), per_stage))
    best = []
    for r in range(cfg.pp):
        out = [rc.outside(s, last, runtime=True, keeps_sends=tl.keeps_sends) for s in tl.stages[r]]
        sent = [rc.sent(s, last) for s in tl.stages[r]]
        fits = []
        for combo in itertools.product(stage_choices, repeat=k):
            stored = [sum(opts[p]["stored"] for p in c) + out[i][0] for i, c in enumerate(combo)]
            trans = [max([out[i][1]] + [opts[p]["transient"] for p in c]) for i, c in enumerate(combo)]
            split = [sum(opts[p]["retained"] + rc.weight_grads for p in c) for c in combo]
            if plan.ranks[r].fixed_bytes + tl.peak_bytes(r, stored, trans, split, sent) <= st.budget_bytes:
                fits.append(sum(opts[p]["time"] for c in combo for p in c))
        best.append(min(fits) if fits else None)
    return plan, best


@pytest.mark.parametrize("name, m, arch", [("1F1B", 1, "gpt"), ("GPipe", 1, "gpt"), ("Interleaved1F1B", 2, "gpt"),
                                           ("ZBVZeroBubble", 2, "gpt"), ("Interleaved1F1B", 2, "llama"),
                                           ("DualPipeV", 2, "llama")])
@pytest.mark.parametrize("share", [0.3, 0.6])
def test_each_rank_plan_is_the_fastest_that_fits_by_brute_force(name, m, arch, share):
    cfg = _small(m=m) if arch == "gpt" else dataclasses.replace(from_name("llama-tiny"), layers=8, pp=2,
                                                                  interleave=m, global_batch=8 * 8)
    wide = make_settings(cfg, "a100-80gb", sp=False, memory=10**15)
    lo = plan_pipeline(cfg, dataclasses.replace(wide, policies=("full",)), name)
    hi = plan_pipeline(cfg, dataclasses.replace(wide, policies=("none",)), name)
    budget = int(max(r.peak_bytes for r in lo.ranks) + share * (max(r.peak_bytes for r in hi.ranks)
                                                               - max(r.peak_bytes for r in lo.ranks)))
    st = dataclasses.replace(wide, budget_bytes=budget)
    plan, best = _brute(cfg, st, name, m)
    for r, rank in enumerate(plan.ranks):
        assert rank.peak_bytes <= budget
        assert rank.seconds_per_micro_batch == pytest.approx(best[r], rel=1e-12)


@pytest.mark.parametrize("name, m", [("1F1B", 1), ("GPipe", 1), ("Interleaved1F1B", 3), ("LoopedBFS", 2),
                                     ("InterleavedZeroBubble", 2), ("DualPipeV", 2)])
def test_per_rank_plans_are_never_slower_than_one_plan_for_every_rank(name, m):
    cfg = dataclasses.replace(from_name("gpt3-175b"), interleave=m)
    plan = plan_pipeline(cfg, make_settings(cfg, "a100-80gb", sp=True), name)
    assert len(plan.ranks) == len(plan.uniform) == cfg.pp
    for own, one in zip(plan.ranks, plan.uniform):
        assert own.seconds_per_micro_batch <= one.seconds_per_micro_batch + 1e-15
        assert own.peak_bytes <= plan.budget_bytes and one.peak_bytes <= plan.budget_bytes
    assert len({one.policies for one in plan.uniform}) == 1          # one plan: the same on every rank
    assert plan.step_time_s <= plan.uniform_step_time_s


def test_step_seconds_of_equal_ranks_is_the_megatron_bubble():
    rank = type("R", (), {"seconds_per_micro_batch": 0.5})()
    assert step_seconds([rank] * 4, 16, 1) == pytest.approx((16 + 3) * 0.5)
    assert step_seconds([rank] * 4, 16, 2) == pytest.approx((16 + 3 / 2) * 0.5)


def test_a_budget_under_a_ranks_model_state_names_the_rank():
    cfg = dataclasses.replace(from_name("gpt3-175b"), interleave=1)
    with pytest.raises(InfeasibleError, match="rank 0 of 1F1B"):
        plan_pipeline(cfg, make_settings(cfg, "a100-80gb", sp=True, memory=40 * GiB), "1F1B")
    with pytest.raises(UsageError) as err:
        plan_pipeline(dataclasses.replace(cfg, layers=90), make_settings(cfg, "a100-80gb", sp=True), "1F1B")
    assert err.value.field == "--layers"


def _cli(capsys, *args):
    code = main(["plan", "--model", "gpt3-175b", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_the_cli_writes_a_plan_per_rank_and_refuses_bad_input_with_one_line(capsys, tmp_path):
    code, out, err = _cli(capsys, "--sp", "--schedule", "interleaved1f1b", "--format", "json")
    assert code == 0, err
    plan = json.loads(out)
    assert plan["schedule"] == "Interleaved1F1B" and plan["stages_per_rank"] == 3 and len(plan["ranks"]) == 8
    differ = len({tuple(r["policies"]) for r in plan["ranks"]}) > 1
    assert plan["gain"] >= 0 and plan["apply"]["megatron"]["exact"] is not differ
    for args, field, want in [(("--schedule", "zigzag"), "--schedule", 2), (("--schedule", "1F1B", "--pp", "1"),
                                                                             "--pp", 2),
                              (("--schedule", "GPipe", "--interleave", "2"), "--interleave", 2),
                              (("--schedule", "1F1B", "--memory", "40GiB"), "rank 0", 3)]:
        code, out, err = _cli(capsys, *args, "--out", str(tmp_path / "plan.md"))
        assert code == want and field in err and out == "", (args, err)
        assert len(err.strip().splitlines()) == 1 and not (tmp_path / "plan.md").exists()


def test_torch_pipelinings_receive_buffers_and_kept_outputs_by_hand():
    # gpt3-175b at t = 8 with SP, s = 2048, b = 1: a stage-boundary activation is 2·s·b·h/t bytes (fp16, SP)
    cfg = dataclasses.replace(from_name("gpt3-175b"), interleave=1)
    st = make_settings(cfg, "a100-80gb", sp=True, memory=10**15)
    bare, run = (plan_pipeline(cfg, st, "1F1B", runtime=r) for r in (False, True))
    n, boundary = costs.micro_batches(cfg), 2 * cfg.seq * cfg.micro_batch * cfg.hidden // cfg.tp
    extra = [b.fixed_bytes for b in run.ranks]
    base = [b.fixed_bytes for b in bare.ranks]
    # one buffer per micro-batch for the output's gradient (all but the last stage) and the input (all but the first)
    assert [e - b for e, b in zip(extra, base)] == [n * boundary] + [2 * n * boundary] * 6 + [n * boundary]


def test_a_split_backward_keeps_the_weight_op_output_gradients_of_a_llama_layer_by_hand():
    cfg = from_name("llama-tiny")
    h, kv, f, s, b = cfg.hidden, cfg.kv_heads * cfg.hidden // cfg.heads, cfg.ffn_hidden, cfg.seq, cfg.micro_batch
    # qkv (h + 2kv), proj h, gate and up f each, down h, two RMSNorms h each; float32
    assert weight_output_bytes(cfg) == s * b * (h + 2 * kv + h + 2 * f + h + 2 * h) * 4


def test_a_trainer_format_gets_the_fastest_single_setting_that_fits_every_rank(capsys):
    cfg = dataclasses.replace(from_name("gpt3-175b"), interleave=2)
    st = make_settings(cfg, "a100-80gb", sp=True)
    su, plan = setup(cfg, st, "Interleaved1F1B"), plan_pipeline(cfg, st, "Interleaved1F1B")
    best = None
    for n in range(2, su.per_stage * su.k + 1):     # torchtitan's every-n-th-layer configs, plus none and full
        policies = tuple("full" if (i + 1) % n == 0 else "none" for i in range(su.per_stage * su.k))
        ranks = evaluate(su, policies)
        if all(r.peak_bytes <= st.budget_bytes for r in ranks):
            step = step_seconds(ranks, su.n, su.k)
            best = min(best or (step, str(n)), (step, str(n)))
    code, out, err = _cli(capsys, "--sp", "--interleave", "2", "--schedule", "Interleaved1F1B", "--format",
                          "torchtitan")
    assert code == 0, err
    assert f'selective_ac_option = "{best[1]}"' in out and "rank 7:" in out.splitlines()[2]
