"""The rows of the offload-breakeven table: offload against recompute AT EQUAL FREED BYTES, over a grid of GPU
presets and layer sizes, and the measured offload-steps sizes placed on the model with the measured link fit.

* ``grid_rows``     — kind = "grid": per (GPU preset, s, h), two comparisons (remat.formulas.offload, "equal
  freed bytes"): offloading the 5as²b/t bytes selective recompute frees vs selective's recompute, and
  offloading the bytes full recompute frees (the whole layer less its input) vs full's recompute. Times
  from the per-op roofline (remat.timemodel.predict), the link each GPU gets when the GPUs on its
  host-link uplink copy at once (GPU.link), the host memory per GPU.
* ``measured_rows`` — kind = "measured" (the model's costs beside the measured overheads at each measured
  size, with the bytes each variant freed) and kind = "curve" (the model at that size over a bandwidth
  sweep).

Times are seconds per layer (grid) or per step (measured), bandwidths GB/s (10^9 bytes/s), bytes int.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from remat.formulas.korthikanti import layer_bytes
from remat.formulas.offload import (EQUAL_BYTES, Link, breakeven_bandwidth, equal_bytes, exposed_offload_s, freed_bytes,
                                    freed_copies, layer_compute_s)
from remat.measure.bandwidth import DIRECTIONS
from remat.models.presets import from_name
from remat.timemodel.layer import predict

GRID_MODEL = "gpt3-175b"
"""The preset the grid's layers are built from (Korthikanti Table 3; s, h, a = h/128, b, t overridden)."""
TIME_SOURCE = "remat.timemodel.predict (per-op roofline at the GPU preset's rates)"


