"""Small numpy nets as Graphs, with parameters and inputs, for the engine's checks (Chen et al. 2016 §3–4):
the shapes of the paper's networks at sizes numpy runs in milliseconds.

    graph, params, inputs = residual_net(blocks=4, width=8, batch=4)
    mlp_chain      linear–ReLU–linear per layer (the chain of remat.chain), softmax head
    residual_net   blocks of linear–BN–ReLU–linear–BN, + shortcut, ReLU (ResNet's block with 1×1 "convs")
    lstm_net       stacked LSTM unrolled over time, a softmax per step, losses summed

Every function returns (Graph, {param: array}, {input: array}), float64 by default, seeded.
Raises UsageError naming a size < 1.
"""

from __future__ import annotations

import numpy as np

from remat.formulas.chen import check_count
from remat.graph.ir import Graph, GraphBuilder


class _Net:
    """GraphBuilder plus parameter arrays; names values v0, v1, ... in order."""

    def __init__(self, name: str, batch: int, dtype: str, seed: int):
        self.b, self.dtype, self.rng = GraphBuilder(name), np.dtype(dtype), np.random.default_rng(seed)
        self.batch, self.params, self.inputs = batch, {}, {}

    def param(self, name: str, shape: tuple, scale: float, offset: float = 0.0) -> str:
        self.params[name] = (self.rng.standard_normal(shape) * scale + offset).astype(self.dtype)
        return self.b.value(name, shape, self.dtype.name, "param", self.dtype.itemsize)

    def data(self, name: str, array: np.ndarray) -> str:
        self.inputs[name] = array
        return self.b.value(name, array.shape, array.dtype.name, "input", array.dtype.itemsize)

    def op(self, op: str, inputs: tuple, width: int | None = None, parts: int = 1, flops: int = 0,
           scalar: bool = False) -> tuple[str, ...]:
        shape = () if scalar else (self.batch, width)
        outs = [(f"v{len(self.b.values)}_{k}", shape, self.dtype.name, self.dtype.itemsize) for k in range(parts)]
        return self.b.node(op, inputs, outs, flops=flops)

    def linear(self, x: str, d_in: int, d_out: int, tag: str, bias: bool = True) -> str:
        ins = (x, self.param(f"{tag}.W", (d_in, d_out), np.sqrt(1.0 / d_in)))
        if bias:
            ins += (self.param(f"{tag}.b", (d_out,), 0.1),)
        return self.op("linear", ins, d_out, flops=2 * self.batch * d_in * d_out)[0]

    def bn(self, x: str, width: int, tag: str) -> str:
        return self.op("bn", (x, self.param(f"{tag}.gamma", (width,), 0.1, 1.0),
                              self.param(f"{tag}.beta", (width,), 0.1)), width, flops=8 * self.batch * width)[0]

    def xent(self, logits: str, classes: int, name: str) -> str:
        targets = self.data(name, self.rng.integers(0, classes, self.batch))
        return self.op("xent", (logits, targets), scalar=True, flops=4 * self.batch * classes)[0]

    def build(self, loss: str) -> tuple[Graph, dict, dict]:
        return self.b.build(loss), self.params, self.inputs


def _start(name, batch, width, dtype, seed, *counts):
    for field, value in counts:
        check_count(value, field)
    net = _Net(name, batch, dtype, seed)
    return net, net.data("x", net.rng.standard_normal((batch, width)).astype(net.dtype))


def mlp_chain(layers: int = 8, width: int = 8, batch: int = 4, classes: int = 4, dtype: str = "float64",
              seed: int = 0) -> tuple[Graph, dict, dict]:
    """x_{i+1} = ReLU(x_i·W1 + b1)·W2 + b2 for ``layers`` layers ([batch, width] each), then a softmax over
    ``classes``."""
    net, x = _start("mlp_chain", batch, width, dtype, seed, ("layers", layers), ("width", width),
                    ("batch", batch), ("classes", classes))
    for i in range(layers):
        h = net.op("relu", (net.linear(x, width, width, f"l{i}.1"),), width)[0]
        x = net.linear(h, width, width, f"l{i}.2")
    return net.build(net.xent(net.linear(x, width, classes, "head"), classes, "targets"))


