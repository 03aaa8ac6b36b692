"""Chen et al. 2016's memory strategies (§5.2, Figure 5) on one graph, each a (mirror counts, allocation):

    no-opt       keep everything, every value its own storage
    inplace      keep everything, in-place only
    sharing      keep everything, in-place + sharing (the "optimized memory plan" of §5)
    drop-cheap   §4.2: keep convolution/matmul outputs, recompute the cheap ops (batch-norm, activations,
                 pooling, elementwise) once in the backward; in-place + sharing
    sublinear    Algorithm 3: the budgeted segmentation (grid over B) with in-place + sharing

and the segmentations Algorithm 3 is compared with: "sqrt" (⌈√n⌉ equal stages, Algorithm 1) and "optimal"
(least x + y). ``evaluate`` returns the planned bytes and the recomputed FLOPs of one of them.
"""

from __future__ import annotations

from dataclasses import dataclass

from remat.errors import UsageError
from remat.graph import budget as alg3
from remat.graph.ir import Graph
from remat.graph.memory import MemoryPlan, plan_memory
from remat.graph.program import Program, build_program

STRATEGIES = ("no-opt", "inplace", "sharing", "drop-cheap", "sublinear")
SEGMENTATIONS = ("sqrt", "optimal", "budget")


@dataclass(frozen=True)
class Outcome:
    """One strategy on one graph: its program, memory plan, and (for segmentations) the Segmentation."""

    strategy: str
    program: Program
    memory: MemoryPlan
    segmentation: alg3.Segmentation | None = None

    def row(self) -> dict:
        """Tidy columns: planned_bytes, live_peak_bytes, tags, inplace, recompute_flops, forward_flops,
        recompute_ratio (recomputed / forward FLOPs), recomputed_nodes, splits, x_bytes, y_bytes, budget_bytes."""
        seg = self.segmentation
        fwd = self.program.graph.forward_flops()
        return {"strategy": self.strategy, "planned_bytes": self.memory.planned_bytes,
                "live_peak_bytes": self.memory.live_peak_bytes, "tags": self.memory.tags,
                "inplace": self.memory.inplace_count, "recompute_flops": self.program.recompute_flops,
                "forward_flops": fwd, "recompute_ratio": self.program.recompute_flops / fwd if fwd else 0.0,
                "recomputed_nodes": self.program.recomputed_nodes,
                "splits": len(seg.splits) if seg else None, "x_bytes": seg.x if seg else None,
                "y_bytes": seg.y if seg else None, "budget_bytes": seg.budget if seg else None}


def _outcome(graph: Graph, name: str, mirror: dict | None, allocation: str,
             seg: alg3.Segmentation | None = None) -> Outcome:
    program = build_program(graph, mirror)
    return Outcome(name, program, plan_memory(program, allocation), seg)


def segmented(graph: Graph, seg: alg3.Segmentation, name: str) -> Outcome:
    """The segmentation ``seg`` run with in-place + sharing."""
    return _outcome(graph, name, seg.mirror_counts(graph), "sharing", seg)


def budgeted(graph: Graph, grid_points: int = alg3.GRID_POINTS) -> list[Outcome]:
    """Algorithm 3 at B = 0, B₀ = √(x·y) and the grid over [B₀/2, 2B₀]: one Outcome per budget."""
    return [segmented(graph, alg3.greedy(graph, b), "budget") for b in [0.0, *alg3.budget_grid(graph, grid_points)]]


def evaluate(graph: Graph, strategy: str, grid_points: int = alg3.GRID_POINTS) -> Outcome:
    """Strategy ``strategy`` (STRATEGIES, or "sqrt" / "optimal") on ``graph``. "sublinear" is the fewest
    planned bytes over ``budgeted``'s B₀ and grid (B = 0 excluded: it is the starting pass).
    Raises UsageError("strategy") for an unknown name."""
    if strategy in ("no-opt", "inplace", "sharing"):
        return _outcome(graph, strategy, None, strategy)
    if strategy == "drop-cheap":
        return _outcome(graph, strategy, {n.name: int(n.cheap) for n in graph.nodes}, "sharing")
    if strategy == "sublinear":
        best = min(budgeted(graph, grid_points)[1:], key=lambda o: o.memory.planned_bytes)
        return Outcome("sublinear", best.program, best.memory, best.segmentation)
    if strategy == "sqrt":
        return segmented(graph, alg3.sqrt_splits(graph), "sqrt")
    if strategy == "optimal":
        return segmented(graph, alg3.optimal_splits(graph), "optimal")
    raise UsageError("strategy", f"unknown strategy {strategy!r} (known: {', '.join(STRATEGIES)}, sqrt, optimal)")
