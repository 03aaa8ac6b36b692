"""Sanity gates: a measurement that breaks an invariant becomes an ``invalid`` finding, shown with its reason
and never summarised as data. Each gate returns the reason it fails, or "" when the measurement passes.

    reasons = [noisy(m, iqr), negative_overhead(over, noise), apart(t1, iqr1, t2, iqr2, "forward")]
    finding = gated(finding, reasons)          # INVALID with the first reason, else unchanged
"""

from __future__ import annotations

from remat.analysis.findings import INVALID, Finding, marked

MAX_IQR_SHARE = 0.5
"""A timing whose interquartile range exceeds half its median is noise, not a measurement (the rounds disagree
by more than the effects the sweeps look for, which are 2–40 % of a step)."""


def noisy(median: float, iqr: float, what: str = "the timing") -> str:
    """Fails when the IQR is over MAX_IQR_SHARE of the median."""
    if iqr > MAX_IQR_SHARE * median:
        return f"{what}'s IQR is {100 * iqr / median:.0f} % of its median (over {100 * MAX_IQR_SHARE:.0f} %)"
    return ""


def negative_overhead(overhead: float, noise: float, what: str = "recompute") -> str:
    """Fails when an overhead that can only add work (recomputation) is below zero by more than the noise
    (both as fractions of the same baseline)."""
    if overhead < -noise:
        return f"{what} overhead {100 * overhead:+.1f} % is below zero beyond the noise (±{100 * noise:.1f} %)"
    return ""


def apart(a: float, iqr_a: float, b: float, iqr_b: float, what: str = "the same computation") -> str:
    """Fails when two timings of the same computation (e.g. every mode's forward) differ by more than the
    larger of their IQRs."""
    if abs(a - b) > max(iqr_a, iqr_b):
        return f"{what} timed twice: {a:.4g} vs {b:.4g}, apart beyond their IQR ({max(iqr_a, iqr_b):.2g})"
    return ""


def gated(finding: Finding, reasons: list[str]) -> Finding:
    """``finding`` marked INVALID with the first failing gate's reason, or unchanged when every gate passes."""
    failed = [r for r in reasons if r]
    return marked(finding, INVALID, failed[0]) if failed else finding
