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
                                     ("LoopedBFS", 3), ("InterleavedZeroBubble", 2), ("DualPipeV", 2)])
def test_per_rank_plans_are_never_slower_than_one_plan_for_every_rank(name, m):
    cfg = dataclasses.replace(from_name("gpt3-175b"), interleave=m)
    plan = plan_pipeline(cfg, make_settings(cfg, "a100-80gb", sp=True), name)
    assert len(plan.ranks) == len(plan.uniform) == cfg.pp
    for own, one in zip(plan.ranks, plan.uniform):
        assert own.seconds_per_micro_batch <= one.seconds_per_micro_batch + 1e-15
        assert own.peak_bytes <= plan.budget_bytes and one.peak_bytes <= plan.budget_bytes
    assert len({one.policies for one in plan.uniform}) == 1          # one plan: the same on every rank
    assert plan.step_time_s <= plan.uniform_step_time_s


@pytest.mark.parametrize("name, m", [("1F1B", 1), ("GPipe", 1), ("Interleaved1F1B", 2), ("Interleaved1F1B", 4)])
def test_step_seconds_of_equal_ranks_is_the_megatron_bubble(name, m):
    # every rank runs the same plan: t seconds per micro-batch, the step (N + (p − 1)/m) · t (Narayanan et al. 2021)
    cfg = dataclasses.replace(from_name("gpt3-175b"), interleave=m)
    su = setup(cfg, make_settings(cfg, "a100-80gb", sp=True), name)
    ranks = evaluate(su, ("full",) * (su.per_stage * su.k))
    t = ranks[0].seconds_per_micro_batch
    assert {r.seconds_per_micro_batch for r in ranks} == {t} and len(ranks[0].stage_seconds) == m
    assert step_seconds(su, ranks) == pytest.approx((su.n + (su.p - 1) / m) * t)


def test_a_slower_rank_sets_the_steady_state():
    # 1F1B, p = 2, N = 4: rank 1 twice as slow in its backward; the step is then rank 1's N micro-batches plus
    # rank 0's first forward before them and its last backward after them (hand-followed: F0 idle for rank 1)
    cfg = dataclasses.replace(from_name("gpt3-175b"), layers=4, pp=2, interleave=1, global_batch=4)
    su = setup(cfg, make_settings(cfg, "a100-80gb", sp=True), "1F1B")
    base = evaluate(su, ("full", "full"))
    f, t0 = su.phases[0] * 2, base[0].seconds_per_micro_batch
    slow = (base[0], dataclasses.replace(base[1], stage_seconds=(t0 + (t0 - f),)))
    assert step_seconds(su, slow) == pytest.approx(f + 4 * (f + 2 * (t0 - f)) + (t0 - f))


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
                              (("--schedule", "ZBVZeroBubble", "--interleave", "3"), "--interleave", 2),
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
            step = step_seconds(su, ranks)
            best = min(best or (step, str(n)), (step, str(n)))
    code, out, err = _cli(capsys, "--sp", "--interleave", "2", "--schedule", "Interleaved1F1B", "--format",
                          "torchtitan")
    assert code == 0, err
    assert f'selective_ac_option = "{best[1]}"' in out and "rank 7:" in out.splitlines()[2]


