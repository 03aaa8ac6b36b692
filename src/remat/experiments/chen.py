"""Chen et al. 2016 experiments on the numpy chain: gradient checks, the segment sweep, the depth sweep and
the Revolve grid. Each returns a tidy DataFrame (one row per point) with provenance columns; every count in
it (peak bytes, forwards) is read from the executor's store, with the closed form beside it.

Parameters: the dataclasses below (config.yaml section ``chen``; unknown keys are errors naming
``chen.<name>.<key>``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Annotated, Literal, Mapping

import numpy as np
import pandas as pd

from remat import chain, schedules
from remat.errors import UsageError
from remat.experiments.params import Count, Ge, NonNegative
from remat.formulas import chen as formulas
from remat.formulas import revolve as binomial
from remat.measure.provenance import with_provenance

FD_TOLERANCE = 1e-6  # relative, float64 central differences


# --- parameters ------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class CheckParams:
    """chen.check: gradient checks of every schedule (float64, so finite differences have digits)."""

    layers: Count = 16
    """L: layers of the chain."""
    width: Count = 8
    """d: elements per example of each chain state x_i."""
    batch: Count = 4
    """B: examples in the input."""
    seed: NonNegative = 0
    """Seed of the weights (and seed + 1 of the input)."""


@dataclass(frozen=True)
class ChainParams:
    """The chain shared by the sweeps: sizes, dtype and seed."""

    width: Count = 16
    """d: elements per example of each chain state x_i."""
    hidden: Count | None = None
    """d': elements per example of each hidden activation h_i; None: = width."""
    batch: Count = 4
    """B: examples in the input."""
    seed: NonNegative = 0
    """Seed of the weights (and seed + 1 of the input)."""
    dtype: Literal["float32", "float64"] = "float32"
    """Element type of every array (4 or 8 bytes)."""


@dataclass(frozen=True)
class SegmentsParams(ChainParams):
    """chen.segments: segments(k) at a fixed depth."""

    layers: Count = 64
    """L: layers of the chain."""
    ks: list[Count] | None = None
    """Segment counts k to run (each ≤ layers); None: every k in 1..layers."""

    def __post_init__(self):
        for k in self.ks or []:
            if k > self.layers:
                raise UsageError("chen.segments.ks", f"k = {k} segments > layers = {self.layers}")


@dataclass(frozen=True)
class DepthParams(ChainParams):
    """chen.depth: none, √L, recursive and Revolve at each depth."""

    depths: list[Annotated[int, Ge(2)]] = field(default_factory=lambda: [2, 4, 8, 16, 32, 64, 128, 256, 512])
    """Depths L (layers, each ≥ 2)."""
    revolve_slots: Literal["log2", "sqrt"] | Count = "log2"
    """Revolve's checkpoint slots per depth: "log2" (⌈log2 L⌉), "sqrt" (⌈√L⌉) or a fixed count."""


@dataclass(frozen=True)
class RevolveParams(ChainParams):
    """chen.revolve: counted extra forwards of Revolve on a grid of steps × slots."""

    width: Count = 4
    """d: elements per example of each chain state x_i."""
    batch: Count = 2
    """B: examples in the input."""
    steps: list[Count] = field(default_factory=lambda: [2, 3, 5, 8, 10, 16, 24, 32, 50, 64])
    """Chain lengths l (layers)."""
    slots: list[Count] = field(default_factory=lambda: [1, 2, 3, 4, 6])
    """Checkpoint slots s."""


# --- closed forms per schedule ---------------------------------------------------------------------------------

def predicted(schedule: schedules.Schedule, x_bytes: int, h_bytes: int) -> dict:
    """Closed-form peak stored bytes and layer forwards of ``schedule`` (remat.formulas.chen/revolve).

    Returns {"peak_bytes_formula", "forwards_formula", "peak_formula"} where peak_formula is "exact" or
    "bound" (Revolve); None values for a family without a closed form (e.g. a schedule injected in a test).
    """
    L, p = schedule.layers, schedule.param
    forms = {  # family -> (peak bytes, forwards, kind of the peak formula)
        "none": (formulas.segments_peak_bytes, formulas.segments_forwards, "exact"),
        "segments": (formulas.segments_peak_bytes, formulas.segments_forwards, "exact"),
        "sqrt": (formulas.segments_peak_bytes, formulas.segments_forwards, "exact"),
        "recursive": (formulas.recursive_peak_bytes, formulas.recursive_forwards, "exact"),
        "revolve": (formulas.revolve_peak_bytes_bound, formulas.revolve_forwards, "bound"),
    }
    if schedule.family not in forms:
        return {"peak_bytes_formula": None, "forwards_formula": None, "peak_formula": None}
    peak, forwards, kind = forms[schedule.family]
    return {"peak_bytes_formula": peak(L, p, x_bytes, h_bytes), "forwards_formula": forwards(L, p),
            "peak_formula": kind}


