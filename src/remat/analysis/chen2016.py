"""Chen et al. 2016 tables -> what the figures and the report show: log-log fits and summary tables (from the
loaded ``chen-*`` tables; nothing is measured here)."""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy import stats

from remat.report.phrases import capitalized, count, count_of


# --- fits shared by the figures, the report and the tests ------------------------------------------------------

def fit_loglog_exponent(x, y) -> float:
    """Slope of log y against log x by least squares (scipy.stats.linregress): y ∝ x^slope."""
    return float(stats.linregress(np.log(np.asarray(x, float)), np.log(np.asarray(y, float))).slope)


def fit_log2_growth(x, y) -> tuple[float, float]:
    """Least-squares y ≈ a + b·log2 x (scipy.stats.linregress). Returns (b, r²); b in y's units per doubling."""
    fit = stats.linregress(np.log2(np.asarray(x, float)), np.asarray(y, float))
    return float(fit.slope), float(fit.rvalue ** 2)


def depth_fits(frame: pd.DataFrame) -> pd.DataFrame:
    """Per schedule family of a ``chen-depth`` table: exponent (log–log slope of peak bytes vs L),
    bytes_per_doubling and r2_log2 (fit of peak bytes linear in log2 L), forwards_exponent."""
    rows = []
    for family, part in frame.groupby("family", sort=False):
        per_doubling, r2 = fit_log2_growth(part["layers"], part["peak_bytes"])
        rows.append({"family": family, "exponent": fit_loglog_exponent(part["layers"], part["peak_bytes"]),
                     "bytes_per_doubling": per_doubling, "r2_log2": r2,
                     "forwards_exponent": fit_loglog_exponent(part["layers"], part["forwards"])})
    return pd.DataFrame(rows)


def depth_fits_table(fits: pd.DataFrame) -> pd.DataFrame:
    """``depth_fits`` (a column ``family``, or indexed by it) for display, with readable headers: the log–log
    exponent of peak bytes against L, bytes per doubling of L and the r² of peak bytes linear in log₂ L, and
    the log–log exponent of layer forwards."""
    fits = fits.reset_index() if "family" not in fits.columns else fits
    return pd.DataFrame({
        "schedule": fits["family"].values,
        "peak bytes: log–log exponent": fits["exponent"].round(3).values,
        "peak bytes per doubling of L": fits["bytes_per_doubling"].round(1).values,
        "r² of peak ≈ a + b·log₂ L": fits["r2_log2"].round(4).values,
        "forwards: log–log exponent": fits["forwards_exponent"].round(3).values})


def sqrt_extra_text(frame: pd.DataFrame) -> str:
    """The √L schedule's recomputation on a ``chen-depth`` table, as the index scorecard states it: extra layer
    forwards at the deepest L as a share of a forward pass, and the largest share over the sweep — "490 extra
    layer forwards at L = 512, 0.96 of a forward pass, the most over the sweep (L = 2…512)" or "…, 0.90 of a
    forward pass; at most 0.97 over the sweep (L = 2…512, at L = 64)"."""
    sqrt = frame[frame["family"] == "sqrt"]
    share = sqrt["extra_forwards"] / sqrt["layers"]
    deepest = sqrt.loc[sqrt["layers"].idxmax()]
    at, worst = float(deepest["extra_forwards"] / deepest["layers"]), float(share.max())
    sweep = f"L = {int(sqrt['layers'].min())}…{int(sqrt['layers'].max())}"
    head = (f"{count(int(deepest['extra_forwards']), 'extra layer forward')} at L = {int(deepest['layers'])}, "
            f"{at:.2f} of a forward pass")
    if f"{worst:.2f}" == f"{at:.2f}":
        return f"{head}, the most over the sweep ({sweep})"
    worst_at = int(sqrt.loc[share.idxmax(), "layers"])
    return f"{head}; at most {worst:.2f} over the sweep ({sweep}, at L = {worst_at})"


