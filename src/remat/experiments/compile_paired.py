"""planner-paired: each torch.compile budget of a planner-compile table timed against the tensor plans that reach
its peak, in one process, step by step (paired), on ``device``.

Why: on a shared CPU one configuration's step time drifts by tens of percent within a minute, and separate
processes minutes apart (planner-compile's rounds) differ by as much; a 5 % target is below what they resolve.
Steps of two configurations taken back to back see the same drift, so their ratio does not.

Per model and compile budget of ``table`` (its rows without an error), one fresh process holds:
* ``compile``: the model under torch.compile at that activation_memory_budget;
* at compile budget 1.0, the model in ``eager`` without a plan (whatever its peak: what fusion alone is worth);
* per plan mode (``eager tensor``, ``compiled tensor``), the candidate (``candidate``): of that mode's points whose
  measured peak is at or below compile's, the one planned with the largest budget. A larger budget never gives a
  slower predicted step (remat.auto is monotone), so this is the plan predicted fastest at that peak, chosen
  before any timing (the fastest measured would pick the luckiest draw). It is planned again from its
  ``budget_bytes``; its predicted peak and its number of blocks keeping an op set must equal the table's row, else
  the pair is invalid (``error``).
Each is stepped twice (compiling; each compiled model through its own code object, so none reuses another's
graph; compile's second step under its budget too), then ``palindromes`` times every configuration steps in the
order c, p1, p2, p2, p1, c (with the plain model: c, e, p1, p2, p2, p1, e, c; drift that is linear over one
palindrome cancels). A pair's ``ratio`` is the median over palindromes of (the plan's two steps) over (compile's
two), minus 1; ``ratio_lo`` / ``ratio_hi`` are the lower and upper quartiles. A configuration that compiles again
while timed fails its process (``error``). ``step_s`` and ``compile_step_s`` are each side's median step. torch
at ``threads`` threads on a CPU. Run it alone.

Run: ``remat experiment planner-paired --params '{"table": "compile.csv"}' --out x.csv``, the table a planner-compile
run wrote (about 2 minutes per compile budget on a 2-core CPU; the pipeline's rule passes its own).
"""

from __future__ import annotations

import json
import statistics
import sys
from dataclasses import asdict, dataclass
from typing import Annotated, Literal

import numpy as np
import pandas as pd
import torch
import torch._functorch.config as functorch_config
from torch._dynamo.utils import counters

from remat.device import resolve_device
from remat.errors import UsageError
from remat.experiments.compile_budget import in_fresh_process, ready, timed
from remat.experiments.pairing import NEEDED, PLAIN_AT, PLAN_MODES, candidate
from remat.experiments.params import Count, Ge
from remat.experiments.progress import progress
from remat.experiments.tensor_plans import TensorModel, build
from remat.measure.provenance import load_since, snapshot, with_provenance

@dataclass(frozen=True)
class PairedParams:
    """planner.paired: compile's budgets timed against the tensor plans at their peak, step by step."""

    table: str = ""
    """The planner-compile table whose points are paired (the rule passes its input)."""
    palindromes: Annotated[int, Ge(3)] = 8
    """Timed palindromes per process (each configuration steps twice in each)."""
    threads: Count = 1
    """torch intra-op threads on a CPU."""
    device: Literal["cpu", "cuda"] = "cpu"
    """Where the models run (the rule passes config.device)."""


def compile_paired(p: PairedParams) -> pd.DataFrame:
    """One row per (model, compile budget, plan mode) with a candidate (module docstring). Raises
    UsageError("planner.paired.table") when the table is missing or lacks a column, and
    UsageError("planner.paired.device") when the device is not available."""
    resolve_device(p.device, field="planner.paired.device")
    frame = _table(p.table)
    rows = []
    for model in progress(list(dict.fromkeys(frame["model"])), "planner-paired"):
        g = frame[frame["model"] == model]
        for _, c in g[g["mode"] == "compile"].iterrows():
            plans = {mode: row for mode in PLAN_MODES if (row := candidate(g, mode, c["peak_bytes"])) is not None}
            plain = g[g["mode"] == "eager"]
            if c["compile_budget"] == PLAIN_AT and len(plain):
                plans = {"eager": plain.iloc[0], **plans}
            rows += _pairs(g.iloc[0], c, plans, p)
    return with_provenance(rows, p.device)


