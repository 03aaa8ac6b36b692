"""remat.auto: blocks found, plans measured under fake tensors and checked against real CPU peaks, applied in
place with gradients bitwise equal to no recompute, on toy modules and on transformers models.

Expected peaks are MEASURED on this CPU (torch's MemTracker) and compared with the plan's prediction; the
gradients of every policy are compared bit for bit with the unwrapped model's."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F
from conftest import run_cli as run
from torch import nn

from remat import auto
from remat.auto.planning import solve_blocks
from remat.errors import InfeasibleError, UsageError
from remat.measure.peak import PeakMemory
from remat.planner.problem import POLICIES, plan_from_policies

H = 32


class Block(nn.Module):
    """A block as real ones are: keyword arguments, a dict output, dropout, an input that may need no grad."""

    def __init__(self):
        super().__init__()
        self.norm, self.fc1, self.fc2 = nn.LayerNorm(H), nn.Linear(H, 4 * H), nn.Linear(4 * H, H)
        self.drop = nn.Dropout(0.1)

    def forward(self, x, *, scale, mask=None):
        y = self.drop(self.fc2(F.gelu(self.fc1(self.norm(x))))) * scale
        if mask is not None:
            y = y.masked_fill(mask, 0.0)
        return {"hidden": x + y, "aux": y.detach()}


class Toy(nn.Module):
    def __init__(self, n=4):
        super().__init__()
        self.blocks = nn.ModuleList(Block() for _ in range(n))
        self.head = nn.Linear(H, 8)

    def forward(self, x, scale, mask=None):
        for block in self.blocks:        # the first block's input needs no gradient
            x = block(x, scale=scale, mask=mask)["hidden"]
        return self.head(x)


def toy_inputs(b=4, s=64):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(b, s, H, generator=g)
    return (x, torch.tensor(0.5)), {"mask": torch.rand(b, s, 1, generator=g) > 0.9}


def step(model, args, kwargs, seed=0, autocast=False):
    torch.manual_seed(seed)
    model.zero_grad(set_to_none=True)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        loss = model(*args, **kwargs).float().square().mean()
    loss.backward()
    return [p.grad.clone() for p in model.parameters()]


def peak(model, args, kwargs):
    model.zero_grad(set_to_none=True)
    tensors = [t for t in (*args, *kwargs.values()) if isinstance(t, torch.Tensor)]
    with PeakMemory("cpu", model, *tensors) as mem:
        model(*args, **kwargs).sum().backward()
    model.zero_grad(set_to_none=True)
    return mem.peak_bytes


# --- blocks ----------------------------------------------------------------------------------------------------

def test_find_blocks_longest_modulelist_of_one_class():
    model = Toy(5)
    found = auto.find_blocks(model)
    assert (found.name, len(found), found.names[0]) == ("blocks", 5, "blocks.0")
    assert auto.find_blocks(model, "blocks").modules == found.modules
    assert auto.find_blocks(model, list(model.blocks[:2])).names == ("blocks.0", "blocks.1")


@pytest.mark.parametrize("given, match", [("nope", "no submodule"), ("head", "not a non-empty"),
                                          ([nn.Linear(2, 2)], "not submodules")])
def test_find_blocks_bad_input_names_blocks(given, match):
    with pytest.raises(UsageError, match=match) as exc:
        auto.find_blocks(Toy(), given)
    assert exc.value.field == "blocks"


def test_find_blocks_without_container():
    with pytest.raises(UsageError, match="blocks="):
        auto.find_blocks(nn.Sequential(nn.Linear(2, 2), nn.ReLU()).__class__.__bases__[0]())


# --- apply -----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("autocast", [False, True])
def test_apply_every_policy_gradients_bitwise_equal(autocast):
    model = Toy()
    args, kwargs = toy_inputs()
    names = [n for n, _ in model.named_parameters()]
    state = {k: v.clone() for k, v in model.state_dict().items()}
    reference = step(model, args, kwargs, autocast=autocast)
    for policy in POLICIES:
        auto.apply(model, policy)
        assert [n for n, _ in model.named_parameters()] == names
        assert model.state_dict().keys() == state.keys()
        grads = step(model, args, kwargs, autocast=autocast)
        assert all(torch.equal(a, b) for a, b in zip(grads, reference)), policy
    auto.apply(model, ["full", "selective", "offload", "none"])
    assert all(torch.equal(a, b) for a, b in zip(step(model, args, kwargs, autocast=autocast), reference))
    auto.clear(model)
    assert all("forward" not in b.__dict__ for b in model.blocks)


def test_apply_rejects_bad_plans():
    model = Toy()
    with pytest.raises(UsageError, match="3 policies for 4 blocks"):
        auto.apply(model, ["full"] * 3)
    with pytest.raises(UsageError, match="'segments:2' is no policy"):
        auto.apply(model, "segments:2")
    for bad in (None, {"apply": {"policies": ["full"] * 4}}, json.dumps({"apply": {"policies": ["full"] * 4}}), 5):
        with pytest.raises(UsageError) as exc:
            auto.apply(model, bad)
        assert exc.value.field == "plan" and len(str(exc.value)) < 300


def test_a_plan_for_other_blocks_names_blocks():
    """A plan made for a 3-block model applied to a 4-block one: the blocks differ (not "3 policies")."""
    result = auto.plan(Toy(3), *toy_inputs(), choices=("full",))
    with pytest.raises(UsageError, match="3 blocks .*this model has 4") as exc:
        auto.apply(Toy(4), result)
    assert exc.value.field == "blocks"


# --- plan: predicted vs measured on this CPU ---------------------------------------------------------------------

def test_plan_predicts_the_measured_cpu_peak_for_uniform_and_mixed_plans():
    model = Toy(6)
    args, kwargs = toy_inputs()
    first = auto.plan(model, args, kwargs, budget=2**40, optimizer_state_bytes=0, choices=("none", "selective", "full"))
    n = len(first.policies)
    low = plan_from_policies(first.problem, ["full"] * n).peak_bytes
    high = plan_from_policies(first.problem, ["none"] * n).peak_bytes
    assert low < high
    import dataclasses
    mixed = solve_blocks(dataclasses.replace(first.problem, budget_bytes=(low + high) // 2), auto.find_blocks(model),
                         first.costs)
    assert len(set(mixed.policies)) > 1 and mixed.plan.peak_bytes <= (low + high) // 2
    for policies in (["none"] * n, ["full"] * n, ["selective"] * n, list(mixed.policies)):
        auto.apply(model, policies)
        measured = peak(model, args, kwargs)
        predicted = plan_from_policies(first.problem, policies).peak_bytes
        assert abs(predicted / measured - 1) < 0.05, (policies, predicted, measured)
    auto.clear(model)


def test_plan_is_exact_optimum_and_fits_the_budget():
    model = Toy(4)
    args, kwargs = toy_inputs()
    result = auto.plan(model, args, kwargs, budget="1GiB", optimizer_state_bytes=0)
    assert result.plan.optimal and result.plan.feasible and result.policies == ("none",) * 4
    text = str(result)
    assert "predicted peak" in text and "every block full" in text
    assert json.loads(json.dumps(result.to_json()))["predicted"]["peak_bytes"] == result.plan.peak_bytes
    only_full = auto.plan(model, args, kwargs, budget="1GiB", choices=("full",), optimizer_state_bytes=0)
    assert only_full.policies == ("full",) * 4


def test_plan_infeasible_names_the_smallest_budget():
    model = Toy(4)
    args, kwargs = toy_inputs()
    with pytest.raises(InfeasibleError, match="smallest budget that works") as exc:
        auto.plan(model, args, kwargs, budget=1000, optimizer_state_bytes=0)
    assert exc.value.minimum_bytes > 1000


def test_plan_leaves_the_model_untouched_and_keeps_an_applied_plan():
    model = Toy(4)
    args, kwargs = toy_inputs()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    auto.apply(model, ["full", "none", "none", "none"])
    auto.plan(model, args, kwargs, budget="1GiB")
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert "forward" in model.blocks[0].__dict__ and "forward" not in model.blocks[1].__dict__
    assert all(p.grad is None for p in model.parameters())


@pytest.mark.parametrize("bad, field", [({"choices": ("none", "sometimes")}, "choices"), ({"budget": "lots"}, "budget"),
                                        ({"gpu": "tpu-v9"}, "gpu"), ({"choices": "selective"}, "choices"),
                                        ({"choices": ("full", "full")}, "choices"), ({"choices": ()}, "choices"),
                                        ({"dp": 0}, "dp"), ({"dp": 2.5}, "dp"), ({"dp": True}, "dp"),
                                        ({"dp": 2, "zero": 7}, "zero"), ({"zero": -1}, "zero"),
                                        ({"zero": 3}, "zero"), ({"budget": 0}, "budget"),
                                        ({"budget": "0GiB"}, "budget"),
                                        ({"loss_fn": lambda o: o}, "loss_fn"),
                                        ({"loss_fn": lambda o: 1 / 0}, "loss_fn"),
                                        ({"loss_fn": lambda o: o.sum().detach()}, "loss_fn"),
                                        ({"loss_fn": lambda o: 0.0}, "loss_fn"),
                                        ({"optimizer_state_bytes": -1}, "optimizer_state_bytes"),
                                        ({"optimizer_state_bytes": "x"}, "optimizer_state_bytes"),
                                        ({"regime": "mixed"}, "regime"), ({"blocks": 5}, "blocks")])
def test_plan_bad_arguments_name_the_field(bad, field):
    model = Toy(2)
    args, kwargs = toy_inputs()
    with pytest.raises(UsageError) as exc:
        auto.plan(model, args, kwargs, **bad)
    assert exc.value.field == field


@pytest.mark.parametrize("inputs, field", [
    (lambda a, k: ((a[0][..., :3], a[1]), k), "example_args"),            # a width the first linear cannot take
    (lambda a, k: (a[:1], k), "example_args"),                            # an argument missing (TypeError)
    (lambda a, k: (a, [("mask", k["mask"])]), "example_kwargs")])         # kwargs not a mapping
def test_plan_inputs_the_model_cannot_take_name_the_field(inputs, field):
    """Inputs the model cannot take make the forward raise inside torch: one UsageError naming the field
    (the torch error is its cause), not a traceback from deep in the model."""
    args, kwargs = inputs(*toy_inputs())
    with pytest.raises(UsageError) as exc:
        auto.plan(Toy(2), args, kwargs)
    assert exc.value.field == field and "\n" not in str(exc.value)


@pytest.mark.slow
def test_a_failing_forward_leaves_no_traceback_on_stderr():
    """FakeTensorMode logs an op that fails on fake tensors (a traceback on stderr) before it raises; the user
    sees only remat's one line. In a fresh process: torch's log handler writes to the real stderr."""
    script = """import torch
