"""The precision timed work runs in: 'auto' picks bfloat16 only where the device computes it natively, every row
says why, a forced emulated dtype voids its timings, and a finding's 'where' names the dtype."""

from pathlib import Path

import pandas as pd
import pytest

from remat import precision
from remat.analysis import catalog, gates, sweeps_tables
from remat.experiments import sweep_point

# /proc/cpuinfo lines of three real CPUs (abridged to the flags that matter and a few around them)
ZEN3 = "model name\t: AMD EPYC 7B13\nflags\t\t: fpu sse4_2 avx f16c fma avx2 bmi2 sha_ni vaes vpclmulqdq\n"
SAPPHIRE_RAPIDS = ("model name\t: Intel(R) Xeon(R) Platinum 8480+\nflags\t\t: avx2 avx512f avx512bw avx512_vnni "
                   "avx512_bf16 amx_bf16 amx_tile amx_int8\n")
SKYLAKE_X = "model name\t: Intel(R) Xeon(R) Gold 6148\nflags\t\t: avx2 avx512f avx512dq avx512bw avx512vl avx512_vnni\n"
NEOVERSE_V1 = "processor\t: 0\nFeatures\t: fp asimd evtstrm aes sve asimdbf16 bf16 i8mm\nCPU implementer\t: 0x41\n"


@pytest.mark.parametrize("text,flags", [(ZEN3, []), (SKYLAKE_X, []), (SAPPHIRE_RAPIDS, ["avx512_bf16", "amx_bf16"]),
                                        (NEOVERSE_V1, ["bf16"]), ("", [])])
def test_native_bf16_is_read_off_the_cpu_flags(text, flags):
    assert precision.bf16_flags(text) == flags       # AVX-512 without its BF16 extension emulates bf16 too


def _cpu(monkeypatch, native: bool):
    monkeypatch.setattr(precision, "cpu_bf16", lambda: (native, "test CPU"))


def test_auto_is_float32_where_bf16_is_emulated_and_bfloat16_where_native(monkeypatch):
    _cpu(monkeypatch, False)
    auto = precision.precision("auto", "cpu")
    assert auto.dtype == "float32" and auto.reason.startswith("auto: float32, as bfloat16 is emulated")
    assert precision.precision(None, "cpu").dtype == "float32"
    forced = precision.precision("bfloat16", "cpu")
    assert forced.dtype == "bfloat16" and "EMULATED" in forced.reason and not forced.native
    assert "EMULATED" in precision.precision("float16", "cpu").reason      # float16 is no faster on a CPU
    assert precision.precision("float32", "cpu").reason.startswith("set: float32, native")
    assert precision.precision("float32", "cpu").native and precision.precision("auto", "cpu").native
    assert precision.precision("auto", "fake").dtype == "bfloat16"           # nothing computed: the paper's bytes
    _cpu(monkeypatch, True)
    assert precision.precision("auto", "cpu").dtype == "bfloat16"
    assert "EMULATED" not in precision.precision("bfloat16", "cpu").reason


def test_this_machines_auto_follows_its_own_flags():
    """Independently of remat: grep /proc/cpuinfo for the flags."""
    text = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    words = set(text.split())
    expected = "bfloat16" if words & {"avx512_bf16", "amx_bf16", "bf16"} else "float32"
    assert precision.precision("auto", "cpu").dtype == expected


def test_a_sweep_runs_in_the_chosen_dtype_and_its_rows_say_why(monkeypatch):
    _cpu(monkeypatch, False)
    p = sweep_point.SweepParams(hidden=32, heads=4, seq=16, micro_batch=2, vocab=32, warmup=0)
    assert p.dtype == "auto" and p.model_config().dtype == "float32"
    frame = sweep_point.frame(p, [{"policy": "none"}])
    assert frame["dtype"].tolist() == ["float32"] and "emulated" in frame["dtype_reason"].iloc[0]
    assert sweep_point.SweepParams(dtype="bfloat16").model_config().dtype == "bfloat16"   # the config can force it
    _cpu(monkeypatch, True)
    assert sweep_point.SweepParams().model_config().dtype == "bfloat16"


def test_timings_in_an_emulated_dtype_are_invalid(monkeypatch):
    _cpu(monkeypatch, False)
    row = {"step_time_s": 1.0, **{k: v for k, v in frame_of("bfloat16").iloc[0].items() if k.startswith("dtype")}}
    assert not row["dtype_native"]
    assert gates.emulated(row) == "timed in bfloat16, which this device emulates"
    assert gates.conditions(row) == gates.emulated(row)
    auto = {"step_time_s": 1.0, **{k: v for k, v in frame_of("auto").iloc[0].items() if k.startswith("dtype")}}
    assert auto["dtype"] == "float32" and gates.emulated(auto) == ""
    assert gates.emulated({"step_time_s": 1.0, "dtype": "bfloat16"}) == ""   # tables from before the column
    rows = pd.DataFrame({"status": "ok", "device": "cpu", "k": [1, 2], "step_time_s": [1.0, 1.1],
                         "step_time_iqr_s": 0.01, "time_overhead": [0.0, 0.1], "dtype": "bfloat16",
                         "dtype_native": False})
    assert sweeps_tables.valid("segments", rows).empty                  # out of the summaries, every point
    assert gates.emulated(pd.read_csv(_csv(rows))) != ""                # as read back from a table: "False" text


def frame_of(dtype: str) -> pd.DataFrame:
    p = sweep_point.SweepParams(hidden=32, heads=4, seq=16, micro_batch=2, vocab=32, warmup=0, dtype=dtype)
    return sweep_point.frame(p, [{"policy": "none"}])


def _csv(frame: pd.DataFrame):
    import io
    return io.StringIO(frame.to_csv(index=False))


def test_the_models_own_dtype_is_not_called_set(monkeypatch):
    _cpu(monkeypatch, False)
    own = sweep_point.SweepParams(dtype=None).precision()
    assert own.dtype == "float32" and own.reason.startswith("the model's: float32")   # gpt-tiny's dtype


def test_where_names_the_dtype_of_the_rows():
    rows = pd.DataFrame({"device": ["cpu"], "dtype": ["float32"]})
    assert catalog.where("cpu", "sweeps.layer-timing", rows) == "CPU, float32"
    assert catalog.where("cpu", "sweeps.depth", rows.drop(columns="dtype")) == "CPU"   # no dtype to name
    mixed = pd.DataFrame({"device": ["cpu"] * 3, "dtype": ["float32", "bfloat16", "float32"]})
    assert catalog.where("cpu", "sweeps.depth", mixed) == "CPU, float32 / bfloat16"


def test_the_sweeps_report_lists_each_dtype_once_with_its_reason():
    frames = {"depth": pd.DataFrame({"device": ["cpu"] * 2, "dtype": ["float32"] * 2, "dtype_reason": ["auto: a"] * 2}),
              "segments": pd.DataFrame({"device": ["cpu"], "dtype": ["float32"], "dtype_reason": ["auto: a"]}),
              "layer-timing": pd.DataFrame({"device": ["cpu"], "dtype": ["bfloat16"], "dtype_reason": ["set: b"]}),
              "time-model": pd.DataFrame(columns=["device", "dtype"])}
    table = sweeps_tables.precision_table(frames)
    assert table.to_dict("records") == [
        {"device": "cpu", "dtype": "float32", "sweeps": "depth, segments", "why": "auto: a"},
        {"device": "cpu", "dtype": "bfloat16", "sweeps": "layer-timing", "why": "set: b"}]
