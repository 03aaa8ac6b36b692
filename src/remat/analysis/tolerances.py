"""The one home of tolerances: each threshold a rule for "reproduced" uses, with the reason for its size.
Rules (``remat.analysis.findings.within_abs`` …) take these; reports print them from the findings' ``rule`` and
``tolerance`` columns, never typed again.
"""

from __future__ import annotations

from dataclasses import dataclass

from remat.measure.provenance import BUSY_CORES


@dataclass(frozen=True)
class Tolerance:
    """A threshold ``value`` (in ``unit``) and why it is that size."""

    value: float
    unit: str
    why: str


MINOR = 2
"""The "reproduced with minor issues" band of a comparison with a printed paper value (not of an exactness check or an
invariant): within twice its tolerance the value is right in kind and off in degree; beyond, another result."""


# --- Chen et al. 2016 -----------------------------------------------------------------------------------------

CHEN_SQRT_SLOPE = Tolerance(0.1, "", "a log–log slope of memory against n within ±0.1 of 0.5 is O(√n): ⌈√n⌉ rounding "
                            "and the live segment bend a chain's slope by a few hundredths; the shapes it must be told "
                            "from, logarithmic (slope ≈ 0.2 over L = 2…512) and linear (1), are 0.3 or more away")
CHEN_EXTRA_FORWARDS = Tolerance(0.1, " forward passes", "√L segments recompute L − ⌊L/k⌋ layers, 1 − 1/√L of a "
                                "forward pass: within 0.1 of one pass from L ≈ 100 on; half a pass or two would be "
                                "another schedule")
CHEN_RECURSION = Tolerance(0.25, " checkpoints", "g(n) = 1 + g(n/2) adds one checkpoint per doubling of n; uneven "
                           "halves bend a fit by a fraction of one, while √L segments add several per doubling")
CHEN_RESNET_REDUCTION = Tolerance(0.25, "", "48 and 7 are printed to one or two figures (7 GB is 6.5–7.5: the "
                                  "ratio 6.4–7.4× from rounding alone); the paper prints neither its layer layout "
                                  "nor its allocator's details; ±25 % allows these and still tells 7× from 10×")
CHEN_RESNET_LIMIT = Tolerance(0.25, "", "the paper's limit is what trained on a 12 GB card, ours all but its "
                              "workspace; ±25 % allows the layout, not another scale")
CHEN_SUBLINEAR_SLOPE = Tolerance(0.75, "", "Figures 5 and 6 show a trend, not an exponent: a log–log slope ≤ 0.75, "
                                 "halfway from √n to linear, is clearly sub-linear; a fixed part bends linear by ~0.2")
CHEN_LITTLE_OVERHEAD = Tolerance(15, " %", "\"little\" on the paper's own scale: at most half the ~30 % of a whole "
                                 "extra forward pass (§5.4); drop-cheap re-runs only batch norm, activations, pooling")
CHEN_BACKWARD_RATIO = Tolerance(0.25, "×", "a backward takes the input's and the weights' gradients, each as costly as "
                                "the forward; 1.5× or 3× would be another cost model")
CHEN_RECURSION_FORWARDS = Tolerance(0.25, " forwards per layer", "halving re-runs each half once per level: ½ a "
                                    "forward per layer per doubling; O(n) gives 0, O(n^1.5) above 2 over L = 2…512")
CHEN_LSTM_REDUCTION_HI = Tolerance(8, "×", "the paper prints a lower bound only (\"more than 4x\"), read off Figure "
                                   "6(a)'s log₂ axes; we read it as 4–8×, below the next gridline, which the "
                                   "authors would have named")
CHEN_SYSTEM_BAND = Tolerance(0, "×", "the paper's own band (\"a factor of two to three\", §5.2), taken as printed")
CHEN_SPEED_PP = Tolerance(15, " pp", "another GPU, framework and kernels change what a recomputed forward costs; "
                          "15 points keep \"about a third\" apart from none and from double")

# --- Korthikanti et al. 2022 ----------------------------------------------------------------------------------

KORTHIKANTI_BYTES_REL = Tolerance(0.005, "", "Table 2: counted paper-faithful bytes within 0.5 % of the formula. "
                                  "Counting is exact, so any larger gap is a different tensor, not noise.")
KORTHIKANTI_FIGURE7_PP = Tolerance(0.5, " pp", "Figure 7's bars are ratios of the Table 2 bytes (percent of the "
                                   "TP baseline), held to the same 0.5 %.")
KORTHIKANTI_FIVE_X = Tolerance(0.5, "×", "the abstract's \"5×\" has one significant figure: the median reduction "
                               "(TP baseline over SP + selective) over the Table 3 models must round to 5 (4.5–5.5×); "
                               "the paper's own formulas give about 4.9–6.2× across them, so the claim is about the "
                               "typical model, not every one.")
KORTHIKANTI_FIGURE1_MODELS = Tolerance(0, " models", "Figure 1 is a yes/no per model: the same models fit and do not.")
KORTHIKANTI_FULL_FLOPS_PP = Tolerance(0.5, " pp", "the paper's 33 % is printed as an integer.")
KORTHIKANTI_QUOTED_FLOPS_PP = Tolerance(0.05, " pp", "the text prints 2.7 % and 1.6 % with one decimal.")
KORTHIKANTI_TIME_PP = Tolerance(3.0, " pp", "the paper disagrees with itself by about that much — Figure 8's 22B "
                                "full-recompute bar (141 %) against Table 4 (27.2 / 19.6 = 138.8 %) — plus about half "
                                "a point of rounding and of reading the bars.")