from torch import nn
from remat import auto
from remat.errors import UsageError
class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)
    def forward(self, x, bias):
        return self.lin(x) + bias        # a bias of 5 does not broadcast: fails in a decomposition, logged
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList(Block() for _ in range(2))
    def forward(self, x, bias):
        for block in self.blocks:
            x = block(x, bias)
        return x
try:
    auto.plan(Net(), (torch.randn(2, 4, 8), torch.randn(5)))
except UsageError as exc:
    print(exc.field)
"""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.stdout.strip() == "example_args" and "Traceback" not in proc.stderr, proc.stderr[-2000:]


def test_plan_and_apply_of_something_else_than_a_module_name_model():
    for call in (lambda: auto.plan("model", *toy_inputs()), lambda: auto.apply(None, "full")):
        with pytest.raises(UsageError, match="an nn.Module") as exc:
            call()
        assert exc.value.field == "model"


def test_plan_of_a_frozen_model_says_there_is_nothing_to_train():
    model = Toy(2).requires_grad_(False)
    with pytest.raises(UsageError, match="no parameter requires grad") as exc:
        auto.plan(model, *toy_inputs())
    assert exc.value.field == "model"



class _ValueDependent(nn.Module):
    """Blocks whose op needs tensor values: nonzero's and a boolean mask's output length, item()'s number."""

    def __init__(self, op):
        super().__init__()
        self.blocks, self.op = nn.ModuleList(nn.Linear(8, 8) for _ in range(2)), op

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
            x = x + self.op(x)
        return x.sum()


