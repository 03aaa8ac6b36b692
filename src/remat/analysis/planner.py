"""The numbers the planner report shows, computed from the planner tables (nothing is re-planned or re-measured):
the paper table, policy use, how often a baseline beats the plan, the validation's errors, and the settings
each table was made with (read from its own columns, never from the code's current defaults).

    paper = pd.read_csv("results/planner/paper.csv")
    paper_table(paper)          # per (model, gpu, sp): the plan's policy counts, peak, step, best baseline
    assumptions(paper)          # per GPU: the assumed FLOP rate, link, model-state bytes, reserve, host memory

Bytes are shown in GiB (2^30) or MiB (2^20) as the column names say; times in seconds.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from remat.policies import POLICIES
from remat.report.phrases import capitalized, count, count_of, join_words
from remat.units import MINUS, percent, signed_percent, span_text
from remat.units import GiB, MiB, format_bytes

TIE = 1e-12
"""Relative margin below which a baseline's time counts as equal to the plan's (float round-off)."""


def validate_path(results: str | Path = "results") -> Path:
    """The planner-validate table the report shows: the GPU's (``cuda.csv``) when one was measured — by this
    run, else by the committed reference GPU run (remat.report.reference.device_tables) —, else this
    machine's (``cpu.csv``), else the first device's. One table per device (the pipeline's rule and
    ``make gpu`` write <device>.csv; none overwrites another). Raises FileNotFoundError when there is none."""
    from remat.report.reference import device_tables
    tables = device_tables("planner/validate", results)
    if not tables:
        raise FileNotFoundError(f"no planner-validate table in {Path(results, 'planner', 'validate')}")
    return min(tables, key=lambda p: (p.stem != "cuda", p.stem != "cpu", p.name))


def _feasible(frame: pd.DataFrame) -> pd.Series:
    return frame["feasible"].astype(bool)


def beaten(table: pd.DataFrame, time: str = "step_time_s") -> tuple[int, int]:
    """(budgets where the plan fits, those where a feasible baseline is faster than the plan by more than TIE).
    A budget is one group of (model, layers, gpu, sp, budget_bytes), whichever of these columns exist."""
    keys = [c for c in ("model", "layers", "gpu", "sp", "budget_bytes") if c in table]
    total = worse = 0
    for _, group in table.groupby(keys):
        plan = group[group["method"] == "plan"]
        if plan.empty or not bool(plan["feasible"].iloc[0]):
            continue
        total += 1
        others = group[(group["method"] != "plan") & _feasible(group)]
        worse += bool((others[time] < plan[time].iloc[0] * (1 - TIE)).any())
    return total, worse


def policy_counts(counts: dict[str, int]) -> str:
    """"24 selective, 8 full" from policy -> layers (zero counts left out, POLICIES order)."""
    return ", ".join(f"{int(counts[p])} {p}" for p in POLICIES if counts.get(p, 0) > 0)


def spec_counts(spec: str) -> str:
    """A runtime plan spec as counts: "none,full,full" -> "1 none, 2 full"; a single name -> "all <name>"."""
    if "," not in spec:
        return f"all {spec}"
    names = spec.split(",")
    return policy_counts({p: names.count(p) for p in POLICIES})


def paper_table(paper: pd.DataFrame) -> pd.DataFrame:
    """Per (model, gpu, sp) of a planner-paper table: the layout (t, p, m, b), the plan's policy counts, its
    peak (GiB) and step time (s); the fastest uniform policy that fits (``remat.planner.baselines.UNIFORM``:
    none, full or selective on every layer), its step time and the plan's gain over it ("uniform gain");
    the fastest feasible baseline of all (uniform policies, √L segments, Megatron uniform and block, torch's
    sac_milp), its step time and the plan's gain over it ("plan gain"). Gains are baseline / plan − 1, a
    fraction. A plan that does not fit reads "does not fit", the rest empty."""
    from remat.planner.baselines import UNIFORM
    rows = []
    for (model, gpu, sp), g in paper.groupby(["model", "gpu", "sp"], sort=False):
        plan = g[g["method"] == "plan"].iloc[0]
        row = {"model": model, "GPU": gpu, "SP": bool(sp),
               **{k: int(plan[c]) for k, c in (("t", "tp"), ("p", "pp"), ("m", "interleave"), ("b", "micro_batch"))}}
        if not bool(plan["feasible"]):
            rows.append({**row, "plan": "does not fit"})
            continue
        base = g[(g["method"] != "plan") & _feasible(g)].sort_values("step_time_s", kind="stable")
        uni = base[base["method"].isin(UNIFORM)]
        row.update({"plan": policy_counts({p: plan[f"n_{p}"] for p in POLICIES}),
                    "peak (GiB)": plan["peak_bytes"] / GiB, "step (s)": plan["step_time_s"]})
        for (name, step, gain), fits in ((("fastest uniform", "uniform step (s)", "uniform gain"), uni),
                                         (("best baseline", "baseline step (s)", "plan gain"), base)):
            best = fits.iloc[0] if len(fits) else None
            row.update({name: None if best is None else best["method"],
                        step: None if best is None else best["step_time_s"],
                        gain: None if best is None else best["step_time_s"] / plan["step_time_s"] - 1})
        rows.append(row)
    columns = ["model", "GPU", "SP", "t", "p", "m", "b", "plan", "peak (GiB)", "step (s)", "fastest uniform",
               "uniform step (s)", "uniform gain", "best baseline", "baseline step (s)", "plan gain"]
    return pd.DataFrame(rows).reindex(columns=columns)


def yes_no(flags) -> pd.Series:
    """Booleans as the words a table shows: True -> "yes", False -> "no"."""
    return pd.Series(flags).map(lambda f: "yes" if bool(f) else "no")


def _error_percent(x: float) -> str:
    """A relative error (fraction) as a "(%)" column shows it: signed, two decimals, no unit
    (remat.units.signed_percent): 0.0123 -> "+1.23", -0.05 -> "−5.00", "0.00" for what rounds to zero."""
    return signed_percent(x, 2, "")


def signed_bytes(n: int) -> str:
    """A byte difference with its sign and thousands separators: 399872 -> "+399,872", -4096 -> "−4,096" (the
    true minus sign of the percent column beside it, remat.units.MINUS), 0 -> "0"."""
    return f"{int(n):+,}".replace("-", MINUS) if int(n) else "0"


def gain_percent(x: float, digits: int = 2) -> str:
    """A plan gain (fraction) as the number a "(%)" column shows: 0.0675 -> "6.75"; "—" when there is none."""
    return "—" if x is None or x != x else f"{100 * x:.{digits}f}"


def paper_display(rows: pd.DataFrame) -> pd.DataFrame:
    """``paper_table`` as the report shows it: SP as yes/no, the plan's policy counts, gains in percent under
    headers with units, and the two baseline step times left out (the gain carries them); "—" where no plan
    or no baseline fits."""
    fits = rows["plan"] != "does not fit"
    dash = lambda v: "—" if v is None or (isinstance(v, float) and v != v) else v
    return pd.DataFrame({
        "model": rows["model"], "GPU": rows["GPU"], "SP": yes_no(rows["SP"]).values,
        "t": rows["t"], "p": rows["p"], "m": rows["m"], "b": rows["b"],
        "plan (layers per policy)": rows["plan"],
        "peak (GiB)": [f"{v:.1f}" if f else "—" for v, f in zip(rows["peak (GiB)"], fits)],
        "step (s)": [f"{v:.3f}" if f else "—" for v, f in zip(rows["step (s)"], fits)],
        "fastest uniform policy": rows["fastest uniform"].map(dash),
        "gain over uniform (%)": rows["uniform gain"].map(gain_percent),
        "fastest baseline": rows["best baseline"].map(dash),
        "gain over fastest baseline (%)": rows["plan gain"].map(gain_percent),
    }).reset_index(drop=True)


def policy_use(paper: pd.DataFrame) -> dict[str, int]:
    """policy -> settings (rows of a planner-paper table where the plan fits) whose plan uses it at least once,
    for every policy but none."""
    fits = paper[(paper["method"] == "plan") & _feasible(paper)]
    return {p: int((fits[f"n_{p}"] > 0).sum()) for p in POLICIES if p != "none"}


def assumptions(table: pd.DataFrame) -> pd.DataFrame:
    """The assumed settings a planner-paper or planner-frontier table was made with, one row per distinct
    combination (per GPU as a rule): peak FLOP/s and the achievable fraction of GEMMs, the achieved memory
    and NVLink bandwidths of the roofline time model (GB/s = 10^9 bytes/s), the host link (GB/s per direction,
    before sharing), the GPUs sharing it and its per-copy latency (µs), model-state bytes per parameter (weights, gradients, optimizer, and
    their sum), workspace reserve and host memory per GPU (remat.units.format_bytes: GiB = 2^30 bytes)."""
    out = pd.DataFrame({
        "gpu": table["gpu"],
        "peak TFLOP/s": table["peak_flops"] / 1e12,
        "achievable": table["achievable"],
        "HBM GB/s achieved": table["memory_bytes_per_s"] / 1e9,
        "NVLink GB/s achieved": table["nvlink_bytes_per_s"] / 1e9,
        "link GB/s": table["link_bytes_per_s"] / 1e9,
        "GPUs per link": table["gpus_per_host_link"].astype(int),
        "t0 (µs)": table["link_t0_s"] * 1e6,
        "weight bytes": table["weight_bytes"].astype(int),
        "gradient bytes": table["grad_bytes"].astype(int),
        "optimizer bytes": table["optimizer_bytes"].astype(int),
        "bytes per parameter": (table["weight_bytes"] + table["grad_bytes"] + table["optimizer_bytes"]).astype(int),
        "reserve": table["reserve_bytes"].map(lambda n: format_bytes(int(n))),
        "host memory": table["host_limit_bytes"].map(lambda n: format_bytes(int(n))),
    })
    return out.drop_duplicates().reset_index(drop=True)


# --- validation (planner-validate) -------------------------------------------------------------------------------

def validate_settings(validate: pd.DataFrame) -> dict:
    """What a planner-validate table was made with: device, timing protocol (threads, rounds, repeats), budgets
    per model (points) and the models (one dict per distinct model: layers, seq, micro_batch, hidden, heads)."""
    first = validate.iloc[0]
    models = validate.drop_duplicates(["model", "layers", "seq", "micro_batch", "hidden", "heads"])
    return {"device": str(first["device"]), "threads": int(first["threads"]), "rounds": int(first["rounds"]),
            "repeats": int(first["repeats"]), "points": int(first["points"]),
            "models": [{k: int(r[k]) for k in ("layers", "seq", "micro_batch", "hidden", "heads")}
                       for _, r in models.iterrows()]}


def calibration(validate: pd.DataFrame) -> pd.Series:
    """Per row of a planner-validate table: whether its plan is a calibration point — the none or the full
    step whose measured peak the calibration fits (the ``reference`` column; a plan that means the same as
    either, "full,full,full" say, carries its spec and is marked too)."""
    return validate["reference"].astype(bool)


def _predictions(validate: pd.DataFrame) -> pd.DataFrame:
    """The applied (measured) rows that are predictions: not a calibration point (``calibration``: the none
    and full steps whose measured peaks the calibration fits)."""
    applied = validate[validate["measured_peak_bytes"].notna()]
    return applied[~calibration(applied)]


def validation_numbers(validate: pd.DataFrame) -> dict:
    """The validation's headline numbers from a planner-validate table, over predictions only (applied rows
    that are not calibration points, ``_predictions``); errors are predicted − measured peak bytes:
    plans / plans_in_budget / plans_exact (error 0 bytes) / plan_peak_error (largest |predicted/measured − 1|);
    baselines / baselines_in_budget / baselines_exact / baseline_peak_error / worst_baseline over the feasible
    baselines; over: (rows predicted above the measured peak, the largest such relative error, its spec);
    under: rows predicted below it; references: applied calibration rows; base_error_bytes: largest
    |predicted − measured| bytes alive before the step over the models; slowdown_error and time_error:
    median and max of |predicted/measured − 1| over the plans."""
    rows = _predictions(validate)
    plans = rows[rows["method"] == "plan"]
    others = rows[_feasible(rows) & (rows["method"] != "plan")]
    slow, abs_ = plans["slowdown_rel_error"].abs(), plans["time_rel_error"].abs()
    worst = others.loc[others["peak_rel_error"].abs().idxmax(), "method"] if len(others) else None
    both = pd.concat([plans, others])
    over = both[both["peak_error_bytes"] > 0]
    top = over.loc[over["peak_rel_error"].idxmax()] if len(over) else None
    applied = validate[validate["measured_peak_bytes"].notna()]
    return {
        "plans": len(plans), "plans_in_budget": int((plans["measured_peak_bytes"] <= plans["budget_bytes"]).sum()),
        "plans_exact": int((plans["peak_error_bytes"] == 0).sum()),
        "plan_peak_error": float(plans["peak_rel_error"].abs().max()) if len(plans) else np.nan,
        "baselines": len(others),
        "baselines_in_budget": int((others["measured_peak_bytes"] <= others["budget_bytes"]).sum()),
        "baselines_exact": int((others["peak_error_bytes"] == 0).sum()),
        "baseline_peak_error": float(others["peak_rel_error"].abs().max()) if len(others) else np.nan,
        "worst_baseline": worst,
        "over": (len(over), np.nan if top is None else float(top["peak_rel_error"]),
                 None if top is None else str(top["spec"])),
        "under": int((both["peak_error_bytes"] < 0).sum()),
        "references": int(calibration(applied).sum()),
        "base_error_bytes": int((validate["predicted_base_bytes"] - validate["measured_base_bytes"]).abs().max()),
        "slowdown_error": (float(slow.median()), float(slow.max())),
        "time_error": (float(abs_.median()), float(abs_.max())),
    }


def peak_errors(validate: pd.DataFrame) -> pd.DataFrame:
    """Every distinct plan applied in a planner-validate table, once per model: layers, the runtime spec, the
    methods that chose it, predicted and measured peak (bytes), the error (predicted − measured, bytes, and
    relative) and whether it is a calibration point (fitted, not predicted). Sorted by layers, then error."""
    applied = validate[validate["measured_peak_bytes"].notna()]
    rows = []
    for (layers, spec), g in applied.groupby(["layers", "spec"], sort=False):
        first = g.iloc[0]
        rows.append({"layers": int(layers), "plan": spec, "chosen by": ", ".join(dict.fromkeys(g["method"])),
                     "predicted peak (bytes)": int(first["predicted_peak_bytes"]),
                     "measured peak (bytes)": int(first["measured_peak_bytes"]),
                     "error (bytes)": int(first["peak_error_bytes"]), "error": float(first["peak_rel_error"]),
                     "calibration point": bool(calibration(g).iloc[0])})
    columns = ["layers", "plan", "chosen by", "predicted peak (bytes)", "measured peak (bytes)", "error (bytes)",
               "error", "calibration point"]
    table = pd.DataFrame(rows, columns=columns)
    return table.sort_values(["layers", "error (bytes)", "plan"]).reset_index(drop=True)


KINDS = ("none and full layers", "with selective layers", "multi-layer checkpoint units")
"""Plan kinds of ``plan_kind``, in report order."""


def plan_kind(spec: str, layers: int) -> str:
    """Which of KINDS a runtime plan spec (``remat.policies.parse_plan``) is: a per-layer plan of none and full
    layers only, one with a selective layer, or one with a checkpoint unit of several layers (segments:k,
    uniform:N with N > 1) — the groups the torch cost model predicts with different accuracy."""
    from remat.policies import parse_plan
    plan = parse_plan(spec, int(layers))
    if any(stop - start > 1 for start, stop in plan.groups):
        return KINDS[2]
    return KINDS[1] if "selective" in plan.policies else KINDS[0]


def error_by_kind(validate: pd.DataFrame) -> pd.DataFrame:
    """Per plan kind (``plan_kind``), over the distinct predicted plans of a planner-validate table (applied,
    not calibration points; one per model and spec): plans, those predicted to the byte, the largest
    over-prediction and the largest under-prediction (predicted/measured − 1; 0 when none)."""
    rows = _predictions(validate).drop_duplicates(["layers", "spec"])
    kinds = [plan_kind(s, n) for s, n in zip(rows["spec"], rows["layers"])]
    out = []
    for kind in KINDS:
        g = rows[[k == kind for k in kinds]]
        if g.empty:
            continue
        err = g["peak_rel_error"]
        out.append({"plans": kind, "applied": len(g), "exact to the byte": int((g["peak_error_bytes"] == 0).sum()),
                    "largest over": float(max(0.0, err.max())), "largest under": float(min(0.0, err.min()))})
    return pd.DataFrame(out, columns=["plans", "applied", "exact to the byte", "largest over", "largest under"])


def validate_table(validate: pd.DataFrame) -> pd.DataFrame:
    """The plan at each budget of a planner-validate table: layers, budget, the plan as counts, predicted and
    measured peak (MiB), peak error (bytes: predicted − measured; and relative), whether the plan is a
    calibration point, predicted and measured slowdown against none, step times (s)."""
    plans = validate[(validate["method"] == "plan") & validate["measured_peak_bytes"].notna()]
    return pd.DataFrame({
        "layers": plans["layers"].astype(int),
        "budget (MiB)": plans["budget_bytes"] / MiB,
        "plan": plans["spec"].map(spec_counts),
        "predicted peak (MiB)": plans["predicted_peak_bytes"] / MiB,
        "measured peak (MiB)": plans["measured_peak_bytes"] / MiB,
        "peak error (bytes)": plans["peak_error_bytes"].astype(int),
        "peak error": plans["peak_rel_error"],
        "calibration point": calibration(plans),
        "predicted slowdown": plans["predicted_slowdown"],
        "measured slowdown": plans["measured_slowdown"],
        "predicted step (s)": plans["predicted_step_time_s"],
        "measured step (s)": plans["measured_step_time_s"],
    }).reset_index(drop=True)


def validate_display(table: pd.DataFrame) -> pd.DataFrame:
    """``validate_table`` as the report shows it: MiB to two decimals, the relative peak error in percent
    (signed, two decimals: the unit of ``errors_display`` and ``kinds_display``), calibration point as yes/no,
    slowdowns as multiples of the none step's time."""
    return pd.DataFrame({
        "layers": table["layers"],
        "budget (MiB)": table["budget (MiB)"].map(lambda v: f"{v:.2f}"),
        "plan (layers per policy)": table["plan"],
        "predicted peak (MiB)": table["predicted peak (MiB)"].map(lambda v: f"{v:.2f}"),
        "measured peak (MiB)": table["measured peak (MiB)"].map(lambda v: f"{v:.2f}"),
        "peak error (bytes)": table["peak error (bytes)"].map(signed_bytes),
        "peak error (%)": table["peak error"].map(_error_percent),
        "calibration point": yes_no(table["calibration point"]).values,
        "predicted slowdown (× none)": table["predicted slowdown"].map(lambda v: f"{v:.3f}"),
        "measured slowdown (× none)": table["measured slowdown"].map(lambda v: f"{v:.3f}"),
        "predicted step (s)": table["predicted step (s)"].map(lambda v: f"{v:.4f}"),
        "measured step (s)": table["measured step (s)"].map(lambda v: f"{v:.4f}"),
    }).reset_index(drop=True)


