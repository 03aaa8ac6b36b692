"""The planner report's tensor-plan findings (``findings(frame)``) and table (``tensor_display``), from the
planner-tensor table (remat.experiments.tensor_plans: per model and budget, a tensor plan and a per-block plan
applied and measured). Nothing is judged against a paper: the claims are remat's own guarantees (the measured
peak within the budget and equal to the prediction, gradients bit for bit) and the predicted gain of choosing
per op output over choosing per block. A gain is t_block / t_tensor − 1 (a fraction)."""

from __future__ import annotations

import math

import pandas as pd

from remat.analysis import catalog
from remat.analysis.findings import Finding, judge
from remat.units import MiB, percent, signed_percent

TIE = 1e-12
"""Predicted times this close (relative) are equal."""

CLAIMS = {
    "tensor.device": "Where the tensor plans were applied and measured",
    "tensor.models": "Models planned per op output and per block", "tensor.skipped": "Models left out",
    "tensor.points": "Budgets per model", "tensor.plans": "Plans applied (both kinds, every budget)",
    "tensor.fit": "Plans whose measured peak is within their budget",
    "tensor.exact": "Plans whose measured peak equals the prediction to the byte",
    "tensor.error": "Largest |measured − predicted| peak, bytes",
    "tensor.bitwise": "Plans whose gradients are bit for bit the unmodified model's",
    "tensor.monotone": "Models whose tensor plans never predict a higher peak or a slower step at a smaller budget",
    "tensor.gain": "Largest predicted step-time gain of the tensor plan over the per-block plan at one budget",
    "tensor.gain.where": "Where", "tensor.kept": "Tensor plans in which some block keeps its own op set",
    "tensor.slower": "Budgets where the tensor plan is predicted slower than the per-block plan",
    "tensor.plan_s": "Longest auto.plan call (measure and solve), wall seconds on this machine",
}


def table(root=".") -> pd.DataFrame:
    """The planner-tensor rows shown (attrs["where"]): the GPU's when there are any, else the first device's."""
    return catalog.read_shown("planner.tensor", root)


def _m(id: str, value: float, text: str | None = None, where: str = "") -> Finding:
    return judge(id, CLAIMS[id], value, where=where, text=str(value) if text is None else text)


def _pairs(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per (model, point): the tensor plan's columns beside the per-block plan's (suffixes _t, _b)."""
    keys = ["model", "point", "budget_bytes"]
    tensor, block = (frame[frame["granularity"] == g].set_index(keys) for g in ("tensor", "block"))
    out = tensor.join(block, suffixes=("_t", "_b")).reset_index()
    out["gain"] = out["predicted_step_time_s_b"] / out["predicted_step_time_s_t"] - 1
    return out


def _split(frame: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(rows measured, rows of models left out: a reason in ``skipped``)."""
    reasons = frame["skipped"] if "skipped" in frame else pd.Series(None, index=frame.index, dtype=object)
    left = reasons.notna()
    return frame[~left], frame[left].assign(skipped=reasons[left])


def _monotone(rows: pd.DataFrame) -> bool:
    rows = rows.sort_values("budget_bytes")
    peak, step = rows["predicted_peak_bytes"].to_numpy(), rows["predicted_step_time_s"].to_numpy()
    return bool((peak[1:] >= peak[:-1]).all() and (step[1:] <= step[:-1] * (1 + TIE)).all())


def findings(frame: pd.DataFrame) -> list[Finding]:
    """Every CLAIMS finding from the planner-tensor rows ``frame`` (``table``)."""
    at = frame.attrs.get("where", "")
    done, skipped = _split(frame)
    pairs = _pairs(done)
    best = pairs.loc[pairs["gain"].idxmax()] if len(pairs) else None
    tensor = done[done["granularity"] == "tensor"]
    error = (done["measured_peak_bytes"] - done["predicted_peak_bytes"]).abs().max()
    where = "—" if best is None else f"{best['model']}, budget {best['budget_bytes'] / MiB:.1f} MiB"
    return [
        _m("tensor.device", math.nan, str(done["device"].iloc[0]).upper() if len(done) else "—", at),
        _m("tensor.models", done["model"].nunique(), "; ".join(dict.fromkeys(done["model"]))),
        _m("tensor.skipped", len(skipped), "; ".join(f"{m}: {s}" for m, s in zip(skipped["model"],
                                                                               skipped["skipped"])) or "none"),
        _m("tensor.points", int(done["point"].max() + 1) if len(done) else 0),
        _m("tensor.plans", len(done), where=at),
        _m("tensor.fit", int((done["measured_peak_bytes"] <= done["budget_bytes"]).sum()), where=at),
        _m("tensor.exact", int((done["measured_peak_bytes"] == done["predicted_peak_bytes"]).sum()), where=at),
        _m("tensor.error", error, f"{int(error):,}", at),
        _m("tensor.bitwise", int(done["grads_bitwise"].astype(bool).sum()), where=at),
        _m("tensor.monotone", sum(_monotone(g) for _, g in tensor.groupby("model")), where="predicted"),
        _m("tensor.gain", math.nan if best is None else best["gain"],
           "—" if best is None else percent(best["gain"], 1), "predicted"),
        _m("tensor.gain.where", math.nan, where),
        _m("tensor.kept", int((tensor["kept_blocks"] > 0).sum()), where="predicted"),
        _m("tensor.slower", int((pairs["gain"] < -TIE).sum()), where="predicted"),
        _m("tensor.plan_s", done["plan_s"].max(), f"{done['plan_s'].max():.2f} s", at)]


def tensor_display(frame: pd.DataFrame) -> pd.DataFrame:
    """@tbl-tensor: per model and budget, the tensor plan beside the per-block plan: peaks in MiB (predicted /
    measured), step in ms (predicted on the GPU preset), the gain, the blocks keeping an op set, bitwise."""
    p = _pairs(_split(frame)[0])
    both = lambda k: [f"{a / MiB:.2f} / {b / MiB:.2f}" for a, b in zip(p[f"predicted_peak_bytes_{k}"],
                                                                       p[f"measured_peak_bytes_{k}"])]
    return pd.DataFrame({
        "model": p["kind_t"], "budget (MiB)": p["budget_bytes"].map(lambda x: f"{x / MiB:.2f}"),
        "tensor plan peak (MiB)": both("t"), "per-block plan peak (MiB)": both("b"),
        "step (ms): tensor / per-block": [f"{a * 1e3:.3f} / {b * 1e3:.3f}" for a, b in
                                         zip(p["predicted_step_time_s_t"], p["predicted_step_time_s_b"])],
        "gain": p["gain"].map(lambda g: signed_percent(g, digits=1)),
        "blocks keeping an op set": p["kept_blocks_t"].astype(int),
        "bitwise": (p["grads_bitwise_t"].astype(bool) & p["grads_bitwise_b"].astype(bool)).map(
            {True: "yes", False: "NO"})}).reset_index(drop=True)
