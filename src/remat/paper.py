"""The papers' printed values, each with where it is printed: the one home of paper values (a leaf module, so
experiments can write them beside their measurements and the analysis can judge against them).

    PAPER["chen.resnet_after_gb"].value, PAPER["chen.resnet_after_gb"].source     # 7, "abstract, §5.2"

Chen, Xu, Zhang, Guestrin 2016, "Training Deep Nets with Sublinear Memory Cost" (arXiv 1604.06174); Korthikanti
et al. 2022, "Reducing Activation Recomputation in Large Transformer Models" (arXiv 2205.05198, v1). Below the scalars,
Korthikanti's tables: Table 3's models, Table 4, Figure 8 (read off the bars, about ±0.5 percentage points) and
Table 5; ``remat.timemodel.paper`` predicts them.
"""

from __future__ import annotations

from dataclasses import dataclass

CHEN, KORTHIKANTI = "Chen et al. 2016", "Korthikanti et al. 2022"

PAPER_GPU = "a100-80gb"
"""Korthikanti's GPU (A100 SXM4 80GB, Selene): its preset's peak (312·10¹² FLOP/s dense BF16) prices MFU/HFU."""


@dataclass(frozen=True)
class PaperValue:
    """One printed value: ``value`` as a number, ``source`` (table / equation / section), ``text`` as the paper
    prints it (default: the number)."""

    value: float
    source: str
    text: str = ""

    def __post_init__(self):
        if not self.text:
            object.__setattr__(self, "text", f"{self.value:g}")


PAPER: dict[str, PaperValue] = {
    # --- Chen et al. 2016 ---------------------------------------------------------------------------------------
    "chen.resnet_depth": PaperValue(1000, "abstract, §5.2", "1,000 layers"),
    "chen.resnet_before_gb": PaperValue(48, "abstract", "48 GB"),     # "from 48G to 7G" (GB read as 10⁹ bytes)
    "chen.resnet_after_gb": PaperValue(7, "abstract, §5.2", "7 GB"),   # GPU memory at run time, SGD momentum
    "chen.resnet_reduction": PaperValue(48 / 7, "abstract; §5.2", "6.9× (48 GB → 7 GB)"),
    "chen.gpu_memory_gb": PaperValue(12, "§5 (Titan X)", "12 GB"),
    "chen.deepest_without": PaperValue(200, "§5.2", "200 layers"),   # "only possible to train a 200 layer ResNet"
    "chen.lstm_steps": PaperValue(64, "§5.3", "64 steps"),           # 64 steps, batch 64, 4 × 1024
    # "more than 4x reduction over the optimized plan"
    "chen.lstm_reduction": PaperValue(4, "§5.3; Figure 6", "more than 4×"),
    "chen.speed_overhead": PaperValue(0.30, "§5.4 (Titan X, 20 batches)", "about 30 %"),
    "chen.system_reduction_lo": PaperValue(2, "§5.2", "2–3×"),       # in-place + sharing: 2–3×, still linear
    "chen.system_reduction_hi": PaperValue(3, "§5.2", "2–3×"),
    "chen.sqrt_exponent": PaperValue(0.5, "Algorithm 1", "O(√n)"),
    "chen.linear_exponent": PaperValue(1, "Chen §3 (no recomputation: memory O(n))", "1"),
    "chen.extra_forwards": PaperValue(1, "abstract", "one extra forward pass"),
    "chen.recursion_per_doubling": PaperValue(1, "§4.4, Eq. 3 with k = 1", "log₂ n: one checkpoint per doubling"),
    "chen.speed_overhead_pct": PaperValue(30, "§5.4; Figure 7 (Titan X, 20 batches)", "about 30 %"),
    # Figures 5 and 6 show a trend, not an exponent: the sublinear plan's memory grows slower than linearly
    "chen.sublinear_trend": PaperValue(1, "§5.2, §5.3; Figures 5 and 6", "sub-linear (log–log slope below 1)"),
    # "a memory saving with little computation overhead" (dropping BN, activation, pooling): no number printed
    "chen.drop_cheap_overhead_pct": PaperValue(0, "§4.2", "little computation overhead"),
    "chen.backward_over_forward": PaperValue(2, "§4.3", "backward ≈ 2× forward"),
    # O(n log n) recomputation; with k = 1 (halving) F(n) = n + (n/2)·log₂ n: half a forward per layer per doubling
    "chen.recursion_forwards_per_doubling": PaperValue(0.5, "§4.4, Eq. 3 with k = 1",
                                                       "O(n log n): ½ a forward per layer per doubling"),
    # --- Korthikanti et al. 2022 --------------------------------------------------------------------------------
    "korthikanti.full_flops_pct": PaperValue(33, "text beside Table 4; Appendix A", "33 %"),
    "korthikanti.selective_flops_pct.gpt3-175b": PaperValue(2.7, "§5, before Eq. 6", "2.7 %"),
    "korthikanti.selective_flops_pct.mt-nlg-530b": PaperValue(1.6, "§5, before Eq. 6", "1.6 %"),
    # selective recompute drops the 5as/h term of sbh(34 + 5as/h): 80/114 for GPT-3, 64/98 for MT-NLG
    "korthikanti.selective_saving_pct.gpt3-175b": PaperValue(70, "§5, before Eq. 6", "70 %"),
    "korthikanti.selective_saving_pct.mt-nlg-530b": PaperValue(65, "§5, before Eq. 6", "65 %"),
    "korthikanti.under_twenty_pct": PaperValue(20, "§6.1; Figure 7", "under 20 % of the TP baseline"),
    "korthikanti.full_time_pct_lo": PaperValue(30, "§1", "30–40 %"),     # full recompute's time overhead
    "korthikanti.full_time_pct_hi": PaperValue(40, "§1", "30–40 %"),
    # 530B on 2240 A100s (8-way data parallel): SP + selective 54.2 %, full recompute 42.1 % ("29 % faster")
    "korthikanti.mfu_abstract_present": PaperValue(54.2, "abstract; 530B on 2240 A100s", "54.2 %"),
    "korthikanti.mfu_abstract_full": PaperValue(42.1, "abstract; 530B on 2240 A100s", "42.1 %"),
    "korthikanti.appendix_c_total": PaperValue(52.3, "Appendix C", "52.3, its printed total"),
    "korthikanti.outside_share_pct.gpt-22b": PaperValue(0.01, "§4.3", "less than 0.01 %"),
    "korthikanti.memory_reduction": PaperValue(5, "abstract; Figure 7", "5×"),
    "korthikanti.recompute_time_cut": PaperValue(90, "abstract", "over 90 %"),
    # the formula's gap to itself (relative error / pp): Table 2's and Figure 7's values are the formulas
    "korthikanti.table2_formula": PaperValue(0, "Table 2; Eq. 1–4", "sbh(34 + 5as/h) … 34sbh/t, 2sbh"),
    "korthikanti.figure7_formula": PaperValue(0, "Figure 7", "Table 2's formulas per model"),
    "korthikanti.figure1_models": PaperValue(4, "Figure 1", "TP baseline above the line, SP + selective below, "
                                                         "every model"),
}
"""Every scalar the reports judge against, by id (``<paper>.<quantity>[.<model>]``)."""