def errors_display(errors: pd.DataFrame) -> pd.DataFrame:
    """``peak_errors`` as the report shows it: bytes with thousands separators, the error in percent (signed,
    two decimals), calibration point as yes/no."""
    return pd.DataFrame({
        "layers": errors["layers"], "plan (runtime spec)": errors["plan"], "chosen by": errors["chosen by"],
        "predicted peak (bytes)": errors["predicted peak (bytes)"].map(lambda v: f"{int(v):,}"),
        "measured peak (bytes)": errors["measured peak (bytes)"].map(lambda v: f"{int(v):,}"),
        "error (bytes)": errors["error (bytes)"].map(signed_bytes),
        "error (%)": errors["error"].map(_error_percent),
        "calibration point": yes_no(errors["calibration point"]).values,
    }).reset_index(drop=True)


def kinds_display(kinds: pd.DataFrame) -> pd.DataFrame:
    """``error_by_kind`` as the report shows it: the largest over- and under-prediction in percent (signed, two
    decimals)."""
    return pd.DataFrame({
        "plans": kinds["plans"], "distinct plans applied": kinds["applied"],
        "exact to the byte": kinds["exact to the byte"],
        "largest over-prediction (%)": kinds["largest over"].map(_error_percent),
        "largest under-prediction (%)": kinds["largest under"].map(_error_percent),
    }).reset_index(drop=True)


