"""The phrase shapes of the reports: the few sentences whose wording follows the data — a finding's verdict, ours
against the paper's, counts (all, none, some; one or many), the status counts of a set of claims. The one home of
sentence building: reports and the scorecard call these on findings (remat.analysis.findings); numbers are
formatted by remat.units. Each function returns non-empty text (an inline value may not be empty) or raises
ValueError.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from remat.analysis import catalog
from remat.analysis.findings import (GRADES, INVALID, MEASURED, NOT_MEASURED, NOT_REPRODUCIBLE, REPRODUCED,
                                    STATUSES, Finding)


def count_of(k: int, n: int, noun: str, verb: tuple[str, str] | None = None) -> str:
    """``k`` of ``n`` things (``noun`` singular; plural noun + "s") as words that read right in every case: "all 12
    plans", "none of the 12 plans", "3 of the 12 plans", "both plans", "neither plan", "one of the two plans", "the
    one plan", "no plan" (n = 1 with k = 0, and n = 0). ``verb`` (singular, plural), e.g. ("is", "are"), is
    appended in the number the phrase takes: "none of the 12 plans is", "3 of the 12 plans are". Raises ValueError
    unless 0 ≤ k ≤ n."""
    k, n = int(k), int(n)
    if not 0 <= k <= n:
        raise ValueError(f"count_of: need 0 <= k <= n, got k={k}, n={n}")
    if n <= 1:
        phrase, many = (f"the one {noun}" if k else f"no {noun}"), False
    elif n == 2:
        phrase, many = {0: (f"neither {noun}", False), 1: (f"one of the two {noun}s", False),
                        2: (f"both {noun}s", True)}[k]
    elif k == n:
        phrase, many = f"all {n} {noun}s", True
    elif k == 0:
        phrase, many = f"none of the {n} {noun}s", False
    else:
        phrase, many = f"{k} of the {n} {noun}s", k > 1
    return phrase if verb is None else f"{phrase} {verb[1] if many else verb[0]}"


def count(n: int, noun: str) -> str:
    """``n`` things with the noun in its number (plural noun + "s"): "1 thread", "4 threads", "0 threads", "1,024
    bytes" (thousands separated by commas)."""
    return f"{int(n):,} {noun if int(n) == 1 else noun + 's'}"


def join_words(words: Iterable) -> str:
    """Words as a list in a sentence: "a", "a and b", "a, b and c". ValueError with no words."""
    words = [str(w) for w in words]
    if not words:
        raise ValueError("join_words: no words")
    return " and ".join(words) if len(words) <= 2 else ", ".join(words[:-1]) + " and " + words[-1]


def capitalized(text: str) -> str:
    """``text`` with its first letter upper-case, the rest as it is: "all 3 plans" -> "All 3 plans"."""
    return text[:1].upper() + text[1:]


# --- shapes over findings ---------------------------------------------------------------------------------------

def verdict(f: Finding) -> str:
    """The finding's status as a reader sees it: "reproduced"; "not reproduced: <reason>"; "not measured yet
    (snakemake <target>)"; "not reproducible here: <reason>"; "invalid: <reason>"; "measured"."""
    if f.status == NOT_MEASURED:
        return f"not measured yet ({f.reason})"
    if f.status in (REPRODUCED, MEASURED) or not f.reason:
        return f.status
    return f"{f.status}: {f.reason}"


def quoted(f: Finding) -> str:
    """Ours where it is data (measured, graded, or a labelled stand-in not reproducible here); else the
    verdict that says why there is no number to quote (invalid, not measured, or not reproducible here with
    nothing measured: ours "—")."""
    data = f.status in (MEASURED, *GRADES) or (f.status == NOT_REPRODUCIBLE and f.ours not in ("", "—"))
    return f.ours if data else verdict(f)


def slot(f: Finding) -> str:
    """Ours for a number's slot: as ``quoted`` where it is data; an invalid value with its status, "3.3 % (invalid:
    <reason>)"; "—" where nothing was measured (``missing_note`` says why, once per table)."""
    if f.status == INVALID and f.ours not in ("", "—"):
        return f"{f.ours} ({verdict(f)})"
    return f.ours if quoted(f) == f.ours else "—"


