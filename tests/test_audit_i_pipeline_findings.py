"""The planner-schedules rows (remat.experiments.pipeline_ranks.schedule_gains), on hand-made plans."""

from __future__ import annotations

from remat.experiments import pipeline_ranks
from remat.planner.ranks import PipelinePlan, RankPlan


def test_a_schedules_row_counts_the_ranks_with_their_own_plan_and_the_largest_per_rank_peak(monkeypatch):
    # three ranks: rank 0 runs its own plan (full) with a 7-byte peak, ranks 1 and 2 the shared plan's (none) at 5
    # bytes; the shared plan peaks at 9 bytes on rank 0. One rank of three differs; the row's peak is the per-rank
    # plans' 7
    rank = lambda r, policy, peak: RankPlan(r, (r,), (policy,), peak, 1, 1.0, 1)      # noqa: E731
    own = (rank(0, "full", 7), rank(1, "none", 5), rank(2, "none", 5))
    shared = (rank(0, "none", 9), rank(1, "none", 5), rank(2, "none", 5))
    plan = PipelinePlan("1F1B", 3, 1, 4, 8, own, shared, 10.0, 11.0)
    monkeypatch.setattr(pipeline_ranks, "plan_pipeline", lambda cfg, st, schedule: plan)
    row = pipeline_ranks.schedule_gains(pipeline_ranks.SchedulesParams(schedules=["1F1B"])).iloc[0]
    assert (row["ranks_own_plan"], row["peak_bytes"], row["plans"]) == (1, 7, "full | none | none")
