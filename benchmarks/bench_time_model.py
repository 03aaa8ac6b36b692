"""The roofline time model against paper Table 4 / Figure 8 and against measurement on this machine.

Prints paper Table 4 (22B layer, t = 8) and the recompute share of every paper Figure 8 bar predicted on the
paper's GPU (A100 80GB) beside the paper's values, with the acceptance (phases within 25 %, overheads within
4 pp, recompute shares within 3 pp) — another --gpu prints its predictions without comparing them to the
A100's measurements — then the CPU validation: the torch GPT layer's forward/backward predicted at rates
measured here vs measured, interleaved (target: within 25 % per phase; about a minute on 2 cores).
Not a timed test.

    .venv/bin/python benchmarks/bench_time_model.py [--gpu a100-80gb] [--hiddens 256 512] [--no-cpu]
"""

from __future__ import annotations

import argparse
import sys
import time

import pandas as pd

from remat.errors import UsageError
from remat.experiments import load
from remat.experiments.time_model import time_model_sweep
from remat.analysis.times import table4_display, validation_display
from remat.analysis.tolerances import TIME_MODEL_BAND
from remat.timemodel.gpus import gpu
from remat.timemodel.paper import figure8_rows, table4_rows

PAPER_GPU = "a100-80gb"
_PHASES = ("forward", "backward", "combined")


def table4_checks(frame: pd.DataFrame) -> dict:
    """The acceptance numbers: the largest |relative error| of any phase (fraction) and the largest |overhead
    difference| (percentage points)."""
    errors = [abs(frame[f"{p}_ms"] / frame[f"paper_{p}_ms"] - 1).max() for p in _PHASES]
    return {"max_phase_error": float(max(errors)),
            "max_overhead_pp": float((frame["overhead_pct"] - frame["paper_overhead_pct"]).abs().max())}


def validation_checks(frame: pd.DataFrame, band: float = TIME_MODEL_BAND.value) -> dict:
    """The CPU validation's numbers: |error| per phase (largest, fraction), the share of rows with |error| at
    most ``band`` (``within_band``, with ``band``), and per size the selective overhead predicted and measured."""
    combined = frame[(frame["phase"] == "combined") & (frame["mode"] == "selective")]
    return {"max_error": {p: float(frame.loc[frame["phase"] == p, "error"].abs().max()) for p in _PHASES},
            "band": band, "within_band": float((frame["error"].abs() <= band).mean()),
            "selective": [(int(r.hidden), float(r.predicted_overhead), float(r.measured_overhead))
                          for r in combined.itertuples()]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpu", default=PAPER_GPU, help=f"GPU preset to predict on (default {PAPER_GPU}, the "
                                                         "paper's; only it is compared with the paper)")
    parser.add_argument("--hiddens", type=int, nargs="+", default=[256, 512],
                        help="h of the CPU validation's layers (default 256 512)")
    parser.add_argument("--no-cpu", action="store_true", help="skip the CPU validation")
    args = parser.parse_args()
    pd.set_option("display.width", 200)
    pd.set_option("display.max_columns", 30)
    try:
        device = gpu(args.gpu)
    except UsageError as exc:
        sys.exit(f"bench_time_model: {exc}")
    compare = device.name == PAPER_GPU
    table4 = pd.DataFrame(table4_rows(device))
    figure8 = pd.DataFrame(figure8_rows(device))
    figure8["delta_pp"] = figure8["recompute_pct"] - figure8["paper_recompute_pct"]
    if compare:
        print(f"paper Table 4, predicted on {device.name} (model / paper):")
        print(table4_display(table4).to_string(index=False))
        checks = table4_checks(table4)
        print(f"largest phase error {100 * checks['max_phase_error']:.1f} % (target ≤ 25 %); largest overhead "
              f"difference {checks['max_overhead_pp']:.2f} pp (target ≤ 4 pp)")
        print("\npaper Figure 8, recompute share of the baseline layer time (%):")
        print(figure8[["model", "variant", "recompute_pct", "paper_recompute_pct", "delta_pp"]].round(2)
              .to_string(index=False))
        print(f"largest recompute-share difference {figure8['delta_pp'].abs().max():.2f} pp (target ≤ 3 pp)")
    else:
        print(f"paper Table 4's experiments predicted on {device.name} (the paper measured an A100: no comparison):")
        print(table4[["experiment", "forward_ms", "backward_ms", "combined_ms", "overhead_pct"]].round(2)
              .to_string(index=False))
        print("\npaper Figure 8's bars predicted (% of the baseline layer time):")
        print(figure8[["model", "variant", "forward_pct", "recompute_pct"]].round(2).to_string(index=False))
    if args.no_cpu:
        return
    start = time.perf_counter()
    frame = time_model_sweep(load("sweep-time-model", {"hiddens": args.hiddens}))
    print(f"\nCPU validation ({time.perf_counter() - start:.0f} s; rates measured interleaved with the layers):")
    print(validation_display(frame).to_string(index=False))
    v = validation_checks(frame)
    print("largest |error| per phase: " + ", ".join(f"{p} {100 * e:.1f} %" for p, e in v["max_error"].items())
          + f"; {100 * v['within_band']:.0f} % of rows within ±{100 * v['band']:g} %")
    for h, predicted, measured in v["selective"]:
        print(f"selective overhead at h = {h}: predicted {100 * predicted:.1f} %, measured {100 * measured:.1f} %")


if __name__ == "__main__":
    main()
