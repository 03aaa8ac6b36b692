# Config checks before any job runs: the schema, then what a schema cannot say (k ≤ layers). A bad value stops
# Snakemake with ONE line naming the key (the closest valid key for a misspelt one) and exit code 2.
import difflib
import sys
from pathlib import Path

import yaml
from jsonschema import Draft202012Validator
from jsonschema.exceptions import best_match

CONFIG_SCHEMA = Path(workflow.basedir) / "workflow" / "schemas" / "config.schema.yaml"


def config_problem(cfg, schema):
    """The first problem of ``cfg`` as one line "key.path: what is wrong", or None when it is valid."""
    error = best_match(Draft202012Validator(schema).iter_errors(cfg))
    if error is None:
        return cross_field_problem(cfg)
    where = ".".join(str(p) for p in error.absolute_path)
    if error.validator == "additionalProperties":
        allowed = list(error.schema.get("properties", {}))
        key = sorted(set(error.instance) - set(allowed))[0]
        close = difflib.get_close_matches(key, allowed, n=1)
        hint = f"did you mean {close[0]!r}?" if close else f"known: {', '.join(allowed)}"
        return f"{where + '.' if where else ''}{key}: unknown key ({hint})"
    if isinstance(error.instance, str) and error.validator == "type":
        return (f"{where}: {error.instance!r} is a string, not {error.validator_value} (if it came from --config: "
                "Snakemake passes nested --config values as strings; put overrides in a YAML file and pass "
                "--configfile FILE)")
    if error.validator in ("anyOf", "oneOf", "pattern") and "description" in error.schema:
        return f"{where}: {error.instance!r} is not {error.schema['description']}"
    return f"{where or 'config'}: {error.message}"


def cross_field_problem(cfg):
    seg = (cfg.get("chen") or {}).get("segments") or {}
    layers = seg.get("layers", 64)
    for k in seg.get("ks") or []:
        if k > layers:
            return f"chen.segments.ks: k = {k} segments > chen.segments.layers = {layers}"
    return None


_problem = config_problem(config, yaml.safe_load(CONFIG_SCHEMA.read_text()))
if _problem:
    print(f"config: {_problem}", file=sys.stderr)
    sys.exit(2)
