"""remat.graph.trace: torch modules traced under FakeTensorMode into the Chen §3 graph (toy modules)."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch._subclasses.fake_tensor import FakeTensorMode

from remat.errors import UsageError
from remat.graph.ir import Graph
from remat.graph.trace import other_ops, trace
from remat.measure.flops import flop_counter_mode

N, C, H = 4, 8, 8          # batch, channels, spatial size of the toy ResNet
CLASSES = 10


class ToyResNet(nn.Module):
    """stem conv–bn–relu, one residual block (conv–bn, + identity, relu), max pool, global average pool, fc."""

    def __init__(self):
        super().__init__()
        self.conv0, self.bn0 = nn.Conv2d(3, C, 3, padding=1, bias=False), nn.BatchNorm2d(C)
        self.conv1, self.bn1 = nn.Conv2d(C, C, 3, padding=1, bias=False), nn.BatchNorm2d(C)
        self.pool, self.fc = nn.MaxPool2d(2), nn.Linear(C, CLASSES)

    def forward(self, x, y):
        h = F.relu(self.bn0(self.conv0(x)), inplace=True)
        h = F.relu(self.bn1(self.conv1(h)) + h)
        h = F.adaptive_avg_pool2d(self.pool(h), 1).flatten(1)     # flatten: a view
        return F.cross_entropy(self.fc(h), y)


class ToyLSTM(nn.Module):
    """Two steps of one LSTM cell (gates = x·Wx + h·Wh, chunked in four), loss = sum of the last h."""

    def __init__(self, d=5, hidden=6):
        super().__init__()
        self.hidden = hidden
        self.wx, self.wh = nn.Linear(d, 4 * hidden), nn.Linear(hidden, 4 * hidden)

    def forward(self, xs):
        h = c = torch.zeros(xs.shape[1], self.hidden)
        for x in xs:                                              # select: a view of the input
            i, f, g, o = (self.wx(x) + self.wh(h)).chunk(4, 1)
            c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
            h = torch.sigmoid(o) * torch.tanh(c)
        return h.sum()


def _resnet_graph() -> Graph:
    torch.manual_seed(0)
    return trace(ToyResNet(), (torch.randn(N, 3, H, H), torch.randint(0, CLASSES, (N,))), name="toy-resnet")


def _by_op(graph: Graph, op: str):
    return [n for n in graph.nodes if n.op == op]


def test_resnet_node_ops():
    graph = _resnet_graph()
    assert [n.op for n in graph.nodes] == ["conv", "bn", "relu", "conv", "bn", "add", "relu", "maxpool",
                                           "avgpool", "linear", "xent"]
    assert graph.name == "toy-resnet" and other_ops(graph) == {}
    assert graph.loss in graph.nodes[-1].outputs and graph.values[graph.loss].shape == ()


def test_resnet_value_bytes():
    graph = _resnet_graph()
    for v in graph.values.values():
        assert v.nbytes == math.prod(v.shape) * np.dtype(v.dtype).itemsize
    conv, pool = graph.nodes[0], _by_op(graph, "maxpool")[0]
    assert graph.values[conv.outputs[0]].nbytes == N * C * H * H * 4
    y, idx = (graph.values[v] for v in pool.outputs)       # torch keeps int64 argmax indices
    assert (y.dtype, idx.dtype) == ("float32", "int64") and idx.nbytes == 2 * y.nbytes == N * C * 4 * 4 * 8
    bn = graph.nodes[1]
    assert [graph.values[v].nbytes for v in bn.outputs] == [N * C * H * H * 4, C * 4, C * 4]
    assert graph.values["input0"].kind == "input" and graph.values["input1"].dtype == "int64"
    assert {v.name for v in graph.values.values() if v.kind == "param"} == {
        n for n, _ in [*ToyResNet().named_parameters(), *ToyResNet().named_buffers()]}


def test_views_are_not_values():
    graph = _resnet_graph()
    avg, fc = _by_op(graph, "avgpool")[0], _by_op(graph, "linear")[0]
    assert avg.outputs[0] in fc.inputs and "fc.weight" in fc.inputs     # through flatten and t()
    assert len([v for v in graph.values.values() if v.kind == "act"]) == sum(len(n.outputs) for n in graph.nodes)

    class Views(nn.Module):
        def forward(self, x):
            a = torch.relu(x)
            v = a.view(2, -1).t().reshape(-1, 2).unsqueeze(0).squeeze(0).transpose(0, 1).detach().flatten()
            b = torch.relu(a.permute(1, 0).expand(3, 4, 2)[1, 1:3])
            return torch.tanh(v).sum() + b.sum()

    g = trace(Views(), torch.randn(2, 4))
    first = g.nodes[0].outputs[0]
    assert [n.op for n in g.nodes] == ["relu", "relu", "tanh", "avgpool", "avgpool", "add"]   # a copy would be "other"
    assert g.nodes[1].inputs == (first,) and g.nodes[2].inputs == (first,)


def test_inplace_writes_a_new_value_seen_through_views():
    class InPlace(nn.Module):
        def forward(self, x):
            a = torch.relu(x)
            v = a.view(-1)
            a.mul_(2.0)                                       # the storage now holds a new value
            return torch.tanh(v).sum()

    g = trace(InPlace(), torch.randn(2, 4))
    relu, mul, tanh = g.nodes[:3]
    assert (mul.op, mul.inputs, mul.saved) == ("mul", relu.outputs, ())     # times a scalar: reads nothing
    assert mul.outputs != relu.outputs and tanh.inputs == mul.outputs


def test_params_not_saved_and_saved_follows_torch():
    graph = _resnet_graph()
    params = {v for v, val in graph.values.items() if val.kind == "param"}
    assert all(not params & set(n.saved) for n in graph.nodes)
    conv0, bn0, relu0 = graph.nodes[:3]
    assert conv0.saved == ("input0",)
    assert bn0.saved == (conv0.outputs[0],) + bn0.outputs[1:]      # x, save_mean, save_invstd
    assert relu0.saved == relu0.outputs and relu0.inputs == (bn0.outputs[0],)   # relu_: a new value
    pool = _by_op(graph, "maxpool")[0]
    assert pool.saved == (pool.inputs[0], pool.outputs[1])          # input and indices
    xent = graph.nodes[-1]
    assert xent.saved == xent.inputs == (_by_op(graph, "linear")[0].outputs[0], "input1")   # logits, target


def test_flops_equal_flop_counter_mode():
    graph = _resnet_graph()
    with FakeTensorMode():
        net, x, y = ToyResNet(), torch.randn(N, 3, H, H), torch.randint(0, CLASSES, (N,))
        with flop_counter_mode() as counter:
            net(x, y)
    assert graph.forward_flops() == counter.get_total_flops() > 0
    conv0 = graph.nodes[0]
    assert conv0.flops == 2 * N * C * H * H * 3 * 9


def test_topologically_valid():
    graph = _resnet_graph()
    again = Graph.checked(graph.values, list(reversed(graph.nodes)), graph.loss, graph.name)
    assert [n.name for n in again.nodes] == [n.name for n in graph.nodes]
    written = {v for v, val in graph.values.items() if val.kind != "act"}
    for n in graph.nodes:
        assert set(n.inputs) <= written and set(n.saved) <= set(n.inputs) | set(n.outputs)
        written |= set(n.outputs)


def test_fake_module_same_graph():
    real = _resnet_graph()
    with FakeTensorMode():
        net, x, y = ToyResNet(), torch.randn(N, 3, H, H), torch.randint(0, CLASSES, (N,))
    fake = trace(net, (x, y), name="toy-resnet")
    assert (fake.values, fake.nodes, fake.loss) == (real.values, real.nodes, real.loss)


def test_lstm_cell():
    graph = trace(ToyLSTM(), torch.randn(2, 3, 5))
    ops = [n.op for n in graph.nodes]
    step = ["linear", "linear", "add", "split", "sigmoid", "mul", "sigmoid", "tanh", "mul", "add", "sigmoid",
            "tanh", "mul"]
    assert ops == step + step + ["avgpool"]
    split = _by_op(graph, "split")[0]
    assert dict(split.attrs) == {"aten": "split", "parts": 4, "dim": 1}
    assert [graph.values[v].shape for v in split.outputs] == [(3, 6)] * 4 and split.saved == ()
    consts = [v for v in graph.values.values() if v.name.startswith("const")]
    assert [(v.kind, v.shape) for v in consts] == [("input", (3, 6))]          # torch.zeros: h = c
    assert graph.nodes[0].inputs == ("wx.bias", "input0", "wx.weight")          # x[t]: a view of the input
    mul = graph.nodes[5]                                                        # sigmoid(f) * c
    assert mul.saved == mul.inputs == (graph.nodes[4].outputs[0], consts[0].name)


def test_unknown_op_is_other_and_reported():
    class Odd(nn.Module):
        def forward(self, x):
            a = torch.exp(torch.relu(x))
            return torch.cat([a, a.sin()]).sum()

    graph = trace(Odd(), torch.randn(3, 4))
    assert other_ops(graph) == {"exp": 1, "sin": 1, "cat": 1}
    exp = graph.nodes[1]
    assert exp.op == "other" and not exp.cheap and exp.saved == exp.inputs + exp.outputs


def test_loss_must_be_a_traced_scalar():
    with pytest.raises(UsageError, match="loss"):
        trace(nn.Linear(3, 2), torch.randn(4, 3))
    with pytest.raises(UsageError, match="loss"):
        trace(nn.Identity(), torch.randn(()))
    graph = trace(nn.Linear(3, 2), torch.randn(4, 3), loss_fn=lambda out: out.pow(2).mean())
    assert [n.op for n in graph.nodes] == ["linear", "other", "avgpool"]
    target = torch.tensor([0, 1, 1, 0])                       # a real tensor captured by loss_fn: data
    graph = trace(nn.Linear(3, 2), torch.randn(4, 3), loss_fn=lambda out: F.cross_entropy(out, target))
    assert graph.nodes[-1].op == "xent" and graph.values["const0"].kind == "input"
    assert graph.nodes[-1].inputs == (graph.nodes[0].outputs[0], "const0")


def test_paper_resnet_ops():
    resnet = pytest.importorskip("remat.models.resnet")
    cfg = resnet.ResNetConfig(blocks=(3, 4, 6, 3), image=64, batch=2)          # ResNet-50, small images
    with FakeTensorMode():
        net, (x, y) = resnet.build_resnet(cfg), resnet.random_images(cfg)
        with flop_counter_mode() as counter:
            resnet.resnet_loss(net(x), y)
    graph = trace(net, (x,), loss_fn=lambda logits: resnet.resnet_loss(logits, y))
    blocks, projections = sum(cfg.blocks), 4
    assert Counter(n.op for n in graph.nodes) == {
        "conv": 1 + 3 * blocks + projections, "bn": 1 + 3 * blocks + projections, "relu": 1 + 3 * blocks,
        "add": blocks, "maxpool": 1, "avgpool": 1, "linear": 1, "xent": 1}
    assert graph.forward_flops() == counter.get_total_flops() and other_ops(graph) == {}


def test_paper_lstm_ops():
    lstm = pytest.importorskip("remat.models.lstm")
    cfg = lstm.LSTMConfig(layers=2, hidden=8, input=5, classes=7, steps=3, batch=4)
    T, L = cfg.steps, cfg.layers
    with FakeTensorMode():
        model, (x, y) = lstm.build_lstm(cfg), lstm.random_sequence(cfg)
        with flop_counter_mode() as counter:
            model(x, y)
    graph = trace(model, (x, y))
    assert Counter(n.op for n in graph.nodes) == {
        "linear": T * (2 * L + 1), "add": T * (2 * L + 1), "split": T * L, "sigmoid": 3 * T * L,
        "tanh": 2 * T * L, "mul": 3 * T * L, "xent": T}       # add: gates, c, and the running loss sum
    assert graph.forward_flops() == counter.get_total_flops() and other_ops(graph) == {}
    consts = [v for v in graph.values.values() if v.name.startswith("const")]
    assert [v.shape for v in consts] == [(cfg.batch, cfg.hidden), ()]          # zero state, zero loss
