"""The GPU half in one command: every number the reports need from a GPU, measured by the experiments the
pipeline's rules call, on a node that may have no Snakemake, PuLP, jsonschema or PyYAML and no internet.

    make gpu              # PYTHONPATH=src python3 -m remat.gpu_run            (≤ 8 min on one H100/H200)
    make gpu QUICK=1      # PYTHONPATH=src python3 -m remat.gpu_run --quick    (≤ 2 min subset)
    make gpu-smoke        # PYTHONPATH=src python3 -m remat.gpu_run --smoke    (the same path on this CPU, tiny)

Runs from the repository's ``src/`` (nothing installed, nothing downloaded) with Python ≥ 3.10, torch ≥ 2.11
(a CUDA build), numpy, pandas, scipy and matplotlib. Parameters: ``config/gpu-run.json`` — the experiments'
sections of config/config.yaml overlaid with config/gpu.yaml, as the pipeline's ``--configfile config/gpu.yaml``
run sees them (a test keeps the file equal to the YAML), each experiment also given ``device``.

Steps, in order; each writes its tables before the next starts and prints one progress line per experiment;
each has a time budget (``STEPS``): an experiment runs in its own process (``python -m remat experiment``,
the command the rules run), killed when the step's time is spent, and recorded as skipped with the reason —
never an overrun, never a half-written table (``remat experiment`` writes atomically):

1. ``facts``    — the GPU (name, memory, driver, torch, CUDA) and the host↔device copies (pinned and pageable,
                  both directions, the t0 + bytes/BW fit): ``offload-bandwidth``.
2. ``tests``    — ``pytest -m gpu`` (skipped with a reason where pytest is missing).
3. ``table4``   — Korthikanti Table 4's 22B layer on one GPU (t = 1): forward and backward ms per policy,
                  median and IQR, and the CUDA peak per policy: ``sweep-layer-timing``; the time model's
                  constants measured (bf16 matmul FLOP/s, device-memory bandwidth) and its predictions beside
                  measured layer times: ``sweep-time-model``.
4. ``sweeps``   — segments, depth, s and h around s* (``sweep-segments``, ``sweep-depth``,
                  ``sweep-seq-hidden``): an out-of-memory point is a row with status oom.
5. ``offload``  — offload steps on the real link and the break-even points: ``offload-steps``,
                  ``offload-breakeven``.
6. ``planner``  — applied plans at real budgets, measured peak and step time vs predicted: ``planner-validate``.

Tables land where the pipeline reads them (``results/sweeps/<sweep>/cuda.csv``, ``results/offload/cuda/…``,
``results/planner/validate/cuda.csv``), and a copy with ``provenance.json`` and ``steps.csv`` (what ran, seconds, what
was skipped and why) under ``results-reference/gpu/<gpu>-<date>/`` to commit. ``--smoke`` runs every step on
the CPU at tiny sizes into a temporary folder (≤ 60 s; a test runs it). Without a CUDA device (and without
``--smoke``): one line, exit 2, nothing written.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from remat.measure.provenance import provenance as row_provenance

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "config" / "gpu-run.json"


@dataclass(frozen=True)
class Step:
    """One step: its name, its seconds (full run, --quick), and the experiments it runs:
    (experiment name, config section keys, output path relative to the results folder)."""

    name: str
    seconds: float
    quick_seconds: float
    experiments: tuple


STEPS = (
    Step("facts", 40, 15, (("offload-bandwidth", ("offload", "bandwidth"), "offload/{device}/bandwidth.csv"),)),
    Step("tests", 60, 20, ()),
    Step("table4", 90, 25, (("sweep-layer-timing", ("sweeps", "layer-timing"), "sweeps/layer-timing/{device}.csv"),
                            ("sweep-time-model", ("sweeps", "time-model"), "sweeps/time-model/{device}.csv"))),
    Step("sweeps", 120, 25, (("sweep-segments", ("sweeps", "segments"), "sweeps/segments/{device}.csv"),
                             ("sweep-depth", ("sweeps", "depth"), "sweeps/depth/{device}.csv"),
                             ("sweep-seq-hidden", ("sweeps", "seq-hidden"), "sweeps/seq-hidden/{device}.csv"))),
    Step("offload", 90, 20, (("offload-steps", ("offload", "steps"), "offload/{device}/steps.csv"),
                             ("offload-breakeven", ("offload", "breakeven"), "offload/{device}/breakeven.csv"))),
    Step("planner", 60, 15, (("planner-validate", ("planner", "validate"), "planner/validate/{device}.csv"),)),
)
"""The steps and their budgets: 460 s in all (≤ 8 min), 120 s with --quick."""

QUICK = {  # --quick: fewer points of the same experiments
    ("sweeps", "segments"): {"layers": 8, "repeats": 5},
    ("sweeps", "depth"): {"depths": [1, 2, 4, 8]},
    ("sweeps", "seq-hidden"): {"seqs": [512, 1024, 2048], "hiddens": [4096, 8192]},
    ("sweeps", "time-model"): {"hiddens": [6144], "rounds": 2},
    ("offload", "steps"): {"seqs": [1024], "hiddens": [1024]},
}

SMOKE = {  # --smoke: tiny sizes (smaller than tests/test_pipeline.py TINY), on the CPU: ≤ 60 s, most of it the
          # experiments' process starts (torch's import)
    ("offload", "bandwidth"): {"max_size": "1MiB", "repeats": 3},
    ("sweeps", "layer-timing"): {"model": "gpt-tiny", "hidden": 64, "heads": 4, "seq": 32, "rounds": 1,
                                 "warmup": 1, "repeats": 5, "dtype": "float32", "max_bytes": None},
    ("sweeps", "time-model"): {"model": "gpt-tiny", "hiddens": [64], "heads": 4, "seq": 32, "rounds": 1,
                               "dtype": "float32", "max_bytes": None},
    ("sweeps", "segments"): {"model": "gpt-tiny", "layers": 4, "timing": False, "hidden": 64, "dtype": "float32"},
    ("sweeps", "depth"): {"model": "gpt-tiny", "depths": [2], "hidden": 64, "dtype": "float32"},
    ("sweeps", "seq-hidden"): {"model": "gpt-tiny", "seqs": [32], "hiddens": [32, 64], "hiddens_seq": 32,
                               "dtype": "float32", "layers": 1},
    ("offload", "steps"): {"seqs": [32], "hiddens": [32], "layers": 2, "rounds": 1, "dtype": "float32"},
    ("offload", "breakeven"): {"gpus": ["a100-80gb"], "seqs": [1024], "hiddens": [4096]},
    ("planner", "validate"): {"models": [{"layers": 4, "seq": 32, "micro_batch": 2}], "points": 2, "rounds": 1},
}


SECTIONS = ("offload", "sweeps", "planner")
"""The config sections the steps read (config/gpu-run.json holds these)."""


def merged_config(base: dict, overlay: dict) -> dict:
    """``overlay`` on ``base``, nested dicts merged key by key (as Snakemake merges --configfile files), for
    ``SECTIONS``; ``write_config`` stores it as config/gpu-run.json."""
    def merge(a, b):
        if isinstance(a, dict) and isinstance(b, dict):
            return {k: merge(a.get(k), b[k]) if k in b else a[k] for k in {**a, **b}}
        return b
    return {k: merge(base.get(k) or {}, overlay.get(k) or {}) for k in SECTIONS}


def write_config() -> Path:
    """Regenerate config/gpu-run.json from config/config.yaml + config/gpu.yaml (needs PyYAML: run it where the
    pipeline runs, not on the GPU node)."""
    import yaml  # PyYAML: only here (the GPU node may lack it)
    base = yaml.safe_load((ROOT / "config" / "config.yaml").read_text(encoding="utf-8"))
    overlay = yaml.safe_load((ROOT / "config" / "gpu.yaml").read_text(encoding="utf-8"))
    CONFIG.write_text(json.dumps(merged_config(base, overlay), indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return CONFIG


def experiment_params(config: dict, section: tuple, device: str, quick: bool, smoke: bool,
                      results: Path) -> dict:
    """The ``--params`` of one experiment as its rule passes them: the config section, the --quick / --smoke
    overrides, and the device — or, for the break-even, this run's measured steps and bandwidth tables."""
    params = dict(config.get(section[0], {}).get(section[1]) or {})
    if smoke:
        params.update(SMOKE.get(section, {}))
    elif quick:
        params.update(QUICK.get(section, {}))
    if section == ("offload", "breakeven"):
        return {**params, "steps": str(results / "offload" / device / "steps.csv"),
                "bandwidth": str(results / "offload" / device / "bandwidth.csv")}
    return {**params, "device": device}


