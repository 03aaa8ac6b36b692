"""Bandwidth microbenchmark and fit (remat.measure.bandwidth): sizes, the t = t0 + bytes/BW fit, the CPU simulation's
labels, and `remat bandwidth` (exit 2 and one line on bad input)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from remat import cli
from remat.errors import UsageError
from remat.experiments import load
from remat.measure.bandwidth import (SIMULATED, copy_sizes, fit_bandwidth, fit_copy_model, measure_bandwidth,
                                     predicted_copy_s)
from remat.units import GiB, KiB, MiB


def test_default_sizes_are_log_spaced_64kib_to_256mib_on_cpu_and_1gib_on_cuda():
    sizes = copy_sizes("cpu")
    assert sizes[0] == 64 * KiB and sizes[-1] == 256 * MiB and len(sizes) == 13
    assert all(b == 2 * a for a, b in zip(sizes, sizes[1:]))
    assert copy_sizes("cuda")[-1] == GiB  # a default only; measuring needs CUDA
    for bad in ({"max_bytes": 3 * MiB}, {"min_bytes": 512}, {"min_bytes": 2 * MiB, "max_bytes": MiB}):
        with pytest.raises(UsageError, match="size"):
            copy_sizes("cpu", **bad)


def test_fit_recovers_latency_and_bandwidth_exactly_from_model_data():
    nbytes = np.array(copy_sizes("cpu", 64 * KiB, 1 * GiB), dtype=float)
    t0, bw = 9e-6, 24.5e9  # a PCIe-like link: 9 µs, 24.5 GB/s
    seconds = predicted_copy_s(nbytes, t0, bw)
    fit_t0, fit_bw = fit_copy_model(nbytes, seconds)
    assert fit_t0 == pytest.approx(t0, rel=1e-9) and fit_bw == pytest.approx(bw, rel=1e-9)


def test_fit_weights_relative_error_so_small_copies_are_not_ignored():
    rng = np.random.default_rng(0)
    nbytes = np.array(copy_sizes("cpu", 64 * KiB, 256 * MiB), dtype=float)
    truth = predicted_copy_s(nbytes, 20e-6, 6e9)
    noisy = truth * (1 + rng.uniform(-0.02, 0.02, truth.shape))  # ±2% multiplicative noise
    t0, bw = fit_copy_model(nbytes, noisy)
    assert np.max(np.abs(predicted_copy_s(nbytes, t0, bw) / noisy - 1)) < 0.05
    assert t0 == pytest.approx(20e-6, rel=0.2) and bw == pytest.approx(6e9, rel=0.05)
    with pytest.raises(ValueError):
        fit_copy_model([1.0], [1.0])


def test_cpu_sweep_is_labelled_simulated():
    threads = torch.get_num_threads()
    rows = measure_bandwidth("cpu", 64 * KiB, 1 * MiB, max_repeats=3)
    assert torch.get_num_threads() == threads  # the one-copy-engine setting is restored
    keys = {(r["direction"], r["memory"], r["overlap"]) for r in rows}
    assert keys == {(d, "pageable", o) for d in ("h2d", "d2h") for o in (False, True)}  # no pinning without CUDA
    assert len(rows) == len(keys) * 5
    assert all(r["link"] == SIMULATED and r["simulated"] is True and r["seconds"] > 0 for r in rows)
    fits = fit_bandwidth(rows)
    assert len(fits) == len(keys) and all(f["bw_gb_s"] > 0 and f["t0_s"] >= 0 for f in fits)


def test_rows_carry_both_units_and_their_fit(monkeypatch):
    """Copies that take exactly 10 µs + bytes / 10^9 B/s (the copy itself replaced): 64 KiB takes
    10 µs + 65.536 µs, i.e. 65536 B / 75.536 µs = 0.86761279 GB/s = 0.80802738 GiB/s; the fit finds
    t0 = 10 µs and BW = 1 GB/s again, so 1 MiB is predicted at 10 µs + 1048.576 µs, error 0."""
    from remat.measure.bandwidth import bandwidth_summary
    from remat.measure.copy_bench import CopyBench
    monkeypatch.setattr(CopyBench, "time_copies",
                        lambda self, direction, memory, nbytes, repeats, overlap, expect_s=None:
                        [10e-6 + nbytes / 1e9] * repeats)
    rows = bandwidth_summary("cpu", 64 * KiB, 1 * MiB, max_repeats=5, overlap=(False,))["rows"]
    small = [r for r in rows if r["bytes"] == 64 * KiB]
    big = [r for r in rows if r["bytes"] == MiB]
    assert len(small) == len(big) == 2  # h2d and d2h
    for r in small:
        assert r["seconds"] == pytest.approx(75.536e-6, rel=1e-12)
        assert r["bw_gb_s"] == pytest.approx(0.8676127939, rel=1e-9)
        assert r["bw_gib_s"] == pytest.approx(0.8080273810, rel=1e-9)
    for r in big:
        assert r["fit_t0_s"] == pytest.approx(10e-6, rel=1e-6)
        assert r["fit_bw_gb_s"] == pytest.approx(1.0, rel=1e-6)
        assert r["fit_bw_gib_s"] == pytest.approx(1e9 / 2**30, rel=1e-6)
        assert r["predicted_s"] == pytest.approx(1058.576e-6, rel=1e-6)
        assert abs(r["rel_error"]) < 1e-6


def test_cli_json_never_says_pcie_on_cpu(capsys):
    rc = cli.main(["bandwidth", "--device", "cpu", "--json", "--max-size", "256KiB", "--repeats", "3",
                   "--no-overlap"])
    out = capsys.readouterr().out
    assert rc == 0 and "pcie" not in out.lower()
    data = json.loads(out)
    assert data["simulated"] is True and data["link"] == SIMULATED
    assert {r["link"] for r in data["rows"]} == {SIMULATED} and len(data["rows"]) == 2 * 3
    assert "10^9" in data["units"] and "2^30" in data["units"]


@pytest.mark.parametrize("argv, field", [
    (["--max-size", "3MiB"], "--max-size"),
    (["--min-size", "lots"], "--min-size"),
] + ([] if torch.cuda.is_available() else [(["--device", "cuda"], "--device")]))
def test_cli_bad_input_is_one_line_exit_2(capsys, argv, field):
    rc = cli.main(["bandwidth", *argv])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and field in err


@pytest.mark.gpu
def test_cuda_sweep_has_pinned_and_pageable_and_the_fit_holds_above_1mib():
    rows = measure_bandwidth("cuda", 64 * KiB, 64 * MiB, max_repeats=5, overlap=(False,))
    assert {r["memory"] for r in rows} == {"pinned", "pageable"}
    assert all(r["link"] != SIMULATED and not r["simulated"] for r in rows)
    pinned = [f for f in fit_bandwidth(rows) if f["memory"] == "pinned"]
    assert all(f["max_rel_error_ge_1mib"] < 0.10 for f in pinned)


def test_bandwidth_experiment_rows_carry_fit_and_provenance():
    from remat.experiments.offload import bandwidth_table
    frame = bandwidth_table(load("offload-bandwidth", {"max_size": "256KiB", "repeats": 3, "overlap": False}))
    assert len(frame) == 2 * 3 and (frame["link"] == SIMULATED).all()
    for col in ("fit_t0_s", "fit_bw_gb_s", "fit_bw_gib_s", "predicted_s", "rel_error", "git_commit",
                "torch_version", "device"):
        assert col in frame.columns
    with pytest.raises(UsageError, match="offload.bandwidth.overlap"):
        load("offload-bandwidth", {"overlap": "yes"})
    with pytest.raises(UsageError, match="offload.bandwidth.max_size"):
        load("offload-bandwidth", {"max_size": "3MiB"})
    with pytest.raises(UsageError, match="offload.bandwidth.min_size"):
        load("offload-bandwidth", {"min_size": "2MiB", "max_size": "1MiB"})
