"""The planner report's findings (``findings(root)``: every number it quotes, paper Table 5 judged) and the tables
it shows (``paper_display``, ``validate_display(frame)`` …), from the planner tables and predicted
Table 5; nothing is re-planned or re-measured. A gain is t_baseline / t_plan − 1 (a fraction). The tensor plans
(remat.experiments.tensor_plans: per model and budget, a tensor plan and a per-block plan applied and measured)
are held to remat's own guarantees (the measured peak within the budget and equal to the prediction, or under it
by at most one block's offloaded bytes in a plan that offloads; gradients bit for bit); their gain over the
per-block plan, t_block / t_tensor − 1, is predicted."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pandas as pd

from remat.analysis import catalog, gates, planner_compile, planner_pipeline
from remat.analysis.findings import Finding, judge, not_measured, within_abs
from remat.analysis.tolerances import MINOR, PLANNER_TABLE5_PP
from remat.paper import KORTHIKANTI, PAPER_GPU, PAPER_TABLE5_GAIN_PCT, PaperValue
from remat.planner.baselines import UNIFORM
from remat.policies import POLICIES, parse_plan
from remat.timemodel.gpus import gpu as gpu_preset
from remat.units import MINUS, GiB, MiB, format_bytes, percent, signed_percent, span_text

TIE, NAN, YES = 1e-12, math.nan, {True: "yes", False: "no"}  # TIE: times this close (relative) are equal
_pct = lambda x: signed_percent(x, 2, "")  # noqa: E731
_bytes = lambda n: f"{int(n):+,}".replace("-", MINUS) if int(n) else "0"  # noqa: E731
OUTSIDE = ("sqrt-segments", "megatron-uniform")
"""Baselines with multi-layer units, outside the per-layer plan space (Megatron uniform with N = 1 is full)."""
LAYOUT = (("t", "tp"), ("p", "pp"), ("m", "interleave"), ("b", "micro_batch"))
SIZES = (("L", "layers"), ("h", "hidden"), ("s", "seq"), ("b", "micro_batch"), ("a", "heads"))   # (symbol, column)

CLAIMS = {  # every finding id of the report: its claim
    "paper.settings": "Settings (model, GPU, SP) planned at each GPU's full memory",
    **{f"paper.{vs}.{k}": f"Settings where the plan is {word} the fastest {what} that fits" for vs, what in (
        ("uniform", "uniform policy"), ("best", "baseline")) for k, word in (
        ("faster", "faster than"), ("ties", "as fast as"), ("slower", "slower than"))},
    "paper.uniform.largest": "Largest gain over the fastest uniform policy",
    "paper.best.largest": "Largest gain over the fastest baseline", "paper.no_sp.setting": "Where it is",
    "paper.no_sp": "Largest gain over the fastest uniform policy without SP", "paper.no_sp.against": "That policy",
    "paper.sp": "Gain over SP + selective on every layer (the paper's setting), same model and GPU",
    "paper.sp.range": "Gain over SP + selective on every layer, across the settings with SP",
    "paper.sp.paper_gpu": "Gain over SP + selective on every layer, same model on the paper's GPU",
    "paper.megatron": "Plans faster than every baseline that Megatron-LM cannot run",
    **{f"paper.uses.{p}": f"Settings whose plan has {a} {p} layer" for a, p in zip("a a an".split(), POLICIES[1:])},
    "paper.sac_limit": "sac_milp time limit per setting", "frontier.sac_limit": "sac_milp time limit per budget",
    **{f"{t}.{k}": f"Budgets where {c}" for t in ("frontier", "validate") for k, c in (
        ("budgets", "the plan fits"), ("beaten", "a baseline is predicted faster than the plan"))},
    **{f"{t}.{k}": f"Setting of the {t} tables: {k}" for t, ks in (("frontier", "models gpu"), ("table5", "gpu"), (
        "validate", "device sizes models points rounds repeats threads")) for k in ks.split()},
    "validate.references": "Applied rows that are calibration steps", "validate.reference_by": "Chosen by",
    **{f"validate.{w}{k}": f"{w.capitalize()} applied{c}" for w in ("plans", "baselines") for k, c in (
        ("", ""), (".fit", " within budget"), (".exact", " exact to the byte"), (".error", ": largest peak error"))},
    "validate.baselines.worst": "The baseline with it", "validate.under": "Rows predicted below the measured peak",
    "validate.base_error": "Bytes alive before the step: |predicted − measured|",
    **{f"validate.{w}{k}": f"{w.capitalize()}: {a} |predicted / measured − 1| over the plans" for w in (
        "slowdown", "time") for k, a in (("", "median"), (".worst", "largest"))},
    "table5": "Iteration time: SP + selective over full recompute", "table5.paper_ratio": "The paper's ratio",
    "table5.ratio": "Full recompute over SP + selective, predicted",
    "table5.saved": "Seconds saved per iteration, as a multiple of the paper's",
    "table5.share": "Predicted SP + selective times as a share of the paper's",
    "table5.achievable": "Achievable fraction of peak FLOP/s assumed",
    "tensor.device": "Where the tensor plans were applied and measured",
    "tensor.models": "Models planned per op output and per block", "tensor.skipped": "Models left out",
    "tensor.points": "Budgets per model", "tensor.plans": "Plans applied (both kinds, every budget)",
    "tensor.fit": "Plans whose measured peak is within their budget",
    "tensor.exact": "Plans whose measured peak equals the prediction to the byte",
    "tensor.offloading": "Plans that offload op outputs or whole blocks",
    "tensor.offload.within": "Offloading plans measured at most one block's offloaded bytes under their prediction",
    "tensor.error": "Largest |measured − predicted| peak, bytes",
    "tensor.bitwise": "Plans whose gradients are bit for bit the unmodified model's",
    "tensor.monotone": "Models whose tensor plans never predict a higher peak or a slower step at a smaller budget",
    "tensor.gain": "Largest predicted step-time gain of the tensor plan over the per-block plan at one budget",
    "tensor.gain.where": "Where", "tensor.kept": "Tensor plans in which some block keeps its own op set",
    "tensor.slower": "Budgets where the tensor plan is predicted slower than the per-block plan",
    "tensor.plan_s": "Longest auto.plan call (measure and solve), wall seconds on this machine",
    **planner_compile.CLAIMS, **planner_pipeline.CLAIMS,
}


def _m(id: str, value: float, text: str | None = None, where: str = "") -> Finding:
    """A measured finding: ``value`` (NaN for a text value) shown as ``text`` (default: the value)."""
    return judge(id, CLAIMS[id], value, where=where, text=str(value) if text is None else text)


def _beaten(id: str, table: pd.DataFrame, time: str = "step_time_s") -> tuple[int, Finding]:
    """(budgets the plan fits, finding ``id``: budgets an OUTSIDE baseline is faster; invalid if another is)."""
    keys = [c for c in ("model", "layers", "gpu", "sp", "budget_bytes") if c in table]
    fit = table[table["feasible"].astype(bool)]
    plans = fit[fit["method"] == "plan"][keys + [time]].rename(columns={time: "_plan"})
    base = fit[fit["method"] != "plan"].merge(plans, on=keys)
    hit = base[base[time] < base["_plan"] * (1 - TIE)]
    out = hit["method"].isin(OUTSIDE)
    inside = hit[~out].groupby(keys).ngroups
    found = _m(id, hit[out].groupby(keys).ngroups, where="predicted")
    return len(plans), gates.gated(found, [f"a baseline inside the plan space beats it at {inside}" if inside else ""])


def settings(paper: pd.DataFrame) -> pd.DataFrame:
    """Per (model, gpu, sp): layout, plan fits, peak (bytes), step (s), layers per policy; gain over the fastest
    uniform policy, baseline and over selective (NaN: none fits); Megatron-LM runs it (one policy, or block)."""
    rows = []
    for (model, gpu, sp), g in paper.groupby(["model", "gpu", "sp"], sort=False):
        plan = g[g["method"] == "plan"].iloc[0]
        fits = bool(plan["feasible"])
        base = g[(g["method"] != "plan") & g["feasible"].astype(bool)].sort_values("step_time_s", kind="stable")
        row = {"model": model, "gpu": gpu, "sp": bool(sp), "fits": fits, "peak": plan["peak_bytes"],
               "step": plan["step_time_s"], **{k: int(plan[c]) for k, c in LAYOUT},
               **{p: int(np.nan_to_num(plan[f"n_{p}"])) for p in POLICIES}}
        for name, fit in (("uniform", base["method"].isin(UNIFORM)), ("best", base["method"] != ""),
                          ("over_selective", base["method"] == "selective")):
            ok = fits and fit.any()
            row[f"{name}_method"] = base[fit]["method"].iloc[0] if ok else "—"
            row[f"{name}_gain"] = base[fit]["step_time_s"].iloc[0] / plan["step_time_s"] - 1 if ok else NAN
        used = {p for p in POLICIES if row[p] > 0}
        row["megatron"] = used <= {"none", "full"} or used == {"selective"}
        rows.append(row)
    return pd.DataFrame(rows)


def policy_counts(row) -> str:
    """Layers per policy of a ``settings`` row or a dict: "2 none, 46 selective"."""
    return ", ".join(f"{int(row[p])} {p}" for p in POLICIES if row.get(p, 0) > 0)


def _paper(paper: pd.DataFrame) -> list[Finding]:
    s, at = settings(paper), "predicted"
    out = [_m("paper.settings", len(s))]
    for name in ("uniform", "best"):
        gain = s[f"{name}_gain"].dropna()
        out += [_m(f"paper.{name}.{k}", int(n), where=at) for k, n in (
            ("faster", (gain > TIE).sum()), ("ties", (gain.abs() <= TIE).sum()), ("slower", (gain < -TIE).sum()))]
        out.append(_m(f"paper.{name}.largest", gain.max(), percent(gain.max(), 2), at))
    top = s.loc[s[~s["sp"]]["uniform_gain"].idxmax()]
    sp = s[s["sp"]].set_index(["model", "gpu"])["over_selective_gain"]   # the settings with SP
    same, paper_gpu = sp[(top["model"], top["gpu"])], float(sp.get((top["model"], PAPER_GPU), NAN))
    return out + [
        _m("paper.no_sp", top["uniform_gain"], percent(top["uniform_gain"], 2), at),
        _m("paper.no_sp.setting", NAN, f"{top['model']} on {top['gpu']}"),
        _m("paper.no_sp.against", NAN, top["uniform_method"]), _m("paper.sp", same, percent(same, 2), at),
        _m("paper.sp.range", sp.median(), span_text(100 * sp.dropna(), 2, "%"), at),
        _m("paper.sp.paper_gpu", paper_gpu, percent(paper_gpu, 2) if paper_gpu == paper_gpu else "—", at),
        _m("paper.megatron", int((~s[s["best_gain"] > TIE]["megatron"]).sum()), where=at),
        *(_m(f"paper.uses.{p}", int((s[p] > 0).sum())) for p in ("selective", "full", "offload")),
        _m("paper.sac_limit", float(paper["sac_time_limit_s"].iloc[0]), f"{paper['sac_time_limit_s'].iloc[0]:g} s")]


def paper_display(paper: pd.DataFrame) -> pd.DataFrame:
    """@tbl-paper: ``settings`` as shown (peak in GiB, gains in %, "—" where nothing fits)."""
    s = settings(paper)
    fit = lambda texts: [t if f else "—" for f, t in zip(s["fits"], texts)]
    pct = lambda x: "—" if x != x else f"{100 * x:.2f}"
    return pd.DataFrame({
        "model (t, p, m, b)": [f"{r['model']} ({', '.join(str(r[k]) for k, _ in LAYOUT)})" for _, r in s.iterrows()],
        "GPU": s["gpu"], "SP": s["sp"].map(YES),
        "plan (layers per policy)": [policy_counts(r) if r["fits"] else "does not fit" for _, r in s.iterrows()],
        "peak (GiB)": fit(f"{v / GiB:.1f}" for v in s["peak"]), "step (s)": fit(f"{v:.3f}" for v in s["step"]),
        "Megatron-LM runs it": fit(s["megatron"].map(YES)), "fastest uniform": s["uniform_method"],
        "gain over it (%)": s["uniform_gain"].map(pct), "fastest baseline": s["best_method"],
        "gain over baseline (%)": s["best_gain"].map(pct)})


ASSUMED = {"GPU": ("gpu", 1), "peak TFLOP/s": ("peak_flops", 1e-12), "achievable fraction of peak": ("achievable", 1),
           "HBM GB/s achieved": ("memory_bytes_per_s", 1e-9), "NVLink GB/s achieved": ("nvlink_bytes_per_s", 1e-9),
           "host link GB/s (per direction)": ("link_bytes_per_s", 1e-9), "GPUs per link": ("gpus_per_host_link", 1),
           "latency per copy (µs)": ("link_t0_s", 1e6)}
"""@tbl-assumed's columns: header -> (planner-table column, scale); GB/s are 10^9 bytes/s."""


