"""The gloo-rank pipeline experiment's parts that run without processes (remat.experiments.pipeline_ranks,
pipeline_rank): its model's micro-batches, the midway budget, the predicted-versus-measured columns, the stages
chained back into the whole model, and the unsplit model's reference gradients. Expected values come from the
definitions in the modules' docstrings (worked in the comments), not from running the code."""

from __future__ import annotations

import copy
import dataclasses

import pytest
import torch

from remat.experiments import pipeline_rank, pipeline_ranks
from remat.experiments.pipeline_ranks import PipelineParams, config, midway_plan, settings
from remat.models.presets import from_name
from remat.models.transformer import build_model, lm_loss
from remat.planner.costs import micro_batches
from remat.planner.ranks import PipelinePlan, RankPlan, plan_pipeline

SMALL = dict(layers=4, seq=16, hidden=32)


@pytest.mark.parametrize("n", [4, 8])
def test_the_experiments_model_runs_the_micro_batches_asked_for(n):
    # PipelineParams.micro_batches: "N micro-batches per step (b = 2 each)": a global batch of 2N sequences
    cfg = config(PipelineParams(micro_batches=n, **SMALL), 2, "1F1B")
    assert cfg.micro_batch == 2 and cfg.global_batch == 2 * n
    assert micro_batches(cfg) == n


def test_the_budget_is_halfway_between_the_most_loaded_ranks_least_and_largest_peak():
    # the most loaded rank is the one with the largest peak (under 1F1B on p = 2 the last stage, which holds the
    # logits, at these sizes); its all-full and all-none peaks are the two ends, the budget their mean rounded down
    # (a GPT, whose costs are closed-form: the rule is the experiment's, whatever the model)
    cfg = dataclasses.replace(from_name("gpt-tiny"), layers=4, pp=2, interleave=1, global_batch=16)
    wide = settings(cfg, 2**50)
    ends = [[r.peak_bytes for r in plan_pipeline(cfg, dataclasses.replace(wide, policies=(q,)), "1F1B").ranks]
            for q in ("full", "none")]
    assert ends[0][0] != ends[0][1]                     # the ranks differ: the least-loaded rank would give another
    plan = midway_plan(cfg, "1F1B")
    assert plan.budget_bytes == (max(ends[0]) + max(ends[1])) // 2
    assert all(r.peak_bytes <= plan.budget_bytes for r in plan.ranks)


def test_each_row_states_its_peak_error_as_predicted_minus_measured(monkeypatch):
    # neither planned nor run here: rank 0 is predicted 2.0 MB and measures 1.0 MB, rank 1 1.5 MB and 3.0 MB; the
    # error columns follow the project's convention (remat.experiments.planner.validate): bytes predicted −
    # measured (+1.0 MB, −1.5 MB), relative predicted / measured − 1 (2.0 / 1.0 − 1 = +1, 1.5 / 3.0 − 1 = −0.5)
    ranks = (RankPlan(0, (0,), ("full", "none"), 2_000_000, 10, 0.5, 2),
             RankPlan(1, (1,), ("none", "none"), 1_500_000, 10, 0.5, 1))
    monkeypatch.setattr(pipeline_ranks, "midway_plan", lambda cfg, schedule: PipelinePlan(
        schedule, 2, 1, 8, 2_500_000, ranks, (), 1.0, 1.0))

    def fake_run(cfg, schedule, plans, timeout_s):
        assert plans == [["full", "none"], ["none", "none"]]
        return [{"measured_peak_bytes": m, "peak_method": "fake", "step_wall_s": 0.0, "grads_max_rel_error": 0.0,
                 "grads_missing": 0} for m in (1_000_000, 3_000_000)]
    monkeypatch.setattr(pipeline_ranks, "run_ranks", fake_run)
    frame = pipeline_ranks.pipeline(PipelineParams(sizes=[2], schedules=["1F1B"], **SMALL))
    assert list(frame["rank"]) == [0, 1] and list(frame["plan"]) == ["full,none", "none,none"]
    assert list(frame["peak_error_bytes"]) == [1_000_000, -1_500_000]
    assert list(frame["peak_rel_error"]) == pytest.approx([1.0, -0.5], rel=1e-12)


def _tiny():
    cfg = config(PipelineParams(layers=4, seq=8, hidden=16, micro_batches=2), 2, "1F1B")
    torch.manual_seed(0)
    return cfg, build_model(cfg)


def test_the_stages_chained_in_order_are_the_whole_model():
    # stage 0: embedding + layers 0-1 (tokens batch first, [b, s]); stage 1: layers 2-3 + final norm + head
    cfg, model = _tiny()
    tokens, _ = pipeline_rank._batch(cfg, 1)
    stages = [pipeline_rank.Stage(model, i, 2, 2) for i in range(2)]
    assert stages[0].embed is model.embed and stages[0].head is None and stages[1].embed is None
    assert stages[1].norm is model.norm and stages[1].head is model.head
    assert list(stages[1].layers) == list(model.layers[2:])
    with torch.no_grad():
        chained = stages[1](stages[0](tokens))
        whole = model(tokens.t())
    assert chained.shape == (cfg.seq, cfg.micro_batch, cfg.vocab) and torch.equal(chained, whole)


def test_the_reference_gradients_are_those_of_the_mean_loss_over_the_micro_batches():
    # n equal micro-batches of b·s tokens each: the mean of their mean losses is the mean over all n·b·s tokens,
    # lm_loss of the whole batch at once; so are its gradients (up to float32 summation order)
    cfg, model = _tiny()
    n = 2
    tokens, targets = pipeline_rank._batch(cfg, n)
    got = pipeline_rank._reference_grads(model, tokens, targets, n)
    whole = copy.deepcopy(model)
    lm_loss(whole(tokens.t()), targets.t()).backward()
    assert all(p.grad is None for p in model.parameters())             # the model given is left untouched
    for name, p in whole.named_parameters():
        torch.testing.assert_close(got[name], p.grad, rtol=1e-4, atol=1e-7)