@pytest.mark.parametrize("op, name", [(lambda y: torch.nonzero(y > 0).shape[0] * 0.0, "nonzero"),
                                      (lambda y: y[y > 0].sum() * 0.0, "nonzero"),
                                      (lambda y: y.max().item() * 0.0, "_local_scalar_dense")])
def test_an_op_that_needs_values_is_one_usage_error_naming_it(op, name):
    model = _ValueDependent(op)
    model(torch.randn(4, 8))                                  # runs eagerly: only the fake measurement refuses it
    x = torch.randn(4, 8)
    for call in (lambda m: auto.plan(m, x, budget="1GiB"), lambda m: auto.explain(m, x)):
        with torch.device("meta"):
            meta = _ValueDependent(op)
        with pytest.raises(UsageError, match=f"aten.{name}.* needs tensor values") as exc:
            call(meta)
        assert exc.value.field == "model"

# --- transformers ---------------------------------------------------------------------------------------------------

FAMILIES = {
    "gpt2": {"model_type": "gpt2", "n_embd": 64, "n_layer": 3, "n_head": 4, "vocab_size": 128, "n_positions": 64},
    "llama": {"model_type": "llama", "hidden_size": 64, "intermediate_size": 160, "num_hidden_layers": 3,
              "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 128, "max_position_embeddings": 64},
    "mistral": {"model_type": "mistral", "hidden_size": 64, "intermediate_size": 160, "num_hidden_layers": 3,
                "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 128,
                "max_position_embeddings": 64, "sliding_window": 16},
    "qwen2": {"model_type": "qwen2", "hidden_size": 64, "intermediate_size": 160, "num_hidden_layers": 3,
              "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 128, "max_position_embeddings": 64},
    "gemma": {"model_type": "gemma", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 3,
              "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 16, "vocab_size": 128,
              "max_position_embeddings": 64},
    "mixtral": {"model_type": "mixtral", "hidden_size": 64, "intermediate_size": 160, "num_hidden_layers": 3,
                "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 128, "max_position_embeddings": 64,
                "num_local_experts": 4, "num_experts_per_tok": 2},
}


def write(tmp_path, raw):
    path = tmp_path / f"{raw['model_type']}.json"
    path.write_text(json.dumps(raw))
    return str(path)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.slow          # transformers' models built and trained: the e2e tier
def test_hf_family_plan_checked_on_cpu_against_hf_gradient_checkpointing(tmp_path, family):
    """Each family: a small instance planned at a budget between all-full and all-none, applied and measured:
    peak within 5 % of predicted and within the budget, gradients bitwise equal to no recompute; HF's own
    gradient_checkpointing_enable() is measured beside it."""
    pytest.importorskip("transformers")
    from remat.auto.check import check_small
    rows = {r["setup"]: r for r in check_small(write(tmp_path, FAMILIES[family]), layers=3, seq=32)}
    assert set(rows) == {"none", "plan", "hf-full", "auto-full"}
    for name in ("none", "plan", "auto-full"):
        assert abs(rows[name]["peak_error"]) < 0.05, rows[name]
    assert rows["plan"]["measured_peak_bytes"] <= rows["plan"]["budget_bytes"]
    assert all(r["grads_equal"] for r in rows.values())
    assert rows["auto-full"]["saved_bytes"] == rows["hf-full"]["saved_bytes"] < rows["none"]["saved_bytes"]


def test_hf_model_asked_for_a_cache_in_training_is_planned_without_one_as_hf_checkpointing_does():
    pytest.importorskip("transformers")
    from transformers import LlamaConfig
    from remat.auto.hf import build
    built = build(LlamaConfig(**{k: v for k, v in FAMILIES["llama"].items() if k != "model_type"}), "cpu", seq=16)
    with_cache = auto.plan(built.model, (), {**built.kwargs, "use_cache": True}, budget="1GiB")
    without = auto.plan(built.model, (), {**built.kwargs, "use_cache": False}, budget="1GiB")
    assert any(n.startswith("use_cache off in training") for n in with_cache.notes)
    assert with_cache.plan.peak_bytes == without.plan.peak_bytes


def test_hf_checkpointing_switched_on_after_apply_is_one_error_not_a_second_checkpoint():
    """HF's checkpointing on at apply is refused; switched on afterwards (a Trainer's gradient_checkpointing=True)
    the first training forward of a wrapped block raises one UsageError("model") instead of checkpointing every
    block twice; in eval, or with the plan cleared, the model runs."""
    pytest.importorskip("transformers")
    from transformers import LlamaConfig
    from remat.auto.hf import build, set_hf_checkpointing
    built = build(LlamaConfig(**{k: v for k, v in FAMILIES["llama"].items() if k != "model_type"}), "cpu", seq=16)
    auto.apply(built.model, "full")
    set_hf_checkpointing(built.model, True)
    with pytest.raises(UsageError, match="checkpoint every block again") as exc:
        built.model(**built.kwargs)
    assert exc.value.field == "model" and "layers.0" in str(exc.value)
    with torch.no_grad():
        built.model(**built.kwargs)
    with pytest.raises(UsageError, match="before auto.apply"):
        auto.apply(built.model, "full")
    auto.clear(built.model)
    built.model(**built.kwargs).loss.backward()


def test_hf_fake_model_plans_an_8b_shape_without_memory():
    """A model whose parameters are fake already (built under FakeTensorMode) is planned in its own mode."""
    pytest.importorskip("transformers")
    from remat.auto.hf import build
    built = build("llama3-8b", "fake", layers=4, seq=4096)
    result = auto.plan(built.model, (), built.kwargs, budget="80GiB", gpu="h100-80gb")
    assert result.costs.param_count > 1_000_000_000 and result.plan.feasible
    per_block = result.problem.layers[1].option("full").stored_bytes
    itemsize = next(built.model.parameters()).element_size()
    assert (built.micro_batch, built.seq, built.config.hidden_size, itemsize) == (1, 4096, 4096, 2)  # asked, bf16
    assert per_block == built.micro_batch * built.seq * built.config.hidden_size * itemsize   # full keeps b·s·h


# --- CLI ------------------------------------------------------------------------------------------------------------

def test_cli_plans_a_model_type_only_transformers_knows(capsys, tmp_path):
    pytest.importorskip("transformers")
    code, out, err = run(capsys, "plan", "--model", write(tmp_path, FAMILIES["gemma"]), "--memory", "3GiB",
                         "--seq", "64", "--format", "json")
    assert code == 0, err
    plan = json.loads(out)
    assert plan["settings"]["cost_source"].startswith("measured per block") and plan["apply"]["layers"] == 3
    assert plan["baselines"]                                             # uniform policies, by their names
    code, out, err = run(capsys, "plan", "--model", write(tmp_path, FAMILIES["gemma"]), "--memory", "3GiB",
                         "--seq", "64", "--format", "json", "--no-baselines")
    assert code == 0 and json.loads(out)["baselines"] == {} and json.loads(out)["layers"] == plan["layers"], err


@pytest.mark.parametrize("flag", [["--tp", "2"], ["--pp", "2"], ["--weight-bytes", "4"], ["--sp"], ["--zero", "3"]])
def test_cli_hf_refuses_flags_it_cannot_honour(capsys, tmp_path, flag):
    pytest.importorskip("transformers")
    out_file = tmp_path / "plan.md"
    code, out, err = run(capsys, "plan", "--model", write(tmp_path, FAMILIES["llama"]), "--hf", *flag,
                         "--out", str(out_file))
    assert code == 2 and f"{flag[0]}:" in err and len(err.strip().splitlines()) == 1 and not out_file.exists()


@pytest.mark.parametrize("family, change, field", [
    ("llama", {"hidden_size": "big"}, "hidden_size"), ("llama", {"num_attention_heads": 5}, "config.json"),
    ("llama", {"vocab_size": None}, "vocab_size"),                  # missing: transformers' default is 32,000
    ("llama", {"num_hidden_layers": 0}, "num_hidden_layers"), ("llama", {"num_key_value_heads": 3},
                                                                "num_key_value_heads"),
    ("llama", {"hidden_act": "nope"}, "hidden_act"), ("llama", {"torch_dtype": "float99"}, "torch_dtype"),
    ("gpt2", {"n_head": 5}, "n_head"), ("gpt2", {"n_layer": None}, "n_layer"),   # gpt2's own names
    ("llama", {"rope_scaling": {"rope_type": "weird", "factor": 2.0}}, "rope_scaling.rope_type"),
    ("llama", {"rope_scaling": [2.0]}, "rope_scaling"), ("llama", {"rms_norm_eps": float("nan")}, "rms_norm_eps"),
    ("llama", {"rms_norm_eps": 0}, "rms_norm_eps"),
    ("llama", {"max_position_embeddings": 0}, "max_position_embeddings"),
    ("gpt2", {"n_positions": 0}, "n_positions"), ("gpt2", {"layer_norm_epsilon": -1e-5}, "layer_norm_epsilon")])
def test_cli_hf_config_refused_is_one_line(capsys, tmp_path, family, change, field):
    """A config.json that transformers refuses (a field of the wrong type; sizes that disagree), or accepts and
    would fail on later, read as another model or compute NaN from (a size missing or not positive, key/value
    heads not dividing the heads, an unknown activation, dtype or RoPE type, a context length or normalisation
    epsilon not positive): one line naming the family's field, exit 2, no traceback."""
    pytest.importorskip("transformers")
    tokens = {"bos_token_id": 0, "eos_token_id": 0}      # gpt2's default 50256 is outside a toy vocabulary (a warning)
    raw = {k: v for k, v in {**FAMILIES[family], **tokens, **change}.items() if v is not None}
    code, out, err = run(capsys, "plan", "--model", write(tmp_path, raw), "--hf")
    assert code == 2 and err.startswith(f"remat plan: error: {field}:") and len(err.strip().splitlines()) == 1


@pytest.mark.slow
def test_cli_check_small_reports_predicted_and_measured(capsys, tmp_path):
    pytest.importorskip("transformers")
    code, out, err = run(capsys, "plan", "--model", write(tmp_path, FAMILIES["qwen2"]), "--memory", "24GiB",
                         "--seq", "64", "--check-small", "--check-layers", "2", "--check-seq", "16")
    assert code == 0, err
    assert "## Check on this CPU" in out and "| hf-full |" in out and "| NO |" not in out


@pytest.mark.slow
def test_cli_check_small_in_json_is_one_document_with_the_plan(capsys, tmp_path):
    pytest.importorskip("transformers")
    code, out, err = run(capsys, "plan", "--model", write(tmp_path, FAMILIES["mixtral"]), "--memory", "24GiB",
                         "--seq", "64", "--format", "json", "--check-small", "--check-layers", "2",
                         "--check-seq", "16")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["feasible"] and [r["setup"] for r in doc["check"]] == ["none", "plan", "hf-full", "auto-full"]
    assert {r["experts"] for r in doc["check"]} == {4} and all(r["grads_equal"] for r in doc["check"])


def test_frozen_parameters_plan_and_measure():
    """Frozen parameters (LoRA-style fine-tuning): no gradient for them, and the plan still predicts the
    measured peak."""
    model = Toy(4)
    args, kwargs = toy_inputs()
    for block in model.blocks:
        block.fc1.weight.requires_grad_(False)
    result = auto.plan(model, args, kwargs, budget="1GiB", optimizer_state_bytes=0, choices=("none", "full"))
    for policies in (["none"] * 4, ["full"] * 4):
        auto.apply(model, policies)
        predicted = plan_from_policies(result.problem, policies).peak_bytes
        assert abs(predicted / peak(model, args, kwargs) - 1) < 0.05
    auto.clear(model)


@pytest.mark.slow
def test_readme_example_runs_as_written(capsys):
    """docs/planner.md's "Plan for your own model" example, executed as it is written there."""
    pytest.importorskip("transformers")
    from pathlib import Path
    text = (Path(__file__).resolve().parents[1] / "docs" / "planner.md").read_text(encoding="utf-8")
    section = text[text.index("## Plan for your own model"):]
    code = section[section.index("```python\n") + len("```python\n"):
                   section.index("```", section.index("```python") + 9)]
    assert len(code.strip().splitlines()) <= 14
    exec(compile(code, "docs/planner.md", "exec"), {})
    out = capsys.readouterr().out
    assert "remat.auto plan" in out and "traps: none seen" in out


def test_explain_callable_every_time_after_the_submodule_is_imported():
    import remat.auto.diagnose  # noqa: F401  (a submodule named like the function would shadow it)
    model = Toy(2)
    args, kwargs = toy_inputs()
    for _ in range(2):
        assert auto.explain(model, args, kwargs).rows


class AmpToy(Toy):
    """A model that enters autocast inside its own forward (the blocks run in bfloat16)."""

    def forward(self, x, scale, mask=None):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return super().forward(x, scale, mask)


@pytest.mark.slow
def test_autocast_inside_forward_planned_and_explained():
    model = AmpToy(4)
    args, kwargs = toy_inputs()
    result = auto.plan(model, args, kwargs, budget="1GiB", optimizer_state_bytes=0)
    for policy in ("none", "full", "selective"):
        auto.apply(model, [policy] * 4)
        predicted = plan_from_policies(result.problem, [policy] * 4).peak_bytes
        assert abs(predicted / peak(model, args, kwargs) - 1) < 0.05, policy
    assert auto.explain(model, args, kwargs).rows[0]["plain_bytes"] > 0
    auto.clear(model)


def test_offloaded_model_can_be_copied_and_replanned():
    import copy
    model = Toy(2)
    args, kwargs = toy_inputs()
    auto.apply(model, "offload")
    step(model, args, kwargs)
    copy.deepcopy(model)
    auto.clear(model)
    assert not hasattr(model, "remat_offload")
    auto.plan(model, args, kwargs, budget="1GiB")


def test_block_discovery_ties_go_to_the_container_met_first():
    """Two containers of equally many same-class modules (an encoder and a decoder of 3 blocks each): the one
    registered first in the model (named_modules order) is planned, the other is listed as skipped."""
    class TwoStacks(nn.Module):
        def __init__(self):
            super().__init__()
            self.encoder = nn.ModuleList([nn.Linear(4, 4) for _ in range(3)])
            self.decoder = nn.ModuleList([nn.Linear(4, 4) for _ in range(3)])
    found = auto.find_blocks(TwoStacks())
    assert (found.name, found.names, found.skipped) == ("encoder", ("encoder.0", "encoder.1", "encoder.2"),
                                                         ("decoder (3)",))


def test_default_optimizer_state_is_adams_two_moments_in_the_parameters_dtype():
    """Three Linear(8, 8) in float32: 3·(64 + 8) = 216 parameters, 864 bytes; torch.optim.Adam keeps exp_avg and
    exp_avg_sq of each parameter's shape and dtype: 1728 bytes, by hand."""
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Linear(8, 8) for _ in range(3)])
    fixed = auto.plan(model, (torch.randn(4, 8),), budget="1GiB").problem.fixed_parts
    assert fixed["parameters and buffers"] == 864
    assert fixed["optimizer state (Adam m, v in float32)"] == 1728
    adam = torch.optim.Adam(model.parameters())
    model(torch.randn(4, 8)).sum().backward()
    adam.step()                                    # a second method: the bytes Adam's state really holds
    held = sum(t.numel() * t.element_size() for s in adam.state.values() for k, t in s.items() if k != "step")
    assert held == 1728