def _measure(net: chain.Chain, x: np.ndarray, schedule: schedules.Schedule) -> dict:
    """Run ``schedule`` and return its counted row: schedule, family, param, peak/forwards counted and predicted."""
    x_bytes, h_bytes = x.nbytes, x.shape[0] * net.hidden * x.itemsize
    result = chain.run(net, x, schedule)
    return {"schedule": schedule.name, "family": schedule.family, "param": schedule.param,
            "layers": schedule.layers, "peak_bytes": result.peak_bytes, "forwards": result.forwards,
            "extra_forwards": result.forwards - schedule.layers, **predicted(schedule, x_bytes, h_bytes),
            "x_bytes": x_bytes, "h_bytes": h_bytes}


# --- gradient checks -------------------------------------------------------------------------------------------

def gradient_check(layers: int = 16, width: int = 8, batch: int = 4, seed: int = 0,
                   extra: Mapping[str, schedules.Schedule] | None = None) -> pd.DataFrame:
    """Run every schedule of ``schedules.catalogue(layers)`` (plus ``extra``) on a float64 chain and compare.

    Row per schedule: schedule, family, param, bitwise_equal (every gradient np.array_equal to the plain
    backward's), max_abs_diff_vs_naive, fd_rel_error (vs central differences, see chain.finite_differences),
    peak_bytes / forwards counted and their closed forms, formula_match (counted == closed form; ≤ for
    Revolve's peak bound; NA without a closed form), error (the ScheduleError text, if it failed to run) and
    passed = ran ∧ bitwise_equal ∧ fd_rel_error ≤ 1e-6 ∧ formula_match is not False. Provenance columns.
    Used by ``remat check`` (exit 1 names the schedules with passed = False).
    Raises UsageError("layers"/"width"/"batch") for sizes < 1.
    """
    net = chain.make_chain(layers, width, dtype="float64", seed=seed)
    x = chain.make_input(net, batch, seed=seed + 1)
    _, reference = chain.naive_grads(net, x)
    fd = chain.finite_differences(net, x, seed=seed)
    found = {**schedules.catalogue(layers), **(extra or {})}
    rows = [{"schedule": name, "family": schedule.family, "param": schedule.param, "layers": layers,
             "width": width, "batch": batch, **_check_one(net, x, schedule, reference, fd)}
            for name, schedule in found.items()]
    return with_provenance(rows, device="cpu", dtype="float64", seed=seed)


def _formula_match(result: chain.RunResult, pred: dict) -> bool | None:
    """Counted == closed form (peak ≤ bound for Revolve) for peak bytes and forwards; None without a form."""
    if pred["peak_formula"] is None:
        return None
    peak = pred["peak_bytes_formula"]
    peak_ok = result.peak_bytes <= peak if pred["peak_formula"] == "bound" else result.peak_bytes == peak
    return bool(peak_ok and result.forwards == pred["forwards_formula"])


def _check_one(net: chain.Chain, x: np.ndarray, schedule: schedules.Schedule, reference: chain.Gradients,
               fd: list) -> dict:
    """One row of gradient_check (without the identifying columns)."""
    try:
        result = chain.run(net, x, schedule)
    except chain.ScheduleError as exc:
        return {"bitwise_equal": False, "max_abs_diff_vs_naive": math.nan, "fd_rel_error": math.nan,
                "formula_match": None, "passed": False, "error": str(exc)}
    pred = predicted(schedule, x.nbytes, x.shape[0] * net.hidden * x.itemsize)
    match = _formula_match(result, pred)
    bitwise = result.grads.bitwise_equal(reference)
    fd_error = chain.fd_relative_error(result.grads, fd)
    return {"bitwise_equal": bitwise, "max_abs_diff_vs_naive": result.grads.max_abs_diff(reference),
            "fd_rel_error": fd_error, "peak_bytes": result.peak_bytes, "forwards": result.forwards, **pred,
            "formula_match": match, "passed": bool(bitwise and fd_error <= FD_TOLERANCE and match is not False),
            "error": None}