def cuda_device() -> str | None:
    """The CUDA device's name, or None (no CUDA build, no device)."""
    import torch  # heavy: importing this module (--write-config, its tests) does not load torch
    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else None


def run(results: Path, device: str, quick: bool = False, smoke: bool = False, log=print) -> list[dict]:
    """Every step in order (module docstring); returns one row per experiment or step: step, experiment,
    status (ok | skipped | failed), seconds, reason, table."""
    config = json.loads(CONFIG.read_text(encoding="utf-8"))
    rows = []
    for step in STEPS:
        budget = step.quick_seconds if quick else step.seconds   # --smoke: tiny sizes, the full budgets
        start = time.monotonic()
        if step.name == "tests":
            rows.append(_tests(budget, smoke, log))
            continue
        for name, section, out in step.experiments:
            left = budget - (time.monotonic() - start)
            table = results / out.format(device=device)
            params = experiment_params(config, section, device, quick, smoke, results)
            rows.append(_experiment(step.name, name, params, table, left, log))
    return rows


def _experiment(step: str, name: str, params: dict, table: Path, left: float, log) -> dict:
    row = {"step": step, "experiment": name, "table": str(table), "seconds": 0.0, "reason": ""}
    if left <= 1:
        log(f"[{step}] {name}: skipped (the step's time is spent)")
        return {**row, "status": "skipped", "reason": "the step's time budget was spent before it started"}
    command = [sys.executable, "-m", "remat", "experiment", name, "--params", json.dumps(params),
               "--out", str(table)]
    start = time.monotonic()
    try:
        proc = subprocess.run(command, capture_output=True, text=True, timeout=left, env=_env())
    except subprocess.TimeoutExpired:
        log(f"[{step}] {name}: skipped after {left:.0f} s (over the step's budget)")
        return {**row, "status": "skipped", "seconds": left, "reason": f"over the step's budget ({left:.0f} s)"}
    seconds = time.monotonic() - start
    if proc.returncode != 0:
        reason = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        log(f"[{step}] {name}: failed in {seconds:.1f} s: {reason}")
        return {**row, "status": "failed", "seconds": seconds, "reason": reason}
    log(f"[{step}] {name}: {table} in {seconds:.1f} s")
    return {**row, "status": "ok", "seconds": seconds}


