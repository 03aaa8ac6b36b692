"""Tensor-granularity plans (remat.auto granularity="tensor", remat.auto.tensors, remat.planner.keepsets):
the frontier against brute force, the priced kept sets against a measurement of each under fake tensors, and
applied plans measured on this CPU: peak within budget, gradients bitwise, monotone in the budget."""

from __future__ import annotations

import copy
import itertools
import json
import random
from unittest import mock

import pytest
import torch
from torch.utils.checkpoint import CheckpointPolicy
from conftest import run_cli

from remat import auto
from remat.auto import measure, tensors
from remat.auto.fake import fake_model
from remat.auto.blocks import Blocks
from remat.auto.tensors import KeptSet
from remat.auto.whole_step import whole_step
from remat.errors import RecomputeError, UsageError
from remat.measure.peak import PeakMemory
from remat.models.toys import BlockNet, ConvBlock, TransformerBlock
from remat.planner.keepsets import frontier
from remat.timemodel.gpus import gpu
from remat.timemodel.roofline import Rates


def _nets():
    torch.manual_seed(0)
    return [(BlockNet(TransformerBlock), torch.randn(2, 64, 64)),
            (BlockNet(ConvBlock, width=16), torch.randn(2, 16, 16, 16))]


def test_frontier_is_the_brute_force_pareto_front():
    rng = random.Random(1)
    for _ in range(40):
        items = [(rng.choice([0, 8, 16, 24, 64]), rng.choice([0.0, 1.0, 2.5, 3.0])) for _ in range(rng.randint(0, 8))]
        subsets = [frozenset(s) for r in range(len(items) + 1) for s in itertools.combinations(range(len(items)), r)]
        value = lambda s: (sum(items[i][0] for i in s), sum(items[i][1] for i in s))
        best = {}
        for s in subsets:                       # per byte total, the most seconds
            b, sec = value(s)
            best[b] = max(best.get(b, -1.0), sec)
        expected, top = [], -1.0
        for b in sorted(best):                  # the non-dominated (bytes, seconds)
            if best[b] > top:
                expected.append((b, best[b]))
                top = best[b]
        points = frontier(items)
        assert [(p.nbytes, pytest.approx(p.seconds)) for p in points] == expected
        assert all(value(p.items) == (p.nbytes, pytest.approx(p.seconds)) for p in points)


def _block_setup(net, x):
    mode, model = fake_model(net)
    names = tuple(f"blocks.{i}" for i in range(len(net.blocks)))
    blocks = Blocks("blocks", names, tuple(model.get_submodule(n) for n in names))
    with mode:
        captured = whole_step(model, (mode.from_tensor(x),), {}, blocks, lambda o: o)["inputs"][1]
    return mode, blocks.modules[1], captured


@pytest.mark.parametrize("which", [0, 1])
def test_priced_kept_sets_equal_their_measurement_under_fake_tensors(which):
    """Every kept set priced by the op stream (stored, backward peak, time) equals a measurement of that set
    applied through torch's selective checkpoint under fake tensors (a second method: the real policy run)."""
    net, x = _nets()[which]
    mode, module, captured = _block_setup(net, x)
    rates = Rates.of(gpu("h100-80gb"), 1, "float32")
    with mode:
        full = measure._run_block(module, captured, "full", rates)
        variants, ops = measure.tensor_variants(module, captured, rates, full)
        rng = random.Random(which)
        candidates = [o.index for o in ops.candidates]
        sets = [frozenset(rng.sample(candidates, rng.randint(1, len(candidates)))) for _ in range(4)]
        for keep in [v[0] for v in variants.values()][:6] + sets:
            got = measure._run_block(module, captured, "selective", rates, keep=KeptSet(ops.names, keep))
            stored = full.stored_bytes + ops.kept_bytes(keep)
            assert got.stored_bytes == stored
            assert got.stored_bytes + got.transient_bytes == ops.peak_bytes(
                keep, full.stored_bytes, full.stored_bytes + full.transient_bytes)
            assert got.time_s == pytest.approx(full.time_s - ops.kept_seconds(keep), rel=1e-9)
    assert len(variants) >= 3


def _plan(net, x, budget, **options):
    """A plan of ``net`` whose loss is its output, without optimizer state (the measured step runs none)."""
    options = {"choices": ("none", "selective", "full"), **options}
    return auto.plan(net, (x,), budget=budget, loss_fn=lambda o: o, optimizer_state_bytes=0, **options)