@pytest.mark.slow
def test_a_float32_mixture_of_experts_is_planned_as_its_bfloat16_twin(tmp_path):
    """torch's meta kernel for grouped_mm takes bfloat16 only, so a float32 Mixtral crashed auto.plan under fake
    tensors; planning runs its experts through transformers' fallback op (same inputs, output and saved tensors).
    Second path: the same model in bfloat16 runs torch's grouped_mm. A saved activation doubles in float32
    except what the bfloat16 model already holds in float32 or as integers (RMSNorm's upcast input, the router's
    softmax, the expert indices and offsets): at this tiny width that is about a tenth of the bf16 block, so a
    block kept whole holds between 1.7× and 2× the bytes (the fallback dropping what the experts save would
    fall far below)."""
    pytest.importorskip("transformers")
    from remat.auto import hf
    stored = {}
    for dtype in ("float32", "bfloat16"):
        path = tmp_path / f"{dtype}.json"
        path.write_text(json.dumps({
            "model_type": "mixtral", "hidden_size": 64, "intermediate_size": 96, "num_attention_heads": 4,
            "num_key_value_heads": 2, "num_hidden_layers": 2, "num_local_experts": 4, "num_experts_per_tok": 2,
            "vocab_size": 128, "max_position_embeddings": 64, "tie_word_embeddings": False, "torch_dtype": dtype}))
        built = hf.build(hf.config_of(str(path)), "fake", seq=32)
        with built.mode:
            result = auto.plan(built.model, (), built.kwargs, gpu="a100-80gb")
        stored[dtype] = result.costs.blocks[0].costs["none"].stored_bytes
    assert 1.7 * stored["bfloat16"] <= stored["float32"] <= 2 * stored["bfloat16"]


