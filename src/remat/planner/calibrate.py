"""``remat plan --calibrate``: per-layer seconds of each policy measured on this machine.

One layer of the model (``remat.models.transformer.build_model`` with L = 1) under each policy
(``remat.policies.apply_plan``) runs forward + backward on a random input [s, b, h] that requires grad;
``remat.measure.timing.time_step`` takes the median of ≥ 5 timed repeats after a warm-up. The result —
seconds per layer per micro-batch, recompute and (on a CPU: simulated) offload copies included — replaces
the FLOP model's per-layer times in ``remat.planner.costs``. Tensor parallelism is not simulated: t must be 1.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from remat.errors import UsageError
from remat.models.presets import ModelConfig


def layer_seconds(cfg: ModelConfig, policies, device: str | None = None, repeats: int = 5, warmup: int = 2,
                  seed: int = 0, rounds: int = 3, threads: int | None = 1) -> dict[str, float]:
    """policy -> median seconds of one layer's forward + backward (one micro-batch) on ``device``
    ("cuda" when available, else "cpu"): ``rounds`` interleaved rounds of ``repeats`` timed steps per
    policy, the median of all samples (a busy machine then slows every policy alike). On a CPU the timing
    runs on ``threads`` intra-op threads (default 1: small layers on a shared machine otherwise spend their
    time waiting for the thread pool; None keeps torch's setting). Raises UsageError("--tp") for t > 1."""
    import torch

    from remat.measure.timing import intra_op_threads, time_step
    from remat.models.transformer import build_model
    from remat.policies import apply_plan

    if cfg.tp != 1:
        raise UsageError("--tp", "--calibrate measures one unsharded layer; use --tp 1")
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(seed)
    model = build_model(dataclasses.replace(cfg, layers=1, pp=1, interleave=1), device)
    layer = model.layers[0]
    dtype = next(model.parameters()).dtype
    x = torch.randn(cfg.seq, cfg.micro_batch, cfg.hidden, device=device, dtype=dtype, requires_grad=True)
    policies = tuple(policies)
    samples: dict[str, list[float]] = {p: [] for p in policies}

    def step():
        x.grad = None
        model.zero_grad(set_to_none=True)
        layer(x).float().square().mean().backward()

    with intra_op_threads(threads if device == "cpu" else None):
        for r in range(rounds):
            for policy in policies[r % len(policies):] + policies[:r % len(policies)]:
                apply_plan(model, [policy])
                samples[policy] += time_step(step, device, warmup=warmup, repeats=repeats).samples_s
    return {p: float(np.median(s)) for p, s in samples.items()}
