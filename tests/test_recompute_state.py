"""State a block reads that is not its parameters, buffers or owned generators: FP8 delayed scaling in plain
tensors (as TransformerEngine keeps ``fp8_meta``), a framework's context active in forward only (fp8_autocast),
random numbers from numpy, Python's ``random`` or a generator the block does not own, an attribute a hook sets
around the block. Under the default value check (remat.policies.values: a region's first forwards) each gives one
RecomputeError naming the block and what to do on the first step, or, where remat can make the recompute see
the forward's state (buffers, ``recompute_context``), gradients and the model's state bitwise equal to the
unmodified model's. The reference is always the unmodified model under plain autograd.
"""

from __future__ import annotations

import contextlib
import copy
import random

import numpy as np
import pytest
import torch
from torch import nn

from remat import auto
from remat.errors import RecomputeError, UsageError
from remat.measure.peak import PeakMemory
from remat.policies import ValueCheck, recompute_check, recompute_context, recomputing, set_recompute_check
from remat.policies.values import EVERY, FIRST, Tally, check_for
from stack import Stack

NAMED = r"^layers\.\d: recomputing aten\.\w+ \(op \d+ of its forward\) gave other values .*register_buffer"


def _step(model, x, policy=None, around=contextlib.nullcontext, forward=contextlib.nullcontext):
    """(parameter gradients, the model) after one step of a copy of ``model`` under ``policy`` (None: unmodified):
    the forward under ``forward()``, forward and backward under ``around()``."""
    m = copy.deepcopy(model)
    if policy is not None:
        auto.apply(m, policy)
    with around():
        with forward():
            y = m(x)
        y.pow(2).sum().backward()
    return [p.grad for p in m.parameters()], m


def _bitwise(a, b) -> bool:
    return len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b))


# --- FP8 delayed scaling: the scale and amax history updated once per forward -------------------------------------

class DelayedScaling(nn.Module):
    """lin(q(x)): x scaled by ``scale``, rounded to eighths and scaled back (a quantiser whose grid follows the
    scale); after the forward the amax history rolls, takes amax(x), and the scale becomes 1 / its maximum, so
    the next forward quantises on another grid. ``store``: "dict" keeps history and scale as plain tensors in a
    dict attribute (TransformerEngine's fp8_meta), "buffers" registers them."""

    def __init__(self, store: str):
        super().__init__()
        self.lin, history, scale = nn.Linear(8, 8), torch.ones(4), torch.ones(())
        if store == "buffers":
            self.register_buffer("amax_history", history)
            self.register_buffer("scale", scale)
            self.meta = None
        else:
            self.meta = {"amax_history": history, "scale": scale}

    def state(self) -> dict:
        return self.meta if self.meta is not None else {"amax_history": self.amax_history, "scale": self.scale}

    def forward(self, x):
        state = self.state()
        q = x + (torch.round(x * state["scale"] * 8) / 8 / state["scale"] - x).detach()   # straight-through
        with torch.no_grad():
            state["amax_history"].copy_(torch.roll(state["amax_history"], 1))
            state["amax_history"][0] = x.abs().max()
            state["scale"].copy_(1 / state["amax_history"].max())
        return torch.tanh(self.lin(q))


@pytest.mark.parametrize("policy", ["full", "selective"])
def test_fp8_state_in_plain_tensors_is_refused_on_the_first_step(policy):
    """The recompute would quantise on the grid the forward's update made: other values, refused naming the
    block; with the check off the gradients do differ (the trap is real)."""
    model, x = Stack(lambda: DelayedScaling("dict")), torch.randn(4, 8) * 3
    reference, _ = _step(model, x)
    with recompute_check("off"):
        assert not _bitwise(_step(model, x, policy)[0], reference)
    with pytest.raises(RecomputeError, match=NAMED):
        _step(model, x, policy)


@pytest.mark.parametrize("policy", ["full", "selective", "offload"])
def test_fp8_state_in_buffers_recomputes_bitwise_and_updates_once(policy):
    """Registered as buffers, the state is put back for the recompute and after it: gradients bitwise, and the
    history and scale after one step are the unmodified model's (one update, not two)."""
    model, x = Stack(lambda: DelayedScaling("buffers")), torch.randn(4, 8) * 3
    reference, plain = _step(model, x)
    grads, m = _step(model, x, policy)
    assert _bitwise(grads, reference)
    assert _bitwise(list(m.buffers()), list(plain.buffers()))
    assert not torch.equal(plain.layers[0].amax_history, torch.ones(4))      # it was updated


# --- a framework's context active in forward only ----------------------------------------------------------------

LOW_PRECISION = {"on": False}


@contextlib.contextmanager
def fp8_autocast(enabled: bool = True):
    """A framework's global switch, as TransformerEngine's fp8_autocast: forward code reads it."""
    before, LOW_PRECISION["on"] = LOW_PRECISION["on"], enabled
    try:
        yield
    finally:
        LOW_PRECISION["on"] = before