def assumptions_display(assumed: pd.DataFrame) -> pd.DataFrame:
    """``assumptions`` under the report's headers (units in each)."""
    return assumed.rename(columns={
        "gpu": "GPU", "achievable": "achievable fraction of peak", "link GB/s": "host link GB/s (per direction)",
        "t0 (µs)": "latency per copy (µs)", "weight bytes": "weight bytes / parameter",
        "gradient bytes": "gradient bytes / parameter", "optimizer bytes": "optimizer bytes / parameter",
        "bytes per parameter": "model-state bytes / parameter", "reserve": "workspace reserve",
        "host memory": "host memory per GPU"})


# --- wording: sentences that read right for every outcome (all, none, some) ------------------------------------

def _uses(k: int, n: int) -> str:
    """How many of ``n`` settings, as the object of "in": "all", "both", "none", "neither" or the count."""
    if n == 2 and k in (0, 2):
        return "neither" if k == 0 else "both"
    return "all" if k == n and n > 1 else "none" if k == 0 else str(k)


def use_text(paper: pd.DataFrame) -> str:
    """Where the plans of a planner-paper table use each policy but none, over its settings (model, gpu, sp):
    "recomputes core attention (selective) in 12, runs full recompute in 6 and offloads in none"."""
    n = paper.groupby(["model", "gpu", "sp"], sort=False).ngroups
    uses = policy_use(paper)
    policies = {"selective": "recomputes core attention (selective)", "full": "runs full recompute",
                "offload": "offloads"}
    return join_words([f"{text} in {_uses(uses[p], n)}" for p, text in policies.items()])