def test_float32_mixtral_block_flops_by_hand(tmp_path):
    """A float32 Mixtral's experts run transformers' grouped_mm fallback op under fake tensors; its FLOPs count
    (forward and backward), so a full recompute re-runs the block's hand count. FAMILIES["mixtral"] at s = 32:
    q and o 2·s·h·h each, k and v 2·s·h·(2 groups · 16), attention 4·s²·h (QKᵀ and ·V over the full s × s,
    Korthikanti's count), router 2·s·h·E, experts k · (2·s·h·2f + 2·s·f·h). Before, the op counted 0: the time
    model priced no expert matmul, and selective recomputed the experts' outputs it keeps in a real step."""
    pytest.importorskip("transformers")
    from remat.auto import hf
    s, h, f, e, k = 32, 64, 160, 4, 2
    by_hand = 2 * (2 * s * h * h) + 2 * (2 * s * h * 32) + 4 * s * s * h + 2 * s * h * e + k * (
        2 * s * h * 2 * f + 2 * s * f * h)
    built = hf.build(hf.config_of(write(tmp_path, FAMILIES["mixtral"])), "fake", seq=s)
    with built.mode:
        result = auto.plan(built.model, (), built.kwargs, gpu="a100-80gb")
    costs = result.costs.blocks[0].costs
    assert costs["full"].recompute_flops == by_hand
    assert costs["none"].stored_bytes > costs["selective"].stored_bytes > costs["full"].stored_bytes


