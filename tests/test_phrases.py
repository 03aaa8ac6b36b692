"""The reports' generic wording helpers (remat.report.phrases) and number formatters (remat.units): every branch
reads as English — all, none and some; one thing or many; one, two or three words — and each returns non-empty text
or raises."""

from __future__ import annotations

import pytest

from remat import units as u
from remat.report import phrases as w


@pytest.mark.parametrize("k, n, text", [
    (0, 0, "no plan"),                                                  # n = 0
    (0, 1, "no plan"), (1, 1, "the one plan"),                          # n = 1
    (0, 2, "neither plan"), (1, 2, "one of the two plans"), (2, 2, "both plans"),   # n = 2
    (12, 12, "all 12 plans"), (0, 12, "none of the 12 plans"),          # k = n, k = 0
    (1, 12, "1 of the 12 plans"), (3, 12, "3 of the 12 plans"),         # some
])
def test_count_of_every_branch(k, n, text):
    assert w.count_of(k, n, "plan") == text


@pytest.mark.parametrize("k, n, text", [
    (0, 0, "no plan is"), (0, 1, "no plan is"), (1, 1, "the one plan is"),
    (0, 2, "neither plan is"), (1, 2, "one of the two plans is"), (2, 2, "both plans are"),
    (12, 12, "all 12 plans are"), (0, 12, "none of the 12 plans is"),
    (1, 12, "1 of the 12 plans is"), (3, 12, "3 of the 12 plans are"),
])
def test_count_of_verb_agrees(k, n, text):
    assert w.count_of(k, n, "plan", verb=("is", "are")) == text


def test_count_of_irregular_plural_and_bounds():
    assert w.count_of(3, 3, "analysis", "analyses") == "all 3 analyses"
    assert w.count_of(2, 2, "copy", "copies") == "both copies"
    assert w.count_of(1, 2, "copy", "copies") == "one of the two copies"
    assert w.count_of(0, 1, "copy", "copies") == "no copy"
    for k, n in ((4, 3), (-1, 3), (1, 0)):
        with pytest.raises(ValueError):
            w.count_of(k, n, "plan")


def test_count():
    assert (w.count(0, "thread"), w.count(1, "thread"), w.count(4, "thread")) == ("0 threads", "1 thread",
                                                                                  "4 threads")
    assert w.count(2, "copy", "copies") == "2 copies" and w.count(1, "copy", "copies") == "1 copy"
    assert w.count(1024, "byte") == "1,024 bytes"


def test_join_words():
    assert w.join_words(["a"]) == "a"
    assert w.join_words(["a", "b"]) == "a and b"
    assert w.join_words(["a", "b", "c"]) == "a, b and c"
    assert w.join_words(x for x in (1, 2)) == "1 and 2"           # any iterable, any values
    assert w.join_words([], empty="none") == "none"
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
