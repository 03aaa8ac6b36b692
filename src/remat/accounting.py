"""Per-layer activation accounting of the GPT layer against Korthikanti et al. 2022, Table 2.

    acc = account_layer("gpt3-175b", mode="selective", tp=8, sp=True)     # FakeTensorMode: no memory
    acc.bytes_per_layer_measured, acc.bytes_per_layer_formula, acc.rel_error
    acc.items            # every saved tensor: module, op, shape, dtype, bytes, paper_term, paper_bytes
    acc.gap()            # actual − paper-faithful bytes, itemized

One layer (the serial ``GPTLayer`` for t = 1, rank ``rank`` of the ``ParallelGPTLayer`` otherwise) runs
forward under ``remat.measure.saved.SavedTensorLog``; the recompute mode is applied with
``remat.policies.apply_plan`` (selective = checkpoint ``attn.core``, full = checkpoint the layer). Every saved
tensor is labelled with its §4.1 term by ``remat.formulas.korthikanti_labels.paper_term``. Three byte counts:

* actual (``bytes_per_layer_actual``): every unique storage autograd keeps, parameters/buffers excluded, plus
  what a selective-checkpoint cache keeps (drop-cheap, ``MODES``) — what this PyTorch layer really holds;
* paper-faithful (``bytes_per_layer_measured``): the saved tensors the paper counts, each at the paper's
  element size (2 B; 1 B for dropout masks): numel is measured, the 16-bit/1-byte assumption is the paper's;
* formula (``bytes_per_layer_formula``): Table 2 (``korthikanti.layer_bytes``).

actual − paper-faithful is itemized by ``gap()``: tensors the paper does not count (LayerNorm mean/rstd, ...),
element-size differences (e.g. fp32 runs; masks that are not 1-byte), and storage kept alive beyond the saved
views. Devices: "fake" (FakeTensorMode on the CPU, a fake process group for t > 1: the paper's sizes in no
memory), "cpu" or "cuda" (real tensors; for t > 1 the default process group must already hold t ranks).
"""

from __future__ import annotations

import contextlib
from dataclasses import asdict, dataclass, field

import torch
import torch.distributed as dist
from torch import nn

from remat.device import DEVICES
from remat.drop_cheap import KeptLog, cache_bytes
from remat.errors import UsageError
from remat.formulas import korthikanti, korthikanti_labels
from remat.measure.saved import SavedTensorLog
from remat.models.llama_parallel import build_llama_layer, check_split
from remat.models.presets import ModelConfig, from_name, validate
from remat.models.tensor_parallel import build_layer, fake_process_group
from remat.policies import apply_plan
from remat.units import MiB



@dataclass(frozen=True)
class Item:
    """One tensor saved for backward by the layer.

    name: "module/op" (module relative to the layer; "" = the layer itself); bytes: the tensor's own bytes
    (numel × element size); paper_term: its §4.1 term (None: the paper does not count it); paper_bytes:
    numel × the paper's element size for counted tensors (0 otherwise); storage: the storage it lives in
    (views of one storage share it); note: why it is not counted, or how its element size differs.
    """

    name: str
    module: str
    op: str
    shape: tuple
    dtype: str
    bytes: int
    paper_term: str | None
    paper_bytes: int
    storage: str
    note: str = ""

    def to_dict(self) -> dict:
        d = asdict(self)
        d["shape"] = list(self.shape)
        return d


