"""Offload experiments (issue "[5/7] Activation offload"), each returning one tidy table:

* ``bandwidth_table``  (offload-bandwidth): host<->device copies, pinned vs pageable, both directions,
  64 KiB..max, alone and overlapped with a matmul, with the fit t = t0 + bytes/BW per group.
* ``steps_table``      (offload-steps): per (s, h) of a small GPT, a training step under none, selective,
  full, offload (remat.policies.apply_plan) and torch's save_on_cpu: step time, gradients bitwise equal to
  none, device bytes held after forward, host bytes (pinned/reserved, peak, live after the step), FLOPs.
* ``breakeven_table``  (offload-breakeven): the break-even model of remat.formulas.offload over a grid of
  (s, h, BW, achieved FLOP/s), and the measured sizes of ``steps_table`` placed on it (model vs measured).

Without CUDA the "device" is the CPU and every copy a host memcpy: rows say ``link = "simulated: host
memcpy"``, never PCIe. Run: ``remat experiment offload-steps --params '{"device": "cpu"}' --out x.csv``.
"""

from __future__ import annotations

import itertools
import weakref
from pathlib import Path

import numpy as np

import pandas as pd
import torch

from remat.errors import UsageError
from remat.experiments.params import check_known, get_int, get_int_list
from remat.experiments.progress import progress
from remat.measure.timing import intra_op_threads
from remat.measure.provenance import provenance
from remat.offload import DIRECTIONS, KiB, OffloadHooks, bandwidth_summary, link_label, resolve_device
from remat.units import parse_bytes

VARIANTS = ("none", "selective", "full", "offload", "save_on_cpu")


def _device(params: dict) -> str:
    device = params.get("device", "cpu")
    if device not in ("cpu", "cuda"):
        raise UsageError("device", f"must be cpu or cuda, got {device!r}")
    try:
        return resolve_device(device).type
    except UsageError as exc:
        raise UsageError("device", str(exc).split(": ", 1)[1]) from None


def _size(params: dict, key: str, default) -> int | None:
    value = params.get(key, default)
    return None if value is None else parse_bytes(value, key)


# --- offload-bandwidth -------------------------------------------------------------------------------------------

def bandwidth_table(params: dict) -> pd.DataFrame:
    """offload-bandwidth: one row per (direction, memory, overlap, bytes) with its group's fit.

    params: device ("cpu" | "cuda"), min_size (default "64KiB"), max_size (default 1 GiB on cuda, 256 MiB
    on cpu), repeats (most repeats per size, default 20), overlap (bool: also measure overlapped, default
    true). Columns: see remat.offload.measure_bandwidth and with_fit; bw in GB/s (10^9) and GiB/s (2^30).
    """
    check_known(params, {"device", "min_size", "max_size", "repeats", "overlap"}, "offload.bandwidth")
    device = _device(params)
    overlap = params.get("overlap", True)
    if not isinstance(overlap, bool):
        raise UsageError("overlap", f"must be true or false, got {overlap!r}")
    try:
        out = bandwidth_summary(device, _size(params, "min_size", "64KiB"), _size(params, "max_size", None),
                                get_int(params, "repeats", 20), (False, True) if overlap else (False,))
    except UsageError as exc:  # name the config key, not the CLI flag
        key = exc.field.lstrip("-").replace("-", "_")
        raise UsageError(key, str(exc).split(": ", 1)[1]) from None
    frame = pd.DataFrame(out["rows"])
    prov = provenance(device=device, dtype="uint8")
    return frame.assign(**{k: v for k, v in prov.items() if k != "device"})


# --- offload-steps -----------------------------------------------------------------------------------------------

def _model_config(params: dict, seq: int, hidden: int):
    from remat.models.presets import from_name
    return from_name(params.get("model", "gpt-tiny"), layers=get_int(params, "layers", 4), seq=seq,
                     hidden=hidden, heads=get_int(params, "heads", 4), ffn_hidden=4 * hidden,
                     micro_batch=get_int(params, "micro_batch", 2), dtype=params.get("dtype", "float32"),
                     dropout=params.get("dropout", 0.1))


