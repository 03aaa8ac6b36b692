"""``make_problem``: a model config and the planner's flags (GPU preset and overrides, budgets, SP, DP/ZeRO, bytes
per parameter, the policies offered, ``calibrate``) -> the planning ``Problem`` of ``remat.planner.costs``.
"""

from __future__ import annotations

import dataclasses

from remat.formulas.torch_gpt import itemsize
from remat.models.presets import ModelConfig
from remat.planner import costs
from remat.planner.calibrate import layer_seconds
from remat.planner.problem import POLICIES, Problem, check_policies
from remat.planner.regime import DEFAULT, Regime, resolve
from remat.timemodel.gpus import gpu


def make_problem(cfg: ModelConfig, gpu_name: str = "a100-80gb", gpu_overrides: dict | None = None,
                 memory: int | None = None, host_memory: int | None = None, reserve: int | None = None,
                 sp: bool = False, dp: int = 1, zero: int = 0, weight_bytes: int | None = None,
                 grad_bytes: int | None = None, optimizer_bytes: int | None = None, policies=POLICIES,
                 calibrate: bool = False, regime: Regime | str = DEFAULT) -> Problem:
    """The planning problem of ``cfg`` on one GPU (bytes: int; None = the GPU preset's memory / host memory;
    reserve None = costs.DEFAULT_RESERVE). ``calibrate`` measures per-layer seconds on this machine. ``regime``
    (remat.planner.regime: a Regime, or a name resolved for cfg.dtype with the three bytes per parameter as
    overrides) sets the model state's bytes per parameter and how long gradients live.
    Raises UsageError naming the field for bad input."""
    return costs.build_problem(cfg, make_settings(
        cfg, gpu_name, gpu_overrides, memory, host_memory, reserve, sp, dp, zero, weight_bytes, grad_bytes,
        optimizer_bytes, policies, calibrate, regime))


def make_settings(cfg: ModelConfig, gpu_name: str = "a100-80gb", gpu_overrides: dict | None = None,
                  memory: int | None = None, host_memory: int | None = None, reserve: int | None = None,
                  sp: bool = False, dp: int = 1, zero: int = 0, weight_bytes: int | None = None,
                  grad_bytes: int | None = None, optimizer_bytes: int | None = None, policies=POLICIES,
                  calibrate: bool = False, regime: Regime | str = DEFAULT) -> costs.Settings:
    """The ``costs.Settings`` of ``make_problem``'s arguments, checked against ``cfg``."""
    device = gpu(gpu_name, **(gpu_overrides or {}))
    policies = check_policies(policies, "--policies")
    if isinstance(regime, str):
        regime = resolve(regime, itemsize(cfg.dtype), weight_bytes, grad_bytes, optimizer_bytes)
    settings = costs.Settings(
        gpu=device, budget_bytes=device.memory_bytes if memory is None else memory,
        host_limit_bytes=device.host_memory_bytes if host_memory is None else host_memory, sp=sp, dp=dp,
        zero=zero, reserve_bytes=costs.DEFAULT_RESERVE if reserve is None else reserve, policies=tuple(policies),
        regime=regime)
    costs.check(cfg, settings)                  # before a calibration spends seconds
    if calibrate:
        settings = dataclasses.replace(settings, calibration=layer_seconds(cfg, policies))
    return settings
