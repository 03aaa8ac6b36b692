"""Plans in the formats trainers read (remat.planner.trainers): each family's rule checked against the tool where it
is installed here (transformers) and by hand where it is not (torchtitan's layer counter, Megatron-Bridge's
fields); the nearest expressible plan chosen by hand on a small problem; every output parses."""

import json
import tomllib

import pytest
import yaml

from remat.cli import build_parser, main
from remat.models.presets import from_name
from remat.planner import trainers
from remat.planner.problem import Layer, Option, Problem, plan_from_policies
from remat.planner.solve import solve


def _layer(i: int) -> Layer:
    """none keeps 10 B in 1 s; selective keeps 5 B (recompute transient 5) in 1.1 s; full keeps 1 B (transient 9)
    in 1.5 s."""
    return Layer(i, (Option("none", 10, 0, 1.0), Option("selective", 5, 5, 1.1), Option("full", 1, 9, 1.5)))


def _problem(budget: int) -> Problem:
    return Problem(tuple(_layer(i) for i in range(4)), {}, budget, prefix=False)


def test_the_nearest_expressible_plan_is_the_fastest_that_fits_by_hand():
    # budget 30 (peak = stored + the largest transient): the optimum keeps one layer and recomputes three
    # selectively, 10 + 3·5 + 5 = 30 B in 1 + 3·1.1 = 4.3 s. HF can checkpoint every N-th layer fully: N = 1
    # peaks at 4·1 + 9 = 13 B (6 s); N = 2 and N = 3 at 2·1 + 2·10 + 9 = 31 B and N = 4 at 40 B: over budget.
    problem = _problem(30)
    plan = solve(problem)
    assert sorted(plan.policies) == ["none", "selective", "selective", "selective"]
    out = trainers.trainer_config(problem, plan, "hf")
    assert not out["exact"]
    assert out["config"] == {"activation_checkpointing": True,
                             "activation_checkpointing_kwargs": {"use_reentrant": False}}
    assert (out["plan"]["peak_bytes"], out["plan"]["step_time_s"]) == (13, 6.0)
    # one byte more and every second layer fits: 31 B in 2·1.5 + 2·1 = 5 s, faster than all full
    out = trainers.trainer_config(_problem(31), solve(_problem(31)), "hf")
    assert (out["plan"]["peak_bytes"], out["plan"]["step_time_s"]) == (31, 5.0)
    assert out["plan"]["policies"].count("full") == 2


def test_nothing_fits_gives_the_least_peak_marked_over_budget():
    problem = _problem(12)          # all full peaks at 13 B: nothing fits
    plan = plan_from_policies(problem, ["selective"] * 4)   # stands in for the optimum: not torchtitan's
    out = trainers.trainer_config(problem, plan, "torchtitan")
    assert out["config"] == {"activation_checkpoint": {"mode": "full"}}
    assert out["plan"]["feasible"] is False and "OVER the budget" in trainers.render_config(out)


def test_hf_every_n_layers_checkpoints_the_layers_transformers_does(tmp_path):
    """Round trip: the hf config goes through TrainingArguments and is applied to a tiny Llama as the Trainer does
    it; the layers transformers checkpoints are the plan's full layers."""
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=7,
                                      num_attention_heads=4, num_key_value_heads=2, vocab_size=64)
    for cand in trainers.family("hf", 7):
        args = transformers.TrainingArguments(output_dir=str(tmp_path), report_to=[], **cand.config)
        model = transformers.LlamaForCausalLM(config)
        if args.activation_checkpointing:
            kwargs = dict(args.activation_checkpointing_kwargs)
            model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs,
                                                  every_n_layers=kwargs.pop("every_n_layers", 1),
                                                  offload=kwargs.pop("offload", False))
        got = tuple("full" if layer.gradient_checkpointing else "none" for layer in model.model.layers)
        assert got == cand.policies, cand.config


def test_torchtitan_layer_option_counts_layers_from_one():
    # torchtitan's _apply_layer_sac: count += 1 per layer, checkpoint when count % N == 0 — with N = 3 over 7
    # layers, counts 3 and 6, i.e. layers 2 and 5
    cand = next(c for c in trainers.family("torchtitan", 7)
                if c.config["activation_checkpoint"].get("selective_ac_option") == "3")
    assert cand.policies == ("none", "none", "full", "none", "none", "full", "none")


def test_nemo_block_and_selective_fields():
    fam = {c.policies: c.config for c in trainers.family("nemo", 4)}
    assert fam[("full", "full", "none", "none")] == {"model": {
        "recompute_granularity": "full", "recompute_method": "block", "recompute_num_layers": 2}}
    assert fam[("selective",) * 4] == {"model": {"recompute_granularity": "selective",
                                                  "recompute_modules": ["core_attn"]}}
    assert fam[("offload", "none", "none", "none")]["model"]["cpu_offloading_num_layers"] == 1
    assert not any("offload" in p for p in {c.policies for c in trainers.family("nemo", 4, pp=2)})
    assert not any("selective" in p for p in {c.policies for c in trainers.family("nemo", 4, op_level=True)})


@pytest.mark.parametrize("fmt", trainers.FORMATS)
def test_every_format_parses(capsys, fmt):
    assert main(["plan", "--model", "gpt3-175b", "--memory", "80GiB", "--tp", "8", "--sp", "--pp", "8",
                 "--no-baselines", "--format", fmt]) == 0
    text = capsys.readouterr().out
    parsed = {"hf": json.loads, "nemo": yaml.safe_load, "torchtitan": tomllib.loads}[fmt](text)
    expected = trainers.family(fmt, from_name("gpt3-175b").layers // 8, pp=8)   # one of p = 8 stages' layers
    body = parsed["training_arguments"] if fmt == "hf" else parsed
    assert body in [c.config for c in expected]


def test_the_cli_offers_every_trainer_format():
    sub = next(a for a in build_parser()._actions if a.choices and "plan" in a.choices).choices["plan"]
    action = next(a for a in sub._actions if "--format" in a.option_strings)
    assert set(action.choices) == {"md", "json", *trainers.FORMATS}


def test_a_trainer_format_with_the_cpu_check_is_refused_and_nothing_written(capsys, tmp_path):
    out = tmp_path / "plan.json"
    assert main(["plan", "--model", "gpt-tiny", "--check-small", "--format", "hf", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "--check-small" in err and not out.exists()
