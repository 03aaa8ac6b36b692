"""Block discovery with containers nested in the blocks (remat.auto.blocks.find_blocks) and out-of-memory errors
told apart (remat.device.is_out_of_memory, a recompute's allocation failure in remat.policies)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from remat import auto
from remat.auto.blocks import find_blocks
from remat.device import is_out_of_memory
from remat.errors import RecomputeError


class Mixture(nn.Module):
    def __init__(self, experts: int):
        super().__init__()
        self.experts = nn.ModuleList(nn.Linear(4, 4) for _ in range(experts))

    def forward(self, x):
        return x + sum(e(x) for e in self.experts)


class Stack(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList(Mixture(2) for _ in range(3))


class Wrapped(nn.Module):
    """One Stack in a one-element list: a container of one is nothing nested can be inside of two or more of."""

    def __init__(self):
        super().__init__()
        self.wrap = nn.ModuleList([Stack()])


def test_the_blocks_of_a_sequential_model_are_its_elements_not_the_experts_inside_them():
    # the model itself is the container of three layers (named ""); each layer's four experts are nested in an
    # element of it, so they are not the blocks though there are more of them
    assert find_blocks(nn.Sequential(*(Mixture(4) for _ in range(3)))).names == ("0", "1", "2")


def test_a_container_of_one_does_not_hide_the_layers_inside_its_element():
    assert find_blocks(Wrapped()).name == "wrap.0.layers"


def test_an_error_raised_from_an_allocation_failure_is_one_and_an_error_met_while_handling_one_is_not():
    def raised(cause: bool):
        try:
            try:
                raise RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 8 bytes")
            except RuntimeError as oom:
                if cause:
                    raise RecomputeError("r", "re-raised") from oom
                raise ValueError("a bad shape")             # its __context__ is the allocation failure, no cause
        except Exception as exc:
            return exc

    assert is_out_of_memory(raised(True)) and not is_out_of_memory(raised(False))


class Starved(nn.Module):
    """Its recompute (the second call) fails to allocate on the CPU, as the CPU allocator says it."""

    def __init__(self):
        super().__init__()
        self.linear, self.calls = nn.Linear(8, 8), 0

    def forward(self, x):
        self.calls += 1
        if self.calls == 2:
            raise RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 2147483648 bytes")
        return torch.relu(self.linear(x))


def test_a_recompute_that_the_cpu_allocator_refuses_ran_out_of_memory():
    model = nn.Sequential(Starved(), Starved())
    auto.apply(model, "full")
    with pytest.raises(RecomputeError, match="ran out of memory") as err:
        model(torch.randn(4, 8, requires_grad=True)).sum().backward()
    assert "differently" not in str(err.value) and is_out_of_memory(err.value)
