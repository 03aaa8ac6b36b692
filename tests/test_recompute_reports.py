"""Recompute never silently changes a result, on cases modelled on public bug reports beyond issue [3/6]'s list
(found by a second reviewer trying to break the promise): each policy gives gradients bitwise equal to the
unmodified model's, or one RecomputeError naming the block; auto.plan takes what auto.apply takes.
"""

from __future__ import annotations

import copy
import io
import warnings

import pytest
import torch
from torch import nn

from remat import auto
from remat.errors import RecomputeError

POLICIES = ("full", "selective", "offload")


def _stack(make, n: int = 3, seed: int = 0) -> nn.Sequential:
    torch.manual_seed(seed)
    return nn.Sequential(*[make() for _ in range(n)])


def _grads(model, x, policy=None, step=None):
    """Parameter gradients of one step of a copy of ``model`` (``policy`` None: unmodified); ``step(m, x)``
    returns the loss (default: the output's squares summed)."""
    m = copy.deepcopy(model)
    if policy is not None:
        auto.apply(m, policy)
    torch.manual_seed(1)
    loss = step(m, x) if step is not None else m(x).pow(2).sum()
    loss.backward()
    return [p.grad for p in m.parameters()]


def _same(model, x, step=None, policies=POLICIES):
    reference = _grads(model, x, step=step)
    for policy in policies:
        got = _grads(model, x, policy, step)
        assert all(torch.equal(a, b) for a, b in zip(got, reference)), policy


