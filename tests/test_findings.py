"""The findings core: each rule fails a wrong value (values by hand), the judge's statuses, the CSV round trip, the
sanity gates and the scorecard view."""

from __future__ import annotations

import math
import os
from dataclasses import astuple, replace

import pandas as pd
import pytest

from remat.analysis import catalog, gates, index, sweeps_tables
from remat.analysis.findings import (INVALID, MEASURED, MINOR, NOT_MEASURED, NOT_REPRODUCED, NOT_REPRODUCIBLE, PARTIAL,
                                     REPRODUCED, exact, holds, judge, marked, not_measured, read, within_abs,
                                     within_range, within_rel, write)
from remat.analysis.tolerances import Tolerance
from remat.errors import UsageError
from remat.paper import CHEN, KORTHIKANTI, PaperValue
from remat.report import phrases
from remat.report.scorecard import scorecard_markdown, verdicts_markdown

T4_FULL = PaperValue(39, "Table 4", "39 %")      # paper Table 4: full recompute costs 39 %
PP3 = Tolerance(3, " pp", "the paper disagrees with itself by about 3 pp")


@pytest.mark.parametrize("rule, paper, statuses", [   # ours -> the status each rule gives it
    (within_abs(PP3), T4_FULL, {39: REPRODUCED, 41.9: REPRODUCED, 36.1: REPRODUCED, 42.5: NOT_REPRODUCED,
                                35.0: NOT_REPRODUCED}),                                       # two-sided
    (within_rel(Tolerance(0.1, "", "why")), PaperValue(48 / 7, "abstract", "6.9×"),          # Chen: 48 GB -> 7 GB
     {7.0: REPRODUCED, 6.9: REPRODUCED, 10.5: NOT_REPRODUCED, 4.0: NOT_REPRODUCED}),
    (exact("every model on the paper's side of the line", "a yes/no per model"), PaperValue(4, "Figure 1"),
     {4: REPRODUCED, 3: NOT_REPRODUCED}),                                                       # any difference fails
    (within_abs(Tolerance(3, " pp", "why"), minor=2), PaperValue(39, "Table 4"),   # minor issues within 2 × 3 pp
     {41.9: REPRODUCED, 44.9: MINOR, 33.1: MINOR, 45.1: NOT_REPRODUCED}),
    (within_abs(Tolerance(3, " pp", "why")), PaperValue(39, "Table 4"), {44.9: NOT_REPRODUCED}),   # no band
    (within_rel(Tolerance(0.25, "", "why"), minor=2), PaperValue(6.9, "abstract"),   # 6.9 × 1.5 = 10.35: 10.5 beyond
     {8.6: REPRODUCED, 10.3: MINOR, 10.5: NOT_REPRODUCED}),
    (holds("every model within the band"), PaperValue(39, "Table 4"),   # ours: the share of the models that are
     {1: REPRODUCED, 0.75: PARTIAL, 0: NOT_REPRODUCED}),
])
def test_each_rule_grades_ours_against_the_papers_value(rule, paper, statuses):
    assert {ours: judge("t", "c", ours, paper, rule).status for ours in statuses} == statuses


def test_within_range_and_the_reason_when_it_fails():
    rule = within_range(4.5, 5.5, "×", "5× has one significant figure")
    assert judge("x", "c", 4.9, PaperValue(5, "abstract"), rule).status == REPRODUCED
    failed = judge("x", "c", 6.2, PaperValue(5, "abstract"), rule)
    assert failed.status == NOT_REPRODUCED and "6.2" in failed.reason and failed.rule == "within 4.5–5.5×"


def test_judge_without_paper_is_measured_and_nan_is_invalid():
    assert judge("m", "c", 1.5).status == MEASURED
    assert judge("n", "c", math.nan, T4_FULL, within_abs(PP3)).status == INVALID


def test_not_measured_names_the_target():
    f = not_measured("t", "c", catalog.Missing("results/korthikanti/table4.csv"), T4_FULL, within_abs(PP3))
    assert f.status == NOT_MEASURED and "snakemake results/korthikanti/table4.csv" in phrases.verdict(f)


