"""One definition of every experiment parameter: the dataclass, config/config.yaml and the schema agree.

For every registered experiment: config.yaml writes out exactly the dataclass's defaults; the schema allows
exactly the dataclass's fields (less the ones a rule passes itself); every Literal field's choices are the
schema's enum; config/gpu.yaml's values load.
"""

import dataclasses
import typing

import pytest
import yaml

from remat.experiments import REGISTRY, config_section, load, params_class

# keys a rule adds to the config section itself (workflow/rules/*.smk), so they are not config keys
RULE_KEYS = {"offload-bandwidth": {"device"}, "chen-speed": {"device"}, "offload-steps": {"device"},
             "offload-breakeven": {"steps", "bandwidth"}, "planner-validate": {"device"},
             "planner-tensor": {"device"}, "planner-compile": {"device"}, "planner-paired": {"device", "table"},
             **{f"sweep-{name}": {"device"}
                for name in ("segments", "depth", "seq-hidden", "layer-timing", "time-model")}}


def _yaml(root, path):
    return yaml.safe_load((root / path).read_text())


def _resolve(schema, node):
    while "$ref" in node:
        node = schema["$defs"][node["$ref"].rsplit("/", 1)[1]]
    return node


def _schema_section(schema, name):
    family, rest = config_section(name).split(".", 1)
    return _resolve(schema, schema["properties"][family]["properties"][rest])


def _section(config, name):
    family, rest = config_section(name).split(".", 1)
    return (config.get(family) or {}).get(rest)


def _enums(schema, node):
    """Every enum reachable from a schema property (through $ref, oneOf/anyOf and array items)."""
    node = _resolve(schema, node)
    found = set(node.get("enum", []))
    for key in ("oneOf", "anyOf"):
        for option in node.get(key, []):
            found |= _enums(schema, option)
    if "items" in node:
        found |= _enums(schema, node["items"])
    return found


def _literals(hint):
    """The choices of every Literal inside a type hint (through Annotated, unions and lists)."""
    if typing.get_origin(hint) is typing.Literal:
        return set(typing.get_args(hint))
    found = set()
    for arg in typing.get_args(hint):  # Annotated metadata (bounds, "bytes") is neither a type nor generic
        if isinstance(arg, type) or typing.get_origin(arg) is not None:
            found |= _literals(arg)
    return found


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_config_writes_out_the_dataclass_defaults(root, name):
    section = _section(_yaml(root, "config/config.yaml"), name)
    assert section is not None, f"config.yaml has no section {config_section(name)}"
    cls = params_class(name)
    fields = {f.name for f in dataclasses.fields(cls)}
    assert set(section) == fields - RULE_KEYS.get(name, set()), config_section(name)
    assert load(name, section) == cls(), config_section(name)


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_schema_allows_exactly_the_fields(root, name):
    schema = _yaml(root, "workflow/schemas/config.schema.yaml")
    node = _schema_section(schema, name)
    cls = params_class(name)
    assert node.get("additionalProperties") is False, config_section(name)
    assert set(node["properties"]) == {f.name for f in dataclasses.fields(cls)} - RULE_KEYS.get(name, set())
    hints = typing.get_type_hints(cls, include_extras=True)
    for key, prop in node["properties"].items():
        choices = _literals(hints[key])
        if choices:
            assert _enums(schema, prop) == {c for c in choices if isinstance(c, str)}, f"{config_section(name)}.{key}"


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_gpu_config_loads(root, name):
    base, gpu = _yaml(root, "config/config.yaml"), _yaml(root, "config/gpu.yaml")
    merged = {**_section(base, name), **(_section(gpu, name) or {})}
    if name in RULE_KEYS and "device" in RULE_KEYS[name]:
        merged["device"] = "cpu"  # the rule passes config.device; cuda is checked where it runs
    params = load(name, merged)
    for key, value in (_section(gpu, name) or {}).items():      # every GPU override reaches the parameters
        if key == "device":
            continue
        got = getattr(params, key.replace("-", "_"))
        assert got == value or (isinstance(got, tuple) and list(got) == value), f"{name}.{key}: {got!r} != {value!r}"
