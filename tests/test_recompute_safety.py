"""Recompute never silently changes a result (issue [3/6]): for every kind of model that used to give a silently
different gradient or an unrelated crash, each policy gives gradients bitwise equal to the unmodified model's,
or one RecomputeError naming the block and saying what to do. The reference is always the unmodified model run
by plain autograd (or, where plain autograd refuses, its refusal).
"""

from __future__ import annotations

import copy
import itertools

import pytest
import torch
from torch import nn
from torch.utils.checkpoint import CheckpointError

from remat import auto
from remat.device import is_out_of_memory
from remat.errors import RecomputeError, UsageError
from remat.planner.problem import plan_from_policies
from remat.policies import ValueCheck, recompute_check

POLICIES = ("full", "selective", "offload")


class Stack(nn.Module):
    """``n`` blocks made by ``make`` in an nn.ModuleList ``layers``, run in order."""

    def __init__(self, make, n: int = 3):
        super().__init__()
        self.layers = nn.ModuleList([make() for _ in range(n)])

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


class SeluInPlace(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(8, 8) / 3)

    def forward(self, x):
        return torch.selu_(x @ self.w)


def _model(make, n: int = 3, seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return Stack(make, n)


def _grads(model, x, policy=None, between=None, loss=lambda y: y.pow(2).sum()):
    """Parameter gradients of one step of a copy of ``model`` under ``policy`` (None: unmodified);
    ``between(model)`` runs between forward and backward."""
    m = copy.deepcopy(model)
    if policy is not None:
        auto.apply(m, policy)
    torch.manual_seed(1)
    y = m(x)
    if between is not None:
        between(m)
    loss(y).backward()
    return [p.grad for p in m.parameters()]


def _bitwise(a, b) -> bool:
    return len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b))


# --- 1. a saved tensor changed between forward and backward ------------------------------------------------------

@pytest.mark.parametrize("make, shape, op", [
    (SeluInPlace, (2, 4, 8), "elu_"),                                    # 3-D: torch's own check misses it
    (SeluInPlace, (4, 8), "elu_"),
    (lambda: nn.Sequential(nn.Linear(8, 8), nn.ReLU(inplace=True)), (2, 4, 8), "relu_"),
])
def test_an_in_place_write_into_what_selective_keeps_is_refused_naming_block_and_op(make, shape, op):
    model, x = _model(make), torch.randn(*shape, requires_grad=True)
    reference = _grads(model, x)
    for policy in ("full", "offload"):
        assert _bitwise(_grads(model, x, policy), reference), policy
    with pytest.raises(RecomputeError,
                       match=rf"^layers\.0: .*keeps the output of aten\.\w*mm.*aten\.{op}.*out of place"):
        _grads(model, x, "selective")


def test_auto_plan_leaves_selective_out_where_it_cannot_run_and_says_why():
    model, x = _model(lambda: nn.Sequential(nn.Linear(8, 8), nn.ReLU(inplace=True))), torch.randn(4, 8)
    result = auto.plan(model, (x,), budget="1GiB")         # default choices include selective
    assert all(layer.option("selective") is None for layer in result.problem.layers)
    assert any(n.startswith("selective not offered for 3 blocks (layers.0…layers.2): ") and "relu_" in n
               for n in result.notes), result.notes
    assert "note: selective not offered" in str(result)
    assert _bitwise(_grads(model, x, result.policies), _grads(model, x))


def test_offload_copies_what_a_kernel_fills_after_saving_it():
    """nn.RReLU in training saves its noise before the kernel fills it (pytorch#193671)."""
    model, x = _model(lambda: nn.Sequential(nn.Linear(8, 8), nn.RReLU())), torch.randn(4, 8, requires_grad=True)
    reference = _grads(model, x)
    for policy in POLICIES:
        assert _bitwise(_grads(model, x, policy), reference), policy


def _step_params(model):
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.5)


def test_parameters_changed_between_forward_and_backward_are_refused_like_autograd_does():
    model, x = _model(lambda: nn.Sequential(nn.Linear(8, 8), nn.Tanh())), torch.randn(4, 8, requires_grad=True)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        _grads(model, x, between=_step_params)              # the unmodified model refuses
    for policy in ("full", "selective"):
        with pytest.raises(RecomputeError, match=r"^layers\.2: 0\.weight was modified in place between forward"):
            _grads(model, x, policy, between=_step_params)
    with pytest.raises(RecomputeError, match=r"^layers\.2: a tensor saved for backward .* modified by an in-place"):
        _grads(model, x, "offload", between=_step_params)


# --- 2. state that is not the block's inputs ---------------------------------------------------------------------