def test_the_gpt_stage_costs_by_hand():
    # gpt3-175b at t = 8 with SP, s = 2048, b = 1 (Korthikanti et al. 2022, §4): a layer stores sbh/t·(34 + 5as/h)
    # bytes without recompute, 34sbh/t with selective (the 5as²b/t of attention dropped), 2sbh/t with full (its input)
    cfg = dataclasses.replace(from_name("gpt3-175b"), interleave=1)
    rc = rank_costs(cfg, make_settings(cfg, "a100-80gb", sp=True))
    s, b, h, v, t, a = cfg.seq, cfg.micro_batch, cfg.hidden, cfg.vocab, cfg.tp, cfg.heads
    sbh, attn = s * b * h // t, 5 * a * s * s * b // t
    # a split backward's input-gradient step keeps what the recompute rebuilt (none − stored); none and offload
    # recompute nothing
    retained = {o["policy"]: o["retained"] for o in rc.options}
    assert retained == {"none": 0, "selective": attn, "full": 32 * sbh + attn, "offload": 0}
    boundary, last = 2 * sbh, cfg.pp - 1                      # one stage-boundary activation, fp16, SP
    # the output sent on (every stage but the last), the input gradient sent back (every stage but the first)
    assert [rc.sent(x, last) for x in (0, 3, last)] == [(boundary, 0), (boundary, boundary), (0, boundary)]
    assert rc.last[1] == 4 * s * b * v // t                   # the last stage's backward: the fp32 logits' gradient
    # a split backward keeps each weight op's output gradient (fp16): QKV 3h/t, projection h, fc1 4h/t, fc2 h, and
    # the two LayerNorms' h each
    assert rc.weight_grads == 2 * s * b * (3 * h // t + h + 4 * h // t + h + h + h)
    # torch's runtime: a stage's output held until its backward (the last stage's: its fp16 logits 2sbv/t; the
    # others' counted as sends where the schedule keeps them), less the received input (its receive buffer)
    extra = lambda x, keeps: rc.outside(x, last, True, keeps)[0] - rc.outside(x, last)[0]     # noqa: E731
    assert [extra(x, False) for x in (0, 3, last)] == [boundary, 0, 2 * s * b * v // t - boundary]
    assert [extra(x, True) for x in (0, 3, last)] == [0, -boundary, 2 * s * b * v // t - boundary]


def test_an_interleaved_rank_holds_the_model_state_of_all_its_stages():
    # p = 4, 16 layers: 1F1B's rank 1 runs stage 1 (4 layers), interleaved (m = 2) stages 1 and 5 (2 layers each)
    # — the same 4 layers' parameters, neither the first nor the last stage
    fixed = []
    for name, m in (("1F1B", 1), ("Interleaved1F1B", 2)):
        cfg = _small(layers=16, pp=4, m=m, gb=16)
        plan = plan_pipeline(cfg, make_settings(cfg, "a100-80gb", sp=False, memory=10**15), name, runtime=False)
        fixed.append([r.fixed_bytes for r in plan.ranks[1:3]])
    assert fixed[0] == fixed[1] and fixed[0][0] == fixed[0][1]


def test_a_plan_whose_peak_is_the_budget_exactly_fits():
    cfg = _small(m=1)
    st = make_settings(cfg, "a100-80gb", sp=False, memory=10**15, policies=("full",))
    budget = max(r.peak_bytes for r in plan_pipeline(cfg, st, "1F1B").ranks)
    plan = plan_pipeline(cfg, dataclasses.replace(st, budget_bytes=budget), "1F1B")     # peak ≤ budget
    assert max(r.peak_bytes for r in plan.ranks) == budget


def test_the_uniform_plan_gives_every_stage_of_every_rank_the_same_layer_policies():
    cfg = _small(layers=16, pp=2, m=2, gb=8)                 # 4 layers per stage, two stages per rank
    wide = make_settings(cfg, "a100-80gb", sp=False, memory=10**15)
    lo, hi = (max(r.peak_bytes for r in plan_pipeline(cfg, dataclasses.replace(wide, policies=(q,)),
                                                      "Interleaved1F1B").ranks) for q in ("full", "none"))
    for share in (0.25, 0.5, 0.75):
        plan = plan_pipeline(cfg, dataclasses.replace(wide, budget_bytes=int(lo + share * (hi - lo))),
                             "Interleaved1F1B")
        assert len(plan.uniform) == 2           # all-full fits every rank at any of these budgets
        for rank in plan.uniform:
            assert sorted(rank.policies[:4]) == sorted(rank.policies[4:]), (share, rank)


def test_a_plan_over_the_budget_in_integers_is_solved_again_with_a_kib_less_room(monkeypatch):
    from remat.planner import ranks as module

    cfg = _small(m=1)
    st = make_settings(cfg, "a100-80gb", sp=False, memory=10**15)
    rooms, real_solve, real_plan = [], module._solve, module._rank_plan

    def solve(ranks, blocks, options, per_stage, room, host):
        rooms.append(list(room))
        return real_solve(ranks, blocks, options, per_stage, room, host)

    def rank_plan(*args):                       # rank 0's first plan a byte over (HiGHS's tolerance), then exact
        plan = real_plan(*args)
        return dataclasses.replace(plan, peak_bytes=st.budget_bytes + 1) if len(rooms) == 1 else plan
    monkeypatch.setattr(module, "_solve", solve)
    monkeypatch.setattr(module, "_rank_plan", rank_plan)
    plan = plan_pipeline(cfg, st, "1F1B")
    assert rooms[1] == [rooms[0][0] - 1024] and plan.ranks[0].peak_bytes <= st.budget_bytes


def test_offload_fits_the_host_memory_of_the_micro_batches_a_rank_holds():
    # 1F1B, p = 4, N = 8, one layer per stage: rank r holds min(p − r, N) micro-batches at once, each its layer's
    # offloaded bytes on the host — rank 0 four
    cfg = _small(layers=4, pp=4, m=1, gb=8)
    st = make_settings(cfg, "a100-80gb", sp=False, memory=10**15, policies=("offload",))
    host = rank_costs(cfg, st).options[0]["host"]
    plan = plan_pipeline(cfg, dataclasses.replace(st, host_limit_bytes=4 * host), "1F1B")
    assert [r.policies for r in plan.ranks] == [("offload",)] * 4
    with pytest.raises(InfeasibleError, match="rank 0 of 1F1B"):
        plan_pipeline(cfg, dataclasses.replace(st, host_limit_bytes=7 * host // 2), "1F1B")


def test_the_markdown_row_of_a_rank_by_hand():
    from remat.planner.pipeline_text import to_markdown
    from remat.planner.ranks import PipelinePlan, RankPlan

    ranks = (RankPlan(0, (0,), ("full", "none"), 3 * GiB, GiB, 0.5, 2), RankPlan(1, (1,), ("none", "none"),
                                                                                2 * GiB, GiB, 0.25, 1))
    text = to_markdown(PipelinePlan("1F1B", 2, 1, 4, 4 * GiB, ranks, (), 2.75, float("nan")), "m", "g")
    # columns: rank, stages, most held, layers per policy, predicted peak, model state + reserve, s per micro-batch
    assert "| 0 | 0 | 2 | full 1, none 1 | 3.00 GiB | 1.00 GiB | 0.5 |" in text.splitlines()
    assert "| 1 | 1 | 1 | none 2 | 2.00 GiB | 1.00 GiB | 0.25 |" in text.splitlines()


def test_the_cli_plans_a_presets_own_micro_batches(capsys):
    # gpt3-175b's preset: global batch 64, micro-batch 1, dp 1 -> N = 64 (the 4·p default is for a config.json)
    code, out, err = _cli(capsys, "--sp", "--schedule", "1F1B", "--format", "json")
    assert code == 0, err
    assert json.loads(out)["micro_batches"] == 64


def test_with_no_single_plan_for_every_rank_the_text_says_so_and_the_json_is_strict():
    from remat.planner.pipeline_text import to_json, to_markdown
    from remat.planner.ranks import PipelinePlan, RankPlan

    ranks = (RankPlan(0, (0,), ("full", "full"), 3 * GiB, GiB, 0.5, 2), RankPlan(1, (1,), ("none", "none"),
                                                                                2 * GiB, GiB, 0.25, 1))
    plan = PipelinePlan("1F1B", 2, 1, 4, 4 * GiB, ranks, (), 2.75, float("nan"))
    text = to_markdown(plan, "m", "g")
    assert "write None" not in text and text.count("no single setting fits every rank") == 2   # megatron, torchtitan
    out = json.loads(json.dumps(to_json(plan, "m", "g"), allow_nan=False))                   # no NaN in the JSON
    assert out["gain"] is None and out["uniform_step_time_s"] is None and out["apply"]["megatron"]["write"] is None


def test_the_weight_op_outputs_of_a_mixture_layer_by_hand():
    # s·b = 16 tokens, h 64: the norms 16·64 each, qkv 16·(64 + 2·2·16) = 16·128, proj 16·64, the router's weights
    # 16·2 (its int64 expert indices carry no gradient), the experts' combined output 16·64; float32
    cfg = from_name("llama-tiny", hidden=64, heads=4, kv_heads=2, ffn_hidden=32, experts=4, top_k=2, seq=16,
                    micro_batch=1, vocab=128, layers=1)
    assert weight_output_bytes(cfg) == 4 * 16 * (64 + 128 + 64 + 64 + 2 + 64)


def test_a_one_setting_trainer_is_never_told_to_write_a_mixed_uniform_plan_it_cannot_express():
    from remat.planner.pipeline_text import _write
    mixed = {"write": "selective,full,full", "exact": False}
    assert "`--format nemo` writes the nearest" in _write("megatron", mixed)
    assert "`--format torchtitan` writes the nearest" in _write("torchtitan", mixed)
    assert not _write("megatron", mixed).startswith("; write ")
    assert _write("megatron", {"write": "full", "exact": True}) == "; write full"