class _SaveOnCpu:
    """torch.autograd.graph.save_on_cpu(pin_memory=True) around each layer (via the model's run_layers),
    with host accounting: it copies every saved tensor (views and parameters included) to a new host
    tensor; ``live_bytes`` are those alive now, ``peak_bytes`` the most since ``start()``."""

    def __init__(self, model):
        self.model, self.live_bytes, self.peak_bytes, self.tensors = model, 0, 0, 0
        self.model.run_layers = self._run_layers  # the documented per-instance hook (models.transformer)

    def start(self) -> None:
        self.peak_bytes, self.tensors = self.live_bytes, 0

    def row(self) -> dict:
        return {"host_peak_bytes": self.peak_bytes, "host_pinned": torch.cuda.is_available(),
                "offloaded_bytes": self.peak_bytes, "offloaded_tensors": self.tensors}

    def _freed(self, nbytes: int) -> None:
        self.live_bytes -= nbytes

    def _context(self):
        ctx = torch.autograd.graph.save_on_cpu(pin_memory=True)
        pack = ctx.pack_hook

        def counting_pack(t):
            device, host = pack(t)
            nbytes = host.numel() * host.element_size()
            self.live_bytes += nbytes
            self.tensors += 1
            self.peak_bytes = max(self.peak_bytes, self.live_bytes)
            weakref.finalize(host, self._freed, nbytes)
            return device, host
        ctx.pack_hook = counting_pack
        return ctx

    def _run_layers(self, x):
        for layer in self.model.layers:
            with self._context():
                x = layer(x)
        return x


class _PolicyOffload:
    """Host accounting of the ``offload`` policy: the model's remat.offload.OffloadHooks (made by
    remat.policies at the first offloaded forward) and its pool."""

    def __init__(self, model, min_bytes: int | None):
        self.model, self.min_bytes = model, min_bytes

    @property
    def hooks(self):
        return self.model.remat_offload.hooks

    @property
    def live_bytes(self) -> int:
        return self.hooks.pool.live_bytes if self.hooks is not None else 0

    def start(self) -> None:
        if self.min_bytes is not None:
            self.hooks.min_bytes = self.min_bytes
        self.hooks.pool.reset_peak()
        self.hooks.reset_counters()

    def row(self) -> dict:
        pool, stats = self.hooks.pool, self.hooks.stats()
        return {"host_reserved_bytes": pool.reserved_bytes, "host_peak_bytes": pool.peak_live_bytes,
                "host_pinned": pool.pin, "offloaded_bytes": stats["offloaded_bytes"],
                "kept_bytes": stats["kept_bytes"], "min_bytes": stats["min_bytes"],
                "offloaded_tensors": stats["copies"]}


def _setup(model, variant: str, min_bytes: int | None):
    """Apply ``variant`` to ``model``; returns its host accounting (None when nothing leaves the device)."""
    from remat.policies import apply_plan, clear_plan
    clear_plan(model)
    if variant == "save_on_cpu":
        return _SaveOnCpu(model)
    apply_plan(model, variant)
    return _PolicyOffload(model, min_bytes) if variant == "offload" else None


def _one_step(model, tokens, seed: int, on_forward=None) -> tuple[dict, float]:
    """Forward + backward with a fixed seed; returns ({name: grad}, loss) and clears the grads."""
    from remat.models.transformer import lm_loss
    torch.manual_seed(seed)
    loss = lm_loss(model(tokens), tokens)
    if on_forward is not None:
        on_forward()
    loss.backward()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)
    return grads, float(loss.detach())


