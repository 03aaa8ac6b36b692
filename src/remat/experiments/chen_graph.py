"""Chen et al. 2016 §3–§5 on computation graphs: the memory strategies of Figure 5 (no optimisation,
in-place, sharing, drop-cheap, sublinear) and Algorithm 3's budgeted plan against √n and the exact optimum of
its objective — checked bitwise on small numpy nets, and accounted at the paper's sizes on its ResNet (§5.2)
and LSTM (§5.3) traced under FakeTensorMode (no memory used).

Every byte comes from ``remat.graph.memory`` (the static plan over the traced graph), every recomputed FLOP
from ``remat.graph.program`` (the mirror steps of Algorithm 2). Parameters: the dataclasses below
(config.yaml section ``chen``).
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from typing import Annotated, Literal

import numpy as np
import pandas as pd

from remat.errors import UsageError
from remat.experiments.params import Count, Ge, NonNegative
from remat.experiments.chen import FD_TOLERANCE
from remat.graph import engine, nets, strategies
from remat.graph.budget import GRID_POINTS, candidates
from remat.graph.ir import Graph
from remat.graph.program import build_program
from remat.measure.provenance import with_provenance



# --- numpy: every strategy executed, gradients bitwise -------------------------------------------------------

@dataclass(frozen=True)
class GraphCheckParams:
    """chen.graph-check: every strategy and Algorithm 3 budget executed by the numpy engine (float64) on a
    chain, a residual net and an LSTM; gradients compared bitwise with the naive backward."""

    layers: Count = 6
    """Layers of the MLP chain."""
    blocks: Count = 5
    """Residual blocks of the residual net."""
    lstm_layers: Count = 2
    """Stacked LSTM layers."""
    steps: Count = 5
    """Time steps the LSTM is unrolled over."""
    width: Count = 8
    """Features per example of every activation (hidden size of the LSTM)."""
    batch: Count = 4
    """Examples per batch."""
    grid_points: Count = GRID_POINTS
    """Points of Algorithm 3's grid over [B/2, 2B]."""
    seed: NonNegative = 0
    """Seed of parameters and inputs."""


def small_nets(p: GraphCheckParams) -> dict[str, tuple]:
    """name -> (Graph, params, inputs) of the three numpy nets at the sizes of ``p``."""
    return {"mlp_chain": nets.mlp_chain(p.layers, p.width, p.batch, seed=p.seed),
            "residual_net": nets.residual_net(p.blocks, p.width, p.batch, seed=p.seed),
            "lstm_net": nets.lstm_net(p.lstm_layers, p.steps, p.width, batch=p.batch, seed=p.seed)}


def outcomes(graph: Graph, names, grid_points: int) -> list[strategies.Outcome]:
    """The named strategies/comparisons on ``graph``; "budget" expands to Algorithm 3 at B = 0, B₀ and grid."""
    found = []
    for name in names:
        found += (strategies.budgeted(graph, grid_points) if name == "budget"
                  else [strategies.evaluate(graph, name, grid_points)])
    return found


def graph_check(p: GraphCheckParams) -> pd.DataFrame:
    """Registry entry ``chen-graph-check``. Row per (net, strategy or budget): planned and live-peak bytes,
    recomputed FLOPs and nodes, bitwise_equal (loss and every parameter gradient np.array_equal to the naive
    backward's), fd_rel_error (the naive backward's parameter gradients against central differences, per net;
    engine.fd_relative_error), error (the engine's PlanError, if a plan let a value's storage be reused too
    early) and passed (bitwise_equal, fd_rel_error ≤ 1e-6, planned ≥ live peak)."""
    rows = []
    for net, (graph, params, inputs) in small_nets(p).items():
        naive = build_program(graph)
        loss0, ref = engine.execute(naive, params, inputs)
        fd_error = engine.fd_relative_error(naive, params, inputs, ref, seed=p.seed)
        for o in outcomes(graph, [*strategies.STRATEGIES, "sqrt", "optimal", "budget"], p.grid_points):
            bitwise, error = _bitwise(o, params, inputs, loss0, ref)
            row = o.row()
            rows.append({"net": net, "nodes": len(graph.nodes), **row, "bitwise_equal": bitwise,
                         "fd_rel_error": fd_error,
                         "passed": bool(bitwise and fd_error <= FD_TOLERANCE
                                        and row["planned_bytes"] >= row["live_peak_bytes"]),
                         "error": error})
    return with_provenance(rows, device="cpu", dtype="float64", seed=p.seed)


