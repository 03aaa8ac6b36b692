# Shared helpers: config checks the schema cannot express, parameter passing, the remat command.
import json
import shlex


class ConfigError(Exception):
    pass


def check_config(cfg):
    """Cross-field checks; raise naming the key before any job runs."""
    seg = cfg["chen"].get("segments", {})
    layers = seg.get("layers", 64)
    for k in seg.get("ks", []):
        if k > layers:
            raise ConfigError(f"chen.segments.ks: k = {k} segments > chen.segments.layers = {layers}")


check_config(config)

# Under --sdm conda the env has the dependencies but not the console script: `remat` runs the package from src/.
if "conda" in str(getattr(workflow.deployment_settings, "deployment_method", "")).lower():
    shell.prefix('export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"; remat() { python -m remat "$@"; }; ')


def params_json(*keys):
    """The config section at ``keys`` as a shell-quoted JSON object (passed to `remat experiment --params`)."""
    section = config
    for key in keys:
        section = section.get(key, {})
    return shlex.quote(json.dumps(section, sort_keys=True))


def report_targets():
    """Every configured report plus the index page (rule all)."""
    return expand("reports/{name}.html", name=config["reports"]) + ["reports/index.html"]
