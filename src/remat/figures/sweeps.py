"""Figures of the torch GPT sweeps, every measurement (markers) over its closed form (lines). One row of
panels per device present in the inputs (CPU, then GPU), so CPU and GPU results sit side by side.

    remat figure sweep-segments     --inputs results/sweeps/segments/cpu.csv [.../cuda.csv]
                                    --out figures/sweeps_segments.png
    remat figure sweep-depth        --inputs results/sweeps/depth/cpu.csv ...
                                    --out figures/sweeps_depth.png
    remat figure sweep-seq-hidden   --inputs results/sweeps/seq-hidden/cpu.csv ...
                                    --out figures/sweeps_seq-hidden.png
    remat figure sweep-layer-timing --inputs results/sweeps/layer-timing/cpu.csv ...
                                    --out figures/sweeps_layer-timing.png

Points that ran out of memory ("oom") or were not run ("skipped_too_large") are drawn as crosses at their
closed-form value. A figure never measures: it reads the tables.
"""

from __future__ import annotations

import math

import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import NullFormatter

from remat.analysis.sweeps_tables import depth_fits, devices, ok
from remat.analysis.tolerances import TIME_MODEL_BAND  # the grey band of the time-model figure
from remat.units import MiB  # axis unit: 2**20 bytes


def _grid(frames: list[pd.DataFrame], columns: int, width: float = 3.3, height: float = 3.0):
    """(frame of all inputs, its devices, Figure, axes[device row][column]). Panels are small in inches so that
    their text stays legible at the report's ~8-inch text width."""
    frame = pd.concat(frames, ignore_index=True)
    found = devices(frame)
    fig = Figure(figsize=(width * columns, height * max(1, len(found))))
    axes = fig.subplots(max(1, len(found)), columns, squeeze=False)
    return frame, found, fig, axes


def _not_run(ax, part: pd.DataFrame, x: str, y: str, scale: float = 1.0) -> None:
    """Crosses at the closed-form value of points that did not run (oom / skipped_too_large)."""
    missing = part[part["status"] != "ok"]
    if len(missing):
        ax.plot(missing[x], missing[y] / scale, "x", color="red", ms=7, label="not run (oom / too large)")


def _log_ticks(ax, values) -> None:
    """Label a log x axis at the swept values only (no crowded minor labels)."""
    values = sorted({int(v) for v in values})
    ax.set_xticks(values, [str(v) for v in values])
    ax.xaxis.set_minor_formatter(NullFormatter())


def _finish(fig: Figure, axes) -> Figure:
    for ax in axes.flat:
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def segments(frames: list[pd.DataFrame]) -> Figure:
    """sweep-segments: (1) saved and peak activation MiB against k with the closed forms, k = √L and the
    measured optimum marked; (2) recompute FLOPs against k with (L − n_last)·(24bsh² + 4bs²h); (3) time
    overhead and FLOP overhead (%) against k."""
    frame, found, fig, axes = _grid(frames, 3)
    for row, device in zip(axes, found):
        part = frame[frame["device"] == device].sort_values("k")
        good = ok(part)
        memory, flops, time = row
        L = int(part["layers"].iloc[0])
        memory.plot(part["k"], part["saved_bytes_formula"] / MiB, "-", color="C0", label="saved: closed form")
        memory.plot(good["k"], good["saved_bytes"] / MiB, "o", color="C0", mfc="none", label="saved: measured")
        memory.plot(part["k"], part["peak_activation_bytes_formula"] / MiB, "--", color="C1",
                    label="peak: live saved (closed form)")
        memory.plot(good["k"], good["peak_activation_bytes"] / MiB, "s", color="C1", ms=4, mfc="none",
                    label="peak above model state: measured")
        _not_run(memory, part, "k", "peak_activation_bytes_formula", MiB)
        memory.axvline(math.sqrt(L), color="grey", ls=":", label=f"k = √L = {math.sqrt(L):.3g}")
        if len(good):
            best = int(good.loc[good["peak_activation_bytes"].idxmin(), "k"])
            memory.axvline(best, color="C2", ls="-.", label=f"measured optimum k = {best}")
        memory.set(xlabel="segments k", ylabel="MiB (2^20 B)", title=f"{device}: memory, L = {L}")
        flops.plot(part["k"], part["flops_recompute_formula"] / 1e9, "-", color="C0", label="closed form")
        flops.plot(good["k"], good["flops_recompute"] / 1e9, "o", color="C1", mfc="none", label="FlopCounterMode")
        flops.set(xlabel="segments k", ylabel="recompute GFLOP (10^9)", title=f"{device}: recompute FLOPs")
        time.plot(part["k"], 100 * part["flop_overhead_formula"], "-", color="C0", label="FLOP overhead (closed form)")
        if "time_overhead" in good and good["time_overhead"].notna().any():
            time.plot(good["k"], 100 * good["time_overhead"], "o-", color="C3", mfc="none", lw=0.8,
                      label="step-time overhead (vs k = 1)")
        time.set(xlabel="segments k", ylabel="overhead (%)", title=f"{device}: cost of recompute")
    return _finish(fig, axes)


