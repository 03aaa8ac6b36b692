# Shared helpers: config checks the schema cannot express, parameter passing, the remat command.
import json
import shlex
from pathlib import Path


class ConfigError(Exception):
    pass


def check_config(cfg):
    """Cross-field checks; raise naming the key before any job runs."""
    seg = cfg["chen"].get("segments", {})
    layers = seg.get("layers", 64)
    for k in seg.get("ks") or []:
        if k > layers:
            raise ConfigError(f"chen.segments.ks: k = {k} segments > chen.segments.layers = {layers}")


check_config(config)

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


# torch rules run in the CUDA build of the env on a GPU node, in the CPU build elsewhere
TORCH_ENV = "../../envs/torch-cuda.yaml" if config["device"] == "cuda" else "../../envs/torch-cpu.yaml"
SWEEPS = ["segments", "depth", "seq-hidden", "layer-timing"]
# offload figures and report show the GPU's tables once a GPU run has made them (else the CPU simulation);
# same rule as remat.experiments.offload.results_device
OFFLOAD_DEVICE = (
    "cuda" if config["device"] == "cuda" or Path("results/offload/cuda/bandwidth.csv").is_file() else "cpu"
)


def sweep_tables(sweep):
    """This device's table of ``sweep`` plus any other device's already on disk (e.g. copied from a GPU node)."""
    tables = {f"results/sweeps/{sweep}/{config['device']}.csv"}
    tables.update(str(p) for p in Path("results/sweeps", sweep).glob("*.csv"))
    return sorted(tables)


def all_targets():
    """Every configured report, the index page, and this device's measured tables (the default target): naming the
    tables makes a GPU config run its sweeps even where CPU reports already exist."""
    device_tables = expand("results/sweeps/{sweep}/{device}.csv", sweep=SWEEPS, device=config["device"])
    device_tables += expand("results/offload/{device}/breakeven.csv", device=config["device"])
    return expand("reports/{name}.html", name=config["reports"]) + ["reports/index.html"] + device_tables
