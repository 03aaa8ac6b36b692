"""The reports' generic wording helpers (remat.report.phrases): every branch reads as English — all, none and
some; one thing or many; one, two or three words — and each returns non-empty text or raises. The number
formatters (remat.units) are tested in test_units_io.py."""

from __future__ import annotations

import pytest

from remat.analysis.findings import INVALID, NOT_REPRODUCED, Finding
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


def test_capitalized():
    assert w.capitalized("all 3 plans") == "All 3 plans" and w.capitalized("3 of them") == "3 of them"


def test_listed_says_a_shared_verdict_once():
    busy = [Finding("a", "c", "1.46×", status=INVALID, reason="timed while busy"),
            Finding("b", "c", "1.50×", status=INVALID, reason="timed while busy")]
    assert w.listed(*busy) == "1.46× and 1.50× (invalid: timed while busy)"
    assert w.listed(busy[0], Finding("m", "c", "2.0×")) == "1.46× (invalid: timed while busy) and 2.0×"
    assert w.listed(Finding("n", "c", "—", status=INVALID, reason="no size passes"), busy[0]) == \
        "invalid: no size passes"


def test_stated_never_puts_a_dash_or_a_bare_status_in_a_value_slot():
    graded = Finding("g", "c", "−25.2 %", status=NOT_REPRODUCED, reason="beyond ±25 %")
    assert w.stated(graded) == "is −25.2 %"
    assert w.stated(graded, with_verdict=True) == "is −25.2 %: not reproduced: beyond ±25 %"
    assert w.stated(Finding("i", "c", "3.3 %", status=INVALID, reason="busy")) == "is 3.3 % (invalid: busy)"
    assert w.stated(Finding("n", "c", "—", status=INVALID, reason="no size passes")) == \
        "has no value here; its verdict is invalid: no size passes"