def _measure_variant(model, tokens, variant: str, reference: dict, device: str, seed: int,
                     min_bytes: int | None) -> dict:
    """One measured step of ``variant``: gradients vs ``reference``, device and host bytes (no timing)."""
    from remat.measure.peak import PeakMemory
    host = _setup(model, variant, min_bytes)
    _one_step(model, tokens, seed)  # warm-up: sizes the host pool, so the measured step allocates none
    if host is not None:
        host.start()
    seen = {}
    with PeakMemory(device, model, tokens) as mem:
        before = mem.current_bytes()

        def after_forward():
            seen["held"] = mem.current_bytes() - before
            seen["host"] = host.live_bytes if host is not None else 0
        grads, loss = _one_step(model, tokens, seed, after_forward)
    equal = grads.keys() == reference.keys() and all(torch.equal(grads[k], reference[k]) for k in grads)
    host_in_device_memory = device == "cpu"  # the simulated host buffers are CPU memory, like the "device"
    row = {"variant": variant, "grads_bitwise_equal": bool(equal), "loss": loss,
           "device_held_after_forward_bytes": int(seen["held"] - (seen["host"] if host_in_device_memory else 0)),
           "peak_bytes": mem.peak_bytes, "peak_method": mem.method,
           "peak_includes_host_copies": host_in_device_memory, "host_bytes_after_forward": int(seen["host"]),
           "host_live_after_step_bytes": host.live_bytes if host is not None else 0,
           "host_reserved_bytes": None, "host_peak_bytes": None, "host_pinned": None,
           "offloaded_bytes": None, "kept_bytes": None, "min_bytes": None, "offloaded_tensors": None}
    if host is not None:
        row.update(host.row())
    return row


def steps_table(params: dict) -> pd.DataFrame:
    """offload-steps: a training step of a small GPT at each (s, h) under each variant of VARIANTS.

    params: device, model (default "gpt-tiny"), layers (4), heads (4), micro_batch (2), dtype ("float32"),
    dropout (0.1), seqs ([64, 128]), hiddens ([64, 128]), repeats (≥ 5, default 5), rounds (2: variants
    timed in turn, round after round), seed (0), min_bytes (offload threshold, e.g. "64KiB"; default: the
    policy's), threads (torch intra-op threads; default 1 on cpu: on a shared 2-core machine OpenMP's
    spin-waiting threads make step times swing by 10x under load; recorded in the ``threads`` column).
    Columns: s, h, b, L, variant, grads_bitwise_equal (vs none, same seed, dropout active), step_time_s
    (median) and _iqr_s, device_held_after_forward_bytes (bytes alive on the device after forward: saved
    activations and the loss; host copies excluded), peak_bytes (+ method; on the CPU it includes the
    simulated host copies), host_* (bytes: pool reserved = pinned on CUDA, peak live, live after the
    step), offloaded_bytes / offloaded_tensors (copies) / kept_bytes per step, flops_model (forward + backward, FlopCounterMode),
    achieved_flops_s (flops_model / step time of none), link, provenance.
    """
    check_known(params, {"device", "model", "layers", "heads", "micro_batch", "dtype", "dropout", "seqs",
                         "hiddens", "repeats", "rounds", "seed", "min_bytes", "threads"}, "offload.steps")
    device = _device(params)
    seqs, hiddens = get_int_list(params, "seqs", [64, 128]), get_int_list(params, "hiddens", [64, 128])
    repeats = get_int(params, "repeats", 5, minimum=5)
    rounds = get_int(params, "rounds", 2)
    seed = get_int(params, "seed", 0, minimum=0)
    min_bytes = _size(params, "min_bytes", None)
    threads = get_int(params, "threads", 1 if device == "cpu" else torch.get_num_threads())
    rows = []
    with intra_op_threads(threads):
        for s, h in progress(itertools.product(seqs, hiddens), "offload-steps (s, h)"):
            rows += _measure_size(_model_config(params, s, h), device, repeats, rounds, seed, min_bytes)
    for row in rows:
        row["threads"] = threads
    prov = provenance(device=device, dtype=params.get("dtype", "float32"), seed=seed)
    return pd.DataFrame(rows).assign(**{k: v for k, v in prov.items() if k not in ("device", "dtype")})


def _time_variants(model, tokens, device: str, repeats: int, rounds: int, seed: int,
                   min_bytes: int | None) -> dict[str, dict]:
    """Step time per variant: ``rounds`` rounds, each timing every variant in turn (remat.measure.timing,
    1 warm-up + ``repeats``), so a load change on a shared machine hits all variants alike; median and IQR
    over all samples (seconds)."""
    from remat.measure.timing import time_step
    samples: dict[str, list[float]] = {v: [] for v in VARIANTS}
    method = None
    for _ in range(rounds):
        for variant in VARIANTS:
            _setup(model, variant, min_bytes)
            timing = time_step(lambda: _one_step(model, tokens, seed), device, warmup=1, repeats=repeats)
            samples[variant] += timing.samples_s
            method = timing.method
    out = {}
    for variant, xs in samples.items():
        q25, q50, q75 = np.percentile(xs, [25, 50, 75])
        out[variant] = {"step_time_s": float(q50), "step_time_iqr_s": float(q75 - q25),
                        "step_time_samples": len(xs), "timing_method": method}
    return out


