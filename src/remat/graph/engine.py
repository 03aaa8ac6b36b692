"""The numpy engine for Chen et al. 2016 §3: execute a Program step by step, every value stored where the
static memory plan put it, so a wrong plan (a tag reused while its value is still to be read, a value freed
early) changes the gradients or raises.

    program = build_program(graph, mirror)           # remat.graph.program (Algorithm 2)
    plan = plan_memory(program, "sharing")           # remat.graph.memory (§3)
    loss, grads = execute(program, params, inputs, plan)

Each op computes its outputs as fresh arrays, which are then copied into the value's storage: one numpy
buffer per tag, the value a view of its first ``nbytes`` bytes. The step's inputs keep their storage while
its outputs are written (only an in-place step's source may hand its tag to the output), so a plan that
gives an output a tag still held — by any live value, the step's own inputs included — raises PlanError, as
does a tag too small for its value or a read of a value whose tag another value now holds; a value's
storage is poisoned (NaN) when it dies. Without a plan every value keeps
its own array (the naive backward). Gradients: parameters' (float arrays, accumulated in step order, outside
the plan — Chen's feature-map memory excludes them).
"""

from __future__ import annotations

from typing import Callable, Mapping

import numpy as np

from remat.graph.ir import Graph, Node
from remat.graph.memory import MemoryPlan, readers
from remat.graph.program import Program, base, grad

BN_EPS = 1e-5


class PlanError(RuntimeError):
    """A step read a value whose storage the memory plan had given to another value (a planner bug)."""


# --- ops: forward(node, inputs) -> outputs; backward(node, saved, douts) -> input gradients -----------------

def _bn_stats(x):
    mean = x.mean(axis=0)
    inv = 1.0 / np.sqrt(x.var(axis=0) + BN_EPS)
    return (x - mean) * inv, inv


def _forward(node: Node, ins: list) -> list:
    op, a = node.op, ins
    if op == "linear":
        y = a[0] @ a[1]
        return [y + a[2] if len(a) > 2 else y]
    if op == "bn":
        xhat, _ = _bn_stats(a[0])
        return [xhat * a[1] + a[2]]
    if op == "relu":
        return [np.maximum(a[0], 0)]
    if op == "sigmoid":
        return [1.0 / (1.0 + np.exp(-a[0]))]
    if op == "tanh":
        return [np.tanh(a[0])]
    if op == "add":
        return [a[0] + a[1]]
    if op == "mul":
        return [a[0] * a[1]]
    if op == "split":
        return [p.copy() for p in np.split(a[0], len(node.outputs), axis=-1)]
    if op == "xent":
        return [_xent(a[0], a[1])[0]]
    raise NotImplementedError(f"the numpy engine has no op {op!r}")


def _xent(logits, targets):
    """Mean softmax cross-entropy over rows: (loss as a 0-d array, softmax probabilities)."""
    shifted = logits - logits.max(axis=1, keepdims=True)
    p = np.exp(shifted)
    p /= p.sum(axis=1, keepdims=True)
    rows = np.arange(len(targets))
    return np.asarray(-np.log(p[rows, targets]).mean(), dtype=logits.dtype), p


def _backward(node: Node, x: Callable[[int], np.ndarray], y: Callable[[int], np.ndarray], dy: list) -> list:
    """Input gradients of ``node`` (None where no gradient), from x(i) (input i), y(j) (output j) and dy."""
    op, g = node.op, dy[0]
    if op == "linear":
        w = x(1)
        return [g @ w.T, x(0).T @ g, g.sum(axis=0)][:len(node.inputs)]
    if op == "bn":
        xhat, inv = _bn_stats(x(0))
        gamma = x(1)
        dxhat = g * gamma
        dx = (dxhat - dxhat.mean(axis=0) - xhat * (dxhat * xhat).mean(axis=0)) * inv
        return [dx, (g * xhat).sum(axis=0), g.sum(axis=0)]
    if op == "relu":
        return [g * (y(0) > 0)]
    if op == "sigmoid":
        out = y(0)
        return [g * out * (1.0 - out)]
    if op == "tanh":
        out = y(0)
        return [g * (1.0 - out * out)]
    if op == "add":
        return [g.copy(), g.copy()]
    if op == "mul":
        return [g * x(1), g * x(0)]
    if op == "split":
        return [np.concatenate(dy, axis=-1)]
    if op == "xent":
        logits, targets = x(0), x(1)
        _, p = _xent(logits, targets)
        p[np.arange(len(targets)), targets] -= 1.0
        return [p * (g / len(targets)), None]
    raise NotImplementedError(f"the numpy engine has no backward for {op!r}")


# --- the executor ----------------------------------------------------------------------------------------------

class _Store:
    """Value id -> array: in its tag's buffer under a plan, else its own array."""

    def __init__(self, program: Program, plan: MemoryPlan | None):
        self.program, self.plan = program, plan
        self.arrays: dict[str, np.ndarray] = {}
        self.holder: dict[int, str] = {}
        self.buffers = [np.empty(n, dtype=np.uint8) for n in plan.tag_bytes] if plan else []

    def write(self, v: str, array: np.ndarray) -> None:
        if self.plan is None:
            self.arrays[v] = array
            return
        tag = self.plan.tag_of[v]
        if self.holder.get(tag, v) != v:
            raise PlanError(f"{v} written over {self.holder[tag]}, still live, in storage tag {tag}")
        if array.nbytes > self.buffers[tag].nbytes:
            raise PlanError(f"{v} ({array.nbytes} bytes) does not fit tag {tag} ({self.buffers[tag].nbytes} bytes)")
        view = self.buffers[tag][:array.nbytes].view(array.dtype).reshape(array.shape)
        np.copyto(view, array)
        self.arrays[v], self.holder[tag] = view, v

    def read(self, v: str) -> np.ndarray:
        if self.plan is not None and self.holder.get(self.plan.tag_of[v]) != v:
            raise PlanError(f"{v} read after its storage went to {self.holder.get(self.plan.tag_of[v])}")
        return self.arrays[v]

    def release(self, v: str) -> None:
        array = self.arrays.pop(v)
        if self.plan is not None and self.holder.get(self.plan.tag_of[v]) == v:
            if array.dtype.kind == "f":
                array.fill(np.nan)
            del self.holder[self.plan.tag_of[v]]