def test_a_buffer_the_forward_updates_and_then_reads_is_given_back_to_the_recompute():
    """spectral_norm's power iteration (parametrizations, and the legacy hook) and an EMA statistic read after
    its update: the recompute starts from the buffers' values at the forward's start (pytorch reports of
    spectral_norm under checkpoint)."""
    x = torch.randn(4, 8)
    _same(_stack(lambda: nn.Sequential(nn.utils.parametrizations.spectral_norm(nn.Linear(8, 8)), nn.Tanh())), x)
    _same(_stack(lambda: nn.Sequential(nn.utils.spectral_norm(nn.Linear(8, 8)), nn.Tanh())), x)

    class Ema(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(8, 8)
            self.register_buffer("ema", torch.zeros(8))

        def forward(self, x):
            with torch.no_grad():
                self.ema.mul_(0.9).add_(0.1 * x.mean(0))
            return torch.tanh(self.lin(x - self.ema))
    model = _stack(Ema)
    _same(model, x)
    auto.apply(model, "full")
    model(x).sum().backward()
    assert torch.equal(model[0].ema, 0.1 * x.mean(0))          # updated once per step, by hand


def test_functional_call_recomputes_with_the_tensors_it_was_given():
    model, x = _stack(lambda: nn.Sequential(nn.Linear(8, 8), nn.Tanh())), torch.randn(4, 8)

    def step(m, x):
        params = {n: (p.detach() * 1.5).requires_grad_() for n, p in m.named_parameters()}
        step.params = params
        return torch.func.functional_call(m, params, (x,)).pow(2).sum()
    reference = None
    for policy in (None, *POLICIES):
        m = copy.deepcopy(model)
        if policy:
            auto.apply(m, policy)
        step(m, x).backward()
        grads = [p.grad for p in step.params.values()]
        reference = reference or grads
        assert all(torch.equal(a, b) for a, b in zip(grads, reference)), policy
        assert all(p.grad is None for p in m.parameters())          # the module's own got none


class Owned(nn.Module):
    """Dropout drawn from a generator the module owns (checkpoint replays only the default generators)."""

    def __init__(self):
        super().__init__()
        self.lin, self.gen = nn.Linear(8, 8), torch.Generator().manual_seed(1)

    def forward(self, x):
        h = torch.tanh(self.lin(x))
        return h * torch.bernoulli(torch.full_like(h, 0.8), generator=self.gen)


def test_a_module_owned_generator_is_replayed_and_plan_leaves_it_alone():
    model, x = _stack(Owned, n=2), torch.randn(4, 8)
    _same(model, x)
    state = model[0].gen.get_state()
    auto.plan(model, (x,), budget="1GiB")
    assert torch.equal(model[0].gen.get_state(), state)


def test_a_forward_set_on_the_instance_is_wrapped_and_given_back():
    """accelerate's hooks (and users) set ``module.forward`` on the instance: the policy wraps that one."""
    def make():
        model = _stack(lambda: nn.Sequential(nn.Linear(8, 8), nn.Tanh()))
        inner = model[1].forward
        model[1].forward = lambda x: inner(x) * 0.5
        return model
    x = torch.randn(4, 8)
    reference = [p.grad for p in _train(make(), x).parameters()]
    for policy in POLICIES:
        model = make()
        mine = model[1].forward
        auto.apply(model, policy)
        assert all(torch.equal(p.grad, r) for p, r in zip(_train(model, x).parameters(), reference)), policy
        auto.clear(model)
        assert model[1].forward is mine


def _train(model, x):
    model(x).pow(2).sum().backward()
    return model


def _saved_and_loaded(model):
    buffer = io.BytesIO()
    torch.save(model, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=False)


@pytest.mark.parametrize("copier", [copy.deepcopy, _saved_and_loaded], ids=["deepcopy", "torch.save"])
def test_a_copy_of_an_applied_model_recomputes_its_own_blocks(copier):
    """copy.deepcopy (an EMA model, a trainer's copy) used to keep forwards bound to the original's blocks, and
    torch.save could not pickle them."""
    model, x = _stack(lambda: nn.Sequential(nn.Linear(8, 8), nn.Tanh())), torch.randn(4, 8)
    reference = _grads(model, x)
    for policy in POLICIES:
        applied = copy.deepcopy(model)
        auto.apply(applied, policy)
        twin = copier(applied)
        twin(x).pow(2).sum().backward()
        assert all(p.grad is None for p in applied.parameters()), policy
        assert all(torch.equal(p.grad, g) for p, g in zip(twin.parameters(), reference)), policy


def test_a_block_writing_its_input_in_place_is_refused_by_recompute_and_planned_without_it():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.inp = nn.Linear(8, 8)
            self.layers = nn.ModuleList([nn.Sequential(nn.ReLU(inplace=True), nn.Linear(8, 8)) for _ in range(3)])

        def forward(self, x):
            h = self.inp(x)
            for layer in self.layers:
                h = layer(h)
            return h
    torch.manual_seed(0)
    model, x = Net(), torch.randn(4, 8)
    _same(model, x, policies=("offload",))
    for policy in ("full", "selective"):
        with pytest.raises(RecomputeError, match=r"^layers\.0: the region writes its input in place"):
            _grads(model, x, policy)
    result = auto.plan(model, (x,), budget="1GiB")
    assert set(result.policies) <= {"none", "offload"} and len(result.notes) == 2, result.notes
    assert auto.explain(model, (x,)).rows[0]["plain_bytes"] > 0


class Renormed(nn.Module):
    """Looks rows up in an nn.Embedding(max_norm=1), which renormalises its weight in place in forward."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(16, 8, max_norm=1.0)
        self.register_buffer("ids", torch.arange(4))

    def forward(self, x):
        return torch.tanh(x * self.emb(self.ids))


def test_a_weight_the_forward_renormalises_is_refused_by_recompute_and_explain_says_it_stays():
    model, x = _stack(Renormed), torch.randn(4, 8)
    _same(model, x, policies=("offload",))
    for policy in ("full", "selective"):
        with pytest.raises(RecomputeError, match=r"^2: emb\.weight was written in place during the forward"):
            _grads(model, x, policy)
    with pytest.warns(UserWarning, match="wrote 3 parameter"):
        auto.explain(_stack(Renormed), (x,))


def test_inference_forwards_between_training_steps():
    model, x = _stack(lambda: nn.Sequential(nn.Linear(8, 8), nn.Tanh())), torch.randn(4, 8)

    def step(m, x):
        with torch.inference_mode():
            m(x)
        return m(x).pow(2).sum()
    _same(model, x, step=step)


def test_explain_gives_back_what_a_hook_counts_on_a_module():
    model, x = _stack(lambda: nn.Sequential(nn.Linear(8, 8), nn.Tanh())), torch.randn(4, 8)

    def hook(module, args, out):
        module.calls += 1
    for block in model:
        block[0].calls = 0
        block[0].register_forward_hook(hook)
    with warnings.catch_warnings():
        warnings.simplefilter("error")                         # no parameter written: no warning
        auto.explain(model, (x,))
    assert [block[0].calls for block in model] == [0, 0, 0]
