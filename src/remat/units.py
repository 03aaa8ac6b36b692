"""Byte sizes at the edges: parse "80GiB" / "80GB" / "85899345920", format for humans.

Internally every size is an int number of bytes. GiB = 2**30 bytes, GB = 10**9 bytes; they are never confused.
"""

from __future__ import annotations

import math

import re

from remat.errors import UsageError

KiB, MiB, GiB, TiB = 2**10, 2**20, 2**30, 2**40
KB, MB, GB, TB = 10**3, 10**6, 10**9, 10**12

_UNITS = {
    "": 1, "b": 1,
    "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
}
_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]*)\s*$")


def parse_bytes(text: str | int, field: str = "size") -> int:
    """Parse a size such as ``"80GiB"``, ``"80 GB"``, ``"1.5e9"`` or ``85899345920`` into bytes (int).

    Raises UsageError(field) for an unknown unit, a malformed number, or a negative size.
    """
    if isinstance(text, int):
        value, unit = float(text), ""
    else:
        match = _SIZE.match(str(text))
        if not match:
            raise UsageError(field, f"cannot read {text!r} as a size (e.g. 80GiB, 80GB, 85899345920)")
        value, unit = float(match.group(1)), match.group(2).lower()
    if unit not in _UNITS:
        raise UsageError(field, f"unknown unit {unit!r} (use B, KB/MB/GB/TB or KiB/MiB/GiB/TiB)")
    if value < 0:
        raise UsageError(field, "must not be negative")
    if not math.isfinite(value * _UNITS[unit]):
        raise UsageError(field, f"{text!r} is not a finite size")
    return int(round(value * _UNITS[unit]))


def format_bytes(n: float, binary: bool = True) -> str:
    """Format a byte count as e.g. ``"1.50 GiB"`` (binary) or ``"1.61 GB"`` (decimal)."""
    step, names = (1024.0, ["B", "KiB", "MiB", "GiB", "TiB", "PiB"]) if binary else (
        1000.0, ["B", "KB", "MB", "GB", "TB", "PB"])
    value, i = float(n), 0
    while abs(value) >= step and i < len(names) - 1:
        value, i = value / step, i + 1
    return f"{value:.0f} {names[i]}" if i == 0 else f"{value:.2f} {names[i]}"
