"""The rows of the offload-breakeven table: the break-even model of remat.formulas.offload over a grid, and
the measured offload-steps sizes placed on it with the measured link fit.

* ``grid_rows``     — kind = "grid": the frontier at paper-like sizes over (s, h, achieved FLOP/s, BW).
* ``measured_rows`` — kind = "measured" (the model's costs beside the measured overheads at each measured
  size) and kind = "curve" (the model at that size over a bandwidth sweep).
* ``copies_per_layer`` — the grid's default copies per layer: what the offload hooks copy from a GPT layer.

Times are seconds per step (per layer where the column says so), bandwidths GB/s (10^9 bytes/s), bytes int.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch

from remat.formulas.korthikanti import layer_bytes
from remat.formulas.offload import Link, breakeven_bandwidth, exposed_offload_s, layer_compute_s
from remat.measure.bandwidth import DIRECTIONS
from remat.units import KiB


def copies_per_layer(min_bytes: int = KiB) -> int:
    """Storages the offload hooks copy per GPT layer (int): measured on one gpt-tiny layer (s = 32, b = 2,
    h = 64, dropout on) with ``min_bytes`` chosen so every activation (≥ sbh bytes) moves and the LayerNorm
    statistics (s·b floats) stay, as they would under a 64 KiB threshold at paper sizes."""
    from remat.models.presets import from_name
    from remat.models.transformer import build_model, random_tokens
    from remat.offload import OffloadHooks
    cfg = from_name("gpt-tiny", layers=1)
    torch.manual_seed(0)
    model = build_model(cfg)
    hooks = OffloadHooks("cpu", min_bytes=min_bytes, keep=model)
    with hooks.layer():
        model.layers[0](model.embed(random_tokens(cfg)))
    return hooks.copies


def grid_rows(seqs: list[int], hiddens: list[int], b: int, rates: list[float], bandwidths_gb_s: list[float],
              t0_s: float, tensors: int) -> list[dict]:
    """kind = "grid": per (s, h, achieved FLOP/s, BW in GB/s), the exposed offload time of one layer
    (``tensors`` copies each way, per-copy latency ``t0_s``), its full and selective recompute times, the
    cheapest of the three ("best") and the break-even bandwidths against full and selective (GB/s).
    Layers of Korthikanti's shape: a = h/128, ``b`` sequences, bytes = Korthikanti Eq. 1 at 16 bits."""
    rows = []
    for s in seqs:
        for h in hiddens:
            a = max(1, h // 128)
            nbytes = layer_bytes(s, b, h, a)  # everything the layer saves
            for rate in rates:
                c = layer_compute_s(s, b, h, rate)
                be = {k: breakeven_bandwidth(nbytes, tensors, c["forward_s"], c["backward_s"],
                                             c[f"{k}_recompute_s"], t0_s) for k in ("full", "selective")}
                for bw in bandwidths_gb_s:
                    exposed = exposed_offload_s(nbytes, tensors, c["forward_s"], c["backward_s"],
                                                Link.symmetric(bw * 1e9, t0_s))
                    costs = {"offload": exposed, "selective": c["selective_recompute_s"],
                             "full": c["full_recompute_s"]}
                    rows.append({"kind": "grid", "s": s, "h": h, "a": a, "b": b, "flops_per_s": rate,
                                 "bw_gb_s": bw, "t0_s": t0_s, "tensors": tensors, "layer_bytes": nbytes,
                                 "forward_s": c["forward_s"], "backward_s": c["backward_s"],
                                 "offload_exposed_s": exposed, "selective_recompute_s": costs["selective"],
                                 "full_recompute_s": costs["full"], "best": min(costs, key=costs.get),
                                 "breakeven_full_gb_s": be["full"] / 1e9,
                                 "breakeven_selective_gb_s": be["selective"] / 1e9})
    return rows


def offload_link(bandwidth: pd.DataFrame) -> tuple[dict, str]:
    """Per direction, the measured fit of copies alone (pinned host memory when there is any, the way the
    hooks copy) from an offload-bandwidth table; returns ({"d2h": (t0_s, bw bytes/s), "h2d": ...},
    memory kind)."""
    alone = bandwidth[~bandwidth["overlap"].astype(bool)]
    memory = "pinned" if (alone["memory"] == "pinned").any() else "pageable"
    fits = alone[alone["memory"] == memory].groupby("direction")[["fit_t0_s", "fit_bw_gb_s"]].first()
    return {d: (float(fits.loc[d, "fit_t0_s"]), float(fits.loc[d, "fit_bw_gb_s"]) * 1e9) for d in DIRECTIONS}, memory


def measured_rows(steps: pd.DataFrame, bandwidth: pd.DataFrame) -> list[dict]:
    """kind = "measured" (one row per measured size) and kind = "curve" (the model at that size over a
    bandwidth sweep): the model's offload / full / selective costs per step beside the measured overheads.

    Per measured size: nbytes and tensors per layer are what the offload policy copied (÷ L); the link is
    the measured fit (``offload_link``; t0 the larger of the two directions'); FLOP/s is the achieved rate
    of `none` (FlopCounterMode FLOPs / step time). Two offload models: "overlap" (copies hidden under the
    layer's forward/backward, remat.formulas.offload) and "serial" (nothing overlaps: both copies exposed)
    — the CPU simulation has no copy engine, so "serial" is the one that applies there.
    """
    link, memory = offload_link(bandwidth)
    t0 = max(link["d2h"][0], link["h2d"][0])
    rows = []
    for (s, h), part in steps.groupby(["s", "h"]):
        v = part.set_index("variant")
        L, b = int(v.loc["none", "L"]), int(v.loc["none", "b"])
        rate = float(v.loc["none", "achieved_flops_s"])
        nbytes = int(v.loc["offload", "offloaded_bytes"]) // L
        tensors = int(v.loc["offload", "offloaded_tensors"]) // L
        c = layer_compute_s(int(s), b, int(h), rate)
        measured_link = Link(link["d2h"][1], link["h2d"][1], t0)
        predicted = {
            "offload_overlap": L * exposed_offload_s(nbytes, tensors, c["forward_s"], c["backward_s"], measured_link),
            "offload_serial": L * exposed_offload_s(nbytes, tensors, 0.0, 0.0, measured_link),
            "full": L * c["full_recompute_s"], "selective": L * c["selective_recompute_s"]}
        measured = {k: float(v.loc[k, "overhead_vs_none_s"]) for k in ("offload", "full", "selective")}
        base = {"s": int(s), "h": int(h), "a": int(v.loc["none", "a"]), "b": b, "L": L, "flops_per_s": rate,
                "t0_s": t0, "tensors": tensors, "layer_bytes": nbytes, "memory": memory,
                "forward_s": c["forward_s"], "backward_s": c["backward_s"],
                "step_time_none_s": float(v.loc["none", "step_time_s"]),
                "breakeven_full_gb_s": breakeven_bandwidth(nbytes, tensors, c["forward_s"], c["backward_s"],
                                                           c["full_recompute_s"], t0) / 1e9,
                "breakeven_selective_gb_s": breakeven_bandwidth(
                    nbytes, tensors, c["forward_s"], c["backward_s"], c["selective_recompute_s"], t0) / 1e9}
        bw_measured = min(link["d2h"][1], link["h2d"][1]) / 1e9
        rows.append({"kind": "measured", **base, "bw_gb_s": bw_measured,
                     **{f"predicted_{k}_s": x for k, x in predicted.items()},
                     **{f"measured_{k}_s": x for k, x in measured.items()},
                     "best_measured": min(measured, key=measured.get)})
        for bw in np.geomspace(bw_measured / 30, bw_measured * 30, 25):
            sym = Link.symmetric(bw * 1e9, t0)
            rows.append({"kind": "curve", **base, "bw_gb_s": float(bw),
                         "predicted_offload_overlap_s": L * exposed_offload_s(
                             nbytes, tensors, c["forward_s"], c["backward_s"], sym),
                         "predicted_offload_serial_s": L * exposed_offload_s(nbytes, tensors, 0.0, 0.0, sym),
                         "predicted_full_s": predicted["full"], "predicted_selective_s": predicted["selective"]})
    return rows