class Scaled(nn.Module):
    """Reads ``scale``, which the model sets before its blocks run and resets after (a hook-set state)."""

    def __init__(self):
        super().__init__()
        self.lin, self.scale = nn.Linear(8, 8), 1.0

    def forward(self, x):
        return torch.tanh(self.lin(x) * self.scale)


class ScaledStack(Stack):
    def forward(self, x):
        for layer in self.layers:
            layer.scale = 2.0
        y = super().forward(x)
        for layer in self.layers:
            layer.scale = 1.0
        return y


def test_a_recompute_that_reads_other_state_is_named_by_the_value_check_and_by_explain():
    torch.manual_seed(0)
    model, x = ScaledStack(Scaled), torch.randn(4, 8, requires_grad=True)
    reference = _grads(model, x)
    for policy in ("full", "selective"):
        with recompute_check("off"):
            assert not _bitwise(_grads(model, x, policy), reference), "the trap this check exists for"
        with pytest.raises(RecomputeError, match=r"^layers\.2: recomputing aten\.mul .*other values"):
            _grads(model, x, policy)                           # the default check: a region's first forward
        m = copy.deepcopy(model)
        auto.apply(m, policy)
        with pytest.raises(RecomputeError, match=r"^layers\.2: recomputing aten\.mul .*other values"):
            with recompute_check("off"), ValueCheck():         # every step, whatever the default
                m(x).sum().backward()
        report = auto.explain(m, (x,))
        assert "recompute-differs" in report.codes() and "layers.0" in report.traps[-1].blocks
    m = copy.deepcopy(model)
    auto.apply(m, "offload")                                   # no recompute: nothing to differ
    assert _bitwise(_grads(model, x, "offload"), reference)
    assert "recompute-differs" not in auto.explain(m, (x,)).codes()


@pytest.mark.parametrize("norm", [lambda: nn.Dropout(0.3), lambda: nn.BatchNorm1d(8)], ids=["dropout", "batchnorm"])
def test_the_value_check_passes_a_model_whose_recompute_is_faithful(norm):
    """Dropout, and BatchNorm, whose running statistics the recompute updates again and remat gives back
    afterwards (no forward in training reads them): no mismatch, no recompute-differs trap, and the statistics
    after one step are the plain model's (updated once)."""
    model, x = _model(lambda: nn.Sequential(nn.Linear(8, 8), norm(), nn.GELU())), torch.randn(4, 8)
    plain = copy.deepcopy(model)
    plain(x).sum().backward()
    for policy in ("full", "selective"):
        m = copy.deepcopy(model)
        auto.apply(m, policy)
        assert "recompute-differs" not in auto.explain(m, (x,)).codes()
        with ValueCheck() as check:
            m(x).sum().backward()
        assert check.mismatches == []
        assert all(torch.equal(a, b) for a, b in zip(m.buffers(), plain.buffers()))


def _tiny_llama():
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(hidden_size=32, intermediate_size=64, num_attention_heads=4,
                                      num_key_value_heads=2, num_hidden_layers=3, vocab_size=64)
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(config).train()


def test_a_huggingface_model_trains_with_its_cache_off_under_plan_and_apply_alike():
    model = _tiny_llama()
    assert model.config.use_cache                        # the default that used to fail with "size 24 vs 12"
    ids = torch.randint(0, 64, (2, 12))
    reference = copy.deepcopy(model)
    reference(input_ids=ids, labels=ids, use_cache=False).loss.backward()
    result = auto.plan(model, (), {"input_ids": ids, "labels": ids}, budget="1GiB", choices=("full",))
    assert any("use_cache off in training" in n for n in result.notes)
    for policy in POLICIES:
        m = copy.deepcopy(model)
        auto.apply(m, policy)
        with pytest.warns(UserWarning, match="use_cache off in training"):
            m(input_ids=ids, labels=ids).loss.backward()
        assert _bitwise([p.grad for p in m.parameters()], [p.grad for p in reference.parameters()]), policy
        auto.clear(m)
        assert m(input_ids=ids[:, :4], use_cache=True).past_key_values is not None   # inference untouched


def test_a_model_switched_to_eval_before_backward_recomputes_in_its_forward_mode():
    """A loop that calls model.eval() (for logging) between forward and backward: the recompute must run
    dropout as the forward did (it used to fail with torch's "different number of tensors" CheckpointError)."""
    model = _model(lambda: nn.Sequential(nn.Linear(8, 8), nn.Dropout(0.3), nn.GELU()))
    x = torch.randn(4, 8)
    reference = _grads(model, x, between=lambda m: m.eval())
    for policy in POLICIES:
        assert _bitwise(_grads(model, x, policy, between=lambda m: m.eval()), reference), policy


def test_blocks_without_parameters_take_every_policy():
    model, x = _model(nn.Identity), torch.randn(4, 8, requires_grad=True)
    for policy in POLICIES:
        m = copy.deepcopy(model)
        auto.apply(m, policy)
        y = m(x * 2)
        y.pow(2).sum().backward()
        assert torch.equal(x.grad, 8 * x), policy              # d/dx Σ(2x)² = 8x, by hand
        x.grad = None


