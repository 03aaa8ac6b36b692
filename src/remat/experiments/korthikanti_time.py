"""Korthikanti et al. 2022's timing results predicted by the per-op roofline model (remat.timemodel), beside
the paper's values: no GPU needed (the layer is traced under fake tensors at the paper's sizes).

    remat experiment korthikanti-table4  --params '{"gpu": "a100-80gb"}' --out results/korthikanti/table4.csv
    remat experiment korthikanti-figure8 --params '{}' --out results/korthikanti/figure8.csv
    remat experiment korthikanti-table5  --params '{}' --out results/korthikanti/table5.csv

korthikanti-table4: paper Table 4 — one 22B layer (t = 8): forward, backward, combined ms and overhead for
    baseline, SP, full, selective, selective + SP, with the model's parts (GEMM, memory-bound, collectives).
korthikanti-figure8: paper Figure 8 — % of the baseline layer time, full recompute vs SP + selective, for
    the four Table 3 models.
korthikanti-table5: paper Table 5 — iteration time with full recompute and with SP + selective, and their
    ratio, priced by the planner's cost model (remat.planner.table5.table5_rows).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import pandas as pd

from remat.measure.provenance import with_provenance
from remat.planner.table5 import table5_rows
from remat.timemodel import paper
from remat.timemodel.gpus import check_presets, gpu


@dataclass(frozen=True)
class Table4Params:
    """korthikanti.table4: one layer of ``model`` under the five experiments of paper Table 4."""

    model: str = "gpt-22b"
    """Preset or config.json path (a GPT; the paper's values are shown for gpt-22b only)."""
    gpu: str = "a100-80gb"
    """GPU preset whose rates price the ops (remat.timemodel.gpus; the paper ran on the A100 80GB)."""

    def __post_init__(self):
        check_presets("korthikanti.table4.gpu", [self.gpu])


@dataclass(frozen=True)
class Figure8Params:
    """korthikanti.figure8 / korthikanti.table5: the models of paper Figure 8 / Table 5 on one GPU preset."""

    SECTION: ClassVar[str] = "figure8"
    models: list[str] = field(default_factory=lambda: list(paper.TABLE3_MODELS))
    """Presets or config.json paths (default: the four Table 3 models)."""
    gpu: str = "a100-80gb"
    """GPU preset whose rates price the ops (remat.timemodel.gpus)."""

    def __post_init__(self):
        check_presets(f"korthikanti.{self.SECTION}.gpu", [self.gpu])


@dataclass(frozen=True)
class Table5Params(Figure8Params):
    """korthikanti.table5: iteration time of the Table 3 models, full recompute vs SP + selective."""

    SECTION: ClassVar[str] = "table5"


def table4(p: Table4Params) -> pd.DataFrame:
    """Registry entry ``korthikanti-table4`` (module docstring); ms per layer on one TP rank."""
    return with_provenance(paper.table4_rows(gpu(p.gpu), p.model), device="fake", dtype="bfloat16")


def figure8(p: Figure8Params) -> pd.DataFrame:
    """Registry entry ``korthikanti-figure8`` (module docstring); % of the baseline layer time."""
    return with_provenance(paper.figure8_rows(gpu(p.gpu), p.models), device="fake", dtype="bfloat16")


def table5(p: Table5Params) -> pd.DataFrame:
    """Registry entry ``korthikanti-table5`` (module docstring); seconds per iteration (lower bounds)."""
    return with_provenance(table5_rows(gpu(p.gpu), p.models), device="fake", dtype="bfloat16")