@dataclass
class LayerAccount:
    """Measured, actual and formula bytes of one layer on one TP rank (int bytes), with the saved items.

    ``slack``: bytes of storages kept alive beyond the views saved from them (storage → bytes; negative if
    saved views overlap and their bytes are counted once).
    """

    model: str
    arch: str
    mode: str
    tp: int
    sp: bool
    seq: int
    micro_batch: int
    hidden: int
    heads: int
    dtype: str
    device: str
    rank: int
    bytes_per_layer_measured: int
    bytes_per_layer_actual: int
    bytes_per_layer_formula: int
    items: list[Item]
    slack: dict[str, int] = field(default_factory=dict)

    @property
    def rel_error(self) -> float:
        """(paper-faithful measured − formula) / formula."""
        return (self.bytes_per_layer_measured - self.bytes_per_layer_formula) / self.bytes_per_layer_formula

    def terms(self) -> dict[str, int]:
        """Paper-faithful measured bytes by §4.1 term (``layer_input`` under full recompute)."""
        out: dict[str, int] = {}
        for item in self.items:
            if item.paper_term:
                out[item.paper_term] = out.get(item.paper_term, 0) + item.paper_bytes
        return out

    def gap(self) -> dict[str, int]:
        """actual − paper-faithful bytes, itemized (int bytes; the values sum to the difference):
        one entry per uncounted item ("not counted: module/op"), "element size" (counted tensors stored at a
        different element size than the paper's) and "storage beyond saved views"."""
        out: dict[str, int] = {}
        for item in self.items:
            if item.paper_term is None:
                key = f"not counted: {item.name} ({item.note})"
                out[key] = out.get(key, 0) + item.bytes
        size = sum(i.bytes - i.paper_bytes for i in self.items if i.paper_term)
        if size:
            out["element size (stored vs the paper's 2 B / 1 B)"] = size
        beyond = sum(v for v in self.slack.values() if v > 0)
        shared = sum(v for v in self.slack.values() if v < 0)
        if beyond:
            out["storage beyond saved views"] = beyond
        if shared:
            out["one storage saved by several ops (counted once)"] = shared
        return out

    def to_dict(self) -> dict:
        """The ``remat account --json`` object."""
        return {
            "model": self.model, "arch": self.arch, "mode": self.mode, "tp": self.tp, "sp": self.sp,
            "seq": self.seq, "micro_batch": self.micro_batch, "hidden": self.hidden, "heads": self.heads,
            "dtype": self.dtype, "device": self.device, "rank": self.rank,
            "bytes_per_layer_measured": self.bytes_per_layer_measured,
            "bytes_per_layer_actual": self.bytes_per_layer_actual,
            "bytes_per_layer_formula": self.bytes_per_layer_formula,
            "rel_error": self.rel_error,
            "formula_applies": self.arch == "gpt",   # Table 2 describes the GPT layer only
            "terms": self.terms(),
            "gap": self.gap(),
            "items": [item.to_dict() for item in self.items],
        }


# --- configuration -----------------------------------------------------------------------------------------------

MODES = (*korthikanti.RECOMPUTE, "drop-cheap")
"""What a layer can be accounted under: Korthikanti's modes, and drop-cheap (op-level selective: matmul and attention
outputs kept in torch's selective-checkpoint cache, the rest recomputed; remat.drop_cheap), the planner's selective
for a layer whose attention is fused (remat.planner.measured)."""


def _paper_mode(mode: str) -> str:
    """Korthikanti's mode to set beside ``mode``: itself, or none for drop-cheap (the paper has no op-level mode)."""
    return mode if mode in korthikanti.RECOMPUTE else "none"


def resolve(model, mode: str = "none", tp: int | None = None, sp: bool = False, seq: int | None = None,
            micro_batch: int | None = None, **overrides):
    """The ModelConfig to account and the checked (mode, t, sp).

    model: a preset name, a config.json path or a ModelConfig; tp defaults to the preset's t (8 for the
    paper's models), seq and micro_batch to the preset's (the paper's micro-batch for Table 3 models).
    Raises UsageError naming the field: mode, model, seq, micro_batch, tp (t not dividing heads or hidden;
    t not dividing a Llama layer's key/value groups or MLP width), sp (SP without TP; t not dividing s).
    """
    if mode not in MODES:
        raise UsageError("mode", f"unknown mode {mode!r} (use {'|'.join(MODES)})")
    sizes = {"seq": seq, "micro_batch": micro_batch, **overrides}
    cfg = from_name(model, **sizes) if not isinstance(model, ModelConfig) else _with_overrides(model, **sizes)
    t = cfg.tp if tp is None else tp
    korthikanti.check_parallel(cfg.seq, cfg.hidden, cfg.heads, t, sp, _paper_mode(mode))
    if cfg.arch != "gpt":
        check_split(cfg, t, sp)
    return cfg, t


def _with_overrides(cfg, **overrides):
    """``from_name`` for a ModelConfig already in hand: apply non-None overrides and validate."""
    import dataclasses

    changes = {k: v for k, v in overrides.items() if v is not None}
    if "seq" in changes:
        changes["max_positions"] = max(cfg.max_positions, changes["seq"])
    return validate(dataclasses.replace(cfg, **changes))


# --- measurement ---------------------------------------------------------------------------------------------------