def gpu_test_files(tests: Path | None = None) -> list[Path]:
    """The test modules holding ``@pytest.mark.gpu`` tests. Only these are collected: the others import
    PyYAML, jsonschema or Snakemake, which a bare GPU node may lack (collecting them would fail the step)."""
    tests = tests or ROOT / "tests"
    return sorted(p for p in tests.glob("test_*.py") if "mark.gpu" in p.read_text(encoding="utf-8"))


def _tests(budget: float, smoke: bool, log) -> dict:
    row = {"step": "tests", "experiment": "pytest -m gpu", "table": "", "seconds": 0.0, "reason": ""}
    if smoke:
        log("[tests] pytest -m gpu: skipped (--smoke: the CPU suite runs them as skips)")
        return {**row, "status": "skipped", "reason": "--smoke"}
    try:
        import pytest  # noqa: F401  (the probe: the GPU node may lack pytest)
    except ImportError:
        log("[tests] pytest -m gpu: skipped (pytest is not installed)")
        return {**row, "status": "skipped", "reason": "pytest is not installed"}
    start = time.monotonic()
    try:
        proc = subprocess.run([sys.executable, "-m", "pytest", "-m", "gpu", "-q", *map(str, gpu_test_files())],
                              capture_output=True, text=True, timeout=budget, env=_env(), cwd=ROOT)
    except subprocess.TimeoutExpired:
        log(f"[tests] pytest -m gpu: skipped after {budget:.0f} s")
        return {**row, "status": "skipped", "seconds": budget, "reason": "over the step's budget"}
    last = (proc.stdout.strip().splitlines() or ["no output"])[-1]
    status = "ok" if proc.returncode == 0 else "failed"
    log(f"[tests] pytest -m gpu: {status}: {last}")
    return {**row, "status": status, "seconds": time.monotonic() - start, "reason": last}


