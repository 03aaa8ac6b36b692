"""Chen et al. 2016 Algorithm 2: the gradient graph with mirror counts, as an ordered program of steps.

Given a Graph and a mirror count m(node) ∈ {0, 1} per forward node (0: keep its outputs for the backward;
1: drop them after their last forward reader and recompute them once, in the backward, before the first
gradient step that needs them), ``build_program`` emits the execution order the static memory planner
(``remat.graph.memory``) allocates over:

    forward    every node in topological order, writing its outputs (value ids = value names)
    recompute  a mirror copy of a dropped node (value ids "name@r"), emitted just in time: when a gradient
               step needs a dropped value, its producer is recomputed from kept values and from mirrors
               recomputed earlier — for a chain cut into segments this re-runs one segment at a time,
               exactly Algorithm 1
    backward   the gradient node of every forward node, in reverse topological order: reads the gradients
               of its outputs ("d:name") and what it saved (originals if kept, mirrors if dropped), writes
               or accumulates the gradients of its activation inputs

Mirror counts above 1 (Chen's recursion, §4.4) are what ``remat.schedules.recursive``/``revolve`` run on the
numpy chain; on general graphs this module supports 0 and 1 (UsageError("mirror") otherwise).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Mapping

from remat.errors import UsageError
from remat.graph.ir import Graph, Node

Phase = Literal["forward", "recompute", "backward"]


def grad(name: str) -> str:
    """The value id of the gradient of value ``name``."""
    return f"d:{name}"


def mirror(name: str) -> str:
    """The value id of the recomputed (mirror) copy of value ``name``."""
    return f"{name}@r"


def base(value_id: str) -> str:
    """The graph value a value id refers to: "d:x" -> "x", "x@r" -> "x", "x" -> "x"."""
    return value_id.removeprefix("d:").removesuffix("@r")


@dataclass(frozen=True, slots=True)
class Step:
    """One op of the program. ``reads``: value ids read (accumulated gradients included); ``writes``: value
    ids created; ``accumulates``: gradient ids added into (already live); ``inplace``: the read value whose
    storage the first write may take when this step is its last reader (None: not in-place capable)."""

    phase: Phase
    node: str
    reads: tuple[str, ...]
    writes: tuple[str, ...]
    accumulates: tuple[str, ...] = ()
    inplace: str | None = None


@dataclass(frozen=True)
class Program:
    """A graph's forward, recompute and backward steps under mirror counts ``mirror`` (node -> 0/1).
    ``sizes``: bytes per value id; ``initial``: value ids live before step 0 (the data inputs)."""

    graph: Graph
    steps: tuple[Step, ...]
    sizes: dict[str, int]
    initial: tuple[str, ...]
    mirror: dict[str, int]

    @property
    def recompute_flops(self) -> int:
        """FLOPs of the recompute steps (the forward FLOPs of the mirrored nodes)."""
        flops = {n.name: n.flops for n in self.graph.nodes}
        return sum(flops[s.node] for s in self.steps if s.phase == "recompute")

    @property
    def recomputed_nodes(self) -> int:
        """Recompute steps: forward nodes run a second time (each at most once)."""
        return sum(s.phase == "recompute" for s in self.steps)


def build_program(graph: Graph, mirror_count: Mapping[str, int] | None = None) -> Program:
    """The program of ``graph`` under ``mirror_count`` (node name -> 0 or 1; missing nodes: 0).

    Raises UsageError("mirror") for a count other than 0/1 or an unknown node name.
    Source: Chen et al. 2016, Algorithm 2 (mirror counts), Algorithm 1 (segment-wise recomputation).
    """
    m = _mirror_counts(graph, mirror_count or {})
    builder = _Builder(graph, m)
    for node in graph.nodes:
        builder.forward(node)
    for node in reversed(graph.nodes):
        builder.backward(node)
    return Program(graph, tuple(builder.steps), builder.sizes, builder.initial, m)


def _mirror_counts(graph: Graph, given: Mapping[str, int]) -> dict[str, int]:
    names = {n.name for n in graph.nodes}
    for name, count in given.items():
        if name not in names:
            raise UsageError("mirror", f"no node named {name!r} in {graph.name}")
        if count not in (0, 1):
            raise UsageError("mirror", f"mirror count of {name} must be 0 or 1, got {count}")
    return {n.name: int(given.get(n.name, 0)) for n in graph.nodes}


class _Builder:
    """Emits the steps; tracks which gradients and mirrors exist so far."""

    def __init__(self, graph: Graph, m: dict[str, int]):
        self.graph, self.m = graph, m
        self.producer = graph.producer()
        self.position = {n.name: i for i, n in enumerate(graph.nodes)}
        self.steps: list[Step] = []
        self.initial = tuple(v.name for v in graph.values.values() if v.kind == "input")
        self.sizes = {name: graph.values[name].nbytes for name in self.initial}
        self.has_grad: set[str] = set()
        self.mirrored: set[str] = set()

    def _dropped(self, value: str) -> bool:
        node = self.producer.get(value)
        return node is not None and self.m[node.name] == 1

    def _inplace(self, node: Node, reads: tuple[str, ...]) -> str | None:
        if not node.inplace or not node.inputs or self.graph.values[node.inputs[0]].kind != "act":
            return None
        return reads[0]

    def forward(self, node: Node) -> None:
        reads = self._live_inputs(node, lambda v: v)
        for v in node.outputs:
            self.sizes[v] = self.graph.values[v].nbytes
        self.steps.append(Step("forward", node.name, reads, node.outputs, inplace=self._inplace(node, reads)))

    def _live_inputs(self, node: Node, name_of) -> tuple[str, ...]:
        return tuple(name_of(v) for v in node.inputs if self.graph.values[v].kind != "param")

    def _saved_id(self, value: str) -> str:
        """The id a gradient or recompute step reads for ``value``: its mirror if dropped (recomputed now, with
        the dropped values it depends on, if not yet), else the original."""
        if not self._dropped(value):
            return value
        if value not in self.mirrored:
            for node in self._to_recompute(value):
                self._recompute(node)
        return mirror(value)

    def _to_recompute(self, value: str) -> list[Node]:
        """The dropped, not yet mirrored producers ``value`` depends on through dropped values, in forward
        order (iterative: a segment can be thousands of nodes long)."""
        found, stack = {}, [self.producer[value]]
        while stack:
            node = stack.pop()
            if node.name in found:
                continue
            found[node.name] = node
            stack.extend(self.producer[v] for v in node.inputs
                         if self._dropped(v) and v not in self.mirrored)
        return sorted(found.values(), key=lambda n: self.position[n.name])

    def _recompute(self, node: Node) -> None:
        reads = self._live_inputs(node, lambda v: mirror(v) if self._dropped(v) else v)
        writes = tuple(mirror(v) for v in node.outputs)
        for v in node.outputs:
            self.sizes[mirror(v)] = self.graph.values[v].nbytes
            self.mirrored.add(v)
        self.steps.append(Step("recompute", node.name, reads, writes, inplace=self._inplace(node, reads)))

    def backward(self, node: Node) -> None:
        grads_in = tuple(grad(v) for v in node.outputs if v in self.has_grad)
        if not grads_in and self.graph.loss not in node.outputs:
            return  # nothing flows back through this node
        saved = tuple(self._saved_id(v) for v in node.saved)
        writes, accumulates = [], []
        for v in dict.fromkeys(self.graph.grad_inputs(node)):
            (accumulates if v in self.has_grad else writes).append(grad(v))
            self.sizes[grad(v)] = self.graph.values[v].nbytes
            self.has_grad.add(v)
        inplace = grads_in[0] if node.inplace and grads_in and writes else None
        self.steps.append(Step("backward", node.name, grads_in + saved + tuple(accumulates), tuple(writes),
                               tuple(accumulates), inplace))
