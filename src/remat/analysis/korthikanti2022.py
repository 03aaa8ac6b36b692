"""Korthikanti et al. 2022 tables -> what the report shows: paper Table 2, the reconciliation, FLOPs, paper
Figure 1 and the modern layers as display tables (from the loaded ``korthikanti-*`` tables; nothing is
measured here), and the checks of the paper's own numbers computed from the closed forms
(``remat.formulas.korthikanti``): §4.3's share of the activations outside the layers, the selective-recompute
FLOPs overhead quoted in the text (2.7 % / 1.6 %) against Eq. 8, and the HFU each recompute count implies.

Naming: "paper Table N" / "paper Figure N" is the paper's; a column computed from a paper's formula says
"formula" (e.g. "formula (paper Table 2) MiB"), never just "Table 2".
"""

from __future__ import annotations

import pandas as pd

from remat.formulas import korthikanti
from remat.models.presets import from_name
from remat.report.phrases import count_of, join_words
from remat.units import ceil_text, span_text
from remat.timemodel.gpus import GPUS
from remat.timemodel.paper import PAPER_TABLE5_S
from remat.units import GiB, MiB

PAPER_GPU = "a100-80gb"
"""The paper's GPU (A100 SXM4 80GB, Selene): its preset's peak (312·10¹² FLOP/s dense BF16) prices MFU/HFU."""

PAPER_OUTSIDE_SHARE_CLAIM_PCT = {"gpt-22b": 0.01}
"""§4.3: the activations outside the layers are "less than 0.01 %" of the total for the 22B model (percent)."""

PAPER_SELECTIVE_OVERHEAD_PCT = {"gpt3-175b": 2.7, "mt-nlg-530b": 1.6}
"""The paper's text around Eq. 8 (§5, selective recompute): its FLOPs overhead for GPT-3 and MT-NLG (percent)."""

PAPER_TABLE5 = {model: (present, mfu, hfu) for model, (_, present, mfu, hfu) in PAPER_TABLE5_S.items()}
"""Paper Table 5 (v1, A100 80GB, Selene; "present work" = SP + selective), model -> (iteration seconds, MFU %,
HFU %) as printed, from ``remat.timemodel.paper.PAPER_TABLE5_S`` (one copy of the paper's values). The GPUs
per model are t·p of paper Table 3 (the presets' tp × pp), the batch its global batch."""


# --- summaries for the report (tables in, tables out; nothing measured) ----------------------------------------------