def assumptions_display(table: pd.DataFrame) -> pd.DataFrame:
    """@tbl-assumed: a planner table's assumptions, one row per distinct combination (GiB = 2^30 bytes)."""
    out = pd.DataFrame({h: table[c] * k if k != 1 else table[c] for h, (c, k) in ASSUMED.items()})
    state = table[["weight_bytes", "grad_bytes", "optimizer_bytes"]].astype(int)
    out["model-state bytes / parameter (weights + gradients + optimizer)"] = [
        f"{w} + {g} + {o} = {w + g + o}" for w, g, o in state.itertuples(index=False)]
    for header, col in (("workspace reserve", "reserve_bytes"), ("host memory per GPU", "host_limit_bytes")):
        out[header] = table[col].map(lambda n: format_bytes(int(n)))
    return out.drop_duplicates().set_index("GPU").T.rename_axis("assumed").reset_index()   # one column per GPU


def _frontier(frontier: pd.DataFrame) -> list[Finding]:
    n, beaten = _beaten("frontier.beaten", frontier)
    limit = float(frontier["sac_time_limit_s"].iloc[0])
    return [_m("frontier.budgets", n), beaten, _m("frontier.models", NAN, ", ".join(dict.fromkeys(frontier["model"]))),
            _m("frontier.gpu", NAN, ", ".join(dict.fromkeys(frontier["gpu"]))),
            _m("frontier.sac_limit", limit, f"{limit:g} s")]


