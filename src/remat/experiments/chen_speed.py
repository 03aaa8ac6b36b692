"""Chen et al. 2016 §5.4 (speed): the runtime overhead of the sublinear plan over no recompute, on the torch
ResNet (§5.2) and LSTM (§5.3). The paper: about 30 % extra runtime on a Titan X (MXNet, 20 batches).

    remat experiment chen-speed --params '{"resnet_depth": 50}' --out results/chen/speed.csv

Strategies, applied per step by remat.policies (ResNet: over ``model.blocks``; LSTM: over its time steps):
* ``none``       — no recompute.
* ``sublinear``  — Chen Alg. 1 with k = ⌈√n⌉ segments of the n blocks / time steps
                   (remat.formulas.chen.sqrt_segments, segment_bounds): every segment but the last is one
                   torch.utils.checkpoint(use_reentrant=False) unit; the last is left unchecked, as
                   torch.utils.checkpoint.checkpoint_sequential does (its intermediates are needed first).
                   The ResNet stem and head are outside the chain and never recomputed.
* ``drop-cheap`` — Chen §4.2 per block / per time step (remat.drop_cheap): matmul-like outputs kept, cheap
                   ops (BN, ReLU, σ, tanh, softmax, elementwise) recomputed.
A step is forward + backward + zero_grad. Times come from remat.measure.timing.time_steps (interleaved rounds,
median and IQR); one extra, untimed, instrumented step per strategy gives saved bytes (remat.measure.
drop_cheap.saved_bytes: saved-tensor hooks plus the SAC cache), peak bytes (remat.measure.peak) and FLOPs
(remat.measure.flops, plus the recomputed cheap ops by remat.measure.drop_cheap's elementwise convention).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Callable, Literal

import pandas as pd
import torch
from torch import nn

from remat.device import resolve_device
from remat.errors import UsageError
from remat.experiments.params import Count, NonNegative
from remat.formulas.chen import sqrt_segments
from remat.measure.drop_cheap import RecomputedElementwise, saved_bytes
from remat.measure.flops import StepFlopCounter
from remat.measure.peak import PeakMemory
from remat.measure.provenance import with_provenance
from remat.measure.timing import time_steps
from remat.models.lstm import LSTMConfig, build_lstm, random_sequence
from remat.models.resnet import ResNetConfig, blocks_for_depth, build_resnet, random_images, resnet_loss
from remat.policies import apply_plan, apply_step_plan

SECTION = "chen.speed"
Strategy = Literal["none", "sublinear", "drop-cheap"]
STRATEGIES = ("none", "sublinear", "drop-cheap")
Net = Literal["resnet", "lstm"]


@dataclass(frozen=True)
class SpeedParams:
    """chen.speed: network sizes, strategies and the timing protocol (defaults: ≈ 30 s on a 2-core CPU)."""

    nets: list[Net] = field(default_factory=lambda: ["resnet", "lstm"])
    """Networks to time: "resnet" (§5.2) and/or "lstm" (§5.3)."""
    strategies: list[Strategy] = field(default_factory=lambda: list(STRATEGIES))
    """Strategies to time: none, sublinear (√n segments), drop-cheap (Chen §4.2)."""
    resnet_depth: Count = 50
    """ResNet layers requested (≥ 14); blocks per stage by remat.models.resnet.blocks_for_depth (the
    deepest network ≤ this depth: 1000 -> 998 layers). Ignored when resnet_blocks is set."""
    resnet_blocks: list[Count] | None = None
    """Bottleneck blocks per stage (4 ints ≥ 1), overriding resnet_depth; None: from resnet_depth."""
    resnet_width: Count = 32
    """Stage-1 bottleneck width (channels; the paper: 64)."""
    resnet_image: Count = 32
    """Input height = width (pixels; the paper: 224)."""
    resnet_batch: Count = 8
    """Images per step (the paper: 32)."""
    resnet_classes: Count = 100
    """Classifier outputs (the paper: 1000)."""
    lstm_layers: Count = 2
    """Stacked LSTM layers (the paper: 4)."""
    lstm_hidden: Count = 256
    """Hidden size H (the paper: 1024)."""
    lstm_input: Count = 50
    """Input dimension per step (the paper: 50)."""
    lstm_classes: Count = 1000
    """Softmax width per step (the paper: 5000)."""
    lstm_steps: Count = 16
    """Time steps T, the length of the unrolled chain (the paper: 64)."""
    lstm_batch: Count = 32
    """Sequences per step (the paper: 64)."""
    rounds: Count = 2
    """Interleaved timing rounds (remat.measure.timing.time_steps)."""
    repeats: Count = 5
    """Timed steps per strategy per round (≥ 5)."""
    warmup: NonNegative = 1
    """Untimed steps per strategy per round before the timed ones."""
    threads: Count | None = 1
    """CPU intra-op threads while timing; None keeps torch's setting."""
    seed: NonNegative = 0
    """Seed of the weights (torch.manual_seed) and of the inputs (seed + 1)."""
    device: Literal["cpu", "cuda"] = "cpu"
    """Where the steps run."""
    peak: bool = False
    """Also measure each strategy's peak bytes in its instrumented step (CUDA allocator statistics; on the CPU
    torch's MemTracker, which costs seconds per step at the default sizes)."""

    def __post_init__(self):
        _check_unique(self.nets, "nets")
        _check_unique(self.strategies, "strategies")
        for name, allowed in (("nets", ("resnet", "lstm")), ("strategies", STRATEGIES)):
            for value in getattr(self, name):
                if value not in allowed:
                    raise UsageError(f"{SECTION}.{name}", f"unknown {value!r} (known: {', '.join(allowed)})")
        if self.repeats < 5:
            raise UsageError(f"{SECTION}.repeats", f"must be ≥ 5 (the timing protocol), got {self.repeats}")
        self.resnet_config(), self.lstm_config()  # sizes checked by the model configs, fields renamed

    def resnet_config(self):
        """The remat.models.resnet.ResNetConfig of these sizes (blocks from resnet_blocks, else from
        resnet_depth). Raises UsageError("chen.speed.resnet_<field>")."""
        with _renamed("resnet_"):
            blocks = tuple(self.resnet_blocks) if self.resnet_blocks else blocks_for_depth(self.resnet_depth)
            return ResNetConfig(blocks=blocks, width=self.resnet_width, image=self.resnet_image,
                                classes=self.resnet_classes, batch=self.resnet_batch)

    def lstm_config(self):
        """The remat.models.lstm.LSTMConfig of these sizes. Raises UsageError("chen.speed.lstm_<field>")."""
        with _renamed("lstm_"):
            return LSTMConfig(layers=self.lstm_layers, hidden=self.lstm_hidden, input=self.lstm_input,
                              classes=self.lstm_classes, steps=self.lstm_steps, batch=self.lstm_batch)