# --- summaries the report prints (from the loaded tables; nothing is re-measured) ------------------------------

def check_summary(frame: pd.DataFrame) -> pd.DataFrame:
    """Per schedule family of a ``chen-check`` table: schedules run, how many are bitwise equal to the plain
    backward, the largest |difference| and finite-difference error, how many match their closed form, passed."""
    grouped = frame.groupby("family", sort=False)
    return pd.DataFrame({
        "schedules": grouped.size(),
        "bitwise equal": grouped["bitwise_equal"].sum().astype(int),
        "max abs diff vs plain": grouped["max_abs_diff_vs_naive"].max(),
        "max FD rel. error": grouped["fd_rel_error"].max().map(lambda v: f"{v:.1e}"),
        "closed form matches": grouped["formula_match"].apply(lambda s: int((s == True).sum())),  # noqa: E712
        "passed": grouped["passed"].sum().astype(int),
    }).reset_index()


def segments_summary(frame: pd.DataFrame) -> dict:
    """Key numbers of a ``chen-segments`` table: L, k at √L and at the integer optimum, their peak bytes and
    forwards, the plain backward's (k = 1) peak, and whether every counted value equals its closed form."""
    by_k = frame.set_index("k")
    k_sqrt, k_opt = int(frame["k_sqrt"].iloc[0]), int(frame["k_opt"].iloc[0])
    return {"layers": int(frame["layers"].iloc[0]), "points": len(frame), "k_sqrt": k_sqrt, "k_opt": k_opt,
            "k_star": float(frame["k_star"].iloc[0]),
            "peak_sqrt": int(by_k.loc[k_sqrt, "peak_bytes"]), "peak_opt": int(by_k.loc[k_opt, "peak_bytes"]),
            "peak_none": int(by_k.loc[1, "peak_bytes"]) if 1 in by_k.index else None,
            "forwards_sqrt": int(by_k.loc[k_sqrt, "forwards"]), "forwards_opt": int(by_k.loc[k_opt, "forwards"]),
            "all_exact": bool((frame["peak_bytes"] == frame["peak_bytes_formula"]).all()
                              and (frame["forwards"] == frame["forwards_formula"]).all())}


def depth_table(frame: pd.DataFrame, layers: int | None = None) -> pd.DataFrame:
    """The rows of a ``chen-depth`` table at depth ``layers`` (default: the deepest): schedule, parameter,
    peak bytes counted and closed form, forwards counted and closed form, extra forwards per layer."""
    layers = int(frame["layers"].max()) if layers is None else layers
    part = frame[frame["layers"] == layers]
    return pd.DataFrame({
        "schedule": part["family"], "k or slots": part["param"],
        "peak bytes": part["peak_bytes"], "peak (formula)": part["peak_bytes_formula"],
        "formula is": part["peak_formula"], "forwards": part["forwards"],
        "forwards (formula)": part["forwards_formula"],
        "extra forwards / L": (part["extra_forwards"] / layers).round(2),
    }).reset_index(drop=True)


def revolve_table(frame: pd.DataFrame) -> pd.DataFrame:
    """Counted extra forwards of a ``chen-revolve`` table, steps l (rows) × slots s (columns)."""
    table = frame.pivot(index="steps", columns="slots", values="extra_forwards")
    table.columns = [f"s = {s}" for s in table.columns]
    return table.reset_index().rename(columns={"steps": "l"})


# --- graphs: Figure 5's strategies, Algorithm 3 ------------------------------------------------------------------

def _r2(x, y) -> float:
    """r² of the least-squares line y ≈ a + b·x (scipy.stats.linregress)."""
    return float(stats.linregress(np.asarray(x, float), np.asarray(y, float)).rvalue ** 2)