# --- applied to real models (planner.validate) ---------------------------------------------------------------------

KINDS = ("none and full layers", "with selective layers", "multi-layer checkpoint units")


def plan_kind(spec: str, layers: int) -> str:
    """Which of KINDS a runtime plan spec (remat.policies.parse_plan) is."""
    plan = parse_plan(spec, int(layers))
    if any(stop - start > 1 for start, stop in plan.groups):
        return KINDS[2]
    return KINDS[1] if "selective" in plan.policies else KINDS[0]


def _applied(v: pd.DataFrame) -> pd.DataFrame:
    return v[v["measured_peak_bytes"].notna()]


def _validate(v: pd.DataFrame) -> list[Finding]:
    at = v.attrs["where"]
    # pred: rows applied that are no calibration step (those the workspace fit uses); ref: those that are
    pred, ref = (_applied(v)[lambda f: f["reference"].astype(bool) == r] for r in (False, True))
    plans, base = pred[pred["method"] == "plan"], pred[pred["feasible"].astype(bool) & (pred["method"] != "plan")]
    models = v.drop_duplicates(["model", "layers", "seq", "micro_batch", "hidden", "heads"])
    n, beaten = _beaten("validate.beaten", v, "predicted_step_time_s")
    worst = base.loc[base["peak_rel_error"].abs().idxmax(), "method"] if len(base) else "—"
    first = v.iloc[0]
    out = [_m("validate.device", NAN, str(first["device"]), at), _m("validate.sizes", len(models)),
           _m("validate.models", NAN, "; ".join(f"L = {r.layers}, s = {r.seq}, b = {r.micro_batch}, "
                                                f"h = {r.hidden}, a = {r.heads}" for r in models.itertuples())),
           _m("validate.points", int(first["points"])), _m("validate.references", len(ref), where=at),
           _m("validate.reference_by", NAN, ", ".join(dict.fromkeys(ref["method"])) or "—"),
           _m("validate.under", int((pd.concat([plans, base])["peak_error_bytes"] < 0).sum()), where=at),
           _m("validate.baselines.worst", NAN, worst), _m("validate.budgets", n), beaten,
           _m("validate.base_error", int((v["predicted_base_bytes"] - v["measured_base_bytes"]).abs().max()),
              where=at), *(_m(f"validate.{k}", int(first[k])) for k in ("rounds", "repeats", "threads"))]
    cal = [first[f"layer_seconds_{p}"] for p in ("none", "selective", "full")]     # in the order of their work
    noise = [gates.conditions(plans), *(gates.negative_overhead(b / a - 1, 0, "calibrated recompute") for a, b in
                                        zip(cal, cal[1:]))] + [gates.noisy(t, q, f"the {s} step") for t, q, s in
                                   zip(plans["measured_step_time_s"], plans["measured_step_time_iqr_s"], plans["spec"])]
    for name, rows in (("plans", plans), ("baselines", base)):
        err = rows["peak_rel_error"].abs().max()   # NaN: none
        out += [_m(f"validate.{name}", len(rows), where=at), _m(f"validate.{name}.error", err, percent(err, 2), at),
                _m(f"validate.{name}.fit", int((rows["measured_peak_bytes"] <= rows["budget_bytes"]).sum()), where=at),
                _m(f"validate.{name}.exact", int((rows["peak_error_bytes"] == 0).sum()), where=at)]
    for name, col in (("slowdown", "slowdown_rel_error"), ("time", "time_rel_error")):   # invalid: noise, busy
        err = plans[col].abs()
        out += [gates.gated(_m(f"validate.{name}{k}", x, percent(x), at), noise)
                for k, x in (("", err.median()), (".worst", err.max()))]
    return out


