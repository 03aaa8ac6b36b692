"""The computation graph Chen et al. 2016 plan memory over (§3, Figure 2): values (tensors) and nodes (ops).

A ``Graph`` is a list of forward ``Node``s in topological order. Each node reads values and writes values;
each value has a size in bytes and a kind:

    input   data fed to the net (no gradient; counted as a feature map while it is live)
    param   a weight (excluded: Chen reports feature-map memory, without parameters or their gradients)
    act     an activation (a feature map), written by exactly one node

Per node, ``saved`` names the values its gradient node reads (a subset of its inputs and outputs, e.g. ReLU
reads its output, a convolution its input) — what decides liveness, in-place and what recomputation must
rebuild. ``OPS`` gives the defaults per op kind: which values the gradient reads, whether the output may
take input 0's storage (in-place, elementwise ops) and whether the op is cheap to recompute (Chen §4.2,
"drop bn-relu" in Figure 5: batch-norm, activations and pooling are; convolutions and matmuls are not, and
neither are sums, products and splits: a residual block's output is relu(x + f(x)), and dropping the sum
would chain the recomputation of every block's output back through all earlier blocks).

The graph is built by ``GraphBuilder`` (numpy nets in ``remat.graph.nets``; torch models traced under
FakeTensorMode in ``remat.graph.trace``). Its last node writes the scalar loss.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Literal

from remat.errors import UsageError

ValueKind = Literal["input", "param", "act"]


@dataclass(frozen=True, slots=True)
class Value:
    """A tensor of the graph: ``name``, ``nbytes`` (bytes), ``shape``, ``dtype`` (numpy name), ``kind``."""

    name: str
    nbytes: int
    shape: tuple[int, ...]
    dtype: str
    kind: ValueKind


@dataclass(frozen=True, slots=True)
class OpKind:
    """Defaults of one op kind: what its gradient reads (``reads_inputs``: indices of inputs;
    ``reads_outputs``: whether it reads the outputs), ``inplace`` (output may take input 0's storage when
    the node is that value's last reader), ``cheap`` (dropped by Chen §4.2's drop-cheap strategy)."""

    reads_inputs: tuple[int, ...] | Literal["all"]
    reads_outputs: bool
    inplace: bool
    cheap: bool


# Gradient needs as in MXNet/PyTorch's backward formulas (Chen §3's graph); "all" = every input.
OPS: dict[str, OpKind] = {
    "conv": OpKind("all", False, False, False),      # dW needs x, dx needs W
    "linear": OpKind("all", False, False, False),    # x·W + b
    "matmul": OpKind("all", False, False, False),
    "bn": OpKind((0,), False, False, True),          # batch norm (training): x; mean/var recomputed from x
    "relu": OpKind((), True, True, True),            # dx = dy·[y > 0]
    "sigmoid": OpKind((), True, True, True),         # dx = dy·y(1 − y)
    "tanh": OpKind((), True, True, True),            # dx = dy·(1 − y²)
    "add": OpKind((), False, True, False),           # kept: a residual sum dropped would chain recompute
    "mul": OpKind("all", False, True, False),        # da = dy·b, db = dy·a   back through every block
    "maxpool": OpKind((0,), True, False, True),      # argmax from x and y
    "avgpool": OpKind((), False, False, True),
    "split": OpKind((), False, False, False),         # equal parts along the last axis (LSTM gates)
    "xent": OpKind("all", False, False, True),       # softmax cross-entropy: logits and targets
    "other": OpKind("all", True, False, False),      # unknown op: conservatively reads everything
}


@dataclass(frozen=True, slots=True)
class Node:
    """One forward op: ``op`` (an OPS key), ``inputs`` and ``outputs`` (value names), ``saved`` (values its
    gradient reads), ``flops`` (forward FLOPs), ``inplace``/``cheap`` (see OpKind), ``attrs`` (op arguments
    for execution, e.g. {"parts": 4} for split)."""

    name: str
    op: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    saved: tuple[str, ...]
    flops: int = 0
    inplace: bool = False
    cheap: bool = False
    attrs: tuple = ()


@dataclass(frozen=True, eq=False)
class Graph:
    """Values by name and forward nodes in topological order; ``loss`` is the scalar the backward starts
    from. Construct through GraphBuilder (or ``Graph.checked``), which validates it."""

    values: dict[str, Value]
    nodes: tuple[Node, ...]
    loss: str
    name: str = "graph"

    @classmethod
    def checked(cls, values: dict[str, Value], nodes: list[Node], loss: str, name: str = "graph") -> "Graph":
        """Validate and build: every value read is an input/param or written earlier, written once; no cycle
        (nodes may come in any order: they are sorted topologically); ``loss`` is written by a node.
        Raises UsageError("graph") naming the offending node or value."""
        return cls(values, tuple(_topological(values, nodes)), _check_loss(values, nodes, loss), name)

    def producer(self) -> dict[str, Node]:
        """value name -> the node writing it (activations only)."""
        return self._producer

    @cached_property
    def _producer(self) -> dict[str, Node]:
        return {v: n for n in self.nodes for v in n.outputs}

    def activations(self) -> list[str]:
        """Names of the activation values, in the order they are written."""
        return [v for n in self.nodes for v in n.outputs]

    def grad_inputs(self, node: Node) -> tuple[str, ...]:
        """The inputs of ``node`` that get a gradient: activations (not data, not parameters)."""
        return tuple(v for v in node.inputs if self.values[v].kind == "act")

    def forward_flops(self) -> int:
        """FLOPs of one forward pass: the sum of the nodes' (FlopCounterMode's count for traced graphs)."""
        return sum(n.flops for n in self.nodes)

    @cached_property
    def crossing(self) -> list[tuple[str, ...]]:
        """For each position i (after node i): the activations written at ≤ i and read by a forward node > i
        (what a split there keeps; Chen 2016 Alg. 3)."""
        written, last = {}, {}
        for i, node in enumerate(self.nodes):
            for v in node.inputs:
                if self.values[v].kind == "act":
                    last[v] = i
            for v in node.outputs:
                written[v] = last[v] = i
        found: list[list[str]] = [[] for _ in self.nodes]
        for v, w in written.items():
            for i in range(w, last[v]):
                found[i].append(v)
        return [tuple(f) for f in found]


def _topological(values: dict[str, Value], nodes: list[Node]) -> list[Node]:
    """Kahn's algorithm, stable (keeps the given order where it is valid). Raises UsageError("graph")."""
    writer: dict[str, int] = {}
    for i, n in enumerate(nodes):
        for v in n.outputs:
            if v not in values:
                raise UsageError("graph", f"node {n.name} writes unknown value {v!r}")
            if values[v].kind != "act":
                raise UsageError("graph", f"node {n.name} writes {values[v].kind} value {v!r}")
            if v in writer:
                raise UsageError("graph", f"value {v!r} written by {nodes[writer[v]].name} and {n.name}")
            writer[v] = i
    deps: list[set[int]] = []
    for n in nodes:
        for v in n.inputs:
            if v not in values:
                raise UsageError("graph", f"node {n.name} reads unknown value {v!r}")
            if values[v].kind == "act" and v not in writer:
                raise UsageError("graph", f"node {n.name} reads {v!r}, which no node writes")
        deps.append({writer[v] for v in n.inputs if v in writer})
    return [nodes[i] for i in _kahn(deps, [n.name for n in nodes])]


