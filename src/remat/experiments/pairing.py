"""What planner-paired pairs, without torch: the plan modes, the compile budget the model without a plan is paired
with, the columns a planner-compile table must have, and each compile budget's candidate plan. The planner report's
analysis (remat.analysis.planner_compile) reads these without importing the experiment (remat.experiments.
compile_paired, which needs torch).
"""

from __future__ import annotations

import pandas as pd

PLAN_MODES = ("eager tensor", "compiled tensor")
"""The plan modes paired with compile (remat.experiments.compile_budget.MODES)."""
PLAIN_AT = 1.0
"""The compile budget the model without a plan is paired with (compile saving what its min-cut would)."""
NEEDED = {"model", "kind", "blocks", "width", "seq", "batch", "gpu", "mode", "compile_budget", "budget_bytes",
          "peak_bytes", "predicted_peak_bytes", "kept"}
"""The columns of a planner-compile table that planner-paired reads."""


def candidate(g: pd.DataFrame, mode: str, peak: float) -> pd.Series | None:
    """Of ``mode``'s points in ``g`` whose measured peak is at most ``peak``, the one planned with the largest
    budget (remat.experiments.compile_paired's docstring says why); None where none reaches it."""
    fits = g[(g["mode"] == mode) & (g["peak_bytes"] <= peak)]
    return None if fits.empty else fits.loc[fits["budget_bytes"].idxmax()]
