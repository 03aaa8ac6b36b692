"""Saved-activation accounting: every tensor autograd keeps for backward, with the module and op that saved it.

    with SavedTensorLog(model) as log:
        loss = model(tokens).sum()
    log.total_bytes()          # int bytes: unique storages, parameters and buffers excluded
    log.bytes_by_module()      # {"layers.0.attn.core": bytes, ...}
    log.records                # [SavedRecord(module, op, shape, dtype, nbytes, storage_key, ...), ...]

Three torch mechanisms, no home-made autograd:
* ``torch.autograd.graph.saved_tensors_hooks`` — the pack hook sees each tensor autograd saves (what the
  docs call "saved tensors"), exactly when it is saved;
* a ``TorchDispatchMode`` notes the aten op being run, so each record names the op that saved it (see
  ``_OpNoter`` for how input- and output-saves are told apart); ``torch.utils.checkpoint`` inputs are
  labelled ``"checkpoint"``, a custom autograd Function's saves by its class name;
* module forward pre-/post-hooks keep the qualified name of the innermost running module.

Works with real tensors (cpu/cuda) and under FakeTensorMode (storages are identified by their StorageImpl,
which fake tensors have too). Only the innermost saved-tensor hook sees a save: tensors saved inside a
checkpointed region (replaced by checkpoint's own hook) or an offloaded layer (moved off the device by the
policy's hook) are, correctly, not device-resident saved activations and do not appear here.
"""

from __future__ import annotations

import os
import sys
from collections import defaultdict
from dataclasses import asdict, dataclass

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from remat.formulas.korthikanti_labels import paper_term

CHECKPOINT_OP = "checkpoint"  # torch.utils.checkpoint's saved inputs (non-reentrant _CheckpointFrame.save_inputs)


@dataclass(frozen=True)
class SavedRecord:
    """One tensor saved for backward.

    module: qualified name of the innermost module running when it was saved ("" = the root module);
    op: the aten op that saved it, overload dropped ("addmm", "bmm", "_softmax", "native_dropout",
        "native_layer_norm", "gelu", ...), "checkpoint" for checkpoint inputs, a Function class name, or "?";
    shape, dtype: of the saved tensor (dtype as "torch.bfloat16");
    nbytes: the tensor's own bytes, numel × element size (a view counts its own elements);
    storage_key: identity of the underlying storage (StorageImpl address, with a generation suffix if reused);
    storage_nbytes: bytes of that whole storage (what saving the tensor keeps alive);
    is_parameter: the storage belongs to a parameter or buffer of the model (model state, not activation);
    duplicate: an earlier record already holds this storage (its bytes are counted once).
    """

    module: str
    op: str
    shape: tuple
    dtype: str
    nbytes: int
    storage_key: str
    storage_nbytes: int
    is_parameter: bool
    duplicate: bool
    device: str

    @property
    def address(self) -> int:
        """The StorageImpl address in ``storage_key`` (what ``untyped_storage()._cdata`` gives; -1 for a
        tensor without a storage)."""
        return int(self.storage_key.split(".")[0], 16) if "." in self.storage_key else -1

    def to_dict(self) -> dict:
        """Plain dict (JSON-ready; shape as a list)."""
        d = asdict(self)
        d["shape"] = list(self.shape)
        return d


def _storage_of(t: torch.Tensor):
    try:
        return t.untyped_storage()
    except (RuntimeError, NotImplementedError):  # sparse / nested tensors have no single storage
        return None