def _kahn(deps: list[set[int]], names: list[str]) -> list[int]:
    import heapq

    users: list[list[int]] = [[] for _ in deps]
    missing = [len(d) for d in deps]
    for i, d in enumerate(deps):
        for j in d:
            users[j].append(i)
    ready = [i for i, m in enumerate(missing) if m == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for u in users[i]:
            missing[u] -= 1
            if missing[u] == 0:
                heapq.heappush(ready, u)
    if len(order) < len(deps):
        stuck = [names[i] for i, m in enumerate(missing) if m > 0]
        raise UsageError("graph", f"cycle through nodes {', '.join(stuck[:4])}")
    return order


def _check_loss(values: dict[str, Value], nodes: list[Node], loss: str) -> str:
    if loss not in values or not any(loss in n.outputs for n in nodes):
        raise UsageError("graph", f"loss {loss!r} is not written by any node")
    return loss


@dataclass
class GraphBuilder:
    """Builds a Graph node by node: ``value`` declares inputs/params, ``node`` appends an op and declares its
    outputs. ``saved``/``inplace``/``cheap`` default to OPS[op]."""

    name: str = "graph"
    values: dict[str, Value] = field(default_factory=dict)
    nodes: list[Node] = field(default_factory=list)

    def value(self, name: str, shape: tuple[int, ...], dtype: str, kind: ValueKind, itemsize: int) -> str:
        """Declare value ``name`` of ``shape`` (nbytes = itemsize × Π shape); returns the name.
        Raises UsageError("graph") if it is declared already."""
        if name in self.values:
            raise UsageError("graph", f"value {name!r} declared twice")
        size = itemsize
        for d in shape:
            size *= d
        self.values[name] = Value(name, size, tuple(shape), dtype, kind)
        return name

    def node(self, op: str, inputs: tuple[str, ...], outputs: list[tuple[str, tuple[int, ...], str, int]],
             name: str | None = None, flops: int = 0, saved: tuple[str, ...] | None = None, attrs: tuple = (),
             inplace: bool | None = None, cheap: bool | None = None) -> tuple[str, ...]:
        """Append node ``op`` reading ``inputs``; ``outputs`` = [(name, shape, dtype, itemsize)]. Returns the
        output names. Raises UsageError("graph") for an unknown op."""
        if op not in OPS:
            raise UsageError("graph", f"unknown op {op!r} (known: {', '.join(OPS)})")
        kind = OPS[op]
        outs = tuple(self.value(n, s, d, "act", size) for n, s, d, size in outputs)
        unknown = [v for v in (*inputs, *(saved or ())) if v not in self.values]
        if unknown:
            raise UsageError("graph", f"node {name or op} refers to undeclared values {unknown}")
        if saved is None:
            ins = inputs if kind.reads_inputs == "all" else tuple(inputs[i] for i in kind.reads_inputs)
            saved = ins + (outs if kind.reads_outputs else ())
        self.nodes.append(Node(name or f"{op}{len(self.nodes)}", op, tuple(inputs), outs,
                               tuple(v for v in saved if self.values[v].kind != "param"), flops,
                               kind.inplace if inplace is None else inplace,
                               kind.cheap if cheap is None else cheap, attrs))
        return outs

    def build(self, loss: str) -> Graph:
        """The validated Graph whose backward starts at ``loss`` (Graph.checked; UsageError("graph"))."""
        return Graph.checked(self.values, self.nodes, loss, self.name)