class Switched(nn.Module):
    """tanh(lin(x)), rounded through bfloat16 while the switch is on (the gradient passes the casts)."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x):
        y = self.lin(x)
        if LOW_PRECISION["on"]:
            y = y.to(torch.bfloat16).to(torch.float32)
        return torch.tanh(y)


@pytest.mark.parametrize("policy", ["full", "selective"])
def test_a_context_of_the_forward_is_refused_or_re_entered_with_recompute_context(policy):
    """Forward under fp8_autocast, backward outside it (Megatron-LM #7538): refused on the first step, naming the
    block; ``recompute_context`` capturing the switch in forward re-enters it in recompute: bitwise."""
    model, x = Stack(Switched), torch.randn(4, 8)
    reference, _ = _step(model, x, forward=fp8_autocast)
    with pytest.raises(RecomputeError, match=NAMED):
        _step(model, x, policy, forward=fp8_autocast)
    replay = lambda: recompute_context(lambda: fp8_autocast(LOW_PRECISION["on"]))   # noqa: E731
    grads, _ = _step(model, x, policy, around=replay, forward=fp8_autocast)
    assert _bitwise(grads, reference)


# --- random numbers the block does not own --------------------------------------------------------------------

SHARED = torch.Generator().manual_seed(0)
NOISE = {                                    # numpy's and Python's global streams: replayed; the generator: not
    "numpy": lambda shape: torch.from_numpy(np.random.standard_normal(shape).astype(np.float32)),
    "random": lambda shape: torch.tensor([random.gauss(0.0, 1.0) for _ in range(shape[-1])]),
    "module-level generator": lambda shape: torch.randn(shape, generator=SHARED),
}


class Noisy(nn.Module):
    def __init__(self, source: str):
        super().__init__()
        self.lin, self.source = nn.Linear(8, 8), source

    def forward(self, x):
        return torch.tanh(self.lin(x) + 0.1 * NOISE[self.source](x.shape))


@pytest.mark.parametrize("source", ["numpy", "random"])
@pytest.mark.parametrize("policy", ["full", "selective"])
def test_numpy_and_python_random_are_replayed_and_the_program_draws_on_as_without_recompute(source, policy):
    """The recompute draws what the forward drew (gradients bitwise), and the program's next draw is the one the
    unmodified model's program makes (the recompute took nothing from the stream)."""
    model, x = Stack(lambda: Noisy(source)), torch.randn(4, 8)
    np.random.seed(0), random.seed(0)
    reference, _ = _step(model, x)
    after = (np.random.random(), random.random())
    np.random.seed(0), random.seed(0)
    grads, _ = _step(model, x, policy)
    assert _bitwise(grads, reference) and (np.random.random(), random.random()) == after


@pytest.mark.parametrize("policy", ["full", "selective"])
def test_a_generator_the_block_does_not_own_is_refused(policy):
    model, x = Stack(lambda: Noisy("module-level generator")), torch.randn(4, 8)
    with pytest.raises(RecomputeError, match=NAMED):
        _step(model, x, policy)


class Rolled(nn.Module):
    """tanh(lin(x)) rolled by ``shift`` tokens along the first dimension; a hook sets the shift to 1 around the
    block's own call, so the recompute rolls by 0: the same values in other places, the same sum and absolute
    sum."""

    def __init__(self):
        super().__init__()
        self.lin, self.shift = nn.Linear(8, 8), 0
        self.register_forward_pre_hook(lambda m, args: setattr(m, "shift", 1))
        self.register_forward_hook(lambda m, args, out: setattr(m, "shift", 0))

    def forward(self, x):
        return torch.roll(torch.tanh(self.lin(x)), self.shift, 0) * x


@pytest.mark.parametrize("policy", ["full", "selective"])
def test_values_moved_to_other_places_are_refused(policy):
    model, x = Stack(Rolled), torch.randn(6, 8)
    with recompute_check("off"):
        assert not _bitwise(_step(model, x, policy)[0], _step(model, x)[0])
    with pytest.raises(RecomputeError, match=r"^layers\.\d: recomputing aten\.roll"):
        _step(model, x, policy)


# --- an attribute a hook sets around the block ------------------------------------------------------------------

class Adapted(nn.Module):
    """lin(x) · scaling, ``scaling`` set by a pre-hook and reset by a hook around the block (as an adapter
    library switches its adapters on for one call)."""

    def __init__(self):
        super().__init__()
        self.lin, self.scaling = nn.Linear(8, 8), 1.0
        self.register_forward_pre_hook(lambda m, args: setattr(m, "scaling", 0.5))
        self.register_forward_hook(lambda m, args, out: setattr(m, "scaling", 1.0))

    def forward(self, x):
        return torch.tanh(self.lin(x) * self.scaling)


@pytest.mark.parametrize("policy", ["full", "selective"])
def test_state_a_hook_sets_around_the_block_is_refused(policy):
    model, x = Stack(Adapted), torch.randn(4, 8)
    with recompute_check("off"):
        assert not _bitwise(_step(model, x, policy)[0], _step(model, x)[0])
    with pytest.raises(RecomputeError, match=NAMED):
        _step(model, x, policy)


# --- the sampling rule and its switch -----------------------------------------------------------------------------

def test_a_region_is_checked_until_two_recomputes_were_compared_and_then_every_hundredth_forward():
    """The stated rule: every forward while fewer than FIRST recomputes were compared, then forwards 1, 101, 201
    … (counted from 1); "every" all; "off" none; an active ValueCheck wins over the mode; a forward without grad
    (never recomputed) none."""
    assert (FIRST, EVERY) == (2, 100)
    done = [n for n in range(1, 302) if check_for(Tally(forwards=n, checked=2)) is not None]
    assert done == [1, 101, 201, 301]
    assert all(check_for(Tally(forwards=n, checked=1)) is not None for n in (2, 50, 99))   # one compared so far
    assert check_for(None) is None
    with recompute_check("every"):
        assert all(check_for(Tally(forwards=n, checked=5)) is not None for n in (2, 3, 99))
    with recompute_check("off"):
        assert check_for(Tally(forwards=1)) is None
        with ValueCheck(strict=False) as active:
            assert check_for(Tally(forwards=5, checked=9)) is active


def test_forwards_no_backward_follows_do_not_use_up_the_check():
    """Five probe forwards with grad on and no backward (a validation loss, a warm-up), then a training step: the
    block reading a generator it does not own is refused on that first real step."""
    model, x = Stack(lambda: Noisy("module-level generator")), torch.randn(4, 8)
    auto.apply(model, "full")
    for _ in range(5):
        model(x)
    with pytest.raises(RecomputeError, match=NAMED):
        model(x).sum().backward()


def test_a_block_that_differs_only_after_its_first_forwards_is_missed_until_the_next_sample():
    """What sampling gives up: a block whose recompute starts to differ on its third step passes that step
    silently (the check's stated limit); "every" catches it there."""
    class Late(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin, self.calls = nn.Linear(8, 8), 0

        def forward(self, x):
            self.calls += 1
            return torch.tanh(self.lin(x) * (1.0 if self.calls < 5 else float(self.calls)))

    x = torch.randn(4, 8)
    for mode, raises in (("sample", False), ("every", True)):
        m = Stack(Late, n=1)
        auto.apply(m, "full")
        with recompute_check(mode):
            for _ in range(2):
                m(x).sum().backward()      # calls 1-4: forward and recompute alike
            with pytest.raises(RecomputeError) if raises else contextlib.nullcontext():
                m(x).sum().backward()      # forward at call 5, recompute at 6: other values


def test_the_mode_is_validated_and_restored():
    with pytest.raises(UsageError, match="mode"):
        set_recompute_check("sometimes")
    with recompute_check("off"):
        pass
    assert check_for(Tally()) is not None


def test_measurements_do_not_count_the_checks_bytes():
    """The check keeps checksums (two float64 per op) while a region's forward is recorded: remat's peak
    measurement switches it off, so a checked region's first step measures as an unchecked one's."""
    model, x = Stack(Switched), torch.randn(64, 8)
    peaks = []
    for mode in ("sample", "off"):
        m = copy.deepcopy(model)
        auto.apply(m, "full")
        with recompute_check(mode), PeakMemory("cpu", m, x) as mem:
            m(x).sum().backward()
        peaks.append(mem.peak_bytes)
    assert peaks[0] == peaks[1]


# --- side effects that are not values: named, not refused ---------------------------------------------------------

class Counted(nn.Module):
    """Counts its calls (a Python side effect); ``guarded`` skips the count while remat recomputes it."""

    def __init__(self, guarded: bool = False):
        super().__init__()
        self.lin, self.calls, self.guarded = nn.Linear(8, 8), 0, guarded

    def forward(self, x):
        if not (self.guarded and recomputing()):
            self.calls += 1
        return torch.tanh(self.lin(x))


@pytest.mark.parametrize("policy", ["none", "full", "selective"])
@pytest.mark.parametrize("guarded", [False, True])
def test_a_counter_and_a_hook_that_run_again_in_recompute_are_named(policy, guarded):
    """A counter the recompute advances again (unguarded) and a forward hook on a module inside a block are
    named by explain's side-effects trap for the blocks that recompute; none recomputes nothing, and a counter
    guarded with recomputing() advances once per step (explain leaves the model as it found it)."""
    model = Stack(lambda: Counted(guarded))
    model.layers[1].lin.register_forward_hook(lambda m, args, out: None)
    auto.apply(model, policy)
    report = auto.explain(model, (torch.randn(4, 8),))
    found = [t for t in report.traps if t.code == "side-effects"]
    if policy == "none":
        assert not found
        return
    counters = [] if guarded else [f"layers.{i}.calls (changed again by the recompute)" for i in range(3)]
    assert sorted(found[0].message.split(": ", 1)[1].split(" — ")[0].split(", ")) == sorted(
        counters + ["layers.1.lin (forward hook)"])
    assert "recomputing()" in found[0].fix
    m = copy.deepcopy(model)
    m(torch.randn(4, 8)).sum().backward()
    assert [layer.calls for layer in m.layers] == [1 if guarded else 2] * 3


def test_the_plan_notes_a_hook_inside_a_block():
    model = Stack(Counted)
    model.layers[2].lin.register_forward_pre_hook(lambda m, args: None)
    notes = auto.plan(model, (torch.randn(4, 8),), budget="1GiB").notes
    assert [n for n in notes if n.startswith("forward hooks on layers.2.lin run again")]


# --- errors that name the block -------------------------------------------------------------------------------------

def test_a_captured_context_that_cannot_be_entered_twice_is_named_on_the_second_recompute():
    """backward(retain_graph=True) twice recomputes each region twice; a @contextmanager context enters once."""
    model, x = Stack(Switched), torch.randn(4, 8)
    auto.apply(model, "full")
    with recompute_context(lambda: fp8_autocast(LOW_PRECISION["on"])):
        with fp8_autocast():
            loss = model(x).pow(2).sum()
        loss.backward(retain_graph=True)
        with pytest.raises(RecomputeError, match=r"^layers\.2: the context recompute_context captured .*entered "
                                                 r"again \(a class with __enter__ and __exit__\)"):
            loss.backward()


class Branching(nn.Module):
    """tanh applied or not by an attribute a hook clears around the block: the recompute runs more ops (and saves
    more tensors) than the forward."""

    def __init__(self):
        super().__init__()
        self.lin, self.squash = nn.Linear(8, 8), True
        self.register_forward_pre_hook(lambda m, args: setattr(m, "squash", False))
        self.register_forward_hook(lambda m, args, out: setattr(m, "squash", True))

    def forward(self, x):
        y = self.lin(x)
        return x + (torch.tanh(y) if self.squash else y)


@pytest.mark.parametrize("policy", ["full", "selective"])
def test_torch_s_checkpoint_error_in_a_recompute_names_the_block(policy):
    """Unchecked, the recompute saves more tensors than the forward did: torch's CheckpointError, which names no
    block, comes as one RecomputeError naming it, torch's error its cause."""
    model, x = Stack(Branching), torch.randn(4, 8)
    auto.apply(model, policy)
    with recompute_check("off"), pytest.raises(RecomputeError, match=r"^layers\.2: the recompute in backward "
                                                                     r"failed .*context of the forward") as caught:
        model(x).pow(2).sum().backward()
    assert caught.value.__cause__ is not None


class OwnState(nn.Module):
    """Draws noise from a generator it owns and keeps an FP8-style amax history in a dict of plain tensors, each
    written in place by its forward; one large plain tensor too (over the snapshot size: not copied)."""

    def __init__(self, large: bool = False):
        super().__init__()
        self.lin, self.gen = nn.Linear(8, 8), torch.Generator().manual_seed(7)
        self.fp8 = {"amax": torch.zeros(4), "step": torch.zeros((), dtype=torch.int64)}
        self.big = torch.zeros(70_000) if large else None           # 280 KB > 256 KiB

    def forward(self, x):
        with torch.no_grad():
            self.fp8["amax"][:] = torch.roll(self.fp8["amax"], 1)
            self.fp8["amax"][0] = x.abs().max()
            self.fp8["step"] += 1
            if self.big is not None:
                self.big += 1
        return torch.tanh(self.lin(x) + 0.01 * torch.randn(x.shape, generator=self.gen))


def test_explain_leaves_owned_generators_and_plain_tensor_state_as_it_found_them():
    model = Stack(OwnState)
    auto.apply(model, "none")
    before = [(m.gen.get_state(), {k: v.clone() for k, v in m.fp8.items()}) for m in model.layers]
    auto.explain(model, (torch.randn(4, 8),))
    for m, (state, fp8) in zip(model.layers, before):
        assert torch.equal(m.gen.get_state(), state)
        assert all(torch.equal(m.fp8[k], v) for k, v in fp8.items())
    large = Stack(lambda: OwnState(large=True), 1)
    auto.apply(large, "none")
    with pytest.warns(UserWarning, match=r"large plain tensor.*layers\.0\.big"):
        auto.explain(large, (torch.randn(4, 8),))