KORTHIKANTI_TIME_FLOOR_PP = Tolerance(1.0, " pp", "Table 4's precision: whole percents, times to 0.1 ms of 19.6")
KORTHIKANTI_TIME_REL = Tolerance(0.25, "", "a quarter of the paper's overhead, as the time model is held elsewhere; "
                                 "a fixed ±3 pp would pass 0 % against the paper's −3 %, a 100 % error")
KORTHIKANTI_WHOLE_PCT_PP = Tolerance(0.5, " pp", "printed as a whole percent: ±0.5 pp is its rounding")
KORTHIKANTI_SUM_TENTHS = Tolerance(0.1, "", "two addends printed to one decimal sum to within ±0.1 of the true sum")
KORTHIKANTI_UNDER_TWENTY = Tolerance(20, " %", "a bound, met by every Table 3 model; a miss within rounding is minor")
KORTHIKANTI_CUT_PP = Tolerance(3, " pp", "the cut of the recompute time (1 − SP + selective / full) is a ratio of "
                               "Figure 8's bars, read to about ±0.5 pp, whose 22B bar disagrees with Table 4 by about "
                               "2 pp: held to the time overheads' 3 pp, per model, against the cut the bars give (the "
                               "abstract's \"over 90 %\" is their typical value, not a bound every model meets)")
KORTHIKANTI_OUTSIDE_BOUND = Tolerance(0.01, " %", "§4.3 states a bound (\"less than 0.01 %\" for the 22B model): "
                                      "the share from its own terms must lie between 0 and it.")
KORTHIKANTI_PRINTED_UTIL_PP = Tolerance(0.2, " pp", "Table 5 prints MFU and HFU with one decimal and its times with "
                                        "two or three figures; t·p GPUs and the A100's 312 TFLOP/s peak assumed.")

# --- sweeps ---------------------------------------------------------------------------------------------------

SWEEPS_EXACT_REL = Tolerance(0.001, "", "saved-tensor hooks count every stored byte and FlopCounterMode every matmul "
                             "FLOP, exactly as the closed forms do: they agree to the byte and the FLOP, and 0.1 % "
                             "leaves room for rounding only (the smallest counted term, LayerNorm's statistics, is "
                             "more at the swept sizes)")
SWEEPS_OPTIMUM_K = Tolerance(1, " segment", "the measured peak adds the backward working set (tens of KiB that vary "
                             "with k) to the closed form's live peak, more than neighbouring k differ near the optimum")
SWEEPS_LINEAR_SLOPE = Tolerance(0.1, "", "memory c0 + yL without recompute: the fixed part c0 (head, loss, the "
                                "backward working set) bends a log–log slope over L = 2–64 below 1 by up to about "
                                "0.1; a √L or constant shape is 0.5 or more away")
SWEEPS_CROSSOVER_REL = Tolerance(0.01, "", "the measured parts follow Eq. 1's shape exactly (linear in s, ∝ 1/h), so "
                                 "interpolating between swept points is exact but for rounding")
SWEEPS_MODEL_PP = Tolerance(3.0, " pp", "the roofline's recompute overhead on this machine, held to paper Table 4's "
                            "tolerance: within it the model prices recomputation as well as the paper is printed")
TIME_MODEL_BAND = Tolerance(0.25, "", "a roofline has no launch gaps or cache effects, so it is judged by its shape, "
                            "not its last 10 %: the band around predicted = measured (the grey band of the "
                            "time-model figure)")

TIMING_BUSY = Tolerance(BUSY_CORES, " cores", "a timing is data only while other processes used at most a "
                        "quarter core beside it (remat.measure.provenance.BUSY_CORES: on the 2-core machine a quiet "
                        "second reads 0.00-0.04 cores, one busy loop beside it 1.0); more, and its medians time "
                        "the other jobs too")

# --- offload --------------------------------------------------------------------------------------------------

OFFLOAD_FIT = Tolerance(0.10, "×", "the break-even prices every copy with this fit: a copy time it gets within "
                                   "±10 % moves the bandwidth a break-even needs by at most 10 %, well inside the "
                                   "gaps (several ×) between break-even and link that decide offload vs recompute")
"""A copy fit t = t0 + bytes/BW predicts its group when predicted ÷ measured is within 1 ± value at every copy
of 1 MiB or more (smaller copies are t0 and noise)."""
OFFLOAD_MODEL = Tolerance(0.25, "×", "an overhead is the difference of two timed medians (each gated: IQR under "
                                     "half its median); within ±25 % the model ranks offload against "
                                     "recomputation as the measurement does wherever the two differ by more "
                                     "than 1.25 / 0.75 ≈ 1.7×")
"""The model's extra step time (offload copies, recomputation) predicts the measured one when measured ÷ model
is within 1 ± value at every measured size."""

# --- planner --------------------------------------------------------------------------------------------------

PLANNER_TABLE5_PP = Tolerance(3.0, " pp", "Table 5's throughput gain (full ÷ SP + selective − 1) is priced from the "
                              "layer times held to paper Table 4 and Figure 8 within 3 pp (the paper's own "
                              "disagreement between the two); Table 5's printed seconds (1.42 and 1.10 for 22B) move "
                              "it by up to about one point more.")