class _OneLayer(nn.Module):
    """A one-layer container so ``remat.policies.apply_plan`` (which reads ``.layers``) applies a mode."""

    def __init__(self, layer: nn.Module):
        super().__init__()
        self.layers = nn.ModuleList([layer])

    def forward(self, x):
        return self.layers[0](x)


@contextlib.contextmanager
def tp_group(t: int, rank: int, device: str):
    """The TP group for one layer: None (serial) for t = 1, a fake group on "fake", else the default
    process group, which must already hold t ranks (a gloo/NCCL run)."""
    if t == 1:
        yield None
    elif device == "fake":
        with fake_process_group(t, rank) as group:
            yield group
    else:
        if not dist.is_initialized() or dist.get_world_size() != t:
            raise UsageError("device", f"real tensors with tp={t} need a process group of {t} ranks "
                                       "(launch with torchrun) — or use device fake")
        yield dist.group.WORLD


def build(cfg, t: int, sp: bool, mode: str, group, device: str = "fake") -> tuple[nn.Module, nn.Module]:
    """(container, layer): the layer for one rank (serial for t = 1) on ``device`` ("fake" builds on the CPU,
    under the caller's FakeTensorMode), ``mode`` applied via remat.policies.apply_plan."""
    dev = "cpu" if device == "fake" else device
    if cfg.arch == "gpt":
        layer = build_layer(cfg, group if t > 1 else None, sp, dev)
    else:
        layer = build_llama_layer(cfg, group if t > 1 else None, sp, dev)
    container = _OneLayer(layer)
    apply_plan(container, [mode])
    return container, layer


def layer_input(cfg, t: int, sp: bool, device: str, generator: torch.Generator | None = None) -> torch.Tensor:
    """The layer input x [s, b, h] (the sequence shard [s/t, b, h] under SP), requires_grad (it is the previous
    layer's output). Real devices draw it from ``generator``; under FakeTensorMode it is a fake tensor."""
    s = cfg.seq // t if sp else cfg.seq
    dev = "cpu" if device == "fake" else device
    return torch.randn(s, cfg.micro_batch, cfg.hidden, dtype=getattr(torch, cfg.dtype), device=dev,
                       generator=generator).requires_grad_()