def table2_summary(table: pd.DataFrame) -> pd.DataFrame:
    """Paper Table 2, measured vs its formula evaluated, one row per model × technique: MiB per layer (2**20
    bytes) measured and from the formula ("formula (paper Table 2) MiB": ``korthikanti.table2_bytes``, not a
    value printed in the paper), relative error, actual MiB, % of the baseline. Input: a
    ``korthikanti-table2`` table."""
    out = pd.DataFrame({
        "model": table["model"], "technique": table["technique"], "t": table["tp"],
        "measured MiB": (table["bytes_measured"] / MiB).round(2),
        "formula (paper Table 2) MiB": (table["bytes_formula"] / MiB).round(2),
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


def _mib_text(n_bytes: float) -> str:
    """Bytes as MiB (2**20 bytes) with no more digits than the value needs: "48", "1.5", "0.0039"."""
    value = float(n_bytes) / MiB
    if value == round(value):
        return f"{value:,.0f}"
    if abs(value) >= 0.01:
        return f"{value:,.2f}".rstrip("0").rstrip(".")
    return f"{value:.2g}"


def reconciliation_display(frame: pd.DataFrame) -> pd.DataFrame:
    """``reconciliation`` for the report: the §4.1 term by its label (no internal key; an uncounted tensor by its
    note up to the reason), then the columns that are compared — measured paper-faithful MiB, the term's
    formula MiB, actual MiB kept by PyTorch — and then which tensors (module/op), their shape and dtype. MiB = 2**20 bytes, shown with as few digits as the
    value needs (``_mib_text``); the exact bytes stay in ``reconciliation``."""
    return pd.DataFrame({
        "§4.1 term": frame["term"].str.replace(r" \[[^\]]*\]$", "", regex=True)
                                   .str.replace(r"^(not counted: [^:]*):.*$", r"\1", regex=True),
        "measured MiB": frame["measured_bytes"].map(_mib_text),
        "formula MiB": frame["formula_bytes"].map(_mib_text),
        "actual MiB": frame["actual_bytes"].map(_mib_text),
        "saved by (module/op)": frame["tensors"], "shape": frame["shape"], "dtype": frame["dtype"]})


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


def _fits_column(frame: pd.DataFrame) -> str:
    """The memory table's fit column header, naming the GPU preset and its memory in GiB (2**30 bytes)."""
    gpu, capacity = frame["gpu"].iloc[0], int(frame["gpu_memory_bytes"].iloc[0])
    return f"fits {gpu} ({capacity / GiB:.1f} GiB)"


def memory_summary(frame: pd.DataFrame) -> pd.DataFrame:
    """Paper Figure 1 as a table: GiB per GPU (2**30 bytes) of the first pipeline stage by component —
    parameters + optimizer state as held by that GPU and the paper's even share 18·P/(t·p) beside it —, the
    total (first-stage model state + activations) and whether it fits the GPU preset's memory ("yes"/"no"; ``gpu``,
    ``gpu_memory_bytes``: the A100 80GB's 81920 MiB = 80 GiB by default). Input: a ``korthikanti-memory``
    table."""
    return pd.DataFrame({
        "model": frame["model"], "technique": frame["technique"],
        "params+optimizer GiB (first stage)": (frame["model_state_bytes"] / GiB).round(1),
        "params+optimizer GiB (paper: 18·P/(t·p))": (frame["model_state_even_bytes"] / GiB).round(1),
        "activations (layers) GiB": (frame["activations_layers"] / GiB).round(1),
        "outside layers GiB": (frame["activations_outside"] / GiB).round(2),
        "total GiB": frame["total_gib"].round(1),
        _fits_column(frame): frame["fits_gpu"].astype(bool).map({True: "yes", False: "no"})})


EXCESS_PARTS = {"word_embedding": "word embedding", "position_embedding": "position embedding",
                "replicated_in_layers": "LayerNorms and biases replicated on TP ranks",
                "uneven_layers": "⌈L/p⌉ − L/p layers", "final_layernorm": "final LayerNorm"}
"""korthikanti.first_stage_params_excess's parts -> report labels."""


def model_state_summary(frame: pd.DataFrame) -> pd.DataFrame:
    """Per model, parameters + optimizer state of one GPU of the first stage against the paper's even share
    18·P/(t·p), and the difference by cause (``korthikanti.first_stage_params_excess``), in GiB (2**30 bytes).
    Columns: model, P (10⁹ parameters), t·p, paper 18·P/(t·p) GiB, first stage GiB, difference GiB, then one
    column per cause. Input: a ``korthikanti-memory`` table (one row per model is used)."""
    first = frame.groupby("model", sort=False).first().reset_index()
    out = pd.DataFrame({
        "model": first["model"], "P (10⁹)": (first["params_total"] / 1e9).round(2),
        "t·p": first["tp"] * first["pp"],
        "paper 18·P/(t·p) GiB": (first["model_state_even_bytes"] / GiB).round(2),
        "first stage GiB": (first["model_state_bytes"] / GiB).round(2),
        "difference GiB": ((first["model_state_bytes"] - first["model_state_even_bytes"]) / GiB).round(2)})
    for part, label in EXCESS_PARTS.items():
        out[f"{label} GiB"] = (first[f"excess_{part}_bytes"] / GiB).round(3) + 0.0  # + 0.0: no "-0.0"
    return out


def outside_share_summary(frame: pd.DataFrame) -> pd.DataFrame:
    """§4.3 checked: per model, the activations outside the layers as a percent of the layers' activations on
    the first stage — from the formulas (``korthikanti.outside_layer_share``, with SP as the paper writes it:
    without recompute that is §4.3's extra terms over Eq. 5; with selective recompute, over Eq. 6) and from
    the memory table (measured layers) — beside the paper's claim where it makes one; "logits % of outside":
    the fp32 logits' part of the outside terms (p = 1 only). Input: a ``korthikanti-memory`` table (its TP+SP
    and TP+SP+selective rows)."""
    rows = []
    for model, group in frame.groupby("model", sort=False):
        cfg = from_name(model)
        by = group.set_index("technique")
        args = (cfg.seq, cfg.micro_batch, cfg.hidden, cfg.heads, cfg.vocab, cfg.layers, int(group["tp"].iloc[0]),
                cfg.pp, cfg.interleave)
        terms = korthikanti.outside_layer_bytes(cfg.seq, cfg.micro_batch, cfg.hidden, cfg.vocab, args[6], cfg.pp)
        row = {"model": model, "p": cfg.pp, "outside GiB": round(by.loc["TP+SP", "activations_outside"] / GiB, 3),
               "logits % of outside": 100 * terms.get("logits_fp32", 0) / sum(terms.values())}
        for technique, mode, label in (("TP+SP", "none", "Eq. 5"), ("TP+SP+selective", "selective", "Eq. 6")):
            row[f"% of {label} (formula)"] = 100 * float(korthikanti.outside_layer_share(*args, sp=True,
                                                                                          recompute=mode))
            row[f"% of {label} (measured)"] = 100 * (by.loc[technique, "activations_outside"]
                                                      / by.loc[technique, "activations_layers"])
        claim = PAPER_OUTSIDE_SHARE_CLAIM_PCT.get(model)
        row["paper §4.3 claim %"] = f"< {claim}" if claim is not None else "—"
        rows.append(row)
    return pd.DataFrame(rows).round(3)


def _iteration(model: str) -> tuple[int, int, int, int, int, int]:
    """(B, s, h, L, v, GPUs) of a paper Table 3 model: its global batch and t·p GPUs (no data parallelism)."""
    cfg = from_name(model)
    return cfg.global_batch, cfg.seq, cfg.hidden, cfg.layers, cfg.vocab, cfg.tp * cfg.pp


def selective_overhead_summary(frame: pd.DataFrame) -> pd.DataFrame:
    """The selective-recompute FLOPs overhead, in percent of the model FLOPs (Eq. 7), per model: per
    iteration (global batch B, logits included; ``korthikanti.recompute_overhead``) by Eq. 8 as printed
    ((s/(6h)) / (1 + s/(6h) + v/(12hL))) and by the text's recompute count (4Bs²h per layer: a third of it),
    per layer from the FLOPs table (Eq. 8, and FlopCounterMode's count), and the paper's quoted value where
    the text gives one. Input: a ``korthikanti-flops`` table (its selective rows at the largest t)."""
    sel = frame[frame["mode"] == "selective"]
    sel = sel[sel["tp"] == sel["tp"].max()].set_index("model")
    rows = []
    for model in dict.fromkeys(sel.index):
        B, s, h, L, v, _ = _iteration(model)
        quoted = PAPER_SELECTIVE_OVERHEAD_PCT.get(model)
        rows.append({
            "model": model, "paper (text) %": f"{quoted}" if quoted is not None else "—",
            "Eq. 8 % (iteration)": 100 * float(korthikanti.recompute_overhead(B, s, h, L, v, "eq8")),
            "Eq. 8 % (layer)": 100 * float(sel.loc[model, "overhead_eq8"]),
            "text 4Bs²h % (iteration)": 100 * float(korthikanti.recompute_overhead(B, s, h, L, v, "text")),
            "measured % (layer)": 100 * float(sel.loc[model, "overhead_measured"])})
    return pd.DataFrame(rows).round(3)


def quoted_overhead_text(frame: pd.DataFrame) -> str:
    """One sentence on the selective-recompute FLOPs overheads the paper's text quotes (2.7 % / 1.6 %,
    ``PAPER_SELECTIVE_OVERHEAD_PCT``) against ours: which models, whether the quoted values are Eq. 8 as
    printed (to the quote's one decimal), and our counts (FlopCounterMode, per layer) — equal to the quotes, a
    third of them, or their ratio — and, when our recompute is the one the paper's text describes, why.
    Input: a ``korthikanti-flops`` table."""
    over = selective_overhead_summary(frame).set_index("model")
    quoted = {m: q for m, q in PAPER_SELECTIVE_OVERHEAD_PCT.items() if m in over.index}
    if not quoted:
        return "The paper's text quotes selective recompute's FLOPs overhead for none of these models."
    measured = {m: float(over.loc[m, "measured % (layer)"]) for m in quoted}
    eq8 = {m: float(over.loc[m, "Eq. 8 % (iteration)"]) for m in quoted}
    quotes = f"{join_words(f'{q}%' for q in quoted.values())} for {join_words(quoted)}"
    ours = join_words(f"{v:.2f}%" for v in measured.values())
    if all(round(measured[m], 1) == q for m, q in quoted.items()):
        return f"The paper's text quotes {quotes}; our counts agree ({ours})."
    eq8_is = all(round(eq8[m], 1) == q for m, q in quoted.items())
    source = "Eq. 8 as printed" if eq8_is else "not Eq. 8 as printed either"
    ratios = [measured[m] / q for m, q in quoted.items()]
    share = ("about a third of them" if all(abs(r - 1 / 3) < 0.02 for r in ratios)
             else f"{span_text(ratios, 2, '')} times them")
    sel = frame[frame["mode"] == "selective"]
    text_count = bool((sel["flops_recompute"] == sel["recompute_text"]).all())
    why = (": they count the recompute the text describes, QKᵀ and ·V once, which Eq. 8 counts three times"
           if text_count and eq8_is else
           ": they count the recompute the text describes" if text_count else "")
    return (f"The paper's text quotes selective recompute's FLOPs overhead as {quotes} — {source}; our counts "
            f"(FlopCounterMode, per layer), {ours}, are {share}{why}.")


def utilization_summary(models: list[str], gpu: str = PAPER_GPU) -> pd.DataFrame:
    """MFU and HFU of paper Table 5 recomputed from its iteration times (``PAPER_TABLE5``, "present work" =
    SP + selective) and the FLOP formulas, in percent of ``gpu``'s dense peak (``GPUS[gpu].peak_flops``):
    MFU from Eq. 7, HFU from Eq. 8 as printed (what the table prints) and from the recompute the text
    describes (``korthikanti.hardware_flops``). Models without a Table 5 row are skipped. Columns: model,
    GPUs, iteration s (paper), MFU % (paper), MFU % (Eq. 7), HFU % (paper), HFU % (Eq. 8), HFU % (text)."""
    peak = GPUS[gpu].peak_flops
    rows = []
    for model in models:
        if model not in PAPER_TABLE5:
            continue
        seconds, mfu, hfu = PAPER_TABLE5[model]
        B, s, h, L, v, gpus = _iteration(model)
        util = lambda flops: 100 * korthikanti.flops_utilization(flops, seconds, gpus, peak)
        rows.append({"model": model, "GPUs": gpus, "iteration s (paper)": seconds,
                     "MFU % (paper)": mfu, "MFU % (Eq. 7)": util(korthikanti.model_flops(B, s, h, L, v)),
                     "HFU % (paper)": hfu, "HFU % (Eq. 8)": util(korthikanti.hardware_flops_eq8(B, s, h, L, v)),
                     "HFU % (text)": util(korthikanti.hardware_flops(B, s, h, L, v, "selective"))})
    return pd.DataFrame(rows).round(2)


def modern_summary(frame: pd.DataFrame) -> pd.DataFrame:
    """Per variant and module: actual MiB saved per layer, and the layer total beside the paper's formula.
    Input: a ``korthikanti-modern`` table."""
    out = frame.assign(MiB=(frame["bytes"] / MiB).round(2))
    out["module/op"] = out["module"] + out["op"].map(lambda o: f" ({o})" if o else "")
    return out[["variant", "module/op", "tensors", "MiB"]]


# --- wording for the report's prose (tables in, words out; every verdict follows the data) ---------------------------

TABLE2_TOLERANCE = 0.005
"""Relative error (fraction) within which a measured point counts as agreeing with the paper Table 2 formula."""


def table2_agreement_text(table: pd.DataFrame, tolerance: float = TABLE2_TOLERANCE) -> str:
    """One sentence: how the paper-faithful bytes of a ``korthikanti-table2`` table compare with the paper
    Table 2 formula — all equal byte for byte; all within ``tolerance`` (a fraction); or how many are within
    it and which point is worst."""
    n = len(table)
    exact = int((table["bytes_measured"] == table["bytes_formula"]).sum())
    within = int((table["rel_error"].abs() <= tolerance).sum())
    error = table["rel_error"].abs()
    worst = table.loc[error.idxmax()]
    point = "model × technique point"
    if exact == n:
        return f"The paper-faithful bytes of {count_of(n, n, point)} equal the paper Table 2 formula byte for byte."
    exact_words = "none of them" if exact == 0 else f"{exact} of them"
    if within == n:
        return (f"The paper-faithful bytes of {count_of(n, n, point)} are within {tolerance:.1%} of the paper "
                f"Table 2 formula, {exact_words} byte for byte; the largest relative error is {error.max():.1e} "
                f"({worst['model']}, {worst['technique']}).")
    return (f"The paper-faithful bytes of {count_of(within, n, point)} are within {tolerance:.1%} of the paper "
            f"Table 2 formula ({exact} byte for byte); the largest relative error is {error.max():.1e} "
            f"({worst['model']}, {worst['technique']}).")


def uncounted(table: pd.DataFrame, items_table: pd.DataFrame) -> dict:
    """What separates actual from paper-faithful bytes in a ``korthikanti-table2`` table, from the matching
    ``korthikanti-items`` table: ``gap_max`` (bytes per layer, int), ``notes`` (the reasons given for tensors the
    paper does not count, in order of appearance), ``explained`` (the uncounted tensors add up to
    the gap at every point), ``norm_only`` (explained, every counted tensor kept at the paper's element size,
    and every uncounted one a norm statistic)."""
    keys = ["model", "technique", "tp"]
    gap = table.set_index(keys)["bytes_actual"] - table.set_index(keys)["bytes_measured"]
    apart = items_table[items_table["paper_term"].isna()]
    apart_bytes = apart.groupby(keys)["bytes"].sum().reindex(gap.index).fillna(0)
    counted = items_table.dropna(subset=["paper_term"])
    same_size = bool((counted["bytes"] == counted["paper_bytes"]).all())
    notes = list(dict.fromkeys(apart["note"].dropna()))
    explained = bool((apart_bytes == gap).all())
    return {"gap_max": int(gap.max()), "notes": notes, "explained": explained,
            "norm_only": explained and same_size and all(n.startswith("norm statistics") for n in notes)}


def uncounted_text(table: pd.DataFrame, items_table: pd.DataFrame) -> str:
    """One sentence on the actual bytes against the paper-faithful ones (``uncounted``): equal, or larger by at
    most N bytes per layer, and what makes up the difference."""
    u = uncounted(table, items_table)
    if u["gap_max"] == 0 and u["explained"]:
        return "The actual bytes PyTorch keeps equal the paper-faithful bytes at every point."
    what = ("LayerNorm's mean and 1/σ, which the paper ignores" if u["norm_only"]
            else "; ".join(u["notes"]) if u["notes"] else "storage the saved tensors do not account for")
    rest = "" if u["explained"] else " (the uncounted tensors do not add up to the whole difference)"
    return (f"PyTorch keeps at most {u['gap_max']:,} bytes per layer more than that (the actual bytes): "
            f"{what}{rest}.")


def fit_text(frame: pd.DataFrame, technique: str, name_gpu: bool = True) -> str:
    """Whether ``technique`` fits the GPU preset's memory on the first pipeline stage, across the models of a
    ``korthikanti-memory`` table: "fits in the a100-80gb's 80.0 GiB for all 4 models" / "for 2 of the 4
    models (a and b)" / "does not fit ... for any of the 4 models" (GiB = 2**30 bytes); without
    "in the ...'s ... GiB" when ``name_gpu`` is false."""
    rows = frame[frame["technique"] == technique]
    fits = list(rows.loc[rows["fits_gpu"].astype(bool), "model"])
    n = len(rows)
    gpu, capacity = frame["gpu"].iloc[0], int(frame["gpu_memory_bytes"].iloc[0])
    where = f" in the {gpu}'s {capacity / GiB:.1f} GiB" if name_gpu else ""
    if not fits:
        models = "the one model" if n == 1 else "either model" if n == 2 else f"any of the {n} models"
        return f"does not fit{where} for {models}"
    which = f" ({join_words(fits)})" if len(fits) < n else ""
    return f"fits{where} for {count_of(len(fits), n, 'model')}{which}"


def tp_text(frame: pd.DataFrame) -> str:
    """The tensor-parallel sizes t of a ``korthikanti-*`` table (column ``tp``), ascending, as words: "1 and 8"."""
    return join_words(sorted({int(t) for t in frame["tp"]}))


def figure7_agreement_text(table: pd.DataFrame) -> str:
    """Paper Figure 7's bars (percent of the TP baseline) measured against the paper Table 2 formula, as a
    clause: "every measured ratio equals the formula's" when no bar differs at all (exactness is == 0, the one
    rule), else "every measured ratio is within 0.02 percentage points of the formula's" (the largest
    difference rounded up to hundredths; "... equals the formula's to a hundredth of a percentage point" when
    that bound shows as 0.00, a difference of float noise). Input: a ``korthikanti-table2`` table (the rows to
    judge)."""
    delta = float((table["percent_of_baseline"] - table["percent_of_baseline_formula"]).abs().max())
    if delta == 0:
        return "every measured ratio equals the formula's"
    bound = ceil_text(delta, 2)
    if float(bound) == 0:   # float noise only: ceil_text does not round it up to a hundredth
        return "every measured ratio equals the formula's to a hundredth of a percentage point"
    return f"every measured ratio is within {bound} percentage points of the formula's"


def interleave_text(models) -> str:
    """The interleaving factor m of each model's preset, grouped: "m = 3 for a and b, m = 1 for the others", "m = 3
    for a; m = 2 for b, m = 1 for the others" (first-seen order), or "m = 1 for every model here"."""
    by_m: dict[int, list[str]] = {}
    for m in models:
        k = from_name(m).interleave
        if k > 1:
            by_m.setdefault(k, []).append(m)
    if not by_m:
        return "m = 1 for every model here"
    return "; ".join(f"m = {k} for {join_words(ms)}" for k, ms in by_m.items()) + ", m = 1 for the others"


OUTSIDE_SHARE_FORMULA = r"$(p/L + \delta_{p=1} \cdot (4/L)(1 + v/h)) / (34 + 5as/h)$"
"""§4.3's extra terms over Eq. 5 (``korthikanti.outside_layer_share`` with SP), as the report writes it."""


def outside_share_text(frame: pd.DataFrame) -> str:
    """§4.3's bound checked, one markdown paragraph per model it is stated for (``PAPER_OUTSIDE_SHARE_CLAIM_PCT``,
    a percent): the share of the activations outside the layers from the paper's own terms
    (``outside_share_summary``), how it compares with the bound, and the verdict — the bound holds; or it holds
    only if the paper's number is read as a fraction (the share is below that fraction as a percent); or it
    does not hold either way — then the share with selective recompute. Input: a ``korthikanti-memory``
    table."""
    outside = outside_share_summary(frame).set_index("model")
    claims = {m: c for m, c in PAPER_OUTSIDE_SHARE_CLAIM_PCT.items() if m in outside.index}
    if not claims:
        return ("§4.3 states its bound for the 22B model, which is not among these models; @tbl-outside gives the "
                "share for each model counted.")
    paragraphs = []
    for m, claim in claims.items():
        r = outside.loc[m]
        share, sel_share = r["% of Eq. 5 (formula)"], r["% of Eq. 6 (formula)"]
        against = (f"{share / claim:.0f} times the stated bound" if share >= claim
                   else f"{claim / share:.0f} times below the stated bound")
        if share < claim:
            coda = "The bound holds. "
        elif share < 100 * claim:   # the claim read as a fraction: 100·claim percent
            coda = (f"The share is below {100 * claim:g}%, a fraction below {claim:g}: the bound holds if its "
                    f"\"{claim:g}\" is a fraction, not a percent. ")
        else:
            coda = "The bound does not hold, read as a percent or as a fraction. "
        paragraphs.append(
            f"§4.3 adds to Eq. 5 the embedding-dropout mask $sbhp/t$ and, for $p = 1$, $2sbh/t + 2sbh/t + 4sbv/t$ "
            f"(final LayerNorm input, output-projection input, fp32 logits), and says that for the {m} model these "
            f"extra terms are less than {claim:g}% of the activations. Its own terms give {share:.2f}% "
            f"({against}; with the layers measured: {r['% of Eq. 5 (measured)']:.2f}%), from "
            f"{OUTSIDE_SHARE_FORMULA} with $p = {int(r['p'])}$; the fp32 logits are {r['logits % of outside']:.0f}% "
            f"of these terms. {coda}With selective recompute the layers shrink to Eq. 6 and the same terms are "
            f"{sel_share:.2f}% of them.")
    return "\n\n".join(paragraphs)


SWIGLU_FFN_WIDE_TENSORS = 4
"""Tensors of the MLP's inner width (ffn) a SwiGLU MLP saves for backward (``remat.models.llama.SwiGLU`` under
autograd, as @tbl-modern measures): the gate output (SiLU's input), the SiLU output and the up output (the
product's inputs) and the product (the down projection's input); besides them one h-wide tensor, the common
input of the gate and up projections."""


def gelu_mlp_sbh() -> int:
    """The GeLU MLP's saved activations in sbh bytes, masks apart, from the §4.1 terms (``korthikanti.TERMS``,
    block "mlp"): the fc1 input 2, the GeLU input 8 and the fc2 input 8 — 18."""
    return sum(t.sbh_coeff for t in korthikanti.TERMS if t.block == "mlp" and t.name not in korthikanti.MASK_TERMS)


def swiglu_mlp_sbh(ffn_ratio: float) -> float:
    """A SwiGLU MLP's saved activations in sbh bytes at 16 bits (``korthikanti.ACT_BYTES``) with inner width
    ffn = ``ffn_ratio``·h: the common input (2sbh) and ``SWIGLU_FFN_WIDE_TENSORS`` tensors of 2sb·ffn each,
    2 + 8·ffn/h."""
    return korthikanti.ACT_BYTES * (1 + SWIGLU_FFN_WIDE_TENSORS * ffn_ratio)