def _env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), *filter(None, [env.get("PYTHONPATH")])])
    return env


def provenance(device: str) -> dict:
    """What the reference folder says of itself: the columns every results row carries
    (remat.measure.provenance.provenance: device_name, torch_version, git_commit, host, timestamp, …) plus
    the date, Python and CUDA versions, and on a GPU its memory (bytes) and driver."""
    import torch  # heavy: importing this module (--write-config, its tests) does not load torch
    info = {**row_provenance(device), "date": time.strftime("%Y-%m-%d"), "python": platform.python_version(),
            "cuda": torch.version.cuda}
    if device == "cuda":
        info.update(memory_bytes=int(torch.cuda.get_device_properties(0).total_memory), driver=_driver())
    return info


def _driver() -> str | None:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10)
        return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None
    except (OSError, subprocess.SubprocessError):
        return None


def reference_folder(root: Path, prov: dict) -> Path:
    """``<root>/<device name>-<date>``: the GPU's name lower-cased with non-alphanumerics as dashes."""
    name = "".join(c if c.isalnum() else "-" for c in str(prov["device_name"]).lower()).strip("-")
    return root / f"{'-'.join(filter(None, name.split('-')))}-{prov['date']}"


def save_reference(results: Path, rows: list[dict], prov: dict, root: Path) -> Path:
    """Copy every table written into the reference folder, with provenance.json and steps.csv."""
    import pandas as pd  # heavy: importing this module (--write-config, its tests) does not load pandas
    folder = reference_folder(root, prov)
    for row in rows:
        table = Path(row["table"]) if row["table"] else None
        if row["status"] == "ok" and table is not None and table.exists():
            target = folder / table.relative_to(results)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(table, target)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "provenance.json").write_text(json.dumps(prov, indent=2) + "\n", encoding="utf-8")
    pd.DataFrame(rows).to_csv(folder / "steps.csv", index=False)
    return folder


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="remat.gpu_run", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the ≤ 2-minute subset")
    parser.add_argument("--smoke", action="store_true", help="the same code path on this CPU at tiny sizes")
    parser.add_argument("--results", default=str(ROOT / "results"), help="where the tables go (default results/)")
    parser.add_argument("--reference", default=str(ROOT / "results-reference" / "gpu"),
                        help="where the reference copy goes (default results-reference/gpu/)")
    parser.add_argument("--write-config", action="store_true",
                        help="regenerate config/gpu-run.json from the YAML configs (needs PyYAML) and exit")
    args = parser.parse_args(argv)
    if args.write_config:
        print(write_config())
        return 0
    start = time.monotonic()
    if args.smoke:
        device = "cpu"
        tmp = Path(tempfile.mkdtemp(prefix="remat-gpu-smoke-"))
        results, reference = tmp / "results", tmp / "reference"
    else:
        name = cuda_device()
        if name is None:
            print("remat.gpu_run: error: no CUDA device (torch.cuda.is_available() is False); nothing written",
                  file=sys.stderr)
            return 2
        device, results, reference = "cuda", Path(args.results), Path(args.reference)
        print(f"remat.gpu_run: {name}, {'quick' if args.quick else 'full'} run")
    rows = run(results, device, quick=args.quick, smoke=args.smoke)
    folder = save_reference(results, rows, provenance(device), reference)
    failed = [r for r in rows if r["status"] == "failed"]
    print(f"remat.gpu_run: {sum(r['status'] == 'ok' for r in rows)} ok, "
          f"{sum(r['status'] == 'skipped' for r in rows)} skipped, {len(failed)} failed in "
          f"{time.monotonic() - start:.0f} s; reference copy: {folder}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