def validate_display(v: pd.DataFrame) -> pd.DataFrame:
    """@tbl-validate: the plan at each budget, predicted beside measured (peak MiB, slowdown, step s)."""
    p = _applied(v)[lambda f: f["method"] == "plan"]
    mib = lambda x: f"{x / MiB:.2f}"
    both = lambda name, col, fmt: {f"{w[:4]}. {name}": p[col.format(w)].map(fmt) for w in ("predicted", "measured")}
    return pd.DataFrame({
        "layers": p["layers"].astype(int), "budget (MiB)": p["budget_bytes"].map(mib),
        "plan (layers per policy)": [policy_counts({q: s.split(",").count(q) for q in POLICIES}) if "," in s
                                     else f"all {s}" for s in p["spec"]],
        **both("peak (MiB)", "{}_peak_bytes", mib),
        "peak error (bytes)": p["peak_error_bytes"].map(_bytes),
        "calibration point": p["reference"].astype(bool).map(YES),
        **both("slowdown (× none)", "{}_slowdown", "{:.3f}".format),
        **both("step (s)", "{}_step_time_s", "{:.4f}".format)}).reset_index(drop=True)


def errors_display(v: pd.DataFrame) -> pd.DataFrame:
    """@tbl-errors: every distinct plan applied, once per model (named by the sizes that differ): kind, by, peaks."""
    sizes, keys = [(k, c) for k, c in SIZES if v[c].nunique() > 1] or SIZES[:1], [c for _, c in SIZES] + ["spec"]
    rows = _applied(v).assign(by=lambda f: f.groupby(keys)["method"].transform(
        lambda m: ", ".join(dict.fromkeys(m)))).drop_duplicates(keys)
    rows = rows.sort_values([c for _, c in sizes] + ["peak_error_bytes", "spec"])
    return pd.DataFrame({
        "model": [", ".join(f"{k} = {r[c]}" for k, c in sizes) for _, r in rows.iterrows()],
        "plan (runtime spec)": rows["spec"].str.replace(",", ", "),
        "kind": [plan_kind(p, n) for p, n in zip(rows["spec"], rows["layers"])], "chosen by": rows["by"],
        **{f"{w[:4]}. peak (bytes)": rows[f"{w}_peak_bytes"].astype(int).map("{:,}".format)
           for w in ("predicted", "measured")},
        "error (bytes)": rows["peak_error_bytes"].map(_bytes), "error (%)": rows["peak_rel_error"].map(_pct),
        "calibration point": rows["reference"].astype(bool).map(YES)}).reset_index(drop=True)