def strategy_fits(frame: pd.DataFrame, size: str) -> pd.DataFrame:
    """Per strategy of a ``chen-resnet``/``chen-lstm`` table: the log–log exponent of planned bytes against
    ``size`` ("depth" or "length"), r² of planned bytes ≈ a + b·size (r2_linear) and ≈ a + b·√size
    (r2_sqrt) — an O(n) or O(√n) law with a constant term, which bends a log–log slope — planned and
    live-peak bytes at the largest size, and how many times less than no-opt and than sharing (Chen's
    "optimized memory plan") that is."""
    frame = frame[frame["strategy"] != "budget"]          # one row per (size, strategy)
    largest = frame[frame[size] == frame[size].max()].set_index("strategy")
    rows = []
    for strategy, part in frame.groupby("strategy", sort=False):
        at = largest.loc[strategy]
        rows.append({"strategy": strategy, "exponent": fit_loglog_exponent(part[size], part["planned_bytes"]),
                     "r2_linear": _r2(part[size], part["planned_bytes"]),
                     "r2_sqrt": _r2(np.sqrt(part[size].astype(float)), part["planned_bytes"]),
                     "planned_bytes": int(at["planned_bytes"]), "live_peak_bytes": int(at["live_peak_bytes"]),
                     "vs_no_opt": largest.loc["no-opt", "planned_bytes"] / at["planned_bytes"],
                     "vs_sharing": largest.loc["sharing", "planned_bytes"] / at["planned_bytes"],
                     "recompute_ratio": float(at["recompute_ratio"])})
    return pd.DataFrame(rows)


# --- the paper's own numbers, each with where it is printed --------------------------------------------------

PAPER = {
    "resnet_depth": 1000,          # abstract, §5.2: the 1,000-layer ResNet
    "resnet_before_gb": 48,        # abstract: "from 48G to 7G" (GB read as 10⁹ bytes)
    "resnet_after_gb": 7,
    "gpu_memory_gb": 12,           # §5: a Titan X (12 GB)
    "deepest_without": 200,        # §5.2: "only possible to train a 200 layer ResNet" without the plan
    "lstm_steps": 64,              # §5.3: 64 steps, batch 64, 4 x 1024
    "lstm_reduction": 4,           # §5.3: "more than 4x reduction over the optimized memory plan"
    "speed_overhead": 0.30,        # §5.4: about 30% extra runtime (Titan X, 20 batches)
    "system_reduction": (2, 3),    # §5.2: in-place and sharing cut memory 2-3x, still linear in depth
}
"""Chen et al. 2016's printed claims the report compares with (one copy; figures and report import it)."""


DECIMAL_UNITS = (("GB", 1e9), ("MB", 1e6), ("kB", 1e3))
"""The decimal units the report gives memory in — GB = 10⁹ bytes, as the paper prints it — largest first."""


def decimal_unit(values) -> tuple[str, float]:
    """The decimal unit ("GB", "MB", "kB" or "B") and its size that shows the smallest nonzero of ``values``
    as ≥ 1 — one unit for a whole net's memory (its tables and the text about it)."""
    positive = [float(v) for v in values if v == v and float(v) > 0]
    smallest = min(positive, default=0.0)
    return next(((name, size) for name, size in DECIMAL_UNITS if smallest >= size), ("B", 1.0))


def size_text(n_bytes: float, unit: tuple[str, float], digits: int = 2) -> str:
    """Bytes in ``unit`` (from ``decimal_unit``) as the report's tables show them: "37.16 GB"."""
    name, scale = unit
    return f"{float(n_bytes) / scale:.{digits}f} {name}"