def _gain(paper: pd.DataFrame, methods=None) -> dict:
    """The plan against the fastest feasible baseline among ``methods`` (None: every baseline), over the
    settings (model, gpu, sp) of a planner-paper table where the plan and one of them fit: settings, the
    largest, median and smallest gain (baseline / plan − 1) and how many settings the plan is faster (by
    more than TIE), as fast (within TIE) or slower (the baseline faster by more than TIE)."""
    gains = []
    for _, g in paper.groupby(["model", "gpu", "sp"], sort=False):
        plan = g[(g["method"] == "plan") & _feasible(g)]
        base = g[(g["method"] != "plan") & _feasible(g)]
        if methods is not None:
            base = base[base["method"].isin(methods)]
        if len(plan) and len(base):
            gains.append(base["step_time_s"].min() / plan["step_time_s"].iloc[0] - 1)
    gains = np.array(gains)
    some = len(gains) > 0
    return {"settings": len(gains), "largest": float(gains.max()) if some else np.nan,
            "median": float(np.median(gains)) if some else np.nan,
            "smallest": float(gains.min()) if some else np.nan,
            "faster": int((gains > TIE).sum()), "slower": int((gains < -TIE).sum()),
            "ties": int((np.abs(gains) <= TIE).sum())}


def uniform_gain(paper: pd.DataFrame) -> dict:
    """The plan against the fastest uniform policy that fits (``remat.planner.baselines.UNIFORM``: none, full
    or selective on every layer), over the settings of a planner-paper table where both fit (``_gain``'s
    dict: settings, largest, median, smallest, faster, ties, slower) — @tbl-paper's "gain over uniform"."""
    from remat.planner.baselines import UNIFORM
    return _gain(paper, UNIFORM)