# --- Korthikanti et al. 2022: the tables ------------------------------------------------------------------------

TABLE3_MODELS = ("gpt-22b", "gpt3-175b", "mt-nlg-530b", "gpt-1t")
"""The Table 3 models, in the paper's order."""

PAPER_TABLE4_MS = {  # experiment: (forward, backward, combined) ms, one 22B layer, t = 8 (paper Table 4)
    "baseline": (7.7, 11.9, 19.6),
    "sequence parallel": (7.2, 11.8, 19.0),
    "full recompute": (7.7, 19.5, 27.2),
    "selective recompute": (7.7, 13.2, 20.9),
    "selective + sequence parallel": (7.2, 13.1, 20.3),
}
PAPER_TABLE4_OVERHEAD = {"baseline": 0.0, "sequence parallel": -3.0, "full recompute": 39.0,
                         "selective recompute": 7.0, "selective + sequence parallel": 4.0}
"""Paper Table 4's overhead column, % of the baseline's combined time."""

PAPER_FIGURE8_PERCENT = {  # (model, variant): (forward, forward + backward, total incl. recompute, recompute)
    ("gpt-22b", "full"): (39.1, 100.0, 141.0, 41.0),
    ("gpt-22b", "present"): (36.6, 97.4, 104.3, 7.0),
    ("gpt3-175b", "full"): (36.6, 100.0, 138.8, 38.8),
    ("gpt3-175b", "present"): (35.5, 99.7, 103.6, 3.9),
    ("mt-nlg-530b", "full"): (34.2, 100.0, 135.6, 35.6),
    ("mt-nlg-530b", "present"): (33.2, 99.7, 101.8, 2.1),
    ("gpt-1t", "full"): (34.8, 100.0, 136.6, 36.6),
    ("gpt-1t", "present"): (33.9, 101.1, 102.9, 1.8),
}

PAPER_TABLE5_GAIN_PCT = {"gpt-22b": 29.0, "gpt3-175b": 31.8, "mt-nlg-530b": 29.7, "gpt-1t": 32.1}
"""Paper Table 5's "throughput increase" column as printed (SP + selective over full recompute, percent)."""

PAPER_TABLE5_S = {  # model: (full recompute s, present work s, MFU %, HFU %) — paper Table 5, no data parallelism
    "gpt-22b": (1.42, 1.10, 41.5, 43.7),
    "gpt3-175b": (18.13, 13.75, 51.4, 52.8),
    "mt-nlg-530b": (49.05, 37.83, 56.0, 57.0),
    "gpt-1t": (94.42, 71.49, 56.3, 57.0),
}

PAPER_APPENDIX_C_PARTS = (51.4, 0.7)
"""The two addends Appendix C prints beside its total (``korthikanti.appendix_c_total``)."""