def budget_table(frame: pd.DataFrame, size: str, unit: tuple[str, float] | None = None) -> pd.DataFrame:
    """Algorithm 3 at the largest ``size`` of a ``chen-resnet``/``chen-lstm`` table: every budget B (B = 0,
    B₀ = √(x·y), the grid), the chosen sublinear plan, √n and the optimum of x + y — splits, x, y, planned and
    live-peak bytes (in ``unit``, default ``decimal_unit`` of the planned bytes; two decimals), recomputed
    FLOPs per forward FLOP."""
    part = frame[(frame[size] == frame[size].max())
                 & frame["strategy"].isin(["budget", "sublinear", "sqrt", "optimal"])]
    order = {"budget": 0, "sublinear": 1, "sqrt": 2, "optimal": 3}
    part = part.assign(_o=part["strategy"].map(order)).sort_values(["_o", "budget_bytes"])
    unit, scale = unit or decimal_unit(part["planned_bytes"])
    shown = lambda column: (part[column] / scale).round(2)
    return pd.DataFrame({"plan": part["strategy"],
                         f"B ({unit})": shown("budget_bytes").map(lambda v: "–" if v != v else v),
                         "splits": part["splits"], f"x ({unit})": shown("x_bytes"), f"y ({unit})": shown("y_bytes"),
                         f"planned ({unit})": shown("planned_bytes"), f"live peak ({unit})": shown("live_peak_bytes"),
                         "recomputed / forward FLOPs": part["recompute_ratio"].round(3)}).reset_index(drop=True)


def depth_at(frame: pd.DataFrame, size: str, strategy: str, limit_bytes: float) -> float | None:
    """The ``size`` at which ``strategy``'s planned bytes reach ``limit_bytes``, interpolated log–log between
    the two measured sizes around it; None when the limit is outside the measured range."""
    part = frame[frame["strategy"] == strategy].sort_values(size)
    xs, ys = np.log(part[size].to_numpy(float)), np.log(part["planned_bytes"].to_numpy(float))
    if not ys[0] <= np.log(limit_bytes) <= ys[-1]:
        return None
    return float(np.exp(np.interp(np.log(limit_bytes), ys, xs)))


def is_linear(fit) -> bool:
    """O(n): a + b·n fits (r² ≥ LAW_R2_MIN) better than a + b·√n."""
    return fit["r2_linear"] >= LAW_R2_MIN and fit["r2_linear"] > fit["r2_sqrt"]


def is_sqrt_law(fit) -> bool:
    """O(√n): a + b·√n fits (r² ≥ LAW_R2_MIN) better than a + b·n."""
    return fit["r2_sqrt"] >= LAW_R2_MIN and fit["r2_sqrt"] > fit["r2_linear"]


SQRT_EXPONENT_TOL = 0.1
"""A chain's √L schedule reproduces Chen's O(√n) when its log–log exponent is within this of 0.5. ⌈√L⌉
rounding and the live segment bend the slope by a few hundredths over L = 2…512; the alternatives it must be
told from — logarithmic memory (exponent ≈ 0.2 over that range) and linear (1) — are at least 0.3 away."""
LOG_R2_MIN = 0.95
"""The recursion's memory is logarithmic when a fit linear in log₂ L has more than this r². A √L schedule fits
that line with r² ≈ 0.87 over the same depths, so 0.95 tells them apart."""
LAW_R2_MIN = 0.99
"""A law (a + b·n, a + b·√n) fits a memory sweep when its r² is at least this (``is_linear``, ``is_sqrt_law``)."""
BEFORE_FACTOR = 1.5
"""The 1,000-layer ResNet's memory before the plan matches the paper's within this factor either way (and
after it must be below the paper's 7 GB). The paper prints neither its exact layer layout nor what MXNet's
baseline shares; a factor of 1.5 allows those while excluding another scale."""
DEPTH_TOL = 0.25
"""The depth a 12 GB GPU holds without the plan matches the paper's within this fraction either way: the
paper's limit is what trained on the card, ours counts feature maps only."""
SPEED_TOL = 0.15
"""The sublinear plan's measured overhead matches the paper's "about 30 %" within this many (fraction) points,
on a GPU: another GPU, framework and kernels change the cost of a recomputed forward; 15 points keep "about a
third" apart from "none" and from "double"."""


def _status(ok: bool, why: str = "") -> str:
    return "reproduced" if ok else f"differs: {why}" if why else "differs"