def test_csv_round_trip_and_unique_ids(tmp_path):
    found = [judge("a.b", "claim, with a comma", 38.2, T4_FULL, within_abs(PP3), text="38.2 %", scorecard="P",
                   where="predicted"),
             judge("c", "plain", 2.0)]
    write(found, tmp_path / "f.csv")
    back = read(tmp_path / "f.csv")
    for f in found:   # equal field by field, NaN (no paper value) read back as NaN
        assert [(a, b) for a, b in zip(astuple(back[f.id]), astuple(f)) if a != b and a == a] == []
    with pytest.raises(KeyError, match="no finding 'zz'"):
        back["zz"]
    with pytest.raises(ValueError, match="repeated"):
        write(found + found[:1], tmp_path / "g.csv")
    with pytest.raises(ValueError, match="'where' is not one of"):   # a judged finding says where ours comes from
        write([judge("d", "c", 38.2, T4_FULL, within_abs(PP3), where="somewhere")], tmp_path / "h.csv")


def test_gates_fail_what_breaks_an_invariant():
    assert gates.noisy(10.0, 5.01) and not gates.noisy(10.0, 5.0)          # an IQR of half the median passes
    assert gates.negative_overhead(-0.051, 0.05) and not gates.negative_overhead(-0.05, 0.05)   # at the noise: passes
    # the same forward timed twice: 64.5 ms vs 236.4 ms with IQRs of a few ms
    assert gates.apart(64.5, 3.0, 236.4, 5.0) and not gates.apart(64.5, 3.0, 66.0, 2.0)
    # the threshold is the larger IQR, not their sum: 3.5 apart with IQRs 3 and 2 fails, 3 apart (at it) passes
    assert gates.apart(10.0, 3.0, 13.5, 2.0) and not gates.apart(10.0, 3.0, 13.0, 2.0)
    f = gates.gated(judge("t", "c", 2.9), ["", gates.negative_overhead(-0.561, 0.05)])
    assert f.status == INVALID and "below zero" in f.reason


def test_a_timing_made_on_a_busy_machine_is_invalid_with_its_reason():
    busy = {"step_time_s": 1.0, "timing_other_cores": 1.3, "run_cores": 2}
    quiet = {"step_time_s": 1.0, "timing_other_cores": 0.25, "run_cores": 2}     # at the limit: not over it
    assert gates.busy(busy) == "timed while other processes used 1.30 cores of 2 (over 0.25: a busy machine)"
    assert gates.busy(quiet) == "" and gates.busy({"step_time_s": 1.0}) == ""   # no load recorded: no verdict
    assert gates.busy({**busy, "timing_wall_s": 0.1}) == ""                     # too short a window to tell
    short = {**busy, "timing_wall_s": 0.1, "run_other_cores": 0.26, "run_wall_s": 30.0}    # just over the limit
    assert "0.26 cores of 2" in gates.busy(short)                               # ... then the whole run tells
    f = gates.gated(judge("t", "c", 2.9), [gates.busy(busy), gates.noisy(1.0, 0.1)])
    assert f.status == INVALID and f.reason.startswith("timed while other processes used 1.30 cores")
    assert gates.gated(judge("t", "c", 2.9), [gates.busy(quiet)]).status != INVALID
    # a frame: its busiest row; a row without its own window falls back on the run's busiest one
    frame = pd.DataFrame({"timing_other_cores": [0.0, float("nan")], "run_timed_other_cores": [0.1, 0.9]})
    assert "0.90 cores" in gates.busy(frame) and not gates.busy(frame.iloc[:1])


def test_busy_rows_leave_the_sweep_summaries():
    rows = pd.DataFrame({"status": "ok", "device": "cpu", "k": [1, 2, 3], "step_time_s": [1.0, 1.1, 1.2],
                         "step_time_iqr_s": 0.01, "time_overhead": [0.0, 0.1, 0.2],
                         "timing_other_cores": [0.01, 0.9, 0.02], "run_cores": 2})
    why = sweeps_tables.validity("segments", rows)
    assert why[0] == "" and why[2] == "" and why[1].startswith("timed while other processes used 0.90 cores of 2")
    assert list(sweeps_tables.valid("segments", rows)["k"]) == [1, 3]
    base_busy = sweeps_tables.validity("segments", rows.assign(timing_other_cores=[0.9, 0.0, 0.0]))
    assert all(w.startswith("timed while") for w in base_busy)          # k = 1's busy window voids every point


