"""remat.report.scorecard: each status branch on a tiny synthetic results folder, one table row per claim with a
link to a section that exists, and every claim evaluated on the real results/ without raising."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pandas as pd
import pytest

from remat.analysis import chen2016 as chen_summary
from remat.report import scorecard
from remat.report.scorecard import (CLAIMS, DIFFERS, NOT_MEASURED, NOT_REPRODUCIBLE, REPRODUCED, STATUSES,
                                    counts_sentence, evaluate, scorecard_markdown)

ROOT = Path(__file__).resolve().parents[1]
PAPER_SPEED, SPEED_TOL = chen_summary.PAPER["speed_overhead"], chen_summary.SPEED_TOL   # "about 30 %" ± 15 pp


def _write(root: Path, rel: str, rows) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_csv(path, index=False)


def _depth_rows() -> list[dict]:
    """A chain depth sweep: none ∝ L, sqrt ∝ √L with ⌈√L⌉ segments, recursive = log₂ L checkpoints."""
    rows = []
    for layers in (4, 16, 64, 256):
        k = math.isqrt(layers)
        extra = {"none": 0, "sqrt": layers - layers // k, "recursive": layers // 2 * int(math.log2(layers))}
        peak = {"none": 512 * layers, "sqrt": 512 * 2 * k, "recursive": 256 * (1 + int(math.log2(layers)))}
        rows += [{"family": f, "layers": layers, "peak_bytes": peak[f], "forwards": layers + extra[f],
                  "extra_forwards": extra[f], "x_bytes": 256} for f in peak]
    return rows


def _table4_rows(selective_sp_overhead: float) -> list[dict]:
    """Table 4 predicted: every overhead equal to the paper's but selective + SP's."""
    rows = []
    for name, (sp, mode), paper in (("baseline", (False, "none"), 0.0), ("full recompute", (False, "full"), 39.0),
                                    ("selective + sequence parallel", (True, "selective"), 4.0)):
        ours = selective_sp_overhead if sp else paper
        rows.append({"experiment": name, "sp": sp, "mode": mode, "overhead_pct": ours, "paper_overhead_pct": paper,
                     **{f"{p}_ms": 10.0 for p in ("forward", "backward", "combined", "recompute")},
                     **{f"paper_{p}_ms": 10.0 for p in ("forward", "backward", "combined")}})
    return rows


@pytest.fixture()
def synthetic(tmp_path: Path) -> Path:
    """A results folder where depth.csv reproduces Chen's √L, table4.csv differs, the Chen speed table is CPU
    only (not reproducible here) and everything else is missing."""
    _write(tmp_path, "results/chen/depth.csv", _depth_rows())
    _write(tmp_path, "results/korthikanti/table4.csv", _table4_rows(selective_sp_overhead=4.0 - 2 * scorecard.TIME_PP))
    _write(tmp_path, "results/chen/speed/cpu.csv",
           [{"device": "cpu", "net": net, "strategy": s, "overhead": o}
            for net in ("resnet", "lstm") for s, o in (("none", 0.0), ("sublinear", 0.45))])
    return tmp_path


def _by_claim(root) -> dict:
    return {claim.evaluate.__name__: outcome for claim, outcome in evaluate(root)}


def test_every_status_branch(synthetic):
    got = _by_claim(synthetic)
    assert got["_chen_sqrt"].status == REPRODUCED and got["_chen_sqrt"].where == "CPU"
    assert got["_chen_sqrt-forwards"].status == REPRODUCED
    assert got["_chen_recursion"].status == REPRODUCED
    assert got["_table4"].status == DIFFERS
    assert "selective + sequence parallel" in got["_table4"].why and "all-reduce" in got["_table4"].why
    assert got["_chen_speed"].status == NOT_REPRODUCIBLE and "needs a GPU" in got["_chen_speed"].why
    assert got["_mfu"].status == NOT_REPRODUCIBLE           # needs the paper's cluster, whatever is measured
    missing = got["_table2"]
    assert missing.status == NOT_MEASURED
    assert missing.why == "`snakemake results/korthikanti/table2.csv`"
    assert got["_chen_resnet"].why == "`snakemake results/chen/resnet.csv`"
    assert got["_chen_lstm"].why == "`snakemake results/chen/lstm.csv`"
    assert got["_table4_measured"].why == "`snakemake results/sweeps/layer-timing/cpu.csv`"
    assert {o.status for o in got.values()} == set(STATUSES)


def test_gpu_table_is_judged_and_reference_labelled(synthetic):
    # this run's GPU table: judged against the paper (30 % ± 15 pp)
    _write(synthetic, "results/chen/speed/cuda.csv",
           [{"device": "cuda", "net": "resnet", "strategy": "sublinear", "overhead": PAPER_SPEED + SPEED_TOL / 2}])
    got = _by_claim(synthetic)["_chen_speed"]
    assert (got.status, got.where) == (REPRODUCED, "GPU")
    # only a committed reference run's GPU table: judged, and labelled with the reference run
    (synthetic / "results/chen/speed/cuda.csv").unlink()
    run = synthetic / "results-reference/gpu/nvidia-h200-2026-01-02"
    far = PAPER_SPEED + 2 * SPEED_TOL
    _write(run, "chen/speed/cuda.csv", [{"device": "cuda", "net": "lstm", "strategy": "sublinear", "overhead": far}])
    (run / "provenance.json").write_text(json.dumps({"device_name": "NVIDIA H200", "date": "2026-01-02",
                                                     "git_commit": "0123456789abcdef"}))
    got = _by_claim(synthetic)["_chen_speed"]
    assert got.status == DIFFERS and f"lstm {100 * far:.0f} %" in got.why
    assert got.where.startswith("GPU (NVIDIA H200, 2026-01-02")


def test_markdown_one_row_per_claim_with_a_link(synthetic):
    assert "(not rendered yet)" in scorecard_markdown(synthetic)    # no report pages: no links to them
    (synthetic / "reports").mkdir(exist_ok=True)
    for claim in CLAIMS:
        (synthetic / "reports" / claim.link.partition("#")[0]).write_text("<html></html>")
    md = scorecard_markdown(synthetic)
    rows = [line for line in md.splitlines() if line.startswith("| ") and not line.startswith("| claim |")]
    assert len(rows) == len(CLAIMS)
    for claim, row in zip(CLAIMS, rows):
        assert row.count(" | ") == 6                          # seven cells, none broken by a stray '|'
        assert row.endswith(f"]({claim.link}) |")
    assert md.splitlines()[0] == counts_sentence([o for _, o in evaluate(synthetic)])
    assert "not measured yet (`snakemake results/korthikanti/table2.csv`" in md


def test_counts_sentence():
    o = lambda status: scorecard.Outcome("", "", status)
    assert counts_sentence([o(REPRODUCED)]) == "The one claim is reproduced."
    assert counts_sentence([o(DIFFERS)] * 3) == "All 3 claims differ."
    assert (counts_sentence([o(REPRODUCED), o(REPRODUCED), o(DIFFERS), o(NOT_MEASURED)])
            == "Of the 4 claims, 2 are reproduced, 1 differs and 1 is not measured yet.")


def test_links_name_existing_sections():
    for claim in CLAIMS:
        page, _, label = claim.link.partition("#")
        qmd = ROOT / "reports" / page.replace(".html", ".qmd")
        assert qmd.exists(), claim.link
        assert re.search(r"\{#" + re.escape(label) + r"\}", qmd.read_text(encoding="utf-8")), claim.link


@pytest.mark.skipif(not (ROOT / "results").is_dir(), reason="no results/ (run the pipeline)")
def test_real_results_evaluate():
    for claim, outcome in evaluate(ROOT):
        assert outcome.status in STATUSES, claim.claim
        assert outcome.status == REPRODUCED or outcome.why, claim.claim
    papers = len({claim.paper for claim in CLAIMS})     # per paper: blank, its name, blank, header, rule
    assert len(scorecard_markdown(ROOT).splitlines()) == 1 + 5 * papers + len(CLAIMS)