@contextlib.contextmanager
def _renamed(prefix: str):
    """A model config's UsageError(field) raised again as UsageError("chen.speed.<prefix><field>")."""
    try:
        yield
    except UsageError as exc:
        raise UsageError(f"{SECTION}.{prefix}{exc.field}", str(exc).split(": ", 1)[1]) from None


def _check_unique(values: list, name: str) -> None:
    if len(set(values)) != len(values):
        raise UsageError(f"{SECTION}.{name}", f"duplicate entries in {values}")


# --- the networks under test -----------------------------------------------------------------------------------

@dataclass
class Bench:
    """One network ready to step: its model, inputs, chain length n (blocks or time steps), the loss of one
    forward, how a plan spec is applied, and its size columns."""

    net: str
    model: nn.Module
    inputs: tuple[torch.Tensor, ...]
    units: int
    loss: Callable[[], torch.Tensor]
    apply: Callable[[str], object]
    sizes: dict


def _seeded(p: SpeedParams, device: torch.device, cfg, build: Callable, make_inputs: Callable) -> tuple:
    """(model, inputs on ``device``): weights from torch.manual_seed(p.seed), inputs from seed p.seed + 1."""
    torch.manual_seed(p.seed)
    model = build(cfg, device)
    inputs = make_inputs(cfg, generator=torch.Generator().manual_seed(p.seed + 1))
    return model, tuple(t.to(device) for t in inputs)


def resnet_bench(p: SpeedParams, device: torch.device) -> Bench:
    """The §5.2 ResNet at the sizes of ``p`` (remat.models.resnet), plans applied by remat.policies.apply_plan."""
    cfg = p.resnet_config()
    model, (images, labels) = _seeded(p, device, cfg, build_resnet, random_images)
    sizes = {"depth": cfg.depth, "blocks": "-".join(map(str, cfg.blocks)), "width": cfg.width,
             "image": cfg.image, "batch": cfg.batch, "classes": cfg.classes}
    return Bench("resnet", model, (images, labels), len(model.blocks),
                 lambda: resnet_loss(model(images), labels), lambda spec: apply_plan(model, spec), sizes)


def lstm_bench(p: SpeedParams, device: torch.device) -> Bench:
    """The §5.3 stacked LSTM at the sizes of ``p`` (remat.models.lstm), plans over its time steps."""
    cfg = p.lstm_config()
    model, (x, targets) = _seeded(p, device, cfg, build_lstm, random_sequence)
    sizes = {"layers": cfg.layers, "hidden": cfg.hidden, "input": cfg.input, "classes": cfg.classes,
             "steps": cfg.steps, "batch": cfg.batch}
    return Bench("lstm", model, (x, targets), cfg.steps, lambda: model(x, targets),
                 lambda spec: apply_step_plan(model, spec), sizes)


BENCHES = {"resnet": resnet_bench, "lstm": lstm_bench}


