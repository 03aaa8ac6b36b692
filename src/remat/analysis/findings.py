"""Findings: one judged claim each, the contract between the analysis and the reports. ``judge`` is the one place
a status is decided:

    f = judge("table4.full", "Full recompute: time overhead", ours=38.2, paper=PAPER["table4.full"],
              rule=within_abs(TIME_PP), where="predicted", text="38.2 %")
    write([f, ...], catalog.path("findings.korthikanti2022"));  F = load("korthikanti2022");  F["table4.full"].ours

Statuses: the GRADES (reproduced; with minor issues: within the rule's ``minor`` band; partially: some parts hold;
not reproduced), not measured (a table is missing), not reproducible here (needs hardware this run lacks), invalid
(breaks an invariant: never summarised as data), measured (a quoted value no paper value judges).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Callable

import pandas as pd

from remat.analysis import catalog
from remat.analysis.tolerances import Tolerance
from remat.errors import UsageError
from remat.io import atomic_path
from remat.paper import PaperValue
from remat.units import signed_percent

REPRODUCED, MINOR, PARTIAL, NOT_REPRODUCED, NOT_MEASURED, NOT_REPRODUCIBLE, INVALID, MEASURED = (
    "reproduced", "reproduced with minor issues", "partially reproduced", "not reproduced", "not measured",
    "not reproducible here", "invalid", "measured")
GRADES = (REPRODUCED, MINOR, PARTIAL, NOT_REPRODUCED)
"""What the judge grades a checked claim, best first."""
STATUSES = (*GRADES, NOT_MEASURED, NOT_REPRODUCIBLE, INVALID, MEASURED)


@dataclass(frozen=True)
class Finding:
    """One judged claim: ``ours`` as printed, ``value`` as a number (else NaN), the paper's likewise and its
    ``source``; ``tolerance``: why the rule's; ``scorecard``/``link``: the paper and section if the index lists it."""

    id: str
    claim: str
    ours: str
    value: float = math.nan
    paper: str = ""
    paper_value: float = math.nan
    source: str = ""
    rule: str = ""
    tolerance: str = ""
    where: str = ""
    status: str = MEASURED
    reason: str = ""
    scorecard: str = ""
    link: str = ""


@dataclass(frozen=True)
class Rule:
    """A rule for "reproduced": ``check(ours, paper) -> (holds, reason when not)``; ``near``: the "minor issues"
    band's check (None: no band); ``parts``: ours is the share of the parts that hold (partially reproduced)."""

    text: str
    why: str
    check: Callable[[float, float], tuple[bool, str]]
    near: Callable[[float, float], tuple[bool, str]] | None = None
    parts: bool = False


def _num(x: float) -> str:
    """A number as a reason quotes it: three significant figures, a true minus sign."""
    return f"{x:.3g}".replace("-", "\u2212")


def within_abs(tol: Tolerance, minor: float = 0) -> Rule:
    """|ours − paper| ≤ tol.value; ``minor``: a miss within ``minor`` × tol.value has minor issues (0: no band)."""
    def check(ours, paper, k=1):
        gap = ours - paper
        return abs(gap) <= k * tol.value, (f"ours {_num(ours)} vs {_num(paper)}: {_num(gap)}{tol.unit} apart, "
                                           f"beyond ±{tol.value:g}{tol.unit}")
    return _banded(f"within ±{{:g}}{tol.unit}", tol.value, tol.why, check, minor)


def within_rel(tol: Tolerance, minor: float = 0) -> Rule:
    """Two-sided: |ours / paper − 1| ≤ tol.value (a fraction); ``minor`` as for within_abs."""
    def check(ours, paper, k=1):
        gap = ours / paper - 1
        return abs(gap) <= k * tol.value, (f"ours {_num(ours)} is {signed_percent(gap, 1, ' %')} off "
                                           f"{_num(paper)}, beyond ±{100 * tol.value:g} %")
    return _banded("within ±{:g} %", 100 * tol.value, tol.why, check, minor)


def within_abs_or_rel(floor: Tolerance, rel: Tolerance, cap: Tolerance) -> Rule:
    """|ours − paper| ≤ min(cap, max(floor, rel · |paper|)): a share of the value, at least floor, at most cap."""
    def check(ours, paper):
        tol = min(cap.value, max(floor.value, rel.value * abs(paper)))
        return abs(ours - paper) <= tol, (f"ours {_num(ours)} vs {_num(paper)}: {_num(ours - paper)}{floor.unit} "
                                          f"apart, beyond ±{_num(tol)}{floor.unit}")
    return Rule(f"within ±{100 * rel.value:g} %, at least ±{floor.value:g}{floor.unit}, at most ±{cap.value:g}"
                f"{cap.unit}", f"{floor.why}; {rel.why}; {cap.why}", check)


def _banded(text: str, value: float, why: str, check, minor: float) -> Rule:
    """The rule ``check`` at its tolerance, and at ``minor`` times it for "minor issues" when minor > 0."""
    if not minor:
        return Rule(text.format(value), why, check)
    return Rule(f"{text.format(value)} (minor issues: {text.format(minor * value).removeprefix('within ')})",
                why, check, near=lambda ours, paper: check(ours, paper, minor))


def within_range(lo: float, hi: float, unit: str, why: str) -> Rule:
    """lo ≤ ours ≤ hi (the paper's value stands for a band, e.g. "5×" printed to one figure: 4.5–5.5×)."""
    def check(ours, paper):
        return lo <= ours <= hi, f"ours {_num(ours)}{unit} outside {lo:g}–{hi:g}{unit}"
    return Rule(f"within {lo:g}–{hi:g}{unit}", why, check)


