"""Typed experiment parameters: one frozen dataclass per experiment, loaded from the ``--params`` JSON.

Each experiment declares its parameters as a ``@dataclass(frozen=True)`` whose fields carry a docstring (the
unit) and a default; ``config/config.yaml`` spells every default out (a test checks they agree with the
dataclasses, and that the schema allows exactly these keys). ``load_params(cls, params, where)`` builds the
dataclass from a dict: an unknown key, a value of the wrong type or out of range raises
``UsageError("<where>.<key>")`` — one line at the CLI, exit 2.

Field types understood: ``int``, ``float``, ``bool``, ``str``, ``Literal[...]``, ``list[X]`` (non-empty),
``X | None``, a nested params dataclass (from a mapping, checked the same way), and the annotated aliases
below (``Count`` ≥ 1, ``NonNegative`` ≥ 0, ``Bytes``: a size such as "4GiB" / "4GB" / 4294967296, stored as
int bytes, see remat.units.parse_bytes).
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Annotated, Any, Literal, Mapping, TypeVar, Union

from remat.errors import UsageError
from remat.units import parse_bytes

T = TypeVar("T")


@dataclasses.dataclass(frozen=True)
class Ge:
    """Lower bound of a numeric field (inclusive)."""

    bound: float


BYTES = "bytes"
Count = Annotated[int, Ge(1)]
NonNegative = Annotated[int, Ge(0)]
Bytes = Annotated[int, BYTES]
Fraction01 = Annotated[float, Ge(0.0)]


def load_params(cls: type[T], params: Mapping[str, Any] | None, where: str) -> T:
    """``cls(**params)`` with every value checked against its field's type.

    ``where`` prefixes the field in errors (e.g. "chen.depth"). Raises UsageError("<where>.<key>") for an
    unknown key (naming the known ones), a wrong type, an empty list or a value below its bound; the
    dataclass's own ``__post_init__`` may add cross-field checks (raising UsageError too).
    """
    params = dict(params or {})
    hints = typing.get_type_hints(cls, include_extras=True)
    names = [f.name for f in dataclasses.fields(cls) if f.init]
    for key in params:
        if key not in names:
            raise UsageError(f"{where}.{key}", f"unknown parameter (known: {', '.join(sorted(names))})")
    values = {key: _coerce(value, hints[key], f"{where}.{key}") for key, value in params.items()}
    return cls(**values)


def as_dict(obj) -> dict:
    """The parameters of a params dataclass as a plain dict (for table columns and logs)."""
    return dataclasses.asdict(obj)


def _coerce(value: Any, hint: Any, field: str) -> Any:
    """``value`` checked (and sizes parsed) against type ``hint``; UsageError(field) when it does not fit."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is Annotated:
        base, *marks = args
        if BYTES in marks:
            return parse_bytes(value, field) if value is not None else None
        value = _coerce(value, base, field)
        for mark in marks:
            if isinstance(mark, Ge) and value < mark.bound:
                raise UsageError(field, f"must be ≥ {mark.bound:g}, got {value}")
        return value
    if origin in (Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        options = [a for a in args if a is not type(None)]
        errors = []
        for option in options:
            try:
                return _coerce(value, option, field)
            except UsageError as exc:
                errors.append(exc)
        raise errors[0]
    if origin is Literal:
        if value not in args:
            raise UsageError(field, f"must be one of {', '.join(map(str, args))}, got {value!r}")
        return value
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)) or not value:
            raise UsageError(field, f"must be a non-empty list, got {value!r}")
        return [_coerce(v, args[0], field) for v in value]
    if dataclasses.is_dataclass(hint):
        if isinstance(value, hint):
            return value
        if not isinstance(value, Mapping):
            raise UsageError(field, f"must be a mapping of {hint.__name__} fields, got {value!r}")
        return load_params(hint, value, field)
    return _scalar(value, hint, field)


def _scalar(value: Any, hint: Any, field: str) -> Any:
    if hint is bool:
        if not isinstance(value, bool):
            raise UsageError(field, f"must be true or false, got {value!r}")
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise UsageError(field, f"must be an integer, got {value!r}")
        return value
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
            raise UsageError(field, f"must be a number, got {value!r}")
        return float(value)
    if hint is str:
        if not isinstance(value, str):
            raise UsageError(field, f"must be a string, got {value!r}")
        return value
    raise TypeError(f"{field}: unsupported parameter type {hint!r}")
