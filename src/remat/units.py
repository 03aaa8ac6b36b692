"""Byte sizes at the edges: parse "80GiB" / "80GB" / "85899345920", format for humans; numbers as text
(ranges, bounds rounded up, percentages) for tables and findings.

Internally every size is an int number of bytes. GiB = 2**30 bytes, GB = 10**9 bytes; they are never confused.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable

from remat.errors import UsageError

KiB, MiB, GiB, TiB = 2**10, 2**20, 2**30, 2**40
KB, MB, GB, TB = 10**3, 10**6, 10**9, 10**12

_UNITS = {
    "": 1, "b": 1,
    "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
}
_SIZE = re.compile(r"^\s*(-?[0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]*)\s*$")


def parse_bytes(text: str | int, field: str = "size") -> int:
    """Parse a size such as ``"80GiB"``, ``"80 GB"``, ``"1.5e9"`` or ``85899345920`` into bytes (int).

    Raises UsageError(field) for an unknown unit, a malformed number, a negative size, or a bool.
    """
    if isinstance(text, bool):
        raise UsageError(field, f"a size, not {text!r} (e.g. 80GiB, 80GB, 85899345920)")
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
        raise UsageError(field, f"must not be negative, got {text!r}")
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


# --- numbers as text (ranges, bounds, percentages), for tables and findings -----------------------------

def span(lo: str, hi: str) -> str:
    """A range of two values already shown as text: "lo–hi", or one value when both read the same.

    >>> span("4.0%", "6.1%"), span("0.80", "0.80")
    ('4.0%–6.1%', '0.80')
    """
    return lo if lo == hi else f"{lo}–{hi}"


def span_text(values: Iterable, digits: int = 0, unit: str = "%") -> str:
    """The range of ``values`` as shown with ``digits`` decimals, ``unit`` once at the end: "58%" when its ends
    round alike, else "58–62%"; ``unit`` may be "×", " %" or "".

    >>> span_text([58.3, 66.8]), span_text([1.361, 1.392], 2, "×")
    ('58–67%', '1.36–1.39×')
    """
    values = [float(v) for v in values]
    if not values:
        raise ValueError("span_text: no values")
    return span(f"{min(values):.{digits}f}", f"{max(values):.{digits}f}") + unit


def ceil_text(x: float, digits: int = 1) -> str:
    """``x`` rounded up to ``digits`` decimals, as text: a bound that stays true once shown ("within 3.3" for
    3.24 at one decimal, never "within 3.2"); float noise does not push an exact 0.1 up to 0.2.

    >>> ceil_text(3.24), ceil_text(0.1)
    ('3.3', '0.1')
    """
    scale = 10 ** digits
    return f"{math.ceil(round(x * scale, 9)) / scale:.{digits}f}"


def percent(x: float, digits: int = 1) -> str:
    """A fraction as a percentage: 0.1234 -> "12.3%" (``digits`` decimals)."""
    return f"{100 * x:.{digits}f}%"


MINUS = "\u2212"
"""The minus sign signed numbers are written with (U+2212, not the ASCII hyphen)."""


def signed_percent(x: float, digits: int = 1, unit: str = "%") -> str:
    """A relative change (fraction) as a signed percentage with ``digits`` decimals and ``unit`` after it:
    0.464 -> "+46.4%", -0.02 -> "−2.0%" (a true minus sign, MINUS); what rounds to zero has no sign ("0.0%":
    no sign on nothing); "—" for NaN. ``unit`` "" gives the bare number for a column headed "(%)".

    >>> signed_percent(0.0123, 2, ""), signed_percent(-0.02, 0), signed_percent(-1e-9)
    ('+1.23', '−2%', '0.0%')
    """
    if x != x:
        return "—"
    text = f"{abs(100 * x):.{digits}f}"
    sign = "" if float(text) == 0 else "+" if x > 0 else MINUS
    return f"{sign}{text}{unit}"