def test_scorecard_is_a_view_over_the_index_findings(tmp_path):
    claims = [judge("chen2016.x", "Claim A", 10.5, PaperValue(6.9, "abstract", "6.9×"),
                    within_rel(Tolerance(0.1, "", "why")), text="10.5×", scorecard="Chen et al. 2016",
                    link="chen2016.html#sec-resnet", where="fake")]
    write(claims, catalog.path("findings.index", root=tmp_path))
    text, glance = scorecard_markdown(tmp_path), verdicts_markdown(tmp_path)
    assert "| Claim A | 6.9× (abstract) | 10.5× (*fake*) | <span" in text and "✗\u00a0not reproduced</span>[^1]" in text
    assert "[^1]: not reproduced: ours 10.5 is +52.2 % off 6.9, beyond ±10 %. Rule: within ±10 %." in text
    assert "chen2016 › resnet (not rendered yet)" in text
    assert glance.startswith("**Chen et al. 2016.** The one headline claim is not reproduced.")
    assert "✓ Reproduced: none." in glance and "Apart from those: Claim A (✗ not reproduced)." in glance


def test_quoted_and_outcome_never_quote_an_invalid_number():
    bad = gates.gated(judge("t", "c", -56.1, text="−56.1 %"), [gates.negative_overhead(-0.561, 0.05)])
    good = judge("g", "c", 38.2, T4_FULL, within_abs(PP3), text="38.2 %")
    assert phrases.quoted(good) == "38.2 %"
    assert phrases.quoted(bad) == "invalid: recompute overhead −56.1 % is below zero beyond the noise (±5.0 %)"
    assert phrases.outcome(good) == "38.2 %: reproduced" and phrases.outcome(bad).startswith("invalid: ")
    stand_in = marked(judge("s", "c", 48.5, T4_FULL, within_abs(PP3), text="48.5 %"), NOT_REPRODUCIBLE, "needs a GPU")
    nothing = marked(replace(stand_in, ours="—"), NOT_REPRODUCIBLE, "no copy engine on a CPU")
    assert phrases.quoted(stand_in) == "48.5 %"   # a labelled stand-in is data; nothing measured is not
    assert phrases.quoted(nothing) == "not reproducible here: no copy engine on a CPU"


def test_a_corrupt_table_is_one_line_naming_it(tmp_path):
    bad = catalog.path("chen.depth", root=tmp_path)
    bad.parent.mkdir(parents=True)
    bad.write_text("")
    with pytest.raises(UsageError, match="chen/depth.csv: not a readable table"):
        catalog.read("chen.depth", root=tmp_path)


def test_the_index_names_the_target_of_missing_findings(tmp_path):
    rows = index.findings(tmp_path)
    assert {f.reason for f in rows} >= {"snakemake results/findings/chen2016.csv"}
    assert {f.scorecard for f in rows} == {CHEN, KORTHIKANTI}


def test_stale_findings_are_found(tmp_path):
    table, made = catalog.path("chen.depth", root=tmp_path), catalog.path("findings.chen2016", root=tmp_path)
    for p in (table, made):
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text("x\n1\n")
    os.utime(table, (1_000_000_000, 1_000_000_000))
    assert catalog.stale("chen2016", tmp_path) is None
    os.utime(table, (4_000_000_000, 4_000_000_000))
    assert catalog.stale("chen2016", tmp_path) == table


def test_a_minor_band_is_named_in_the_rule():
    assert within_abs(Tolerance(3, " pp", "why"), minor=2).text == "within ±3 pp (minor issues: ±6 pp)"


def test_claim_bullets_cross_reference_the_section():
    f = judge("resnet", "ResNet: reduction", 10.5, PaperValue(6.9, "abstract", "6.9×"),
              within_rel(Tolerance(0.25, "", "why")), text="10.5×", where="fake", link="chen2016.html#sec-resnet")
    assert phrases.claim_bullets([f]) == ("* **ResNet: reduction** (@sec-resnet): 10.5× against 6.9× (abstract): "
                                          "not reproduced: ours 10.5 is +52.2 % off 6.9, beyond ±25 %.")