def grid_layer(s: int, h: int, b: int, t: int):
    """The GPT layer of the grid (ModelConfig): Korthikanti's shape, a = h/128 heads (≥ 1), MLP 4h, one layer,
    ``b`` sequences of ``s`` tokens, tensor-parallel size ``t``."""
    return from_name(GRID_MODEL, seq=s, hidden=h, heads=max(1, h // 128), ffn_hidden=4 * h, micro_batch=b,
                     tp=t, layers=1)


def grid_rows(seqs: list[int], hiddens: list[int], b: int, t: int, sp: bool, gpus: list) -> list[dict]:
    """kind = "grid": one row per (GPU preset in ``gpus`` — remat.timemodel.gpus.GPU, overrides applied —,
    s, h), one layer, one micro-batch, one TP rank of t.

    Columns: the layer (s, h, a, b, t, sp, layer_bytes = bytes saved under none, Korthikanti Table 2),
    forward_s / backward_s (none: the compute the copies hide under, seconds), the GPU (gpu, flops_per_s
    achievable, link_gb_s = the link's own GB/s per direction, gpus_per_host_link, link_per_gpu_gb_s = the
    share one GPU gets, t0_s, host_memory_bytes per GPU, host_source), and per recompute mode k in
    (selective, full) at EQUAL FREED BYTES: freed_k_bytes (what k frees = what the offload moves),
    copies_k, k_recompute_s (roofline), offload_k_exposed_s (the offload at link_per_gpu_gb_s, overlapped
    with forward/backward), breakeven_k_gb_s (GB/s per direction; offload is cheaper above it), cheaper_k
    ("offload" or k) and host_layers_k (how many layer-micro-batches of that offload host_memory_bytes
    holds)."""
    rows = []
    for g in gpus:
        for s in seqs:
            for h in hiddens:
                cfg = grid_layer(s, h, b, t)
                a = cfg.heads
                none = predict(cfg, g, "none", t=t, sp=sp)
                fwd, bwd = none.forward_s, none.backward.total_s
                row = {"kind": "grid", "gpu": g.name, "gpu_name": g.full_name or g.name, "s": s, "h": h, "a": a,
                       "b": b, "t": t, "sp": sp, "layer_bytes": layer_bytes(s, b, h, a, t, sp, "none"),
                       "forward_s": fwd, "backward_s": bwd, "flops_per_s": g.flops_per_s,
                       "link_gb_s": g.link_bytes_per_s / 1e9, "gpus_per_host_link": g.gpus_per_host_link,
                       "link_per_gpu_gb_s": g.link.bw_d2h / 1e9, "t0_s": g.link_t0_s,
                       "host_memory_bytes": g.host_memory_bytes, "host_source": g.host_source,
                       "time_source": TIME_SOURCE}
                for k in EQUAL_BYTES:
                    cmp = equal_bytes(k, freed_bytes(s, b, h, a, t, sp, k), freed_copies(k), fwd, bwd,
                                      predict(cfg, g, k, t=t, sp=sp).recompute_s, g.link)
                    row.update({f"freed_{k}_bytes": cmp.nbytes, f"copies_{k}": cmp.copies,
                                f"{k}_recompute_s": cmp.recompute_s, f"offload_{k}_exposed_s": cmp.offload_exposed_s,
                                f"breakeven_{k}_gb_s": cmp.breakeven_bytes_per_s / 1e9, f"cheaper_{k}": cmp.cheaper,
                                f"host_layers_{k}": g.host_memory_bytes // cmp.nbytes})
                rows.append(row)
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
    of `none` (FlopCounterMode FLOPs / step time; the roofline's GPU rates do not describe this machine).
    Two offload models: "overlap" (copies hidden under the layer's forward/backward, remat.formulas.offload)
    and "serial" (nothing overlaps: both copies exposed) — the CPU simulation has no copy engine, so
    "serial" is the one that applies there.

    Freed bytes per step (device bytes held after forward: none − variant): freed_offload_bytes,
    freed_full_bytes, freed_selective_bytes. The break-evens compare at EQUAL freed bytes: offloading what
    full frees (freed_full_bytes / L per layer, 13 copies) against full's recompute, and what selective
    frees (freed_selective_bytes / L, 3 copies) against selective's; predicted_offload_selective_bytes_*_s
    is the model's offload of just selective's bytes (serial and overlapped), per step.
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
        held = v["device_held_after_forward_bytes"]
        freed = {k: int(held["none"] - held[k]) for k in ("offload", "full", "selective")}
        c = layer_compute_s(int(s), b, int(h), rate)
        measured_link = Link(link["d2h"][1], link["h2d"][1], t0)
        fwd, bwd = c["forward_s"], c["backward_s"]
        sel_bytes, sel_copies = max(0, freed["selective"]) // L, freed_copies("selective")
        predicted = {
            "offload_overlap": L * exposed_offload_s(nbytes, tensors, fwd, bwd, measured_link),
            "offload_serial": L * exposed_offload_s(nbytes, tensors, 0.0, 0.0, measured_link),
            "offload_selective_bytes_overlap": L * exposed_offload_s(sel_bytes, sel_copies, fwd, bwd, measured_link),
            "offload_selective_bytes_serial": L * exposed_offload_s(sel_bytes, sel_copies, 0.0, 0.0, measured_link),
            "full": L * c["full_recompute_s"], "selective": L * c["selective_recompute_s"]}
        measured = {k: float(v.loc[k, "overhead_vs_none_s"]) for k in ("offload", "full", "selective")}
        base = {"s": int(s), "h": int(h), "a": int(v.loc["none", "a"]), "b": b, "L": L, "flops_per_s": rate,
                "t0_s": t0, "tensors": tensors, "layer_bytes": nbytes, "memory": memory,
                "forward_s": fwd, "backward_s": bwd,
                "step_time_none_s": float(v.loc["none", "step_time_s"]),
                **{f"freed_{k}_bytes": x for k, x in freed.items()},
                "breakeven_full_gb_s": breakeven_bandwidth(max(0, freed["full"]) // L, freed_copies("full"), fwd,
                                                           bwd, c["full_recompute_s"], t0) / 1e9,
                "breakeven_selective_gb_s": breakeven_bandwidth(sel_bytes, sel_copies, fwd, bwd,
                                                                c["selective_recompute_s"], t0) / 1e9}
        bw_measured = min(link["d2h"][1], link["h2d"][1]) / 1e9
        rows.append({"kind": "measured", **base, "bw_gb_s": bw_measured,
                     **{f"predicted_{k}_s": x for k, x in predicted.items()},
                     **{f"measured_{k}_s": x for k, x in measured.items()}})
        for bw in np.geomspace(bw_measured / 30, bw_measured * 30, 25):
            sym = Link.symmetric(bw * 1e9, t0)
            rows.append({"kind": "curve", **base, "bw_gb_s": float(bw),
                         "predicted_offload_overlap_s": L * exposed_offload_s(nbytes, tensors, fwd, bwd, sym),
                         "predicted_offload_serial_s": L * exposed_offload_s(nbytes, tensors, 0.0, 0.0, sym),
                         "predicted_full_s": predicted["full"], "predicted_selective_s": predicted["selective"]})
    return rows