def strategy_spec(strategy: str, units: int) -> str:
    """The remat.policies plan spec of ``strategy`` on a chain of ``units`` blocks / steps: "none",
    "segments:⌈√n⌉" (sublinear) or "drop-cheap". Raises UsageError("chen.speed.strategies") otherwise."""
    if strategy == "sublinear":
        k = sqrt_segments(units)
        return f"segments:{k}" if k > 1 else "none"     # one segment: nothing checkpointed
    if strategy in ("none", "drop-cheap"):
        return strategy
    raise UsageError(f"{SECTION}.strategies", f"unknown {strategy!r} (known: {', '.join(STRATEGIES)})")


# --- measuring -------------------------------------------------------------------------------------------------

def instrumented_step(bench: Bench, device: torch.device, peak: bool = False) -> dict:
    """One untimed step under the plan already applied: saved bytes (autograd + SAC cache, int bytes), FLOPs
    of forward, backward and recompute (matmul-like, torch.utils.flop_counter), the recomputed cheap-op FLOPs
    (remat.measure.drop_cheap convention) and, with ``peak``, the step's peak bytes (remat.measure.peak: parameters,
    gradients and inputs included; None without)."""
    bench.model.zero_grad(set_to_none=True)
    counter = StepFlopCounter()
    mem = PeakMemory(device, bench.model, *bench.inputs) if peak else contextlib.nullcontext()
    with mem, RecomputedElementwise() as cheap:
        with counter.forward():
            saved, loss = saved_bytes(bench.model, bench.loss)
        counter.backward(loss)
    bench.model.zero_grad(set_to_none=True)
    flops = counter.result()
    return {"saved_bytes": saved.total, "saved_bytes_autograd": saved.autograd, "saved_bytes_kept": saved.kept,
            "peak_bytes": mem.peak_bytes if peak else None, "peak_method": mem.method if peak else None,
            "flops_forward": flops.forward,
            "flops_backward": flops.backward, "flops_recompute": flops.recompute,
            "flops_recompute_elementwise": cheap.total,
            "recompute_ratio": flops.recompute / flops.forward if flops.forward else None,
            "overhead_flops": flops.recompute / (flops.forward + flops.backward) if flops.forward else None}


def _train_step(bench: Bench) -> Callable[[], None]:
    def step():
        bench.loss().backward()
        bench.model.zero_grad(set_to_none=True)
    return step


def time_bench(bench: Bench, p: SpeedParams, device: torch.device) -> list[dict]:
    """Rows for one network: per strategy, the instrumented step's columns and its timing (time_steps over all
    strategies, interleaved; a visit applies the strategy's plan first), with overhead = median / none − 1."""
    specs = {s: strategy_spec(s, bench.units) for s in p.strategies}
    rows = {}
    for strategy, spec in specs.items():
        bench.apply(spec)
        rows[strategy] = instrumented_step(bench, device, p.peak)
    step = _train_step(bench)
    timings = time_steps({s: step for s in specs}, device, rounds=p.rounds, repeats=p.repeats, warmup=p.warmup,
                         setup=lambda s: bench.apply(specs[s]), threads=p.threads)
    bench.apply("none")
    base = timings["none"].median_s if "none" in timings else None
    return [{"net": bench.net, "strategy": s, "plan": specs[s], "units": bench.units,
             "segments": int(specs[s].split(":")[1]) if specs[s].startswith("segments:") else None,
             **bench.sizes, **rows[s], **timings[s].columns(),
             "overhead": timings[s].median_s / base - 1.0 if base else None,
             "rounds": p.rounds, "repeats": p.repeats, "warmup": p.warmup, "threads": p.threads}
            for s in specs]


def speed(p: SpeedParams) -> pd.DataFrame:
    """Registry entry ``chen-speed``: Chen §5.4's runtime overhead of recompute, one row per (net, strategy).

    Columns: net ("resnet" | "lstm"), strategy, plan (the remat.policies spec), units (n: blocks or time
    steps), segments (k for sublinear), the net's sizes (resnet: depth, blocks "3-4-6-3", width, image, batch,
    classes; lstm: layers, hidden, input, classes, steps, batch), saved_bytes (= saved_bytes_autograd +
    saved_bytes_kept, int bytes), peak_bytes and peak_method (None unless ``peak``), flops_forward /
    flops_backward / flops_recompute (int, matmul-like ops), flops_recompute_elementwise (int, 1 per
    recomputed float element), recompute_ratio (recompute / forward FLOPs), overhead_flops (recompute /
    (forward + backward) FLOPs: the overhead if time followed matmul FLOPs, beside the measured one),
    step_time_s and step_time_iqr_s (median and IQR, seconds), step_time_samples, timing_method, overhead
    (median / none's median − 1; None without a none row), the timing protocol's rounds / repeats / warmup /
    threads, and provenance (dtype float32).
    Raises UsageError("device") for cuda without CUDA. Source: Chen et al. 2016 §5.4, §4.2, Alg. 1.
    """
    device = resolve_device(p.device, f"{SECTION}.device")
    rows = [row for net in p.nets for row in time_bench(BENCHES[net](p, device), p, device)]
    return with_provenance(rows, device=str(device), dtype="float32", seed=p.seed)
