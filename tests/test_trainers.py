"""Plans in the formats trainers read (remat.planner.trainers): each family's rule checked against the tool where it
is installed here (transformers) and by hand where it is not (torchtitan's layer counter, Megatron-Bridge's
fields); the nearest expressible plan chosen by hand on a small problem; every output parses. The sac module is
exec'd and applied to remat's gpt-tiny: gradients bitwise equal to the unwrapped model's, recomputed ops counted
by hand."""

import contextlib
import json
import tomllib
from collections import Counter

import pytest
import torch
import yaml
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import flop_registry

from remat import drop_cheap
from remat.cli import build_parser, main
from remat.formulas.op_flops import FORMULAS
from remat.models.presets import from_name
from remat.models.transformer import build_model, lm_loss, random_tokens
from remat.planner import plan_model, trainers
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


def test_hf_model_call_checkpoints_the_same_layers_through_the_model_method():
    """The hf output's second route (remat.model_call), run as written on a tiny Llama: the layers transformers
    checkpoints are the plan's full layers, as through the Trainer (the test above)."""
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=7,
                                      num_attention_heads=4, num_key_value_heads=2, vocab_size=64)
    for cand in trainers.family("hf", 7):
        model = transformers.LlamaForCausalLM(config)
        call = trainers.hf_model_call(cand.config)
        if cand.config["activation_checkpointing"]:
            exec(call, {"model": model})
        got = tuple("full" if layer.gradient_checkpointing else "none" for layer in model.model.layers)
        assert got == cand.policies, call


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


def _sac_body(text: str) -> dict:
    """The sac module's text compiled and run: its config as trainer_config writes it."""
    module = _exec(text)
    return {"policies": module["POLICIES"], "selective": "core_attn"}   # the own GPT path: Megatron selective