# --- paper Table 5, predicted (korthikanti.table5) -----------------------------------------------------------------

PAPER_GAIN = pd.Series(PAPER_TABLE5_GAIN_PCT)
"""Paper Table 5's throughput gain of SP + selective over full recompute, percent, per model, as printed."""
_T5_RULE = within_abs(PLANNER_TABLE5_PP, MINOR)
_T5 = dict(rule=replace(_T5_RULE, text=f"every model {_T5_RULE.text}"),
           scorecard=KORTHIKANTI, link="planner.html#sec-table5")


def _table5(t5: pd.DataFrame) -> list[Finding]:
    gain = pd.Series(100 * (t5["ratio"].values - 1), index=t5["model"])
    gap = gain - PAPER_GAIN.reindex(gain.index)
    worst, saved = gap.abs().idxmax(), t5["difference_s"] / t5["paper_difference_s"]
    why = (f"up to {gap.abs().max():.0f} pp above: the model leaves out time both variants pay (optimizer step, "
           "embedding, pipeline sends, data loading), which dilutes the paper's gain; the seconds saved per iteration "
           f"are {span_text(saved, 2, '×')} the paper's") if (gap > 0).all() else ""   # else the rule's own reason
    paper = PaperValue(PAPER_GAIN[worst], "Korthikanti Table 5", span_text(PAPER_GAIN, 0, " %"))
    found = judge("table5", CLAIMS["table5"], gain[worst], paper, where="predicted", text=span_text(gain, 0, " %"),
                  reason=why, **_T5)
    gpu, share = str(t5["gpu"].iloc[0]), t5["present_s"] / t5["paper_present_s"]
    return [found, _m("table5.ratio", t5["ratio"].max(), span_text(t5["ratio"], 2, "×"), "predicted"),
            _m("table5.paper_ratio", t5["paper_ratio"].max(), span_text(t5["paper_ratio"], 2, "×")),
            _m("table5.saved", saved.max(), span_text(saved, 2, "×"), "predicted"),
            _m("table5.share", share.max(), span_text(100 * share, 0, "%"), "predicted"), _m("table5.gpu", NAN, gpu),
            _m("table5.achievable", gpu_preset(gpu).achievable, percent(gpu_preset(gpu).achievable, 0))]