class _OpNoter(TorchDispatchMode):
    """Names the aten op responsible for each save.

    Autograd saves an op's inputs just before the op reaches this mode and its outputs just after it
    returns (ops that return no tensor are ignored). So a pack that arrives right after op X, from the same
    Python call site (frame and bytecode offset) and *is* one of X's outputs (same storage, offset, size,
    stride), was saved by X; any other pack waits and is attributed to the next op that runs. The call site
    tells X's output-save from the next op's input-save of the same tensor. View ops never save their
    outputs, so they never claim a pack. (Inside one composite call, e.g. torch.matmul copying a
    non-contiguous input for mm, an input-save of a copy may still be named after the copying op.)
    """

    def __init__(self, log: "SavedTensorLog"):
        super().__init__()
        self.log = log
        self.last_op: str | None = None
        self.last_outputs: set = set()
        self.last_call: tuple | None = None

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        tensors = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
        if not tensors:  # metadata queries (prim.device, sym_size, ...) neither save nor own saves
            return out
        name = func.overloadpacket.__name__
        self.log._resolve_pending(name)
        self.last_op = name
        self.last_call = _call_site()
        self.last_outputs = set() if func.is_view else {_view_key(t) for t in tensors}
        return out

    def claims(self, t: torch.Tensor) -> bool:
        """Whether a pack happening now is an output-save of the last op (same call site, one of its outputs)."""
        return bool(self.last_outputs) and _call_site() == self.last_call and _view_key(t) in self.last_outputs


def _view_key(t: torch.Tensor):
    storage = _storage_of(t)
    return (None if storage is None else storage._cdata, t.storage_offset(), tuple(t.shape), t.stride())


_TORCH_DIR = os.path.dirname(torch.__file__)
_PLUMBING = tuple(os.path.join(_TORCH_DIR, p) for p in (
    "utils", "_dynamo", "_compile.py", "_subclasses", "distributed", "_ops.py", "_prims", "_decomp", "_refs",
    "_higher_order_ops", "_library", "fx"))


def _is_plumbing(code) -> bool:
    """Frames of dispatch modes and their machinery (FlopCounterMode, MemTracker, FakeTensorMode, ...)."""
    return (code.co_name == "__torch_dispatch__" or code.co_filename == __file__
            or code.co_filename.startswith(_PLUMBING))


def _call_site() -> tuple:
    """(frame id, bytecode offset, code) of the nearest Python frame that called a torch op.

    Dispatch modes stacked with this one (FlopCounterMode, MemTracker, FakeTensorMode) put their own
    frames between the caller and this mode; those are skipped, so the pack hook and the dispatch mode
    agree on the call site whatever the mode stack.
    """
    frame = sys._getframe(1)
    while frame is not None and _is_plumbing(frame.f_code):
        frame = frame.f_back
    return (id(frame), frame.f_lasti, frame.f_code) if frame is not None else (None, -1, None)


def _function_name() -> str | None:
    """Name a save made by torch.utils.checkpoint or by a custom autograd Function, from the Python stack."""
    frame = sys._getframe(2)
    for _ in range(6):
        if frame is None:
            return None
        code = frame.f_code
        if code.co_name == "save_inputs" and code.co_filename.endswith("checkpoint.py"):
            return CHECKPOINT_OP
        cls = frame.f_locals.get("cls") if code.co_name == "apply" else None
        if isinstance(cls, type) and issubclass(cls, torch.autograd.Function):
            return CHECKPOINT_OP if cls.__name__ == "_NoopSaveInputs" else cls.__name__
        frame = frame.f_back
    return None