@pytest.mark.parametrize("fmt", trainers.FORMATS)
def test_every_format_parses(capsys, fmt):
    assert main(["plan", "--model", "gpt3-175b", "--memory", "80GiB", "--tp", "8", "--sp", "--pp", "8",
                 "--no-baselines", "--format", fmt]) == 0
    text = capsys.readouterr().out
    parsed = {"hf": json.loads, "nemo": yaml.safe_load, "torchtitan": tomllib.loads, "sac": _sac_body}[fmt](text)
    expected = trainers.family(fmt, from_name("gpt3-175b").layers // 8, pp=8)   # one of p = 8 stages' layers
    body = parsed["training_arguments"] if fmt == "hf" else parsed
    assert body in [c.config for c in expected]


def test_the_cli_offers_every_trainer_format():
    sub = next(a for a in build_parser()._actions if a.choices and "plan" in a.choices).choices["plan"]
    action = next(a for a in sub._actions if "--format" in a.option_strings)
    assert set(action.choices) == {"md", "json", *trainers.FORMATS, "all"}


def test_a_trainer_format_with_the_cpu_check_is_refused_and_nothing_written(capsys, tmp_path):
    out = tmp_path / "plan.json"
    assert main(["plan", "--model", "gpt-tiny", "--check-small", "--format", "hf", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "--check-small" in err and not out.exists()


# --- sac: a torch-only module ----------------------------------------------------------------------------------

def _exec(text: str) -> dict:
    """Compile and run a sac module's text; its globals."""
    namespace = {}
    exec(compile(text, "remat_sac_plan.py", "exec"), namespace)
    return namespace


def _offload_layer(i: int) -> Layer:
    """_layer's options plus offload: keeps nothing on the device, fetches 10 B back in backward, 1 s (hidden)."""
    return Layer(i, _layer(i).options + (Option("offload", 0, 10, 1.0, offload_bytes=10),))


def _sac_module(problem: Problem, policies) -> tuple[dict, str]:
    out = trainers.trainer_config(problem, plan_from_policies(problem, policies), "sac")
    return out, trainers.render_config(out)


class _OpCount(TorchDispatchMode):
    """Counts every aten op that runs (by packet); an op served from SAC's cache does not run."""

    def __init__(self):
        super().__init__()
        self.count = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.count[func.overloadpacket] += 1
        return func(*args, **(kwargs or {}))


def _grads(model, tokens, mode=None):
    torch.manual_seed(0)                     # gpt-tiny has dropout: the same masks in both models
    with mode or contextlib.nullcontext():
        lm_loss(model(tokens), tokens).backward()
    return [p.grad for p in model.parameters()]


def test_sac_module_gives_bitwise_equal_gradients_on_gpt_tiny():
    """none, selective, full on three gpt-tiny layers (unfused attention, dropout 0.1), applied by the exec'd
    module alone. Counted by hand: each layer's forward runs one baddbmm (QKᵀ) and one gelu; backward re-runs the
    full layer's forward whole (baddbmm and gelu again) and the selective layer's cheap ops only (gelu again,
    baddbmm served from SAC's cache; baddbmm's own backward runs bmm, not baddbmm): baddbmm 3 + 1 = 4, gelu
    3 + 2 = 5."""
    cfg = from_name("gpt-tiny", layers=3)
    problem = Problem(tuple(_layer(i) for i in range(3)), {}, 100, meta={"selective": "op-level"})
    out, text = _sac_module(problem, ["none", "selective", "full"])
    assert out["exact"]
    module = _exec(text)
    assert module["POLICIES"] == ["none", "selective", "full"]
    torch.manual_seed(1)
    plain, planned = build_model(cfg), build_model(cfg)
    planned.load_state_dict(plain.state_dict())
    tokens = random_tokens(cfg, generator=torch.Generator().manual_seed(2))
    module["apply"](planned.layers)
    count = _OpCount()
    expected, got = _grads(plain, tokens), _grads(planned, tokens, count)
    assert all(torch.equal(a, b) for a, b in zip(expected, got, strict=True))
    aten = torch.ops.aten
    assert (count.count[aten.baddbmm], count.count[aten.gelu]) == (4, 5)


def test_sac_policy_keeps_exactly_remats_op_level_set():
    """MUST_SAVE is remat's op-level selective set (remat.drop_cheap.is_kept over torch's FLOP registry and
    remat's FORMULAS), and policy_fn decides as remat.drop_cheap.policy on every aten op loaded here."""
    problem = Problem(tuple(_layer(i) for i in range(2)), {}, 100, meta={"selective": "op-level"})
    module = _exec(_sac_module(problem, ["selective", "none"])[1])
    remat_set = {op for op in {*flop_registry, *FORMULAS} if drop_cheap.is_kept(op)}
    aten = torch.ops.aten
    assert module["MUST_SAVE"] == remat_set
    assert {aten.mm, aten.addmm, aten.bmm, aten.baddbmm, aten._scaled_dot_product_flash_attention_for_cpu} \
        <= module["MUST_SAVE"]
    assert not {aten.gelu, aten.native_layer_norm, aten.add, aten._softmax} & module["MUST_SAVE"]
    for name in dir(aten):
        packet = getattr(aten, name)
        if isinstance(packet, torch._ops.OpOverloadPacket) and packet.overloads():
            op = getattr(packet, packet.overloads()[0])
            assert module["policy_fn"](None, op) == drop_cheap.policy(None, op), name


def test_sac_offload_plan_gets_the_nearest_expressible_plan_by_hand():
    # the optimum offloads every layer: 4·0 + 10 = 10 B in 4 s. Torch SAC has no offload; over none / selective /
    # full at budget 30 (as in the first test) the fastest that fits is one none and three selective: 10 + 3·5 + 5
    # = 30 B in 1 + 3·1.1 = 4.3 s
    problem = Problem(tuple(_offload_layer(i) for i in range(4)), {}, 30, meta={"selective": "op-level"})
    out, text = _sac_module(problem, ["offload"] * 4)
    assert not out["exact"] and out["plan"]["feasible"]
    assert sorted(out["plan"]["policies"]) == ["none", "selective", "selective", "selective"]
    assert out["plan"]["peak_bytes"] == 30 and out["plan"]["step_time_s"] == pytest.approx(4.3)
    assert sorted(_exec(text)["POLICIES"]) == sorted(out["plan"]["policies"])
    assert "the optimal plan is not expressible here" in text and "OVER" not in text
    # budget 12: only offload fits (solve: all offload, 10 B); the family's least peak is all full, 4·1 + 9 =
    # 13 B in 6 s, marked over the budget
    problem = Problem(problem.layers, {}, 12, meta={"selective": "op-level"})
    assert solve(problem).policies == ("offload",) * 4
    out, text = _sac_module(problem, ["offload"] * 4)
    assert (out["plan"]["policies"], out["plan"]["peak_bytes"], out["plan"]["step_time_s"]) == (["full"] * 4, 13, 6.0)
    assert "OVER the budget" in text


def test_sac_picks_what_enumerating_its_family_picks():
    """The solver on the restricted problem against the module's rule over the enumerated family (3^4 plans)."""
    for budget in (12, 20, 25, 30, 31, 45):
        problem = Problem(tuple(_offload_layer(i) for i in range(4)), {}, budget, meta={"selective": "op-level"})
        out = trainers.trainer_config(problem, plan_from_policies(problem, ["offload"] * 4), "sac")
        plans = [plan_from_policies(problem, c.policies) for c in trainers.family("sac", 4, op_level=True)]
        fits = [p for p in plans if p.feasible]
        best = min(fits, key=lambda p: p.step_time_s) if fits else min(plans, key=lambda p: p.peak_bytes)
        assert out["plan"]["feasible"] == bool(fits), budget
        if fits:
            assert out["plan"]["step_time_s"] == pytest.approx(best.step_time_s), budget
        else:
            assert out["plan"]["peak_bytes"] == best.peak_bytes, budget


def test_sac_runs_no_megatron_selective():
    # the own GPT path prices selective as Megatron's core_attn, which the op-level policy is not: the family is
    # none / full. Budget 30 (first test): one none and three full, 10 + 3·1 + 9 = 22 B in 1 + 3·1.5 = 5.5 s
    # (two none: 20 + 2 + 9 = 31 B, over)
    problem = _problem(30)
    out, text = _sac_module(problem, solve(problem).policies)
    assert not out["exact"] and out["config"]["selective"] == "core_attn"
    assert sorted(out["plan"]["policies"]) == ["full", "full", "full", "none"]
    assert (out["plan"]["peak_bytes"], out["plan"]["step_time_s"]) == (22, 5.5)
    assert "core_attn" in text and "selective" not in _exec(text)["POLICIES"]
    assert not any("selective" in c.policies for c in trainers.family("sac", 3))


def test_sac_module_for_a_preset_compiles():
    """gpt3-175b on 8 stages through remat.planner (the CLI's path after argument parsing)."""
    text = plan_model(from_name("gpt3-175b", tp=8, pp=8), baselines=False, fmt="sac", memory=80 * 2**30, sp=True)
    policies = _exec(text)["POLICIES"]
    assert len(policies) == 96 // 8 and set(policies) <= {"none", "full"}
