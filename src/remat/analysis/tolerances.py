"""The one home of tolerances: each threshold a rule for "reproduced" uses, with the reason for its size.
Rules (``remat.analysis.findings.within_abs`` …) take these; reports print them from the findings' ``rule`` and
``tolerance`` columns, never typed again.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Tolerance:
    """A threshold ``value`` (in ``unit``) and why it is that size."""

    value: float
    unit: str
    why: str


# --- Chen et al. 2016 -----------------------------------------------------------------------------------------

# --- Korthikanti et al. 2022 ----------------------------------------------------------------------------------

# --- sweeps ---------------------------------------------------------------------------------------------------

# --- offload --------------------------------------------------------------------------------------------------

# --- planner --------------------------------------------------------------------------------------------------
