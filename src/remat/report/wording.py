"""Generic wording for the reports' generated prose: counts, lists, ranges and bounds as words that read right in
every case (all, none, some; one or many). The one home of these helpers: the ``*_summary`` modules, the
reports and the scorecard build their sentences from them. Each function returns non-empty text (an inline
value may not be empty) or raises ValueError.

    >>> count_of(3, 12, "plan", verb=("is", "are"))
    '3 of the 12 plans are'
    >>> join_words(["a", "b", "c"])
    'a, b and c'
"""

from __future__ import annotations

import math
from collections.abc import Iterable


def count_of(k: int, n: int, noun: str, plural: str | None = None, verb: tuple[str, str] | None = None) -> str:
    """``k`` of ``n`` things (``noun`` singular, ``plural`` when not noun + "s") as words that read right in
    every case: "all 12 plans", "none of the 12 plans", "3 of the 12 plans", "both plans", "neither plan",
    "one of the two plans", "the one plan", "no plan" (n = 1 with k = 0, and n = 0).
    ``verb`` (singular, plural), e.g. ("is", "are"), is appended in the number the phrase takes: "none of the
    12 plans is", "1 of the 12 plans is", "3 of the 12 plans are". Raises ValueError unless 0 ≤ k ≤ n.

    >>> count_of(0, 2, "row", verb=("fits", "fit"))
    'neither row fits'
    """
    k, n = int(k), int(n)
    if not 0 <= k <= n:
        raise ValueError(f"count_of: need 0 <= k <= n, got k={k}, n={n}")
    plural = plural or f"{noun}s"
    if n <= 1:
        phrase, many = (f"the one {noun}" if k else f"no {noun}"), False
    elif n == 2:
        phrase, many = {0: (f"neither {noun}", False), 1: (f"one of the two {plural}", False),
                        2: (f"both {plural}", True)}[k]
    elif k == n:
        phrase, many = f"all {n} {plural}", True
    elif k == 0:
        phrase, many = f"none of the {n} {plural}", False
    else:
        phrase, many = f"{k} of the {n} {plural}", k > 1
    return phrase if verb is None else f"{phrase} {verb[1] if many else verb[0]}"


def count(n: int, noun: str, plural: str | None = None) -> str:
    """``n`` things with the noun in its number: "1 thread", "4 threads", "0 threads", "1,024 bytes" (``plural``
    when not noun + "s"; thousands separated by commas).

    >>> count(2, "copy", "copies")
    '2 copies'
    """
    n = int(n)
    return f"{n:,} {noun if n == 1 else (plural or noun + 's')}"


def join_words(words: Iterable, empty: str | None = None) -> str:
    """Words as a list in a sentence: "a", "a and b", "a, b and c". With no words, ``empty`` (e.g. "none"), or
    ValueError when it is not given.

    >>> join_words(["gpt3-175b", "mt-nlg"])
    'gpt3-175b and mt-nlg'
    """
    words = [str(w) for w in words]
    if not words:
        if empty is None:
            raise ValueError("join_words: no words (pass empty= for the text to use then)")
        return empty
    return " and ".join(words) if len(words) <= 2 else ", ".join(words[:-1]) + " and " + words[-1]


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


def capitalized(text: str) -> str:
    """``text`` with its first letter upper-case, the rest as it is: "all 3 plans" -> "All 3 plans"."""
    return text[:1].upper() + text[1:]