def speed_claim(speed: pd.DataFrame) -> tuple:
    """The §5.4 row of ``claims``: the sublinear plan's measured overhead per net on the GPU if a cuda table
    is there, else on the CPU (a stand-in, not comparable: status says so)."""
    dev = "cuda" if (speed["device"] == "cuda").any() else str(speed["device"].iloc[0])
    part = speed[(speed["device"] == dev) & (speed["strategy"] == "sublinear")].set_index("net")["overhead"]
    ours = ", ".join(f"{net} {value * 100:.0f} %" for net, value in part.items()) or "no sublinear rows"
    paper = PAPER["speed_overhead"]
    rule = f"within {SPEED_TOL * 100:.0f} points of the paper, on a GPU"
    row = ("speed", "Sublinear plan: extra runtime", f"about {paper * 100:.0f} % (Titan X)", f"{ours} ({dev})",
           "step time, interleaved rounds, median", rule)
    if part.empty:
        return (*row, NOT_MEASURED)
    if dev != "cuda":
        return (*row, "not reproducible here: needs a GPU (the paper timed a Titan X; this is a CPU stand-in at "
                      "small sizes, whose op costs differ); config/gpu.yaml has the paper's sizes")
    worst = (part - paper).abs().idxmax()
    return (*row, _status(bool((abs(part - paper) <= SPEED_TOL).all()),
                          f"{worst} {100 * part[worst]:.0f} %, more than {100 * SPEED_TOL:.0f} points from the "
                          "paper's"))


NOT_MEASURED = "not measured: not in the sweep"


def _claim(key, claim, paper, ours, how, rule, ok, why=""):
    """One claims row (``key`` names it for the index scorecard); ``ok`` None: not measured."""
    return (key, claim, paper, ours, how, rule, NOT_MEASURED if ok is None else _status(bool(ok), why))


def _resnet_claims(r: pd.DataFrame, resnet: pd.DataFrame) -> list[tuple]:
    deep = int(resnet["depth"].max())
    sizes = f"ResNet at batch {int(resnet['batch'].iloc[0])}, {int(resnet['image'].iloc[0])}², §3 plan"
    lo, hi = PAPER["system_reduction"]
    ratio, linear = r.loc["sharing", "vs_no_opt"], is_linear(r.loc["sharing"])
    at = resnet[resnet["depth"] == PAPER["resnet_depth"]].set_index("strategy")
    before = at.loc["sharing", "planned_bytes"] / 1e9 if len(at) else None
    after = at.loc["sublinear", "planned_bytes"] / 1e9 if len(at) else None
    at_limit = depth_at(resnet, "depth", "sharing", PAPER["gpu_memory_gb"] * 1e9)
    paper_before, paper_after = PAPER["resnet_before_gb"], PAPER["resnet_after_gb"]
    return [
        _claim("resnet-sharing", "In-place + sharing cut memory, still linear in depth", f"{lo}–{hi}× less, linear",
               f"{ratio:.1f}× less at depth {deep}; a + b·depth: r² = {r.loc['sharing', 'r2_linear']:.4f}", sizes,
               f"{lo}–{hi}× and a line fits (r² ≥ {LAW_R2_MIN}, above a + b·√depth)",
               lo <= ratio <= hi and linear,
               "more than 2–3× (see the text)" if linear else "not linear"),
        _claim("resnet", f"{PAPER['resnet_depth']}-layer ResNet: memory before → with the sublinear plan",
               f"{paper_before} GB → {paper_after} GB",
               f"{before:.2f} GB → {after:.2f} GB" if before else f"deepest swept: {deep}",
               "sharing → sublinear, planned bytes (GB = 10⁹ B)",
               f"after < {paper_after} GB, before within {BEFORE_FACTOR}× of {paper_before} GB",
               None if before is None else after < paper_after
               and 1 / BEFORE_FACTOR <= before / paper_before <= BEFORE_FACTOR),
        _claim("resnet-limit", f"Without the plan, a {PAPER['gpu_memory_gb']} GB GPU holds a ResNet of about",
               f"{PAPER['deepest_without']} layers", f"{at_limit:.0f} layers" if at_limit else "outside the sweep",
               "sharing, log–log interpolation between swept depths", f"within ±{DEPTH_TOL:.0%}",
               None if at_limit is None else 1 - DEPTH_TOL <= at_limit / PAPER["deepest_without"] <= 1 + DEPTH_TOL,
               "we count feature maps only; the card also held parameters, gradients, optimizer state and "
               "workspace, which the paper does not print"),
        _claim("resnet-sqrt", "Sublinear plan: memory O(√depth)", "O(√n)",
               f"a + b·√depth: r² = {r.loc['sublinear', 'r2_sqrt']:.4f} (line: {r.loc['sublinear', 'r2_linear']:.4f})",
               "ResNet, fits over the depth sweep", f"a + b·√n fits (r² ≥ {LAW_R2_MIN}), above a line",
               is_sqrt_law(r.loc["sublinear"]), "not a √ law over this sweep"),
        _claim("drop-cheap", "Dropping cheap ops (BN, ReLU) saves memory", "below sharing in paper Figure 5",
               f"{r.loc['drop-cheap', 'vs_sharing']:.2f}× less than sharing", "ResNet, same plan",
               "below sharing", r.loc["drop-cheap", "vs_sharing"] > 1),
    ]


