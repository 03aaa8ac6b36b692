"""The numbers the planner report shows, computed from the planner tables (nothing is re-planned or re-measured):
the paper table, policy use, how often a baseline beats the plan, the validation's errors, and the settings
each table was made with (read from its own columns, never from the code's current defaults).

    paper = pd.read_csv("results/planner/paper.csv")
    paper_table(paper)          # per (model, gpu, sp): the plan's policy counts, peak, step, best baseline
    assumptions(paper)          # per GPU: the assumed FLOP rate, link, model-state bytes, reserve, host memory

Bytes are shown in GiB (2^30) or MiB (2^20) as the column names say; times in seconds.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from remat.policies import POLICIES
from remat.units import GiB, MiB, format_bytes

TIE = 1e-12
"""Relative margin below which a baseline's time counts as equal to the plan's (float round-off)."""


def validate_path(results: str | Path = "results") -> Path:
    """The planner-validate table the report shows: the GPU's (``cuda.csv``) when one was measured — by this
    run, else by the committed reference GPU run (remat.report.reference.device_tables) —, else this
    machine's (``cpu.csv``), else the first device's. One table per device (the pipeline's rule and
    ``make gpu`` write <device>.csv; none overwrites another). Raises FileNotFoundError when there is none."""
    from remat.report.reference import device_tables
    tables = device_tables("planner/validate", results)
    if not tables:
        raise FileNotFoundError(f"no planner-validate table in {Path(results, 'planner', 'validate')}")
    return min(tables, key=lambda p: (p.stem != "cuda", p.stem != "cpu", p.name))


def _feasible(frame: pd.DataFrame) -> pd.Series:
    return frame["feasible"].astype(bool)


def beaten(table: pd.DataFrame, time: str = "step_time_s") -> tuple[int, int]:
    """(budgets where the plan fits, those where a feasible baseline is faster than the plan by more than TIE).
    A budget is one group of (model, layers, gpu, sp, budget_bytes), whichever of these columns exist."""
    keys = [c for c in ("model", "layers", "gpu", "sp", "budget_bytes") if c in table]
    total = worse = 0
    for _, group in table.groupby(keys):
        plan = group[group["method"] == "plan"]
        if plan.empty or not bool(plan["feasible"].iloc[0]):
            continue
        total += 1
        others = group[(group["method"] != "plan") & _feasible(group)]
        worse += bool((others[time] < plan[time].iloc[0] * (1 - TIE)).any())
    return total, worse


def policy_counts(counts: dict[str, int]) -> str:
    """"24 selective, 8 full" from policy -> layers (zero counts left out, POLICIES order)."""
    return ", ".join(f"{int(counts[p])} {p}" for p in POLICIES if counts.get(p, 0) > 0)


def spec_counts(spec: str) -> str:
    """A runtime plan spec as counts: "none,full,full" -> "1 none, 2 full"; a single name -> "all <name>"."""
    if "," not in spec:
        return f"all {spec}"
    names = spec.split(",")
    return policy_counts({p: names.count(p) for p in POLICIES})


def paper_table(paper: pd.DataFrame) -> pd.DataFrame:
    """Per (model, gpu, sp) of a planner-paper table: the layout (t, p, m, b), the plan's policy counts, its
    peak (GiB) and step time (s), the fastest feasible baseline, its step time and the plan's gain
    (baseline / plan − 1, a fraction). A plan that does not fit reads "does not fit", the rest empty."""
    rows = []
    for (model, gpu, sp), g in paper.groupby(["model", "gpu", "sp"], sort=False):
        plan = g[g["method"] == "plan"].iloc[0]
        row = {"model": model, "GPU": gpu, "SP": bool(sp),
               **{k: int(plan[c]) for k, c in (("t", "tp"), ("p", "pp"), ("m", "interleave"), ("b", "micro_batch"))}}
        if not bool(plan["feasible"]):
            rows.append({**row, "plan": "does not fit"})
            continue
        base = g[(g["method"] != "plan") & _feasible(g)].sort_values("step_time_s")
        best = base.iloc[0] if len(base) else None
        rows.append({**row, "plan": policy_counts({p: plan[f"n_{p}"] for p in POLICIES}),
                     "peak (GiB)": plan["peak_bytes"] / GiB, "step (s)": plan["step_time_s"],
                     "best baseline": None if best is None else best["method"],
                     "baseline step (s)": None if best is None else best["step_time_s"],
                     "plan gain": None if best is None else best["step_time_s"] / plan["step_time_s"] - 1})
    columns = ["model", "GPU", "SP", "t", "p", "m", "b", "plan", "peak (GiB)", "step (s)", "best baseline",
               "baseline step (s)", "plan gain"]
    return pd.DataFrame(rows).reindex(columns=columns)


def policy_use(paper: pd.DataFrame) -> dict[str, int]:
    """policy -> settings (rows of a planner-paper table where the plan fits) whose plan uses it at least once,
    for every policy but none."""
    fits = paper[(paper["method"] == "plan") & _feasible(paper)]
    return {p: int((fits[f"n_{p}"] > 0).sum()) for p in POLICIES if p != "none"}


def assumptions(table: pd.DataFrame) -> pd.DataFrame:
    """The assumed settings a planner-paper or planner-frontier table was made with, one row per distinct
    combination (per GPU as a rule): peak FLOP/s and the achievable fraction of GEMMs, the achieved memory
    and NVLink bandwidths of the roofline time model (GB/s = 10^9 bytes/s), the host link (GB/s per direction,
    before sharing), the GPUs sharing it and its per-copy latency (µs), model-state bytes per parameter (weights, gradients, optimizer, and
    their sum), workspace reserve and host memory per GPU (remat.units.format_bytes: GiB = 2^30 bytes)."""
    out = pd.DataFrame({
        "gpu": table["gpu"],
        "peak TFLOP/s": table["peak_flops"] / 1e12,
        "achievable": table["achievable"],
        "HBM GB/s achieved": table["memory_bytes_per_s"] / 1e9,
        "NVLink GB/s achieved": table["nvlink_bytes_per_s"] / 1e9,
        "link GB/s": table["link_bytes_per_s"] / 1e9,
        "GPUs per link": table["gpus_per_host_link"].astype(int),
        "t0 (µs)": table["link_t0_s"] * 1e6,
        "weight bytes": table["weight_bytes"].astype(int),
        "gradient bytes": table["grad_bytes"].astype(int),
        "optimizer bytes": table["optimizer_bytes"].astype(int),
        "bytes per parameter": (table["weight_bytes"] + table["grad_bytes"] + table["optimizer_bytes"]).astype(int),
        "reserve": table["reserve_bytes"].map(lambda n: format_bytes(int(n))),
        "host memory": table["host_limit_bytes"].map(lambda n: format_bytes(int(n))),
    })
    return out.drop_duplicates().reset_index(drop=True)


# --- validation (planner-validate) -------------------------------------------------------------------------------

def validate_settings(validate: pd.DataFrame) -> dict:
    """What a planner-validate table was made with: device, timing protocol (threads, rounds, repeats), budgets
    per model (points) and the models (one dict per distinct model: layers, seq, micro_batch, hidden, heads)."""
    first = validate.iloc[0]
    models = validate.drop_duplicates(["model", "layers", "seq", "micro_batch", "hidden", "heads"])
    return {"device": str(first["device"]), "threads": int(first["threads"]), "rounds": int(first["rounds"]),
            "repeats": int(first["repeats"]), "points": int(first["points"]),
            "models": [{k: int(r[k]) for k in ("layers", "seq", "micro_batch", "hidden", "heads")}
                       for _, r in models.iterrows()]}


def _predictions(validate: pd.DataFrame) -> pd.DataFrame:
    """The applied (measured) rows that are predictions: not a calibration point (``reference``: the none
    and full steps whose measured peaks the calibration fits)."""
    applied = validate[validate["measured_peak_bytes"].notna()]
    return applied[~applied["reference"].astype(bool)]


def validation_numbers(validate: pd.DataFrame) -> dict:
    """The validation's headline numbers from a planner-validate table, over predictions only (applied rows
    that are not calibration points, ``_predictions``); errors are predicted − measured peak bytes:
    plans / plans_in_budget / plans_exact (error 0 bytes) / plan_peak_error (largest |predicted/measured − 1|);
    baselines / baselines_in_budget / baselines_exact / baseline_peak_error / worst_baseline over the feasible
    baselines; over: (rows predicted above the measured peak, the largest such relative error, its spec);
    under: rows predicted below it; references: applied calibration rows; base_error_bytes: largest
    |predicted − measured| bytes alive before the step over the models; slowdown_error and time_error:
    median and max of |predicted/measured − 1| over the plans."""
    rows = _predictions(validate)
    plans = rows[rows["method"] == "plan"]
    others = rows[_feasible(rows) & (rows["method"] != "plan")]
    slow, abs_ = plans["slowdown_rel_error"].abs(), plans["time_rel_error"].abs()
    worst = others.loc[others["peak_rel_error"].abs().idxmax(), "method"] if len(others) else None
    both = pd.concat([plans, others])
    over = both[both["peak_error_bytes"] > 0]
    top = over.loc[over["peak_rel_error"].idxmax()] if len(over) else None
    applied = validate[validate["measured_peak_bytes"].notna()]
    return {
        "plans": len(plans), "plans_in_budget": int((plans["measured_peak_bytes"] <= plans["budget_bytes"]).sum()),
        "plans_exact": int((plans["peak_error_bytes"] == 0).sum()),
        "plan_peak_error": float(plans["peak_rel_error"].abs().max()) if len(plans) else np.nan,
        "baselines": len(others),
        "baselines_in_budget": int((others["measured_peak_bytes"] <= others["budget_bytes"]).sum()),
        "baselines_exact": int((others["peak_error_bytes"] == 0).sum()),
        "baseline_peak_error": float(others["peak_rel_error"].abs().max()) if len(others) else np.nan,
        "worst_baseline": worst,
        "over": (len(over), np.nan if top is None else float(top["peak_rel_error"]),
                 None if top is None else str(top["spec"])),
        "under": int((both["peak_error_bytes"] < 0).sum()),
        "references": int(applied["reference"].astype(bool).sum()),
        "base_error_bytes": int((validate["predicted_base_bytes"] - validate["measured_base_bytes"]).abs().max()),
        "slowdown_error": (float(slow.median()), float(slow.max())),
        "time_error": (float(abs_.median()), float(abs_.max())),
    }


def peak_errors(validate: pd.DataFrame) -> pd.DataFrame:
    """Every distinct plan applied in a planner-validate table, once per model: layers, the runtime spec, the
    methods that chose it, predicted and measured peak (bytes), the error (predicted − measured, bytes, and
    relative) and whether it is a calibration point (fitted, not predicted). Sorted by layers, then error."""
    applied = validate[validate["measured_peak_bytes"].notna()]
    rows = []
    for (layers, spec), g in applied.groupby(["layers", "spec"], sort=False):
        first = g.iloc[0]
        rows.append({"layers": int(layers), "plan": spec, "chosen by": ", ".join(dict.fromkeys(g["method"])),
                     "predicted peak (bytes)": int(first["predicted_peak_bytes"]),
                     "measured peak (bytes)": int(first["measured_peak_bytes"]),
                     "error (bytes)": int(first["peak_error_bytes"]), "error": float(first["peak_rel_error"]),
                     "calibration point": bool(first["reference"])})
    columns = ["layers", "plan", "chosen by", "predicted peak (bytes)", "measured peak (bytes)", "error (bytes)",
               "error", "calibration point"]
    table = pd.DataFrame(rows, columns=columns)
    return table.sort_values(["layers", "error (bytes)", "plan"]).reset_index(drop=True)


KINDS = ("none and full layers", "with selective layers", "multi-layer checkpoint units")
"""Plan kinds of ``plan_kind``, in report order."""


def plan_kind(spec: str, layers: int) -> str:
    """Which of KINDS a runtime plan spec (``remat.policies.parse_plan``) is: a per-layer plan of none and full
    layers only, one with a selective layer, or one with a checkpoint unit of several layers (segments:k,
    uniform:N with N > 1) — the groups the torch cost model predicts with different accuracy."""
    from remat.policies import parse_plan
    plan = parse_plan(spec, int(layers))
    if any(stop - start > 1 for start, stop in plan.groups):
        return KINDS[2]
    return KINDS[1] if "selective" in plan.policies else KINDS[0]


def error_by_kind(validate: pd.DataFrame) -> pd.DataFrame:
    """Per plan kind (``plan_kind``), over the distinct predicted plans of a planner-validate table (applied,
    not calibration points; one per model and spec): plans, those predicted to the byte, the largest
    over-prediction and the largest under-prediction (predicted/measured − 1; 0 when none)."""
    rows = _predictions(validate).drop_duplicates(["layers", "spec"])
    kinds = [plan_kind(s, n) for s, n in zip(rows["spec"], rows["layers"])]
    out = []
    for kind in KINDS:
        g = rows[[k == kind for k in kinds]]
        if g.empty:
            continue
        err = g["peak_rel_error"]
        out.append({"plans": kind, "applied": len(g), "exact to the byte": int((g["peak_error_bytes"] == 0).sum()),
                    "largest over": float(max(0.0, err.max())), "largest under": float(min(0.0, err.min()))})
    return pd.DataFrame(out, columns=["plans", "applied", "exact to the byte", "largest over", "largest under"])


def validate_table(validate: pd.DataFrame) -> pd.DataFrame:
    """The plan at each budget of a planner-validate table: layers, budget, the plan as counts, predicted and
    measured peak (MiB), peak error (bytes: predicted − measured; and relative), whether the plan is a
    calibration point, predicted and measured slowdown against none, step times (s)."""
    plans = validate[(validate["method"] == "plan") & validate["measured_peak_bytes"].notna()]
    return pd.DataFrame({
        "layers": plans["layers"].astype(int),
        "budget (MiB)": plans["budget_bytes"] / MiB,
        "plan": plans["spec"].map(spec_counts),
        "predicted peak (MiB)": plans["predicted_peak_bytes"] / MiB,
        "measured peak (MiB)": plans["measured_peak_bytes"] / MiB,
        "peak error (bytes)": plans["peak_error_bytes"].astype(int),
        "peak error": plans["peak_rel_error"],
        "calibration point": plans["reference"].astype(bool),
        "predicted slowdown": plans["predicted_slowdown"],
        "measured slowdown": plans["measured_slowdown"],
        "predicted step (s)": plans["predicted_step_time_s"],
        "measured step (s)": plans["measured_step_time_s"],
    }).reset_index(drop=True)
