"""The planner report's pipeline-rank findings (remat.analysis.planner_pipeline) on hand-made tables: the gain per
schedule, the never-slower invariant, a refused schedule, and each rank held to max(1 %, 8 MiB) and its budget."""

from __future__ import annotations

import pandas as pd

from remat.analysis.findings import INVALID, MEASURED, Findings
from remat.analysis.planner_pipeline import pipeline_display, pipeline_findings, schedule_findings
from remat.units import MiB


def test_the_gain_of_each_schedule_a_refused_one_and_a_slower_one():
    # A: shared 1.1 s over per-rank 1.0 s, +10 %; B refused; T a tie; C (second table): per-rank 1.2 s, shared 1.0 s
    row = lambda s, step, shared, note=None: dict(model="m", gpu="g", sp=True, schedule=s, feasible=note is None,
                                                  step_time_s=step, uniform_step_time_s=shared, note=note)
    rows = [row("A", 1.0, 1.1), row("B", None, None, "no"), row("T", 2.0, 2.0)]
    F = Findings(schedule_findings(pd.DataFrame(rows)))
    assert F["schedules.gains"].ours == "m on g with SP: A +10.00%, B refused (no), T 0.00%"
    assert (F["schedules.gains"].status, F["schedules.slower"].value) == (MEASURED, 0)
    F = Findings(schedule_findings(pd.DataFrame(rows + [row("C", 1.2, 1.0)])))
    assert (F["schedules.gains"].status, F["schedules.slower"].value) == (INVALID, 1)


def test_each_rank_within_max_of_one_percent_and_8_mib_and_its_budget():
    # measured 100 MiB (8 MiB allowed: 1 % is less) off by 8 MiB, then by 8 MiB + 1 byte and a byte over budget;
    # measured 1000 MiB (10 MiB allowed: 1 % of the measured peak) off by −9 MiB, gradients off, then by −10 MiB
    rows = [(100 * MiB, 8 * MiB, 100 * MiB, 0.0), (100 * MiB, 8 * MiB + 1, 100 * MiB - 1, 0.0),
            (1000 * MiB, -9 * MiB, 1000 * MiB, 1e-7), (1000 * MiB, -10 * MiB, 1000 * MiB, 0.0)]
    frame = pd.DataFrame([dict(schedule="1F1B", pp=3, rank=r, stages=str(r), plan="none,full", budget_bytes=b,
                               measured_peak_bytes=m, predicted_peak_bytes=m + e, peak_error_bytes=e,
                               peak_rel_error=e / m, grads_max_rel_error=g) for r, (m, e, b, g) in enumerate(rows)])
    F = Findings(pipeline_findings(frame))
    assert [F[f"pipeline.{k}"].value for k in ("ranks", "within", "fit", "bitwise")] == [4, 3, 3, 3]
    assert list(pipeline_display(frame)["within"]) == ["yes", "NO", "yes", "yes"]