def exact(text: str, why: str) -> Rule:
    """Two-sided and exact: ours equals the paper's value (a count, a yes/no per item); ``text`` says what."""
    return Rule(text, why, lambda ours, paper: (ours == paper, f"ours {_num(ours)} vs {_num(paper)}"))


def holds(text: str, why: str = "") -> Rule:
    """A rule the analysis computes: ``ours`` is the share of its parts that hold (1: all)."""
    return Rule(text, why, lambda ours, paper: (ours == 1, "the rule does not hold"), parts=True)


def judge(id: str, claim: str, ours: float, paper: PaperValue | None = None, rule: Rule | None = None,
          where: str = "", text: str | None = None, reason: str = "", **extra) -> Finding:
    """The one judge: ``rule`` applied to ours and the paper's value (neither: MEASURED; NaN judged: INVALID).
    ``text``: ours as printed (default 3 figures); ``reason``: why, when the rule fails (default: the rule's)."""
    value = float(ours)
    shown = text if text is not None else _num(value)
    base = dict(id=id, claim=claim, ours=shown, value=value, where=where, **extra)
    if paper is None or rule is None:
        return Finding(**base, status=MEASURED, reason=reason)
    if math.isnan(value):
        return Finding(**base, **_paper(paper, rule), status=INVALID, reason=reason or "no value")
    ok, why = rule.check(value, paper.value)
    return Finding(**base, **_paper(paper, rule), status=REPRODUCED if ok else _grade(rule, value, paper.value),
                   reason="" if ok else (reason or why))


def _grade(rule: Rule, ours: float, paper: float) -> str:
    """The grade of a claim whose rule does not hold: minor issues, partial or not reproduced."""
    if rule.near is not None and rule.near(ours, paper)[0]:
        return MINOR
    return PARTIAL if rule.parts and 0 < ours < 1 else NOT_REPRODUCED


def _paper(paper: PaperValue, rule: Rule) -> dict:
    return dict(paper=paper.text, paper_value=paper.value, source=paper.source, rule=rule.text, tolerance=rule.why)


def marked(finding: Finding, status: str, reason: str) -> Finding:
    """The finding with another status and its reason."""
    if status not in STATUSES:
        raise ValueError(f"unknown status {status!r}")
    return replace(finding, status=status, reason=reason)


def not_measured(id: str, claim: str, missing: catalog.Missing, paper: PaperValue | None = None,
                 rule: Rule | None = None, **extra) -> Finding:
    """NOT_MEASURED, naming the snakemake target; where: ``missing.where`` unless ``extra`` says."""
    base = _paper(paper, rule) if paper is not None and rule is not None else {}
    return Finding(id=id, claim=claim, ours="—", **base, status=NOT_MEASURED,
                   reason=f"snakemake {missing.target}", **{"where": missing.where, **extra})


# --- one CSV per report -----------------------------------------------------------------------------------------

COLUMNS = [f.name for f in fields(Finding)]

WHERE = ("CPU", "GPU", "fake", "predicted", "formula", "paper")
"""The first word of a judged finding's ``where``: measured, counted under FakeTensorMode, predicted by the time
model, a closed form, or computed from the paper's own printed numbers."""


def write(found: list[Finding], out: str | Path) -> None:
    """The findings as one CSV, written atomically. ValueError on a repeated id or a judged finding whose ``where``
    does not start with one of WHERE (a finding not measured may leave it empty)."""
    ids = [f.id for f in found]
    if len(set(ids)) != len(ids):
        raise ValueError(f"repeated finding ids: {sorted({i for i in ids if ids.count(i) > 1})}")
    unsaid = [f.id for f in found if f.status != MEASURED and not f.where.startswith(WHERE)
              and not (f.status == NOT_MEASURED and not f.where)]
    if unsaid:
        raise ValueError(f"findings whose 'where' is not one of {', '.join(WHERE)}: {unsaid}")
    with atomic_path(Path(out)) as tmp:
        pd.DataFrame([asdict(f) for f in found], columns=COLUMNS).to_csv(tmp, index=False)


class Findings(dict):
    """Findings by id; a missing id raises KeyError naming the report's file and the id."""

    def __init__(self, found, where: str = "findings"):
        super().__init__((f.id, f) for f in found)
        self.where = where

    def __missing__(self, key):
        raise KeyError(f"no finding {key!r} in {self.where}")


def read(path: str | Path) -> Findings:
    """A findings CSV as Findings (strings stay strings; empty cells "")."""
    try:
        frame = pd.read_csv(path, dtype={c: str for c in COLUMNS if c not in ("value", "paper_value")},
                            keep_default_na=False, na_values={"value": [""], "paper_value": [""]})
        return Findings((Finding(**row) for row in frame.to_dict("records")), str(path))
    except (pd.errors.EmptyDataError, pd.errors.ParserError, TypeError, ValueError) as exc:
        raise UsageError(str(path), f"not a findings table ({str(exc).splitlines()[0]}); remake it with "
                                    f"snakemake -f {path}") from None


def load(report: str, root: str | Path = ".") -> Findings:
    """``results/findings/<report>.csv`` under ``root``; catalog.Missing when it is absent."""
    where = catalog.path(f"findings.{report}", root=root)
    if not where.exists():
        raise catalog.Missing(catalog.target(f"findings.{report}"))
    return read(where)
