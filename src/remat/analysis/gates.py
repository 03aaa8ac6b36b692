"""Sanity gates: a measurement that breaks an invariant becomes an ``invalid`` finding, shown with its reason
and never summarised as data. Each gate returns the reason it fails, or "" when the measurement passes.

    reasons = [conditions(rows), noisy(m, iqr), negative_overhead(over, noise), apart(t1, iqr1, t2, iqr2, "forward")]
    finding = gated(finding, reasons)          # INVALID with the first reason, else unchanged
"""

from __future__ import annotations

from typing import Mapping

import pandas as pd

from remat.analysis.findings import INVALID, Finding, marked
from remat.analysis.tolerances import TIMING_BUSY
from remat.measure.provenance import MIN_WINDOW_S
from remat.units import signed_percent

MAX_IQR_SHARE = 0.5
"""An IQR over half the median is noise: the rounds disagree by more than the effects sought (2–40 % of a step)."""


def noisy(median: float, iqr: float, what: str = "the timing") -> str:
    """Fails when the IQR is over MAX_IQR_SHARE of the median."""
    if iqr > MAX_IQR_SHARE * median:
        return f"{what}'s IQR is {100 * iqr / median:.0f} % of its median (over {100 * MAX_IQR_SHARE:.0f} %)"
    return ""


def negative_overhead(overhead: float, noise: float, what: str = "recompute") -> str:
    """Fails when an overhead that can only add work is below zero by more than the noise (both fractions)."""
    if overhead < -noise:
        return (f"{what} overhead {signed_percent(overhead, 1, ' %')} is below zero beyond the noise "
                f"(±{100 * noise:.1f} %)")
    return ""


def apart(a: float, iqr_a: float, b: float, iqr_b: float, what: str = "the same computation") -> str:
    """Fails when two timings of the same computation differ by more than the larger of their IQRs."""
    if abs(a - b) > max(iqr_a, iqr_b):
        return f"{what} timed twice: {a:.4g} vs {b:.4g}, apart beyond their IQR ({max(iqr_a, iqr_b):.2g})"
    return ""


def busy(rows: Mapping | pd.Series | pd.DataFrame) -> str:
    """Fails when a timed row (a DataFrame: its busiest) ran while other processes used over TIMING_BUSY cores: by
    its own timing window (unless under MIN_WINDOW_S), else its run's busiest timing window, else the whole run."""
    frame = rows if isinstance(rows, pd.DataFrame) else pd.DataFrame([dict(rows)])
    number = lambda col: pd.to_numeric(frame[col], errors="coerce")
    cores = pd.Series(float("nan"), index=frame.index)
    for col, wall in (("run_other_cores", "run_wall_s"), ("run_timed_other_cores", ""),
                      ("timing_other_cores", "timing_wall_s")):        # later wins: the row's own window first
        if col in frame:
            x = number(col).where(~(number(wall) < MIN_WINDOW_S)) if wall in frame else number(col)
            cores = x.where(x.notna(), cores)
    worst = cores.max()
    if not worst > TIMING_BUSY.value:
        return ""
    total = number("run_cores").max() if "run_cores" in frame else float("nan")
    of = f" of {total:.0f}" if total == total else ""
    return f"timed while other processes used {worst:.2f} cores{of} (over {TIMING_BUSY.value:g}: a busy machine)"


def emulated(rows: Mapping | pd.Series | pd.DataFrame) -> str:
    """Fails when a timed row computed in a dtype its device emulates (``dtype_native`` False, remat.precision):
    its times are another machine's (a Zen 3 GPT layer's backward: 8.1× its forward in emulated bfloat16, 1.6×)."""
    frame = rows if isinstance(rows, pd.DataFrame) else pd.DataFrame([dict(rows)])
    native = frame.get("dtype_native", pd.Series("", index=frame.index))   # no column: nothing emulated
    bad = frame[native.astype(str).str.lower() == "false"]
    return (f"timed in {bad['dtype'].iloc[0] if 'dtype' in bad else 'a dtype'}, which this device emulates"
            if len(bad) else "")


def conditions(rows: Mapping | pd.Series | pd.DataFrame) -> str:
    """Fails when a timed row was ``emulated`` or ``busy``."""
    return emulated(rows) or busy(rows)


def gated(finding: Finding, reasons: list[str]) -> Finding:
    """``finding`` marked INVALID with the first failing gate's reason, or unchanged when every gate passes."""
    failed = [r for r in reasons if r]
    return marked(finding, INVALID, failed[0]) if failed else finding
