"""`remat plan` says how to apply its plan (remat.auto, remat.policies, Megatron-LM flags), and the solver
returns the Megatron-expressible order ("full on the first N") among equal-time orders of identical layers."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest

from remat.planner import megatron, render
from remat.planner.problem import Layer, Option, Problem, evaluate
from remat.planner.solve import solve
from remat.policies import parse_plan
from remat.units import format_bytes

# --- megatron.py ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("policies, flags", [
    (["none"] * 4, []),
    (["selective"] * 4, ["--recompute-granularity", "selective"]),
    (["full"] * 4, ["--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers",
                    "1"]),
    (["full"] * 3 + ["none"], ["--recompute-granularity", "full", "--recompute-method", "block",
                               "--recompute-num-layers", "3"]),
    (["offload"] * 2 + ["none"] * 2, ["--cpu-offloading-num-layers", "2"]),
])
def test_megatron_flags_of_expressible_plans(policies, flags):
    assert megatron.megatron_flags(policies) == flags
    assert megatron.why_not(policies) is None


@pytest.mark.parametrize("policies, pp, reason", [
    (["full", "selective", "none"], 1, "one recompute_granularity"),
    (["none", "full", "none"], 1, "not the first N"),
    (["selective", "none"], 1, "all layers"),
    (["offload", "full"], 1, "does not work when activation recomputation"),
    (["offload"] * 3, 1, "cpu_offloading_num_layers < num_layers"),
    (["offload", "none"], 2, "pipeline parallelism"),
    (["none", "offload"], 1, "0 … N − 1"),
])
def test_megatron_says_why_not(policies, pp, reason):
    assert megatron.megatron_flags(policies, pp) is None
    assert reason in megatron.why_not(policies, pp)


def test_block_flags_equal_the_runtime_block_plan():
    # the Megatron block flags and remat's block:N spec name the same per-layer plan, for every N
    L = 7
    for n in range(1, L):
        policies = ["full"] * n + ["none"] * (L - n)
        flags = megatron.megatron_flags(policies)
        assert flags[flags.index("--recompute-num-layers") + 1] == str(n)
        assert render.runtime_spec(policies) == f"block:{n}"
        assert tuple(parse_plan(render.runtime_spec(policies), L)) == tuple(policies)


# --- render: python list and runtime spec round-trip ---------------------------------------------------------

@pytest.mark.parametrize("seed", range(3))
def test_python_list_and_runtime_spec_round_trip(seed):
    rng = np.random.default_rng(seed)
    for _ in range(50):
        L = int(rng.integers(1, 12))
        policies = [("none", "selective", "full", "offload")[int(i)] for i in rng.integers(0, 4, L)]
        if rng.random() < 0.3:   # runs, as solved plans have
            policies = sorted(policies)
        assert eval(render.python_list(policies)) == policies          # noqa: S307 — our own expression
        assert tuple(parse_plan(render.runtime_spec(policies), L)) == tuple(policies)


def test_python_list_is_compact():
    assert render.python_list(["full"] * 10 + ["none"] * 14) == '["full"] * 10 + ["none"] * 14'
    assert render.python_list(["full", "none", "none"]) == '["full"] + ["none"] * 2'


# --- the solver's canonical order ----------------------------------------------------------------------------

def _layers(L):
    opts = (Option("none", 100, 0, 1.0), Option("selective", 80, 10, 1.1), Option("full", 10, 90, 1.3))
    return tuple(Layer(i, opts) for i in range(L))


def test_identical_layers_get_the_megatron_block_order():
    # every budget of 6 identical layers: the solved plan is in CANONICAL_ORDER, as fast as brute force
    layers = _layers(6)
    for budget in range(190, 700, 7):
        problem = Problem(layers, {}, budget, None, transient_floor_bytes=30, prefix=bool(budget % 2))
        plans = [evaluate(problem, c) for c in itertools.product(range(3), repeat=6)]
        feasible = [p for p in plans if p.feasible]
        if not feasible:
            continue
        plan = solve(problem)
        assert plan.feasible
        assert plan.step_time_s == pytest.approx(min(p.step_time_s for p in feasible), rel=1e-12)
        ranks = [("full", "offload", "selective", "none").index(p) for p in plan.policies]
        assert ranks == sorted(ranks), plan.policies


def test_layers_with_different_options_are_not_permuted():
    # the last layer differs (cheap full): its full may not move onto the identical layers before it
    cheap = (Option("none", 100, 0, 1.0), Option("full", 10, 50, 1.01))
    layers = _layers(4)[:3] + (Layer(3, cheap),)
    problem = Problem(layers, {}, 399, None)
    plan = solve(problem)
    assert plan.policies == ("none", "none", "none", "full")
    assert plan.step_time_s == pytest.approx(4.01)


QWEN2_LIKE = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 896,
              "intermediate_size": 4864, "num_attention_heads": 14, "num_key_value_heads": 2,
              "num_hidden_layers": 24, "vocab_size": 151936, "max_position_embeddings": 32768,
              "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "tie_word_embeddings": True,
              "torch_dtype": "bfloat16", "hidden_act": "silu"}


@pytest.fixture(scope="module")
def qwen2_like(tmp_path_factory):
    """(problem, plan, plan JSON) of a Qwen2-0.5B-like config at s = 4096 and 19 GiB, choosing none or full (its
    selective is op-level, which Megatron-LM cannot express; 17 GiB before the head's peak was measured, which
    gave the same 16 full): before the canonical order the exact solve returned "full 0–2, 4–6, 8, 15–23; none 3,
    7, 9–14" (16 full; costs as of 24a9ff4)."""
    from remat.models.presets import from_name
    from remat.planner import make_problem, plan_model

    path = tmp_path_factory.mktemp("qwen2") / "config.json"
    path.write_text(json.dumps(QWEN2_LIKE))
    cfg = from_name(str(path), seq=4096)
    problem = make_problem(cfg, memory=19 * 2**30, policies=("none", "full"))
    text = plan_model(cfg, baselines=False, fmt="json", given=("seq",), memory=19 * 2**30, policies=("none", "full"))
    return problem, solve(problem), json.loads(text)