def depth(frames: list[pd.DataFrame]) -> Figure:
    """sweep-depth: log–log peak activation MiB against L per family (none, √L segments, per-layer full),
    measured markers over closed-form lines; fitted exponents in the legend
    (remat.analysis.sweeps_tables.depth_fits)."""
    frame, found, fig, axes = _grid(frames, 1, width=6.0, height=4.2)
    fits = depth_fits(frame)
    for (ax,), device in zip(axes, found):
        part = frame[frame["device"] == device]
        for i, (family, fam) in enumerate(part.groupby("family", sort=False)):
            fam = fam.sort_values("layers")
            good = ok(fam)
            fit = fits[(fits["device"] == device) & (fits["family"] == family)]
            label = f"{family}: L^{fit['exponent'].iloc[0]:.2f}" if len(fit) else family
            ax.loglog(fam["layers"], fam["peak_activation_bytes_formula"] / MiB, "-", color=f"C{i}", lw=1)
            ax.loglog(good["layers"], good["peak_activation_bytes"] / MiB, "os^D"[i % 4], color=f"C{i}",
                      mfc="none", label=label + " (measured; line: closed form)")
            _not_run(ax, fam, "layers", "peak_activation_bytes_formula", MiB)
        _log_ticks(ax, part["layers"])
        ax.set(xlabel="layers L", ylabel="peak above model state (MiB)", title=f"{device}: peak against depth")
    return _finish(fig, axes)


def seq_hidden(frames: list[pd.DataFrame]) -> Figure:
    """sweep-seq-hidden: (1) per-layer saved MiB against s for none/selective/full, measured over the closed
    form; (2) the paper-faithful sbh and as²b parts of a layer (mode none) against s, crossing at
    s* = 34h/(5a); (3) the same against h, crossing at h* = 5as/34."""
    frame, found, fig, axes = _grid(frames, 3)
    for row, device in zip(axes, found):
        part = frame[frame["device"] == device]
        seq = part[part["axis"] == "seq"].sort_values("seq")
        for i, (mode, m) in enumerate(seq.groupby("mode", sort=False)):
            row[0].loglog(m["seq"], m["saved_per_layer_formula"] / MiB, "-", color=f"C{i}", lw=1)
            row[0].loglog(ok(m)["seq"], ok(m)["saved_per_layer_bytes"] / MiB, "os^"[i % 3], color=f"C{i}",
                          mfc="none", label=f"{mode}")
            _not_run(row[0], m, "seq", "saved_per_layer_formula", MiB)
        _log_ticks(row[0], seq["seq"])
        row[0].set(xlabel="sequence length s", ylabel="saved per layer (MiB)",
                   title=f"{device}: per layer (line: closed form)")
        for ax, axis, x in ((row[1], "seq", "seq"), (row[2], "hidden", "hidden")):
            none = part[(part["axis"] == axis) & (part["mode"] == "none")].sort_values(x)
            good = ok(none)
            ax.loglog(none[x], none["sbh_term_formula"] / MiB, "-", color="C0", lw=1)
            ax.loglog(none[x], none["as2b_term_formula"] / MiB, "-", color="C1", lw=1)
            ax.loglog(good[x], good["sbh_term_measured"] / MiB, "o", color="C0", mfc="none", label="sbh part (34sbh)")
            ax.loglog(good[x], good["as2b_term_measured"] / MiB, "s", color="C1", mfc="none",
                      label="as²b part (5as²b)")
            if len(none):
                h, a, s = int(none["hidden"].iloc[0]), int(none["heads"].iloc[0]), int(none["seq"].iloc[0])
                star = float(none["crossover_seq_formula"].iloc[0]) if axis == "seq" else 5 * a * s / 34
                name = (f"s* = 34h/(5a) = {star:.1f} (h = {h})" if axis == "seq"
                        else f"h* = 5as/34 = {star:.1f} (s = {s})")
                ax.axvline(star, color="grey", ls=":", label=name)
            _log_ticks(ax, none[x])
            ax.set(xlabel="sequence length s" if axis == "seq" else "hidden size h",
                   ylabel="paper-faithful bytes per layer (MiB)", title=f"{device}: Eq. 1 terms against {axis}")
    return _finish(fig, axes)


