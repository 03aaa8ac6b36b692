"""The phrase shapes of the reports, the one home of sentence building: a finding's verdict, ours against the
paper's, counts, the status counts of a set of claims. Each returns non-empty text or raises ValueError.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from remat.analysis import catalog
from remat.analysis.findings import (GRADES, INVALID, MEASURED, NOT_MEASURED, NOT_REPRODUCIBLE, REPRODUCED,
                                    STATUSES, Finding)


def count_of(k: int, n: int, noun: str, verb: tuple[str, str] | None = None) -> str:
    """``k`` of ``n`` things as words: "all 12 plans", "none of the 12 plans", "both plans", "the one plan", …;
    ``verb`` (singular, plural) appended in the phrase's number. ValueError unless 0 ≤ k ≤ n."""
    k, n = int(k), int(n)
    if not 0 <= k <= n:
        raise ValueError(f"count_of: need 0 <= k <= n, got k={k}, n={n}")
    if n <= 1:
        phrase = f"the one {noun}" if k else f"no {noun}"
    elif n == 2:
        phrase = (f"neither {noun}", f"one of the two {noun}s", f"both {noun}s")[k]
    elif k in (0, n):
        phrase = f"all {n} {noun}s" if k else f"none of the {n} {noun}s"
    else:
        phrase = f"{k} of the {n} {noun}s"
    return phrase if verb is None else f"{phrase} {verb[k > 1]}"   # plural from two things on


def count(n: int, noun: str) -> str:
    """``n`` things with the noun in its number: "1 thread", "0 threads", "1,024 bytes"."""
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
    """The finding's status as a reader sees it: "reproduced"; "not reproduced: <reason>"; "not measured yet (…)"."""
    if f.status == NOT_MEASURED:
        return f"not measured yet ({f.reason})"
    if f.status in (REPRODUCED, MEASURED) or not f.reason:
        return f.status
    return f"{f.status}: {f.reason}"


def quoted(f: Finding) -> str:
    """Ours where it is data (measured, graded, or a labelled stand-in); else the verdict saying why not."""
    data = f.status in (MEASURED, *GRADES) or (f.status == NOT_REPRODUCIBLE and f.ours not in ("", "—"))
    return f.ours if data else verdict(f)


def slot(f: Finding) -> str:
    """Ours for a number's slot: as ``quoted`` where it is data, "3.3 % (invalid: <reason>)", else "—"."""
    if f.status == INVALID and f.ours not in ("", "—"):
        return f"{f.ours} ({verdict(f)})"
    return f.ours if quoted(f) == f.ours else "—"


def missing_note(found: Iterable[Finding]) -> str:
    """One callout (Markdown) per table the findings wait for (NOT_MEASURED, reason "snakemake <target>")."""
    waiting = [f.reason for f in found if f.status == NOT_MEASURED and f.reason.startswith("snakemake ")]
    return "\n".join(f"::: {{.callout-note title=\"Not measured yet: {r.split()[-1]}\"}}\n"
                     f"{count(waiting.count(r), 'claim')} on this page show — until `{r}` makes it.\n:::\n"
                     for r in dict.fromkeys(waiting))


def listed(*found: Finding) -> str:
    """Values in turn and, once, the verdict they share (each its own where they differ): "1.46× and 1.50×
    (invalid: timed while …)"; the verdict alone where one has no value."""
    if "—" in map(slot, found):
        return verdict(next(f for f in found if slot(f) == "—"))
    why = [verdict(f) if f.status != MEASURED else "" for f in found]
    each = [f.ours + (f" ({w})" if w and len(set(why)) > 1 else "") for f, w in zip(found, why)]
    return join_words(each) + (f" ({why[0]})" if why[0] and len(set(why)) == 1 else "")


def stated(f: Finding, with_verdict: bool = False) -> str:
    """A predicate for "<the quantity> …": "is <slot>" ("is <ours>: <verdict>" for a graded finding with
    ``with_verdict``); where there is no value, "has no value here; its verdict is <verdict>"."""
    if slot(f) == "—":
        return f"has no value here; its verdict is {verdict(f)}"
    return f"is {outcome(f) if with_verdict and f.status in GRADES else slot(f)}"


def outcome(f: Finding) -> str:
    """Ours and the verdict: "0.36×: not reproduced: …"; the verdict alone where ours is no data."""
    return f"{f.ours}: {verdict(f)}" if f.status in GRADES else verdict(f)


def judged(f: Finding) -> str:
    """A judged claim: "38.2 % against 39 % (Table 4): reproduced (within ±3 pp)."; no number where it is no data."""
    if f.status in (INVALID, NOT_MEASURED, NOT_REPRODUCIBLE):
        return capitalized(verdict(f)) + "."
    versus = f"{f.ours} against {f.paper} ({f.source})" if f.paper else f.ours
    rule = f" ({f.rule})" if f.rule and f.status == REPRODUCED else ""
    return f"{versus}: {verdict(f)}{rule}."   # not capitalized: ours may start with a name (gpt3-175b)


def claim_bullets(found: Iterable[Finding]) -> str:
    """Judged findings as a Markdown list: "* **claim** (@sec-… or its id): <judged>"."""
    return "\n".join(f"* **{f.claim}** ({'@' + f.link.split('#')[1] if '#' in f.link else f.id}): {judged(f)}"
                     for f in found)


_VERBS = {**{s: (f"is {s}", f"are {s}") for s in STATUSES},
          NOT_MEASURED: ("is not measured yet", "are not measured yet")}


def status_counts(found: Iterable[Finding], noun: str = "claim") -> str:
    """"Of the 19 claims, 12 are reproduced, 4 are not reproduced and 3 are not reproducible here."; "All 19 …"."""
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
    """A GPU section's opening callout for its GPU tables ``paths`` (None: absent): "" for this run's; the reference
    run's label (``shows_reference`` False: named as where the tables are); else a note on how to get one."""
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