def baseline_gain(paper: pd.DataFrame) -> dict:
    """The plan against the fastest feasible baseline of all (``baseline_names``), as ``uniform_gain`` —
    @tbl-paper's "gain over fastest baseline"."""
    return _gain(paper)


_LABELS = {"sqrt-segments": "√L segments", "megatron-uniform": "Megatron uniform",
           "megatron-block": "Megatron block", "torch-sac-milp": "torch's sac_milp"}


def baseline_names(paper: pd.DataFrame) -> tuple[int, str]:
    """(how many baselines a planner-paper table has, what they are in words): "the 3 uniform policies,
    √L segments, Megatron uniform, Megatron block and torch's sac_milp"."""
    from remat.planner.baselines import UNIFORM
    methods = [m for m in dict.fromkeys(paper["method"]) if m != "plan"]
    uniform = [m for m in methods if m in UNIFORM]
    words = ([f"the {len(uniform)} uniform policies" if len(uniform) > 1 else f"uniform {uniform[0]}"]
             if uniform else []) + [_LABELS.get(m, m) for m in methods if m not in UNIFORM]
    return len(methods), join_words(words, empty="none")


def versus_text(gain: dict, against: str) -> str:
    """A ``_gain`` dict as a clause (after "the plan is"): "faster than <against> in 12 of the 16 settings
    where both fit (by up to 24.40%) and as fast in the other 4"; the percentages as @tbl-paper shows the
    gains (two decimals). Reads right for all, none and some; never empty."""
    n = gain["settings"]
    if n == 0:
        return f"never compared with {against}: in no setting do both fit"
    up = lambda k: "by" if k == 1 else "by up to"
    parts = [(gain["faster"], "faster", "than", f" ({up(gain['faster'])} {percent(gain['largest'], 2)})"),
             (gain["ties"], "as fast", "as", ""),
             (gain["slower"], "slower", "than", f" ({up(gain['slower'])} {percent(-gain['smallest'], 2)})")]
    parts = [p for p in parts if p[0]]
    out = []
    for i, (k, word, link, by) in enumerate(parts):
        if i == 0:
            out.append(f"{word} {link} {against} in {count_of(k, n, 'setting')} where both fit{by}")
        elif i == len(parts) - 1:
            out.append(f"{word} in the other {k}{by}")
        else:
            out.append(f"{word} in {k}{by}")
    return join_words(out)