def test_qwen2_like_plan_is_megatron_block(qwen2_like):
    problem, plan, data = qwen2_like
    n = plan.policies.count("full")
    assert 0 < n < len(plan.policies)
    assert plan.policies == ("full",) * n + ("none",) * (len(plan.policies) - n)
    # the same time as any other order of the same choices (e.g. full last), and a peak no higher
    assert problem.layers[0].options[1].policy == "full"
    other = evaluate(problem, [0] * (24 - n) + [1] * n)
    assert plan.step_time_s == pytest.approx(other.step_time_s, rel=1e-12)
    assert plan.peak_bytes <= other.peak_bytes and plan.feasible
    assert data["apply"]["megatron"]["flags"] == ["--recompute-granularity", "full", "--recompute-method",
                                                  "block", "--recompute-num-layers", str(n)]
    assert data["apply"]["runtime_spec"] == f"block:{n}"
    assert data["apply"]["python_list"] == f'["full"] * {n} + ["none"] * {24 - n}'


def test_markdown_has_how_to_apply(qwen2_like):
    problem, plan, _ = qwen2_like
    text = render.to_markdown(problem, plan, {})
    section = text.split("## How to apply", 1)[1].split("## Memory", 1)[0]
    n = plan.policies.count("full")
    assert f'auto.apply(model, ["full"] * {n} + ["none"] * {24 - n})' in section
    assert f'remat.policies.apply_plan(model, "block:{n}")' in section
    assert f"--recompute-granularity full --recompute-method block --recompute-num-layers {n}" in section
    assert "per pipeline stage" in section


@pytest.mark.slow
def test_markdown_says_when_megatron_cannot(tmp_path):
    """A Llama-family layer's selective is op-level (fused attention: core-attention recompute frees nothing), which
    Megatron-LM has no flag for; the GPT layer's selective is Megatron's (tests/test_planner_apply_text's
    megatron.why_not cases)."""
    from remat.models.presets import from_name
    from remat.planner import make_problem
    path = tmp_path / "config.json"
    path.write_text(json.dumps(QWEN2_LIKE))
    problem = make_problem(from_name(str(path), seq=4096), memory=19 * 2**30)
    mixed = evaluate(problem, [2, 1] + [0] * 22)        # full, selective, none…
    section = render.to_markdown(problem, mixed, {}).split("## How to apply", 1)[1]
    assert "Not expressible as Megatron-LM flags: this plan's selective is op-level" in section
    assert "selective here is op-level" in section



@pytest.mark.slow
def test_markdown_gives_megatrons_nearest_plan_when_it_cannot_run_this_one(tmp_path):
    """The Qwen2-like plan at 19 GiB mixes op-level selective and full; the Markdown gives the fastest plan Megatron-LM
    flags can run within the budget — the one the nemo format writes — with its peak."""
    from remat.models.presets import from_name
    from remat.planner import make_problem, render_plan, trainers
    path = tmp_path / "config.json"
    path.write_text(json.dumps(QWEN2_LIKE))
    problem = make_problem(from_name(str(path), seq=4096), memory=19 * 2**30)
    plan = solve(problem)
    assert "selective" in plan.policies
    text = render_plan(problem, plan, {}, "md")
    nemo = trainers.trainer_config(problem, plan, "nemo")["plan"]
    flags = " ".join(megatron.megatron_flags(nemo["policies"], 1))
    assert nemo["feasible"] and nemo["peak_bytes"] <= problem.budget_bytes
    assert f"Nearest Megatron-LM plan (fits): peak {format_bytes(nemo['peak_bytes'])}" in text
    assert f"```\n{flags}\n```" in text and flags.startswith("--recompute-granularity full")