def missing_note(found: Iterable[Finding]) -> str:
    """One callout (Markdown) per table the findings wait for (NOT_MEASURED, reason "snakemake <target>")."""
    waiting = [f.reason for f in found if f.status == NOT_MEASURED and f.reason.startswith("snakemake ")]
    return "\n".join(f"::: {{.callout-note title=\"Not measured yet: {r.split()[-1]}\"}}\n"
                     f"{count(waiting.count(r), 'claim')} on this page show — until `{r}` makes it.\n:::\n"
                     for r in dict.fromkeys(waiting))


def outcome(f: Finding) -> str:
    """Ours and the verdict, without the reference: "0.36×: not reproduced: …"; the verdict alone where ours is no
    data."""
    return f"{f.ours}: {verdict(f)}" if f.status in GRADES else verdict(f)


def judged(f: Finding) -> str:
    """One sentence shape for a judged claim: ours against the value it is judged by and where that is printed (a
    paper's table, a closed form, the time model), then the verdict and the rule: "38.2 % against 39 % (Table 4):
    reproduced (within ±3 pp)."; an invalid or unmeasured finding says so and quotes no number as data."""
    if f.status in (INVALID, NOT_MEASURED, NOT_REPRODUCIBLE):
        return capitalized(verdict(f)) + "."
    versus = f"{f.ours} against {f.paper} ({f.source})" if f.paper else f.ours
    rule = f" ({f.rule})" if f.rule and f.status == REPRODUCED else ""
    return f"{versus}: {verdict(f)}{rule}."   # not capitalized: ours may start with a name (gpt3-175b)


def claim_bullets(found: Iterable[Finding]) -> str:
    """Judged findings as a Markdown list, one line each: "* **claim** (@sec-…): <judged>", cross-referencing the
    report section the finding links to (its id where it links nowhere)."""
    return "\n".join(f"* **{f.claim}** ({'@' + f.link.split('#')[1] if '#' in f.link else f.id}): {judged(f)}"
                     for f in found)


_VERBS = {**{s: (f"is {s}", f"are {s}") for s in STATUSES},
          NOT_MEASURED: ("is not measured yet", "are not measured yet")}


def status_counts(found: Iterable[Finding], noun: str = "claim") -> str:
    """"Of the 19 claims, 12 are reproduced, 4 are not reproduced and 3 are not reproducible here."; "All 19 claims are
    reproduced." where every finding has one status."""
    found = list(found)
    n = {s: sum(f.status == s for f in found) for s in STATUSES}
    present = [s for s in STATUSES if n[s]]
    if not present:
        raise ValueError("status_counts: no findings")
    if len(present) == 1:
        k = n[present[0]]
        return f"{capitalized(count_of(k, k, noun))} {_VERBS[present[0]][k != 1]}."
    parts = [f"{n[s]} {_VERBS[s][n[s] != 1]}" for s in present]
    return f"Of the {count(len(found), noun)}, {join_words(parts)}."


def gpu_note(paths, what: str = "GPU measurements", root: str | Path = ".", shows_reference: bool = True) -> str:
    """The callout a GPU-bearing section opens with (Markdown): "" when this run measured on a GPU; the reference run's
    label when its tables are shown; otherwise a visible note that no GPU result exists yet and how to get one.
    ``paths``: the GPU tables the section reads (``catalog.gpu_of`` results, None where absent).
    ``shows_reference``: False for a section that shows this run's device only: a reference run is then named as
    where those tables are, not as the source of what is shown. ``root``: the project root."""
    found = [p for p in paths if p is not None]
    if found and not any(catalog.is_reference(p, root) for p in found):
        return ""
    if found and not shows_reference:
        return f"A reference GPU run has these tables: {catalog.label(found[0], root)}.\n"
    if found:
        return (f"::: {{.callout-note title=\"GPU rows from the committed reference run\"}}\n{what} on this page "
                f"come from {catalog.label(found[0], root)}: this run measured no GPU.\n:::\n")
    run = catalog.latest(root)
    where = (f"{catalog.REFERENCE.as_posix()}/ holds no reference run yet" if run is None else
             f"the newest reference run ({(catalog.REFERENCE / run.name).as_posix()}) has none")
    return (f"::: {{.callout-note title=\"No GPU results yet\"}}\nThis page shows no {what}: this run had no GPU "
            f"and {where}. `make gpu` on a GPU node measures them (docs/pipeline.md, On a GPU node) and the "
            "reports then show them here.\n:::\n")