LLAMA_32_1B = {"model_type": "llama", "hidden_size": 2048, "intermediate_size": 8192, "num_attention_heads": 32,
               "num_key_value_heads": 8, "head_dim": 64, "num_hidden_layers": 16, "vocab_size": 128256,
               "max_position_embeddings": 131072, "tie_word_embeddings": True}


def test_the_check_instance_is_narrowed_by_hand(tmp_path):
    """Llama-3.2-1B toward width 256: k = 8 is the largest power of two with 2048 / k ≥ 256 dividing 32 heads and
    8 key/value groups: h 256, 4 heads, 1 group, MLP 1024, head dimension 64 kept."""
    pytest.importorskip("transformers")
    from remat.auto.check import narrow
    from remat.auto.hf import config_of
    out, k = narrow(config_of(write(tmp_path, LLAMA_32_1B)), 256)
    assert k == 8
    assert (out.hidden_size, out.num_attention_heads, out.num_key_value_heads, out.intermediate_size,
            out.head_dim) == (256, 4, 1, 1024, 64)
    small, k = narrow(config_of(write(tmp_path, FAMILIES["llama"])), 256)   # 64 wide already: kept
    assert k == 1 and small.hidden_size == 64


@pytest.mark.slow
def test_the_default_check_of_a_wide_model_recomputes_something(capsys, tmp_path):
    """Llama-3.2-1B's check by default (4 blocks): narrowed, at a sequence where the activations set the peak,
    so the plan at the middle budget recomputes; measured within 5 % of predicted, gradients bitwise."""
    pytest.importorskip("transformers")
    from remat.auto.check import check_small
    rows = {r["setup"]: r for r in check_small(write(tmp_path, LLAMA_32_1B))}
    assert rows["plan"]["activations_set_peak"] and rows["plan"]["width_divisor"] == 8
    assert set(rows["plan"]["policies"].split(",")) != {"none"}
    assert all(abs(r["peak_error"]) < 0.05 for r in rows.values() if r["peak_error"] is not None)
    assert all(r["grads_equal"] for r in rows.values())