def gradient_check_table(p: CheckParams) -> pd.DataFrame:
    """Registry entry ``chen-check``: ``gradient_check`` at the sizes of ``p``."""
    return gradient_check(layers=p.layers, width=p.width, batch=p.batch, seed=p.seed)


# --- sweeps ----------------------------------------------------------------------------------------------------

def _make(layers: int, p: ChainParams) -> tuple[chain.Chain, np.ndarray]:
    net = chain.make_chain(layers, p.width, p.hidden, p.dtype, seed=p.seed)
    return net, chain.make_input(net, p.batch, seed=p.seed + 1)


def segment_sweep(p: SegmentsParams) -> pd.DataFrame:
    """Registry entry ``chen-segments``: segments(k) for k in ``p.ks`` (default 1..layers) at fixed L.

    Row per k: counted peak_bytes and forwards, peak_bytes_formula / forwards_formula (exact closed forms),
    k_sqrt (⌈√L⌉), k_opt (integer arg-min of the closed form), k_star (√(L(x+h)/x)), sizes in bytes.
    """
    net, x = _make(p.layers, p)
    x_bytes, h_bytes = x.nbytes, x.shape[0] * net.hidden * x.itemsize
    extra = {"k_sqrt": formulas.sqrt_segments(p.layers),
             "k_opt": formulas.optimal_segments(p.layers, x_bytes, h_bytes),
             "k_star": formulas.optimal_segments_approx(p.layers, x_bytes, h_bytes), "width": p.width,
             "hidden": net.hidden, "batch": p.batch}
    ks = p.ks or list(range(1, p.layers + 1))
    rows = [{**_measure(net, x, schedules.segments(p.layers, k)), "k": k,
             "segment_max": -(-p.layers // k), **extra} for k in ks]
    return with_provenance(rows, device="cpu", dtype=p.dtype, seed=p.seed)


def _revolve_slots(rule: str | int, layers: int) -> int:
    """Revolve's slot count at depth L under ``rule``: "log2" (⌈log2 L⌉), "sqrt" (⌈√L⌉) or a fixed int."""
    if rule == "log2":
        return schedules.default_slots(layers)
    if rule == "sqrt":
        return formulas.sqrt_segments(layers)
    return int(rule)


def depth_sweep(p: DepthParams) -> pd.DataFrame:
    """Registry entry ``chen-depth``: none, sqrt, recursive(1), revolve(s) for each L in ``depths``.

    Row per (L, schedule): counted peak_bytes, forwards; closed forms beside (peak_formula says "exact", or
    "bound" for Revolve). Revolve's slots: ``revolve_slots`` = "log2" (default, ⌈log2 L⌉ — the checkpoints
    of recursive(1), so the two meet at about equal memory), "sqrt" (⌈√L⌉) or a fixed int.
    """
    rows = []
    for layers in p.depths:
        net, x = _make(layers, p)
        found = [schedules.none(layers), schedules.sqrt(layers), schedules.recursive(layers, 1),
                 schedules.revolve(layers, _revolve_slots(p.revolve_slots, layers))]
        rows += [_measure(net, x, s) for s in found]
    return with_provenance(rows, device="cpu", dtype=p.dtype, seed=p.seed)


def revolve_sweep(p: RevolveParams) -> pd.DataFrame:
    """Registry entry ``chen-revolve``: for each (l, s) in steps × slots, the counted extra forwards of
    revolve(s) on an l-layer chain vs T(l, s) = r·l − β(s+1, r−1) and vs the DP minimum.

    Row per (l, s): steps, slots, r, extra_forwards (counted), extra_forwards_formula, extra_forwards_dp,
    peak_bytes, peak_bytes_bound.
    """
    rows = []
    for l in p.steps:
        net, x = _make(l, p)
        table, _ = binomial.advance_table(l, min(max(p.slots), l))
        for s in p.slots:
            row = _measure(net, x, schedules.revolve(l, s))
            rows.append({"steps": l, "slots": s, "r": binomial.repetitions(l, s),
                         "extra_forwards": row["extra_forwards"],
                         "extra_forwards_formula": binomial.extra_forwards(l, s),
                         "extra_forwards_dp": int(table[l, min(s, l)]),
                         "peak_bytes": row["peak_bytes"], "peak_bytes_bound": row["peak_bytes_formula"],
                         "x_bytes": row["x_bytes"], "h_bytes": row["h_bytes"]})
    return with_provenance(rows, device="cpu", dtype=p.dtype, seed=p.seed)