def _lstm_claims(l: pd.DataFrame, lstm: pd.DataFrame) -> list[tuple]:
    at = lstm[lstm["length"] == PAPER["lstm_steps"]].set_index("strategy")
    ratio = at.loc["sharing", "planned_bytes"] / at.loc["sublinear", "planned_bytes"] if len(at) else None
    return [
        _claim("lstm", f"LSTM, {PAPER['lstm_steps']} steps: reduction over the optimised plan",
               f"> {PAPER['lstm_reduction']}×", f"{ratio:.1f}×" if ratio else f"longest swept: {lstm['length'].max()}",
               "sharing / sublinear, planned bytes", f"> {PAPER['lstm_reduction']}×",
               None if ratio is None else ratio > PAPER["lstm_reduction"]),
        _claim("lstm-sqrt", "Sublinear plan: memory O(√length) (LSTM)", "O(√n)",
               f"a + b·√length: r² = {l.loc['sublinear', 'r2_sqrt']:.4f} (line: {l.loc['sublinear', 'r2_linear']:.4f})",
               "LSTM, fits over the length sweep", f"a + b·√n fits (r² ≥ {LAW_R2_MIN}), above a line",
               is_sqrt_law(l.loc["sublinear"]), "not a √ law over this sweep"),
    ]


def claims(depth: pd.DataFrame, resnet: pd.DataFrame | None, lstm: pd.DataFrame | None,
           speed: pd.DataFrame | None = None) -> pd.DataFrame:
    """Chen et al. 2016's claims beside ours, computed from the tables, indexed by a key (the index scorecard
    reads its rows by it): claim, paper, ours, how measured, "reproduced when" (the rule), status
    ("reproduced", "differs: why", "not measured: ..." or "not reproducible here: why"). ``depth`` is the
    chain's ``chen-depth`` table; ``resnet``, ``lstm`` the ``chen-resnet`` / ``chen-lstm`` tables and
    ``speed`` a ``chen-speed`` table (all devices): each optional, its rows left out when None."""
    chain = depth_fits(depth).set_index("family")
    sqrt = depth[depth["family"] == "sqrt"]
    most = float((sqrt["extra_forwards"] / sqrt["layers"]).max())
    rows = [
        _claim("sqrt", "Algorithm 1, k = √n: memory O(√n)", "exponent 0.5",
               f"exponent {chain.loc['sqrt', 'exponent']:.2f}", "numpy chain, counted store peak vs L",
               f"exponent within {SQRT_EXPONENT_TOL} of 0.5",
               abs(chain.loc["sqrt", "exponent"] - 0.5) < SQRT_EXPONENT_TOL),
        _claim("sqrt-forwards", "… for one extra forward pass", "1 forward pass", sqrt_extra_text(depth),
               "numpy chain, layer forwards counted by the executor", "at most one forward pass at every L",
               most <= 1.0, f"up to {most:.2f} forward passes recomputed"),
        _claim("recursion", "§4.4 recursion: O(log n) memory", "log₂ n checkpoints",
               f"{chain.loc['recursive', 'bytes_per_doubling']:.0f} B per doubling, "
               f"r² = {chain.loc['recursive', 'r2_log2']:.3f}", "numpy chain, peak linear in log₂ L",
               f"r² > {LOG_R2_MIN}", chain.loc["recursive", "r2_log2"] > LOG_R2_MIN),
    ]
    if resnet is not None:
        rows += _resnet_claims(strategy_fits(resnet, "depth").set_index("strategy"), resnet)
    if lstm is not None:
        rows += _lstm_claims(strategy_fits(lstm, "length").set_index("strategy"), lstm)
    if speed is not None and len(speed):
        rows.append(speed_claim(speed))
    columns = ["key", "claim", "paper", "ours", "how measured", "reproduced when", "status"]
    return pd.DataFrame(rows, columns=columns).set_index("key")