def uniform_text(gain: dict) -> str:
    """``uniform_gain`` as a clause: "faster than the fastest uniform policy (none, selective or full on every
    layer) in 12 of the 16 settings where both fit (by up to 24.40%) and as fast in the other 4"."""
    return versus_text(gain, "the fastest uniform policy (none, selective or full on every layer)")


def time_limit_text(limit: float, per: str, other: float, other_per: str, other_name: str) -> str:
    """torch's sac_milp time limit in one planner table (``limit`` seconds ``per`` budget or setting) beside
    the other table's, each experiment's own setting (its sac_time_limit_s column): "10 s per budget; the
    paper-model plans gave it 20 s per setting", or "20 s per budget, the same limit as the paper-model plans"."""
    if float(limit) == float(other):
        return f"{float(limit):g} s per {per}, the same limit as the {other_name}"
    return f"{float(limit):g} s per {per}; the {other_name} gave it {float(other):g} s per {other_per}"


def beaten_text(n: int, worse: int) -> str:
    """``beaten``'s (budgets, budgets where a baseline is faster) as a sentence."""
    if n == 0:
        return "The plan fits at no budget."
    if worse == 0:
        where = "the one budget" if n == 1 else "either budget" if n == 2 else f"any of the {n} budgets"
        return f"No baseline is predicted faster than the plan at {where}."
    return f"A baseline is predicted faster than the plan at {count_of(worse, n, 'budget')}."