def _measure_size(cfg, device: str, repeats: int, rounds: int, seed: int, min_bytes: int | None) -> list[dict]:
    from remat.measure.flops import count_step_flops
    from remat.models.transformer import build_model, lm_loss, random_tokens
    from remat.policies import clear_plan
    torch.manual_seed(seed)
    model = build_model(cfg, device=device)
    tokens = random_tokens(cfg, device=device)
    flops = count_step_flops(lambda: lm_loss(model(tokens), tokens))
    model.zero_grad(set_to_none=True)
    reference, _ = _one_step(model, tokens, seed)
    rows = [_measure_variant(model, tokens, v, reference, device, seed, min_bytes) for v in VARIANTS]
    for row in rows:
        row.update(_time_variants(model, tokens, device, repeats, rounds, seed, min_bytes)[row["variant"]])
    clear_plan(model)
    t_none = next(r["step_time_s"] for r in rows if r["variant"] == "none")
    model_flops = flops.forward + flops.backward
    base = {"model": cfg.name, "s": cfg.seq, "h": cfg.hidden, "a": cfg.heads, "b": cfg.micro_batch,
            "L": cfg.layers, "dtype": cfg.dtype, "device": device, "link": link_label(device),
            "flops_model": model_flops, "achieved_flops_s": model_flops / t_none}
    return [{**base, **row, "overhead_vs_none_s": row["step_time_s"] - t_none} for row in rows]



# --- offload-breakeven -------------------------------------------------------------------------------------------

def copies_per_layer(min_bytes: int = KiB) -> int:
    """Storages the offload hooks copy per GPT layer (int): measured on one gpt-tiny layer (s = 32, b = 2,
    h = 64, dropout on) with ``min_bytes`` chosen so every activation (≥ sbh bytes) moves and the LayerNorm
    statistics (s·b floats) stay, as they would under a 64 KiB threshold at paper sizes."""
    from remat.models.presets import from_name
    from remat.models.transformer import build_model, random_tokens
    cfg = from_name("gpt-tiny", layers=1)
    torch.manual_seed(0)
    model = build_model(cfg)
    hooks = OffloadHooks("cpu", min_bytes=min_bytes, keep=model)
    with hooks.layer():
        model.layers[0](model.embed(random_tokens(cfg)))
    return hooks.copies


def _offload_link(bandwidth: pd.DataFrame) -> tuple[dict, str]:
    """Per direction, the measured fit of copies alone (pinned host memory when there is any, the way the
    hooks copy); returns ({"d2h": (t0_s, bw B/s), "h2d": ...}, memory kind)."""
    alone = bandwidth[~bandwidth["overlap"].astype(bool)]
    memory = "pinned" if (alone["memory"] == "pinned").any() else "pageable"
    fits = alone[alone["memory"] == memory].groupby("direction")[["fit_t0_s", "fit_bw_gb_s"]].first()
    return {d: (float(fits.loc[d, "fit_t0_s"]), float(fits.loc[d, "fit_bw_gb_s"]) * 1e9) for d in DIRECTIONS}, memory


