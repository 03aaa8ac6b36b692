"""Typed experiment parameters: the loader's checks (remat.experiments.params)."""

from dataclasses import dataclass, field
from typing import Literal

import pytest

from remat.errors import UsageError
from remat.experiments.params import Bytes, Count, NonNegative, load_params


@dataclass(frozen=True)
class Example:
    layers: Count = 4
    seed: NonNegative = 0
    sizes: list[Count] = field(default_factory=lambda: [1, 2])
    limit: Bytes | None = None
    mode: Literal["log2", "sqrt"] | Count = "log2"
    dropout: float = 0.1
    serial: bool = True
    name: str = "x"


def test_defaults_and_typed_values():
    assert load_params(Example, {}, "s") == Example()
    got = load_params(Example, {"layers": 7, "seed": 0, "sizes": [3], "limit": "2KiB", "mode": 5, "dropout": 0,
                                "serial": False, "name": "y"}, "s")
    assert got == Example(7, 0, [3], 2048, 5, 0.0, False, "y")
    assert load_params(Example, {"limit": "1GB", "mode": "sqrt"}, "s").limit == 10**9
    assert load_params(Example, None, "s") == Example()


@pytest.mark.parametrize("params, message", [
    ({"bogus": 1}, "s.bogus: unknown parameter (known: dropout, layers, limit, mode, name, seed, serial, sizes)"),
    ({"layers": 0}, "s.layers: must be ≥ 1, got 0"),
    ({"layers": True}, "s.layers: must be an integer, got True"),
    ({"layers": "3"}, "s.layers: must be an integer, got '3'"),
    ({"seed": -1}, "s.seed: must be ≥ 0, got -1"),
    ({"sizes": []}, "s.sizes: must be a non-empty list, got []"),
    ({"sizes": [1, 0]}, "s.sizes: must be ≥ 1, got 0"),
    ({"limit": "12 parsecs"}, "s.limit: unknown unit 'parsecs'"),
    ({"mode": "cubic"}, "s.mode: must be one of log2, sqrt, got 'cubic'"),
    ({"dropout": float("nan")}, "s.dropout: must be a number, got nan"),
    ({"serial": "yes"}, "s.serial: must be true or false, got 'yes'"),
    ({"name": 3}, "s.name: must be a string, got 3"),
])
def test_bad_values_name_the_field(params, message):
    with pytest.raises(UsageError) as err:
        load_params(Example, params, "s")
    assert str(err.value).startswith(message)