# --- per op output: tensor plans beside per-block plans (planner.tensor) --------------------------------------------

def _pairs(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per (model, point) planned: the tensor plan's columns beside the per-block plan's (_t, _b), the gain."""
    keys = ["model", "point", "budget_bytes"]
    tensor, block = (frame[frame["granularity"] == g].set_index(keys) for g in ("tensor", "block"))
    out = tensor.join(block, suffixes=("_t", "_b")).reset_index()
    return out.assign(gain=out["predicted_step_time_s_b"] / out["predicted_step_time_s_t"] - 1)


def _monotone(rows: pd.DataFrame) -> bool:
    rows = rows.sort_values("budget_bytes")
    peak, step = rows["predicted_peak_bytes"].to_numpy(), rows["predicted_step_time_s"].to_numpy()
    return bool((peak[1:] >= peak[:-1]).all() and (step[1:] <= step[:-1] * (1 + TIE)).all())


def _tensor(frame: pd.DataFrame) -> list[Finding]:
    at = frame.attrs["where"]
    done, skipped, pairs = frame[frame["skipped"].isna()], frame[frame["skipped"].notna()], _pairs(frame)
    best = pairs.loc[pairs["gain"].idxmax()] if len(pairs) else None
    tensor = done[done["granularity"] == "tensor"]
    moving, under = done["offloaded_bytes"] > 0, done["predicted_peak_bytes"] - done["measured_peak_bytes"]
    within = under.between(0, done["max_block_offload_bytes"])   # the neighbour's unused allowance
    where = "—" if best is None else f"{best['model']}, budget {best['budget_bytes'] / MiB:.1f} MiB"
    return [
        _m("tensor.device", NAN, str(done["device"].iloc[0]).upper() if len(done) else "—", at),
        _m("tensor.models", done["model"].nunique(), "; ".join(dict.fromkeys(done["model"]))),
        _m("tensor.skipped", len(skipped), "; ".join(skipped["model"] + ": " + skipped["skipped"]) or "none"),
        _m("tensor.points", int(done["point"].max() + 1) if len(done) else 0),
        _m("tensor.plans", len(done), where=at),
        _m("tensor.fit", int((done["measured_peak_bytes"] <= done["budget_bytes"]).sum()), where=at),
        _m("tensor.exact", int((under == 0).sum()), where=at), _m("tensor.offloading", int(moving.sum())),
        _m("tensor.offload.within", int((within & moving).sum()), where=at),
        _m("tensor.error", under.abs().max(), f"{int(under.abs().max()):,}", at),
        _m("tensor.bitwise", int(done["grads_bitwise"].astype(bool).sum()), where=at),
        _m("tensor.monotone", sum(_monotone(g) for _, g in tensor.groupby("model")), where="predicted"),
        _m("tensor.gain", NAN if best is None else best["gain"], "—" if best is None else percent(best["gain"], 1),
           "predicted"), _m("tensor.gain.where", NAN, where),
        _m("tensor.kept", int((tensor["kept_blocks"] > 0).sum()), where="predicted"),
        _m("tensor.slower", int((pairs["gain"] < -TIE).sum()), where="predicted"),
        _m("tensor.plan_s", done["plan_s"].max(), f"{done['plan_s'].max():.2f} s", at)]


def tensor_display(frame: pd.DataFrame) -> pd.DataFrame:
    """@tbl-tensor: per model and budget, the tensor plan beside the per-block plan: peaks in MiB (predicted /
    measured), step in ms (predicted on the GPU preset), the gain, the blocks keeping an op set, the tensor plan's
    offloaded bytes, bitwise."""
    p = _pairs(frame)
    both = lambda k: [f"{a / MiB:.2f} / {b / MiB:.2f}" for a, b in zip(p[f"predicted_peak_bytes_{k}"],
                                                                       p[f"measured_peak_bytes_{k}"])]
    return pd.DataFrame({
        "model": p["kind_t"], "budget (MiB)": p["budget_bytes"].map(lambda x: f"{x / MiB:.2f}"),
        "tensor plan peak (MiB), pred. / meas.": both("t"), "per-block plan peak (MiB), pred. / meas.": both("b"),
        "step (ms): tensor / per-block": [f"{a * 1e3:.3f} / {b * 1e3:.3f}" for a, b in
                                         zip(p["predicted_step_time_s_t"], p["predicted_step_time_s_b"])],
        "gain": p["gain"].map(lambda g: signed_percent(g, digits=1)),
        "blocks keeping an op set": p["kept_blocks_t"].astype(int),
        "tensor plan offloads (MiB)": p["offloaded_bytes_t"].map(lambda x: f"{x / MiB:.2f}"),
        "bitwise": (p["grads_bitwise_t"].astype(bool) & p["grads_bitwise_b"].astype(bool)).map(
            {True: "yes", False: "NO"})}).reset_index(drop=True)


def findings(root=".") -> list[Finding]:
    """Every finding (CLAIMS) from the tables under ``root``; an absent table gives "not measured" ones."""
    groups = {"paper.": (_paper, "planner.paper"), "frontier.": (_frontier, "planner.frontier"),
              "validate.": (_validate, "planner.validate"), "table5": (_table5, "korthikanti.table5"),
              "tensor.": (_tensor, "planner.tensor"),
              "schedules.": (planner_pipeline.schedule_findings, "planner.schedules"),
              "pipeline.": (planner_pipeline.pipeline_findings, "planner.pipeline"),
              "compile.": (lambda c: planner_compile.findings(c, catalog.shown_or_none("planner.paired", root)),
                           "planner.compile")}
    paper = PaperValue(PAPER_GAIN.max(), "Korthikanti Table 5", span_text(PAPER_GAIN, 0, " %"))   # table5, not measured
    return [f for prefix, (make, table) in groups.items() for f in catalog.unless_missing(   # per device: as shown
        lambda: make((catalog.read_shown if table in catalog.DEVICE_TABLES else catalog.read)(table, root=root)),
        lambda missing: [not_measured(i, c, missing, **(dict(paper=paper, **_T5) if i == "table5" else {}))
                         for i, c in CLAIMS.items() if i.startswith(prefix)])]
