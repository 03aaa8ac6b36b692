"""The reports' generic wording helpers (remat.report.phrases) and number formatters (remat.units): every branch
reads as English — all, none and some; one thing or many; one, two or three words — and each returns non-empty text
or raises."""

from __future__ import annotations

import pytest

from remat import units as u
from remat.report import phrases as w


@pytest.mark.parametrize("k, n, text, verb", [
    (0, 0, "no plan", "is"),                                                     # n = 0
    (0, 1, "no plan", "is"), (1, 1, "the one plan", "is"),                       # n = 1
    (0, 2, "neither plan", "is"), (1, 2, "one of the two plans", "is"), (2, 2, "both plans", "are"),   # n = 2
    (12, 12, "all 12 plans", "are"), (0, 12, "none of the 12 plans", "is"),      # k = n, k = 0
    (1, 12, "1 of the 12 plans", "is"), (3, 12, "3 of the 12 plans", "are"),     # some
])
def test_count_of_every_branch_and_its_verb(k, n, text, verb):
    assert w.count_of(k, n, "plan") == text
    assert w.count_of(k, n, "plan", verb=("is", "are")) == f"{text} {verb}"


@pytest.mark.parametrize("k, n", [(4, 3), (-1, 3), (1, 0)])
def test_count_of_bounds(k, n):
    with pytest.raises(ValueError):
        w.count_of(k, n, "plan")


def test_count_and_join_words():
    assert (w.count(0, "thread"), w.count(1, "thread"), w.count(4, "thread")) == ("0 threads", "1 thread",
                                                                                  "4 threads")
    assert w.count(1024, "byte") == "1,024 bytes"
    assert (w.join_words(["a"]), w.join_words(["a", "b"]), w.join_words(["a", "b", "c"])) == ("a", "a and b",
                                                                                             "a, b and c")
    assert w.join_words(x for x in (1, 2)) == "1 and 2"           # any iterable, any values
    with pytest.raises(ValueError):
        w.join_words([])


def test_span_and_span_text():
    assert (u.span("0.80", "0.80"), u.span("0.80", "0.90")) == ("0.80", "0.80–0.90")
    assert u.span_text([58.3, 66.8]) == "58–67%"
    assert u.span_text([33.33, 33.34]) == "33%"                   # ends that round alike: one value
    assert u.span_text([0.44, 1.75], 1) == "0.4–1.8%"
    assert u.span_text([1.0, 1.0], 3, "") == "1.000"
    assert u.span_text([1.361, 1.392], 2, "×") == "1.36–1.39×"
    with pytest.raises(ValueError):
        u.span_text([])


def test_ceil_text():
    assert u.ceil_text(3.24, 1) == "3.3" and u.ceil_text(14.5, 1) == "14.5"
    assert u.ceil_text(0.1, 1) == "0.1"   # no float noise pushing it to 0.2
    assert u.ceil_text(0.011, 2) == "0.02" and u.ceil_text(2, 0) == "2"


def test_percent_and_capitalized():
    assert u.percent(0.1234) == "12.3%" and u.percent(0.02, 0) == "2%"
    assert w.capitalized("all 3 plans") == "All 3 plans" and w.capitalized("3 of them") == "3 of them"


def test_signed_percent():
    assert u.signed_percent(0.464, 0) == "+46%" and u.signed_percent(-0.02, 0) == "−2%"   # a true minus sign
    assert u.signed_percent(0.0123, 2, "") == "+1.23" and u.signed_percent(-0.0625, 2, "") == "−6.25"
    assert u.MINUS == "−" and "-" not in u.signed_percent(-0.5)
    # what rounds to zero has no sign, whatever the digits or the unit
    zeros = (u.signed_percent(0.0, 0), u.signed_percent(-1e-9, 2, ""), u.signed_percent(0.004, 0))
    assert zeros == ("0%", "0.00", "0%")
    assert u.signed_percent(0.1234) == "+12.3%" and u.signed_percent(float("nan")) == "—"