def _ends(net, x) -> tuple[int, int]:
    """The predicted peaks of every block full and of no recompute."""
    return (_plan(net, x, "1GiB", choices=("full",)).plan.peak_bytes,
            _plan(net, x, "1GiB", choices=("none",)).plan.peak_bytes)


def _measured_step(net, x) -> tuple[int, list]:
    net.zero_grad(set_to_none=True)
    with PeakMemory("cpu", net, x) as mem:
        net(x).backward()
    grads = [p.grad.clone() for p in net.parameters()]
    return mem.peak_bytes, grads


@pytest.mark.parametrize("which", [0, 1])
@pytest.mark.slow
def test_applied_tensor_plans_fit_are_exact_and_monotone(which):
    """Budgets from the every-block-full peak to no recompute: each plan's measured peak fits its budget and
    equals the prediction within 1 %, gradients are bitwise the plain model's, and a larger budget never gives
    a lower predicted peak or a slower predicted step."""
    net, x = _nets()[which]
    _, reference = _measured_step(copy.deepcopy(net), x)
    full, none = _ends(net, x)
    previous = None
    for fraction in (0.0, 0.3, 0.6, 1.0):
        budget = int(full + (none - full) * fraction)
        result = _plan(net, x, budget, granularity="tensor")
        model = copy.deepcopy(net)
        auto.apply(model, result)
        peak, grads = _measured_step(model, x)
        assert all(torch.equal(a, b) for a, b in zip(reference, grads))
        assert peak <= budget and abs(peak - result.plan.peak_bytes) <= 0.01 * peak
        if previous is not None:
            assert result.plan.peak_bytes >= previous.peak_bytes
            assert result.plan.step_time_s <= previous.step_time_s
        previous = result.plan


@pytest.mark.slow
def test_a_tensor_plan_beats_block_plans_between_full_and_none():
    """Between the full and no-recompute peaks the tensor plan is never slower than the best per-block plan (its
    options include every block policy), and faster where a kept set fits what no block policy does."""
    net, x = _nets()[0]
    full, none = _ends(net, x)
    gains = []
    for fraction in (0.1, 0.3, 0.7, 0.9):
        budget = int(full + (none - full) * fraction)
        block, tensor = _plan(net, x, budget), _plan(net, x, budget, granularity="tensor")
        assert tensor.plan.step_time_s <= block.plan.step_time_s * (1 + 1e-12)
        gains.append(block.plan.step_time_s - tensor.plan.step_time_s)
    assert max(gains) > 0.02 * block.plan.step_time_s


def test_a_block_running_other_ops_than_planned_is_refused():
    net, x = _nets()[0]
    mode, module, captured = _block_setup(net, x)
    names = ("mm",) * 50
    rates = Rates.of(gpu("h100-80gb"), 1, "float32")
    with mode, pytest.raises(RecomputeError, match="other ops than were planned"):
        measure._run_block(module, captured, "selective", rates, keep=KeptSet(names, frozenset({0})))


class _InplaceMLP(torch.nn.Module):
    """x + fc2(relu_(fc1(x))) on a 3-D input: the in-place ReLU writes into a view of fc1's matmul output, which
    autograd replays as a view under fake tensors and as a detach in eager."""

    def __init__(self, d: int = 16):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(d, 4 * d), torch.nn.ReLU(inplace=True),
                                       torch.nn.Linear(4 * d, d))

    def forward(self, x):
        return x + self.net(x)


def test_a_tensor_plan_over_an_inplace_relu_on_a_view_trains():
    """The planned and the applied streams agree (views are not counted): every kept set of the frontier,
    applied, trains and gives the plain model's gradients bit for bit."""
    torch.manual_seed(0)
    net, x = BlockNet(lambda: _InplaceMLP(16), 3, 16), torch.randn(4, 8, 16)
    _, reference = _measured_step(copy.deepcopy(net), x)
    full, none = _ends(net, x)
    kept = []
    for fraction in (0.2, 0.5, 0.8):
        result = _plan(net, x, int(full + (none - full) * fraction), granularity="tensor")
        kept += [k for k in result.kept_sets if k is not None]
        model = copy.deepcopy(net)
        auto.apply(model, result)
        _, grads = _measured_step(model, x)
        assert all(torch.equal(a, b) for a, b in zip(reference, grads))
    assert kept


