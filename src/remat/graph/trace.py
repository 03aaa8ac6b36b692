"""A torch module's forward and loss, traced into the Chen et al. 2016 §3 computation graph (remat.graph.ir).

    graph = trace(resnet, (x,), loss_fn=lambda logits: F.cross_entropy(logits, y), name="resnet-1000")
    other_ops(graph)            # {"cat": 64}: aten ops the trace did not recognise ("other" nodes)

The forward runs under FakeTensorMode (any size, no memory) with a TorchDispatchMode that sees every aten op
after autograd. Each op becomes at most one Node:

* Values. The example inputs are "input" values ("input0", ...), parameters and buffers "param" values (their
  qualified names), every tensor an op allocates an "act" value (bytes = numel × element size). A tensor read
  that is none of these — a factory's output (torch.zeros for an LSTM's initial state), a target captured by
  ``loss_fn`` — becomes an "input" value "const<k>" (data: no gradient) when a node first reads it.
* Views allocate nothing, so they are not values: an op's output whose storage already belongs to a value
  is that value (view, reshape/_unsafe_view, t, transpose, permute, expand, squeeze, detach, alias, select,
  slice, as_strided ... — by storage identity, ``untyped_storage()``, whatever the op is called). Every
  tensor seen stays referenced until the trace ends, so no storage is freed and reused.
* In-place ops (relu_, add_; any op whose schema mutates) write a new value, which the storage now holds;
  the planner decides in-place itself (ir.OPS). Mutated arguments that are not returned (batch norm's
  running statistics) are not graph values.
* Skipped: ops that allocate no floating-point output (size queries, integer/boolean ops, views) and ops
  that read no known value (factories, arithmetic on constants: their outputs are constants).
* Outputs: every non-empty tensor the op allocates, floating or not (max pooling's int64 indices count with
  their true bytes). Empty outputs (batch norm's 0-element reserve on the CPU) are dropped.

* Values nothing reads stay in the graph (nll_loss's total_weight, 4 bytes; an nn.LSTM's stacked final
  states).

``ATEN`` maps aten op packets to ir.OPS kinds; anything else is "other" (its gradient conservatively reads
every input and output; not cheap) and is listed by ``other_ops`` — e.g. torch's fused nn.LSTM kernel on the
CPU (mkldnn_rnn_layer), cat/stack, exp, pow, dropout. Every node's ``attrs`` holds
("aten", packet name); split nodes also ("parts", n) and ("dim", d).

``saved`` follows ir.OPS except where torch's autograd formulas (tools/autograd/derivatives.yaml) differ
in a way that changes what stays live (``_SAVED``):

* bn: the input and the save_mean/save_invstd outputs (2 × C floats) — torch does not recompute the batch
  statistics from x as MXNet does; the (small) statistics are act values.
* maxpool: the input and the int64 indices (max_pool2d_with_indices_backward). MXNet, the paper's
  framework, saves no indices: its pooling backward recomputes the argmax from the input and the output.
* addmm ("linear"): mat1 and mat2 (x and Wᵀ), not the bias operand.
* mul by a Python scalar: nothing (the gradient is the scalar).
* avg_pool / _adaptive_avg_pool ("avgpool"): the input (their backward takes ``self``); mean and sum read
  nothing.
* cross entropy: torch runs _log_softmax then nll_loss_forward. When the log-probabilities are read by the
  nll_loss alone, the pair is one "xent" node (MXNet's SoftmaxOutput) reading logits and target, saving
  both (torch saves the log-probabilities, the logits' size). A lone _log_softmax is "xent" saving its
  output; a lone nll_loss_forward "xent" saving its inputs.

Splits (split, split_with_sizes, unbind; chunk runs split) return views in torch. A split of an activation
is a "split" node writing one value per part — MXNet's SliceChannel copies — so the LSTM's gates are
separate values, as in Chen's graph; a view of a part reads the split's input. A split of an input or a
parameter stays a view (no node).

FLOPs per node: remat.formulas.op_flops.flop_count (torch's FLOP registry: convolution and matmul-like ops;
elementwise ops count 0), so ``graph.forward_flops()`` equals FlopCounterMode's total for the forward.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Callable, Sequence

import torch
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from remat.errors import UsageError
from remat.formulas.op_flops import flop_count
from remat.graph.ir import Graph, GraphBuilder

ATEN: dict[str, str] = {
    **dict.fromkeys(["convolution", "_convolution", "convolution_overrideable", "cudnn_convolution",
                     "mkldnn_convolution"], "conv"),
    **dict.fromkeys(["addmm", "linear"], "linear"),
    **dict.fromkeys(["mm", "bmm", "matmul", "baddbmm"], "matmul"),
    **dict.fromkeys(["native_batch_norm", "_native_batch_norm_legit", "_native_batch_norm_legit_functional",
                     "_native_batch_norm_legit_no_training", "cudnn_batch_norm", "miopen_batch_norm",
                     "_batch_norm_with_update", "_batch_norm_with_update_functional", "_batch_norm_no_update"],
                    "bn"),
    **dict.fromkeys(["relu", "relu_"], "relu"),
    **dict.fromkeys(["sigmoid", "sigmoid_"], "sigmoid"),
    **dict.fromkeys(["tanh", "tanh_"], "tanh"),
    **dict.fromkeys(["add", "add_", "sub", "sub_"], "add"),          # gradient reads no value
    **dict.fromkeys(["mul", "mul_", "div", "div_"], "mul"),          # gradient reads both operands
    **dict.fromkeys(["max_pool1d_with_indices", "max_pool2d_with_indices", "max_pool3d_with_indices"],
                    "maxpool"),
    **dict.fromkeys(["avg_pool1d", "avg_pool2d", "avg_pool3d", "_adaptive_avg_pool2d", "_adaptive_avg_pool3d",
                     "mean", "sum"], "avgpool"),                        # reductions: gradient reads no value
    **dict.fromkeys(["split", "split_with_sizes", "unbind", "unsafe_split", "unsafe_split_with_sizes"], "split"),
    **dict.fromkeys(["_log_softmax", "nll_loss_forward"], "xent"),
}
"""aten op packet name -> ir.OPS kind; packets not listed are "other"."""

_READS_INPUT = {"avg_pool1d", "avg_pool2d", "avg_pool3d", "_adaptive_avg_pool2d", "_adaptive_avg_pool3d"}
_LIKE = {"empty_like", "zeros_like", "ones_like", "full_like", "rand_like", "randn_like", "new_empty",
         "new_empty_strided", "new_zeros", "new_ones", "new_full"}   # read only their argument's metadata


def _saved(packet: str, kind: str, args, ins: tuple[str, ...], outs: tuple[str, ...]) -> tuple[str, ...] | None:
    """What torch's backward of this op reads, where it differs from ir.OPS[kind] (module docstring);
    None keeps the OPS default. ``ins``: the node's input values (first = the op's first tensor argument)."""
    if kind == "bn":
        return ins[:1] + outs[1:3]
    if kind == "maxpool":
        return ins[:1] + outs[1:2]
    if packet == "addmm":
        return ins[1:3]
    if kind == "mul" and len(args) > 1 and not isinstance(args[1], torch.Tensor):
        return ()
    if packet in _READS_INPUT:
        return ins[:1]
    if packet == "_log_softmax":
        return outs
    if packet == "nll_loss_forward":
        return ins
    return None


@dataclass
class _Record:
    """One traced op before it becomes a Node (the cross-entropy pair is merged first)."""

    name: str
    packet: str
    kind: str
    inputs: tuple[str, ...]
    outputs: list[tuple[str, tuple[int, ...], str, int]]
    saved: tuple[str, ...] | None
    flops: int
    attrs: tuple = ()


def _storage(t: torch.Tensor) -> int:
    return t.untyped_storage()._cdata


def _dtype(t: torch.Tensor) -> str:
    return str(t.dtype).removeprefix("torch.")


class _Recorder(TorchDispatchMode):
    """Turns dispatched aten ops into ``records`` (module docstring); ``builder`` holds the values."""

    def __init__(self, builder: GraphBuilder):
        super().__init__()
        self.builder = builder
        self.records: list[_Record] = []
        self.by_storage: dict[int, str] = {}   # storage -> the value it holds now
        self.by_id: dict[int, str] = {}        # split parts: tensor object -> value (they share a storage)
        self.keep: list[torch.Tensor] = []     # every tensor seen: storages and ids stay unique
        self.consts = 0

    def declare(self, t: torch.Tensor, name: str, kind: str) -> str:
        self.builder.value(name, tuple(t.shape), _dtype(t), kind, t.element_size())
        self.keep.append(t)
        self.by_storage.setdefault(_storage(t), name)
        return name

    def lookup(self, t: torch.Tensor) -> str | None:
        return self.by_id.get(id(t)) or self.by_storage.get(_storage(t))

    def read(self, t: torch.Tensor) -> str:
        """The value ``t`` holds; an unknown tensor becomes an "input" value const<k>."""
        name = self.lookup(t)
        if name is None:
            name = self.declare(t, f"const{self.consts}", "input")
            self.consts += 1
        return name

    def assign(self, t: torch.Tensor, name: str) -> None:
        self.keep.append(t)
        if id(t) in self.by_id:
            self.by_id[id(t)] = name
        else:
            self.by_storage[_storage(t)] = name

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        packet = func.overloadpacket.__name__
        if packet in _LIKE:
            return out
        inputs = [x for x in tree_flatten((args, kwargs))[0] if isinstance(x, torch.Tensor)]
        outputs = [x for x in tree_flatten(out)[0] if isinstance(x, torch.Tensor)]
        known = [x for x in inputs if self.lookup(x) is not None]
        if not known or not outputs:
            return out
        kind = ATEN.get(packet, "other")
        if kind == "split":
            self._split(func, packet, args, kwargs, out, known[0], outputs)
            return out
        fresh = outputs if func._schema.is_mutable else [o for o in outputs if self.lookup(o) is None]
        fresh = [o for o in fresh if o.numel() > 0]
        if not any(o.is_floating_point() for o in fresh):
            return out
        self._record(func, packet, kind, args, kwargs, out, inputs, fresh)
        return out

    def _names(self, packet: str, outputs: list[torch.Tensor]) -> tuple[str, list]:
        node = f"{packet}_{len(self.records)}"
        names = [node if k == 0 else f"{node}.{k}" for k in range(len(outputs))]
        return node, [(n, tuple(o.shape), _dtype(o), o.element_size()) for n, o in zip(names, outputs)]

    def _record(self, func, packet, kind, args, kwargs, out, inputs, fresh) -> None:
        ins = tuple(dict.fromkeys(self.read(x) for x in inputs))     # deduplicated, in argument order
        node, outs = self._names(packet, fresh)
        for o, spec in zip(fresh, outs):
            self.assign(o, spec[0])
        saved = _saved(packet, kind, args, ins, tuple(s[0] for s in outs))
        self.records.append(_Record(node, packet, kind, ins, outs, saved, flop_count(func, args, kwargs, out),
                                    (("aten", packet),)))

    def _split(self, func, packet, args, kwargs, out, source, parts) -> None:
        """A split of an activation: one value per part, registered by tensor identity (module docstring)."""
        src = self.lookup(source)
        if src in self.builder.values:                     # an input or a parameter (acts come at build)
            return
        node, outs = self._names(packet, parts)
        for o, spec in zip(parts, outs):
            self.keep.append(o)
            self.by_id[id(o)] = spec[0]
        pos = 1 if packet == "unbind" else 2                # unbind(self, dim); split(self, size, dim)
        dim = args[pos] if len(args) > pos else kwargs.get("dim", 0)
        self.records.append(_Record(node, packet, "split", (src,), outs, None, flop_count(func, args, kwargs, out),
                                    (("aten", packet), ("parts", len(parts)), ("dim", dim))))


def _merge_xent(records: list[_Record]) -> list[_Record]:
    """_log_softmax followed by nll_loss_forward, the log-probabilities read by the nll_loss alone -> one
    "xent" node at the nll_loss's place reading logits and target (module docstring)."""
    readers = Counter(v for r in records for v in r.inputs)
    writer = {spec[0]: i for i, r in enumerate(records) for spec in r.outputs}
    merged: list[_Record | None] = list(records)
    for i, r in enumerate(records):
        j = writer.get(r.inputs[0]) if r.packet == "nll_loss_forward" else None
        if j is None or records[j].packet != "_log_softmax" or readers[r.inputs[0]] != 1:
            continue
        ins = records[j].inputs + r.inputs[1:]
        name = r.name.replace("nll_loss_forward", "cross_entropy")
        merged[i] = _Record(name, "cross_entropy", "xent", ins, r.outputs, ins, records[j].flops + r.flops,
                            (("aten", "_log_softmax+nll_loss_forward"),))
        merged[j] = None
    return [r for r in merged if r is not None]


