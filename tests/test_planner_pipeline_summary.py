"""The planner report's pipeline-rank findings (remat.analysis.planner_pipeline) on hand-made tables: the gain per
schedule, the never-slower invariant, a refused schedule, and each rank held to max(1 %, 8 MiB) and its budget."""

from __future__ import annotations

import pandas as pd

from remat.analysis.findings import INVALID, MEASURED, Findings
from remat.analysis.planner_pipeline import pipeline_display, pipeline_findings, schedule_findings
from remat.units import MiB


def test_the_gain_of_each_schedule_a_refused_one_and_a_slower_one():
    # A: shared 1.1 s over per-rank 1.0 s, +10 %; B refused; C (second table): per-rank 1.2 s over shared 1.0 s
    same = dict(model="m", gpu="g", sp=True, note=None)
    rows = [dict(same, schedule="A", feasible=True, step_time_s=1.0, uniform_step_time_s=1.1),
            dict(same, schedule="B", feasible=False, step_time_s=None, uniform_step_time_s=None, note="no")]
    F = Findings(schedule_findings(pd.DataFrame(rows)))
    assert F["schedules.gains"].ours == "m on g with SP: A +10.00%, B refused (no)"
    assert (F["schedules.gains"].status, F["schedules.slower"].value) == (MEASURED, 0)
    slower = dict(same, schedule="C", feasible=True, step_time_s=1.2, uniform_step_time_s=1.0)
    F = Findings(schedule_findings(pd.DataFrame(rows + [slower])))
    assert (F["schedules.gains"].status, F["schedules.slower"].value) == (INVALID, 1)


def test_each_rank_within_max_of_one_percent_and_8_mib_and_its_budget():
    # measured 100 MiB (1 % is 1 MiB: 8 MiB allowed) off by exactly 8 MiB, then by 8 MiB + 1 byte and a byte over
    # its budget; measured 1000 MiB (10 MiB allowed) off by −9 MiB, its gradients off
    rows = [(100 * MiB, 8 * MiB, 100 * MiB, 0.0), (100 * MiB, 8 * MiB + 1, 100 * MiB - 1, 0.0),
            (1000 * MiB, -9 * MiB, 1000 * MiB, 1e-7)]
    frame = pd.DataFrame([dict(schedule="1F1B", pp=3, rank=r, stages=str(r), plan="none,full", budget_bytes=b,
                               measured_peak_bytes=m, predicted_peak_bytes=m + e, peak_error_bytes=e,
                               peak_rel_error=e / m, grads_max_rel_error=g) for r, (m, e, b, g) in enumerate(rows)])
    F = Findings(pipeline_findings(frame))
    assert [F[f"pipeline.{k}"].value for k in ("ranks", "within", "fit", "bitwise")] == [3, 2, 2, 2]
    assert list(pipeline_display(frame)["within"]) == ["yes", "NO", "yes"]
