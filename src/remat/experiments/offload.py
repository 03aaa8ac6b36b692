"""Offload experiments, each returning one tidy table:

* ``bandwidth_table``  (offload-bandwidth): host<->device copies, pinned vs pageable, both directions,
  ``min_size``..``max_size``, alone and overlapped with a matmul, with the fit t = t0 + bytes/BW per group
  (remat.measure.bandwidth).
* ``steps_table``      (offload-steps): per (s, h) of a small GPT, a training step under none, selective,
  full, offload (remat.policies.apply_plan) and torch's save_on_cpu: step time, gradients bitwise equal to
  none, device bytes held after forward, host bytes (pinned/reserved, peak, live after the step), FLOPs.
* ``breakeven_table``  (offload-breakeven): offload against selective and against full recompute, each at the
  bytes that recompute frees (remat.formulas.offload), over GPU presets × (s, h) with the roofline's times
  (remat.timemodel) and each GPU's share of its host link; and the measured sizes of ``steps_table``
  placed on the model (model vs measured).

Parameters: the dataclasses below (config.yaml section ``offload.<name>``; errors name
``offload.<name>.<key>``). Without CUDA the "device" is the CPU and every copy a host memcpy: rows carry
``link = remat.measure.bandwidth.SIMULATED``, never PCIe.
Run: ``remat experiment offload-steps --params '{"seqs": [64]}' --out x.csv``.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Annotated, Literal

import pandas as pd
import torch

from remat.device import resolve_device
from remat.errors import UsageError
from remat.experiments.offload_breakeven import grid_rows, measured_rows
from remat.experiments.offload_host import PolicyOffloadAccounting, SaveOnCpuAccounting
from remat.experiments.params import Bytes, Count, Ge, NonNegative
from remat.experiments.progress import progress
from remat.measure.bandwidth import bandwidth_summary, copy_sizes, link_label
from remat.measure.flops import count_step_flops
from remat.measure.peak import PeakMemory
from remat.measure.provenance import with_provenance
from remat.measure.timing import MIN_REPEATS, intra_op_threads, time_steps
from remat.models.presets import from_name
from remat.models.transformer import build_model, lm_loss, random_tokens
from remat.policies import apply_plan, clear_plan
from remat.timemodel.gpus import check_presets, gpu
from remat.units import KiB

VARIANTS = ("none", "selective", "full", "offload", "save_on_cpu")
GRID_LINK = "model"  # the grid rows' link column starts with this: a preset's link, not a measurement
Device = Literal["cpu", "cuda"]


# --- parameters ------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class BandwidthParams:
    """offload.bandwidth: the copy benchmark (remat.measure.bandwidth.measure_bandwidth)."""

    device: Device = "cpu"
    """Where the copies go (the pipeline passes config.device); cpu: a host memcpy, labelled simulated."""
    min_size: Bytes = 64 * KiB
    """Smallest copy, bytes (a power of two ≥ 1 KiB; a size string such as "64KiB")."""
    max_size: Bytes | None = None
    """Largest copy, bytes (a power of two); None: 256 MiB on cpu, 1 GiB on cuda."""
    repeats: Count = 20
    """Most timed copies per size (big sizes get fewer: 256 MiB / 4 GiB copied per point on cpu / cuda)."""
    overlap: bool = True
    """Also time every copy while a matmul runs (another CUDA stream; a host thread on the CPU)."""

    def __post_init__(self):
        resolve_device(self.device, field="offload.bandwidth.device")
        copy_sizes(self.device, self.min_size, self.max_size,
                   fields=("offload.bandwidth.min_size", "offload.bandwidth.max_size"))


@dataclass(frozen=True)
class StepsParams:
    """offload.steps: a training step of a small GPT per (s, h) under every variant of VARIANTS."""

    device: Device = "cpu"
    """Where the steps run (the pipeline passes config.device)."""
    model: str = "gpt-tiny"
    """A GPT preset or config.json path (remat.models.presets.from_name)."""
    layers: Count = 4
    """L, transformer layers."""
    heads: Count = 4
    """a, attention heads (must divide every h)."""
    micro_batch: Count = 2
    """b, sequences per step."""
    dtype: Literal["float32", "float64", "bfloat16", "float16"] = "float32"
    """Parameter and activation dtype."""
    dropout: Annotated[float, Ge(0.0)] = 0.1
    """Probability of every dropout, in [0, 1): active, so the gradient check covers the replayed RNG."""
    seqs: list[Count] = field(default_factory=lambda: [64, 128])
    """s values, tokens per sequence."""
    hiddens: list[Count] = field(default_factory=lambda: [64, 128])
    """h values, elements (the MLP width is 4h)."""
    repeats: Annotated[int, Ge(MIN_REPEATS)] = MIN_REPEATS
    """Timed steps per variant and round (≥ 5), after one warm-up step per visit."""
    rounds: Count = 2
    """Interleaved rounds of the timing protocol (remat.measure.timing.time_steps)."""
    seed: NonNegative = 0
    """Seed of the weights, the tokens and every step's dropout."""
    min_bytes: Bytes = 0
    """Offload threshold, bytes: storages smaller stay on the device; 0 (the runtime policy's): all move."""
    threads: Count = 1
    """torch intra-op threads on the CPU (ignored on cuda): on a shared 2-core machine OpenMP's spin-waiting
    threads make step times swing by 10x under load."""

    def __post_init__(self):
        resolve_device(self.device, field="offload.steps.device")
        if self.dropout >= 1:
            raise UsageError("offload.steps.dropout", f"must be in [0, 1), got {self.dropout}")
        for s, h in itertools.product(self.seqs, self.hiddens):
            self.model_config(s, h)

    def model_config(self, seq: int, hidden: int):
        """The GPT model at (s, h) (remat.models.presets.from_name; MLP width 4h). Raises
        UsageError("offload.steps.<field>") for a model or size the preset rejects (e.g. heads ∤ h)."""
        try:
            return from_name(self.model, layers=self.layers, seq=seq, hidden=hidden, heads=self.heads,
                             ffn_hidden=4 * hidden, micro_batch=self.micro_batch, dtype=self.dtype,
                             dropout=self.dropout)
        except UsageError as exc:
            raise UsageError(f"offload.steps.{exc.field}", str(exc).split(": ", 1)[-1]) from None