def graph_check_table(frame: pd.DataFrame) -> pd.DataFrame:
    """A ``chen-graph-check`` table per net: planned bytes of each Figure 5 strategy, and bitwise-equal plans
    out of all plans run (strategies, comparisons, every Algorithm 3 budget)."""
    single = frame[frame["strategy"] != "budget"]
    table = single.pivot(index="net", columns="strategy", values="planned_bytes")
    table = table[[s for s in ("no-opt", "inplace", "sharing", "drop-cheap", "sublinear", "sqrt", "optimal")
                   if s in table.columns]]
    grouped = frame.groupby("net")
    table["bitwise equal plans"] = grouped["bitwise_equal"].sum().astype(int).astype(str) + " / " + \
        grouped.size().astype(str)
    return table.reset_index()


def fits_table(fits: pd.DataFrame, unit: tuple[str, float] | None = None) -> pd.DataFrame:
    """``strategy_fits`` (indexed by strategy) for display: bytes in ``unit`` (default ``decimal_unit`` of the
    planned bytes; two decimals, as ``size_text``), reductions, recomputed share, the log–log exponent and the
    r² of a line and of a + b·√n."""
    unit, scale = unit or decimal_unit(fits["planned_bytes"])
    return pd.DataFrame({"strategy": fits.index,
                         f"planned ({unit})": (fits["planned_bytes"] / scale).round(2).values,
                         f"live peak ({unit})": (fits["live_peak_bytes"] / scale).round(2).values,
                         "× less than no-opt": fits["vs_no_opt"].round(1).values,
                         "× less than sharing": fits["vs_sharing"].round(2).values,
                         "recomputed / forward FLOPs": fits["recompute_ratio"].round(2).values,
                         "log–log exponent": fits["exponent"].round(2).values,
                         "r² a + b·n": fits["r2_linear"].round(4).values,
                         "r² a + b·√n": fits["r2_sqrt"].round(4).values})