def test_under_compile_inserted_ops_are_recomputed_and_other_differences_name_compile():
    """Under torch.compile the traced ops can differ from eager's: an op the eager stream never runs (a
    decomposition's scalar_tensor) is recomputed and does not shift the plan; a planned op out of its place
    refuses, saying compile and what to do, not "control flow". The policy alone, with
    torch.compiler.is_compiling() true (no compile run)."""
    decide = KeptSet(("mm", "add"), frozenset({0}), "blocks.0").policy()
    ctx = type("Ctx", (), {"is_recompute": False, "op_output": None})()
    with mock.patch("torch.compiler.is_compiling", return_value=True), mock.patch.object(tensors, "record_kept"):
        assert decide(ctx, torch.ops.aten.scalar_tensor.default) == CheckpointPolicy.PREFER_RECOMPUTE
        assert decide(ctx, torch.ops.aten.mm.default) == CheckpointPolicy.MUST_SAVE      # still op 0: kept
        with pytest.raises(RecomputeError, match="under torch.compile the traced ops differ"):
            decide(ctx, torch.ops.aten.mm.default)                                      # op 1 is add


def test_granularity_must_be_known():
    net, x = _nets()[0]
    with pytest.raises(UsageError, match="granularity"):
        auto.plan(net, (x,), budget="1GiB", loss_fn=lambda o: o, granularity="op")


def test_the_torch_policy_names_every_op():
    kept = KeptSet(("native_layer_norm", "view", "mm"), frozenset({2}))
    assert kept.torch_policy() == [
        {"index": 0, "op": "native_layer_norm", "policy": "PREFER_RECOMPUTE"},
        {"index": 1, "op": "view", "policy": "PREFER_RECOMPUTE"},
        {"index": 2, "op": "mm", "policy": "MUST_SAVE"}]


@pytest.mark.slow
def test_the_written_torch_policy_applies_without_remat():
    """The plan's torch_policy (JSON), read back into a policy_fn for torch's own checkpoint: same gradients
    as the plain model, bit for bit; and the text names what each block keeps."""
    import functools
    import json

    from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts
    net, x = _nets()[0]
    full, none = _ends(net, x)
    result = _plan(net, x, int(full + (none - full) * 0.3), granularity="tensor")
    written = json.loads(json.dumps(result.to_json()))["torch_policy"]
    assert written and "keep" in str(result) and "recompute" in str(result)
    model = copy.deepcopy(net)
    for name, rows in written.items():
        block = model.get_submodule(name)
        keep = {r["index"] for r in rows if r["policy"] == "MUST_SAVE"}

        def contexts(keep=keep):
            count = iter(range(10 ** 6))
            decide = lambda ctx, func, *a, **k: (CheckpointPolicy.MUST_SAVE if not ctx.is_recompute and
                                                 not func.is_view and next(count) in keep
                                                 else CheckpointPolicy.PREFER_RECOMPUTE)
            return create_selective_checkpoint_contexts(decide)
        block.forward = functools.partial(checkpoint, type(block).forward.__get__(block), use_reentrant=False,
                                          context_fn=contexts)
    _, reference = _measured_step(copy.deepcopy(net), x)
    _, grads = _measured_step(model, x)
    assert all(torch.equal(a, b) for a, b in zip(reference, grads))


# --- the CLI: remat plan --granularity tensor ---------------------------------------------------------------------

_LLAMA = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 160, "num_hidden_layers": 3,
          "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 128, "max_position_embeddings": 64}


def _config(tmp_path) -> str:
    path = tmp_path / "llama.json"
    path.write_text(json.dumps(_LLAMA))
    return str(path)


@pytest.mark.parametrize("compiled", [[], ["--compiled"]])
@pytest.mark.slow
def test_cli_tensor_plan_is_checked_on_this_cpu(capsys, tmp_path, compiled):
    """--granularity tensor with --check-small: the small instance's tensor plan (kept sets named in its row) is
    applied and measured — peak as predicted to the byte, within its budget, gradients bitwise; priced as eager
    or (--compiled) as torch.compile fuses it."""
    pytest.importorskip("transformers")
    code, out, err = run_cli(capsys, "plan", "--model", _config(tmp_path), "--hf", "--granularity", "tensor",
                             "--seq", "64", "--format", "json", "--check-small", "--check-layers", "3", *compiled)
    assert code == 0, err
    rows = {r["setup"]: r for r in json.loads(out)["check"]}
    plan = rows["plan"]
    assert ("selective" if compiled else "keep op sets") in plan["policies"], plan["policies"]
    assert ("torch.compile" in json.loads(out)["settings"]["time_source"]) == bool(compiled)
    assert plan["measured_peak_bytes"] == plan["predicted_peak_bytes"] <= plan["budget_bytes"]
    assert all(r["grads_equal"] for r in rows.values())


