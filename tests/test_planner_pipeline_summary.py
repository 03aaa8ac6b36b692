"""The planner report's pipeline-rank findings (remat.analysis.planner_pipeline) on hand-made tables: gains, the
never-slower invariant, refused schedules, and each rank held to max(1 %, 8 MiB) and its budget."""

from __future__ import annotations

import pandas as pd

from remat.analysis.findings import INVALID, MEASURED, Findings
from remat.analysis.planner_pipeline import pipeline_display, pipeline_findings, schedule_findings
from remat.units import MiB


def schedules(slower: bool = False) -> pd.DataFrame:
    """A: per-rank 1.0 s against shared 1.1 s (10 %, two ranks with their own plan); B: a tie; C: refused; with
    ``slower`` D: per-rank 1.2 s against shared 1.0 s."""
    same = dict(model="m", gpu="g", sp=True, pp=2, stages_per_rank=1, micro_batches=4, budget_bytes=8, peak_bytes=7)
    rows = [dict(same, schedule="A", feasible=True, step_time_s=1.0, uniform_step_time_s=1.1, ranks_own_plan=2),
            dict(same, schedule="B", feasible=True, step_time_s=1.0, uniform_step_time_s=1.0, ranks_own_plan=0),
            dict(same, schedule="C", feasible=False, note="needs --interleave")]
    rows += [dict(same, schedule="D", feasible=True, step_time_s=1.2, uniform_step_time_s=1.0, ranks_own_plan=2)
             ] if slower else []
    return pd.DataFrame(rows)


def test_the_largest_gain_where_it_is_and_the_refused_schedule():
    F = Findings(schedule_findings(schedules()))
    assert (F["schedules.gain"].ours, F["schedules.gain"].status) == ("10.0%", MEASURED)
    assert F["schedules.gain.where"].ours == "A, m on g with SP" and F["schedules.slower"].value == 0
    assert F["schedules.refused"].ours == "C: needs --interleave"


def test_a_per_rank_plan_predicted_slower_than_the_shared_one_makes_the_gain_invalid():
    F = Findings(schedule_findings(schedules(slower=True)))
    assert F["schedules.slower"].value == 1 and F["schedules.gain"].status == INVALID


def ranks() -> pd.DataFrame:
    """Measured 100 MiB (1 % is 1 MiB: 8 MiB allowed): off by exactly 8 MiB, by 8 MiB + 1 byte; measured 1000 MiB
    (10 MiB allowed): off by −9 MiB; the second over its budget by a byte, the third's gradients off."""
    rows = [(100 * MiB, 8 * MiB, 100 * MiB, 0.0), (100 * MiB, 8 * MiB + 1, 100 * MiB - 1, 0.0),
            (1000 * MiB, -9 * MiB, 1000 * MiB, 1e-7)]
    frame = pd.DataFrame([dict(schedule="1F1B", pp=3, rank=r, stages=str(r), plan="none,full", budget_bytes=b,
                               measured_peak_bytes=m, predicted_peak_bytes=m + e, peak_error_bytes=e,
                               peak_rel_error=e / m, grads_max_rel_error=g) for r, (m, e, b, g) in enumerate(rows)])
    return frame


def test_each_rank_within_max_of_one_percent_and_8_mib_and_its_budget():
    F = Findings(pipeline_findings(ranks()))
    assert (F["pipeline.ranks"].value, F["pipeline.within"].value, F["pipeline.fit"].value) == (3, 2, 2)
    assert F["pipeline.bitwise"].value == 2 and F["pipeline.runs"].ours == "1: 1F1B at p = 3"
    assert list(pipeline_display(ranks())["within"]) == ["yes", "NO", "yes"]
