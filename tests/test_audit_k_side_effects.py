"""Side effects that are not values (remat.auto.preserve, remat.auto.planning's notes): a counter kept on a module
nested inside a block is named like one on the block itself; a hook on the block itself runs once per step (around
the checkpointed forward, not in it), so the plan notes only hooks on the modules inside a block."""

from __future__ import annotations

import torch
from torch import nn

from remat import auto
from stack import Stack


class Inner(nn.Module):
    """tanh(lin(x)), counting its calls (a Python side effect a recompute repeats)."""

    def __init__(self):
        super().__init__()
        self.lin, self.calls = nn.Linear(8, 8), 0

    def forward(self, x):
        self.calls += 1
        return torch.tanh(self.lin(x))


class Outer(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = Inner()

    def forward(self, x):
        return self.inner(x)


def test_a_counter_two_modules_below_the_block_is_named_for_each_recomputed_block():
    model = Stack(Outer, n=2)
    auto.apply(model, "full")
    report = auto.explain(model, (torch.randn(4, 8),))
    found = [t for t in report.traps if t.code == "side-effects"]
    assert len(found) == 1 and found[0].blocks == ("layers.0", "layers.1")
    assert [f"layers.{i}.inner.calls (changed again by the recompute)" in found[0].message for i in (0, 1)] == [
        True, True]
    assert [layer.inner.calls for layer in model.layers] == [0, 0]           # explain left the model as it was


def test_a_hook_on_the_block_itself_is_no_note_and_one_inside_it_is():
    model = Stack(Inner, n=2)
    model.layers[0].register_forward_hook(lambda m, args, out: None)        # around the block: runs once
    notes = auto.plan(model, (torch.randn(4, 8),), budget="1GiB").notes
    assert not [n for n in notes if n.startswith("forward hooks on")]
    model.layers[1].lin.register_forward_hook(lambda m, args, out: None)    # inside it: again in its recompute
    notes = auto.plan(model, (torch.randn(4, 8),), budget="1GiB").notes
    assert [n.split(" run again")[0] for n in notes if n.startswith("forward hooks on")] == [
        "forward hooks on layers.1.lin"]
