"""The per-rank pipeline planner's inputs and its trainer formats (remat.planner.rank_costs, pipeline_text): the
parameters of the stages against the runtime model's own, a stage-boundary activation with and without sequence
parallelism, what the head saves, and which single trainer setting is written. Expected values by hand."""

from __future__ import annotations

import dataclasses
import json
from types import SimpleNamespace

from remat.models.presets import from_name
from remat.models.transformer import build_model
from remat.planner import pipeline_text
from remat.planner.make import make_settings
from remat.planner.rank_costs import head_saved_bytes, rank_costs
from remat.planner.ranks import PipelinePlan, RankPlan, evaluate, plan_pipeline, setup
from remat.planner.trainers import Candidate


def test_the_stages_hold_every_parameter_of_the_model_and_megatrons_copy_of_the_tied_embedding():
    # gpt-tiny (tied embeddings, t = 1) in 4 layers on 2 stages: stage 0 the word and position embeddings, every
    # stage its layers, the last stage the final LayerNorm (weight and bias, 2h) and the output layer, which Megatron
    # keeps as a copy of the tied word embedding (v·h): the runtime model's parameters + v·h
    cfg = dataclasses.replace(from_name("gpt-tiny"), layers=4, pp=2, interleave=1, global_batch=16)
    rc = rank_costs(cfg, make_settings(cfg, "a100-80gb", sp=False))
    model = build_model(cfg)
    assert cfg.tie_embeddings and model.head.weight is model.embed.tok.weight
    runtime = sum(p.numel() for p in model.parameters())          # the tied weight counted once
    assert rc.first_params + cfg.layers * rc.layer_params + rc.last_params == runtime + cfg.vocab * cfg.hidden
    h = cfg.hidden
    assert rc.last_params == 2 * h + cfg.vocab * h == model.norm.weight.numel() + model.norm.bias.numel() + \
        model.head.weight.numel()


def test_a_stage_boundary_activation_is_split_over_tp_ranks_only_with_sequence_parallelism():
    # gpt3-175b, t = 8, s = 2048, b = 1, h = 12288, fp16: without SP every TP rank holds the whole [s, b, h]
    # activation it sends to the next stage, 2sbh bytes; with SP its 1/t sequence shard, 2sbh/t
    cfg = dataclasses.replace(from_name("gpt3-175b"), interleave=1)
    s, b, h, t, last = cfg.seq, cfg.micro_batch, cfg.hidden, cfg.tp, cfg.pp - 1
    assert t == 8
    for sp, boundary in ((False, 2 * s * b * h), (True, 2 * s * b * h // t)):
        rc = rank_costs(cfg, make_settings(cfg, "a100-80gb", sp=sp))
        assert rc.sent(0, last) == (boundary, 0) and rc.sent(last, last) == (0, boundary)
        # a middle stage's receive buffers: its input and its output's gradient, one each per micro-batch
        assert rc.buffers(1, last, 4) == 4 * 2 * boundary


def test_the_head_saves_its_norm_output_projection_and_loss_only():
    # llama-tiny, s = 32, b = 2, h = 64, v = 128, float32, one TP rank. What the final RMSNorm, the head and the loss
    # save for backward (the embedding's token ids and the layers' tensors are other stages' or the layers'):
    #   RMSNorm: its input x (4sbh = 16384), rsqrt of the mean square (4sb = 256), x·rsqrt (16384)
    #   head: its input (16384); loss: the log-softmax of the fp32 logits (4sbv = 32768), the targets (int64,
    #   8sb = 512) and the 0-dim total weight (4)
    cfg = from_name("llama-tiny")
    s, b, h, v = cfg.seq, cfg.micro_batch, cfg.hidden, cfg.vocab
    assert (s, b, h, v, cfg.tp, cfg.dtype) == (32, 2, 64, 128, 1, "float32")
    assert head_saved_bytes(cfg) == 3 * 4 * s * b * h + 4 * s * b + 4 * s * b * v + 8 * s * b + 4 == 82692


def test_the_fastest_setting_whose_peak_is_the_budget_exactly_fits():
    # hf's settings: checkpointing off (all none: the fastest, the largest peak) or on every n-th layer. At a
    # budget equal to all-none's largest rank peak, all-none fits (peak ≤ budget) and is written, exactly
    cfg = dataclasses.replace(from_name("gpt-tiny"), layers=8, pp=2, interleave=1, global_batch=16)
    st = make_settings(cfg, "a100-80gb", sp=False, memory=10**15)
    su = setup(cfg, st, "1F1B")
    budget = max(r.peak_bytes for r in evaluate(su, ("none",) * su.per_stage * su.k))
    at = dataclasses.replace(st, budget_bytes=budget)
    plan = plan_pipeline(cfg, at, "1F1B")
    out = json.loads(pipeline_text.trainer_text(cfg, at, plan, "hf"))
    assert out["training_arguments"] == {"activation_checkpointing": False}
    assert out["remat"]["plan"]["peak_bytes"] == budget and out["remat"]["plan"]["feasible"]
    assert out["remat"]["exact"]


def test_with_no_setting_that_fits_the_one_whose_largest_rank_peak_is_least_is_written(monkeypatch):
    # two settings on two ranks, budget 5 bytes: A peaks at 10 and 1 bytes, B at 6 and 6. Neither fits; the rank
    # that overflows most decides, so B (6 < 10) is the nearest — though A's lighter rank is the lightest of all
    a, b = Candidate({"name": "A"}, ("none", "full")), Candidate({"name": "B"}, ("full", "none"))
    peaks = {a.policies: (10, 1), b.policies: (6, 6)}
    ranks = lambda pol: [RankPlan(r, (r,), pol, p, 0, 1.0, 1) for r, p in enumerate(peaks[pol])]  # noqa: E731
    monkeypatch.setattr(pipeline_text, "setup", lambda cfg, st, schedule, priced=None: SimpleNamespace(
        per_stage=1, k=2, p=2, n=4))
    monkeypatch.setattr(pipeline_text, "family", lambda fmt, L, p, op_level: [a, b])
    monkeypatch.setattr(pipeline_text, "evaluate", lambda su, policies: ranks(tuple(policies)))
    monkeypatch.setattr(pipeline_text, "step_seconds", lambda su, rs: sum(r.seconds_per_micro_batch for r in rs))
    monkeypatch.setattr(pipeline_text, "render_config", lambda out: out)
    own = (RankPlan(0, (0,), ("full", "full"), 4, 0, 2.0, 2), RankPlan(1, (1,), ("full", "full"), 4, 0, 2.0, 1))
    out = pipeline_text.trainer_text(SimpleNamespace(arch="gpt"), None,
                                     PipelinePlan("1F1B", 2, 1, 4, 5, own, (), 4.0, float("nan")), "hf")
    assert out["config"] == {"name": "B"}
    assert out["plan"]["peak_bytes"] == 6 and not out["plan"]["feasible"] and not out["exact"]