def layer_timing(frames: list[pd.DataFrame]) -> Figure:
    """sweep-layer-timing (Korthikanti Table 4): forward and backward milliseconds per layer per mode
    (stacked bars, median), time overhead and FLOP-predicted overhead written above each bar."""
    frame, found, fig, axes = _grid(frames, 1, width=6.0, height=4.0)
    for (ax,), device in zip(axes, found):
        part = ok(frame[frame["device"] == device])
        x = range(len(part))
        fwd, bwd = part["forward_s"] * 1e3, part["backward_s"] * 1e3
        ax.bar(x, fwd, color="C0", label="forward")
        ax.bar(x, bwd, bottom=fwd, color="C1", label="backward (incl. recompute)")
        for i, (_, r) in enumerate(part.iterrows()):
            ax.text(i, (r["forward_s"] + r["backward_s"]) * 1e3, f"time +{100 * r['time_overhead']:.0f}%\n"
                    f"FLOPs +{100 * r['flop_overhead_formula']:.1f}%", ha="center", va="bottom", fontsize=8)
        ax.set_xticks(list(x), list(part["mode"]))
        ax.set(ylabel="ms per layer (median)", title=f"{device}: one layer, s = {int(part['seq'].iloc[0])}, "
               f"h = {int(part['hidden'].iloc[0])}" if len(part) else device)
        ax.margins(y=0.25)
    return _finish(fig, axes)


def time_model(frames: list[pd.DataFrame]) -> Figure:
    """sweep-time-model: the roofline time model's predicted ms per layer against the measured ms, per phase
    (marker) and mode (colour), with the y = x line and a ±TIME_MODEL_BAND band; one panel per device."""
    frame, found, fig, axes = _grid(frames, 1, width=5.5, height=4.6)
    markers = {"forward": "o", "backward": "s", "combined": "^"}
    colors = {"none": "C0", "selective": "C1", "full": "C3"}
    for (ax,), device in zip(axes, found):
        part = frame[frame["device"] == device]
        for (mode, phase), rows in part.groupby(["mode", "phase"], sort=False):
            ax.plot(rows["measured_s"] * 1e3, rows["predicted_s"] * 1e3, markers[phase], color=colors[mode],
                    label=f"{mode} {phase}", ms=6, alpha=0.85)
        lo, hi = 0.5 * part["measured_s"].min() * 1e3, 2 * part["measured_s"].max() * 1e3
        ax.plot([lo, hi], [lo, hi], color="black", lw=0.8, label="predicted = measured")
        low, high = 1 - TIME_MODEL_BAND.value, 1 + TIME_MODEL_BAND.value
        ax.fill_between([lo, hi], [low * lo, low * hi], [high * lo, high * hi], color="grey", alpha=0.15,
                        label=f"±{100 * TIME_MODEL_BAND.value:g} %")
        ax.set(xscale="log", yscale="log", xlabel="measured ms per layer (median)", ylabel="predicted ms (roofline)",
               title=f"{device}: roofline at measured rates, h = "
                     f"{', '.join(str(int(h)) for h in sorted(part['hidden'].unique()))}")
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.yaxis.set_minor_formatter(NullFormatter())
    fig_ = _finish(fig, axes)
    for ax in axes.flat:
        ax.legend(fontsize=6, ncol=2)
    return fig_