def speed_table(frame: pd.DataFrame) -> pd.DataFrame:
    """A ``chen-speed`` table (one or more devices) for display: per device, net and strategy the median step
    and IQR (ms), the measured overhead over none, the overhead the FLOPs predict (recomputed / forward +
    backward FLOPs; elementwise ops count none), and the saved activations (MB = 10⁶ bytes, SAC cache
    included)."""
    percent = lambda column: (frame[column] * 100).round(0).astype(int).astype(str) + " %"
    return pd.DataFrame({
        "device": frame["device"], "net": frame["net"], "strategy": frame["strategy"], "plan": frame["plan"],
        "step (ms)": (frame["step_time_s"] * 1e3).round(1), "IQR (ms)": (frame["step_time_iqr_s"] * 1e3).round(1),
        "overhead": percent("overhead"), "FLOP-predicted": percent("overhead_flops"),
        "saved (MB)": (frame["saved_bytes"] / 1e6).round(1)}).reset_index(drop=True)


# --- wording: sentences that read right for every outcome (all, none, some) ------------------------------------

def check_text(check: pd.DataFrame) -> str:
    """The chain's correctness in one sentence from a ``chen-check`` table: how many schedules passed, and
    whether every gradient equals the plain backward's bit for bit (then why) or the largest difference."""
    n, passed = len(check), int(check["passed"].astype(bool).sum())
    bitwise = int(check["bitwise_equal"].astype(bool).sum())
    diff = float(check["max_abs_diff_vs_naive"].max())
    head = f"{capitalized(count_of(passed, n, 'schedule'))} passed"
    if bitwise == n and diff == 0:
        return (f"{head}, and every gradient equals the plain backward's bit for bit: recomputation in numpy "
                "repeats the same operations on the same inputs, so the gradients are the same, not merely close")
    return (f"{head}; {count_of(bitwise, n, 'schedule', verb=('gives', 'give'))} gradients bitwise equal to the "
            f"plain backward's, and the largest difference from it is {diff:.1e}")


def segments_exact(frame: pd.DataFrame) -> int:
    """Rows of a ``chen-segments`` table whose counted peak bytes and forwards both equal the closed forms."""
    return int(((frame["peak_bytes"] == frame["peak_bytes_formula"])
                & (frame["forwards"] == frame["forwards_formula"])).sum())


def agree_text(k: int, n: int, noun: str, plural: str | None = None) -> str:
    """Where counts agree with a closed form: "at all 30 values", "only at 28 of the 30 values", "at none of
    the 30 values" (``count_of`` wording; "only" when some but not all)."""
    return ("only " if 0 < k < n else "") + f"at {count_of(k, n, noun, plural)}"


def graph_check_text(frame: pd.DataFrame) -> str:
    """The executed memory plans of a ``chen-graph-check`` table: "all 45 plans give" / "40 of the 45 plans
    give" (the loss and every gradient bitwise equal to the naive backward): the subject and its verb."""
    n, ok = len(frame), int(frame["bitwise_equal"].astype(bool).sum())
    return count_of(ok, n, "plan", verb=("gives", "give"))


def unknown_ops_text(ops: int) -> str:
    """Ops of both traced nets outside the known kinds: "no op of either net fell" / "3 ops of the two nets
    fell" outside the known kinds (subject and verb)."""
    ops = int(ops)
    return "no op of either net fell" if ops == 0 else f"{count(ops, 'op')} of the two nets fell"


def above_text(n_above: int, n: int) -> str:
    """The sublinear plan's measured overhead against the FLOP prediction over ``n`` nets."""
    if n_above == 0:
        return ("the measured overhead stays at or below it" if n else "no net was measured with the sublinear plan")
    return (f"the measured overhead is above it for {count_of(n_above, n, 'net')} — per-op Python, checkpoint "
            "bookkeeping and memory traffic weigh on small ops")


def xy_text(worse: list[str]) -> str:
    """Algorithm 3's objective x + y against the grid's best plan: on which nets its optimum plans more bytes."""
    if not worse:
        return "Here the optimum of x + y plans no more bytes than the grid's best."
    return (f"On the {' and the '.join(worse)} the optimum of x + y plans more bytes than the grid's best: x + y "
            "counts every kept value through the whole backward, while the allocator frees them segment by "
            "segment and pays for fragmentation — which is why the paper searches a grid with the real planner "
            "rather than trusting the model.")
