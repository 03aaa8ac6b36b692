"""Chen et al. 2016 §3–§5 on computation graphs: the memory strategies of Figure 5 (no optimisation,
in-place, sharing, drop-cheap, sublinear) and Algorithm 3's budgeted plan against √n and the exact optimum of
its objective — checked bitwise on small numpy nets, and accounted at the paper's sizes on its ResNet (§5.2)
and LSTM (§5.3) traced under FakeTensorMode (no memory used).

Every byte comes from ``remat.graph.memory`` (the static plan over the traced graph), every recomputed FLOP
from ``remat.graph.program`` (the mirror steps of Algorithm 2). Parameters: the dataclasses below
(config.yaml section ``chen``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import pandas as pd

from remat.experiments.params import Count, NonNegative
from remat.graph import engine, nets, strategies
from remat.graph.ir import Graph
from remat.graph.program import build_program
from remat.measure.provenance import with_provenance

Strategy = Literal["no-opt", "inplace", "sharing", "drop-cheap", "sublinear"]
Comparison = Literal["sqrt", "optimal"]


# --- numpy: every strategy executed, gradients bitwise -------------------------------------------------------

@dataclass(frozen=True)
class GraphCheckParams:
    """chen.graph_check: every strategy and Algorithm 3 budget executed by the numpy engine (float64) on a
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
    grid_points: Count = 6
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
    backward's) and passed (bitwise_equal, and planned ≥ live peak)."""
    rows = []
    for net, (graph, params, inputs) in small_nets(p).items():
        loss0, ref = engine.execute(build_program(graph), params, inputs)
        for o in outcomes(graph, [*strategies.STRATEGIES, "sqrt", "optimal", "budget"], p.grid_points):
            loss, grads = engine.execute(o.program, params, inputs, o.memory)
            bitwise = loss == loss0 and grads.keys() == ref.keys() and all(
                np.array_equal(grads[k], ref[k]) for k in ref)
            row = o.row()
            rows.append({"net": net, "nodes": len(graph.nodes), **row, "bitwise_equal": bitwise,
                         "passed": bool(bitwise and row["planned_bytes"] >= row["live_peak_bytes"])})
    return with_provenance(rows, device="cpu", dtype="float64", seed=p.seed)


def strategy_rows(graph: Graph, names, grid_points: int) -> list[dict]:
    """One timed row per strategy: Outcome.row() plus plan_s (seconds to build the program and plan it)."""
    rows = []
    for name in names:
        start = time.perf_counter()
        found = outcomes(graph, [name], grid_points)
        elapsed = time.perf_counter() - start
        rows += [{**o.row(), "plan_s": elapsed / len(found)} for o in found]
    return rows
