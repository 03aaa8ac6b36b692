"""Unclear crashes made clear: each case either works — gradients bitwise equal to the unmodified model's — or
gives one error whose message names the block (or module) and the cause and says what to do. Expected behaviour
comes from that definition: the reference gradients are the unmodified model's under plain autograd.
"""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from remat import auto
from remat.errors import RecomputeError, UsageError
from remat.policies import apply_plan, recomputing


class Stack(nn.Module):
    """The blocks in an nn.ModuleList ``layers`` (``run_layers``: remat.policies.apply_plan's multi-layer units
    replace it), after an optional stem."""

    def __init__(self, blocks, stem: nn.Module | None = None):
        super().__init__()
        self.stem = stem
        self.layers = nn.ModuleList(blocks)

    def run_layers(self, x):
        for layer in self.layers:
            x = layer(x)
        return x

    def forward(self, x):
        return self.run_layers(x if self.stem is None else self.stem(x))


def _tanh_linear() -> nn.Module:
    return nn.Sequential(nn.Linear(8, 8), nn.Tanh())


def _stack(make=_tanh_linear, n: int = 3, stem=None) -> Stack:
    torch.manual_seed(0)
    return Stack([make() for _ in range(n)], stem)


def _bitwise(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


# --- a. offload under torch.func -------------------------------------------------------------------------------

def _func_grad(model, x):
    params = {k: p.detach() for k, p in model.named_parameters()}
    return torch.func.grad(lambda p: torch.func.functional_call(model, p, (x,)).pow(2).sum())(params)


def _per_sample_grads(model, x):
    params = {k: p.detach() for k, p in model.named_parameters()}
    loss = lambda p, xi: torch.func.functional_call(model, p, (xi,)).pow(2).sum()
    return torch.func.vmap(torch.func.grad(loss), in_dims=(None, 0))(params, x.unsqueeze(1))


@pytest.mark.parametrize("transform", [_func_grad, _per_sample_grads])
def test_offload_inside_torch_func_grad_names_the_block_and_what_to_do(transform):
    model, x = _stack(), torch.randn(4, 8)
    auto.apply(model, "offload")
    with pytest.raises(RecomputeError, match=r"^layers\.0: offload runs on saved-tensor hooks.*torch\.func\.grad"
                                             r".*policy none.*loss\.backward\(\)") as caught:
        transform(model, x)
    assert caught.value.block == "layers.0"


@pytest.mark.parametrize("policy", ["full", "selective"])
def test_checkpoint_inside_torch_func_grad_names_the_block_too(policy):
    model, x = _stack(), torch.randn(4, 8)
    auto.apply(model, policy)
    with pytest.raises(RecomputeError, match=r"^layers\.0: recompute runs on saved-tensor hooks.*policy none"):
        _func_grad(model, x)


def _ensemble_grads(model, x, policy=None):
    """Two copies of the weights run under torch.func.vmap (model ensembling), backward by plain autograd."""
    m = copy.deepcopy(model)
    if policy is not None:
        auto.apply(m, policy)
    stacked = {k: torch.stack([p.detach(), 2 * p.detach()]).requires_grad_() for k, p in m.named_parameters()}
    out = torch.func.vmap(lambda p: torch.func.functional_call(m, p, (x,)))(stacked)
    return dict(zip(stacked, torch.autograd.grad(out.pow(2).sum(), list(stacked.values()))))


def _vmapped_grads(model, x, policy=None):
    """The forward under torch.func.vmap over the batch, backward by plain autograd."""
    m = copy.deepcopy(model)
    if policy is not None:
        auto.apply(m, policy)
    torch.func.vmap(m)(x).pow(2).sum().backward()
    return {k: p.grad for k, p in m.named_parameters()}


def _jvp_grads(model, x, policy=None):
    """A forward under torch.func.jvp (its zero tangents of the weights are saved for backward), the output and
    its tangent differentiated by plain autograd."""
    m = copy.deepcopy(model)
    if policy is not None:
        auto.apply(m, policy)
    params = {k: p.detach().requires_grad_() for k, p in m.named_parameters()}
    out, tangent = torch.func.jvp(lambda xi: torch.func.functional_call(m, params, (xi,)), (x,), (torch.ones_like(x),))
    return dict(zip(params, torch.autograd.grad(out.pow(2).sum() + tangent.sum(), list(params.values()))))


@pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated")     # torch.func.jvp's own
@pytest.mark.parametrize("run", [_ensemble_grads, _vmapped_grads, _jvp_grads])
def test_offload_under_vmap_or_jvp_with_backward_outside_equals_the_plain_model(run):
    model, x = _stack(), torch.randn(4, 8)
    assert _bitwise(run(model, x, "offload"), run(model, x))


# --- b. a sparse embedding -------------------------------------------------------------------------------------

def test_plan_refuses_a_sparse_embedding_naming_it():
    model = _stack(stem=nn.Embedding(16, 8, sparse=True))
    ids = torch.randint(0, 16, (2, 5))
    with pytest.raises(UsageError, match=r"^model: stem is nn\.Embedding\(sparse=True\): .*sparse.*sparse=False"):
        auto.plan(model, (ids,), budget="1GiB")


def test_a_sparse_embedding_trains_under_an_applied_plan_as_the_plain_model():
    model, ids = _stack(stem=nn.Embedding(16, 8, sparse=True)), torch.randint(0, 16, (2, 5))

    def grads(policy):
        m = copy.deepcopy(model)
        if policy is not None:
            auto.apply(m, policy)
        m(ids).pow(2).sum().backward()
        return {k: p.grad.to_dense() if p.grad.is_sparse else p.grad for k, p in m.named_parameters()}
    reference = grads(None)
    for policy in ("full", "selective", "offload"):
        assert _bitwise(grads(policy), reference), policy


# --- c. a non-RuntimeError raised in the recompute ---------------------------------------------------------------

class Picky(nn.Module):
    """User code that behaves differently in the recompute: it indexes a table with an entry only the forward
    has."""

    def __init__(self):
        super().__init__()
        self.lin, self.scales = nn.Linear(8, 8), [1.0]

    def forward(self, x):
        scale = self.scales[1 if recomputing() else 0]
        return torch.tanh(self.lin(x)) * scale


@pytest.mark.parametrize("policy", ["full", "selective"])
def test_an_index_error_in_the_recompute_names_the_block(policy):
    model, x = _stack(Picky, n=2), torch.randn(4, 8, requires_grad=True)
    auto.apply(model, policy)
    with pytest.raises(RecomputeError, match=r"^layers\.1: the recompute in backward failed \(IndexError: list "
                                             r"index out of range\).*policy none or offload") as caught:
        model(x).sum().backward()
    assert isinstance(caught.value.__cause__, IndexError)


def test_early_stop_still_stops_the_recompute_quietly():
    model, x = _stack(n=2), torch.randn(4, 8, requires_grad=True)
    plain = copy.deepcopy(model)
    plain(x).pow(2).sum().backward()
    apply_plan(model, "full", early_stop=True)
    model(x).pow(2).sum().backward()
    assert all(torch.equal(a.grad, b.grad) for a, b in zip(model.parameters(), plain.parameters()))


# --- d. every choice refused -------------------------------------------------------------------------------------

class Counting(nn.Module):
    """Counts its calls in a non-persistent buffer (not copied when a region starts: no policy recomputes it)."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)
        self.register_buffer("calls", torch.zeros(1), persistent=False)

    def forward(self, x):
        self.calls.add_(1)
        return torch.tanh(self.lin(x))


@pytest.mark.parametrize("choices", [("full",), ("full", "selective")])
def test_a_block_with_no_choice_left_says_why_each_was_dropped(choices):
    model, x = _stack(Counting), torch.randn(2, 8, requires_grad=True)
    with pytest.raises(UsageError) as caught:
        auto.plan(model, (x,), budget="1GiB", choices=choices)
    message = str(caught.value)
    assert message.startswith("choices: layers.0: ") and caught.value.field == "choices"
    assert f"{' and '.join(choices)}: the forward wrote buffer calls in place" in message
    assert "non-persistent" in message and "none or offload to choices" in message


# --- e. a model and its inputs all on the meta device -----------------------------------------------------------

def test_explain_and_plan_refuse_meta_inputs_for_a_meta_model():
    with torch.device("meta"):
        model, x = _stack(), torch.randn(2, 8)
    for call in (lambda: auto.explain(model, (x,)), lambda: auto.plan(model, (x,), budget="1GiB")):
        with pytest.raises(UsageError, match=r"^example_args: Stack \(layers\.0\.0\.weight, …\) and the example "
                                             r"inputs are all on the meta device.*device the model will train on"):
            call()


# --- f. one layer object at two depths under apply_plan ------------------------------------------------------------

def _shared_stack() -> Stack:
    torch.manual_seed(0)
    a, b = _tanh_linear(), _tanh_linear()
    return Stack([a, b, a])


def test_apply_plan_refuses_two_policies_for_one_layer_object():
    for plan, words in (("full,none,none", "full and none"), ("offload,none,full", "offload and full"),
                        ("uniform:2", "full \\(in the unit layers\\.0–1\\) and full")):
        model = _shared_stack()
        with pytest.raises(UsageError, match=rf"^policy: layers\.0 and layers\.2 are one module object \(shared "
                                             rf"weights\) given {words}: a shared layer takes one policy"):
            apply_plan(model, plan)
        assert "forward" not in model.layers[0].__dict__      # nothing applied


def test_apply_plan_runs_a_shared_layer_under_its_one_policy_as_the_plain_model():
    x = torch.randn(4, 8, requires_grad=True)

    def grads(plan):
        model = _shared_stack()
        if plan is not None:
            apply_plan(model, plan)
        model(x).pow(2).sum().backward()
        return {k: p.grad for k, p in model.named_parameters()}
    reference = grads(None)
    for plan in ("full", "full,none,full", "offload,full,offload", "segments:2", "drop-cheap"):
        assert _bitwise(grads(plan), reference), plan


def test_a_layer_shared_by_the_end_of_a_unit_and_the_layer_after_it_is_refused():
    torch.manual_seed(0)
    a, b = _tanh_linear(), _tanh_linear()
    model = Stack([a, b, b])              # uniform:2 on three layers: the unit layers.0–1, then layers.2 under full
    with pytest.raises(UsageError, match=r"^policy: layers\.1 and layers\.2 are one module object \(shared weights\) "
                                         r"given full \(in the unit layers\.0–1\) and full"):
        apply_plan(model, "uniform:2")


# --- e, b, d: the messages' details ---------------------------------------------------------------------------------

def test_a_meta_model_is_named_by_its_first_meta_tensor_and_an_ellipsis_when_there_are_more():
    for bias, shown in ((True, r"layers\.0\.weight, …"), (False, r"layers\.0\.weight")):
        with torch.device("meta"):
            model, x = Stack([nn.Linear(8, 8, bias=bias)]), torch.randn(2, 8)
        with pytest.raises(UsageError, match=rf"^example_args: Stack \({shown}\) and the example inputs"):
            auto.explain(model, (x,))


def test_a_frozen_sparse_embedding_has_no_gradient_to_count_and_is_planned():
    model, ids = _stack(stem=nn.Embedding(16, 8, sparse=True)), torch.randint(0, 16, (2, 5))
    model.stem.weight.requires_grad_(False)
    assert auto.plan(model, (ids,), budget="1GiB").block_names == ("layers.0", "layers.1", "layers.2")


def test_a_failed_recompute_as_the_reason_no_choice_is_left_says_what_to_do_once():
    model, x = _stack(Picky, n=2), torch.randn(4, 8, requires_grad=True)
    with pytest.raises(UsageError) as caught:
        auto.plan(model, (x,), budget="1GiB", choices=("full",))
    message = str(caught.value)
    assert message.startswith("choices: layers.0: every policy of choices was dropped for this block — full: the "
                              "recompute in backward failed (IndexError: list index out of range)")
    assert message.endswith("a context of the forward that backward lacks (fp8_autocast: remat.policies."
                            "recompute_context re-enters it). Add none or offload to choices (neither recomputes "
                            "the block)") and "Give it policy" not in message