# --- 3. explain changes nothing ----------------------------------------------------------------------------------

class Stashing(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin, self.norm = nn.Linear(8, 8), nn.BatchNorm1d(8)

    def forward(self, x):
        h = torch.tanh(self.lin(x))
        self.last_h = h                                  # the Megatron-LM#3221 kind of leak
        return self.norm(h)


def test_explain_leaves_the_model_as_it_found_it_and_reports_what_blocks_keep_on_themselves():
    model, x = _model(Stashing), torch.randn(4, 8, requires_grad=True)
    model.layers[0].lin.weight.grad = torch.ones(8, 8)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    rng = torch.get_rng_state()
    report = auto.explain(model, (x,))
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())   # running stats: no update
    assert torch.equal(model.layers[0].lin.weight.grad, torch.ones(8, 8)) and model.layers[1].lin.weight.grad is None
    assert not hasattr(model.layers[0], "last_h") and torch.equal(torch.get_rng_state(), rng)
    stashed = [t for t in report.traps if t.code == "stashed"]
    assert stashed and stashed[0].blocks == ("layers.0", "layers.1", "layers.2")
    assert "layers.0.last_h (128 B)" in stashed[0].message   # 4 × 8 float32 = 128 bytes, by hand


# --- 4. one module object at two depths --------------------------------------------------------------------------

def _shared_model():
    model = _model(lambda: nn.Sequential(nn.Linear(8, 64), nn.GELU(), nn.Linear(64, 8)), n=3)
    model.layers = nn.ModuleList([model.layers[0], model.layers[1], model.layers[0], model.layers[2]])
    return model


def test_a_shared_block_takes_one_policy_and_the_plan_is_the_best_such_plan():
    model, x = _shared_model(), torch.randn(16, 8, requires_grad=True)
    loose = auto.plan(model, (x,), budget="1GiB", choices=("none", "full"))
    base = loose.baselines
    budget = (base["no recompute"]["peak_bytes"] + base["every block full (HF gradient_checkpointing_enable)"]
              ["peak_bytes"]) // 2
    result = auto.plan(model, (x,), budget=budget, choices=("none", "full"))
    assert result.policies[0] == result.policies[2] and "full" in result.policies
    brute = min((plan for plan in (plan_from_policies(result.problem, p)
                                   for p in itertools.product(("none", "full"), repeat=4) if p[0] == p[2])
                 if plan is not None and plan.feasible), key=lambda p: p.step_time_s)
    assert result.plan.step_time_s == pytest.approx(brute.step_time_s, rel=1e-12)
    auto.apply(model, result)
    assert _bitwise(_grads(model, x), _grads(_shared_model(), x))
    with pytest.raises(UsageError, match="layers.0 and layers.2 are one module object .* given full and none"):
        auto.apply(model, ["full", "none", "none", "none"])


class Renamed(Stack):
    def __init__(self):
        super().__init__(lambda: nn.Linear(8, 8), 4)
        self.blocks = self.layers
        del self.layers

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return x


def test_a_plan_for_other_blocks_says_where_they_differ():
    model, x = _model(lambda: nn.Linear(8, 8), n=4), torch.randn(4, 8)
    result = auto.plan(model, (x,), budget="1GiB", choices=("none",))
    with pytest.raises(UsageError, match=r"layers\.0…layers\.3, this model's differ at position 0: layers\.0 in the "
                                         r"plan, blocks\.0 here"):
        auto.apply(Renamed(), result, blocks="blocks")


# --- 5. composition -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("policy", POLICIES)
def test_every_policy_composes_with_torch_compile(policy):
    model, x = _model(lambda: nn.Sequential(nn.Linear(8, 8), nn.GELU())), torch.randn(4, 8)
    reference = _grads(model, x)
    m = copy.deepcopy(model)
    auto.apply(m, policy)
    torch._dynamo.reset()
    compiled = torch.compile(m, backend="aot_eager")
    compiled(x).pow(2).sum().backward()
    assert _bitwise([p.grad for p in m.parameters()], reference)


@pytest.mark.parametrize("policy", POLICIES)
def test_every_policy_recomputes_as_often_as_backward_asks(policy):
    model, x = _model(lambda: nn.Sequential(nn.Linear(8, 8), nn.Tanh())), torch.randn(4, 8, requires_grad=True)

    def twice(y):
        loss = y.pow(2).sum()
        loss.backward(retain_graph=True)
        return loss

    def penalty(y):
        loss = y.pow(2).sum()
        grad, = torch.autograd.grad(loss, x, create_graph=True)
        return loss + grad.pow(2).sum()
    for loss in (twice, penalty):
        assert _bitwise(_grads(model, x, policy, loss=loss), _grads(model, x, loss=loss)), loss.__name__


