"""Korthikanti et al. 2022 tables -> what the report shows: Table 2, the reconciliation, FLOPs, Figure 1 and the
modern layers as display tables (from the loaded ``korthikanti-*`` tables; nothing is measured here)."""

from __future__ import annotations

import pandas as pd

from remat.formulas import korthikanti
from remat.units import GiB, MiB


# --- summaries for the report (tables in, tables out; nothing measured) ----------------------------------------------

def table2_summary(table: pd.DataFrame) -> pd.DataFrame:
    """Table 2, measured vs formula, one row per model × technique: MiB per layer (2**20 bytes), relative
    error, actual MiB, % of the baseline. Input: a ``korthikanti-table2`` table."""
    out = pd.DataFrame({
        "model": table["model"], "technique": table["technique"], "t": table["tp"],
        "measured MiB": (table["bytes_measured"] / MiB).round(2),
        "Table 2 MiB": (table["bytes_formula"] / MiB).round(2),
        "rel. error": table["rel_error"].map(lambda e: f"{e:+.2e}"),
        "actual MiB": (table["bytes_actual"] / MiB).round(2),
        "% of baseline": table["percent_of_baseline"].round(1)})
    return out


def reconciliation(items_table: pd.DataFrame, model: str, technique: str, tp: int) -> pd.DataFrame:
    """One configuration's saved tensors by §4.1 term: measured paper bytes beside the term's formula, then
    each tensor the paper does not count and each storage-level difference (bytes, int). Input: a
    ``korthikanti-items`` table."""
    rows = items_table[(items_table["model"] == model) & (items_table["technique"] == technique)
                       & (items_table["tp"] == tp)]
    counted = rows.dropna(subset=["paper_term"])
    terms = counted.groupby("paper_term", sort=False).agg(
        tensors=("name", lambda n: ", ".join(dict.fromkeys(n))), shape=("shape", "first"),
        dtype=("saved_dtype", "first"), actual_bytes=("bytes", "sum"), measured_bytes=("paper_bytes", "sum"),
        formula_bytes=("term_formula_bytes", "first")).reset_index()
    labels = {t.name: t.label for t in korthikanti.TERMS} | {korthikanti.FULL_RECOMPUTE_TERM: "layer input (checkpoint)"}
    terms.insert(0, "term", terms.pop("paper_term").map(lambda n: f"{labels.get(n, n)} [{n}]"))
    terms["formula_bytes"] = terms["formula_bytes"].astype("int64")
    apart = rows[rows["paper_term"].isna()]
    extra = pd.DataFrame({"term": "not counted: " + apart["note"], "tensors": apart["name"],
                          "shape": apart["shape"], "dtype": apart["saved_dtype"], "actual_bytes": apart["bytes"],
                          "measured_bytes": 0, "formula_bytes": 0})
    return pd.concat([terms, extra], ignore_index=True)


def flops_summary(frame: pd.DataFrame) -> pd.DataFrame:
    """Per model (t as in the table), FLOPs per layer in TFLOP (10¹²): forward, backward and recompute
    measured; the recompute the paper's text describes and the one Eq. 8 implies; overheads in percent of
    model FLOPs. Input: a ``korthikanti-flops`` table."""
    tera = 1e12
    rows = []
    for (model, tp), group in frame.groupby(["model", "tp"], sort=False):
        by = group.set_index("mode")
        sel, full = by.loc["selective"], by.loc["full"]
        rows.append({
            "model": model, "t": tp, "forward": sel["flops_forward"] / tera,
            "24bsh²+4bs²h": sel["formula_forward"] / tera, "backward": sel["flops_backward"] / tera,
            "selective recompute": sel["flops_recompute"] / tera, "text: 4bs²h": sel["recompute_text"] / tera,
            "Eq. 8: 12bs²h": sel["recompute_eq8"] / tera,
            "selective overhead %": 100 * sel["overhead_measured"], "text %": 100 * sel["overhead_text"],
            "Eq. 8 %": 100 * sel["overhead_eq8"], "full overhead %": 100 * full["overhead_measured"]})
    return pd.DataFrame(rows).round(3)


def memory_summary(frame: pd.DataFrame) -> pd.DataFrame:
    """Figure 1 as a table: GiB per GPU (2**30 bytes) by component, total, and whether it fits 80 GB
    (80·10⁹ bytes). Input: a ``korthikanti-memory`` table."""
    return pd.DataFrame({
        "model": frame["model"], "technique": frame["technique"],
        "params+optimizer GiB": (frame["model_state_bytes"] / GiB).round(1),
        "activations (layers) GiB": (frame["activations_layers"] / GiB).round(1),
        "outside layers GiB": (frame["activations_outside"] / GiB).round(2),
        "total GiB": frame["total_gib"].round(1), "fits 80 GB": frame["fits_80gb"]})


def modern_summary(frame: pd.DataFrame) -> pd.DataFrame:
    """Per variant and module: actual MiB saved per layer, and the layer total beside the paper's formula.
    Input: a ``korthikanti-modern`` table."""
    out = frame.assign(MiB=(frame["bytes"] / MiB).round(2))
    out["module/op"] = out["module"] + out["op"].map(lambda o: f" ({o})" if o else "")
    return out[["variant", "module/op", "tensors", "MiB"]]