def _fake_inputs(module: torch.nn.Module, inputs: Sequence) -> tuple[FakeTensorMode, dict, list]:
    """The FakeTensorMode to run under — the one the module's or inputs' fake tensors belong to, else a new
    one — with fake versions of the parameters/buffers (by qualified name) and of the inputs."""
    state = {**dict(module.named_parameters()), **dict(module.named_buffers())}
    fakes = [t for t in [*state.values(), *inputs] if isinstance(t, FakeTensor)]
    mode = fakes[0].fake_mode if fakes else FakeTensorMode(allow_non_fake_inputs=True)   # real loss_fn targets

    def fake(t):
        return mode.from_tensor(t) if isinstance(t, torch.Tensor) and not isinstance(t, FakeTensor) else t

    return mode, {k: fake(v) for k, v in state.items()}, [fake(x) for x in inputs]


def trace(module: torch.nn.Module, example_inputs: torch.Tensor | Sequence,
          loss_fn: Callable[[object], torch.Tensor] | None = None, name: str = "graph") -> Graph:
    """Trace ``module(*example_inputs)`` (then ``loss_fn`` on its output, if given) into a Graph whose loss is
    the resulting scalar. Runs under FakeTensorMode: the module (parameters, buffers) and inputs may be real
    or fake (made under one FakeTensorMode); real ones are converted, nothing real is computed or changed.

    Values: inputs "input<i>" (i = position in ``example_inputs``; non-tensors are passed through), params
    by qualified name, activations "<aten packet>_<k>" (bytes = numel × element size). Node ops, saved values
    and FLOPs: module docstring (ATEN, _saved; FLOPs from remat.formulas.op_flops.flop_count).

    Raises UsageError("loss") when the result is not a floating-point scalar written by a traced op.
    Source: Chen et al. 2016 §3 (graph); torch._subclasses.fake_tensor.FakeTensorMode, TorchDispatchMode.
    """
    inputs = [example_inputs] if isinstance(example_inputs, torch.Tensor) else list(example_inputs)
    mode, state, inputs = _fake_inputs(module, inputs)
    recorder = _Recorder(GraphBuilder(name))
    for i, x in enumerate(inputs):
        if isinstance(x, torch.Tensor):
            recorder.declare(x, f"input{i}", "input")
    for key, t in state.items():
        if _storage(t) not in recorder.by_storage:        # tied weights: one value
            recorder.declare(t, key, "param")
    with mode, recorder:
        out = torch.func.functional_call(module, state, tuple(inputs))
        loss = loss_fn(out) if loss_fn is not None else out
    return _build(recorder, loss)


def _build(recorder: _Recorder, loss) -> Graph:
    if not isinstance(loss, torch.Tensor) or loss.numel() != 1 or not loss.is_floating_point():
        shape = tuple(loss.shape) if isinstance(loss, torch.Tensor) else type(loss).__name__
        raise UsageError("loss", f"the traced result is {shape}, not a floating-point scalar; pass a loss_fn")
    name = recorder.lookup(loss)
    if name is None or name in recorder.builder.values:      # not written by an op (acts come below)
        raise UsageError("loss", "the loss is not computed by the traced forward")
    builder = recorder.builder
    for r in _merge_xent(recorder.records):
        builder.node(r.kind, r.inputs, r.outputs, name=r.name, flops=r.flops, saved=r.saved,
                     attrs=r.attrs)
    return builder.build(name)


def other_ops(graph: Graph) -> dict[str, int]:
    """aten packets that fell into "other" (conservative: the gradient reads every input and output), with
    their node counts, most frequent first — what an experiment should report beside a traced graph."""
    counts = Counter(dict(n.attrs).get("aten", n.name) for n in graph.nodes if n.op == "other")
    return dict(counts.most_common())
