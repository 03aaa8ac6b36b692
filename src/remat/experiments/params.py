"""Read experiment parameters (a dict from the config) with one-line errors naming the key."""

from __future__ import annotations

from remat.errors import UsageError


def get_int(params: dict, key: str, default: int | None = None, minimum: int = 1) -> int:
    """params[key] as an int ≥ minimum; UsageError(key) otherwise."""
    value = params.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise UsageError(key, f"must be an integer, got {value!r}")
    if value < minimum:
        raise UsageError(key, f"must be ≥ {minimum}, got {value}")
    return value


def get_int_list(params: dict, key: str, default: list[int] | None = None, minimum: int = 1) -> list[int]:
    """params[key] as a non-empty list of ints ≥ minimum; UsageError(key) otherwise."""
    values = params.get(key, default)
    if not isinstance(values, list) or not values:
        raise UsageError(key, f"must be a non-empty list of integers, got {values!r}")
    for v in values:
        get_int({key: v}, key, minimum=minimum)
    return list(values)


def check_known(params: dict, known: set[str], where: str) -> None:
    """Raise UsageError naming the first key of ``params`` not in ``known``."""
    for key in params:
        if key not in known:
            raise UsageError(f"{where}.{key}", f"unknown parameter (known: {', '.join(sorted(known))})")
