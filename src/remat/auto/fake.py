"""A model's fake twin for measuring: every parameter and buffer a FakeTensor of the same shape, dtype and
device (torch's FakeCopyMode), meta parameters made fake on the inputs' device — no real memory.

    mode, fake = fake_model(model, device)     # the caller's model is untouched
    with mode, values_needed(): ...            # an op whose output depends on values: one UsageError("model")
    with user_code("loss_fn", "loss_fn"): ...  # a torch error in the user's code: one UsageError("loss_fn")
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Mapping
from contextlib import contextmanager

import torch
from torch import nn
from torch.utils._pytree import tree_flatten, tree_map
from torch._subclasses.fake_tensor import (DataDependentOutputException, DynamicOutputShapeException, FakeCopyMode,
                                           FakeTensor, FakeTensorMode)

from remat.auto.hf import hf_checkpointing, set_hf_checkpointing
from remat.errors import InfeasibleError, RecomputeError, UsageError


def fake_model(model: nn.Module, device: str | torch.device = "cpu") -> tuple:
    """(mode, model') with model' living in FakeTensorMode ``mode``: ``model`` itself when its parameters are
    fake already, else a fake copy (torch's FakeCopyMode: deepcopy with every tensor turned into a fake one of
    the same shape, dtype and device — no real memory; the caller's model is untouched). Parameters and buffers
    on the meta device (a model built under ``torch.device("meta")`` or accelerate's ``init_empty_weights``)
    become fake tensors on ``device``, where the inputs are. Measuring the real model under FakeTensorMode
    instead would count every parameter twice (its fake conversion is a new storage to the memory tracker)."""
    for p in model.parameters():
        if isinstance(p, FakeTensor):
            return p.fake_mode, model
    _check_off_meta(model, torch.device(device))
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    memo = {id(g): _clone_generator(g) for m in model.modules() for g in vars(m).values()
            if isinstance(g, torch.Generator)}      # FakeCopyMode cannot copy one; the caller's must not advance
    with FakeCopyMode(mode):
        copied = copy.deepcopy(model, memo)
    _off_meta(copied, mode, torch.device(device))
    if hf_checkpointing(copied):
        set_hf_checkpointing(copied, False)
    return mode, copied


def _check_off_meta(model: nn.Module, device: torch.device) -> None:
    """UsageError("example_args") when ``model`` has meta tensors and ``device``, where the inputs are, is the meta
    device too: nothing says where the step would run (its kernels, what they save), and a fake copy on the meta
    device is the meta model again."""
    meta = [n for n, t in [*model.named_parameters(), *model.named_buffers()] if t.device.type == "meta"]
    if meta and device.type == "meta":
        shown = meta[0] + (", …" if len(meta) > 1 else "")
        raise UsageError("example_args", f"{type(model).__name__} ({shown}) and the example inputs are all on the "
                                         "meta device, which has no values and is no device a step runs on: "
                                         "pass the example inputs on the device the model will train on (CPU or "
                                         "CUDA tensors, fake ones under FakeTensorMode allocate nothing); the meta "
                                         "parameters become fake tensors there")


def _clone_generator(g: torch.Generator) -> torch.Generator:
    clone = torch.Generator(device=g.device)
    clone.set_state(g.get_state())
    return clone


def _off_meta(model: nn.Module, mode: FakeTensorMode, device: torch.device) -> None:
    """Every meta parameter and buffer of ``model`` replaced by a fake tensor on ``device`` (tied ones stay
    tied)."""
    made: dict[int, torch.Tensor] = {}

    def fake(t: torch.Tensor) -> torch.Tensor:
        if id(t) not in made:
            with mode:
                new = torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device=device)
            made[id(t)] = nn.Parameter(new, t.requires_grad) if isinstance(t, nn.Parameter) else new
        return made[id(t)]
    for module in model.modules():
        for table in (module._parameters, module._buffers):
            for name, t in table.items():
                if t is not None and t.device.type == "meta":
                    table[name] = fake(t)


class ValuesNeeded(UsageError):
    """An op needs tensor values that a fake tensor lacks (``values_needed``); ``op`` names it."""

    def __init__(self, op, inputs_real: bool = False):
        self.op = op
        way = ("the model's parameters have none either (meta device or fake), so there is no real copy to measure "
               "on: build it with real parameters (a small instance: remat then measures on the inputs given)"
               if inputs_real else "pass real example inputs (a small batch: remat then measures on them)")
        super().__init__("model", f"{op} needs tensor values (its output shape or value depends on them) and remat "
                                  f"measures the step under FakeTensorMode, where there are none: {way}, or give it "
                                  "static shapes (torch.where or a mask multiply instead of indexing)")


@contextmanager
def values_needed():
    """An op whose output shape or value depends on tensor values (``nonzero``, boolean-mask indexing,
    ``unique``, ``.item()`` …) raises torch's DynamicOutputShapeException / DataDependentOutputException under
    FakeTensorMode, where no values exist: turned into one ValuesNeeded (a UsageError("model")) naming the op."""
    try:
        yield
    except (DynamicOutputShapeException, DataDependentOutputException) as exc:
        raise ValuesNeeded(getattr(exc, "func", None) or str(exc)) from None


@contextmanager
def twin(model: nn.Module, args, kwargs, real: bool = False):
    """(model', args', kwargs') to measure on, the caller's model untouched: ``fake_model``'s fake copy with the
    inputs made fake, under its mode; or with ``real``, a real copy on the real inputs (for a model whose ops need
    values: what it measures is what this batch's values make it do). HuggingFace's own checkpointing off."""
    if not real:
        mode, copied = fake_model(model, input_device(args, kwargs))
        with mode:
            yield copied, *tree_map(lambda x: mode.from_tensor(x) if isinstance(x, torch.Tensor) and not isinstance(
                x, FakeTensor) else x, (args, kwargs))
        return
    copied = copy.deepcopy(model)
    if hf_checkpointing(copied):
        set_hf_checkpointing(copied, False)
    yield copied, args, kwargs


def input_device(args, kwargs) -> torch.device:
    """Where the example inputs are (cpu when none is a tensor)."""
    return next((t.device for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)),
                torch.device("cpu"))


def is_real(x) -> bool:
    """A tensor with values: not fake, not on the meta device."""
    return isinstance(x, torch.Tensor) and not isinstance(x, FakeTensor) and x.device.type != "meta"


_PASSED = (UsageError, RecomputeError, InfeasibleError, DynamicOutputShapeException, DataDependentOutputException)
"""Errors ``user_code`` lets through: remat's own, and what ``values_needed`` names."""


@contextmanager
def user_code(field: str, what: str):
    """Run the user's code (the model's forward on the example inputs, the loss): an error it raises (a shape or
    dtype the model does not take, a loss that fails on the output) becomes one UsageError naming ``field``,
    with the error's type and first line (the original stays the cause); ``_PASSED`` pass through. FakeTensorMode's
    own log of an op that failed (a traceback on stderr ahead of the one line) is silenced meanwhile."""
    log = logging.getLogger("torch._subclasses.fake_tensor")
    disabled, log.disabled = log.disabled, True
    try:
        yield
    except _PASSED:
        raise
    except Exception as exc:
        first = (str(exc).strip().splitlines() or [""])[0]
        raise UsageError(field, f"{what} raised {type(exc).__name__}: {first}") from exc
    finally:
        log.disabled = disabled


def keyword_inputs(example_kwargs) -> dict:
    """``example_kwargs`` as a dict (None: none); UsageError("example_kwargs") when it is not a mapping."""
    if example_kwargs is not None and not isinstance(example_kwargs, Mapping):
        raise UsageError("example_kwargs", f"a mapping of keyword arguments, not {type(example_kwargs).__name__}")
    return dict(example_kwargs or {})
