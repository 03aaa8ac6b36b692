"""What explain's side-effects trap and the plan's hooks note name (remat.auto.preserve, remat.auto.planning): forward
hooks and forward pre-hooks on modules inside a recomputed block, a plain string attribute the recompute changes, not a
block's own hooks (they run around its forward once); the note lists three hooked modules and counts the rest."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from remat import auto
from remat.policies import recomputing


class Block(nn.Module):
    """tanh(lin(x)); ``mode`` a plain string its forward sets: "recompute" while remat recomputes it, else
    "forward" (with ``marks``), so a step leaves "recompute" behind in a block that recomputes."""

    def __init__(self, marks: bool = False):
        super().__init__()
        self.lin, self.marks, self.mode = nn.Linear(8, 8), marks, "forward"

    def forward(self, x):
        if self.marks:
            self.mode = "recompute" if recomputing() else "forward"
        return torch.tanh(self.lin(x))


class Stack(nn.Module):
    def __init__(self, n: int = 3, marks: bool = False):
        super().__init__()
        torch.manual_seed(0)
        self.layers = nn.ModuleList(Block(marks) for _ in range(n))

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


def _effects(model, policy: str = "full") -> list[str]:
    auto.apply(model, policy)
    found = [t for t in auto.explain(model, (torch.randn(4, 8),)).traps if t.code == "side-effects"]
    return sorted(found[0].message.split(": ", 1)[1].split(" — ")[0].split(", ")) if found else []


def test_a_forward_pre_hook_inside_a_block_is_named():
    model = Stack()
    model.layers[1].lin.register_forward_pre_hook(lambda m, args: None)
    assert _effects(model) == ["layers.1.lin (forward hook)"]


def test_a_string_attribute_the_recompute_changes_is_named():
    assert _effects(Stack(marks=True)) == [f"layers.{i}.mode (changed again by the recompute)" for i in range(3)]


def test_a_blocks_own_hooks_are_not_named():
    # auto.apply wraps the block's forward: its own hooks run around the checkpointed call, once per step
    model, calls = Stack(), []
    for layer in model.layers:
        layer.register_forward_hook(lambda m, args, out: calls.append(1))
        layer.register_forward_pre_hook(lambda m, args: None)
    assert _effects(model) == []
    calls.clear()
    model(torch.randn(4, 8)).sum().backward()
    assert len(calls) == 3


@pytest.mark.parametrize("hooked, tail", [(3, ""), (4, " and 1 more")])
def test_the_plan_note_lists_three_hooked_modules_and_counts_the_rest(hooked, tail):
    model = Stack(n=4)
    for layer in model.layers[:hooked]:
        layer.lin.register_forward_hook(lambda m, args, out: None)
    notes = [n for n in auto.plan(model, (torch.randn(4, 8),), budget="1GiB").notes if n.startswith("forward hooks")]
    assert notes == [f"forward hooks on layers.0.lin, layers.1.lin, layers.2.lin{tail} run again when their block "
                     "recomputes (full, selective): skip side effects while remat.policies.recomputing() is True"]