@pytest.mark.slow
def test_a_model_on_the_meta_device_is_planned_and_explained_as_the_real_one():
    make = lambda: nn.Sequential(nn.Linear(8, 32), nn.GELU(), nn.Linear(32, 8))
    x = torch.randn(4, 8)
    with torch.device("meta"):
        empty = Stack(make)
    real = _model(make)
    for choices in (("none", "full"), ("full",)):
        a = auto.plan(empty, (x,), budget="1GiB", choices=choices)
        b = auto.plan(real, (x,), budget="1GiB", choices=choices)
        assert (a.policies, a.plan.peak_bytes) == (b.policies, b.plan.peak_bytes)
    for policy in ("none", "full"):
        auto.apply(empty, policy)
        auto.apply(real, policy)
        fake, measured = auto.explain(empty, (x,)).rows, auto.explain(real, (x,)).rows
        assert [(r["kept_bytes"], r["recompute_flops"]) for r in fake] == \
               [(r["kept_bytes"], r["recompute_flops"]) for r in measured], policy


class Routed(nn.Module):
    """Routes the tokens whose router score passes a threshold that moves with every call (a load-balancing
    counter): how many tokens, and so the shapes, differ between forward and recompute."""

    def __init__(self):
        super().__init__()
        self.router, self.expert, self.calls = nn.Linear(8, 1), nn.Linear(8, 8), 0

    def forward(self, x):
        self.calls += 1
        keep = self.router(x).squeeze(-1) > (0.0 if self.calls % 2 else 0.3)
        out = x.clone()
        out[keep] = torch.relu(self.expert(x[keep]))
        return out


@pytest.mark.parametrize("check", ["sample", "off"])
def test_data_dependent_shapes_that_differ_at_recompute_give_a_clear_error(check):
    """The default value check names the op whose values moved first (the router's comparison, op 2); without
    it the recompute still fails with one error: torch's metadata check, or remat's naming the region."""
    model, x = _model(Routed, n=2), torch.randn(24, 8, requires_grad=True)
    moved = r"^layers\.1: recomputing aten\.gt \(op 2 of its forward\) gave other values"
    for policy, error, words in (("full", CheckpointError, "Recomputed values .* different metadata"),
                                 ("selective", RecomputeError, r"^layers\.1: the recompute in backward failed .*"
                                                               "ran differently than in forward")):
        m = copy.deepcopy(model)
        auto.apply(m, policy)
        with recompute_check(check), pytest.raises(RecomputeError if check == "sample" else error,
                                                   match=moved if check == "sample" else words):
            m(x).sum().backward()


class Starved(nn.Module):
    """Runs in forward; its recompute (every second call) fails to allocate, as a GPU at its peak would."""

    def __init__(self):
        super().__init__()
        self.linear, self.calls = nn.Linear(8, 8), 0

    def forward(self, x):
        self.calls += 1
        if self.calls % 2 == 0:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return torch.relu(self.linear(x))


@pytest.mark.parametrize("policy", ["full", "selective"])
def test_running_out_of_memory_in_a_recompute_says_so_not_that_it_ran_differently(policy):
    m = _model(Starved, n=1)
    auto.apply(m, policy)
    with pytest.raises(RecomputeError, match=r"^layers\.0: the recompute in backward ran out of memory .*none or "
                                             "offload") as err:
        m(torch.randn(4, 8, requires_grad=True)).sum().backward()
    assert "differently" not in str(err.value)
    assert is_out_of_memory(err.value) and not is_out_of_memory(ValueError("shapes differ"))   # a sweep's "oom"


# --- 6. a plan made with blocks=[...] ------------------------------------------------------------------------------

class UNetish(nn.Module):
    def __init__(self):
        super().__init__()
        self.down = nn.ModuleList([nn.Linear(8, 8) for _ in range(2)])
        self.up = nn.ModuleList([nn.Linear(8, 8) for _ in range(2)])

    def forward(self, x):
        for layer in [*self.down, *self.up]:
            x = torch.tanh(layer(x))
        return x


def test_a_plan_made_with_a_list_of_blocks_applies_without_repeating_it():
    torch.manual_seed(0)
    model, x = UNetish(), torch.randn(4, 8, requires_grad=True)
    result = auto.plan(model, (x,), budget="1GiB", blocks=[*model.down, *model.up], choices=("full",))
    reference = _grads(model, x)
    auto.apply(model, result)
    assert result.block_names == ("down.0", "down.1", "up.0", "up.1")
    assert all(m in auto.wrap.applied(model)[0].modules for m in [*model.down, *model.up])
    assert _bitwise(_grads(model, x), reference)
