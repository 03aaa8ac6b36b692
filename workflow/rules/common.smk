# Shared helpers: parameter passing, the remat command, the tables each device makes.
import json
import shlex
from pathlib import Path


# Under --sdm conda the env has the dependencies but not the console script: `remat` runs the package from src/.
if "conda" in str(getattr(workflow.deployment_settings, "deployment_method", "")).lower():
    shell.prefix('export PYTHONPATH="$PWD/src${{PYTHONPATH:+:$PYTHONPATH}}"; remat() {{ python -m remat "$@"; }}; ')


def params_json(*keys, **extra):
    """The config section at ``keys`` (plus ``extra`` entries) as a shell-quoted JSON object, passed to
    `remat experiment --params`."""
    section = config
    for key in keys:
        section = section.get(key) or {}
    return shlex.quote(json.dumps({**section, **extra}, sort_keys=True))


def bench(rule, *wildcards):
    """Where Snakemake writes the `benchmark:` TSV of a job of ``rule`` (wall time s, cpu_time, max_rss, ...):
    logs/benchmarks/<rule>/<wildcard>/....tsv, or logs/benchmarks/<rule>.tsv for a rule without wildcards. logs/ is
    not tracked, and results/ keeps only tables (benchmarks/bench_pipeline.py sums these per rule)."""
    return "/".join(["logs/benchmarks", rule, *("{%s}" % w for w in wildcards)]) + ".tsv"


# A rule that times (remat.measure.timing's time_steps / time_step, the copy benchmark) runs ALONE on the machine:
# its job claims every core of the run (`threads: ALONE`, i.e. workflow.cores, whatever --cores says), so
# Snakemake starts no other job beside it while it times; the timed work itself runs at the intra-op threads its
# params ask for (each experiment's `threads`, fixed by remat.measure.timing). tests/test_pipeline.py checks it on
# the run log. (Do not scale these rules down with --max-threads or --set-threads: other jobs would share the
# machine.) Under a cluster executor workflow.cores is 1 and each job is its own allocation.
ALONE = workflow.cores
# Timed rules also run first (`priority: TIMED_FIRST`), one by one while every core is free: a job that needs every
# core waits as long as one-core jobs keep one busy, so a timed job left for later starts only when they run out,
# and what depends on it (figures, findings, reports) then runs last, one at a time (a 2-core fresh-clone run lost
# ~25 s to that tail). Untimed jobs keep priority 0.
TIMED_FIRST = 10


def sweep_times(sweep):
    """Whether torch sweep ``sweep`` times steps: layer-timing and time-model always; segments, depth and
    seq-hidden when their config ``timing`` is true (a missing key counts as true: running alone is never wrong)."""
    if sweep in ("layer-timing", "time-model"):
        return True
    return bool(((config.get("sweeps") or {}).get(sweep) or {}).get("timing", True))


# torch rules run in the CUDA build of the env on a GPU node, in the CPU build elsewhere
TORCH_ENV = "../../envs/torch-cuda.yaml" if config["device"] == "cuda" else "../../envs/torch-cpu.yaml"
SWEEPS = ["segments", "depth", "seq-hidden", "layer-timing", "time-model"]
# whose offload tables (results/offload/<device>/) the offload figures and report show: a config key
# (offload.report_device; null: the device this run measures on)
OFFLOAD_DEVICE = config["offload"].get("report_device") or config["device"]


def reference_gpu_table(rel):
    """[the newest committed reference GPU run's table at ``rel``] when this run makes or has no GPU table
    there, else []: the figures then draw the GPU rows the reports show (remat.analysis.catalog.latest picks the
    same run: the folder with the latest -YYYY-MM-DD suffix; not imported here, where pandas would slow every
    snakemake start)."""
    if config["device"] == "cuda" or Path("results", rel).exists():
        return []
    runs = sorted((p for p in Path("results-reference/gpu").glob("*") if p.is_dir()),
                  key=lambda p: (p.name[-10:], p.name))
    return [str(runs[-1] / rel)] if runs and (runs[-1] / rel).exists() else []


def sweep_tables(sweep):
    """This device's table of ``sweep`` plus any other device's already on disk (e.g. copied from a GPU node),
    or the reference GPU run's."""
    tables = {f"results/sweeps/{sweep}/{config['device']}.csv"}
    tables.update(str(p) for p in Path("results/sweeps", sweep).glob("*.csv"))
    return sorted(tables) + reference_gpu_table(f"sweeps/{sweep}/cuda.csv")


def chen_speed_tables():
    """This device's chen-speed table plus any other device's already on disk (e.g. from a GPU node), or the
    reference GPU run's."""
    tables = {f"results/chen/speed/{config['device']}.csv"}
    tables.update(str(p) for p in Path("results/chen/speed").glob("*.csv"))
    return sorted(tables) + reference_gpu_table("chen/speed/cuda.csv")


def validate_tables():
    """This device's planner-validate table plus any other device's on disk (e.g. copied from a GPU node), the
    GPU's first: the planner figures and report show it when it exists (remat.analysis.planner)."""
    tables = {f"results/planner/validate/{config['device']}.csv"}
    tables.update(str(p) for p in Path("results/planner/validate").glob("*.csv"))
    tables.update(reference_gpu_table("planner/validate/cuda.csv"))
    return sorted(tables, key=lambda t: (Path(t).stem != "cuda", t))


def all_targets():
    """Every configured report, the index page, and this device's measured tables (the default target): naming the
    tables makes a GPU config run its sweeps even where CPU reports already exist."""
    device_tables = expand("results/sweeps/{sweep}/{device}.csv", sweep=SWEEPS, device=config["device"])
    device_tables += expand("results/offload/{device}/breakeven.csv", device=config["device"])
    device_tables += [f"results/chen/speed/{config['device']}.csv", f"results/planner/validate/{config['device']}.csv",
                      f"results/planner/tensor/{config['device']}.csv"]
    return expand("reports/{name}.html", name=config["reports"]) + ["reports/index.html"] + device_tables