@pytest.mark.parametrize("flags, field", [([], "--granularity"), (["--hf", "--format", "nemo"], "--format"),
                                         (["--compiled"], "--compiled")])
def test_cli_tensor_plan_refuses_what_it_cannot_write(capsys, tmp_path, flags, field):
    """A preset (formula costs: no ops to keep) and a trainer format (no per-op kept sets): one line naming the
    field, exit 2, nothing written."""
    model = _config(tmp_path) if "--hf" in flags else "gpt-22b"
    out_file = tmp_path / "plan.out"
    code, out, err = run_cli(capsys, "plan", "--model", model, "--granularity", "tensor", *flags,
                             "--out", str(out_file))
    assert code == 2 and err.startswith(f"remat plan: error: {field}:") and len(err.strip().splitlines()) == 1
    assert not out_file.exists()


def test_a_baseline_no_block_offers_is_not_listed():
    """Selective refused on every block (an in-place write into a kept matmul output) while a tensor plan's kept
    sets are offered: the uniform baselines are those every block offers as a block policy, and the plan prints."""

    class Written(torch.nn.Module):
        def __init__(self, d: int = 16):
            super().__init__()
            self.fc1, self.fc2 = torch.nn.Linear(d, 4 * d), torch.nn.Linear(4 * d, d)

        def forward(self, x):
            h = self.fc1(x)
            h.mul_(0.5)
            return x + self.fc2(torch.relu(h))

    torch.manual_seed(0)
    net, x = BlockNet(lambda: Written(16), 3, 16), torch.randn(4, 8, 16)
    result = _plan(net, x, "1GiB", granularity="tensor")
    assert "every block selective" not in result.baselines and "selective not offered" in str(result)


@pytest.mark.slow
def test_a_tensor_plan_of_a_transformers_llama_trains_under_torch_compile():
    """The Llama's attention mask is made float before SDPA under torch.compile (ops its eager stream never runs):
    the plan still applies, and with eager kernels (backend aot_eager) the gradients are the eager model's bit for
    bit."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                                      num_key_value_heads=4, vocab_size=64, max_position_embeddings=32)
    model, tokens = transformers.LlamaForCausalLM(config), torch.randint(0, 64, (2, 16))
    loss = lambda m: m(tokens).logits.sum()
    reference = copy.deepcopy(model)
    loss(reference).backward()
    plan = lambda budget, **o: auto.plan(model, (tokens,), budget=budget, loss_fn=lambda o: o.logits.sum(),
                                         optimizer_state_bytes=0, **o)
    full, none = (plan("1GiB", choices=(c,)).plan.peak_bytes for c in ("full", "none"))
    result = plan(int(full + (none - full) * 0.5), granularity="tensor", choices=("none", "selective", "full"))
    assert any(k is not None and k.keep for k in result.kept_sets)
    auto.apply(model, result)
    torch._dynamo.reset()
    loss(torch.compile(model, backend="aot_eager")).backward()
    assert all(torch.equal(a.grad, b.grad) for a, b in zip(model.parameters(), reference.parameters()))


def test_a_tensor_plan_always_writes_its_torch_policy():
    """``to_json()["torch_policy"]`` is there for every tensor plan ({} where no block keeps an op set of its own:
    every block full), and absent from a per-block plan."""
    net, x = _nets()[0]
    tensor = _plan(net, x, "1GiB", granularity="tensor", choices=("full",))
    assert tensor.to_json()["torch_policy"] == {}
    assert "torch_policy" not in _plan(net, x, "1GiB", choices=("full",)).to_json()


def test_a_block_whose_frontier_is_too_large_takes_a_block_policy_and_the_plan_says_so():
    """keepsets.FrontierTooLarge (a Llama with attention dropout passes 4,096 Pareto-optimal sets): the block is
    planned with block policies only and a note names it — not an internal error."""
    net, x = _nets()[0]
    with mock.patch("remat.planner.keepsets.MAX_POINTS", 1):
        result = _plan(net, x, "1GiB", granularity="tensor")
    assert all(k is None for k in result.kept_sets)
    assert any(n.startswith("op-level kept sets not offered for") for n in result.to_json()["notes"])