def _exact(k: int, n: int, largest: float) -> str:
    """How many of ``n`` predictions are exact to the byte, and the largest error when not all are."""
    if k == n:
        return ("it is predicted to the byte" if n == 1 else "both are predicted to the byte" if n == 2 else
                "every one is predicted to the byte")
    who = ("it is not" if n == 1 else "neither is" if n == 2 and k == 0 else "none is" if k == 0 else
           f"{k} {'is' if k == 1 else 'are'}")
    return f"{who} predicted to the byte; the largest error is {largest:.2%}"


def plans_text(val: dict) -> str:
    """The plans' peaks of ``validation_numbers`` as a sentence: how many stay within budget, how many are
    predicted to the byte, and the largest error when not all are."""
    n = val["plans"]
    if not n:
        return "No plan was applied."
    return (f"{capitalized(count_of(val['plans_in_budget'], n, 'plan', verb=('stays', 'stay')))} within budget "
            f"when applied, and {_exact(val['plans_exact'], n, val['plan_peak_error'])}.")


def baselines_text(val: dict) -> str:
    """The feasible baselines' peaks of ``validation_numbers`` as a sentence, as ``plans_text``, naming the
    baseline with the largest error when not all are exact."""
    b = val["baselines"]
    if not b:
        return "No feasible baseline was applied."
    fit = count_of(val["baselines_in_budget"], b, "row", verb=("fits", "fit"))
    exact = _exact(val["baselines_exact"], b, val["baseline_peak_error"])
    worst = f" ({val['worst_baseline']})" if val["baselines_exact"] < b and val["worst_baseline"] else ""
    return f"Of the feasible baselines applied, {fit} within budget, and {exact}{worst}."


def noise_text(val: dict) -> str:
    """The lead of the report's sentence on predicted against measured times (``validation_numbers``): whether
    the plans' slowdowns miss their measurement by more than their peaks miss theirs, like with like — the
    largest |predicted/measured − 1| of each over the same plans (the worst of ``slowdown_error`` against
    ``plan_peak_error``), naming the peak error it is set against. Ends with a colon; when either is NaN (no
    plan applied, or no time measured) it says they are not compared."""
    worst_time, worst_peak = val["slowdown_error"][1], val["plan_peak_error"]
    if worst_time != worst_time or worst_peak != worst_peak:
        return "Times are not set against bytes here (no applied plan has both a measured time and a measured peak):"
    peak = ("every peak is predicted to the byte" if worst_peak == 0 else
            f"the largest peak error is {percent(worst_peak, 2)}")
    if worst_time > worst_peak:
        return f"Times on this machine are noisier than bytes ({peak}):"
    return f"Times agree at least as closely as bytes here ({peak}):"


def validation_text(val: dict) -> str:
    """``plans_text`` and ``baselines_text`` together."""
    return f"{plans_text(val)} {baselines_text(val)}"


def kinds_text(kinds: pd.DataFrame) -> str:
    """``error_by_kind`` as "none and full layers: all 5 exact to the byte; with selective layers: 1 of 3,
    over-predicted by up to 1.20 %"; "no plan was applied" for an empty table."""
    parts = []
    for _, r in kinds.iterrows():
        n, k = int(r["applied"]), int(r["exact to the byte"])
        exact = ("exact to the byte" if k == n == 1 else "not exact to the byte" if n == 1 else
                 f"{count_of(k, n, 'plan')} exact to the byte")
        over = f", over-predicted by up to {r['largest over']:.2%}" if r["largest over"] > 0 else ""
        under = f", under-predicted by up to {-r['largest under']:.2%}" if r["largest under"] < 0 else ""
        parts.append(f"{r['plans']}: {exact}{over}{under}")
    return "; ".join(parts) or "no plan was applied"