def _grid_rows(params: dict, tensors: int) -> list[dict]:
    """kind = "grid": the break-even frontier at paper-like sizes over (s, h, achieved FLOP/s, BW)."""
    from remat.formulas import korthikanti as K
    from remat.formulas import offload as F
    b, t0 = get_int(params, "micro_batch", 1), float(params.get("t0_s", 10e-6))
    rows = []
    for s in get_int_list(params, "seqs", [512, 1024, 2048, 4096, 8192]):
        for h in get_int_list(params, "hiddens", [2048, 4096, 8192, 12288]):
            a = max(1, h // 128)
            nbytes = K.layer_bytes(s, b, h, a)  # Korthikanti Eq. 1 at 16 bits: everything the layer saves
            for rate in _float_list(params, "flops_per_s", [100e12, 300e12, 600e12]):
                c = F.layer_compute_s(s, b, h, rate)
                be = {k: F.breakeven_bandwidth(nbytes, tensors, c["forward_s"], c["backward_s"],
                                               c[f"{k}_recompute_s"], t0) for k in ("full", "selective")}
                for bw in _float_list(params, "bandwidths_gb_s", [8, 16, 25, 50, 100, 200]):
                    exposed = F.exposed_offload_s(nbytes, tensors, c["forward_s"], c["backward_s"],
                                                  F.Link.symmetric(bw * 1e9, t0))
                    costs = {"offload": exposed, "selective": c["selective_recompute_s"],
                             "full": c["full_recompute_s"]}
                    rows.append({"kind": "grid", "s": s, "h": h, "a": a, "b": b, "flops_per_s": rate,
                                 "bw_gb_s": bw, "t0_s": t0, "tensors": tensors, "layer_bytes": nbytes,
                                 "forward_s": c["forward_s"], "backward_s": c["backward_s"],
                                 "offload_exposed_s": exposed, "selective_recompute_s": costs["selective"],
                                 "full_recompute_s": costs["full"], "best": min(costs, key=costs.get),
                                 "breakeven_full_gb_s": be["full"] / 1e9,
                                 "breakeven_selective_gb_s": be["selective"] / 1e9})
    return rows


def _float_list(params: dict, key: str, default: list[float]) -> list[float]:
    values = params.get(key, default)
    if not isinstance(values, list) or not values or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 for v in values):
        raise UsageError(key, f"must be a non-empty list of positive numbers, got {values!r}")
    return [float(v) for v in values]


def _measured_rows(steps: pd.DataFrame, bandwidth: pd.DataFrame, params: dict) -> list[dict]:
    """kind = "measured" (one row per measured size) and kind = "curve" (the model at that size over a
    bandwidth sweep): the model's offload / full / selective costs per step beside the measured overheads.

    Per measured size: nbytes and tensors per layer are what the offload policy copied (÷ L); the link is
    the measured fit; FLOP/s is the achieved rate of `none` (FlopCounterMode FLOPs / step time). Two
    offload models: "overlap" (copies hidden under the layer's forward/backward, remat.formulas.offload) and
    "serial" (nothing overlaps: both copies exposed) — the CPU simulation has no copy engine, so "serial" is
    the one that applies there.
    """
    from remat.formulas import offload as F
    link, memory = _offload_link(bandwidth)
    t0 = max(link["d2h"][0], link["h2d"][0])
    rows = []
    for (s, h), part in steps.groupby(["s", "h"]):
        v = part.set_index("variant")
        L, b = int(v.loc["none", "L"]), int(v.loc["none", "b"])
        rate = float(v.loc["none", "achieved_flops_s"])
        nbytes = int(v.loc["offload", "offloaded_bytes"]) // L
        tensors = int(v.loc["offload", "offloaded_tensors"]) // L
        c = F.layer_compute_s(int(s), b, int(h), rate)
        measured_link = F.Link(link["d2h"][1], link["h2d"][1], t0)
        predicted = {
            "offload_overlap": L * F.exposed_offload_s(nbytes, tensors, c["forward_s"], c["backward_s"], measured_link),
            "offload_serial": L * F.exposed_offload_s(nbytes, tensors, 0.0, 0.0, measured_link),
            "full": L * c["full_recompute_s"], "selective": L * c["selective_recompute_s"]}
        measured = {k: float(v.loc[k, "overhead_vs_none_s"]) for k in ("offload", "full", "selective")}
        base = {"s": int(s), "h": int(h), "a": int(v.loc["none", "a"]), "b": b, "L": L, "flops_per_s": rate,
                "t0_s": t0, "tensors": tensors, "layer_bytes": nbytes, "memory": memory,
                "forward_s": c["forward_s"], "backward_s": c["backward_s"],
                "step_time_none_s": float(v.loc["none", "step_time_s"]),
                "breakeven_full_gb_s": F.breakeven_bandwidth(nbytes, tensors, c["forward_s"], c["backward_s"],
                                                             c["full_recompute_s"], t0) / 1e9,
                "breakeven_selective_gb_s": F.breakeven_bandwidth(
                    nbytes, tensors, c["forward_s"], c["backward_s"], c["selective_recompute_s"], t0) / 1e9}
        bw_measured = min(link["d2h"][1], link["h2d"][1]) / 1e9
        rows.append({"kind": "measured", **base, "bw_gb_s": bw_measured,
                     **{f"predicted_{k}_s": x for k, x in predicted.items()},
                     **{f"measured_{k}_s": x for k, x in measured.items()},
                     "best_measured": min(measured, key=measured.get)})
        for bw in np.geomspace(bw_measured / 30, bw_measured * 30, 25):
            sym = F.Link.symmetric(bw * 1e9, t0)
            rows.append({"kind": "curve", **base, "bw_gb_s": float(bw),
                         "predicted_offload_overlap_s": L * F.exposed_offload_s(
                             nbytes, tensors, c["forward_s"], c["backward_s"], sym),
                         "predicted_offload_serial_s": L * F.exposed_offload_s(nbytes, tensors, 0.0, 0.0, sym),
                         "predicted_full_s": predicted["full"], "predicted_selective_s": predicted["selective"]})
    return rows