def _bitwise(o: strategies.Outcome, params, inputs, loss0: float, ref: dict) -> tuple[bool, str | None]:
    """(loss and every parameter gradient np.array_equal to the reference, the PlanError text if it raised)."""
    try:
        loss, grads = engine.execute(o.program, params, inputs, o.memory)
    except engine.PlanError as exc:
        return False, str(exc)
    same = loss == loss0 and grads.keys() == ref.keys() and all(np.array_equal(grads[k], ref[k]) for k in ref)
    return bool(same), None


def strategy_rows(graph: Graph, names, grid_points: int) -> list[dict]:
    """One timed row per strategy: Outcome.row() plus plan_s (seconds to build the program and plan it)."""
    rows = []
    for name in names:
        start = time.perf_counter()
        found = outcomes(graph, [name], grid_points)
        elapsed = time.perf_counter() - start
        rows += [{**o.row(), "plan_s": elapsed / len(found)} for o in found]
    return rows


# --- the paper's nets at the paper's sizes, traced under fake tensors ------------------------------------------

@dataclass(frozen=True)
class PaperNetParams:
    """Shared by chen.resnet and chen.lstm: Algorithm 3's grid and the element type. Every strategy of paper
    Figure 5 and both comparisons (sqrt, optimal) are planned at every size: tracing dominates the cost."""

    grid_points: Count = GRID_POINTS
    """Points of Algorithm 3's grid over [B/2, 2B]."""
    dtype: Literal["float32", "float16", "bfloat16"] = "float32"
    """Element type of activations (the paper: float32)."""

    SECTION = "chen"
    """The config section (errors name ``<SECTION>.<SWEPT>``)."""
    SWEPT = ""
    """The field holding the swept sizes."""

    def __post_init__(self):
        """At least two distinct swept sizes (the report fits laws over them), none repeated."""
        sizes = getattr(self, self.SWEPT)
        if len(set(sizes)) != len(sizes) or len(sizes) < 2:
            raise UsageError(f"{self.SECTION}.{self.SWEPT}", f"need ≥ 2 distinct values, got {sizes}")

    def columns(self) -> dict:
        """The net's sizes every row carries: the fields other than the swept sizes, the grid and the dtype."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                if f.name not in (self.SWEPT, "grid_points", "dtype")}


@dataclass(frozen=True)
class ResNetParams(PaperNetParams):
    """chen.resnet: Figure 5(a) — feature-map memory of the §5.2 bottleneck ResNet against depth."""

    depths: list[Annotated[int, Ge(14)]] = field(default_factory=lambda: [50, 100, 200, 500, 1000])
    """Depths (layers = 3·Σ blocks + 2; remat.models.resnet.blocks_for_depth: the deepest net ≤ each)."""
    batch: Count = 32
    """Images per batch (the paper: 32)."""
    image: Count = 224
    """Input height = width in pixels (the paper: 224)."""
    width: Count = 64
    """Stage-1 bottleneck width (channels; the paper's ResNet: 64)."""
    classes: Count = 1000
    """Classifier outputs."""

    SECTION = "chen.resnet"
    SWEPT = "depths"


@dataclass(frozen=True)
class LSTMParams(PaperNetParams):
    """chen.lstm: Figure 6 — feature-map memory of the §5.3 LSTM against the unrolled length."""

    lengths: list[Count] = field(default_factory=lambda: [8, 16, 32, 64])
    """Unrolled lengths T (time steps; the paper's headline: 64)."""
    layers: Count = 4
    """Stacked LSTM layers."""
    hidden: Count = 1024
    """Hidden size H."""
    input: Count = 50
    """Input features per step."""
    classes: Count = 5000
    """Softmax width per step."""
    batch: Count = 64
    """Sequences per batch."""

    SECTION = "chen.lstm"
    SWEPT = "lengths"


def resnet_graph(depth: int, p: ResNetParams) -> Graph:
    """The §5.2 ResNet of (at most) ``depth`` layers at the sizes of ``p``, traced under FakeTensorMode."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    # lazy: torch-free at import, so `remat check` (numpy) does not load torch
    from remat.graph.trace import trace
    from remat.models.resnet import ResNetConfig, build_resnet, random_images, resnet_loss

    cfg = ResNetConfig.for_depth(depth, width=p.width, image=p.image, classes=p.classes, batch=p.batch,
                                 dtype=p.dtype)
    with FakeTensorMode():
        model = build_resnet(cfg)
        images, labels = random_images(cfg)
    name = f"resnet-{cfg.depth} ({'-'.join(map(str, cfg.blocks))} blocks)"
    return trace(model, (images,), loss_fn=lambda logits: resnet_loss(logits, labels), name=name)


def lstm_graph(length: int, p: LSTMParams) -> Graph:
    """The §5.3 LSTM unrolled over ``length`` steps at the sizes of ``p``, traced under FakeTensorMode."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    # lazy: torch-free at import, so `remat check` (numpy) does not load torch
    from remat.graph.trace import trace
    from remat.models.lstm import LSTMConfig, build_lstm, random_sequence

    cfg = LSTMConfig(layers=p.layers, hidden=p.hidden, input=p.input, classes=p.classes, steps=length,
                     batch=p.batch, dtype=p.dtype)
    with FakeTensorMode():
        model = build_lstm(cfg)
        x, targets = random_sequence(cfg)
    return trace(model, (x, targets), name=f"lstm-{length}")


def _plan_rows(graph: Graph, p: PaperNetParams) -> list[dict]:
    """Rows for every strategy and comparison on ``graph``; Algorithm 3's budgets (B = 0, B₀, grid) are
    planned once: each is a "budget" row and "sublinear" is the fewest planned bytes among B₀ and the grid."""
    names = [s for s in strategies.STRATEGIES if s != "sublinear"] + ["sqrt", "optimal"]
    rows = strategy_rows(graph, names, p.grid_points)
    budget_rows = strategy_rows(graph, ["budget"], p.grid_points)
    best = min(budget_rows[1:], key=lambda r: r["planned_bytes"])
    return rows + [{**best, "strategy": "sublinear"}, *budget_rows]


def _sweep(sizes, size: str, build, p: PaperNetParams, extra=lambda n: {}) -> pd.DataFrame:
    # lazy: torch-free at import, so `remat check` (numpy) does not load torch
    from remat.graph.trace import other_ops

    rows = []
    for n in sizes:
        start = time.perf_counter()
        graph = build(n)
        traced_s = time.perf_counter() - start
        common = {size: n, **extra(n), **p.columns(), "graph": graph.name, "nodes": len(graph.nodes),
                  "trace_s": traced_s,
                  "other_ops": sum(other_ops(graph).values()), "candidates": len(candidates(graph))}
        rows += [{**common, **row} for row in _plan_rows(graph, p)]
    return with_provenance(rows, device="fake", dtype=p.dtype)


def resnet_memory(p: ResNetParams) -> pd.DataFrame:
    """Registry entry ``chen-resnet``. Row per (depth, strategy or budget): the traced graph (nodes, trace
    seconds, ops the trace did not recognise, Algorithm 3's candidate split points) and Outcome.row()'s
    planned/live bytes, recomputed FLOPs, splits, x, y, B. ``depth`` is the requested depth, ``layers`` the
    built one (3·Σ blocks + 2), ``blocks`` its blocks per stage, ``params`` its trainable parameters and
    ``param_bytes`` their bytes (in ``dtype``; the planned bytes count feature maps only)."""
    return _sweep(p.depths, "depth", lambda d: resnet_graph(d, p), p, lambda d: resnet_size(d, p))


def resnet_size(depth: int, p: ResNetParams) -> dict:
    """The built net of (at most) ``depth`` layers: layers, blocks per stage, trainable parameters and their
    bytes, counted on the meta device (no memory)."""
    # lazy: torch-free at import, so `remat check` (numpy) does not load torch
    from remat.models.resnet import ResNetConfig, build_resnet

    cfg = ResNetConfig.for_depth(depth, width=p.width, image=p.image, classes=p.classes, batch=p.batch,
                                 dtype=p.dtype)
    params = list(build_resnet(cfg, "meta").parameters())
    return {"layers": cfg.depth, "blocks": "-".join(map(str, cfg.blocks)), "params": sum(t.numel() for t in params),
            "param_bytes": sum(t.numel() * t.element_size() for t in params)}


def lstm_memory(p: LSTMParams) -> pd.DataFrame:
    """Registry entry ``chen-lstm``: as ``resnet_memory``, per unrolled length."""
    return _sweep(p.lengths, "length", lambda t: lstm_graph(t, p), p)
