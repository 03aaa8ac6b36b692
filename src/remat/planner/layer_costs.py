"""What one layer costs under each policy, per micro-batch: the settings besides the model (``Settings``: GPU,
budget, parallel and optimizer layout), the layer's predicted seconds (``layer_seconds``: the per-op roofline,
remat.timemodel), the per-policy bytes / seconds / FLOPs (``policy_costs``, offload priced by
remat.formulas.offload) and ZeRO-sharded model state (``sharded_state``).

Shared by the closed-form GPT costs (remat.planner.costs) and the measured costs of other architectures
(remat.planner.measured). Units: int bytes, float seconds, int FLOPs.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from remat.formulas import korthikanti
from remat.formulas import offload as offload_formulas
from remat.models.presets import ModelConfig
from remat.planner.problem import POLICIES
from remat.planner.regime import DEFAULT, Regime, resolve
from remat.timemodel.gpus import GPU
from remat.timemodel.layer import predict
from remat.units import GiB

DEFAULT_RESERVE = 2 * GiB   # CUDA context, allocator fragmentation, communication buffers: an assumption


@dataclass(frozen=True)
class Settings:
    """Everything besides the model: the GPU, the budget and the parallel/optimizer layout (bytes, ints)."""

    gpu: GPU
    budget_bytes: int
    host_limit_bytes: int | None = None
    sp: bool = False
    dp: int = 1
    zero: int = 0
    reserve_bytes: int = DEFAULT_RESERVE
    policies: tuple[str, ...] = POLICIES
    regime: Regime = resolve(DEFAULT, 2)   # bytes per parameter, gradient timing (remat.planner.regime)
    calibration: dict[str, float] | None = field(default=None, compare=False)  # s per layer per micro-batch

    @property
    def weight_bytes(self) -> int:
        return self.regime.weight

    @property
    def grad_bytes(self) -> int:
        return self.regime.grad

    @property
    def optimizer_bytes(self) -> int:
        return self.regime.optimizer


def runtime_mode(cfg: ModelConfig, policy: str) -> str:
    """The layer mode (remat.accounting.MODES) a planner policy stands for: the GPT layer's selective is Korthikanti's
    (core attention recomputed: its s × s softmax and dropout tensors freed); any other layer's is op-level
    (drop-cheap: matmul and attention outputs kept, norms and pointwise ops recomputed), as remat.auto's — its fused
    attention keeps no s × s tensor, so recomputing core attention frees almost nothing (Llama-3-8B at s = 8192:
    1 MiB of 1.53 GiB)."""
    return "drop-cheap" if policy == "selective" and cfg.arch != "gpt" else policy


def layer_seconds(cfg: ModelConfig, st: Settings) -> dict:
    """Policy -> remat.timemodel.roofline.LayerTimes of one layer of ``cfg`` (t = cfg.tp, SP as set) on st.gpu, for
    none, selective and full (``runtime_mode``)."""
    return {p: predict(cfg, st.gpu, runtime_mode(cfg, p), cfg.tp, st.sp) for p in korthikanti.RECOMPUTE}


def policy_costs(stored: dict[str, int], times: dict, recompute_flops: dict[str, int], tensors: int,
                 st: Settings, transients: dict[str, int] | None = None) -> dict[str, dict]:
    """Per policy in ``st.policies``, one layer and one micro-batch: stored / transient / host bytes, seconds,
    recompute FLOPs. stored: bytes kept under none / selective / full; times: mode -> LayerTimes (the
    roofline's forward, backward and recompute seconds); recompute_flops: FLOPs re-run by selective and full;
    tensors: how many tensors the layer saves (offload's per-copy latency). Offload keeps nothing on the
    device, its time is none's + the transfer the layer's compute does not hide (remat.formulas.offload), and
    while a layer's backward runs it holds the activations twice (the current layer and the prefetched one).
    A calibration (``st.calibration``: seconds per policy) replaces the model's times; ``transients`` (policy ->
    bytes) replaces none − stored where it was measured (op-level selective)."""
    none = times["none"]
    exposed = offload_formulas.exposed_offload_s(stored["none"], tensors, none.forward_s, none.backward_s,
                                                 st.gpu.link)
    out = {"none": dict(stored=stored["none"], transient=0, time=none.combined_s, flops=0, host=0)}
    for mode in ("selective", "full"):
        out[mode] = dict(stored=stored[mode], transient=(transients or {}).get(mode, stored["none"] - stored[mode]),
                         time=times[mode].combined_s, flops=recompute_flops[mode], host=0)
    out["offload"] = dict(stored=0, transient=2 * stored["none"], time=none.combined_s + exposed, flops=0,
                          host=stored["none"], exposed=exposed)
    for policy, seconds in (st.calibration or {}).items():
        if policy in out:
            out[policy]["time"] = seconds
    return {p: out[p] for p in st.policies}


def sharded_state(params: int, st: Settings) -> dict[str, int]:
    """Bytes of ``params`` parameters' weights, gradients and optimizer state on one GPU: ZeRO stage 1 shards
    the optimizer state over dp, stage 2 also the gradients, stage 3 also the weights (Rajbhandari et al.)."""
    shard = lambda stage: st.dp if st.zero >= stage else 1
    return {"weights": -(-params * st.weight_bytes // shard(3)),
            "gradients": -(-params * st.grad_bytes // shard(2)),
            "optimizer": -(-params * st.optimizer_bytes // shard(1))}
