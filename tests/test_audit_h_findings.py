"""Verdicts read off small hand-made tables: planner-validate's findings (bytes before the step, plans within
budget), the emulated-dtype gate, where a table was measured with its dtype, and which dtypes a CPU computes
natively. Every expected value is worked out by hand in the comments."""

from __future__ import annotations

import pandas as pd
import pytest

from remat import precision
from remat.analysis import catalog, gates
from test_planner_summary import found   # the planner findings under a root, from given tables


def _row(model: str, budget: int, method: str, spec: str, predicted: int, measured: int, **kw) -> dict:
    """A planner-validate row of a 2-layer model (sizes as in the table; times exact, IQR small)."""
    return dict(device="cpu", model=model, layers=2, seq=8, micro_batch=1, hidden=4, heads=1, points=2, rounds=3,
                repeats=5, threads=1, layer_seconds_none=1.0, layer_seconds_selective=2.0, layer_seconds_full=3.0,
                feasible=True, reference=False, predicted_step_time_s=1.0, measured_step_time_s=1.0,
                measured_step_time_iqr_s=0.01, time_rel_error=0.0, slowdown_rel_error=0.0, budget_bytes=budget,
                method=method, spec=spec, predicted_peak_bytes=predicted, measured_peak_bytes=measured,
                peak_error_bytes=predicted - measured, peak_rel_error=predicted / measured - 1,
                **{"predicted_base_bytes": 100, "measured_base_bytes": 100, **kw})


def test_the_base_bytes_error_is_the_largest_in_either_direction(tmp_path):
    # model a: predicted 100 bytes alive before the step, measured 90 (+10); model b: 100 and 130 (−30):
    # |predicted − measured| at most 30 — the under-prediction is the larger error
    rows = [_row("a", 100, "plan", "none,full", 90, 90, measured_base_bytes=90),
            _row("b", 100, "plan", "none,full", 90, 90, measured_base_bytes=130)]
    assert found(tmp_path, {"planner/validate/cpu.csv": rows})["validate.base_error"].value == 30


def test_a_peak_equal_to_its_budget_is_within_it(tmp_path):
    # plans: one measured at its budget exactly (100 of 100: fits), one a byte over (101 of 100: does not), one
    # under (90 of 200); the baseline measured at its budget exactly (fits)
    rows = [_row("a", 100, "plan", "none,full", 100, 100), _row("a", 100, "megatron-uniform", "uniform:2", 100, 100),
            _row("b", 100, "plan", "full,full", 100, 101), _row("b", 200, "plan", "none,none", 90, 90)]
    F = found(tmp_path, {"planner/validate/cpu.csv": rows})
    assert (F["validate.plans"].value, F["validate.plans.fit"].value) == (3, 2)
    assert (F["validate.baselines"].value, F["validate.baselines.fit"].value) == (1, 1)


@pytest.mark.parametrize("native", [None, "", True, "True", "true"])
def test_a_row_not_known_to_be_emulated_passes_the_gate(native):
    # dtype_native is False only where remat.precision said the device emulates the dtype; None (provenance
    # without a precision), an empty CSV cell or True is no such statement
    row = {"step_time_s": 1.0, "dtype": "float32", "dtype_native": native}
    assert gates.emulated(row) == ""
    assert gates.emulated(pd.DataFrame([row, {**row, "dtype_native": False, "dtype": "bfloat16"}])) == (
        "timed in bfloat16, which this device emulates")


def test_where_names_only_the_dtypes_the_rows_record():
    # rows from before the dtype column (NaN there) beside rows that have one: only the recorded dtype is named
    mixed = pd.DataFrame({"device": ["cpu"] * 3, "dtype": [None, "float32", float("nan")]})
    assert catalog.where("cpu", "sweeps.depth", mixed) == "CPU, float32"
    assert catalog.where("cpu", "sweeps.depth", pd.DataFrame({"device": ["cpu"], "dtype": [None]})) == "CPU"


def test_a_bf16_cpu_computes_bfloat16_natively_and_float16_not(monkeypatch):
    # a bf16 flag (AVX-512 BF16, AMX, Arm BF16) is native bfloat16 arithmetic only: float16 is still converted to
    # float32 and back on a CPU, so its timings are another machine's
    monkeypatch.setattr(precision, "cpu_bf16", lambda: (True, "test CPU with avx512_bf16"))
    assert precision.native("bfloat16", "cpu")[0] and not precision.native("float16", "cpu")[0]
    half = precision.precision("float16", "cpu")
    assert not half.native and "EMULATED" in half.reason
    assert precision.precision("bfloat16", "cpu").native
    monkeypatch.setattr(precision, "cpu_bf16", lambda: (False, "test CPU without a bf16 flag"))
    assert not precision.native("bfloat16", "cpu")[0] and not precision.native("float16", "cpu")[0]