def residual_net(blocks: int = 4, width: int = 8, batch: int = 4, classes: int = 4, dtype: str = "float64",
                 seed: int = 0) -> tuple[Graph, dict, dict]:
    """A stem linear, ``blocks`` residual blocks y = ReLU(x + BN(BN(x·W1)ReLU·W2)) (ResNet's block with
    1×1 convolutions as matmuls, [batch, width]), a softmax head."""
    net, x = _start("residual_net", batch, width, dtype, seed, ("blocks", blocks), ("width", width),
                    ("batch", batch), ("classes", classes))
    x = net.op("relu", (net.bn(net.linear(x, width, width, "stem", bias=False), width, "stem.bn"),), width)[0]
    for i in range(blocks):
        h = net.op("relu", (net.bn(net.linear(x, width, width, f"b{i}.1", bias=False), width, f"b{i}.bn1"),),
                   width)[0]
        h = net.bn(net.linear(h, width, width, f"b{i}.2", bias=False), width, f"b{i}.bn2")
        x = net.op("relu", (net.op("add", (h, x), width)[0],), width)[0]
    return net.build(net.xent(net.linear(x, width, classes, "head"), classes, "targets"))


def lstm_net(layers: int = 2, steps: int = 4, hidden: int = 8, inputs: int = 4, batch: int = 4,
             classes: int = 5, dtype: str = "float64", seed: int = 0) -> tuple[Graph, dict, dict]:
    """A ``layers``-layer LSTM over ``steps`` time steps (gates = x·W_x + h·W_h + b, split into i, f, g, o;
    c' = f·c + i·g; h' = o·tanh(c')), a softmax over ``classes`` on the top h at every step, losses summed.
    States start at zero (step 0 has no h·W_h or f·c terms)."""
    for field, value in (("layers", layers), ("steps", steps), ("hidden", hidden), ("inputs", inputs),
                         ("batch", batch), ("classes", classes)):
        check_count(value, field)
    net = _Net("lstm_net", batch, dtype, seed)
    state: list[tuple[str, str] | None] = [None] * layers
    total = None
    for t in range(steps):
        x = net.data(f"x{t}", net.rng.standard_normal((batch, inputs)).astype(net.dtype))
        for l in range(layers):
            x, state[l] = _lstm_cell(net, x, state[l], inputs if l == 0 else hidden, hidden, f"l{l}")
        loss = net.xent(_shared(net, x, "head", hidden, classes, bias=True), classes, f"y{t}")
        total = loss if total is None else net.op("add", (total, loss), scalar=True)[0]
    return net.build(total)


def _lstm_cell(net: _Net, x: str, state, d_in: int, hidden: int, tag: str) -> tuple[str, tuple[str, str]]:
    gates = _shared(net, x, f"{tag}.x", d_in, 4 * hidden, bias=True)
    if state is not None:
        gates = net.op("add", (gates, _shared(net, state[0], f"{tag}.h", hidden, 4 * hidden)), 4 * hidden)[0]
    i, f, g, o = net.op("split", (gates,), hidden, parts=4)
    i, f, o = (net.op("sigmoid", (v,), hidden)[0] for v in (i, f, o))
    g = net.op("tanh", (g,), hidden)[0]
    c = net.op("mul", (i, g), hidden)[0]
    if state is not None:
        c = net.op("add", (net.op("mul", (f, state[1]), hidden)[0], c), hidden)[0]
    h = net.op("mul", (o, net.op("tanh", (c,), hidden)[0]), hidden)[0]
    return h, (h, c)


def _shared(net: _Net, x: str, tag: str, d_in: int, d_out: int, bias: bool = False) -> str:
    """x·W (+ b) with a weight shared over time steps, declared at its first use."""
    if f"{tag}.W" not in net.params:
        return net.linear(x, d_in, d_out, tag, bias=bias)
    ins = (x, f"{tag}.W") + ((f"{tag}.b",) if bias else ())
    return net.op("linear", ins, d_out, flops=2 * net.batch * d_in * d_out)[0]