def under_text(val: dict) -> str:
    """How many predicted rows (plans and feasible baselines) are below their measured peak, as a sentence."""
    n, k = val["plans"] + val["baselines"], val["under"]
    if k == 0:
        return "No row is predicted below its measured peak." if n else "No row was predicted."
    return f"{capitalized(count_of(k, n, 'row', verb=('is', 'are')))} predicted below the measured peak."


def base_text(error_bytes: int) -> str:
    """The bytes alive before the step, predicted against measured: "to the byte" or "within N bytes"."""
    return "to the byte" if error_bytes == 0 else f"within {count(error_bytes, 'byte')}"


def references_text(validate: pd.DataFrame) -> str:
    """Which applied rows of a planner-validate table are calibration steps after all (left out of the errors)."""
    applied = validate[validate["measured_peak_bytes"].notna()]
    ref = applied[calibration(applied)]
    if ref.empty:
        return "No applied row is a calibration step, so every one counts in the errors below."
    methods = ", ".join(dict.fromkeys(ref["method"]))
    return (f"Applied rows that are a calibration step after all ({len(ref)} here, chosen by {methods}) are left "
            "out of the errors below.")


def timing_text(setup: dict) -> str:
    """The timing protocol of ``validate_settings``: rounds, repeats and, on a CPU, the intra-op threads."""
    threads = setup["threads"]
    where = (f"on {count(threads, 'intra-op thread')} of the CPU" if setup["device"] == "cpu"
             else f"on {setup['device']}")
    return (f"{count(setup['rounds'], 'interleaved round')} of {count(setup['repeats'], 'timed step')} per plan, "
            f"{where}")


# --- paper Table 5, predicted (results/korthikanti/table5.csv) ----------------------------------------------------

_LEFT_OUT = "the optimizer step, the embedding, pipeline sends and receives between stages and the data loader"


def table5_text(table5: pd.DataFrame) -> str:
    """Sentences on a predicted paper Table 5 (korthikanti table5 rows): the ratio full / (SP + selective) and
    the difference per model beside the paper's, the largest gap between the differences, the absolute times
    as a share of the paper's and why, and whether the ratio sits above the paper's (the shared time the
    model leaves out dilutes the paper's). Wording follows the data."""
    t5 = table5.set_index("model")
    ratios = ", ".join(f"{m} {r['ratio']:.2f} (paper {r['paper_ratio']:.2f})" for m, r in t5.iterrows())
    diffs = ", ".join(f"{r['difference_s']:.2f} s (paper {r['paper_difference_s']:.2f} s)" for m, r in t5.iterrows())
    gap = float((t5["difference_s"] / t5["paper_difference_s"] - 1).abs().max())
    share = t5["present_s"] / t5["paper_present_s"]
    shares = ", ".join(f"{s:.0%}" for s in share)
    text = (f"Full recompute over SP + selective: {ratios}. The difference between the two, which the layers "
            f"alone make, is {diffs}: {gap:.1%} from the paper's at most. ")
    if bool((share < 1).all()):
        text += (f"The absolute times are {shares} of the paper's, below them because the model leaves out what "
                 f"both variants pay alike: {_LEFT_OUT}. ")
    else:
        text += (f"The absolute times are {shares} of the paper's, although the model leaves out what both "
                 f"variants pay alike ({_LEFT_OUT}): where they are not below the paper's, the layers cost more "
                 "here than in the paper. ")
    above = t5["ratio"] > t5["paper_ratio"]
    if bool(above.all()):
        text += "That shared time dilutes the paper's ratio, so the predicted ratio is above it for every model"
    elif not above.any():
        text += ("The predicted ratio is not above the paper's for any model, although the shared time the model "
                 "leaves out dilutes the paper's ratio: what the layers pay differs too")
    else:
        text += (f"The predicted ratio is above the paper's for {count_of(int(above.sum()), len(above), 'model')}; "
                 "the shared time the model leaves out dilutes the paper's ratio, so where it is not above, what "
                 "the layers pay differs too")
    return text + "; the absolute times scale with the assumed achievable fraction of peak FLOP/s."


def table5_range(table5: pd.DataFrame) -> str:
    """The predicted full / (SP + selective) ratios against the paper's as "1.36–1.39× (paper 1.29–1.32×)"."""
    return f"{span_text(table5['ratio'], 2, '×')} (paper {span_text(table5['paper_ratio'], 2, '×')})"
