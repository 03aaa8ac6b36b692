"""Every rule names a conda env that exists, and every env's pins agree with pyproject.toml."""

from __future__ import annotations

import re
import tomllib

import yaml

from conftest import ROOT


TORCH_ENVS = ["../../envs/torch-cpu.yaml", "../../envs/torch-cuda.yaml"]


def _pyproject_pins() -> dict[str, str]:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    pins = {}
    for dep in deps:
        name, version = dep.split("==")
        pins[name.lower().replace("_", "-")] = version
    return pins


def _rule_blocks():
    for smk in sorted((ROOT / "workflow" / "rules").glob("*.smk")):
        for block in re.split(r"\n(?=rule )", smk.read_text()):
            if block.startswith("rule "):
                yield smk, block


def test_every_rule_names_an_existing_env():
    rules = list(_rule_blocks())
    assert rules
    for smk, block in rules:
        name = block.split()[1].rstrip(":")
        match = re.search(r'conda:\s*\n\s*("([^"]+)"|TORCH_ENV)\n', block)
        assert match, f"rule {name} in {smk.name} names no conda env"
        paths = [match.group(2)] if match.group(2) else TORCH_ENVS
        for path in paths:
            assert (smk.parent / path).resolve().is_file(), f"rule {name}: {path} missing"


def test_torch_env_follows_the_device():
    common = (ROOT / "workflow" / "rules" / "common.smk").read_text()
    assert f'TORCH_ENV = "{TORCH_ENVS[1]}" if config["device"] == "cuda" else "{TORCH_ENVS[0]}"' in common


def test_env_pins_agree_with_pyproject():
    pins = _pyproject_pins()
    envs = sorted((ROOT / "envs").glob("*.yaml"))
    assert {e.stem for e in envs} >= {"torch-cpu", "torch-cuda", "reports"}
    for env in envs:
        spec = yaml.safe_load(env.read_text())
        pip = next(d["pip"] for d in spec["dependencies"] if isinstance(d, dict))
        reqs = [r for r in pip if not r.startswith("-")]
        assert reqs, env.name
        for req in reqs:
            name, version = req.split("==")
            key = name.lower().replace("_", "-")
            assert key in pins, f"{env.name}: {name} is not a dependency in pyproject.toml"
            assert pins[key] == version, f"{env.name}: {name}=={version} but pyproject pins {pins[key]}"
