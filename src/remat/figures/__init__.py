"""Tables -> figures, one module per topic. A figure never measures: it reads result CSVs and draws one PNG
(+ SVG beside it).

``REGISTRY`` maps ``remat figure NAME`` to a function ``(list of DataFrames) -> matplotlib Figure``.
"""

from __future__ import annotations

import importlib
from pathlib import Path

from remat.errors import UsageError

REGISTRY: dict[str, str] = {
    "chen-segments": "remat.figures.chen:segments",
    "chen-depth": "remat.figures.chen:depth",
    "chen-resnet": "remat.figures.chen:resnet",
    "chen-lstm": "remat.figures.chen:lstm",
    "korthikanti-percent": "remat.figures.korthikanti:percent",
    "korthikanti-memory": "remat.figures.korthikanti:memory",
    "korthikanti-figure8": "remat.figures.korthikanti_time:figure8",
    "sweep-segments": "remat.figures.sweeps:segments",
    "sweep-depth": "remat.figures.sweeps:depth",
    "sweep-seq-hidden": "remat.figures.sweeps:seq_hidden",
    "sweep-layer-timing": "remat.figures.sweeps:layer_timing",
    "sweep-time-model": "remat.figures.sweeps:time_model",
    "offload-bandwidth": "remat.figures.offload:bandwidth",
    "offload-breakeven": "remat.figures.offload:breakeven",
    "planner-frontier": "remat.figures.planner:frontier",
    "planner-measured": "remat.figures.planner:measured",
    "planner-peak": "remat.figures.planner:peak",
    "scorecard": "remat.figures.scorecard:ratios",
}


def draw(name: str, inputs: list[str], out: str) -> None:
    """Draw figure ``name`` from the CSV ``inputs``; write ``out`` (PNG) and the SVG beside it, atomically.

    Raises UsageError("--inputs") when the tables are not the ones this figure draws (missing columns, empty)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import pandas as pd

    from remat.io import atomic_path

    module, func = REGISTRY[name].split(":")
    try:
        fig = getattr(importlib.import_module(module), func)([pd.read_csv(p) for p in inputs])
    except (KeyError, ValueError, pd.errors.EmptyDataError) as exc:   # a table of another experiment
        raise UsageError("--inputs", f"not the table(s) figure {name} draws ({type(exc).__name__}: {exc})") from None
    out = Path(out)
    for path in (out, out.with_suffix(".svg")):
        with atomic_path(path) as tmp:
            fig.savefig(tmp, format=path.suffix[1:], dpi=150, bbox_inches="tight")
    plt.close(fig)