class SavedTensorLog:
    """Context manager recording every tensor saved for backward while it is active.

    ``model``: the nn.Module whose submodule names label the records and whose parameters and buffers are
    excluded (``is_parameter``). Use one log per forward; the records stay valid after exit. Saved tensors
    are returned unchanged (the hooks only observe), so numerics and memory are those of a plain run.
    Source: torch.autograd.graph.saved_tensors_hooks, torch.utils._python_dispatch.TorchDispatchMode,
    nn.Module.register_forward_pre_hook / register_forward_hook.
    """

    def __init__(self, model: torch.nn.Module):
        self.model = model
        self.records: list[SavedRecord] = []
        self._pending: list[tuple] = []
        self._stack: list[str] = []
        self._handles: list = []
        self._keys: dict[int, tuple] = {}  # StorageImpl address -> (weakref, key string)
        self._generation = 0
        self._seen: set[str] = set()

    # --- context ------------------------------------------------------------------------------------------
    def __enter__(self) -> "SavedTensorLog":
        self._state = {self._key(s) for s in self._model_storages()}
        for name, module in self.model.named_modules():
            self._handles.append(module.register_forward_pre_hook(self._push(name)))
            self._handles.append(module.register_forward_hook(self._pop, always_call=True))
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, lambda t: t)
        self._noter = _OpNoter(self)
        self._hooks.__enter__()
        self._noter.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._noter.__exit__(*exc)
        self._hooks.__exit__(*exc)
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        self._resolve_pending("?")

    # --- hooks --------------------------------------------------------------------------------------------
    def _push(self, name: str):
        def hook(module, args):
            self._stack.append(name)
        return hook

    def _pop(self, module, args, output):
        if self._stack:
            self._stack.pop()

    def _pack(self, t: torch.Tensor) -> torch.Tensor:
        op = _function_name()
        if op is None and self._noter.claims(t):
            op = self._noter.last_op
        else:
            self._noter.last_outputs = set()  # an input-save ends the run of output-saves
        module = self._stack[-1] if self._stack else ""
        if op is None:
            self._pending.append((t, module))  # an input-save: named when its op reaches the dispatch mode
        else:
            self._record(t, op, module)
        return t

    def _resolve_pending(self, op: str) -> None:
        for t, module in self._pending:
            self._record(t, op, module)
        self._pending.clear()

    def _record(self, t: torch.Tensor, op: str, module: str) -> None:
        storage = _storage_of(t)
        key = self._key(storage) if storage is not None else f"tensor:{id(t)}"
        self.records.append(SavedRecord(
            module=module, op=op, shape=tuple(int(d) for d in t.shape), dtype=str(t.dtype),
            nbytes=t.numel() * t.element_size(), storage_key=key,
            storage_nbytes=int(storage.nbytes()) if storage is not None else t.numel() * t.element_size(),
            is_parameter=key in self._state, duplicate=key in self._seen, device=str(t.device)))
        self._seen.add(key)

    def _model_storages(self):
        for tensor in [*self.model.parameters(), *self.model.buffers()]:
            storage = _storage_of(tensor)
            if storage is not None:
                yield storage

    def _key(self, storage) -> str:
        """A key unique among storages alive during the log (StorageImpl addresses can be reused)."""
        from torch.multiprocessing.reductions import StorageWeakRef
        cdata = storage._cdata
        known = self._keys.get(cdata)
        if known is None or known[0].expired():
            self._generation += 1
            known = (StorageWeakRef(storage), f"{cdata:x}.{self._generation}")
            self._keys[cdata] = known
        return known[1]

    # --- results ------------------------------------------------------------------------------------------
    def activations(self) -> list[SavedRecord]:
        """Records that count: not a parameter/buffer and not a storage already counted."""
        return [r for r in self.records if not r.is_parameter and not r.duplicate]

    def total_bytes(self) -> int:
        """Bytes saved for backward: each unique storage once (storage_nbytes), parameters/buffers excluded."""
        return sum(r.storage_nbytes for r in self.activations())

    def bytes_by_module(self) -> dict[str, int]:
        """total_bytes() split by the module that first saved each storage (qualified names, "" = root)."""
        out: dict[str, int] = defaultdict(int)
        for r in self.activations():
            out[r.module] += r.storage_nbytes
        return dict(out)

    def bytes_per_layer(self, layers: int, container: str = "layers") -> list[int]:
        """total_bytes() of modules under ``{container}.{i}`` for i in range(layers) (list of int bytes)."""
        out = [0] * layers
        for module, nbytes in self.bytes_by_module().items():
            parts = module.split(".")
            if len(parts) >= 2 and parts[0] == container and parts[1].isdigit() and int(parts[1]) < layers:
                out[int(parts[1])] += nbytes
        return out

    def items(self) -> list[dict]:
        """Every non-parameter record as a dict, with ``paper_term`` (Korthikanti §4.1 term or None).

        ``paper_term`` comes from remat.formulas.korthikanti_labels.paper_term; it is meaningful for the GPT layer's
        submodule names only.
        """
        rows = []
        for r in self.records:
            if r.is_parameter:
                continue
            row = r.to_dict()
            row["paper_term"] = paper_term(r.module, r.op, r.shape, r.dtype, r.duplicate)
            rows.append(row)
        return rows