def tensor_mode(device: str):
    """FakeTensorMode for "fake", else a no-op context."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    return FakeTensorMode() if device == "fake" else contextlib.nullcontext()


def account_layer(model, mode: str = "none", tp: int | None = None, sp: bool = False, seq: int | None = None,
                  micro_batch: int | None = None, *, device: str = "fake", rank: int = 0,
                  **overrides) -> LayerAccount:
    """Measure one layer's saved activations (bytes, on one TP rank) beside Korthikanti Table 2.

    model: preset name, config.json path or ModelConfig; mode: one of ``MODES``; tp: t (default: the
    preset's); sp: sequence parallelism; seq, micro_batch, ``overrides`` (e.g. dtype="float32",
    dropout=0.1): ModelConfig overrides; device: "fake" (FakeTensorMode, any size), "cpu"/"cuda" (real
    tensors; t > 1 needs an initialized process group of t ranks); rank: the TP rank to act as (fake only).
    Returns a LayerAccount (int bytes). Raises UsageError (mode, model, seq, micro_batch, tp, sp, device).
    """
    if device not in DEVICES:
        raise UsageError("device", f"unknown device {device!r} (use {'|'.join(DEVICES)})")
    cfg, t = resolve(model, mode, tp, sp, seq, micro_batch, **overrides)
    with tp_group(t, rank, device) as group, tensor_mode(device):
        container, layer = build(cfg, t, sp, mode, group, device)
        x = layer_input(cfg, t, sp, device)
        with SavedTensorLog(container) as log, KeptLog() as kept:
            container(x)
    items, slack = _items(log.records)
    return LayerAccount(
        model=cfg.name, arch=cfg.arch, mode=mode, tp=t, sp=sp, seq=cfg.seq, micro_batch=cfg.micro_batch,
        hidden=cfg.hidden, heads=cfg.heads, dtype=cfg.dtype, device=device,
        rank=rank if device == "fake" else (dist.get_rank() if t > 1 else 0),
        bytes_per_layer_measured=_paper_faithful(items, slack),
        bytes_per_layer_actual=log.total_bytes() + cache_bytes(log, kept),
        bytes_per_layer_formula=korthikanti.layer_bytes(cfg.seq, cfg.micro_batch, cfg.hidden, cfg.heads, t, sp,
                                                        _paper_mode(mode)),
        items=items, slack=slack)


# --- records -> items ------------------------------------------------------------------------------------------------

def _items(records) -> tuple[list[Item], dict[str, int]]:
    """Items for the non-parameter records, and the slack per storage (storage bytes − saved views' bytes)."""
    items, covered, storage_bytes, qkv_seen = [], {}, {}, 0
    for r in records:
        if r.is_parameter:
            continue
        module = korthikanti_labels.layer_relative(r.module)
        term = korthikanti_labels.paper_term(r.module, r.op, r.shape, r.dtype, r.duplicate)
        note = ""
        if term == korthikanti.QKV_GROUP:  # checkpointed core-attention inputs arrive in argument order q, k, v
            term = "v" if qkv_seen % 3 == 2 else "q_k"
            note = f"checkpointed input {'qkv'[qkv_seen % 3]} of attn.core"
            qkv_seen += 1
        numel = r.nbytes // _element_size(r.dtype)
        paper_bytes = numel * korthikanti.paper_element_bytes(term) if term else 0
        if term is None:
            note = _why_not_counted(module, r.op, r.shape, r.dtype)
        elif paper_bytes != r.nbytes:
            note = (note + "; " if note else "") + f"stored as {r.dtype.removeprefix('torch.')}"
        items.append(Item(name=f"{module}/{r.op}", module=module, op=r.op, shape=tuple(r.shape), dtype=r.dtype,
                          bytes=r.nbytes, paper_term=term, paper_bytes=paper_bytes, storage=r.storage_key,
                          note=note))
        covered[r.storage_key] = covered.get(r.storage_key, 0) + r.nbytes
        storage_bytes[r.storage_key] = r.storage_nbytes
    slack = {k: storage_bytes[k] - covered[k] for k in storage_bytes if storage_bytes[k] != covered[k]}
    return items, slack


def _paper_faithful(items: list[Item], slack: dict[str, int]) -> int:
    """Σ paper_bytes, with overlapping views of one storage (negative slack) counted once (scaled down)."""
    total = 0.0
    for storage in {i.storage for i in items}:
        mine = [i for i in items if i.storage == storage]
        own = sum(i.bytes for i in mine)
        scale = min(1.0, (own + slack.get(storage, 0)) / own) if own else 1.0
        total += scale * sum(i.paper_bytes for i in mine)
    return int(round(total))


def _element_size(dtype: str) -> int:
    return getattr(torch, dtype.removeprefix("torch.")).itemsize


def _why_not_counted(module: str, op: str, shape: tuple, dtype: str) -> str:
    """A short reason for a saved tensor outside the paper's §4.1 itemization."""
    if module in ("ln_1", "ln_2") and shape and shape[-1] == 1:
        return "norm statistics (mean/rstd): the paper ignores them"
    if "bool" in dtype and len(shape) == 2:
        return "causal mask"
    if "float32" in dtype:
        return f"fp32 intermediate saved by {op}"
    return f"saved by {op}; not in the paper's itemization"


def format_account(acc: LayerAccount) -> str:
    """A human-readable table of one LayerAccount (sizes in MiB = 2**20 bytes)."""
    lines = [f"{acc.model}  mode={acc.mode} tp={acc.tp} sp={acc.sp} s={acc.seq} b={acc.micro_batch} "
             f"({acc.dtype}, device={acc.device})",
             f"  measured (paper-faithful) {acc.bytes_per_layer_measured / MiB:12.2f} MiB",
             f"  formula (Table 2)         {acc.bytes_per_layer_formula / MiB:12.2f} MiB   " +
             (f"rel. error {acc.rel_error:+.3%}" if acc.arch == "gpt" else
              f"(the paper's GPT layer at these sizes, for comparison: this {acc.arch} layer is not what "
              "Table 2 describes)"),
             f"  actual                    {acc.bytes_per_layer_actual / MiB:12.2f} MiB", "  items:"]
    for i in acc.items:
        lines.append(f"    {i.name:32s} {str(list(i.shape)):24s} {i.dtype.removeprefix('torch.'):9s} "
                     f"{i.bytes / MiB:10.2f} MiB  {i.paper_term or '-':22s} {i.note}")
    lines.append("  gap (actual − paper-faithful):")
    for name, nbytes in acc.gap().items():
        lines.append(f"    {name:70s} {nbytes / MiB:10.4f} MiB")
    return "\n".join(lines)