def _table(path: str) -> pd.DataFrame:
    if not path:
        raise UsageError("planner.paired.table", "the planner-compile table to pair: none given")
    try:
        frame = pd.read_csv(path)
    except (OSError, ValueError) as error:
        raise UsageError("planner.paired.table", f"a planner-compile table, could not read {path}: {error}")
    if missing := NEEDED - set(frame.columns):
        raise UsageError("planner.paired.table", f"a planner-compile table, {path} lacks {sorted(missing)}")
    return frame[frame["error"].isna()] if "error" in frame else frame


def _pairs(m: pd.Series, c: pd.Series, plans: dict, p: PairedParams) -> list[dict]:
    """The rows of one compile budget: its process run, or one error row per plan mode."""
    if not plans:
        return []
    spec = TensorModel(m["kind"], int(m["blocks"]), int(m["width"]), int(m["seq"]), int(m["batch"]))
    got = in_fresh_process("remat.experiments.compile_paired", {
        "spec": asdict(spec), "budget": float(c["compile_budget"]), "gpu": m["gpu"],
        "plans": {mode: _budget(r) for mode, r in plans.items()}, "p": {k: v for k, v in asdict(p).items()
                                                                          if k != "table"}})
    got = {mode: got for mode in plans} if "error" in got else got
    rows = []
    for mode, r in plans.items():
        row = {"model": m["model"], "kind": m["kind"], "compile_budget": float(c["compile_budget"]),
               "compile_peak_bytes": int(c["peak_bytes"]), "mode": mode, "budget_bytes": _budget(r),
               "peak_bytes": int(r["peak_bytes"]), "palindromes": p.palindromes, "error": None, **got[mode]}
        same = row.get("predicted_peak_bytes") == r["predicted_peak_bytes"] and row.get("kept") == r["kept"]
        if row["error"] is None and mode != "eager" and not same:
            row["error"] = (f"planned again: predicted peak {row['predicted_peak_bytes']} and {row['kept']} kept "
                            f"against the table's {int(r['predicted_peak_bytes'])} and {int(r['kept'])}")
        rows.append(row)
    return rows


def _budget(r: pd.Series) -> int | None:
    """A point's plan budget in bytes (None for the model without a plan)."""
    return None if r["mode"] == "eager" else int(r["budget_bytes"])


def duel(spec: TensorModel, budget: float, plans: dict[str, int | None], gpu: str, p: dict) -> dict:
    """In this process: compile at ``budget`` and each plan of ``plans`` (mode → budget in bytes), stepped in
    palindromes (module docstring). Per mode: ratio, ratio_lo, ratio_hi, step_s, compile_step_s,
    predicted_peak_bytes, kept and the timing window's load."""
    device = str(resolve_device(p["device"], field="planner.paired.device"))
    torch.set_num_threads(p["threads"])
    model, inputs, loss_fn = build(spec, device)
    opts = {"gpu": gpu}
    steps = {"compile": ready(model, inputs, loss_fn, "compile", budget, opts)[0]}
    info = {}
    for mode, bytes_ in plans.items():
        steps[mode], info[mode] = ready(model, inputs, loss_fn, mode, bytes_, opts)
    with functorch_config.patch(activation_memory_budget=budget):
        steps["compile"]()          # a second call: a recompile it triggers still reads compile's budget
    for mode in plans:
        steps[mode]()
    graphs, order = counters["stats"]["unique_graphs"], list(steps) + list(steps)[::-1]
    start, times = snapshot(), {name: [] for name in steps}
    for _ in range(p["palindromes"]):
        took = {name: 0.0 for name in steps}
        for name in order:
            took[name] += timed(steps[name], device)
        for name, t in took.items():
            times[name].append(t / 2)
    load = load_since(start).columns("timing_")
    if counters["stats"]["unique_graphs"] != graphs:
        raise RuntimeError("a configuration recompiled while it was timed: its steps are not all one graph's")
    out = {}
    for mode in plans:
        ratios = np.array(times[mode]) / np.array(times["compile"]) - 1
        lo, mid, hi = np.percentile(ratios, [25, 50, 75])
        out[mode] = {"ratio": float(mid), "ratio_lo": float(lo), "ratio_hi": float(hi),
                     "step_s": statistics.median(times[mode]), "compile_step_s": statistics.median(times["compile"]),
                     **{k: info[mode].get(k) for k in ("predicted_peak_bytes", "kept")}, **load}
    return out


if __name__ == "__main__":      # one compile budget in this fresh process (``_pairs``): per mode, JSON on the last line
    given = json.loads(sys.argv[1])
    print(json.dumps(duel(TensorModel(**given["spec"]), given["budget"], given["plans"], given["gpu"], given["p"])))