def breakeven_table(params: dict) -> pd.DataFrame:
    """offload-breakeven: the break-even model (remat.formulas.offload) over a grid, and the measured sizes
    placed on it. Reads the tables of offload-steps and offload-bandwidth (the model's inputs there: bytes
    and copies per layer, link fit, achieved FLOP/s; it measures nothing itself).

    params: steps (CSV path, default "results/offload/cpu/steps.csv"), bandwidth (CSV path, default
    "results/offload/cpu/bandwidth.csv"), grid: seqs, hiddens (a = h/128, b = micro_batch, default 1),
    flops_per_s (achieved FLOP/s list), bandwidths_gb_s (GB/s = 10^9 B/s), t0_s (per-copy latency, default
    10 µs), tensors (copies per layer; default ``copies_per_layer()``).
    Rows: kind = "grid" (frontier: breakeven_full_gb_s / breakeven_selective_gb_s, the cheapest choice at
    each BW), "measured" (predicted_* vs measured_* seconds per step, overheads over none), "curve" (the
    model at each measured size over a BW sweep). Layer bytes in the grid: Korthikanti Eq. 1 (16-bit).
    """
    check_known(params, {"steps", "bandwidth", "seqs", "hiddens", "micro_batch", "flops_per_s",
                         "bandwidths_gb_s", "t0_s", "tensors"}, "offload.breakeven")
    t0 = params.get("t0_s", 10e-6)
    if isinstance(t0, bool) or not isinstance(t0, (int, float)) or t0 < 0:
        raise UsageError("t0_s", f"must be a number ≥ 0 (seconds), got {t0!r}")
    tensors = get_int(params, "tensors", copies_per_layer())
    frames = {}
    for key in ("steps", "bandwidth"):
        path = params.get(key, f"results/offload/cpu/{key}.csv")
        try:
            frames[key] = pd.read_csv(path)
        except (OSError, ValueError) as exc:
            raise UsageError(key, f"cannot read {path!r} ({exc})") from None
    rows = _grid_rows(params, tensors) + _measured_rows(frames["steps"], frames["bandwidth"], params)
    device = str(frames["steps"]["device"].iloc[0])
    prov = provenance(device=device, dtype="bfloat16 (grid); measured: see steps")
    return pd.DataFrame(rows).assign(link=link_label(device), **{k: v for k, v in prov.items()})


def results_device(root: str = ".", configured: str = "cpu") -> str:
    """The device whose offload tables the figures and the report show: "cuda" once a GPU run has written
    them (results/offload/cuda/) or when the config asks for it, else ``configured``. The CPU tables are a
    simulation (host memcpy), so a GPU measurement, where it exists, is the one to show."""
    if configured == "cuda" or (Path(root) / "results" / "offload" / "cuda" / "bandwidth.csv").is_file():
        return "cuda"
    return configured
