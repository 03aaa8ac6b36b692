"""What watches the step remat.auto.explain runs: the checkpoint region around a call (read from the Python
stack), every storage made in the step (by weak reference), autograd's saved tensors and the selective-
checkpoint caches per block, the ops a checkpoint re-runs in backward, and checkpoints made plain for the
re-run of a block alone.

The ``step`` these take is remat.auto.explain_step.Step (its ``phase``, ``stack`` of running blocks and
per-block ``steps``); what each number counts: remat.auto.diagnose.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import sys
from dataclasses import dataclass
from typing import Sequence

import torch
import torch.utils.checkpoint as ckpt
from torch import nn
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from remat.drop_cheap import KeptLog
from remat.measure.flops import flop_count
from remat.measure.saved import SavedTensorLog

_CKPT_FILE = "checkpoint.py"


def checkpoint_region() -> tuple[tuple | None, bool, bool]:
    """(innermost torch.utils.checkpoint region around the caller, whether it is reentrant, whether
    checkpoint_sequential is on the stack), read from the Python stack. A region is (frame id, id of the
    checkpointed function): frame ids alone can be reused by the next region."""
    frame = sys._getframe(2)
    region, reentrant, sequential = None, False, False
    while frame is not None:
        code = frame.f_code
        if code.co_filename.endswith(_CKPT_FILE) and "torch" in code.co_filename:
            if code.co_name == "checkpoint_sequential":
                sequential = True
            elif region is None and code.co_name in ("checkpoint", "forward"):
                local = frame.f_locals
                fn = local.get("function", local.get("run_function"))
                if fn is not None:
                    region = (id(frame), id(fn))
                    reentrant = code.co_name == "forward"
        frame = frame.f_back
    return region, reentrant, sequential


class LiveStorages(TorchDispatchMode):
    """Every storage an op creates while active, plus ``external`` tensors, followed by weak reference (what
    torch's MemTracker does; MemTracker itself cannot follow a model with frozen parameters: it registers a
    gradient hook on each). ``alive()``: {StorageImpl address: (bytes, weak reference)} of those alive now."""

    def __init__(self, external: Sequence[torch.Tensor], step=None):
        super().__init__()
        self.refs: dict = {}
        self.block_of: dict = {}      # StorageImpl address -> index of the block running when it was made
        self.step = step
        for t in external:
            self._note(t)

    def _note(self, t: torch.Tensor) -> None:
        try:
            storage = t.untyped_storage()
        except (RuntimeError, NotImplementedError):
            return
        known = self.refs.get(storage._cdata)
        if known is None or known[1].expired():   # weak only: the step's tensors alone keep storages alive
            self.refs[storage._cdata] = (int(storage.nbytes()), StorageWeakRef(storage))
            step = self.step
            if step is not None and step.phase == "forward" and step.stack:
                self.block_of[storage._cdata] = step.stack[-1]

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor):
                self._note(t)
        return out

    def alive(self) -> dict:
        """{StorageImpl address: (bytes, weak reference)} of the followed storages alive now."""
        return {key: (nbytes, ref) for key, (nbytes, ref) in self.refs.items() if not ref.expired()}


class DetachedLog(SavedTensorLog):
    """A SavedTensorLog whose pack hook keeps a detached alias: with no backward to free it, a saved output
    kept as itself would hold its own grad_fn in a reference cycle autograd never frees (leaked memory)."""

    def _pack(self, t):
        return super()._pack(t).detach()


@dataclass(frozen=True)
class Cached:
    """A storage some selective-checkpoint cache holds (shaped like remat.drop_cheap.KeptRecord)."""

    storage: int
    nbytes: int


def sac_caches() -> dict:
    """{StorageImpl address: bytes} of every tensor held by a live selective-checkpoint cache
    (torch.utils.checkpoint's _Caching/_CachedTorchDispatchMode.storage: what a SAC policy MUST/PREFER_SAVEs),
    found among the live Python objects — any policy, not only remat.drop_cheap's."""
    kinds = {k for k in (getattr(ckpt, "_CachingTorchDispatchMode", None),
                         getattr(ckpt, "_CachedTorchDispatchMode", None)) if k is not None}
    out = {}
    for obj in gc.get_objects():
        if type(obj) not in kinds:    # forward (caching) and recompute (cached) modes share one storage
            continue
        for outputs in getattr(obj, "storage", {}).values():
            values = outputs.values() if isinstance(outputs, dict) else outputs
            for leaf in tree_flatten(list(values))[0]:
                t = getattr(leaf, "val", leaf)
                if isinstance(t, torch.Tensor):
                    try:
                        storage = t.untyped_storage()
                    except (RuntimeError, NotImplementedError):
                        continue
                    out[storage._cdata] = int(storage.nbytes())
    return out


class BlockKeptLog:
    """remat.drop_cheap.KeptLog that also notes which block each cached output belongs to."""

    def __init__(self, step):
        class Log(KeptLog):
            def record(self, func, out):
                before = len(self.records)
                super().record(func, out)
                if step.stack and step.phase == "forward":
                    for r in self.records[before:]:
                        step.steps[step.stack[-1]].kept_storages[r.storage] = r.nbytes
        self.log = Log()

    def __enter__(self):
        return self.log.__enter__()

    def __exit__(self, *exc):
        self.log.__exit__(*exc)


class BackwardOps(TorchDispatchMode):
    """During backward: ops run with grad mode on (a checkpoint's recompute) counted into the running block."""

    def __init__(self, step):
        super().__init__()
        self.step = step

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if torch.is_grad_enabled() and not func.is_view:
            step = self.step
            i = step.stack[-1] if step.stack else step.last_block
            if i is not None and any(isinstance(t, torch.Tensor) for t in tree_flatten(out)[0]):
                step.steps[i].recompute_ops += 1
                step.steps[i].recompute_flops += flop_count(func, args, kwargs, out)
        return out


@contextlib.contextmanager
def plain_checkpoints():
    """Every torch.utils.checkpoint.checkpoint call made a plain call while active (reentrant: the function
    applied directly; non-reentrant: no hooks, no recompute, context_fn ignored). Patches two module globals
    of torch.utils.checkpoint that checkpoint() looks up at call time; not thread-safe."""

    class Plain:
        @staticmethod
        def apply(function, preserve_rng_state, *args):
            return function(*args)

    def generator(*args, **kwargs):
        yield

    saved = ckpt.CheckpointFunction, ckpt._checkpoint_without_reentrant_generator
    ckpt.CheckpointFunction, ckpt._checkpoint_without_reentrant_generator = Plain, generator
    try:
        yield
    finally:
        ckpt.CheckpointFunction, ckpt._checkpoint_without_reentrant_generator = saved


def detached(x):
    """``x`` detached for a re-run: a floating (or complex) tensor that required grad becomes a copy of a new
    leaf that does (the block may write its input in place, which a leaf refuses)."""
    if not isinstance(x, torch.Tensor):
        return x
    if x.requires_grad and (x.is_floating_point() or x.is_complex()):
        return x.detach().requires_grad_(True).clone()
    return x.detach()


def address(t: torch.Tensor) -> int:
    """The StorageImpl address of ``t``'s storage (-id(t) where it has none)."""
    try:
        return t.untyped_storage()._cdata
    except (RuntimeError, NotImplementedError):
        return -id(t)


def named_tensors(output, prefix: str = "") -> list[tuple[str, torch.Tensor]]:
    """(field name, tensor) of a model output: dicts / ModelOutputs by key, tuples by index, dataclasses by
    field ("hidden_states[3]")."""
    if isinstance(output, torch.Tensor):
        return [(prefix, output)]
    if isinstance(output, dict):
        items = [(str(k), v) for k, v in output.items()]
    elif dataclasses.is_dataclass(output) and not isinstance(output, type):
        items = [(f.name, getattr(output, f.name)) for f in dataclasses.fields(output)]
    elif isinstance(output, (tuple, list)):
        return [pair for j, v in enumerate(output) for pair in named_tensors(v, f"{prefix}[{j}]")]
    else:
        return []
    return [pair for k, v in items for pair in named_tensors(v, f"{prefix}.{k}" if prefix else k)]


def grad_state(blocks: Sequence[nn.Module]) -> list[list]:
    """Per block: (parameter, its gradient, the gradient's version) of each trainable parameter, before backward."""
    return [[(p, p.grad, None if p.grad is None else p.grad._version) for p in b.parameters() if p.requires_grad]
            for b in blocks]


def got_grads(blocks: Sequence[nn.Module], before: list[list]) -> list[bool | None]:
    """Per block: whether any trainable parameter got a gradient in backward (None: it has none)."""
    out = []
    for state in before:
        if not state:
            out.append(None)
            continue
        out.append(any(p.grad is not None and (g is None or p.grad is not g or p.grad._version != v)
                       for p, g, v in state))
    return out
