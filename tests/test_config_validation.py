"""Bad pipeline config stops Snakemake before any job: one line naming the key, exit 2 (workflow/rules/config.smk)."""

from __future__ import annotations

import pytest
import yaml

from conftest import copy_project, snakemake

BAD_CONFIGS = [
    ({"chen": {"check": {"layers": -3}}}, "layers"),
    ({"chen": {"check": {"layers": 2.5}}}, "layers"),
    ({"chen": {"segments": {"layers": 8, "ks": [3, 9]}}}, "chen.segments.ks"),
    ({"chen": {"segments": {"layers": 0}}}, "layers"),
    ({"chen": {"depth": {"depths": []}}}, "depths"),
    ({"chen": {"segmnets": {"layers": 8}}}, "chen.segmnets: unknown key (did you mean 'segments'?)"),
    ({"colour": "blue"}, "colour: unknown key (known: device, reports, chen, korthikanti, sweeps, offload, planner)"),
    ({"chen": {"depth": {"depths": ["2", "4"]}}}, "put overrides in a YAML file and pass --configfile FILE"),
    ({"device": "tpu"}, "device"),
    ({"reports": ["nonesuch"]}, "nonesuch"),
    ({"korthikanti": {"table2": {"models": ["nope"]}}}, "nope"),
    ({"offload": {"bandwidth": {"min_size": "64KX"}}}, "64KX"),
    ({"sweeps": {"layer-timing": {"max_bytes": "12 parsecs"}}}, "12 parsecs"),
    ({"sweeps": {"depth": {"model": "gpt-5"}}}, "gpt-5"),
    ({"planner": {"frontier": {"gpu": "v100"}}}, "v100"),
]


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    return copy_project(tmp_path_factory.mktemp("proj"))


UNIT = {0, 5, 7, 8}
"""The cases the unit tier runs (a bad value, an unknown key, a command-line override, a bad choice); every case
is a Snakemake run of about 3 s, so the rest run in the slow tier."""


@pytest.mark.parametrize("override,key", [
    pytest.param(o, k, marks=() if i in UNIT else pytest.mark.slow, id=k.split(":")[0])
    for i, (o, k) in enumerate(BAD_CONFIGS)])
def test_bad_config_stops_before_any_job(project, override, key):
    bad = project / "bad.yaml"
    bad.write_text(yaml.safe_dump(override))
    proc = snakemake(project, "--cores", "1", "--configfile", "bad.yaml", timeout=120)
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = [line for line in (proc.stdout + proc.stderr).splitlines() if line.startswith("config: ")]
    assert len(lines) == 1 and key in lines[0], proc.stderr[-2000:]
    assert len((proc.stdout + proc.stderr).splitlines()) <= 3  # no schema dump, no traceback
    assert not (project / "results").exists()
    assert not (project / "logs").exists()


@pytest.mark.slow
def test_default_and_gpu_config_dry_run_clean(project):
    for extra in ([], ["--configfile", "config/gpu.yaml"]):
        proc = snakemake(project, "-n", "--cores", "1", *extra, timeout=120)
        assert proc.returncode == 0, proc.stderr[-2000:]


def test_schema_presets_are_the_packages_presets(root):
    from remat.models.presets import PRESETS
    schema = yaml.safe_load((root / "workflow" / "schemas" / "config.schema.yaml").read_text())
    enum = schema["$defs"]["model"]["anyOf"][0]["enum"]
    assert sorted(enum) == sorted(PRESETS)
