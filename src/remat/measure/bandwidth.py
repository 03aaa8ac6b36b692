"""Host<->device copy bandwidth: the microbenchmark and its fit t = t0 + bytes/BW.

Copies in both directions, from pinned and pageable host memory (pinned needs CUDA), over log-spaced sizes,
alone and overlapped with a matmul on another stream; per (device, direction, memory, overlap) the copy time
is fitted by t = t0 + bytes/BW (t0: per-copy latency in seconds, BW: bytes/s).

Without CUDA the "device" is the CPU: the benchmark times a host memcpy into a second host buffer, and every
output says ``SIMULATED`` — never PCIe. ``SIMULATED`` (defined with ``link_label`` in remat.formulas.offload,
beside the link model, so the runtime's offload hooks use it too) is the one spelling of that label in the
package (tables, figures and reports import it from here).

Run: ``remat bandwidth --device cpu --json`` (``bandwidth_summary``), or the ``offload-bandwidth`` experiment.
The labels and the fit need no torch (figures and reports import them); the copies run in
``remat.measure.copy_bench``.
"""

from __future__ import annotations

import statistics

import numpy as np

from remat.errors import UsageError
from remat.formulas.offload import SIMULATED, device_kind, link_label
from remat.units import GiB, KiB, MiB

__all__ = ["BANDWIDTH_UNITS", "DEFAULT_MAX_BYTES", "DIRECTIONS", "FIT_KEYS", "SIMULATED", "bandwidth_summary",
           "copy_sizes", "fit_bandwidth", "fit_copy_model", "link_label", "measure_bandwidth", "predicted_copy_s",
           "with_fit"]

DIRECTIONS = ("h2d", "d2h")
FIT_KEYS = ("device", "direction", "memory", "overlap")
BANDWIDTH_UNITS = "bw_gb_s: GB/s = 10^9 bytes/s; bw_gib_s: GiB/s = 2^30 bytes/s; seconds: s; bytes: bytes"
DEFAULT_MAX_BYTES = {"cpu": 256 * MiB, "cuda": 1 * GiB}
_TARGET_BYTES = {"cpu": 256 * MiB, "cuda": 4 * GiB}  # bytes copied per point: fewer repeats for big sizes
_ARENA_BYTES = {"cpu": 256 * MiB, "cuda": 1 * GiB}  # copies cycle through this much memory (cold caches)


def copy_sizes(device="cpu", min_bytes: int = 64 * KiB, max_bytes: int | None = None,
               fields: tuple[str, str] = ("--min-size", "--max-size")) -> list[int]:
    """Log-spaced copy sizes (powers of two, int bytes) from ``min_bytes`` to ``max_bytes`` inclusive.

    Default ``max_bytes``: 1 GiB on cuda, 256 MiB on cpu (keeps the CPU sweep to seconds).
    Raises UsageError(fields[0] / fields[1]) when a bound is not a power of two ≥ 1 KiB or min > max.
    """
    max_bytes = DEFAULT_MAX_BYTES.get(device_kind(device), 256 * MiB) if max_bytes is None else max_bytes
    for name, value in zip(fields, (min_bytes, max_bytes)):
        if value < KiB or value & (value - 1):
            raise UsageError(name, f"must be a power of two ≥ 1 KiB, got {value} bytes")
    if min_bytes > max_bytes:
        raise UsageError(fields[0], f"{min_bytes} bytes > {fields[1]} {max_bytes} bytes")
    return [2**k for k in range(min_bytes.bit_length() - 1, max_bytes.bit_length())]


def measure_bandwidth(device="cpu", min_bytes: int = 64 * KiB,
                      max_bytes: int | None = None, max_repeats: int = 20,
                      overlap: tuple[bool, ...] = (False, True)) -> list[dict]:
    """Time host<->device copies: both directions, pinned and pageable host memory (pinned with CUDA only),
    sizes ``copy_sizes(device, min_bytes, max_bytes)``, alone and overlapped with a concurrent matmul.

    Returns one dict per point: direction ("h2d" | "d2h"), memory ("pinned" | "pageable"), overlap (bool),
    bytes (int), seconds (the best of the repeats, s — STREAM's convention: a copy slowed by a preempting
    process says nothing about the link), seconds_median and seconds_iqr (s), repeats, bw_gb_s (10^9 bytes/s)
    and bw_gib_s (2^30 bytes/s) from the best time, link (SIMULATED on the CPU), simulated (bool), device.
    Repeats per size: min(max_repeats, max(5, target/bytes)) — fewer for the big sizes (target: 256 MiB
    copied per point on cpu, 4 GiB on cuda). On the CPU the copies run on one intra-op thread: a link has
    one copy engine, and a memcpy split over both cores of a shared machine waits for the busier core;
    the overlapping matmul thread then has the other core.
    Raises UsageError("--device") without CUDA for cuda, ("--repeats") for max_repeats < 1.
    Source: torch.Tensor.copy_(non_blocking=True), torch.cuda.Event(enable_timing=True).
    """
    # lazy (3 imports): they load torch; the labels and the fit are imported by figures and reports without it
    from remat.device import resolve_device
    from remat.measure.copy_bench import CopyBench
    from remat.measure.timing import intra_op_threads
    dev = resolve_device(device, field="--device")
    if max_repeats < 1:
        raise UsageError("--repeats", f"must be ≥ 1, got {max_repeats}")
    sizes = copy_sizes(dev, min_bytes, max_bytes)
    bench = CopyBench(dev, max(sizes[-1], _ARENA_BYTES[dev.type]))
    with intra_op_threads(1 if dev.type == "cpu" else None):
        return _sweep(bench, dev, sizes, max_repeats, overlap)


