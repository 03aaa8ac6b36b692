"""Per-rank timelines read from torch.distributed.pipelining's schedules (remat.planner.schedules), against
Megatron's counts (Korthikanti et al. 2022 §4.2.3, Narayanan et al. 2021's warm-up) and hand-followed actions."""

from __future__ import annotations

from collections import Counter
from fractions import Fraction

import pytest

from remat.errors import UsageError
from remat.planner.schedules import NAMES, actions, check_name, step_seconds, timeline


@pytest.mark.parametrize("p, n", [(2, 2), (2, 5), (4, 4), (4, 9), (8, 16)])
def test_1f1b_rank_r_holds_min_of_p_minus_r_and_n(p, n):
    t = timeline("1F1B", p, n)
    assert [t.most_held(r) for r in range(p)] == [min(p - r, n) for r in range(p)]


@pytest.mark.parametrize("p, m, n", [(2, 2, 4), (4, 2, 8), (4, 2, 16), (4, 3, 12), (8, 2, 16)])
def test_interleaved_1f1b_holds_megatrons_warmup_plus_one_and_the_papers_factor_on_rank_0(p, m, n):
    t = timeline("Interleaved1F1B", p, n, m)
    # Megatron's interleaved warm-up on rank r: 2(p − r − 1) + (m − 1)p forwards, then one more before a backward
    assert [t.most_held(r) for r in range(p)] == [2 * (p - r - 1) + (m - 1) * p + 1 for r in range(p)]
    layers = 2 * p * m                                            # two layers per chunk
    assert t.most_held(0) * (layers // (p * m)) == layers * (1 + Fraction(p - 1, p * m))   # layers' worth
    assert t.stages[1] == tuple(1 + k * p for k in range(m))     # looped placement: rank r runs r, r + p, …


def test_gpipe_runs_every_forward_before_any_backward():
    t = timeline("GPipe", 4, 6)
    assert [t.most_held(r) for r in range(4)] == [6] * 4


@pytest.mark.parametrize("name, m", [(n, 1 if n in ("GPipe", "1F1B") else 2) for n in NAMES])
def test_every_stage_runs_each_micro_batch_forward_and_backward_once_and_ends_empty(name, m):
    p, n = 4, 8
    acts, t = actions(name, p, n, m), timeline(name, p, n, m)
    for r in range(p):
        count = Counter(acts[r])
        for s in t.stages[r]:
            assert count[(s, "F")] == n and count[(s, "B")] + count[(s, "I")] == n
            assert count[(s, "W")] == count[(s, "I")]
        assert sum(t.events[r][-1].held) == 1          # the last action's own micro-batch, then nothing
        _every_backward_counted(t.events[r], n, len(t.stages[r]))
    assert sorted(s for st in t.stages for s in st) == list(range(p * m))


def _every_backward_counted(events, n: int, k: int) -> None:
    """Each of a rank's k stages runs N backwards (B, or I of a split one): N events with that stage's backward
    running. At the last action every forward and every other backward has run (sent on and sent back), and at
    most that action's own micro-batch waits for a weight-gradient step."""
    assert Counter(e.backward for e in events if e.backward is not None) == {c: n for c in range(k)}
    last = events[-1]
    assert sum(last.sent) == n * k and sum(last.sent_grads) + (last.backward is not None) == n * k
    assert sum(last.split) <= 1


def test_v_schedules_put_stages_r_and_2p_minus_1_minus_r_on_rank_r():
    for name in ("ZBVZeroBubble", "DualPipeV"):
        t = timeline(name, 4, 8, 2)
        assert t.stages == ((0, 7), (1, 6), (2, 5), (3, 4))


def test_a_split_backward_keeps_activations_until_the_weight_gradient_step():
    t = timeline("ZBVZeroBubble", 2, 4, 2)
    assert any(sum(e.split) for e in t.events[0])
    # the same per-stage bytes with something held past I cost more than without
    assert t.peak_bytes(0, [10, 10], [0, 0], [5, 5]) > t.peak_bytes(0, [10, 10], [0, 0])
    # a non-split schedule never has a micro-batch past I
    assert not any(sum(e.split) for r in range(2) for e in timeline("1F1B", 2, 4).events[r])


def test_peak_bytes_of_1f1b_by_hand():
    # rank 0 of p = 2, N = 4: F0 F1 B0 F2 B1 F3 B2 B3 — two held when B0 runs: 2 × 10 + its transient 3
    assert actions("1F1B", 2, 4)[0] == [(0, "F"), (0, "F"), (0, "B"), (0, "F"), (0, "B"), (0, "F"), (0, "B"),
                                        (0, "B")]
    t = timeline("1F1B", 2, 4)
    assert t.peak_bytes(0, [10], [3]) == 23
    assert t.peak_bytes(1, [10], [3]) == 13                        # the last rank: one in flight


def test_interleaved_peak_weighs_each_chunk_by_what_it_holds():
    t = timeline("Interleaved1F1B", 2, 4, 2)      # rank 0 runs stages 0 and 2
    cheap_first = t.peak_bytes(0, [1, 100], [0, 0])
    cheap_last = t.peak_bytes(0, [100, 1], [0, 0])
    assert cheap_first != cheap_last                               # the chunks hold different counts over time
    held = [e.held for e in t.events[0]]
    assert cheap_first == max(a + 100 * b for a, b in held) and cheap_last == max(100 * a + b for a, b in held)


@pytest.mark.parametrize("name, pp, m, field", [("Zigzag", 4, 1, "--schedule"), ("GPipe", 4, 2, "--interleave"),
                                                 ("ZBVZeroBubble", 4, 3, "--interleave"),
                                                 ("Interleaved1F1B", 4, 1, "--interleave"), ("1F1B", 1, 1, "--pp")])
def test_bad_schedule_input_names_the_field(name, pp, m, field):
    with pytest.raises(UsageError) as err:
        timeline(name, pp, 8, m)
    assert err.value.field == field


def test_names_match_case_insensitively_as_torchtitan_writes_them():
    assert check_name("interleaved1f1b") == "Interleaved1F1B" and check_name("gpipe") == "GPipe"


def test_runtime_schedules_keep_what_they_sent_until_the_step_ends():
    # torch runs the multi-stage schedules on _PipelineScheduleRuntime, which waits for its sends at the end
    assert [timeline(n, 2, 4, m).keeps_sends for n, m in (("GPipe", 1), ("1F1B", 1), ("Interleaved1F1B", 2),
                                                           ("ZBVZeroBubble", 2))] == [False, False, True, True]
    t = timeline("Interleaved1F1B", 2, 4, 2)
    last = t.events[0][-1]                           # during the last backward: every forward done, one backward left
    assert last.sent == (4, 4) and sum(last.sent_grads) == 2 * 4 - 1
    # a sent output of 10 bytes and input gradient of 1 byte per micro-batch, nothing else held: 8 outputs and 7
    # gradients at that event
    assert t.event_bytes(last, [0, 0], [0, 0], None, [(10, 1), (10, 1)]) == 8 * 10 + 7 * 1


@pytest.mark.parametrize("name", ["GPipe", "1F1B"])
@pytest.mark.parametrize("p, n", [(2, 2), (2, 5), (4, 8), (8, 16)])
def test_a_one_stage_schedules_step_is_n_plus_p_minus_1_stage_times(name, p, n):
    # equal stages, f forward and b backward seconds: the bubble is (p − 1)(f + b) (Huang et al. 2019; Narayanan
    # et al. 2021 §2.2)
    assert step_seconds(name, p, n, 1, [(1.0, 2.5, 1.0)] * p) == pytest.approx((n + p - 1) * 3.5)


@pytest.mark.parametrize("p, m, n", [(2, 2, 4), (4, 2, 8), (4, 3, 12), (8, 2, 16)])
def test_the_interleaved_step_has_narayanans_bubble(p, m, n):
    # m chunks of f/m and b/m seconds per rank: (N·m + p − 1) chunk times, i.e. a bubble of (p − 1)/m of a stage's
    # (Narayanan et al. 2021 §2.2.2)
    f, b = 1.0, 2.0
    assert step_seconds("Interleaved1F1B", p, n, m, [(f / m, b / m, b / m / 2)] * (p * m)) == \
        pytest.approx((n * m + p - 1) * (f + b) / m)


def test_the_1f1b_step_by_hand_with_unequal_stages():
    # p = 2, N = 2; stage 0: f 1, b 2; stage 1: f 3, b 4. Rank 0: F0 [0, 1], F1 [1, 2]; rank 1: F0 [1, 4], B0 [4, 8],
    # F1 [8, 11], B1 [11, 15]; rank 0: B0 waits for rank 1's B0: [8, 10], B1 for its B1: [15, 17]
    assert step_seconds("1F1B", 2, 2, 1, [(1.0, 2.0, 1.0), (3.0, 4.0, 2.0)]) == 17.0


@pytest.mark.parametrize("name, m", [(n, 1 if n in ("GPipe", "1F1B") else 2) for n in NAMES])
def test_every_schedules_step_lies_between_its_busiest_rank_and_serial_work(name, m):
    p, n, seconds = 4, 8, [(0.5, 1.0 + 0.1 * s, 0.5) for s in range(4 * m)]
    step, stages = step_seconds(name, p, n, m, seconds), timeline(name, p, n, m).stages
    work = [n * sum(seconds[s][0] + seconds[s][1] for s in stages[r]) for r in range(p)]
    assert max(work) < step < sum(work)


def test_a_split_backward_fills_the_bubble():
    # f = i = w per chunk (Qi et al. 2024's T_F = T_B = T_W): the zero-bubble schedules finish before the 1F1B-type
    # ones with the same work per rank, and never before the work itself
    p, n, chunk = 4, 8, (0.5, 1.0, 0.5)
    one_f_one_b = step_seconds("Interleaved1F1B", p, n, 2, [chunk] * 8)
    for name in ("InterleavedZeroBubble", "ZBVZeroBubble", "DualPipeV"):
        assert n * 2 * 1.5 < step_seconds(name, p, n, 2, [chunk] * 8) < one_f_one_b


def test_actions_that_wait_on_each_other_are_refused(monkeypatch):
    from remat.planner import schedules

    monkeypatch.setattr(schedules, "actions", lambda *a: {0: [(0, "B"), (0, "F")], 1: [(1, "F"), (1, "B")]})
    with pytest.raises(RuntimeError, match="wait on each other"):
        schedules.step_seconds("1F1B", 2, 1, 1, [(1.0, 1.0, 0.5)] * 2)