@dataclass(frozen=True)
class BreakevenParams:
    """offload.breakeven: offload against recompute at equal freed bytes over GPU presets and layer sizes, and
    the measured tables placed on the model."""

    steps: str | None = None
    """The offload-steps table (CSV path; the pipeline passes this device's). Required."""
    bandwidth: str | None = None
    """The offload-bandwidth table (CSV path; the pipeline passes this device's). Required."""
    seqs: list[Count] = field(default_factory=lambda: [512, 1024, 2048, 4096, 8192])
    """Grid s values, tokens."""
    hiddens: list[Count] = field(default_factory=lambda: [4096, 8192, 12288])
    """Grid h values, elements (a = h/128, Korthikanti's head size; h = 12288 with s = 2048 is GPT-3 175B)."""
    micro_batch: Count = 1
    """Grid b, sequences (Korthikanti Table 3: 1 for 175B and up)."""
    tp: Count = 8
    """Grid t, tensor-parallel size (Korthikanti Table 3: 8); must divide every a = h/128."""
    sp: bool = False
    """Sequence parallelism in the grid's layers (Korthikanti §4.2.2)."""
    gpus: list[str] = field(default_factory=lambda: ["a100-80gb", "h100-80gb"])
    """GPU presets (remat.timemodel.gpus.GPUS): roofline rates, host link, its sharing, host memory."""
    link_gb_s: Annotated[float, Ge(0.0)] | None = None
    """The host link's own GB/s (10^9 bytes/s) per direction, before sharing (e.g. a measured `remat bandwidth
    --device cuda`, one GPU copying alone); None: each preset's (80 % of PCIe ×16 nominal)."""
    gpus_per_host_link: Count | None = None
    """GPUs copying through one host-link uplink at once (each gets the link ÷ this); None: each preset's
    (2 on a100-*: DGX A100, 4 PCIe switches for 8 GPUs; 1 elsewhere — remat.timemodel.gpus)."""
    host_memory: Bytes | None = None
    """Host memory per GPU for offloaded activations, bytes (e.g. "128GiB"); None: each preset's."""
    t0_s: Annotated[float, Ge(0.0)] | None = None
    """Per-copy latency t0, seconds; None: each preset's (10 µs)."""

    def __post_init__(self):
        check_presets("offload.breakeven.gpus", self.gpus)
        if self.link_gb_s is not None and not self.link_gb_s > 0:
            raise UsageError("offload.breakeven.link_gb_s", f"must be > 0 GB/s, got {self.link_gb_s}")
        if self.host_memory is not None and not self.host_memory > 0:
            raise UsageError("offload.breakeven.host_memory", f"must be > 0 bytes, got {self.host_memory}")
        for h in self.hiddens:
            a = max(1, h // 128)
            if a % self.tp:
                raise UsageError("offload.breakeven.tp", f"t = {self.tp} must divide the heads a = h/128 = {a} "
                                                         f"of h = {h}")
        if self.sp and any(s % self.tp for s in self.seqs):
            raise UsageError("offload.breakeven.sp", f"sequence parallelism needs t = {self.tp} to divide every s, "
                                                     f"got {self.seqs}")

    def gpu_presets(self) -> list:
        """The GPU presets with this section's overrides (remat.timemodel.gpus.gpu; None keeps the preset's);
        an override is named in the preset's ``host_source`` ("set by offload.breakeven.<key>")."""
        from dataclasses import replace

        overrides = {"link_gb_s": self.link_gb_s, "gpus_per_host_link": self.gpus_per_host_link,
                     "host_memory": self.host_memory, "t0_s": self.t0_s}
        note = ", ".join(f"{k} set by offload.breakeven.{k}" for k, v in overrides.items() if v is not None)
        out = []
        for name in self.gpus:
            g = gpu(name, link_bytes_per_s=None if self.link_gb_s is None else self.link_gb_s * 1e9,
                    gpus_per_host_link=self.gpus_per_host_link, host_memory_bytes=self.host_memory,
                    link_t0_s=self.t0_s)
            out.append(replace(g, host_source=f"{g.host_source}; {note}") if note else g)
        return out


# --- offload-bandwidth -------------------------------------------------------------------------------------------

def bandwidth_table(p: BandwidthParams) -> pd.DataFrame:
    """offload-bandwidth: one row per (direction, memory, overlap, bytes) with its group's fit.

    Columns: see remat.measure.bandwidth.measure_bandwidth and with_fit (seconds in s, bw in GB/s = 10^9
    bytes/s and GiB/s = 2^30 bytes/s), then provenance.
    """
    out = bandwidth_summary(p.device, p.min_size, p.max_size, p.repeats, (False, True) if p.overlap else (False,))
    return with_provenance(out["rows"], device=p.device, dtype="uint8")


# --- offload-steps -----------------------------------------------------------------------------------------------

def steps_table(p: StepsParams) -> pd.DataFrame:
    """offload-steps: a training step of a small GPT at each (s, h) under each variant of VARIANTS.

    Columns: s, h, b, L, variant, grads_bitwise_equal (vs none, same seed, dropout active), step_time_s (median),
    step_time_iqr_s, step_time_samples, timing_method (all variants timed in one interleaved run,
    remat.measure.timing.time_steps), device_held_after_forward_bytes (bytes alive on the device after forward:
    saved activations and the loss; host copies excluded), peak_bytes (+ method; on the CPU save_on_cpu's host
    copies are in it, ``peak_includes_host_copies``: offload_host's ``tracked``), host_* (bytes: pool reserved =
    pinned on CUDA, peak live, live after the step), offloaded_bytes / offloaded_tensors (copies) / kept_bytes per
    step, flops_model (forward + backward, FlopCounterMode), achieved_flops_s (flops_model / step time of none,
    FLOP/s), overhead_vs_none_s, copy_hidden_share (offload rows: ``hidden_share``), threads (CPU intra-op threads;
    None on cuda), link, provenance.
    """
    rows = []
    with intra_op_threads(p.threads if p.device == "cpu" else None):
        for s, h in progress(itertools.product(p.seqs, p.hiddens), "offload-steps (s, h)"):
            rows += _measure_size(p.model_config(s, h), p)
    threads = p.threads if p.device == "cpu" else None
    return with_provenance([{**row, "threads": threads} for row in rows], device=p.device, dtype=p.dtype,
                           seed=p.seed)


def _setup(model, variant: str, min_bytes: int):
    """Apply ``variant`` to ``model``; returns its host accounting (None when nothing leaves the device)."""
    clear_plan(model)
    if variant == "save_on_cpu":
        return SaveOnCpuAccounting(model)
    apply_plan(model, variant)
    return PolicyOffloadAccounting(model, min_bytes) if variant == "offload" else None


def _one_step(model, tokens, seed: int, on_forward=None) -> tuple[dict, float]:
    """Forward + backward with a fixed seed; returns ({name: grad}, loss) and clears the grads."""
    torch.manual_seed(seed)
    loss = lm_loss(model(tokens), tokens)
    if on_forward is not None:
        on_forward()
    loss.backward()
    grads = {n: g.grad.detach().clone() for n, g in model.named_parameters() if g.grad is not None}
    model.zero_grad(set_to_none=True)
    return grads, float(loss.detach())


def _measure_variant(model, tokens, variant: str, reference: dict, p: StepsParams) -> dict:
    """One measured step of ``variant``: gradients vs ``reference``, device and host bytes (no timing)."""
    host = _setup(model, variant, p.min_bytes)
    _one_step(model, tokens, p.seed)  # warm-up: sizes the host pool, so the measured step allocates none
    if host is not None:
        host.start()
    seen = {}
    with PeakMemory(p.device, model, tokens) as mem:
        before = mem.current_bytes()

        def after_forward():
            seen["held"] = mem.current_bytes() - before
            seen["host"] = host.live_bytes if host is not None else 0
        grads, loss = _one_step(model, tokens, p.seed, after_forward)
    equal = grads.keys() == reference.keys() and all(torch.equal(grads[k], reference[k]) for k in grads)
    host_in_device_memory = p.device == "cpu" and host is not None and host.tracked   # offload_host: tracked
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


def _time_variants(model, tokens, p: StepsParams) -> dict:
    """Every variant's step time from ONE interleaved run (remat.measure.timing.time_steps: ``rounds``
    rounds, each visiting every variant: setup, 1 warm-up step, ``repeats`` timed steps), so a load change
    on a shared machine hits all variants alike. Returns variant -> Timing (seconds)."""
    def setup(variant: str) -> None:
        host = _setup(model, variant, p.min_bytes)
        if host is not None:
            host.start()

    step = lambda: _one_step(model, tokens, p.seed)  # noqa: E731 - the variant is what setup applied
    return time_steps({v: step for v in VARIANTS}, p.device, rounds=p.rounds, repeats=p.repeats, warmup=1,
                      setup=setup)


def _measure_size(cfg, p: StepsParams) -> list[dict]:
    """Every variant at one model size: memory and gradients per variant, then one timing run for all."""
    torch.manual_seed(p.seed)
    model = build_model(cfg, device=p.device)
    tokens = random_tokens(cfg, device=p.device)
    flops = count_step_flops(lambda: lm_loss(model(tokens), tokens))
    model.zero_grad(set_to_none=True)
    reference, _ = _one_step(model, tokens, p.seed)
    rows = [_measure_variant(model, tokens, v, reference, p) for v in VARIANTS]
    timings = _time_variants(model, tokens, p)
    clear_plan(model)
    t_none = timings["none"].median_s
    model_flops = flops.forward + flops.backward
    base = {"model": cfg.name, "s": cfg.seq, "h": cfg.hidden, "a": cfg.heads, "b": cfg.micro_batch,
            "L": cfg.layers, "dtype": cfg.dtype, "device": p.device, "link": link_label(p.device),
            "flops_model": model_flops, "achieved_flops_s": model_flops / t_none}
    out = [{**base, **row, **timings[row["variant"]].columns("step_time"),
            "overhead_vs_none_s": timings[row["variant"]].median_s - t_none} for row in rows]
    return [{**row, "copy_hidden_share": hidden_share(out) if row["variant"] == "offload" else None} for row in out]


def hidden_share(rows: list[dict]) -> float | None:
    """The share of the copy time the asynchronous offload hooks hide under compute, measured: 1 − (their
    overhead over no recompute) / (torch's synchronous save_on_cpu's overhead) at one (s, h) — the same bytes
    copied, once exposed, once overlapped. None when save_on_cpu costs nothing measurable (≤ 0 s)."""
    over = {r["variant"]: r["overhead_vs_none_s"] for r in rows}
    sync, hooks = over.get("save_on_cpu"), over.get("offload")
    return None if sync is None or hooks is None or sync <= 0 else 1.0 - hooks / sync


# --- offload-breakeven -------------------------------------------------------------------------------------------

def breakeven_table(p: BreakevenParams) -> pd.DataFrame:
    """offload-breakeven: the break-even model (remat.formulas.offload) over a grid, and the measured sizes
    placed on it. Reads the tables of offload-steps and offload-bandwidth (the model's inputs there: bytes
    and copies per layer, link fit, achieved FLOP/s; it measures nothing itself).

    Rows: kind = "grid" (per GPU preset and layer size, offload against selective and against full recompute
    at the bytes each frees: breakeven_selective_gb_s / breakeven_full_gb_s, the cheaper at the link one GPU
    gets), "measured" (predicted_* vs measured_* seconds per step, overheads over none, freed bytes), "curve"
    (the model at each measured size over a BW sweep); see remat.experiments.offload_breakeven.
    Column ``link``: grid rows "model: <gpu> host link ÷ <GPUs sharing it>" (a preset, nothing measured),
    measured and curve rows the measured device's link (remat.measure.bandwidth.link_label: on a CPU
    "simulated: host memcpy"). Raises UsageError("offload.breakeven.steps" / ".bandwidth") when a table is
    not given or unreadable.
    """
    frames = {}
    for key in ("steps", "bandwidth"):
        path = getattr(p, key)
        if path is None:
            raise UsageError(f"offload.breakeven.{key}", f"the offload-{key} table to read (a CSV path) is required")
        try:
            frames[key] = pd.read_csv(path)
        except (OSError, ValueError) as exc:
            raise UsageError(f"offload.breakeven.{key}", f"cannot read {path!r} ({exc})") from None
    grid = grid_rows(p.seqs, p.hiddens, p.micro_batch, p.tp, p.sp, p.gpu_presets())
    device = str(frames["steps"]["device"].iloc[0])
    measured = [{**row, "link": link_label(device)} for row in measured_rows(frames["steps"], frames["bandwidth"])]
    grid = [{**row, "link": f"{GRID_LINK}: {row['gpu']} host link ÷ {row['gpus_per_host_link']}"} for row in grid]
    return with_provenance(grid + measured, device=device, dtype="bfloat16 (grid); measured: see steps")