def _sweep(bench, dev, sizes: list[int], max_repeats: int,
           overlap: tuple[bool, ...]) -> list[dict]:
    rows = []
    for memory in bench.host:
        for direction in DIRECTIONS:
            alone: dict[int, float] = {}
            for ov in sorted(overlap):  # alone first: its times size the overlapping matmul queue
                for nbytes in sizes:
                    repeats = min(max_repeats, max(5, _TARGET_BYTES[dev.type] // nbytes))
                    times = bench.time_copies(direction, memory, nbytes, repeats, ov, alone.get(nbytes))
                    best, median = min(times), statistics.median(times)
                    alone.setdefault(nbytes, median)
                    q1, q3 = np.percentile(times, [25, 75])
                    rows.append({"device": dev.type, "direction": direction, "memory": memory, "overlap": ov,
                                 "bytes": nbytes, "seconds": best, "seconds_median": median,
                                 "seconds_iqr": float(q3 - q1), "repeats": repeats,
                                 "bw_gb_s": nbytes / best / 1e9, "bw_gib_s": nbytes / best / GiB,
                                 "link": link_label(dev), "simulated": dev.type == "cpu"})
    return rows


def fit_copy_model(nbytes, seconds) -> tuple[float, float]:
    """Fit t = t0 + bytes/BW to measured copies; returns (t0 in seconds, BW in bytes/s).

    Weighted least squares on the relative residual (t0 + bytes/BW)/t − 1, so small and large copies count
    alike, with t0 ≥ 0 and 1/BW ≥ 0 (scipy.optimize.lsq_linear). ``nbytes``, ``seconds``: 1-D, same length
    ≥ 2, seconds > 0. Raises ValueError otherwise.
    """
    from scipy.optimize import lsq_linear
    x, t = np.asarray(nbytes, dtype=float), np.asarray(seconds, dtype=float)
    if x.ndim != 1 or x.shape != t.shape or len(x) < 2 or np.any(t <= 0):
        raise ValueError("fit_copy_model needs ≥ 2 points of (bytes, seconds > 0)")
    design = np.column_stack([np.ones_like(x), x]) / t[:, None]
    res = lsq_linear(design, np.ones_like(t), bounds=(0, np.inf), method="bvls")
    t0, inv_bw = res.x
    return float(t0), float(1 / inv_bw) if inv_bw > 0 else float("inf")


def predicted_copy_s(nbytes, t0_s: float, bw_bytes_s: float):
    """The fitted model t = t0 + bytes/BW (seconds) for ``nbytes`` (int or array of bytes)."""
    return t0_s + np.asarray(nbytes, dtype=float) / bw_bytes_s


def fit_bandwidth(rows: list[dict]) -> list[dict]:
    """One fit per (device, direction, memory, overlap) of ``rows`` (from ``measure_bandwidth``).

    Returns dicts: the keys, t0_s (s), bw_gb_s (10^9 bytes/s), bw_gib_s (2^30 bytes/s), points (sizes
    fitted), max_rel_error_ge_1mib (max |predicted/measured − 1| over sizes ≥ 1 MiB; None without such
    sizes), link, simulated.
    """
    groups: dict[tuple, list[dict]] = {}
    for row in rows:
        groups.setdefault(tuple(row[k] for k in FIT_KEYS), []).append(row)
    fits = []
    for key, pts in groups.items():
        t0, bw = fit_copy_model([r["bytes"] for r in pts], [r["seconds"] for r in pts])
        big = [r for r in pts if r["bytes"] >= MiB]
        err = max((abs(predicted_copy_s(r["bytes"], t0, bw) / r["seconds"] - 1) for r in big), default=None)
        fits.append({**dict(zip(FIT_KEYS, key)), "t0_s": t0, "bw_gb_s": bw / 1e9, "bw_gib_s": bw / GiB,
                     "points": len(pts), "max_rel_error_ge_1mib": err, "link": pts[0]["link"],
                     "simulated": pts[0]["simulated"]})
    return fits


def with_fit(rows: list[dict], fits: list[dict]) -> list[dict]:
    """``rows`` with their group's fit (fit_t0_s, fit_bw_gb_s, fit_bw_gib_s), predicted_s and rel_error."""
    by_key = {tuple(f[k] for k in FIT_KEYS): f for f in fits}
    out = []
    for row in rows:
        fit = by_key[tuple(row[k] for k in FIT_KEYS)]
        pred = float(predicted_copy_s(row["bytes"], fit["t0_s"], fit["bw_gb_s"] * 1e9))
        out.append({**row, "fit_t0_s": fit["t0_s"], "fit_bw_gb_s": fit["bw_gb_s"],
                    "fit_bw_gib_s": fit["bw_gib_s"], "predicted_s": pred, "rel_error": pred / row["seconds"] - 1})
    return out


def bandwidth_summary(device: str = "cpu", min_bytes: int = 64 * KiB, max_bytes: int | None = None,
                      max_repeats: int = 20, overlap: tuple[bool, ...] = (False, True)) -> dict:
    """Measure and fit (what `remat bandwidth` prints): {device, link, simulated, units, fits, rows}.

    ``rows``: ``measure_bandwidth`` points with their fit (``with_fit``); ``fits``: ``fit_bandwidth``.
    Raises UsageError as ``measure_bandwidth`` / ``copy_sizes``.
    """
    rows = measure_bandwidth(device, min_bytes, max_bytes, max_repeats, overlap)
    fits = fit_bandwidth(rows)
    kind = rows[0]["device"]
    return {"device": kind, "link": link_label(kind), "simulated": kind == "cpu", "units": BANDWIDTH_UNITS,
            "fits": fits, "rows": with_fit(rows, fits)}
