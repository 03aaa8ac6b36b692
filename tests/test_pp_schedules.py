"""Per-rank timelines read from torch.distributed.pipelining's schedules (remat.planner.schedules), against
Megatron's counts (Korthikanti et al. 2022 §4.2.3, Narayanan et al. 2021's warm-up) and hand-followed actions."""

from __future__ import annotations

from collections import Counter
from fractions import Fraction

import pytest

from remat.errors import UsageError
from remat.planner.schedules import NAMES, actions, check_name, timeline


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
