"""Chen et al. 2016 tables -> what the figures and the report show: log-log fits and summary tables (from the
loaded ``chen-*`` tables; nothing is measured here)."""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy import stats


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
