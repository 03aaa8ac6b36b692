"""Committed reference GPU results in the reports: this run's GPU table first, else the newest reference run's
(labelled with GPU, date, commit), else a visible note — never a silently GPU-less section. Paths through the
catalog (remat.analysis.catalog), the callout's words from remat.report.phrases.gpu_note."""

from __future__ import annotations

import json

from remat.analysis import catalog
from remat.analysis import sweeps_tables as sweeps_summary
from remat.report.phrases import gpu_note


def make_run(root, name, date, tables, gpu="NVIDIA H200", commit="0123456789abcdef"):
    folder = root / catalog.REFERENCE / f"{name}-{date}"
    for rel in tables:
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text("device,value\ncuda,1\n")
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "provenance.json").write_text(json.dumps({"device_name": gpu, "date": date, "git_commit": commit}))
    return folder


def test_this_run_first_then_newest_reference_then_none(tmp_path):
    results, ref = tmp_path / "results", tmp_path
    rel = "sweeps/segments/cuda.csv"
    assert catalog.gpu_table(rel, ref) is None
    make_run(ref, "nvidia-a100", "2026-11-02", [rel], gpu="NVIDIA A100")
    newest = make_run(ref, "nvidia-h200", "2026-12-01", [rel])
    assert catalog.gpu_table(rel, ref) == newest / rel
    (results / "sweeps" / "segments").mkdir(parents=True)
    (results / rel).write_text("device\ncuda\n")
    assert catalog.gpu_table(rel, ref) == results / rel


def test_device_tables_add_the_reference_gpu_only_when_this_run_has_none(tmp_path):
    results, ref = tmp_path / "results", tmp_path
    (results / "chen" / "speed").mkdir(parents=True)
    (results / "chen" / "speed" / "cpu.csv").write_text("device\ncpu\n")
    run = make_run(ref, "nvidia-h200", "2026-12-01", ["chen/speed/cuda.csv"])
    assert catalog.device_paths("chen.speed", ref) == [results / "chen/speed/cpu.csv", run / "chen/speed/cuda.csv"]


def test_labels_and_notes(tmp_path):
    results, ref = tmp_path / "results", tmp_path
    path = make_run(ref, "nvidia-h200", "2026-12-01", ["planner/validate/cuda.csv"]) / "planner/validate/cuda.csv"
    text = catalog.label(path, ref)
    assert "NVIDIA H200" in text and "2026-12-01" in text and "0123456789ab" in text
    assert "committed reference run" in gpu_note([path], root=ref)
    # a section that shows this run's device only names the reference run as where the tables are
    assert gpu_note([path], root=ref, shows_reference=False) == f"A reference GPU run has these tables: {text}.\n"
    missing = gpu_note([None], "copies", root=ref)
    assert "No GPU results yet" in missing and "make gpu" in missing and "has none" in missing
    assert gpu_note([None], "copies", root=ref, shows_reference=False) == missing
    assert "holds no reference run yet" in gpu_note([None], root=tmp_path / "empty")
    (results / "x").mkdir(parents=True)
    (results / "x" / "cuda.csv").write_text("device\ncuda\n")
    for shows in (True, False):   # this run measured on a GPU: no note
        assert gpu_note([results / "x" / "cuda.csv"], root=ref, shows_reference=shows) == ""


def test_summaries_read_the_reference_gpu_table(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "results" / "sweeps" / "depth").mkdir(parents=True)
    (tmp_path / "results" / "sweeps" / "depth" / "cpu.csv").write_text("device,value\ncpu,0\n")
    make_run(tmp_path, "nvidia-h200", "2026-12-01",
             ["sweeps/depth/cuda.csv", "planner/validate/cuda.csv"])
    frame = sweeps_summary.read()["depth"]
    assert list(frame["device"]) == ["cpu", "cuda"]
    shown = catalog.read_shown("planner.validate")
    assert list(shown["device"]) == ["cuda"] and shown.attrs["where"].startswith("GPU (NVIDIA H200, 2026-12-01")