def execute(program: Program, params: Mapping[str, np.ndarray], inputs: Mapping[str, np.ndarray],
            plan: MemoryPlan | None = None) -> tuple[float, dict[str, np.ndarray]]:
    """Run ``program``: returns (loss, {param name: gradient}). ``inputs``: the graph's input values.
    Raises PlanError if ``plan`` let a value be overwritten before its last read."""
    graph, store = program.graph, _Store(program, plan)
    nodes = {n.name: n for n in graph.nodes}
    count, pgrads, loss = readers(program), {}, None
    for v in program.initial:
        store.write(v, np.asarray(inputs[v]))
    for step in program.steps:
        node = nodes[step.node]
        if step.phase == "backward":
            results = _run_backward(graph, node, step, store, params, pgrads)
        else:
            ins = [params[v] if graph.values[v].kind == "param" else store.read(r)
                   for v, r in zip(node.inputs, _ids(graph, node, step))]
            results = dict(zip(step.writes, _forward(node, ins)))
            if graph.loss in node.outputs and step.phase == "forward":
                loss = float(results[graph.loss])
        dying = []
        for v in set(step.reads):
            count[v] -= 1
            if count[v] == 0:
                dying.append(v)
        if step.inplace in dying:            # only an in-place step's source may give its storage to an output
            dying.remove(step.inplace)
            store.release(step.inplace)
        for v, array in results.items():    # outputs land while the step's other inputs still hold theirs
            store.write(v, array)
        for v in dying + [v for v in results if count.get(v, 0) == 0]:
            store.release(v)
    return loss, pgrads


def _ids(graph: Graph, node: Node, step) -> list[str | None]:
    """The value id the step reads for each input of ``node`` (None for parameters)."""
    it = iter(step.reads)
    return [None if graph.values[v].kind == "param" else next(it) for v in node.inputs]


def _run_backward(graph: Graph, node: Node, step, store: _Store, params, pgrads) -> dict:
    """One gradient step: reads d(outputs) and saved values; returns {grad id: new or accumulated array}."""
    saved = {base(r): r for r in step.reads if not r.startswith("d:")}

    def fetch(v: str) -> np.ndarray:
        if graph.values[v].kind == "param":
            return params[v]
        if v not in saved or v not in node.saved:
            raise PlanError(f"the gradient of {node.name} reads {v}, which it did not save")
        return store.read(saved[v])

    dy = [np.ones((), dtype=graph.values[v].dtype) if v == graph.loss       # the backward's seed
          else store.read(grad(v)) if grad(v) in step.reads
          else np.zeros(graph.values[v].shape, dtype=graph.values[v].dtype)   # read back by nothing
          for v in node.outputs]
    dx = _backward(node, lambda i: fetch(node.inputs[i]), lambda j: fetch(node.outputs[j]), dy)
    results: dict[str, np.ndarray] = {}
    for v, d in zip(node.inputs, dx):
        if d is None or graph.values[v].kind == "input":
            continue
        if graph.values[v].kind == "param":
            pgrads[v] = pgrads[v] + d if v in pgrads else d
            continue
        key = grad(v)
        previous = results.get(key)
        if previous is None and key in step.accumulates:
            previous = store.read(key)
        results[key] = d if previous is None else previous + d
    return results


def fd_relative_error(program: Program, params: Mapping[str, np.ndarray], inputs: Mapping[str, np.ndarray],
                      grads: Mapping[str, np.ndarray], probes: int = 2, eps: float = 1e-6, seed: int = 0) -> float:
    """Central differences (L(θ + ε) − L(θ − ε)) / 2ε at ``probes`` random entries of every parameter against
    ``grads``: ‖fd − g‖₂ / max(‖fd‖₂, ‖g‖₂) (dimensionless). Float64 parameters needed for digits at ε = 1e-6.
    Checks the naive backward itself (every plan is then compared with it bitwise)."""
    rng = np.random.default_rng(seed)
    trial = {k: v.copy() for k, v in params.items()}
    numeric, analytic = [], []
    for name, array in trial.items():
        flat = array.reshape(-1)
        for i in rng.choice(flat.size, size=min(probes, flat.size), replace=False):
            saved, losses = flat[i], []
            for step in (eps, -eps):
                flat[i] = saved + step
                losses.append(execute(program, trial, inputs)[0])
            flat[i] = saved
            numeric.append((losses[0] - losses[1]) / (2 * eps))
            analytic.append(grads[name].reshape(-1)[i])
    numeric, analytic = np.array(numeric), np.array(analytic)
    scale = max(np.linalg.norm(numeric), np.linalg.norm(analytic), np.finfo(np.float64).tiny)
    return float(np.linalg.norm(numeric - analytic) / scale)
