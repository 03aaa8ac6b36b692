"""``remat plan --calibrate``: per-layer seconds of each policy measured on this machine.

One layer of the model (``remat.models.transformer.build_model`` with L = 1) under each policy
(``remat.policies.apply_plan``, applied per visit) runs forward + backward on a random input [s, b, h] that
requires grad, timed by the one timing protocol (``remat.measure.timing.time_steps``: interleaved rounds,
median of the pooled samples). The result — seconds per layer per micro-batch, recompute and (on a CPU:
simulated) offload copies included — replaces the roofline model's per-layer times in ``remat.planner.costs``.
Tensor parallelism is not simulated: t must be 1.
"""

from __future__ import annotations

import dataclasses

import torch

from remat.device import default_device, resolve_device
from remat.errors import UsageError
from remat.measure.timing import time_steps
from remat.models.presets import ModelConfig
from remat.models.transformer import build_model
from remat.policies import apply_plan


def layer_seconds(cfg: ModelConfig, policies, device: str | None = None, repeats: int = 5, warmup: int = 2,
                  seed: int = 0, rounds: int = 3, threads: int | None = 1) -> dict[str, float]:
    """policy -> median seconds of one layer's forward + backward (one micro-batch) on ``device``
    (``remat.device.default_device()`` when None): ``rounds`` interleaved rounds of ``warmup`` untimed and
    ``repeats`` timed steps per policy (``time_steps``; a busy machine then slows every policy alike). On a
    CPU the timing runs on ``threads`` intra-op threads (default 1: small layers on a shared machine
    otherwise spend their time waiting for the thread pool; None keeps torch's setting).
    Raises UsageError("--tp") for t > 1, UsageError("device") for an unknown or unavailable device."""
    if cfg.tp != 1:
        raise UsageError("--tp", "--calibrate measures one unsharded layer; use --tp 1")
    device = str(resolve_device(device or default_device()))
    torch.manual_seed(seed)
    model = build_model(dataclasses.replace(cfg, layers=1, pp=1, interleave=1), device)
    layer = model.layers[0]
    dtype = next(model.parameters()).dtype
    x = torch.randn(cfg.seq, cfg.micro_batch, cfg.hidden, device=device, dtype=dtype, requires_grad=True)

    def step():
        x.grad = None
        model.zero_grad(set_to_none=True)
        layer(x).float().square().mean().backward()

    timings = time_steps({p: step for p in dict.fromkeys(policies)}, device, rounds=rounds, repeats=repeats,
                         warmup=warmup, setup=lambda policy: apply_plan(model, [policy]), threads=threads)
    return {p: t.median_s for p, t in timings.items()}
